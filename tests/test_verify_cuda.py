"""--verify-cuda's timing loop: interleaving, seeds, statistics (no timing is asserted here)."""

import pytest

from hiera_rewrite.verify.cuda import format_timing, quartiles, round_order, summarize, time_training_steps

torch = pytest.importorskip("torch")


def test_quartiles_interpolate_like_numpy():
    values = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0]
    numpy = pytest.importorskip("numpy")
    assert quartiles(values) == pytest.approx(tuple(numpy.percentile(values, [25, 50, 75])))
    assert quartiles([7.0]) == (7.0, 7.0, 7.0)


def test_rounds_alternate_their_order():
    assert round_order(["orig", "new"], 4) == [["orig", "new"], ["new", "orig"], ["orig", "new"], ["new", "orig"]]


def test_ratio_is_the_median_of_per_round_ratios():
    # a drift that doubles every time in round 2 must not move the ratio: each round compares
    # the sides within itself
    steps = {"orig": [[10.0, 10.0], [20.0, 20.0], [10.0, 12.0]], "new": [[5.0, 5.0], [10.0, 10.0], [6.0, 5.0]]}
    result = summarize(steps, "orig")
    assert result["ratios"]["new"]["per_round"] == pytest.approx([0.5, 0.5, 5.5 / 11.0])
    assert result["ratios"]["new"]["median"] == pytest.approx(0.5)
    assert result["sides"]["orig"]["median_ms"] == pytest.approx(11.0)
    assert result["sides"]["new"]["min_ms"] == 5.0
    assert "orig" not in result["ratios"]


class _Logged(torch.nn.Module):
    """Records the order of its calls and the first random number of each step."""

    def __init__(self, name, log, scalar_loss):
        super().__init__()
        self.name, self.log, self.scalar_loss = name, log, scalar_loss
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        self.log.append((self.name, float(torch.rand(()))))
        out = x * self.w
        return (out.sum(), out) if self.scalar_loss else {"out": out}


@pytest.mark.parametrize("scalar_loss", [True, False])
def test_every_step_interleaved_with_the_same_seeds(scalar_loss):
    log = []
    models = {"orig": _Logged("orig", log, scalar_loss), "new": _Logged("new", log, scalar_loss)}
    result = time_training_steps(models, lambda: torch.ones(2, 3), baseline="orig", rounds=3, steps=2, warmup=1)
    names = [n for n, _ in log]
    assert names == ["orig", "new"] + ["orig"] * 2 + ["new"] * 2 + ["new"] * 2 + ["orig"] * 2 + ["orig"] * 2 + ["new"] * 2
    draws = {}
    for name, draw in log[2:]:
        draws.setdefault(name, []).append(draw)
    assert sorted(draws["orig"]) == sorted(draws["new"])  # the same masks on both sides
    assert len(set(draws["orig"])) == len(draws["orig"])  # and a fresh one every step
    assert result["sides"]["orig"]["steps"] == 6 and result["rounds"] == 3
    assert models["orig"].w.grad is None  # gradients cleared after timing
    lines = format_timing("Tiny", result, "bfloat16", (2, 3))
    assert lines[0].startswith("training step of Tiny, bfloat16 on cpu, input (2, 3), 3 interleaved rounds x 2 steps")
    assert any(line.strip().startswith("new/orig: ") for line in lines)


def test_backward_runs_through_the_loss():
    seen = []

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.w.register_hook(lambda g: seen.append(g.clone()) or g)

        def forward(self, x):
            return x * self.w

    time_training_steps({"a": Probe(), "b": Probe()}, lambda: torch.ones(2, 3), baseline="a", rounds=2, steps=1, warmup=0)
    assert len(seen) == 4 and all(torch.equal(g, torch.full((3,), 2.0)) for g in seen)


def test_timed_at_the_models_own_size_or_the_bench_size():
    """The timed input (CPU-side): --bench-size, else the size the model is built for (a
    Hiera's grid, or the size it states), not the small input verify shrank it to."""
    from hiera_rewrite.verify.inputs import Inputs

    hiera = pytest.importorskip("hiera")
    inputs = Inputs()
    model = hiera.Hiera(embed_dim=8, num_heads=1, stages=(1, 1, 1, 1))  # built for 224x224
    verified = [2, 3, 64, 64]
    assert inputs.own_size(model, {}, torch) == [224, 224]
    assert inputs.bench_shape(model, {}, {"batch": 16}, verified, torch) == [16, 3, 224, 224]
    assert inputs.bench_shape(model, {}, {"batch": 4, "size": [96, 128]}, verified, torch) == [4, 3, 96, 128]

    class Stated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.img_size = 96  # one size per dim of its first convolution
            self.embed = torch.nn.Conv2d(1, 4, 3)

    # verified at --input-shape 2,1,32,32: timed at its own 96x96
    assert inputs.bench_shape(Stated(), {}, {"batch": 16}, [2, 1, 32, 32], torch) == [16, 1, 96, 96]
    # no size stated (verified on a token sequence): timed at the verified size
    assert inputs.own_size(torch.nn.Linear(8, 8), {}, torch) is None
    assert inputs.bench_shape(torch.nn.Linear(8, 8), {}, {"batch": 16}, [2, 10, 8], torch) == [16, 10, 8]


# -- through the CLI ------------------------------------------------------------------------


def test_verify_cuda_times_both_sides_or_says_why_not(tmp_path, capsys):
    """On the lent GPU: parity in float32/bfloat16, then both timings and the ratio; on a CPU
    machine the same command still verifies in float64 and says the timing was skipped."""
    pytest.importorskip("timm")
    import shutil

    from hiera_rewrite import cli
    from hiera_rewrite.export import upstream_dir

    dest = tmp_path / "src" / "hiera"
    shutil.copytree(upstream_dir(), dest, ignore=shutil.ignore_patterns("__pycache__"))
    code = cli.main(["--verify", "--verify-cuda", "--bench-batch", "8", "--check", str(dest)])
    out = capsys.readouterr().out
    print(out)
    assert code == cli.EXIT_CHANGED, out
    assert "verify: PASSED" in out
    if torch.cuda.is_available():
        assert "bfloat16 cuda" in out and "float32 cuda" in out
        timed = [line for line in out.splitlines() if line.startswith("training step of ")]
        assert timed and "input (8, 3, 224, 224)" in timed[0], out
        assert "original   median" in out and "rewritten  median" in out
        assert any(line.strip().startswith("rewritten/original: ") for line in out.splitlines())
    else:
        assert "timing skipped: CUDA not available" in out


def test_a_step_holds_none_of_the_forward_outputs_after_it_returns():
    """Under reduce-overhead, CUDA graphs are recorded in one step and replayed in the next;
    an output the step kept alive through a reference cycle (freed only when the garbage
    collector happens to run) made recording and replay disagree on which outputs were dead
    ("graph recording observed an input tensor deallocate ...", issue 22).  With the collector
    off, every output must be gone when the step returns."""
    import gc
    import weakref

    from hiera_rewrite.verify.cuda import _step_fn

    refs = []

    class Outputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            out = x * self.w
            nested = {"b": [out * 2, (out * 3,)], "a": out.sum()}
            refs.extend(weakref.ref(t) for t in (out, nested["a"], nested["b"][0], nested["b"][1][0]))
            return (nested["a"] * 0 + out.pow(2).sum(), nested)

    model = Outputs()
    step = _step_fn(model, model, torch.ones(2, 3), {}, torch, cuda=False)
    enabled = gc.isenabled()
    gc.disable()
    try:
        step(0)
        assert refs and [r() for r in refs] == [None] * len(refs)
    finally:
        if enabled:
            gc.enable()
    assert torch.equal(model.w.grad, torch.full((3,), 4.0))  # d/dw sum((x w)^2) = 2 x^2 w, summed over 2 rows


def test_the_loss_is_the_first_scalar_else_every_floating_output_summed():
    from hiera_rewrite.verify.cuda import _loss

    w = torch.ones(2, requires_grad=True)
    first = (w * 5).sum()
    assert _loss(({"z": w * 1, "a": first}, w * 2), torch) is first  # dict keys in sorted order
    total = _loss([w * 1, {"k": (w * 2, torch.ones(2))}, torch.ones(2, dtype=torch.long)], torch)
    assert total.item() == 6.0
    assert _loss((torch.ones(2), "text"), torch) is None
