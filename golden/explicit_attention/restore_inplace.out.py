"""Explicit attention whose restored output is modified in place (or may be).

HR006 restores SDPA's 4-D output by `.unflatten(0, (B, -1)).permute(0, 3, 1, 2, 4)
.reshape(...)`: a view of it where num_windows (or the pooled tokens) is 1, global
attention, and SDPA's fused and CPU flash kernels save their output for backward. An
in-place op on the restored tensor would then make backward raise where the original
ran, so it gets `.clone()`; with nothing that can modify it, no clone."""
import torch
import torch.nn as nn


class GlobalOrWindowed(nn.Module):
    def __init__(self, dim, heads, window_size=0):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.out_bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim))

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // self.window_size if self.window_size else 1
        if not isinstance(self.scale, (int, float)):
            # a tensor scale (not a Python number): the explicit 5-D attention, unchanged
            qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
            q, k, v = qkv.unbind(0)
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
            x = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, scale=self.scale
            )
            x = x.unflatten(0, (B, -1)).permute(0, 3, 1, 2, 4).reshape(B, -1, C).clone()
        x.add_(self.out_bias)
        return self.proj(x)


class OutOfPlace(GlobalOrWindowed):
    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // self.window_size if self.window_size else 1
        if not isinstance(self.scale, (int, float)):
            # a tensor scale (not a Python number): the explicit 5-D attention, unchanged
            qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
            q, k, v = qkv.unbind(0)
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
            x = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, scale=self.scale
            )
            x = x.unflatten(0, (B, -1)).permute(0, 3, 1, 2, 4).reshape(B, -1, C)
        return self.proj(x + self.out_bias)


def golden_example():
    model = nn.Sequential(GlobalOrWindowed(8, 2), GlobalOrWindowed(8, 2, window_size=4), OutOfPlace(8, 2))
    return model.double(), (torch.randn(2, 16, 8, dtype=torch.float64),)
