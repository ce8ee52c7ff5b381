"""Golden: the idiom twice in one file, plus a class and a function marked skip."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class EncoderAttention(nn.Module):
    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        nw = N // self.window_size
        qkv = (
            self.qkv(x)
            .reshape(B, -1, nw, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return x.transpose(1, 2).reshape(B, -1, C).clone()


class DecoderAttention(EncoderAttention):
    def forward(self, x):
        B, N, C = x.shape
        nw = N // self.window_size
        qkv = (
            self.qkv(x)
            .reshape(B, -1, nw, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        y = (
            F.scaled_dot_product_attention(q, k, v)
            .transpose(1, 2)
            .reshape(B, -1, C)
            .clone()
        )
        return y


# hiera-rewrite: skip
class ReferenceAttention(EncoderAttention):
    def forward(self, x):
        B, N, C = x.shape
        nw = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, nw, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(q, k, v)
        return x.transpose(1, 3).reshape(B, -1, C)


def reference_attention(module, x):  # hiera-rewrite: skip
    B, N, C = x.shape
    nw = N // module.window_size
    qkv = module.qkv(x).reshape(B, -1, nw, 3, module.heads, module.head_dim).permute(3, 0, 4, 2, 1, 5)
    q, k, v = qkv[0], qkv[1], qkv[2]
    x = F.scaled_dot_product_attention(q, k, v)
    return x.transpose(1, 3).reshape(B, -1, C)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.dec, self.ref = EncoderAttention(8, 2), DecoderAttention(8, 4, window_size=2), ReferenceAttention(8, 2)

    def forward(self, x):
        return self.ref(self.dec(self.enc(x))), reference_attention(self.enc, x)


def golden_example():
    return Stack().double(), (torch.randn(2, 32, 8, dtype=torch.float64),)
