"""The restored attention output modified in place (or handed to code that may).

The 5-D restore `x.transpose(1, 3).reshape(...)` copies SDPA's output; the 4-D one is
a view of it where the kernel writes (B, Tq, heads, head_dim) order (CPU's flash
kernel, the fused CUDA kernels), and those save their output for backward: an
in-place op on the restored tensor would make backward raise.  Where one can reach
it, the restore gets `.clone()`; where none can (an nn.Linear set by a base class of
this file), it does not."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class OutputBias(nn.Module):
    """A fork's output bias, added in place after the restore."""

    def __init__(self, dim, heads, q_stride=1, window_size=4):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.out_bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim))

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        qkv = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        if self.q_stride > 1:
            q = q.unflatten(2, (self.q_stride, -1)).max(dim=2).values
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, -1, C).clone()
        x += self.out_bias
        return self.proj(x)


class Inherited(OutputBias):
    """proj is the base class's nn.Linear, which leaves its input alone: no clone."""

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        qkv = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, -1, C)
        return self.proj(x)


class ClampInPlace(nn.Module):
    def forward(self, x):
        return x.clamp_(-1e6, 1e6)


class CustomProjection(OutputBias):
    """proj is a module of the fork's own: it may modify its input in place (it does)."""

    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, **kwargs)
        self.proj = nn.Sequential(ClampInPlace(), nn.Linear(dim, dim))

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        qkv = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, -1, C).clone()
        return self.proj(x)


class Returned(OutputBias):
    """The restore is returned; the caller below scales it in place (a LayerScale)."""

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        qkv = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return x.transpose(1, 2).reshape(B, -1, C).clone()


from torch.utils.checkpoint import checkpoint


class Checkpointed(OutputBias):
    """The restore goes through activation checkpointing of a method that scales its
    argument in place: torch.utils.checkpoint runs the fork's code on it."""

    def scale_(self, t):
        return t.mul_(0.5)

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        qkv = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, -1, C).clone()
        x = checkpoint(self.scale_, x, use_reentrant=False)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, attn, dim):
        super().__init__()
        self.attn = attn
        self.gamma = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        y = self.attn(x)
        y.mul_(self.gamma)
        return x + y


def golden_example():
    model = nn.Sequential(
        OutputBias(8, 2, q_stride=2, window_size=2),
        Inherited(8, 2, window_size=2),
        CustomProjection(8, 4, window_size=4),
        Block(Returned(8, 2, window_size=2), 8),
        Block(Returned(8, 2, window_size=16), 8),
        Checkpointed(8, 2, window_size=16),
    )
    return model.double(), (torch.randn(2, 32, 8, dtype=torch.float64),)
