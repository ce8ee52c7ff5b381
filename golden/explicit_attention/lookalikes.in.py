"""Look-alikes of the explicit attention - left alone, each with a reason."""
import torch
import torch.nn as nn


class Base(nn.Module):
    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size = heads, window_size
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.drop = nn.Dropout(0.1)


class WeightsAlwaysReturned(Base):
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        attn = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 3).reshape(B, -1, C)
        return x, attn


class DropoutOnProbabilities(Base):
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-1, -2)
        attn = self.drop(attn.softmax(dim=-1))
        x = attn @ v
        return x.transpose(1, 3).reshape(B, -1, C)


class OtherPermutation(Base):
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 1, 2, 5)
        q, k, v = qkv.unbind(0)
        attn = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1)
        x = attn @ v
        return x.transpose(1, 3).reshape(B, -1, C)


class FlagReassigned(Base):
    def forward(self, x, output_attentions=False):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        attn = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 3).reshape(B, -1, C)
        output_attentions = not output_attentions
        return (x, attn) if output_attentions else (x, None)


class TensorScale(Base):
    def __init__(self, dim, heads, window_size=4):
        super().__init__(dim, heads, window_size)
        self.scale = nn.Parameter(torch.ones(heads, 1, 1, 1))

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        x = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        return x.transpose(1, 3).reshape(B, -1, C)


class QReadAfter(Base):
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        x = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        return x.transpose(1, 3).reshape(B, -1, C) + q.mean()
