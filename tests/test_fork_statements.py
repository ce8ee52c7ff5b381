"""Fork statements the mask rewrites must take, seen in public research forks, each a
golden in golden/mask/ (bytes and reports there): here, that the rewritten fork's MAE
training step compiles with fullgraph=True (the speed-up users come for) and computes
what the original computes."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dynamo = pytest.importorskip("torch._dynamo")

from tests.parity_tools import max_rel_error  # noqa: E402

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "mask"

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _module(path: Path) -> types.ModuleType:
    module = types.ModuleType(path.stem.replace(".", "_"))
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


def _step(model):
    def step(x):
        loss, pred, label, mask = model(x, 0.5)
        return loss, pred, label, mask

    return step


@pytest.mark.parametrize(
    "case",
    [
        "fork_label_reshape_mask_shape",
        "fork_mask_bool_cast",
        "fork_numpy_mask_units",
        "fork_patch_embed_factory",
        "fork_mask_ratio_attribute",
    ],
)
def test_fork_mae_step_compiles_fullgraph_and_equals_original(case):
    """fork_label_reshape_mask_shape: `label = label.reshape(mask.shape[0], mask.shape[1],
    -1)` before `label[mask]`: reading the mask's shape is not passing it on, so the label
    and loss selections keep their static counts.  fork_mask_bool_cast: `mask =
    mask.bool()` before the token drop and in forward_loss keeps each row's count.
    Before, the rewrite refused those sites and the step broke the graph 4 times.
    fork_numpy_mask_units: the unit grid made with numpy in __init__ is made of
    Python ints at its source, so the kept count is static (test below).
    fork_patch_embed_factory: a patch_embed given the mask, built by a factory (HR003
    refused the drop before); fork_mask_ratio_attribute: the mask made with
    `self.get_random_mask(x, self.mask_ratio)` (refused before).  (fork_mask_ratio_rebound
    is exact by its golden's parity; its own `.item()` breaks the graph, original too.)"""
    original = _module(GOLDEN / f"{case}.in.py")
    rewritten = _module(GOLDEN / f"{case}.out.py")
    torch.manual_seed(0)
    model_orig = original.tiny_mae(2).double()
    model_new = rewritten.tiny_mae(2).double()
    model_new.load_state_dict(model_orig.state_dict())
    x = torch.randn(3, 2, 8, 4, dtype=torch.float64)

    torch.manual_seed(1)
    want = _step(model_orig)(x)
    want[0].backward()
    dynamo.reset()
    # dynamo.explain counts the breaks (under torch 2.14, fullgraph=True with aot_eager
    # traces boolean indexing as a dynamic-shape op instead of raising)
    breaks = dynamo.explain(_step(model_new))(x).graph_break_count
    assert breaks == 0, f"{breaks} graph breaks in the rewritten fork's MAE step"
    assert dynamo.explain(_step(model_orig))(x).graph_break_count > 0  # the probe sees them
    dynamo.reset()
    compiled = torch.compile(_step(model_new), backend="aot_eager", fullgraph=True)
    torch.manual_seed(1)
    got = compiled(x)
    got[0].backward()
    dynamo.reset()

    for a, b in zip(want, got):
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.is_floating_point():
            assert max_rel_error(a, b, torch) <= 1e-12
        else:
            assert torch.equal(a, b)
    compared = 0
    for (name, p), q in zip(model_orig.named_parameters(), model_new.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert max_rel_error(p.grad, q.grad, torch) <= 1e-12, name
            compared += 1
    assert compared > 5


def test_numpy_mask_units_need_the_source_fix():
    """fork_numpy_mask_units without its `__init__` statement converted (numpy ints in
    mask_spatial_shape, the rest of the rewrite as emitted): the kept count is traced
    as data and the rewritten step breaks the graph; with it (the golden's output),
    0 breaks (above).  So the conversion is what makes the fork compile fullgraph."""
    text = (GOLDEN / "fork_numpy_mask_units.out.py").read_text()
    fixed = "tuple(\n            v.item() for v in np.prod([mask_spatial_shape], axis=0)\n        )"
    assert fixed in text
    module = types.ModuleType("numpy_unfixed")
    exec(compile(text.replace(fixed, "tuple(np.prod([mask_spatial_shape], axis=0))"), "numpy_unfixed", "exec"), module.__dict__)
    torch.manual_seed(0)
    model = module.tiny_mae(2).double()
    assert type(model.mask_spatial_shape[0]).__module__ == "numpy"
    x = torch.randn(3, 2, 8, 4, dtype=torch.float64)
    dynamo.reset()
    assert dynamo.explain(_step(model))(x).graph_break_count > 0
    dynamo.reset()


def test_numpy_source_the_rewrite_cannot_convert_is_reported():
    """A numpy value not wrapped in tuple()/list() (an array kept as the attribute): the
    rewrite does not guess a conversion; it says which statement keeps the count from
    being static, and the rest is rewritten as before."""
    from hiera_rewrite.engine import every_code, rewrite_bytes

    text = (GOLDEN / "fork_numpy_mask_units.in.py").read_text()
    old = "mask_spatial_shape = tuple(np.prod([mask_spatial_shape], axis=0))"
    assert old in text
    result = rewrite_bytes(text.replace(old, "mask_spatial_shape = np.prod([mask_spatial_shape], axis=0)").encode(), codes=every_code())
    notes = [r.message for r in result.reports if not r.applied and "numpy" in r.message]
    assert len(notes) == 1 and "makes mask_spatial_shape with numpy" in notes[0] and "traced as data" in notes[0], notes
    assert "np.prod([mask_spatial_shape], axis=0)" in result.output.decode()
    assert any(r.applied and r.code == "HR003" for r in result.reports)
