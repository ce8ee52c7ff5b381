"""Look-alike: SDPA's attn_mask is brought to 4-D, but the kept manual fallback adds it to
logits scaled by self.scale, which a subclass may make a tensor: the fallback would run on
5-D views and need the 5-D mask - left alone.  So is a mask added under an `if` there."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class FallbackScaleMask(nn.Module):
    def __init__(self, dim, heads, window_size=4, fused=True):
        super().__init__()
        self.heads, self.window_size, self.fused = heads, window_size, fused
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, attn_mask):
        B, N, C = x.shape
        num_windows = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        else:
            attn = (q * self.scale) @ k.transpose(-1, -2)
            attn = attn + attn_mask
            attn = attn.softmax(dim=-1)
            x = attn @ v
        x = x.transpose(1, 3).reshape(B, -1, C)
        return x


class FallbackMaskUnderIf(FallbackScaleMask):
    def forward(self, x, attn_mask=None):
        B, N, C = x.shape
        num_windows = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        else:
            attn = (q * 0.5) @ k.transpose(-1, -2)
            if attn_mask is not None:
                attn = attn + attn_mask
            x = attn.softmax(dim=-1) @ v
        x = x.transpose(1, 3).reshape(B, -1, C)
        return x
