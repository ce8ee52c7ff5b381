"""Numeric parity of the real upstream Hiera: original vs rewritten, on CPU.

The installed ``hiera-transformer`` package is copied at test time (tests/upstream.py)
into ``hiera_orig`` (untouched), ``hiera_new`` (every file rewritten) and mixed states
(some files rewritten, as a one-file-at-a-time pre-commit hook leaves them).  Each cell
builds one model from each package with the same weights (shared, see
``parity_tools.share_weights``), runs the same seeded forward, and compares every
output (shape, dtype, values; boolean masks exactly), then backpropagates the same
weighted sum of all floating outputs and compares every parameter gradient and the
input gradient.  float64: max relative error <= 1e-10.

The MAE forward returns ``(loss, pred, label, mask)``.  With the mask generated inside
the model the same seed is set before each forward, so the rewrite must consume the
RNG identically: the returned masks are compared with ``torch.equal``.

Inputs are small so the whole file runs in a few minutes on 2 cores: 2-D images are
64x64 (16x16 tokens = 4 mask units of 8x8) or 128x128 (16 mask units, needed for mask
ratio 0.9 to keep one unit: ``int(16 * 0.1) == 1`` while ``int(4 * 0.1) == 0``); video
is 4x32x32 or 4x64x64 frames.  The MAE decoder is shrunk through the factories'
keyword arguments (depth 1, width 64).  The large and huge cells also pass
``mlp_ratio=0.5``: their stage widths, head counts and depths (everything the
attention rewrite depends on) are the factory's, but float64 weights plus two sets of
gradients of the full-width MLPs would need ~16 GB.  They are marked slow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
from typing import Any, Callable, Dict, Optional, Tuple

import pytest

torch = pytest.importorskip("torch")

from tests.parity_tools import (  # noqa: E402
    assert_parity_shared,
    compare_runs,
    default_dtype,
    max_rel_error,
    randomize_,
    run_with_grads,
    share_weights,
    skip_init,
)
from tests.upstream import REWRITABLE, all_subsets, package_name  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

F64_TOL = 1e-10
# float32 (eps 1.2e-7): the rewrite reshapes q/k/v to 4-D and feeds SDPA / the matmuls
# a different batch layout, so on CPU the kernels may block and reduce in a different
# order.  Each reordered reduction moves a result by a few ulp; through ~12 blocks
# forward and backward, softmax and LayerNorm that grows to ~1e-6..1e-5 relative
# (measured on the cells below: outputs <= 1e-6, gradients <= 5.3e-6; -rP prints them).
# 1e-4 (~800 ulp) keeps a 20x margin over that, while any real layout or indexing bug (wrong token order, wrong
# window, wrong pooled element) shows up as an O(1e-1..1) relative error.
F32_TOL = 1e-4

SIZES = ("tiny", "small", "base", "base_plus", "large", "huge")
BIG = ("large", "huge")
MAE_SMALL_DECODER = dict(decoder_depth=1, decoder_embed_dim=64, decoder_num_heads=2)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One parity case.  ``factory`` is a name exported by the ``hiera`` package."""

    factory: str
    input_size: Tuple[int, ...]
    kwargs: Tuple[Tuple[str, Any], ...] = ()
    batch: int = 2
    train: bool = False
    # classifier: None (no mask) or "given"; MAE: "inside" (generated) or "given"
    mask: Optional[str] = None
    keep: int = 0  # kept mask units per row for a given mask (classifier)
    mask_ratio: float = 0.6  # MAE
    intermediates: bool = False  # classifier: return_intermediates=True
    # the factory hard-codes input_size: patch this class (in this module of the
    # package) to build the factory's configuration at a small input size
    override: Optional[Tuple[str, str]] = None
    in_chans: int = 3

    @property
    def is_mae(self) -> bool:
        return self.factory.startswith("mae_") or self.factory == "MaskedAutoencoderHiera"


def _kw(**kwargs) -> Tuple[Tuple[str, Any], ...]:
    return tuple(sorted(kwargs.items()))


@contextlib.contextmanager
def _patched_input_size(pkg, override, input_size):
    if override is None:
        yield
        return
    module = getattr(pkg, override[0])
    real = getattr(module, override[1])

    def small(*args, **kwargs):
        kwargs["input_size"] = input_size
        return real(*args, **kwargs)

    setattr(module, override[1], small)
    try:
        yield
    finally:
        setattr(module, override[1], real)


def build(pkg, cell: Cell, dtype, randomize: bool = True):
    """Build the cell's model from ``pkg`` directly in ``dtype``.  The upstream
    initialisers are skipped (they dominate the build time); with ``randomize`` every
    parameter is then filled with seeded random values (``parity_tools.randomize_``),
    otherwise the weights are left for ``share_weights`` to replace."""
    kwargs = dict(cell.kwargs)
    if cell.override is None:
        kwargs["input_size"] = cell.input_size
    with default_dtype(torch, dtype), skip_init(torch), _patched_input_size(pkg, cell.override, cell.input_size):
        model = getattr(pkg, cell.factory)(**kwargs)
    if randomize:
        randomize_(model, torch, seed=0)
    model.train(cell.train)
    return model


def _random_mask(batch: int, units: int, keep: int, seed: int = 7):
    """A boolean mask [batch, units] with exactly ``keep`` True (kept) units per row."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(batch, units, dtype=torch.bool)
    for row in range(batch):
        mask[row, torch.randperm(units, generator=gen)[:keep]] = True
    return mask


def _inputs(cell: Cell, model, dtype):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(cell.batch, cell.in_chans, *cell.input_size, generator=gen, dtype=torch.float64).to(dtype)
    units = math.prod(model.mask_spatial_shape)
    mask = None
    if cell.mask == "given":
        keep = cell.keep if not cell.is_mae else int(units * (1 - cell.mask_ratio))
        assert 0 < keep <= units, f"{cell}: {keep} of {units} mask units kept"
        mask = _random_mask(cell.batch, units, keep)
    return x, mask, units


def _call(cell: Cell) -> Callable:
    if cell.is_mae:
        if cell.mask == "inside":
            return lambda m, x: m(x, mask_ratio=cell.mask_ratio)
        return lambda m, x, mask: m(x, mask_ratio=cell.mask_ratio, mask=mask)
    if cell.mask == "given":
        return lambda m, x, mask: m(x, mask=mask, return_intermediates=cell.intermediates)
    return lambda m, x: m(x, return_intermediates=cell.intermediates)


def check_cell(pkg_a, pkg_b, cell: Cell, dtype=torch.float64, rel_tol: float = F64_TOL) -> Dict[str, float]:
    model_a = build(pkg_a, cell, dtype)
    model_b = build(pkg_b, cell, dtype, randomize=False)
    try:
        share_weights(model_a, model_b)
        x, mask, units = _inputs(cell, model_a, dtype)
        inputs = (x,) if mask is None else (x, mask)
        outs = []

        def call(model, *args):  # keep model_a's outputs for the MAE checks below
            result = _call(cell)(model, *args)
            if cell.is_mae and not outs:
                outs.extend(o.detach() if torch.is_tensor(o) else o for o in result)
            return result

        worst = assert_parity_shared(model_a, model_b, call, inputs, torch, rel_tol)
        if cell.is_mae:
            loss, pred, label, out_mask = outs
            assert loss.dim() == 0 and out_mask.dtype == torch.bool and out_mask.shape == (cell.batch, units)
            assert pred.shape == label.shape and pred.shape[0] > 0
            kept = out_mask.sum(dim=1)
            expected = int(units * (1 - cell.mask_ratio)) if mask is None else int(mask[0].sum())
            assert bool((kept == expected).all()), f"kept {kept.tolist()}, expected {expected}"
            if mask is not None:
                assert torch.equal(out_mask, mask)
        return worst
    finally:
        big = sum(p.numel() for p in model_a.parameters()) > 100_000_000
        del model_a, model_b
        if big:
            gc.collect()


# -- cells -------------------------------------------------------------------------

IMG = (64, 64)  # 16x16 tokens: 4 mask units of 8x8
IMG16 = (128, 128)  # 16 mask units
VID = (4, 32, 32)  # tokens (2, 8, 8): 2 mask units of (1, 8, 8)
VID8 = (4, 64, 64)  # tokens (2, 16, 16): 8 mask units
VIDEO_CLS = ("hiera", "Hiera")  # hiera_base_16x224 hard-codes input_size=(16, 224, 224)
VIDEO_MAE = ("hiera_mae", "MaskedAutoencoderHiera")  # so does mae_hiera_base_16x224
# The combinatorial sweeps (q_pool x mode x mask x intermediates, mask ratios, mixed
# states) use the classes with a narrow configuration: the rewrites depend on heads,
# windows, q_stride and token order, not on width.  2 heads at stage 1 (16 at stage 4)
# so head and window axes are both non-trivial.  The named sizes run through the
# factories above.
MICRO = dict(embed_dim=32, num_heads=2, stages=(1, 2, 3, 1))
MICRO_1HEAD = dict(embed_dim=32, num_heads=1, stages=(1, 2, 2, 1))


def _size_kwargs(size: str) -> dict:
    return dict(mlp_ratio=0.5) if size in BIG else {}


def _marks(size: str):
    return [pytest.mark.slow] if size in BIG else []


CELLS = []


def _add(cell_id: str, cell: Cell, marks=()):
    CELLS.append(pytest.param(cell, id=cell_id, marks=list(marks)))


# every named size: classifier (no mask), classifier (mask + intermediates), MAE
for size in SIZES:
    kw = _size_kwargs(size)
    _add(f"cls-{size}", Cell(f"hiera_{size}_224", IMG, _kw(num_classes=10, **kw)), _marks(size))
    _add(
        f"cls-{size}-mask-interm",
        Cell(f"hiera_{size}_224", IMG, _kw(num_classes=10, **kw), mask="given", keep=2, intermediates=True),
        _marks(size),
    )
    _add(
        f"mae-{size}",
        Cell(f"mae_hiera_{size}_224", IMG, _kw(**MAE_SMALL_DECODER, **kw), train=True, mask="inside", mask_ratio=0.5),
        _marks(size),
    )
for size in ("tiny", "base_plus"):  # the classifier factories' default q_pool is 3
    for q_pool in (1, 2):
        _add(
            f"cls-{size}-q{q_pool}-mask-interm",
            Cell(f"hiera_{size}_224", IMG, _kw(num_classes=10, q_pool=q_pool), mask="given", keep=1, intermediates=True),
        )
_add("cls-tiny-train", Cell("hiera_tiny_224", IMG, _kw(num_classes=10, drop_path_rate=0.2, head_dropout=0.3), train=True))

# classifier: every q_pool x eval/train x mask x intermediates.  Train mode turns on
# drop-path and head dropout, so the order of RNG draws must be unchanged too.
for q_pool in (1, 2, 3):
    for train in (False, True):
        extra = dict(drop_path_rate=0.2, head_dropout=0.3) if train else {}
        for mask, interm in ((None, False), (None, True), ("given", False), ("given", True)):
            tag = f"cls-micro-q{q_pool}-{'train' if train else 'eval'}"
            tag += ("-mask" if mask else "") + ("-interm" if interm else "")
            _add(
                tag,
                Cell(
                    "Hiera",
                    IMG,
                    _kw(num_classes=10, q_pool=q_pool, **MICRO, **extra),
                    train=train,
                    mask=mask,
                    keep=3,
                    intermediates=interm,
                ),
            )
_add("cls-micro-1head-mask", Cell("Hiera", IMG16, _kw(num_classes=10, **MICRO_1HEAD), mask="given", keep=5))
_add("cls-micro-batch1", Cell("Hiera", IMG, _kw(num_classes=10, **MICRO), batch=1, mask="given", keep=2, intermediates=True))
_add("cls-micro-batch3-16mu", Cell("Hiera", IMG16, _kw(num_classes=10, **MICRO), batch=3, mask="given", keep=7))
# every stage mask-unit attention (windows all the way down)
_add(
    "cls-micro-all-mu-attn",
    Cell("Hiera", IMG16, _kw(num_classes=10, mask_unit_attn=(True, True, True, True), **MICRO), mask="given", keep=5),
)
_add("cls-micro-all-mu-attn-nomask", Cell("Hiera", IMG16, _kw(num_classes=10, mask_unit_attn=(True, True, True, True), **MICRO)))
# non-square image: 8x4 mask units
_add("cls-micro-nonsquare", Cell("Hiera", (256, 128), _kw(num_classes=10, **MICRO), mask="given", keep=11, intermediates=True))
# 1-D sequences (conv1d patch embed, windows of 8 tokens)
ONE_D = _kw(
    num_classes=5, embed_dim=32, num_heads=2, stages=(1, 1, 2, 1), q_stride=(2,), mask_unit_size=(8,),
    patch_kernel=(7,), patch_stride=(4,), patch_padding=(3,),
)
_add("cls-1d", Cell("Hiera", (256,), ONE_D))
_add("cls-1d-mask-interm", Cell("Hiera", (256,), ONE_D, mask="given", keep=3, intermediates=True))

# video classifier: hiera_base_16x224's configuration at 4x32x32 / 4x64x64
for train in (False, True):
    extra = dict(drop_path_rate=0.2) if train else {}
    mode = "train" if train else "eval"
    _add(f"cls-video-{mode}", Cell("hiera_base_16x224", VID, _kw(num_classes=10, **extra), train=train, override=VIDEO_CLS))
    _add(
        f"cls-video-{mode}-mask-interm",
        Cell(
            "hiera_base_16x224", VID8, _kw(num_classes=10, **extra), train=train, mask="given", keep=3,
            intermediates=True, override=VIDEO_CLS,
        ),
    )
_add("cls-video-q2-interm", Cell("hiera_base_16x224", VID, _kw(num_classes=10, q_pool=2), intermediates=True, override=VIDEO_CLS))

# MAE mask ratios, mask generated inside (same seed before each forward) and given
for ratio in (0.5, 0.6, 0.75, 0.9):
    for mask in ("inside", "given"):
        _add(
            f"mae-tiny-r{ratio}-{mask}",
            Cell("mae_hiera_tiny_224", IMG16, _kw(**MAE_SMALL_DECODER), train=True, mask=mask, mask_ratio=ratio),
        )
_add("mae-tiny-eval", Cell("mae_hiera_tiny_224", IMG, _kw(**MAE_SMALL_DECODER), mask="inside", mask_ratio=0.5))
_add(
    "mae-micro-droppath",
    Cell("MaskedAutoencoderHiera", IMG16, _kw(drop_path_rate=0.2, **MICRO, **MAE_SMALL_DECODER), train=True, mask="inside", mask_ratio=0.75),
)
_add(
    "mae-micro-batch3",
    Cell("MaskedAutoencoderHiera", IMG16, _kw(**MICRO, **MAE_SMALL_DECODER), batch=3, train=True, mask="inside", mask_ratio=0.6),
)
_add(
    "mae-micro-nonsquare",
    Cell("MaskedAutoencoderHiera", (256, 128), _kw(**MICRO, **MAE_SMALL_DECODER), train=True, mask="inside", mask_ratio=0.75),
)
# the MAE factories fix q_pool=2: q_pool 1 and 3 build the class
for q_pool in (1, 2, 3):
    for mask in ("inside", "given"):
        _add(
            f"mae-micro-q{q_pool}-{mask}",
            Cell("MaskedAutoencoderHiera", IMG16, _kw(q_pool=q_pool, **MICRO, **MAE_SMALL_DECODER), train=True, mask=mask, mask_ratio=0.75),
        )
# MAE video: mae_hiera_base_16x224's configuration at 4x64x64 (8 mask units)
for ratio in (0.5, 0.75):
    for mask in ("inside", "given"):
        _add(
            f"mae-video-r{ratio}-{mask}",
            Cell("mae_hiera_base_16x224", VID8, _kw(**MAE_SMALL_DECODER), train=True, mask=mask, mask_ratio=ratio, override=VIDEO_MAE),
        )


@pytest.mark.parametrize("cell", CELLS)
def test_parity_float64(hiera_orig, hiera_new, cell: Cell):
    check_cell(hiera_orig, hiera_new, cell)


F32_CELLS = [
    pytest.param(Cell("hiera_tiny_224", IMG, _kw(num_classes=10)), id="cls-tiny"),
    pytest.param(Cell("hiera_tiny_224", IMG, _kw(num_classes=10, q_pool=2), mask="given", keep=2, intermediates=True), id="cls-tiny-q2-mask-interm"),
    pytest.param(Cell("hiera_base_plus_224", IMG, _kw(num_classes=10)), id="cls-base_plus"),
    pytest.param(Cell("hiera_base_16x224", VID8, _kw(num_classes=10), override=VIDEO_CLS), id="cls-video"),
    pytest.param(Cell("mae_hiera_tiny_224", IMG16, _kw(**MAE_SMALL_DECODER), train=True, mask="inside", mask_ratio=0.6), id="mae-tiny-r0.6-inside"),
    pytest.param(Cell("mae_hiera_base_16x224", VID8, _kw(**MAE_SMALL_DECODER), train=True, mask="inside", mask_ratio=0.75, override=VIDEO_MAE), id="mae-video"),
]


@pytest.mark.parametrize("cell", F32_CELLS)
def test_parity_float32(hiera_orig, hiera_new, cell: Cell):
    worst = check_cell(hiera_orig, hiera_new, cell, dtype=torch.float32, rel_tol=F32_TOL)
    print(f"float32 worst relative errors: {worst}")


# -- mixed states: some files rewritten, the others original -------------------------

MIXED_CELLS = [
    pytest.param(
        Cell("Hiera", IMG, _kw(num_classes=10, drop_path_rate=0.2, **MICRO), train=True, mask="given", keep=2, intermediates=True),
        id="cls",
    ),
    pytest.param(Cell("Hiera", IMG, _kw(num_classes=10, q_pool=2, **MICRO)), id="cls-nomask"),
    pytest.param(
        Cell("MaskedAutoencoderHiera", IMG16, _kw(**MICRO, **MAE_SMALL_DECODER), train=True, mask="inside", mask_ratio=0.75),
        id="mae",
    ),
]


@pytest.mark.parametrize("subset", all_subsets(), ids=lambda s: package_name(s))
@pytest.mark.parametrize("cell", MIXED_CELLS)
def test_parity_mixed_states(upstream, hiera_orig, subset, cell: Cell):
    check_cell(hiera_orig, upstream.package(subset), cell)


# -- the suite is not vacuous --------------------------------------------------------


def test_rewrite_changes_upstream(upstream):
    """hiera.py carries the 5-D attention (HR001); the parity above must compare
    different code, not the same file twice."""
    changes = upstream.changes("hiera.py")
    assert "HR001" in {c.code for c in changes}
    assert upstream.rewritten_bytes("hiera.py") != upstream.original_bytes("hiera.py")


def test_packages_are_distinct(hiera_orig, hiera_new, upstream):
    assert hiera_orig.__name__ == "hiera_orig" and hiera_new.__name__ == "hiera_new"
    assert hiera_orig.Hiera is not hiera_new.Hiera
    new_src = (upstream.root / "hiera_new" / "hiera.py").read_bytes()
    assert new_src != upstream.original_bytes("hiera.py")
    for name in REWRITABLE:  # the copies hold what they claim
        assert (upstream.root / "hiera_new" / name).read_bytes() == upstream.rewritten_bytes(name)
        assert (upstream.root / "hiera_orig" / name).read_bytes() == upstream.original_bytes(name)


def test_harness_catches_a_wrong_model(hiera_orig):
    """The comparison itself fails on a real difference (here: a perturbed weight)."""
    cell = Cell("hiera_tiny_224", IMG, _kw(num_classes=10))
    model_a = build(hiera_orig, cell, torch.float64)
    model_b = build(hiera_orig, cell, torch.float64)
    model_b.load_state_dict(model_a.state_dict())
    with torch.no_grad():
        model_b.blocks[1].attn.qkv.weight[0, 0] += 1e-6
    x, _, _ = _inputs(cell, model_a, torch.float64)
    call = _call(cell)
    with pytest.raises(AssertionError, match="relative error"):
        compare_runs(run_with_grads(model_a, call, (x,), torch), run_with_grads(model_b, call, (x,), torch), torch)
    with pytest.raises(AssertionError, match="relative error"):
        assert_parity_shared(model_a, model_b, call, (x,), torch)


def test_harness_catches_a_wrong_gradient(hiera_orig):
    """A change that leaves every output equal but not a gradient is caught too."""
    cell = Cell("Hiera", IMG, _kw(num_classes=10, **MICRO))
    model_a = build(hiera_orig, cell, torch.float64)
    model_b = build(hiera_orig, cell, torch.float64, randomize=False)
    share_weights(model_a, model_b)
    x, _, _ = _inputs(cell, model_a, torch.float64)

    def scaled_grad(grad):  # identity forward, backward off by 1e-8 relative
        return grad * (1 + 1e-8)

    model_b.blocks[2].attn.proj.weight.register_hook(scaled_grad)
    with pytest.raises(AssertionError, match="blocks.2.attn.proj.weight: gradient relative error"):
        assert_parity_shared(model_a, model_b, _call(cell), (x,), torch)


# -- SDPA sees only 4-D tensors after the rewrite --------------------------------------


def _sdpa_ranks(monkeypatch, pkg, cells):
    import torch.nn.functional as F

    seen = []
    real = F.scaled_dot_product_attention

    def probe(q, k, v, *args, **kwargs):
        seen.append((q.dim(), k.dim(), v.dim()))
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", probe)
    for cell in cells:
        model = build(pkg, cell, torch.float32)
        x, mask, _ = _inputs(cell, model, torch.float32)
        with torch.no_grad():
            _call(cell)(model, *((x,) if mask is None else (x, mask)))
    monkeypatch.setattr(F, "scaled_dot_product_attention", real)
    return seen


SDPA_CELLS = [
    Cell("hiera_tiny_224", IMG, _kw(num_classes=10)),
    Cell("hiera_tiny_224", IMG, _kw(num_classes=10), mask="given", keep=2, intermediates=True),
    Cell("mae_hiera_tiny_224", IMG, _kw(**MAE_SMALL_DECODER), mask="inside", mask_ratio=0.5),
    Cell("hiera_base_16x224", VID, _kw(num_classes=10), override=VIDEO_CLS),
]


def test_rewritten_attention_feeds_sdpa_4d(monkeypatch, hiera_new):
    seen = _sdpa_ranks(monkeypatch, hiera_new, SDPA_CELLS)
    assert len(seen) >= 4 * 12  # every block of every model went through SDPA
    assert set(seen) == {(4, 4, 4)}, sorted(set(seen))


def test_original_attention_feeds_sdpa_5d(monkeypatch, hiera_orig):
    """The same probe sees 5-D q/k/v on the original: the test above can fail."""
    seen = _sdpa_ranks(monkeypatch, hiera_orig, SDPA_CELLS)
    assert (5, 5, 5) in set(seen)


# -- higher-order autograd: the documented limit of the fused kernels and its way out --


def _input_gradient_penalty(model, x, mask):
    """A gradient penalty (WGAN-GP/R1 style): backward through d(out)/dx, create_graph."""
    x = x.detach().clone().requires_grad_(True)
    out = model(x, mask=mask, return_intermediates=True)
    loss = sum((t * torch.linspace(0.5, 1.5, t.numel(), dtype=t.dtype).view(t.shape)).sum() for t in _leaves(out))
    (grad_x,) = torch.autograd.grad(loss, x, create_graph=True)
    penalty = (grad_x**2).sum()
    penalty.backward()
    return [grad_x.detach(), penalty.detach()] + [p.grad for p in model.parameters() if p.grad is not None]


def _leaves(value):
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_double_backward_needs_the_math_backend(hiera_orig, hiera_new):
    """README: the fused SDPA kernels the rewritten attention reaches (CPU flash here) have
    no double backward, where the original's 5-D input ran the math backend.  Under
    ``sdpa_kernel(SDPBackend.MATH)`` the rewritten model gives the original's gradient
    penalty: its input gradient, the penalty and every parameter gradient."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cell = Cell("Hiera", IMG16, _kw(num_classes=10, **MICRO), mask="given", keep=5)
    model_a = build(hiera_orig, cell, torch.float64)
    model_b = build(hiera_new, cell, torch.float64, randomize=False)
    share_weights(model_a, model_b)
    x, mask, _ = _inputs(cell, model_a, torch.float64)
    expected = _input_gradient_penalty(model_a, x, mask)
    with pytest.raises(RuntimeError, match="derivative for .* is not implemented"):
        _input_gradient_penalty(model_b, x, mask)  # if this starts passing, update README
    model_b.zero_grad(set_to_none=True)
    with sdpa_kernel(SDPBackend.MATH):
        got = _input_gradient_penalty(model_b, x, mask)
    assert len(got) == len(expected)
    for a, b in zip(expected, got):
        assert max_rel_error(a, b, torch) <= F64_TOL
