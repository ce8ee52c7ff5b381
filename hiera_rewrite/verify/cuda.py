"""``--verify-cuda``: time a training step of the original and the rewritten model.

After parity, the user sees the speedup on their own fork: one training step (forward, the
model's loss when its output starts with a scalar, else a sum of its outputs; backward) of
each side, in bf16 on CUDA, both models alive side by side in one process. The sides are
timed in interleaved rounds (A B, B A, A B, ...) with the same seeds, so that a drift of the
GPU during the run lands on both alike; each round's ratio is the ratio of the two sides'
median step in that round, and the verdict is the median of those ratios.

``--bench-modes eager,compile,ro`` times each side so in each mode (``ro``:
``torch.compile(mode="reduce-overhead")``, CUDA graphs), compiled and warmed up before the
timed rounds, the compile time reported apart; where a side cannot run a mode (it raises, or
inductor skips CUDA graphs for it: the original's boolean-mask indexing) it is timed in its
next mode that runs, and the report says which and why (:func:`time_modes`).

Imports torch only when called (the tool stays torch-free at install time).
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


def quartiles(values: Sequence[float]) -> Tuple[float, float, float]:
    """(first quartile, median, third quartile), linear interpolation between order statistics."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)

    def at(q: float) -> float:
        pos = q * (len(ordered) - 1)
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return at(0.25), at(0.5), at(0.75)


def round_order(names: Sequence[str], rounds: int) -> List[List[str]]:
    """The order the sides run in each round: forward, then reversed, alternately."""
    return [list(names) if r % 2 == 0 else list(reversed(names)) for r in range(rounds)]


def summarize(step_ms: Dict[str, List[List[float]]], baseline: str) -> Dict[str, Any]:
    """Per side: median, IQR and min over every timed step; per round: each side's median step
    over the baseline's; the ratio is the median of the per-round ratios."""
    sides: Dict[str, Any] = {}
    for name, rounds in step_ms.items():
        flat = [t for r in rounds for t in r]
        q1, med, q3 = quartiles(flat)
        sides[name] = {"median_ms": med, "iqr_ms": q3 - q1, "min_ms": min(flat), "steps": len(flat)}
    ratios: Dict[str, Any] = {}
    for name, rounds in step_ms.items():
        if name == baseline:
            continue
        per_round = [
            statistics.median(mine) / statistics.median(base) for mine, base in zip(rounds, step_ms[baseline])
        ]
        q1, med, q3 = quartiles(per_round)
        ratios[name] = {"median": med, "q1": q1, "q3": q3, "per_round": per_round}
    return {"sides": sides, "ratios": ratios, "baseline": baseline}


def _loss(out: Any, torch) -> Any:
    """The model's loss when its output starts with a scalar (MAE's forward returns it first),
    else the sum of its floating outputs that require grad; None where there are none.

    Walked with a list, not a recursive closure: a closure that calls itself is a reference
    cycle, and it would hold the forward's outputs until the garbage collector ran.  Under
    reduce-overhead that made CUDA graphs record with an output alive and replay with it dead
    (or the reverse): "graph recording observed an input tensor deallocate ... that did not
    occur during replay" inside verify's worker (issue 22)."""
    leaves: List[Any] = []
    todo = [out]
    while todo:
        value = todo.pop()
        if isinstance(value, (tuple, list)):
            todo.extend(reversed(value))
        elif isinstance(value, dict):
            todo.extend(value[k] for k in sorted(value, key=str, reverse=True))
        elif torch.is_tensor(value) and value.is_floating_point() and value.requires_grad:
            leaves.append(value)
    if not leaves:
        return None
    if leaves[0].dim() == 0:
        return leaves[0]
    return sum(leaf.float().sum() for leaf in leaves)


def time_training_steps(
    models: Dict[str, Any],
    make_input: Callable[[], Any],
    *,
    baseline: str,
    forward_kwargs: Dict[str, Any] | None = None,
    rounds: int = 8,
    steps: int = 5,
    warmup: int = 3,
    torch=None,
) -> Dict[str, Any]:
    """Time forward + loss + backward of each model in ``models`` (already on their device and
    dtype) on the same input, interleaved; returns :func:`summarize`'s dict plus the device."""
    if torch is None:
        import torch  # noqa: PLC0415 -- only when verifying
    forward_kwargs = forward_kwargs or {}
    first = next(iter(models.values()))
    device = next(first.parameters()).device
    cuda = device.type == "cuda"
    x = make_input()
    steps_of = {name: _step_fn(model, model, x, forward_kwargs, torch, cuda) for name, model in models.items()}

    for name, model in models.items():
        model.train()
        for i in range(warmup):
            steps_of[name](10_000 + i)
    times: Dict[str, List[List[float]]] = {name: [] for name in models}
    for r, order in enumerate(round_order(list(models), rounds)):
        for name in order:
            times[name].append([steps_of[name](1000 * r + s) for s in range(steps)])
    result = summarize(times, baseline)
    result["device"] = torch.cuda.get_device_name(device) if cuda else str(device)
    result["rounds"], result["steps_per_round"] = rounds, steps
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return result


def format_timing(label: str, result: Dict[str, Any], dtype: str, shape: Sequence[int]) -> List[str]:
    base = result["baseline"]
    lines = [f"training step of {label}, {dtype} on {result['device']}, input {tuple(shape)}, "
             f"{result['rounds']} interleaved rounds x {result['steps_per_round']} steps:"]
    for name, s in result["sides"].items():
        lines.append(f"  {name:<10} median {s['median_ms']:8.2f} ms  IQR {s['iqr_ms']:6.2f} ms  min {s['min_ms']:8.2f} ms")
    for name, r in result["ratios"].items():
        lines.append(
            f"  {name}/{base}: {r['median']:.3f}x (per-round ratios {r['q1']:.3f}-{r['q3']:.3f} IQR), "
            f"{1.0 / r['median']:.2f}x faster" if r["median"] < 1 else
            f"  {name}/{base}: {r['median']:.3f}x (per-round ratios {r['q1']:.3f}-{r['q3']:.3f} IQR), not faster"
        )
    return lines


# -- --bench-modes: eager, torch.compile, torch.compile(mode="reduce-overhead") ----------------

#: the modes ``--bench-modes`` takes, and how the report names them
BENCH_MODES = {"eager": "eager", "compile": "compile", "ro": "reduce-overhead"}
#: a side that cannot run a mode is timed in the next of these that it runs
FALLBACKS = {"ro": ("ro", "compile", "eager"), "compile": ("compile", "eager"), "eager": ("eager",)}
#: warm-up steps before the timed rounds: compiling (and, for ro, recording the CUDA graphs)
#: happens there, never in a timed step
WARMUP = {"eager": 3, "compile": 3, "ro": 6}


def parse_bench_modes(text: str) -> List[str]:
    """``--bench-modes``' comma list (``reduce-overhead`` is taken for ``ro``), in the order
    given, each once; a ValueError naming the valid modes for anything else."""
    valid = ", ".join(BENCH_MODES)
    modes: List[str] = []
    for part in text.split(","):
        mode = part.strip().lower()
        mode = "ro" if mode == "reduce-overhead" else mode
        if not mode:
            continue
        if mode not in BENCH_MODES:
            raise ValueError(f"unknown mode {part.strip()!r}: expected a comma list of {valid} (ro = reduce-overhead)")
        if mode not in modes:
            modes.append(mode)
    if not modes:
        raise ValueError(f"no mode given: expected a comma list of {valid} (ro = reduce-overhead)")
    return modes


class Unusable(Exception):
    """A side cannot run a mode: it raised while compiling or warming up (or in a timed step),
    or, under reduce-overhead, inductor skipped CUDA graphs for it."""


class Prepared:
    """One side compiled (or not) in one mode and warmed up: ``step(seed)`` runs and times one
    training step in milliseconds."""

    def __init__(self, mode: str, step: Callable[[int], float], warmup_s: float, warmup_steps: int, graph_breaks: Optional[int] = None) -> None:
        self.mode, self.step, self.warmup_s, self.warmup_steps, self.graph_breaks = mode, step, warmup_s, warmup_steps, graph_breaks


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


class _SkipLog(logging.Handler):
    """Collects inductor's "skipping cudagraphs due to ..." messages.  They go to an artifact
    logger that does not propagate unless TORCH_LOGS enables it, so the handler is put on every
    ``torch._inductor`` logger there is (and on ``torch._inductor`` itself)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: List[str] = []
        self.loggers: List[logging.Logger] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001
            return
        if "skipping cudagraphs" in message and message not in self.messages:
            self.messages.append(message)

    def __enter__(self) -> "_SkipLog":
        names = [n for n in list(logging.Logger.manager.loggerDict) if n == "torch._inductor" or n.startswith("torch._inductor.")]
        for name in names or ["torch._inductor"]:
            logger = logging.getLogger(name)
            logger.addHandler(self)
            self.loggers.append(logger)
        return self

    def __exit__(self, *exc) -> None:
        for logger in self.loggers:
            logger.removeHandler(self)


def _step_fn(call: Callable[..., Any], model, x, forward_kwargs: Dict[str, Any], torch, cuda: bool, mark_step: Optional[Callable[[], None]] = None) -> Callable[[int], float]:
    """One training step of ``call`` (the model, or its compiled wrapper): seeded, gradients
    set to None first, forward, :func:`_loss`, backward; timed with CUDA events (on CPU, the
    wall clock).  ``mark_step`` (reduce-overhead) opens a new CUDA-graph step first."""

    def step(seed: int) -> float:
        torch.manual_seed(seed)  # the same random masks on both sides
        model.zero_grad(set_to_none=True)
        if mark_step is not None:
            mark_step()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        loss = _loss(call(x, **forward_kwargs), torch)
        if loss is not None:
            loss.backward()
        if cuda:
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        return (time.perf_counter() - t0) * 1000.0

    return step


def prepare_side(model, mode: str, x, forward_kwargs: Dict[str, Any], *, torch, warmup: Optional[int] = None) -> Prepared:
    """``model`` in ``mode`` (eager; ``torch.compile(model, dynamic=False)``; with
    ``mode="reduce-overhead"``), warmed up (compiled, CUDA graphs recorded) outside the timed
    rounds.  Raises :class:`Unusable` where it raises, or where inductor skipped CUDA graphs
    under reduce-overhead (``counters["inductor"]["cudagraph_skips"]`` grew: the step would
    run, but not as CUDA graphs, and timing it as reduce-overhead would be a lie)."""
    cuda = next(model.parameters()).device.type == "cuda"
    warmup = WARMUP[mode] if warmup is None else warmup
    model.train()
    counters = None
    if mode == "eager":
        call, mark_step = model, None
    else:
        from torch._dynamo.utils import counters  # noqa: PLC0415

        if mode == "ro":
            try:  # its skip logger exists before _SkipLog looks for the loggers
                import torch._inductor.cudagraph_utils  # noqa: F401, PLC0415
            except Exception:  # noqa: BLE001 -- another torch: the counter still tells
                pass

        call = torch.compile(model, mode="reduce-overhead" if mode == "ro" else None, dynamic=False)
        mark_step = getattr(torch.compiler, "cudagraph_mark_step_begin", None) if mode == "ro" else None
    step = _step_fn(call, model, x, forward_kwargs, torch, cuda, mark_step)
    skips0 = int(counters["inductor"].get("cudagraph_skips", 0)) if counters is not None else 0
    breaks0 = int(sum(counters["graph_break"].values())) if counters is not None else 0
    t0 = time.perf_counter()
    with _SkipLog() as skipped:
        try:
            for i in range(warmup):
                step(10_000 + i)
            if cuda:
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 -- the user's model under compile may raise anything
            model.zero_grad(set_to_none=True)
            raise Unusable(f"raised in warm-up: {_one_line(exc)}") from exc
    warmup_s = time.perf_counter() - t0
    model.zero_grad(set_to_none=True)
    if counters is None:
        return Prepared(mode, step, warmup_s, warmup)
    skips = int(counters["inductor"].get("cudagraph_skips", 0)) - skips0
    breaks = int(sum(counters["graph_break"].values())) - breaks0
    if mode == "ro" and (skips > 0 or skipped.messages):
        if skipped.messages:
            raise Unusable(f"inductor skipped CUDA graphs: {skipped.messages[0].removeprefix('skipping cudagraphs due to ').strip()[:200]}")
        raise Unusable(f"inductor skipped CUDA graphs for {skips} graph{'s' if skips != 1 else ''} (its cudagraph_skips counter)")
    return Prepared(mode, step, warmup_s, warmup, breaks)


class _Failed(Exception):
    def __init__(self, name: str, exc: BaseException) -> None:
        super().__init__(name)
        self.name, self.exc = name, exc


def time_modes(
    models: Dict[str, Any],
    make_input: Callable[[], Any],
    *,
    baseline: str,
    modes: Sequence[str],
    forward_kwargs: Dict[str, Any] | None = None,
    rounds: int = 8,
    steps: int = 5,
    torch=None,
    prepare: Callable[..., Prepared] | None = None,
) -> Dict[str, Any]:
    """``--bench-modes``: for each mode, both sides prepared (:func:`prepare_side`: compiled
    and warmed up before any timed step) and timed in interleaved rounds as
    :func:`time_training_steps` does.  A side that cannot run the mode is timed in the next
    mode of :data:`FALLBACKS` that it runs, and the result says which and why; a side that
    raises in a timed step is so marked and the mode's rounds start again.  Each side is
    prepared once per mode it runs in (the original's compile serves the compile line and
    the reduce-overhead fallback)."""
    if torch is None:
        import torch  # noqa: PLC0415 -- only when verifying
    prepare = prepare or prepare_side
    forward_kwargs = forward_kwargs or {}
    first = next(iter(models.values()))
    device = next(first.parameters()).device
    x = make_input()
    ready: Dict[Tuple[str, str], Any] = {}  # (side, mode) -> Prepared or Unusable

    def get(name: str, mode: str):
        if (name, mode) not in ready:
            try:
                ready[(name, mode)] = prepare(models[name], mode, x, forward_kwargs, torch=torch)
            except Unusable as exc:
                ready[(name, mode)] = exc
        return ready[(name, mode)]

    def choose(mode: str):
        chosen: Dict[str, Prepared] = {}
        not_run: Dict[str, List[List[str]]] = {name: [] for name in models}
        for name in models:
            for m in FALLBACKS[mode]:
                got = get(name, m)
                if isinstance(got, Unusable):
                    not_run[name].append([m, str(got)])
                    continue
                chosen[name] = got
                break
        return chosen, not_run

    out: List[Dict[str, Any]] = []
    for mode in modes:
        if mode != "eager" and prepare is prepare_side:
            # each compiled mode from a clean dynamo: inductor counts a skipped CUDA graph only
            # when it compiles.  What an earlier mode prepared is prepared again (compiled and
            # warmed up) if this one falls back to it.
            torch._dynamo.reset()
            for key in [k for k in ready if k[1] != "eager"]:
                del ready[key]
        while True:
            chosen, not_run = choose(mode)
            if len(chosen) < len(models):
                out.append({"mode": mode, "not_run": not_run, "error": "; ".join(
                    f"{name}: " + "; ".join(f"{BENCH_MODES[m]}: {why}" for m, why in not_run[name])
                    for name in models if name not in chosen)})
                break
            times: Dict[str, List[List[float]]] = {name: [] for name in models}
            try:
                for r, order in enumerate(round_order(list(models), rounds)):
                    for name in order:
                        try:
                            times[name].append([chosen[name].step(1000 * r + s) for s in range(steps)])
                        except Exception as exc:  # noqa: BLE001
                            raise _Failed(name, exc) from exc
            except _Failed as failed:
                models[failed.name].zero_grad(set_to_none=True)
                ready[(failed.name, chosen[failed.name].mode)] = Unusable(f"raised in a timed step: {_one_line(failed.exc)}")
                continue
            result = summarize(times, baseline)
            result.update(
                mode=mode,
                ran={name: p.mode for name, p in chosen.items()},
                not_run={name: v for name, v in not_run.items() if v},
                warmup={name: {"seconds": p.warmup_s, "steps": p.warmup_steps, "graph_breaks": p.graph_breaks} for name, p in chosen.items()},
            )
            out.append(result)
            break
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "rounds": rounds,
        "steps_per_round": steps,
        "baseline": baseline,
        "modes": out,
    }


def _side(name: str, mode: str, result: Dict[str, Any]) -> str:
    """``rewritten``, or ``original (compile, reduce-overhead not capturable: why)`` where the
    side ran another mode than the line's."""
    ran = result["ran"][name]
    if ran == mode:
        return name
    whys = "; ".join(f"{BENCH_MODES[m]} not capturable: {why}" if m == "ro" else f"{BENCH_MODES[m]} not run: {why}" for m, why in result["not_run"].get(name, []))
    return f"{name} ({BENCH_MODES[ran]}, {whys})"


def format_modes(label: str, result: Dict[str, Any], dtype: str, shape: Sequence[int]) -> List[str]:
    """The report of :func:`time_modes`: per mode one line (each side's median step, the
    median of the per-round ratios; a side timed in another mode says which and why), each
    side's median, IQR and min, and its compile and warm-up time (not in the step time)."""
    base = result["baseline"]
    lines = [f"training step of {label}, {dtype} on {result['device']}, input {tuple(shape)}, "
             f"{result['rounds']} interleaved rounds x {result['steps_per_round']} steps per mode:"]
    for m in result["modes"]:
        mode = m["mode"]
        if "error" in m:
            lines.append(f"  {BENCH_MODES[mode]}: not timed: {m['error']}")
            continue
        for name, r in m["ratios"].items():
            verdict = f"{1.0 / r['median']:.2f}x faster" if r["median"] < 1 else "not faster"
            lines.append(
                f"  {BENCH_MODES[mode]}: {_side(name, mode, m)} {m['sides'][name]['median_ms']:.2f} ms vs "
                f"{_side(base, mode, m)} {m['sides'][base]['median_ms']:.2f} ms, ratio {r['median']:.3f} "
                f"(per-round {r['q1']:.3f}-{r['q3']:.3f} IQR), {verdict}"
            )
        for name, s in m["sides"].items():
            ran = m["ran"][name]
            line = f"    {name:<10} median {s['median_ms']:8.2f} ms  IQR {s['iqr_ms']:6.2f} ms  min {s['min_ms']:8.2f} ms"
            if ran != mode:
                line += f"  ({BENCH_MODES[ran]})"
            w = m["warmup"][name]
            if ran != "eager":
                line += f"  compile and warm-up {w['seconds']:.1f} s ({w['steps']} steps, not timed)"
                if w.get("graph_breaks"):
                    line += f", {w['graph_breaks']} graph break{'s' if w['graph_breaks'] != 1 else ''}"
            lines.append(line)
    return lines
