"""HR001 brings SDPA's attn_mask from the 5-D layout to the 4-D one exactly: for every
shape that broadcasts against (B, heads, num_windows, Tq, Tk) (each dim 1 or full, 0 to
5 dims), bool and float, with fully masked rows, the rewritten module gives the
original's outputs and input gradients (float64, CPU).  The code compared is what the
tool emits for a small module."""

from __future__ import annotations

import itertools
import types

import pytest

from hiera_rewrite.engine import rewrite_bytes

torch = pytest.importorskip("torch")

SOURCE = b'''import torch
import torch.nn as nn
import torch.nn.functional as F


class MaskedWindows(nn.Module):
    def __init__(self, dim, heads, num_windows):
        super().__init__()
        self.heads, self.num_windows, self.head_dim = heads, num_windows, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, mask):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, self.num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x.transpose(1, 3).reshape(B, -1, C)
'''

B, HEADS, WINDOWS, T = 2, 2, 3, 4
FULL = (B, HEADS, WINDOWS, T, T)


def _module(source: bytes) -> types.ModuleType:
    module = types.ModuleType("masked_windows")
    exec(compile(source, "masked_windows", "exec"), module.__dict__)
    return module


def _shapes():
    for ndim in range(0, 6):
        for ones in itertools.product((True, False), repeat=ndim):
            yield tuple(1 if one else size for one, size in zip(ones, FULL[5 - ndim :]))


@pytest.fixture(scope="module")
def modules():
    result = rewrite_bytes(SOURCE)
    assert result.output != SOURCE and [r.code for r in result.reports] == ["HR001"]
    assert b"attn_mask=mask)" not in result.output  # the mask is converted, not passed as is
    return _module(SOURCE), _module(result.output)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_every_broadcast_shape(modules, kind):
    before, after = modules
    generator = torch.Generator().manual_seed(0)
    checked = 0
    for shape in _shapes():
        keep = torch.rand(shape, generator=generator) > 0.4
        if len(shape) and shape[-1] == T:
            keep[..., 1:] = keep[..., 1:] & (torch.rand(shape[:-1] + (1,), generator=generator) > 0.3)
            keep.view(-1, T)[0] = False  # a fully masked row
        mask = keep if kind == "bool" else torch.where(keep, 0.0, float("-inf")).double()
        torch.manual_seed(1)
        model_a = before.MaskedWindows(8, HEADS, WINDOWS).double()
        model_b = after.MaskedWindows(8, HEADS, WINDOWS).double()
        model_b.load_state_dict(model_a.state_dict())
        x = torch.randn(B, T * WINDOWS, 8, dtype=torch.float64, generator=generator)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out_a, out_b = model_a(xa, mask), model_b(xb, mask)
        torch.testing.assert_close(out_b, out_a, rtol=1e-10, atol=1e-12, equal_nan=True, msg=lambda m: f"{shape}: {m}")
        weights = torch.linspace(0.5, 1.5, out_a.numel(), dtype=torch.float64).view(out_a.shape)
        (out_a.nan_to_num() * weights).sum().backward()
        (out_b.nan_to_num() * weights).sum().backward()
        torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-10, atol=1e-12, equal_nan=True, msg=lambda m: f"{shape}: {m}")
        for (name, pa), (_, pb) in zip(model_a.named_parameters(), model_b.named_parameters()):
            torch.testing.assert_close(pb.grad, pa.grad, rtol=1e-10, atol=1e-12, equal_nan=True, msg=lambda m: f"{shape} {name}: {m}")
        checked += 1
    assert checked == sum(2**n for n in range(6))


def test_none_passes_through(modules):
    before, after = modules
    torch.manual_seed(1)
    model_a = before.MaskedWindows(8, HEADS, WINDOWS).double()
    model_b = after.MaskedWindows(8, HEADS, WINDOWS).double()
    model_b.load_state_dict(model_a.state_dict())
    x = torch.randn(B, T * WINDOWS, 8, dtype=torch.float64)
    torch.testing.assert_close(model_b(x, None), model_a(x, None), rtol=1e-10, atol=1e-12)
