"""What one ``--verify`` case may use (worker side): memory and time.

A fork's configuration can be far too large for the machine verify runs on (a model
built at its own size in float64, an input at full resolution).  Verification must
never take the machine down, so the worker bounds itself:

* memory: the worker's data segment is capped (``RLIMIT_DATA``, which covers every
  allocation torch makes on the CPU); an allocation past it raises in the case that
  made it (torch's ``can't allocate memory``, Python's ``MemoryError``), the case
  stops, its memory is freed and verification goes on.  Not with ``--verify-cuda``:
  the CUDA driver's address-space reservations are not the CPU's to cap;
* time: each case (a build, choosing the input, one run) has a wall-clock budget; past
  it :class:`OverBudget` is raised in the case, between two Python statements, and
  again every ``REPEAT_SECONDS`` until the case ends: an alarm that lands in a
  finalizer or a weakref callback (a garbage collection inside the case) is printed
  and dropped by Python, and the case would otherwise run on unbounded.

Either way the case is reported "too large to verify here", with the flags that
build it smaller.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator, Optional

DEFAULT_SECONDS = 60.0
_DEFAULT_SHARE = 0.5  # of the machine's memory
_DEFAULT_CAP_GIB = 8.0
REPEAT_SECONDS = 0.1  # after the budget, the alarm again until the case ends


def default_memory_gib() -> float:
    """Half the machine's memory, at most 8 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return _DEFAULT_CAP_GIB
    return round(min(_DEFAULT_CAP_GIB, _DEFAULT_SHARE * total), 1)


class OverBudget(BaseException):
    """A case ran past its time budget.  A BaseException, so that the user's own
    ``except Exception`` around a forward does not swallow it."""


def cap_memory(gib: Optional[float]) -> Optional[str]:
    """Cap this process's data segment at ``gib`` GiB; a note if it cannot be set."""
    if not gib:
        return None
    try:
        import resource  # noqa: PLC0415 -- POSIX only

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        limit = int(gib * 2**30)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ImportError, ValueError, OSError) as exc:
        return f"memory budget not set ({type(exc).__name__}: {exc})"
    return None


def too_large(exc: BaseException, memory_gib: Optional[float], seconds: Optional[float]) -> Optional[str]:
    """Why ``exc`` means the case is over budget, or None."""
    if isinstance(exc, OverBudget):
        return f"ran past the {seconds:g} s time budget of a case"
    text = str(exc)
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text)):
        return f"needs more than the {memory_gib:g} GiB memory budget" if memory_gib else "ran out of memory"
    return None


class Budget:
    """The time budget of one case at a time (``with budget:``; nested: the outer one)."""

    def __init__(self, seconds: Optional[float]) -> None:
        self.seconds = seconds
        self._active = False

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        usable = bool(self.seconds) and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        if self._active or not usable:
            yield
            return

        def alarm(signum, frame):  # noqa: ARG001
            if self._active:  # not once the case's `finally` below has begun
                raise OverBudget(self.seconds)

        previous = signal.signal(signal.SIGALRM, alarm)
        self._active = True
        signal.setitimer(signal.ITIMER_REAL, self.seconds, REPEAT_SECONDS)
        try:
            yield
        finally:
            self._active = False  # first: a plain store, no signal handler runs before it
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
