"""Golden: windowed 5-D path under `if C:` next to a global 4-D path, SDPA or a
manual attention under a fused flag, and the output restored under `if C:` again."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BranchyAttention(nn.Module):
    def __init__(self, dim, heads, q_stride=1, window_size=2, windowed=True, fused=True):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.windowed, self.fused = windowed, fused
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        if self.windowed:
            num_windows = N // (self.q_stride * self.window_size)
            qkv = (
                self.qkv(x)
                .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
                .permute(3, 0, 2, 4, 1, 5)
                .flatten(2, 3)
            )
            q, k, v = qkv.unbind(0)
            if self.q_stride > 1:
                q = q.unflatten(2, (self.q_stride, -1)).amax(dim=2)
        else:
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            if self.q_stride > 1:
                q = q.view(B, self.heads, self.q_stride, -1, self.head_dim).amax(dim=2)

        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            if self.windowed and not isinstance(self.scale, (int, float)):
                # a tensor scale broadcasts against the 5-D dims (B, heads, num_windows, T, D):
                # run the manual attention on 5-D views, as before
                q = q.unflatten(1, (-1, self.heads)).transpose(1, 2)
                k = k.unflatten(1, (-1, self.heads)).transpose(1, 2)
                v = v.unflatten(1, (-1, self.heads)).transpose(1, 2)
            attn = (q * self.scale) @ k.transpose(-1, -2)
            attn = attn.softmax(dim=-1)
            x = attn @ v
            if self.windowed and not isinstance(self.scale, (int, float)):
                # back to 4-D order: the restore below transposes (1, 2), not (1, 3)
                x = x.transpose(1, 3).transpose(1, 2)

        if self.windowed:
            x = x.transpose(1, 2).reshape(B, -1, C)
        else:
            x = x.transpose(1, 2).reshape(B, -1, C)
        return self.proj(x)


class NegatedFlagAttention(BranchyAttention):
    """The same with the windowed path in the `else` of `if not C:`."""

    def forward(self, x):
        B, N, C = x.shape
        if not self.windowed:
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
        else:
            num_windows = N // self.window_size
            qkv = (
                self.qkv(x)
                .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
                .permute(3, 0, 2, 4, 1, 5)
                .flatten(2, 3)
            )
            q, k, v = qkv.unbind(0)
        if not self.fused:
            if self.windowed and not isinstance(self.scale, (int, float)):
                # a tensor scale broadcasts against the 5-D dims (B, heads, num_windows, T, D):
                # run the manual attention on 5-D views, as before
                q = q.unflatten(1, (-1, self.heads)).transpose(1, 2)
                k = k.unflatten(1, (-1, self.heads)).transpose(1, 2)
                v = v.unflatten(1, (-1, self.heads)).transpose(1, 2)
            x = F.softmax((q * self.scale) @ k.transpose(-2, -1), dim=-1) @ v
            if self.windowed and not isinstance(self.scale, (int, float)):
                # back to 4-D order: the restore below transposes (1, 2), not (1, 3)
                x = x.transpose(1, 3).transpose(1, 2)
        else:
            x = F.scaled_dot_product_attention(q, k, v)
        if not self.windowed:
            x = x.transpose(1, 2).reshape(B, -1, C)
        else:
            x = x.transpose(1, 2).reshape(B, -1, C)
        return self.proj(x)


def golden_example():
    model = nn.Sequential(
        BranchyAttention(8, 2, q_stride=4, window_size=2),
        BranchyAttention(8, 2, q_stride=2, window_size=2, fused=False),
        BranchyAttention(8, 2, q_stride=2, windowed=False),
        BranchyAttention(8, 2, windowed=False, fused=False),
        NegatedFlagAttention(8, 2, window_size=2),
        NegatedFlagAttention(8, 2, window_size=2, fused=False),
        NegatedFlagAttention(8, 2, windowed=False),
    )
    return model.double(), (torch.randn(2, 64, 8, dtype=torch.float64),)
