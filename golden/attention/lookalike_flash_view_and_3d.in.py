"""Look-alikes that stay, each reported with the construct and its line: a flash-attention
path that views the 5-D q/k/v as (B, heads, -1, head_dim) (windows merged into the
sequence), and SDPA over 3-D reshapes (windows and heads merged into the batch)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class FlashPath(nn.Module):
    def __init__(self, dim, heads, window_size=4, use_flash=True):
        super().__init__()
        self.heads, self.window_size, self.use_flash = heads, window_size, use_flash
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q.reshape(B, self.heads, -1, self.head_dim)
        k = k.reshape(B, self.heads, -1, self.head_dim)
        v = v.reshape(B, self.heads, -1, self.head_dim)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.view(B, self.heads, num_windows, -1, self.head_dim)
        x = x.transpose(1, 3).reshape(B, -1, C)
        return x


class ThreeD(nn.Module):
    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(
            q.reshape(-1, q.shape[-2], self.head_dim), k.reshape(-1, k.shape[-2], self.head_dim), v.reshape(-1, v.shape[-2], self.head_dim)
        )
        x = x.view(B, self.heads, num_windows, -1, self.head_dim).transpose(1, 3).reshape(B, -1, C)
        return x
