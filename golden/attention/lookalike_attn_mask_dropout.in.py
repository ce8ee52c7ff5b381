"""Look-alike: SDPA with an attn_mask built in the call (a name, or `name if C else None`,
is brought to 4-D: golden/attention/attn_mask_5d), or a dropout that may be non-zero - left alone."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MaskedAttention(nn.Module):
    def __init__(self, dim, heads, window_size=4, drop=0.1):
        super().__init__()
        self.heads, self.window_size, self.drop = heads, window_size, drop
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, bias):
        B, N, C = x.shape
        num_windows = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[:, None])
        x = x.transpose(1, 3).reshape(B, -1, C)
        return x


class DropoutAttention(MaskedAttention):
    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.drop if self.training else 0.0)
        x = x.transpose(1, 3).reshape(B, -1, C)
        return x
