"""Golden: an early return; the dead debugging code after it reads q and is left alone."""
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
        x = x.transpose(1, 2).reshape(B, -1, C)
        return self.proj(x)
        print("q norm", q.norm(), qkv.shape)  # unreachable
        return x


def golden_example():
    model = nn.Sequential(Attention(8, 2, q_stride=4, window_size=2), Attention(8, 2, window_size=4))
    return model.double(), (torch.randn(2, 32, 8, dtype=torch.float64),)
