"""Mask rewrites (HR003-HR005): the reasons printed for look-alikes, and the merged MAE
fixture traced by torch._dynamo with fullgraph before and after rewriting."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from hiera_rewrite.engine import rewrite_bytes

MASK = Path(__file__).resolve().parent.parent / "golden" / "mask"


def _skips(name: str):
    result = rewrite_bytes((MASK / name).read_bytes())
    assert not result.changed, f"{name} must come out unchanged"
    assert all(not r.applied for r in result.reports)
    for r in result.reports:
        assert r.message.startswith("skipped: "), r.message
    return {(r.code, r.line, r.message[len("skipped: "):]) for r in result.reports}


def test_lookalike_index_and_3d_mask():
    assert _skips("lookalike_index_and_3d_mask.in.py") == {
        ("HR005", 14, "mask has no tensor annotation: nothing proves it is a (B, N) boolean mask rather than an index"),
        ("HR003", 20, "mask is not the function's own mask argument (reassigned or not a parameter)"),
    }


def test_lookalike_unrelated_bool_indexing():
    assert _skips("lookalike_unrelated_bool_indexing.in.py") == {
        ("HR005", 8, "positives is not a plain method of a class: its callers cannot pass the count"),
    }


def test_lookalike_comment_string_is_silent():
    assert _skips("lookalike_comment_string.in.py") == set()


def test_lookalike_skip_marked():
    assert _skips("lookalike_skip_marked.in.py") == {
        ("HR003", 10, "left alone: `# hiera-rewrite: skip` on function forward"),
        ("HR004", 17, "left alone: `# hiera-rewrite: skip` on function forward_decoder"),
        ("HR005", 24, "left alone: `# hiera-rewrite: skip` on class SkippedLoss"),
        ("HR005", 29, "left alone: `# hiera-rewrite: skip` on class SkippedLoss"),
    }


def test_lookalike_fill_observed():
    assert _skips("lookalike_fill_observed.in.py") == {
        ("HR004", 13, "x_dec is read before the fill: the in-place write may be observed through it"),
        ("HR004", 21, "the grid allocation, the mask reshape and expand and the fill are not in one block"),
    }


def test_composition_mae_is_rewritten_but_the_count_is_not_passed():
    result = rewrite_bytes((MASK / "mae_composition.in.py").read_bytes())
    applied = sorted({r.code for r in result.reports if r.applied})
    assert applied == ["HR003", "HR004", "HR005"]
    (skip,) = [r for r in result.reports if not r.applied]
    assert skip.code == "HR003" and "self.encoder.get_random_mask" in skip.message
    assert b"num_kept" not in result.output.split(b"def forward_encoder")[1].split(b"def forward_decoder")[0]


def test_selection_count_goes_only_to_callees_that_take_it():
    out = (MASK / "select_count_threading.out.py").read_text()
    assert "self.labels_skipped(x, mask)" in out  # skip-marked: no count
    assert "self.labels(x, ~mask, norm=False)" in out  # another mask: counts its own
    assert "self.other.gather(x, mask)" in out  # another class's method


def test_forward_with_kwargs_keeps_kwargs_last():
    source = (
        b"import torch\n\n\nclass E:\n    def forward(self, x, mask=None, **kwargs):\n"
        b"        x = x[mask[..., None].tile(1, 2, x.shape[2])].view(x.shape[0], -1, x.shape[-1])\n"
        b"        return x\n"
    )
    result = rewrite_bytes(source)
    assert b"def forward(self, x, mask=None, num_kept=None, **kwargs):" in result.output


# -- torch._dynamo fullgraph on the merged MAE -------------------------------------------


def _load(source: bytes, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def _graph_breaks(module, torch, dims: int) -> int:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = module.tiny_mae(dims).double()
    shapes = {1: (2, 2, 24), 2: (3, 2, 8, 4), 3: (2, 2, 4, 4, 4)}
    x = torch.randn(*shapes[dims], dtype=torch.float64)

    def step(x):
        loss, pred, label, mask = model(x, 0.5)
        loss.backward()
        return loss, pred, label, mask

    return torch._dynamo.explain(step)(x).graph_break_count


@pytest.mark.parametrize("dims", [2, pytest.param(1, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_merged_mae_traces_without_graph_breaks_after_rewrite(dims):
    torch = pytest.importorskip("torch")
    source = (MASK / "mae_merged.in.py").read_bytes()
    rewritten = rewrite_bytes(source).output
    assert _graph_breaks(_load(source, "mae_before"), torch, dims) > 0
    assert _graph_breaks(_load(rewritten, "mae_after"), torch, dims) == 0


def test_merged_mae_fullgraph_compile_matches_eager():
    torch = pytest.importorskip("torch")
    after = _load(rewrite_bytes((MASK / "mae_merged.in.py").read_bytes()).output, "mae_after")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = after.tiny_mae(2).double()
    x = torch.randn(3, 2, 8, 4, dtype=torch.float64)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    torch.manual_seed(5)
    eager = model(x, 0.5)
    torch.manual_seed(5)
    traced = compiled(x, 0.5)
    for a, b in zip(eager, traced):
        assert torch.equal(a, b) if not a.is_floating_point() else torch.allclose(a, b, rtol=1e-12, atol=0)
