"""Golden: upstream chains, no final newline."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MaskUnitAttention(nn.Module):
    def __init__(self, dim, dim_out, heads, q_stride=1, window_size=0, use_mask_unit_attn=False):
        super().__init__()
        self.dim_out, self.heads, self.q_stride = dim_out, heads, q_stride
        self.head_dim = dim_out // heads
        self.scale = (self.head_dim) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)
        self.window_size = window_size
        self.use_mask_unit_attn = use_mask_unit_attn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ Input should be of shape [batch, tokens, channels]. """
        B, N, _ = x.shape
        num_windows = (
            (N // (self.q_stride * self.window_size)) if self.use_mask_unit_attn else 1
        )

        qkv = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)

        if self.q_stride > 1:
            # pool the query over its stride (the slowest part of T)
            q = q.unflatten(2, (self.q_stride, -1)).max(dim=2).values

        if hasattr(F, "scaled_dot_product_attention"):
            # fused when the inputs allow it
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            # torch < 2.0 (no SDPA): the manual attention on 5-D views, as before
            q = q.unflatten(1, (-1, self.heads)).transpose(1, 2)
            k = k.unflatten(1, (-1, self.heads)).transpose(1, 2)
            v = v.unflatten(1, (-1, self.heads)).transpose(1, 2)
            attn = (q * self.scale) @ k.transpose(-1, -2)
            attn = attn.softmax(dim=-1)
            x = (attn @ v)
            x = x.transpose(1, 3).transpose(1, 2)  # back to 4-D order

        x = x.transpose(1, 2).reshape(B, -1, self.dim_out)
        x = self.proj(x)
        return x


def golden_example():
    model = nn.Sequential(
        MaskUnitAttention(8, 16, 2, q_stride=4, window_size=2, use_mask_unit_attn=True),
        MaskUnitAttention(16, 16, 2, window_size=2, use_mask_unit_attn=True),
        MaskUnitAttention(16, 24, 3, q_stride=2, use_mask_unit_attn=False),
    )
    return model.double(), (torch.randn(3, 32, 8, dtype=torch.float64),)