"""Look-alike next to already-rewritten code: the 4-D attention (HR001's own output)
is quiet, the 5-D attention after it, fed by the same names, keeps its reason."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class HalfRewritten(nn.Module):
    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, mask):
        B, N, C = x.shape
        nw = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, nw, 3, self.heads, self.head_dim).permute(3, 0, 2, 4, 1, 5).flatten(2, 3)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        y = y.transpose(1, 2).reshape(B, -1, C)
        qkv = self.qkv(y).reshape(B, -1, nw, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        return z.transpose(1, 3).reshape(B, -1, C)
