"""Pools next to in-place ops that cannot reach them before backward: rewritten.

The pooled tensor is only used out of place, is rebound before an in-place op, is
modified in place only before the pool, or reaches a caller (returned: then it is
cloned, and the caller below modifies it in place)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def do_pool(x: torch.Tensor, stride: int) -> torch.Tensor:
    return x.view(x.shape[0], stride, -1, x.shape[-1]).amax(dim=1).clone()


def double(t):
    return t * 2


class QPool(nn.Module):
    """q-pool, scaled out of place, and SDPA."""

    def __init__(self, dim=8, heads=2, q_stride=2):
        super().__init__()
        self.heads, self.q_stride = heads, q_stride
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q.view(B, self.heads, self.q_stride, -1, C // self.heads).amax(dim=2)
        q = q * self.scale
        x = F.scaled_dot_product_attention(q, k, v, scale=1.0)
        return x.transpose(1, 2).reshape(B, -1, C)


class Rebound(nn.Module):
    """`x += 1` after `x` names another tensor; in-place ops before the pool."""

    def __init__(self, dim=8):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, flag: bool = True):
        h = self.proj(x)
        h.mul_(2.0)
        if flag:
            y = h.view(h.shape[0], 2, -1, h.shape[-1]).amax(1)
        else:
            y = h[:, ::2]
        y = F.gelu(y)
        y = self.norm(y)
        y += 1.0
        out = torch.zeros_like(h[:, ::2])
        p = h.view(h.shape[0], 2, -1, h.shape[-1]).amax(dim=1)
        out.add_(p)
        return y * 3 + out + double(p) + p


class Loop(nn.Module):
    def forward(self, x):
        for _ in range(2):
            x = x.view(x.shape[0], 2, -1, x.shape[-1]).amax(dim=1)
            x = x + 1.0
            x *= 2.0
        return x


class Caller(nn.Module):
    """Modifies in place what do_pool returns: safe, as do_pool clones it."""

    def __init__(self, dim=8):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        x = do_pool(self.proj(x), stride=2)
        x += 1.0
        x.mul_(3.0)
        return x


class Returned(nn.Module):
    """Returns a view of the pooled tensor: the caller may modify it in place."""

    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).amax(dim=1).clone()
        return y.transpose(1, 2)


class All(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.parts = nn.ModuleList([QPool(), Rebound(), Loop(), Caller(), Returned()])

    def forward(self, x):
        x = self.lin(x)
        outs = [part(x) for part in self.parts]
        outs[-1].mul_(0.5)  # in place on what Returned returned
        return outs


def golden_example():
    return All().double(), (torch.randn(2, 8, 8, dtype=torch.float64),)
