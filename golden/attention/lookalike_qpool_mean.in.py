"""Look-alike: a fork pools q by its mean (an average pool), under a comment.

Not the max the 4-D layout keeps: left alone, and the reason quotes the statement on
one line (the comment above it is not part of the quote)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class AvgPoolAttention(nn.Module):
    def __init__(self, dim, heads, q_stride=2, window_size=4):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.q_stride > 1:
            # average-pool the queries over the stride
            q = (
                q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim)
                .mean(dim=3)
            )
        x = F.scaled_dot_product_attention(q, k, v)
        return x.transpose(1, 3).reshape(B, -1, C)
