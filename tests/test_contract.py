"""The mask rewrites' contract where it used to cost users the speed-up (issue 23):

- a subclass that only adds code around ``super()`` keeps the fast path (0 graph breaks
  in the MAE training step, float64 parity with the original);
- ``patch_embed`` inside a pass-through wrapper, or ``checkpoint_wrapper``, keeps it (no
  boolean-mask indexing runs in the rewritten forward);
- hiera_mae.py rewritten over an original hiera.py keeps its decoder and loss fast
  path, and computes what the original computes.

The distributed case (DDP, FSDP2, checkpoint_wrapper under gloo) is in
tests/test_distributed.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dynamo = pytest.importorskip("torch._dynamo")

from tests.parity_tools import REL_TOL, assert_parity_shared  # noqa: E402
from tests.test_mask_exactness import _image, _pair  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")


class BooleanIndexing(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the ops with a data-dependent output size that boolean-mask indexing runs."""

    SIZED_BY_DATA = {"nonzero", "masked_select", "masked_scatter", "argwhere"}
    INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}

    def __init__(self) -> None:
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in self.SIZED_BY_DATA:
            self.ops.append(name)
        elif name in self.INDEXING:
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(t is not None and t.dtype == torch.bool for t in indices):
                self.ops.append(name)
        return func(*args, **kwargs)


def boolean_indexing_in(step) -> list:
    with BooleanIndexing() as mode:
        step()
    return mode.ops


def _step(model, ratio=0.6):
    def step(x):
        loss, pred, label, mask = model(x, mask_ratio=ratio)
        return loss, pred, label, mask

    return step


def _super_only(pkg, method: str):
    base = pkg.MaskedAutoencoderHiera
    if method == "forward":

        class SuperOnly(base):
            def forward(self, x, mask_ratio=0.6, mask=None):
                return super().forward(x, mask_ratio, mask=mask)

    elif method == "forward_encoder":

        class SuperOnly(base):  # type: ignore[no-redef]
            def forward_encoder(self, x, mask_ratio, mask=None):
                x = x * 1.0  # code around super(): a hook, a cast
                return super().forward_encoder(x, mask_ratio, mask=mask)

    else:

        class SuperOnly(base):  # type: ignore[no-redef]
            def get_pos_embed(self):
                return super().get_pos_embed()

    return SuperOnly


@pytest.mark.parametrize("method", ["forward", "forward_encoder", "get_pos_embed"])
def test_super_only_subclass_compiles_fullgraph(hiera_orig, hiera_new, method):
    """A subclass in the user's module that only adds code around super() keeps every
    count (they come from get_random_mask's own method and from the data's shapes),
    so its MAE step has no graph break; before, an override of forward_encoder sent
    the decoder and the loss to boolean indexing.  And it equals the original."""
    model_a, model_b = _pair(hiera_orig, hiera_new, _super_only(hiera_orig, method), _super_only(hiera_new, method))
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)
    dynamo.reset()
    assert dynamo.explain(_step(model_b))(_image()).graph_break_count == 0
    assert boolean_indexing_in(lambda: _step(model_b)(_image())) == []
    assert boolean_indexing_in(lambda: _step(model_a)(_image()))  # the probe sees the original's


def test_decoder_override_keeps_the_fill_fast(hiera_orig, hiera_new):
    """forward_decoder overridden (around super()): the override may return another
    pred_mask, so the loss selects with the mask (exact); the decoder's own fill and the
    encoder's drop keep their static counts: only the loss's two selections index by mask."""

    def with_decoder(pkg):
        class Decoder(pkg.MaskedAutoencoderHiera):
            def forward_decoder(self, x, mask):
                return super().forward_decoder(x, mask)

        return Decoder

    model_a, model_b = _pair(hiera_orig, hiera_new, with_decoder(hiera_orig), with_decoder(hiera_new))
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)
    ops = boolean_indexing_in(lambda: _step(model_b)(_image()))
    assert ops and set(ops) <= {"index"} and len(ops) == 2, ops  # pred[mask], label[mask]


class PassThrough(torch.nn.Module):
    """A wrapper a user puts around a submodule (a hook, a profiler region)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


def _checkpointed(module):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    return checkpoint_wrapper(module)


@pytest.mark.parametrize("wrap", [PassThrough, _checkpointed], ids=["pass_through", "checkpoint_wrapper"])
def test_wrapped_patch_embed_keeps_the_fast_path(hiera_orig, hiera_new, wrap):
    """patch_embed wrapped (same weights, the mask passed through): the rewritten
    forward runs no boolean-mask indexing (before: 4 such ops, as many as upstream) and
    equals the original, gradients included."""
    model_a, model_b = _pair(hiera_orig, hiera_new)
    model_a.patch_embed = wrap(model_a.patch_embed)
    model_b.patch_embed = wrap(model_b.patch_embed)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)
    assert boolean_indexing_in(lambda: _step(model_b)(_image())[0].backward()) == []
    assert len(boolean_indexing_in(lambda: _step(model_a)(_image())[0].backward())) >= 4


@pytest.fixture(scope="module")
def mae_alone(upstream):
    """A copy of the installed package with hiera_mae.py rewritten and hiera.py as it is."""
    return upstream.package({"hiera_mae.py"})


def test_mae_file_alone_keeps_its_fast_path(hiera_orig, mae_alone):
    """hiera_mae.py's rewrite stands on its own: over an original hiera.py (a pre-commit
    run that passed only hiera_mae.py) the decoder fill and the loss and label
    selections take their counts from the data's shapes; only the original encoder's
    token drop indexes by mask.  Before, the decoder and the loss got a count only from
    a rewritten hiera.py (4 boolean-mask ops, as upstream's)."""
    import inspect

    # hiera.py is the original: its forward takes no random_mask_ratio (a rewritten one does)
    assert "random_mask_ratio" not in inspect.signature(mae_alone.Hiera.forward).parameters
    model_a, model_b = _pair(hiera_orig, mae_alone)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)
    ops = boolean_indexing_in(lambda: _step(model_b)(_image()))
    assert ops == ["index"], ops  # hiera.py's own x[mask[..., None].tile(...)]
    ragged = torch.zeros(2, 16, dtype=torch.bool)
    ragged[0, :5], ragged[1, 3:14] = True, True  # 5 and 11 kept: rows differ
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask=ragged), (_image(),), torch, REL_TOL)
