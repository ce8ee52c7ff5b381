"""Golden: qkv bound to the input's own name with jaxtyping-style annotated assignments:
x is the projection, then the 5-D qkv, then SDPA's output, then the restored tokens.
Shape annotations of the old layout become their array type, the old one kept in a comment."""
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class _Shaped:
    """A stand-in for jaxtyping's Float: Float[Tensor, "B N C"] is Tensor."""

    def __getitem__(self, item: Any) -> Any:
        return item[0]


Float = _Shaped()


class KqvAttention(nn.Module):
    def __init__(self, dim, heads, q_stride=1, window_size=2):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.project_kqv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Float[Tensor, "B N C"]) -> Float[Tensor, "B N C"]:
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        x: Float[Tensor, "B N 3C"] = self.project_kqv(x)
        # was Float[Tensor, "3 B H nw T D"]: the shape of the 5-D layout, which this line no longer has
        x: Tensor = (
            x.reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        # was Float[Tensor, "B H nw T D"]: the shape of the 5-D layout, which this line no longer has
        q: Tensor
        q, k, v = x.unbind(0)
        if self.q_stride > 1:
            # was Float[Tensor, "B H nw Tq D"]: the shape of the 5-D layout, which this line no longer has
            q: Tensor = q.unflatten(2, (self.q_stride, -1)).amax(dim=2)
        # was Float[Tensor, "B H nw Tq D"]: the shape of the 5-D layout, which this line no longer has
        x: Tensor = F.scaled_dot_product_attention(q, k, v)
        x: Float[Tensor, "B Nq C"] = x.transpose(1, 2).reshape(B, -1, C)
        return self.proj(x)


class PlainNames(KqvAttention):
    """The same without annotations, k and v taken one by one."""

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // self.window_size
        x = self.project_kqv(x)
        x = (
            x.reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q = x[0]
        k = x[1]
        v = x[2]
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, -1, C)
        return self.proj(x)


def golden_example():
    model = nn.Sequential(KqvAttention(8, 2, q_stride=2, window_size=4), KqvAttention(8, 2, window_size=8), PlainNames(8, 2))
    return model.double(), (torch.randn(2, 32, 8, dtype=torch.float64),)
