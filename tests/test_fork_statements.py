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


@pytest.mark.parametrize("case", ["fork_label_reshape_mask_shape", "fork_mask_bool_cast"])
def test_fork_mae_step_compiles_fullgraph_and_equals_original(case):
    """fork_label_reshape_mask_shape: `label = label.reshape(mask.shape[0], mask.shape[1],
    -1)` before `label[mask]`: reading the mask's shape is not passing it on, so the label
    and loss selections keep their static counts.  fork_mask_bool_cast: `mask =
    mask.bool()` before the token drop and in forward_loss keeps each row's count.
    Before, the rewrite refused those sites and the step broke the graph 4 times."""
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
