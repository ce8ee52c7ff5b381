"""Look-alike: attention across windows (permute (3, 0, 4, 1, 2, 5)) - left alone."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CrossWindowAttention(nn.Module):
    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 1, 2, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 3).reshape(B, -1, C)
        return x
