"""Golden: annotated assignments on every idiom line."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class Attention(nn.Module):
    def __init__(self, dim, heads, q_stride=1, window_size=2):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape
        num_windows: int = N // (self.q_stride * self.window_size)
        qkv: Tensor = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q: Tensor
        k: Tensor
        v: Tensor
        q, k, v = qkv.unbind(dim=0)
        if self.q_stride > 1:
            q: Tensor = q.unflatten(2, (self.q_stride, -1)).max(dim=2).values
        out: Tensor = F.scaled_dot_product_attention(q, k, v)
        y: Tensor = out.transpose(1, 2).reshape(B, -1, C)
        return self.proj(y)


def golden_example():
    model = nn.Sequential(Attention(8, 2, q_stride=2, window_size=4), Attention(8, 2, window_size=8))
    return model.double(), (torch.randn(2, 32, 8, dtype=torch.float64),)
