"""Look-alikes: the class holding the attention scales its manual fallback by a tensor
of its own (a property, a class attribute): left alone, with the line that says so."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class OwnPropertyScale(nn.Module):
    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size, self.fused = heads, window_size, True
        self.head_dim = dim // heads
        self.log_temperature = nn.Parameter(torch.zeros(heads, 1, 1, 1))
        self.qkv = nn.Linear(dim, 3 * dim)

    @property
    def scale(self):
        return self.log_temperature.exp() * self.head_dim**-0.5

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            x = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        return x.transpose(1, 3).reshape(B, -1, C)


class OwnClassTensorScale(nn.Module):
    scale = torch.full((2, 1, 1, 1), 0.5)

    def __init__(self, dim, heads, window_size=4):
        super().__init__()
        self.heads, self.window_size, self.fused = heads, window_size, True
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // self.window_size, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            x = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        return x.transpose(1, 3).reshape(B, -1, C)
