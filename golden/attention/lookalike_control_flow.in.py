"""Look-alikes around control flow - left alone, each with a reason."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RestoreUnderOtherFlag(nn.Module):
    """The 5-D path is under `self.windowed` but the restore under `self.other`."""

    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.windowed, self.other = True, True
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        B, N, C = x.shape
        if self.windowed:
            qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        else:
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        if self.other:
            x = x.transpose(1, 3).reshape(B, -1, C)
        else:
            x = x.transpose(1, 2).reshape(B, -1, C)
        return x


class UnconditionalUnpack(RestoreUnderOtherFlag):
    """Only qkv is built per branch: the shared unpack and restore see both layouts."""

    def forward(self, x):
        B, N, C = x.shape
        if self.windowed:
            qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        else:
            qkv = self.qkv(x).reshape(B, -1, 1, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        if self.windowed:
            x = x.transpose(1, 3).reshape(B, -1, C)
        else:
            x = x.transpose(3, 1).reshape(B, -1, C)
        return x


class FlagFlippedInBetween(RestoreUnderOtherFlag):
    """The flag may change between the two `if self.windowed:`."""

    def forward(self, x):
        B, N, C = x.shape
        if self.windowed:
            qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
            q, k, v = qkv.unbind(0)
        else:
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
        self.windowed = not self.windowed
        x = F.scaled_dot_product_attention(q, k, v)
        if self.windowed:
            x = x.transpose(1, 3).reshape(B, -1, C)
        else:
            x = x.transpose(1, 2).reshape(B, -1, C)
        return x


class ManualWithDropout(RestoreUnderOtherFlag):
    """The fallback drops attention weights: dropout RNG order differs on 4-D."""

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        if self.other:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q * self.head_dim ** -0.5) @ k.transpose(-1, -2)
            attn = self.drop(attn.softmax(dim=-1))
            x = attn @ v
        x = x.transpose(1, 3).reshape(B, -1, C)
        return x


class ScaleTensor(RestoreUnderOtherFlag):
    """The fallback scales by a tensor attribute that could broadcast per window."""

    def __init__(self, dim, heads, window_size=4):
        super().__init__(dim, heads, window_size)
        self.scale = nn.Parameter(torch.ones(heads, 1, 1, 1))

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        if self.other:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            x = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        x = x.transpose(1, 3).reshape(B, -1, C)
        return x


class InLoop(RestoreUnderOtherFlag):
    def forward(self, xs):
        outs = []
        for x in xs:
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
            q, k, v = qkv.unbind(0)
            x = F.scaled_dot_product_attention(q, k, v)
            outs.append(x.transpose(1, 3).reshape(B, -1, C))
        return outs


class BatchRebound(RestoreUnderOtherFlag):
    """`B` is read from x after x became the 5-D output."""

    def forward(self, x):
        qkv = self.qkv(x).reshape(x.shape[0], -1, x.shape[1] // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        C = x.shape[-1]
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 3).reshape(x.shape[0], -1, C)
        return x


class PoolWrongAxis(RestoreUnderOtherFlag):
    def forward(self, x):
        B, N, C = x.shape
        nw = N // self.window_size
        qkv = self.qkv(x).reshape(B, -1, nw, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        q = q.view(B, self.heads, nw, -1, 2, self.head_dim).amax(dim=4)
        x = F.scaled_dot_product_attention(q, k, v)
        return x.transpose(1, 3).reshape(B, -1, C)
