"""HR001's 4-D SDPA call reads an attn_mask as the original's 5-D call read it, in the
dtypes people train in (issue 29 class 8, issue 30 item 3; CPU).

The 5-D original always ran SDPA's math backend; the 4-D call reaches CPU's flash
kernel, which misreads a floating mask whose dtype is not q's (float64 q with a float32
mask: errors of order 1).  For every module whose SDPA gets a mask (the goldens that
pass one, and a fork's attention that builds its additive mask in the default dtype,
float32, with torch.zeros/ones: -inf where padded, finite values elsewhere), with
weights and inputs in float32, bfloat16 and float64 and masks bool, float32 and in q's
dtype, the original and the rewritten are each compared with a float64 run of the
original on the same weights, inputs and mask values: outputs, parameter gradients and
the input's gradient.  The rewritten's error must be at most twice the original's plus
four ulps of the dtype (times the reference's largest magnitude).
"""

from __future__ import annotations

import copy
import types
from pathlib import Path

import pytest

from hiera_rewrite.engine import rewrite_bytes
from tests.parity_tools import run_with_grads

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("torch_one_thread")

GOLDEN = Path(__file__).resolve().parent.parent / "golden"

FORK = b'''import torch
import torch.nn as nn
import torch.nn.functional as F


class ForkAttention(nn.Module):
    """A fork's padding-aware attention: its additive mask is built here in the default
    dtype (float32), whatever the model's dtype."""

    def __init__(self, dim, heads, q_stride=1, window_size=4, use_mask_unit_attn=False):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.use_mask_unit_attn = use_mask_unit_attn
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, keep):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size) if self.use_mask_unit_attn else 1
        bias = torch.zeros(B, N).masked_fill(~keep, float("-inf")) - 0.3 * (torch.ones(B, N).cumsum(-1) % 3)
        bias = bias.reshape(B, -1, num_windows).permute(0, 2, 1)[:, None, :, None, :]
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        if self.q_stride > 1:
            q = q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim).max(dim=3).values
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x.transpose(1, 3).reshape(B, -1, C)
        return self.proj(x)
'''

B, N, DIM = 2, 64, 8
# Math's safe softmax (torch >= 2.5) gives fully masked rows zeros, as the fused kernels
# do; before, it gave NaN (README: such rows may differ there).
FULLY_MASKED = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)

# Goldens whose SDPA gets an attn_mask: the blocks to build (class name, arguments) and
# the padding mask `keep` (B, N) they get, True where a token is real.
GOLDEN_BLOCKS = {
    "attention/attn_mask_5d": (
        [
            ("PaddedMaskUnitAttention", (DIM, DIM, 2), dict(use_mask_unit_attn=False)),
            ("EveryBlockMaskAttention", (DIM, DIM, 2), dict(q_stride=2, window_size=4, use_mask_unit_attn=True)),
            ("EveryBlockMaskAttention", (DIM, DIM, 2), dict(window_size=2, use_mask_unit_attn=True)),
            ("EveryBlockMaskAttention", (DIM, DIM, 2), dict(use_mask_unit_attn=False)),
            ("FusedFlagMaskAttention", (DIM, DIM, 2), dict(window_size=2, use_mask_unit_attn=True)),
            ("FusedFlagMaskAttention", (DIM, DIM, 2), dict(use_mask_unit_attn=False)),
        ],
        lambda module: module._keep(B, N, 4, 20, FULLY_MASKED),
    ),
    "attention/branches_key_padding": (
        [
            ("PaddedAttention", (DIM, 2), dict(q_stride=2, window_size=4)),
            ("PaddedAttention", (DIM, 2), dict(windowed=False)),
            ("NegatedPaddedAttention", (DIM, 2), dict(window_size=2)),
            ("NegatedPaddedAttention", (DIM, 2), dict(windowed=False)),
        ],
        lambda module: module._keep(B, N),
    ),
}
GOLDEN_BLOCKS["attention/branches_guarded_fallback"] = (
    [
        ("GuardedPaddedAttention", (DIM, 2), dict(q_stride=2, window_size=4)),
        ("GuardedPaddedAttention", (DIM, 2), dict(windowed=False)),
    ],
    lambda module: module._keep(B, N),
)
FORK_BLOCKS = [
    ("ForkAttention", (DIM, 2), dict(use_mask_unit_attn=False)),
    ("ForkAttention", (DIM, 2), dict(q_stride=2, window_size=4, use_mask_unit_attn=True)),
]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}
# (input dtype, mask kind): bool, float32, and q's dtype where that is another
# float32_min: a float32 mask padded with torch.finfo(torch.float32).min, as Hugging Face
# builds one (hunt 5): a row padded entirely gets uniform weights from the math backend
# (the padding swamps the logits); a cast to bf16 makes it -inf, CPU's flash kernel
# loses such rows in its backward (float64: gradients off by 2e5)
CELLS = [
    (d, m) for d in DTYPES for m in ("bool", "float32", "q", "float32_min") if not (m == "q" and d == "float32")
]


def _module(source: bytes, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def builds():
    """{name: (original module, rewritten module, blocks, keep)}; the goldens' rewritten
    side is their .out.py (test_golden.py checks it is what the tool emits)."""
    result = {}
    for name, (blocks, keep) in GOLDEN_BLOCKS.items():
        source = (GOLDEN / f"{name}.in.py").read_bytes()
        before = _module(source, name.replace("/", "_") + "_in")
        after = _module((GOLDEN / f"{name}.out.py").read_bytes(), name.replace("/", "_") + "_out")
        result[name] = (before, after, blocks, keep(before))
    rewritten = rewrite_bytes(FORK)
    assert [r.code for r in rewritten.reports if r.applied] == ["HR001"], [r.message for r in rewritten.reports]
    keep = torch.ones(B, N, dtype=torch.bool)
    keep[0, 40:] = False
    if FULLY_MASKED:
        keep[1].view(-1, 8)[:, 3] = False  # clip 1: mask unit 3 of 8 is all padding (fully masked rows)
    result["fork"] = (_module(FORK, "fork_in"), _module(rewritten.output, "fork_out"), FORK_BLOCKS, keep)
    return result


def test_every_golden_with_a_mask_is_in_the_matrix():
    """A golden whose rewritten SDPA converts an attn_mask must be listed above."""
    with_mask = {
        str(path.relative_to(GOLDEN)).replace(".out.py", "")
        for path in GOLDEN.rglob("*.out.py")
        if b"attn_mask=" in path.read_bytes() and b".is_floating_point()" in path.read_bytes()
    }
    assert with_mask == set(GOLDEN_BLOCKS)


def _mask(keep, kind, dtype):
    """bool, or additive: -inf where padded, finite values not all exact in bfloat16."""
    if kind == "bool":
        return keep
    if kind == "float32_min":
        return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    bias = torch.where(keep, -0.3 * (torch.arange(N, dtype=torch.float64) % 3), float("-inf"))
    return bias.to(torch.float32 if kind == "float32" else dtype)


def _run(block, x, mask):
    """Output, parameter and input gradients (the mask is not a leaf: a mask that
    requires grad would change SDPA's kernel choice)."""
    outputs, grads, (x_grad,) = run_with_grads(block, lambda model, x: model(x, mask), (x,), torch)
    return {"output": outputs[0], "input grad": x_grad, **{f"{n} grad": g for n, g in grads.items()}}


def _errors(build, block, dtype, mask):
    """Each tensor's max error, the original's and the rewritten's, against a float64
    run of the original on the same (rounded) weights, inputs and mask values."""
    before, after, _, _ = build
    cls, args, kwargs = block
    torch.manual_seed(0)
    block_a = getattr(before, cls)(*args, **kwargs).to(dtype)
    block_b = getattr(after, cls)(*args, **kwargs).to(dtype)
    block_b.load_state_dict(block_a.state_dict())
    reference = copy.deepcopy(block_a).double()
    x = torch.randn(B, N, DIM, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
    ref = _run(reference, x.double(), mask.double() if mask.is_floating_point() else mask)
    got_a, got_b = _run(block_a, x, mask), _run(block_b, x, mask)
    assert ref.keys() == got_a.keys() == got_b.keys()
    for key, r in ref.items():
        assert torch.isfinite(r).all(), f"{cls}{kwargs} {key}: the reference is not finite"
        err_a = (got_a[key].double() - r).abs().max().item()
        err_b = (got_b[key].double() - r).abs().max().item()
        yield key, err_a, err_b, r.abs().max().item()


def _check(build, dtype, mask_kind):
    """Every block of ``build``: the rewritten's error <= 2 * the original's + 4 ulps.
    ``mask_kind`` None: the block gets ``keep`` and builds its own mask."""
    _, _, blocks, keep = build
    mask = keep if mask_kind is None else _mask(keep, mask_kind, dtype)
    eps = torch.finfo(dtype).eps
    failures = []
    for block in blocks:
        for key, err_a, err_b, scale in _errors(build, block, dtype, mask):
            bound = 2 * err_a + 4 * eps * scale
            if not err_b <= bound:
                failures.append(f"{block[0]}{block[2]} {key}: rewritten error {err_b:.3g} > {bound:.3g} (original {err_a:.3g})")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype,mask", CELLS, ids=[f"{d}-{m}_mask" for d, m in CELLS])
@pytest.mark.parametrize("golden", sorted(GOLDEN_BLOCKS))
def test_golden_masks_every_dtype(builds, golden, dtype, mask):
    _check(builds[golden], DTYPES[dtype], mask)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fork_float32_mask_every_dtype(builds, dtype):
    """The fork's mask is float32 whatever the model's dtype (float64 here is the case
    CPU's flash kernel misreads when the mask reaches it as it is)."""
    _check(builds["fork"], DTYPES[dtype], None)


@pytest.mark.parametrize("mask", ["bool", "float32"])
def test_converted_mask_compiles_fullgraph(builds, mask):
    """The emitted conversion traces with dynamo, fullgraph=True (bool and float branch)."""
    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()
    _, after, _, keep = builds["attention/attn_mask_5d"]
    torch.manual_seed(0)
    block = after.EveryBlockMaskAttention(DIM, DIM, 2, q_stride=2, window_size=4, use_mask_unit_attn=True).double()
    x = torch.randn(B, N, DIM, dtype=torch.float64)
    attn_mask = _mask(keep, mask, torch.float64)
    compiled = torch.compile(block, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, attn_mask), block(x, attn_mask), rtol=1e-12, atol=1e-12)
    dynamo.reset()
