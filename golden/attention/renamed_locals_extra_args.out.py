"""Golden: renamed class and locals, keyword SDPA arguments, extra forward arguments."""
import torch
import torch.nn as nn
from torch.nn.functional import scaled_dot_product_attention as sdpa


class MultiScaleAttention(nn.Module):
    def __init__(self, dim, num_heads, pool_stride=1, unit_tokens=2):
        super().__init__()
        self.num_heads, self.pool_stride, self.unit_tokens = num_heads, pool_stride, unit_tokens
        self.d_head = dim // num_heads
        self.to_qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, hidden_states, gate=None, return_pre_proj=False):
        batch, tokens, width = hidden_states.shape
        n_units = tokens // (self.pool_stride * self.unit_tokens)
        tokens_per_window = tokens // n_units
        packed = (
            self.to_qkv(hidden_states)
            .reshape(batch, tokens_per_window, n_units, 3, self.num_heads, self.d_head)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        query, key, value = packed.unbind(0)
        if self.pool_stride > 1:
            query = query.unflatten(2, (self.pool_stride, -1)).max(dim=2).values
        attended = sdpa(query=query, key=key, value=value)
        hidden_states = attended.transpose(1, 2).reshape(batch, -1, width).clone()
        if gate is not None:
            hidden_states = hidden_states * gate
        if return_pre_proj:
            return self.out_proj(hidden_states), hidden_states
        return self.out_proj(hidden_states)


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = MultiScaleAttention(8, 2, pool_stride=4, unit_tokens=2)
        self.b = MultiScaleAttention(8, 2, unit_tokens=4)

    def forward(self, x, gate):
        return self.b(self.a(x), gate=gate, return_pre_proj=True)


def golden_example():
    return Gated().double(), (torch.randn(2, 32, 8, dtype=torch.float64), torch.rand(8, dtype=torch.float64))
