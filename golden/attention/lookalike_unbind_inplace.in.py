"""Look-alike: q (or the tensor qkv is a view of) modified in place after the unpack.

`qkv.unbind(0)` would raise in InplaceQ and UserFunctionQ ("Output 0 of
UnbindBackward0 is a view and is being modified inplace"), `qkv[0], qkv[1], qkv[2]`
does not: the select unpack is kept, the file unchanged
(tests/test_attention_refusals.py runs both forms).  In BaseModified q, k and v see
`y.mul_` in the original; the 4-D qkv (a copy) would not."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class InplaceQ(nn.Module):
    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        nw = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, nw, 3, self.heads, C // self.heads).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q.mul_(0.5)
        x = F.scaled_dot_product_attention(q, k, v)
        return x.transpose(1, 3).reshape(B, -1, C)


def scale_(t):
    t *= 0.5
    return t


class UserFunctionQ(InplaceQ):
    def forward(self, x):
        B, N, C = x.shape
        nw = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, nw, 3, self.heads, C // self.heads).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = scale_(q)
        x = F.scaled_dot_product_attention(q, k, v)
        return x.transpose(1, 3).reshape(B, -1, C)


class BaseModified(InplaceQ):
    def forward(self, x):
        B, N, C = x.shape
        nw = N // self.window_size
        y = self.qkv(x).reshape(B, -1, nw, 3, self.heads, C // self.heads)
        qkv = y.permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        y.mul_(0.5)
        x = F.scaled_dot_product_attention(q, k, v)
        return x.transpose(1, 3).reshape(B, -1, C)
