"""Issue 31: the fullgraph report has a time budget of its own.

A fork's mixture-of-experts Hiera (st-moe-pytorch) took dynamo 119 s to explain on the
2-core machine, twice (the rewritten side, then the original's), which alone put that
repo past the corpus's 180 s.  The report is not part of the verdict: a trace past
GRAPH_SECONDS stops with "not traced", the original is then not traced either, and once
the reports have taken GRAPH_TOTAL_SECONDS the later models get none.
"""

from __future__ import annotations

import signal
import time

import pytest

torch = pytest.importorskip("torch")

from hiera_rewrite.verify import worker as worker_module  # noqa: E402
from hiera_rewrite.verify.budget import Budget  # noqa: E402
from hiera_rewrite.verify.report import graph_line  # noqa: E402


class _Slow(torch.nn.Module):
    """A forward whose trace takes about 4 s (each sleep a graph break dynamo runs)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        for _ in range(200):
            time.sleep(0.02)
            x = self.lin(x)
        return x


def _worker(seconds: float):
    w = worker_module.Worker.__new__(worker_module.Worker)
    w.spec = {"traced": {}, "sides": {"new": "/nonexistent-new", "orig": "/nonexistent-orig"}}
    w.graph_budget = Budget(seconds)
    return w


def test_a_slow_trace_stops_at_the_report_budget():
    traced = []
    w = _worker(0.5)
    first_break = w._first_break
    w._first_break = lambda model, *a: traced.append(model) or first_break(model, *a)
    rewritten, original = _Slow(), _Slow()
    import torch._dynamo  # noqa: F401,PLC0415 -- imported before the clock starts (seconds on a loaded machine)

    start = time.time()
    graph = w.graph_report(rewritten, original, torch.randn(2, 4), {}, torch)
    assert time.time() - start < 3.5  # one trace, cut at 0.5 s (the forward alone sleeps 4 s)
    assert traced == [rewritten]  # the original is not traced after the rewritten's was cut
    assert graph_line(graph) == "torch.compile(fullgraph=True): not traced: past the report's 0.5 s"


def test_report_lines_for_untraced_and_skipped_models():
    assert graph_line({"new": None}) == "torch.compile(fullgraph=True): compiles fullgraph"
    assert graph_line({"skipped": "the reports of the models above took 41 s"}) == (
        "torch.compile(fullgraph=True): not traced (the reports of the models above took 41 s)"
    )
    assert worker_module.GRAPH_SECONDS < worker_module.GRAPH_TOTAL_SECONDS <= 60


def test_once_a_trace_is_cut_the_later_models_get_no_trace():
    # a repo's models share their blocks: after one trace ran past its budget, the next
    # would most likely be cut too, after as long (a real fork: 20 s a model, twice)
    traced = []
    w = _worker(0.5)
    w.graph_seconds, w.graph_cut = 0.0, None
    w.progress = lambda *a: None
    first_break = w._first_break
    w._first_break = lambda model, *a: traced.append(model) or first_break(model, *a)
    import torch._dynamo  # noqa: F401,PLC0415 -- imported before the clock starts

    slow, fast = _Slow(), torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    first = w.graph_entry("repo.models:slow_tiny", slow, _Slow(), x, {}, torch)
    assert graph_line(first) == "torch.compile(fullgraph=True): not traced: past the report's 0.5 s"
    second = w.graph_entry("repo.models:plain_tiny", fast, torch.nn.Linear(4, 4), x, {}, torch)
    assert traced == [slow]  # the second model is not traced at all
    assert graph_line(second) == (
        "torch.compile(fullgraph=True): not traced (the trace of repo.models:slow_tiny ran past the report's 0.5 s)"
    )


def test_a_trace_within_its_budget_leaves_the_next_model_traced():
    w = _worker(30.0)
    w.graph_seconds, w.graph_cut = 0.0, None
    w.progress = lambda *a: None
    x = torch.randn(2, 4)
    first = w.graph_entry("a", torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), x, {}, torch)
    second = w.graph_entry("b", torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), x, {}, torch)
    assert graph_line(first) == graph_line(second) == "torch.compile(fullgraph=True): compiles fullgraph"
    assert w.graph_cut is None and w.graph_seconds > 0


class _SpinsWhenCollected:
    """A finalizer that runs past the budget: the alarm lands in it, where Python prints
    the exception and drops it (CI, stop 49: a weakref callback of a GC in dynamo's trace
    took the alarm, and the trace ran its whole 4 s)."""

    def __init__(self, until: float):
        self.until = until

    def __del__(self):
        while time.time() < self.until:
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_alarm_dropped_in_a_finalizer_is_raised_again():
    budget = Budget(0.2)
    start = time.time()
    with pytest.raises(worker_module.OverBudget):
        with budget():
            _SpinsWhenCollected(start + 0.6)  # collected at once: its __del__ takes the first alarm
            time.sleep(4)
    assert time.time() - start < 2.0
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no alarm after the case
    with budget():  # a later case within its budget is not cut
        time.sleep(0.1)
