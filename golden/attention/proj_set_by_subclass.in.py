"""Golden: a subclass in the file sets its own proj (an in-place ReLU first); its
instances run the base's forward. The restored output gets .clone(): the fused kernel's
output is saved for backward (without it, backward raised "modified by an inplace
operation"). A class of the file unrelated to the attention may have a proj of its own."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class WindowAttention(nn.Module):
    def __init__(self, dim, dim_out, heads, q_stride=1, window_size=4, windowed=True):
        super().__init__()
        self.heads, self.q_stride, self.dim_out = heads, q_stride, dim_out
        self.head_dim = dim_out // heads
        self.window_size, self.windowed = window_size, windowed
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)

    def forward(self, x):
        B, N, _ = x.shape
        num_windows = N // (self.q_stride * self.window_size) if self.windowed else 1
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.q_stride > 1:
            q = q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim).max(dim=3).values
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 3).reshape(B, -1, self.dim_out)
        return self.proj(x)


class RectifiedAttention(WindowAttention):
    def __init__(self, dim, dim_out, heads, **kw):
        super().__init__(dim, dim_out, heads, **kw)
        self.proj = nn.Sequential(nn.ReLU(inplace=True), nn.Linear(dim_out, dim_out))


class Embed(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x)


def golden_example():
    # the subclass in a global stage (one window): there the 4-D restore is a view of the kernel's output
    model = nn.Sequential(Embed(8), WindowAttention(8, 16, 2, q_stride=4, window_size=2), RectifiedAttention(16, 16, 4, windowed=False))
    return model.double(), (torch.randn(3, 32, 8, dtype=torch.float64),)
