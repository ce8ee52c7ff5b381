"""Golden: a forward pre-hook registered in the file (a head ablation) that writes the
proj's input in place. The restored output gets .clone(): the fused kernel's output is
saved for backward (without it, backward raised "modified by an inplace operation")."""
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


def ablate_first_channels(module, args):
    args[0][..., :2] = 0.0


def golden_example():
    # a global stage (one window): there the 4-D restore is a view of the kernel's output
    last = WindowAttention(16, 16, 4, windowed=False)
    last.proj.register_forward_pre_hook(ablate_first_channels)
    model = nn.Sequential(WindowAttention(8, 16, 2, q_stride=4, window_size=2), last)
    return model.double(), (torch.randn(3, 32, 8, dtype=torch.float64),)
