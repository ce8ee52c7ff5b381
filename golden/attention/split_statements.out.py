"""Golden: reshape, permute, unpack, pool and restore as separate statements."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, q_stride=1, window_size=2):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        projected = self.qkv(x)
        qkv6 = projected.view(B, -1, num_windows, 3, self.heads, self.head_dim)
        qkv = qkv6.permute(3, 0, 2, 4, 1, 5).flatten(2, 3)
        q = qkv[0]
        k = qkv[1]
        v = qkv[2]
        if self.q_stride > 1:
            q = q.unflatten(2, (self.q_stride, -1)).max(dim=2).values
        out = F.scaled_dot_product_attention(q, k, v)
        merged = out.transpose(1, 2).reshape(B, -1, C)
        return self.proj(merged)


class SameNameSplit(Attention):
    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
        qkv = qkv.permute(3, 0, 2, 4, 1, 5).flatten(2, 3)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, -1, C)
        return self.proj(x)


def golden_example():
    model = nn.Sequential(Attention(8, 2, q_stride=4, window_size=2), SameNameSplit(8, 2, window_size=4))
    return model.double(), (torch.randn(2, 32, 8, dtype=torch.float64),)
