"""The arithmetic and the round order of benchmarks/bench.py's interleaved timing
(pure python: no torch, nothing timed)."""

from __future__ import annotations

import importlib.util
import random
import statistics
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_under_test", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's annotations
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_quartiles_match_statistics_inclusive(bench):
    rng = random.Random(15)
    for n in (2, 3, 4, 5, 8, 25):
        values = [rng.uniform(10, 90) for _ in range(n)]
        q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
        s = bench.summarize(values)
        assert s["q1"] == pytest.approx(q1)
        assert s["median"] == pytest.approx(q2)
        assert s["q3"] == pytest.approx(q3)
        assert s["iqr"] == pytest.approx(q3 - q1)
        assert (s["min"], s["max"], s["n"]) == (min(values), max(values), n)


def test_quantile_interpolates_between_ranks(bench):
    assert bench.quantile([4.0, 1.0, 3.0, 2.0], 0.25) == 1.75
    assert bench.quantile([4.0, 1.0, 3.0, 2.0], 0.75) == 3.25
    assert bench.quantile([7.0], 0.25) == 7.0


def test_rounds_run_every_contender_in_turn(bench):
    assert bench.round_schedule(["fair", "rewritten", "optim"], 2) == [
        (0, "fair"), (0, "rewritten"), (0, "optim"),
        (1, "fair"), (1, "rewritten"), (1, "optim"),
    ]


def test_ratio_is_the_median_of_per_round_ratios(bench):
    # per round 0.5, 2.5, 0.5 -> 0.5; the ratio of the medians would be 3 / 4
    ratios = bench.round_ratios({"rewritten": [1.0, 10.0, 3.0], "optim": [2.0, 4.0, 6.0]})
    assert set(ratios) == {"rewritten/optim"}
    assert ratios["rewritten/optim"]["median"] == 0.5
    assert ratios["rewritten/optim"]["q3"] == 1.5


def test_drift_shared_by_a_round_cancels(bench):
    drift = [1.0, 1.3, 0.8, 1.6, 1.1, 2.0]  # the machine's speed, round by round
    times = {
        "fair": [100.0 * d for d in drift],
        "rewritten": [50.0 * d for d in drift],
        "optim": [60.0 * d for d in drift],
    }
    ratios = bench.round_ratios(times)
    assert ratios["rewritten/optim"]["median"] == pytest.approx(50 / 60)
    assert ratios["rewritten/optim"]["iqr"] == pytest.approx(0.0)
    assert ratios["rewritten/fair"]["median"] == pytest.approx(0.5)
    assert ratios["optim/fair"]["median"] == pytest.approx(0.6)


def test_unpaired_rounds_are_refused(bench):
    with pytest.raises(ValueError):
        bench.round_ratios({"rewritten": [1.0, 2.0], "optim": [1.0]})


def _bench_json(path, command, runs, groups):
    import json

    path.write_text(json.dumps(dict(env=dict(command=command, date="d", device="cpu"), runs=runs, groups=groups)))
    return path


def _run(cell, contender, mode, ms):
    return dict(cell=cell, contender=contender, mode=mode, ms=ms, ms_all=[ms], samples_s=1.0)


def test_merge_takes_each_cell_and_mode_from_the_last_file_holding_it(bench, tmp_path, capsys):
    import json

    first = _bench_json(tmp_path / "a.json", "call-1", [
        _run("base", "rewritten", "eager", 50.0), _run("base", "optim", "eager", 60.0),
        _run("tiny", "rewritten", "eager", 40.0), _run("tiny", "optim", "eager", 44.0),
    ], [dict(cell="base", mode="eager", timing="interleaved", ratios={"rewritten/optim": dict(median=0.8)})])
    second = _bench_json(tmp_path / "b.json", "call-2", [
        _run("tiny", "rewritten", "compile", 20.0), _run("tiny", "optim", "compile", 30.0),
        _run("base", "rewritten", "eager", 55.0), _run("base", "optim", "eager", 50.0),
    ], [])
    out = tmp_path / "merged"
    assert bench.main(["--merge", str(first), str(second), "--modes", "eager,compile", "--out", str(out)]) == 0
    merged = json.loads((out / "bench.json").read_text())
    got = {(r["cell"], r["contender"], r["mode"]): r["ms"] for r in merged["runs"]}
    # tiny eager only in the first file, tiny compile only in the second: both kept;
    # base eager in both: the second's rows, and not the first file's group ratios
    assert got == {("tiny", "rewritten", "eager"): 40.0, ("tiny", "optim", "eager"): 44.0,
                   ("tiny", "rewritten", "compile"): 20.0, ("tiny", "optim", "compile"): 30.0,
                   ("base", "rewritten", "eager"): 55.0, ("base", "optim", "eager"): 50.0}
    assert merged["groups"] == []
    assert "| base | eager | sequential (ratio of medians) | 1.100 |" in capsys.readouterr().out
