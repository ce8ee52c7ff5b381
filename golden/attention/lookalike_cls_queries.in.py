"""Look-alike: per-window CLS queries.  The CLS tokens' q is expanded over the windows
and concatenated to q, SDPA runs on (q_full, k, v), and the CLS part of the output is
averaged over the windows.  Not rewritten (the CLS q, the concatenation and the
average over windows would all have to change layout); the refusal names the line."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ClsQueryAttention(nn.Module):
    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.cls_q = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cls):
        B, N, C = x.shape
        num_windows = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        cls_q = self.cls_q(cls).reshape(B, self.heads, 1, 1, self.head_dim).expand(-1, -1, num_windows, -1, -1)
        q_full = torch.cat([cls_q, q], dim=-2)
        out = F.scaled_dot_product_attention(q_full, k, v)
        cls = out[..., :1, :].mean(dim=2).transpose(1, 2).reshape(B, 1, C)
        x = out[..., 1:, :].transpose(1, 3).reshape(B, -1, C)
        return self.proj(torch.cat([cls, x], dim=1))
