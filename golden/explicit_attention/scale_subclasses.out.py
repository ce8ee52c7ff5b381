"""Golden: subclasses in the same file replace the scale of an explicit attention.

The base class scales by a Python number.  A fork's subclasses swap in a per-head
learnable temperature (a Parameter set in __init__, or a property), or a 0-d tensor.
SDPA's scale= takes a number only, and a tensor scale broadcasts against the 5-D
(B, heads, num_windows, T, head_dim) dims, which the 4-D layout orders differently: the
rewrite checks `isinstance(self.scale, (int, float))` at run time and keeps the explicit
5-D attention where it fails."""
import torch
import torch.nn as nn


class WindowAttention(nn.Module):
    def __init__(self, dim, heads, q_stride=1, window_size=4):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        if not isinstance(self.scale, (int, float)):
            # a tensor scale (not a Python number): the explicit 5-D attention, unchanged
            qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
            q, k, v = qkv.unbind(0)
            if self.q_stride > 1:
                q = q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim).amax(dim=3)
            attn = (q * self.scale) @ k.transpose(-1, -2)
            attn = attn.softmax(dim=-1)
            x = attn @ v
            x = x.transpose(1, 3).reshape(B, -1, C)
        else:
            # 4-D q/k/v (batch*windows, heads, tokens, head_dim): SDPA runs a fused kernel
            qkv = (
                self.qkv(x)
                .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
                .permute(3, 0, 2, 4, 1, 5)
                .flatten(1, 2)
            )
            q, k, v = qkv.unbind(0)
            if self.q_stride > 1:
                q = q.unflatten(2, (self.q_stride, -1)).max(dim=2).values
            x = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, scale=self.scale
            )
            x = x.unflatten(0, (B, -1)).permute(0, 3, 1, 2, 4).reshape(B, -1, C)
        return self.proj(x)


class LearnedTemperature(WindowAttention):
    """A per-head temperature: (heads, 1, 1, 1) against (B, heads, num_windows, T, D)."""

    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, **kwargs)
        self.scale = nn.Parameter(torch.linspace(0.5, 2.0, heads).view(heads, 1, 1, 1) * self.head_dim**-0.5)


class WindowTemperature(WindowAttention):
    """(heads, 1, 1) lines up with (num_windows, T, D): per window, where heads == num_windows."""

    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, **kwargs)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, heads).view(heads, 1, 1))


class PropertyScale(WindowAttention):
    """The scale is computed from a parameter on every read."""

    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, **kwargs)
        self.log_temperature = nn.Parameter(torch.linspace(-0.5, 0.5, heads).view(heads, 1, 1, 1))

    @property
    def scale(self):
        return self.log_temperature.exp() * self.head_dim**-0.5

    @scale.setter
    def scale(self, value):
        pass  # the base class's number is not used


class ZeroDimScale(WindowAttention):
    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, **kwargs)
        self.scale = torch.tensor(0.3, dtype=torch.float64)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            [
                WindowAttention(8, 2, q_stride=2, window_size=4),
                LearnedTemperature(8, 2, q_stride=2, window_size=4),
                WindowTemperature(8, 2, window_size=8),
                PropertyScale(8, 2, q_stride=2, window_size=2),
                ZeroDimScale(8, 2),
            ]
        )

    def forward(self, x):
        outs = []
        for block in self.blocks:
            outs.append(block(x))
        return tuple(outs)


def golden_example():
    return Stack().double(), (torch.randn(2, 16, 8, dtype=torch.float64),)
