"""--bench-modes (issue 22): parsing, the per-mode rounds, the fallback of a side that cannot run
a mode, and the report's lines.  CPU only: the sides are fake steps or tiny CPU models; the
real compile/reduce-overhead run is benchmarks/verify_bench_modes_check.sh on a GPU."""

import pytest

from hiera_rewrite import cli
from hiera_rewrite.verify.cuda import (
    BENCH_MODES,
    Prepared,
    Unusable,
    format_modes,
    parse_bench_modes,
    prepare_side,
    time_modes,
)

torch = pytest.importorskip("torch")


# -- parsing ---------------------------------------------------------------------------------


def test_parse_bench_modes():
    assert parse_bench_modes("eager,compile,ro") == ["eager", "compile", "ro"]
    assert parse_bench_modes(" ro , eager,ro") == ["ro", "eager"]  # order kept, each once
    assert parse_bench_modes("reduce-overhead") == ["ro"]
    with pytest.raises(ValueError, match=r"unknown mode 'fast'.*eager, compile, ro"):
        parse_bench_modes("eager,fast")
    with pytest.raises(ValueError, match="no mode given"):
        parse_bench_modes(" , ")


def test_cli_rejects_an_unknown_mode_naming_the_valid_ones(tmp_path, capsys):
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    with pytest.raises(SystemExit) as exc:
        cli.main(["--verify", "--verify-cuda", "--bench-modes", "eager,turbo", str(target)])
    assert exc.value.code == cli.EXIT_ERROR == 2
    err = capsys.readouterr().err
    assert "--bench-modes: unknown mode 'turbo'" in err and "eager, compile, ro" in err, err


@pytest.mark.parametrize("argv", [["--verify"], []])
def test_cli_bench_modes_needs_verify_cuda(tmp_path, capsys, argv):
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--bench-modes", "ro", str(target)])
    assert exc.value.code == cli.EXIT_ERROR
    assert "--bench-modes only makes sense with --verify --verify-cuda" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--bench-size", "224,224"], ["--bench-batch", "8"], ["--bench-size", "64,64", "--bench-batch", "4"]])
@pytest.mark.parametrize("argv", [["--verify"], []])
def test_cli_bench_size_and_batch_need_verify_cuda(tmp_path, capsys, argv, flags):
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, *flags, str(target)])
    assert exc.value.code == cli.EXIT_ERROR
    named = [f for f in flags if f.startswith("--")]
    assert f"{', '.join(named)} only make" in capsys.readouterr().err
    assert target.read_text() == "x = 1\n"


def test_cli_puts_the_modes_in_the_bench_spec(monkeypatch, tmp_path):
    """The parsed modes travel in the spec's "bench" dict; without the flag there is no "modes"
    key (the eager-only path and its output stay as they were)."""
    from hiera_rewrite.verify import command

    seen = []
    monkeypatch.setattr(command, "verify_group", lambda group, **kw: seen.append(kw["bench"]) or "PASSED")
    monkeypatch.setattr(command, "group_files", lambda results, root: [type("G", (), {"results": {tmp_path: None}})()])
    monkeypatch.setattr(command, "copy_fingerprint", lambda group: None)  # no copies to compare
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    cli.main(["--verify", "--check", "--verify-cuda", "--bench-modes", "ro,eager", str(target)])
    cli.main(["--verify", "--check", "--verify-cuda", str(target)])
    assert seen[0] == {"batch": 16, "modes": ["ro", "eager"]}
    assert seen[1] == {"batch": 16}


# -- the rounds and the fallback, with fake sides ------------------------------------------------


class _Fake:
    """A fake ``prepare``: ``ms[(side, mode)]`` is the step time of that side in that mode, a
    string the reason it cannot run it; records every prepare and every timed step."""

    def __init__(self, ms, fail_timed=()):
        self.ms, self.fail_timed = ms, set(fail_timed)
        self.prepared, self.steps = [], []
        self.names = {}

    def models(self):
        models = {"original": torch.nn.Linear(2, 2), "rewritten": torch.nn.Linear(2, 2)}
        self.names = {id(m): n for n, m in models.items()}
        return models

    def __call__(self, model, mode, x, forward_kwargs, *, torch):
        name = self.names[id(model)]
        self.prepared.append((name, mode))
        value = self.ms[(name, mode)]
        if isinstance(value, str):
            raise Unusable(value)

        def step(seed):
            self.steps.append((name, mode, seed))
            if (name, mode) in self.fail_timed:
                raise RuntimeError("accessing tensor output of CUDAGraphs that has been overwritten")
            return value

        return Prepared(mode, step, warmup_s=12.5 if mode != "eager" else 0.1, warmup_steps=6 if mode == "ro" else 3, graph_breaks=2 if (name, mode) == ("original", "compile") else 0)


def _run(fake, modes, rounds=2, steps=2):
    return time_modes(fake.models(), lambda: torch.ones(1, 2), baseline="original", modes=modes, rounds=rounds, steps=steps, torch=torch, prepare=fake)


def test_each_mode_interleaved_and_prepared_before_its_rounds():
    fake = _Fake({("original", "eager"): 10.0, ("rewritten", "eager"): 7.0, ("original", "compile"): 8.0, ("rewritten", "compile"): 5.0})
    result = _run(fake, ["eager", "compile"])
    assert fake.prepared == [("original", "eager"), ("rewritten", "eager"), ("original", "compile"), ("rewritten", "compile")]
    compile_steps = [(n, m) for n, m, _ in fake.steps if m == "compile"]
    # round 0: A A B B, round 1: B B A A
    assert compile_steps == [("original", "compile")] * 2 + [("rewritten", "compile")] * 4 + [("original", "compile")] * 2
    seeds = {n: sorted(s for nn, m, s in fake.steps if nn == n and m == "compile") for n in ("original", "rewritten")}
    assert seeds["original"] == seeds["rewritten"] == [0, 1, 1000, 1001]
    eager, comp = result["modes"]
    assert eager["ran"] == {"original": "eager", "rewritten": "eager"} and eager["ratios"]["rewritten"]["median"] == pytest.approx(0.7)
    assert comp["ratios"]["rewritten"]["median"] == pytest.approx(0.625) and comp["not_run"] == {}


def test_original_not_capturable_falls_back_to_its_best_mode_that_runs():
    why = "inductor skipped CUDA graphs: incompatible ops"
    fake = _Fake({("original", "ro"): why, ("original", "compile"): 5.2, ("rewritten", "ro"): 3.1, ("rewritten", "compile"): 4.0})
    result = _run(fake, ["compile", "ro"])
    # the original's compile is prepared once: the compile line and the ro fallback share it
    assert fake.prepared.count(("original", "compile")) == 1
    ro = result["modes"][1]
    assert ro["ran"] == {"original": "compile", "rewritten": "ro"}
    assert ro["not_run"] == {"original": [["ro", why]]}
    assert ro["ratios"]["rewritten"]["median"] == pytest.approx(3.1 / 5.2)
    lines = format_modes("Tiny", result, "bfloat16", (16, 3, 224, 224))
    line = next(line for line in lines if line.startswith("  reduce-overhead: "))
    assert line.startswith(
        f"  reduce-overhead: rewritten 3.10 ms vs original (compile, reduce-overhead not capturable: {why}) 5.20 ms, ratio 0.596"
    ), line
    assert line.endswith("1.68x faster")


def test_a_side_that_raises_in_a_timed_step_is_retimed_in_its_next_mode():
    fake = _Fake(
        {("original", "ro"): 4.0, ("original", "compile"): 5.0, ("rewritten", "ro"): 3.0},
        fail_timed=[("original", "ro")],
    )
    result = _run(fake, ["ro"])
    ro = result["modes"][0]
    assert ro["ran"] == {"original": "compile", "rewritten": "ro"}
    assert "raised in a timed step: RuntimeError: accessing tensor output" in ro["not_run"]["original"][0][1]
    # the rounds started again: every kept time is from the modes finally chosen
    assert ro["sides"]["original"]["steps"] == 4 and ro["sides"]["original"]["median_ms"] == 5.0


def test_fallback_through_every_mode_and_a_mode_no_side_can_run():
    fake = _Fake({("original", "ro"): "A", ("original", "compile"): "B", ("original", "eager"): 9.0, ("rewritten", "ro"): "C", ("rewritten", "compile"): "D", ("rewritten", "eager"): "E"})
    result = _run(fake, ["ro"])
    assert result["modes"][0]["error"] == "rewritten: reduce-overhead: C; compile: D; eager: E"
    lines = format_modes("M", result, "bfloat16", (4, 8))
    assert lines[1] == "  reduce-overhead: not timed: rewritten: reduce-overhead: C; compile: D; eager: E"
    fake = _Fake({("original", "ro"): "A", ("original", "compile"): "B", ("original", "eager"): 9.0, ("rewritten", "ro"): 3.0})
    line = format_modes("M", _run(fake, ["ro"]), "bfloat16", (4, 8))[1]
    assert "original (eager, reduce-overhead not capturable: A; compile not run: B) 9.00 ms" in line


def test_report_says_compile_time_apart_from_step_time():
    fake = _Fake({("original", "eager"): 10.0, ("rewritten", "eager"): 7.0, ("original", "compile"): 8.0, ("rewritten", "compile"): 8.8})
    lines = format_modes("Tiny", _run(fake, ["eager", "compile"]), "bfloat16", (16, 3, 224, 224))
    assert lines[0] == "training step of Tiny, bfloat16 on cpu, input (16, 3, 224, 224), 2 interleaved rounds x 2 steps per mode:"
    assert lines[1].startswith("  eager: rewritten 7.00 ms vs original 10.00 ms, ratio 0.700") and lines[1].endswith("1.43x faster")
    assert "compile" not in lines[2] and "compile" not in lines[3]  # eager: no compile time
    assert lines[4].endswith("not faster")  # 8.8 / 8.0
    assert lines[5].startswith("    original   median     8.00 ms") and "compile and warm-up 12.5 s (3 steps, not timed), 2 graph breaks" in lines[5]
    assert lines[6].startswith("    rewritten  median     8.80 ms") and lines[6].endswith("compile and warm-up 12.5 s (3 steps, not timed)")


# -- prepare_side on CPU: eager for real, and the reduce-overhead skip detection ------------------


def test_prepare_side_eager_warms_up_then_steps():
    calls = []

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            calls.append(float(torch.rand(())))
            return x * self.w

    prepared = prepare_side(M(), "eager", torch.ones(2, 3), {}, torch=torch, warmup=2)
    assert len(calls) == 2 and prepared.mode == "eager" and prepared.graph_breaks is None
    assert prepared.step(5) >= 0 and len(calls) == 3


def test_prepare_side_raising_model_is_unusable():
    class Bad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            raise ValueError("no graph for you")

    with pytest.raises(Unusable, match="raised in warm-up: ValueError: no graph for you"):
        prepare_side(Bad(), "eager", torch.ones(2, 3), {}, torch=torch, warmup=1)


def test_reduce_overhead_with_skipped_cudagraphs_is_not_capturable(monkeypatch):
    """Where inductor skips CUDA graphs (its counter grows and it logs why), the side runs but is
    not reduce-overhead: Unusable with inductor's reason; in compile mode the same is fine."""
    import logging

    from torch._dynamo.utils import counters

    class Skipping(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            counters["inductor"]["cudagraph_skips"] += 1
            logging.getLogger("torch._inductor.cudagraph_utils.__cudagraphs").warning("skipping cudagraphs due to incompatible ops: aten.nonzero")
            return x * self.w

    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)  # the fake "compiled" model logs the skip
    with pytest.raises(Unusable, match=r"^inductor skipped CUDA graphs: incompatible ops: aten.nonzero$"):
        prepare_side(Skipping(), "ro", torch.ones(2, 3), {}, torch=torch, warmup=1)
    assert prepare_side(Skipping(), "compile", torch.ones(2, 3), {}, torch=torch, warmup=1).mode == "compile"


def test_modes_are_named_as_the_report_names_them():
    assert BENCH_MODES == {"eager": "eager", "compile": "compile", "ro": "reduce-overhead"}


# -- the bench input follows the verified input's layout ----------------------------------------


class _ChannelsLast(torch.nn.Module):
    """A fork that takes (B, H, W, C) and permutes it itself; built for 32x32."""

    def __init__(self):
        super().__init__()
        self.img_size = 32
        self.embed = torch.nn.Conv2d(3, 4, 4, stride=4)

    def forward(self, x):
        assert x.shape[-1] == 3, f"expected channels last, got {tuple(x.shape)}"
        return self.embed(x.permute(0, 3, 1, 2))


class _Bare(torch.nn.Module):
    """A fork that takes (B, H, W) and unsqueezes its one channel itself."""

    def __init__(self):
        super().__init__()
        self.img_size = 32
        self.embed = torch.nn.Conv2d(1, 4, 4, stride=4)

    def forward(self, x):
        assert x.dim() == 3, f"expected no channel dim, got {tuple(x.shape)}"
        return self.embed(x.unsqueeze(1))


@pytest.mark.parametrize(
    "model, verified, layout, timed",
    [
        (_ChannelsLast, [2, 8, 8, 3], "channels_last", [16, 32, 32, 3]),
        (_Bare, [2, 8, 8], "no_channels", [16, 32, 32]),
    ],
)
def test_bench_input_in_the_layout_verify_took(model, verified, layout, timed):
    from hiera_rewrite.verify.inputs import Inputs

    inputs, m = Inputs(), model().double()  # the worker verifies in float64
    shapes = [[2, 3 if model is _ChannelsLast else 1, 8, 8]]
    fallbacks = Inputs.other_ranks(shapes)
    x, _, _ = inputs.choose_input(m, shapes, torch, fallbacks)
    assert list(x.shape) == verified
    assert Inputs.input_layout(list(x.shape), shapes, fallbacks) == layout
    shape = inputs.bench_shape(m, {}, {"batch": 16}, verified, torch, layout)
    assert shape == timed
    m(torch.randn(*shape, dtype=torch.float64))  # the model runs at the timed input
    assert inputs.bench_shape(m, {}, {"batch": 4, "size": [16, 24]}, verified, torch, layout)[1:3] == [16, 24]


def test_channels_first_input_keeps_its_layout():
    from hiera_rewrite.verify.inputs import Inputs

    shapes = [[2, 3, 8, 8]]
    assert Inputs.input_layout([2, 3, 8, 8], shapes, Inputs.other_ranks(shapes)) == "channels_first"
    assert Inputs.input_layout([2, 10, 8], [[2, 10, 8], [2, 20, 8]], []) == "channels_first"  # a token sequence
    assert Inputs().bench_shape(torch.nn.Linear(8, 8), {}, {"batch": 16}, [2, 10, 8], torch, "channels_first") == [16, 10, 8]


def test_reduce_overhead_on_cpu_for_real():
    """Real torch.compile on CPU, where inductor never captures CUDA graphs: reduce-overhead is
    not capturable for either side (the counter, not the log, says so there), even for a class
    compiled in reduce-overhead earlier in the process (time_modes resets dynamo first: its
    reused frames would not count the skip again); compile runs, a boolean mask breaks it."""

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.l(x).relu()

    class Masked(Plain):
        def forward(self, x):
            y = self.l(x)
            return y[y > 0].sum()

    x = torch.randn(4, 8)
    try:
        with pytest.raises(Unusable, match=r"^inductor skipped CUDA graphs"):
            prepare_side(Plain(), "ro", x, {}, torch=torch, warmup=2)
    except Exception as exc:  # noqa: BLE001
        if "raised in warm-up" in str(exc):
            pytest.skip(f"inductor cannot compile on this CPU: {exc}")
        raise
    result = time_modes({"original": Masked(), "rewritten": Plain()}, lambda: x, baseline="original", modes=["compile", "ro"], rounds=2, steps=1, torch=torch)
    comp, ro = result["modes"]
    assert comp["ran"] == {"original": "compile", "rewritten": "compile"}
    assert comp["warmup"]["original"]["graph_breaks"] >= 1 and comp["warmup"]["rewritten"]["graph_breaks"] == 0
    assert ro["ran"] == {"original": "compile", "rewritten": "compile"}, ro
    assert all(why.startswith("inductor skipped CUDA graphs") for side in ro["not_run"].values() for _, why in side)
