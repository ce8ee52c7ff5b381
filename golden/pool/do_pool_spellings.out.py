"""Golden: the Unroll max-pool spelled .max(dim=k).values, .max(k).values, .max(dim=k)[0]."""
import torch
import torch.nn as nn


def do_pool(x: torch.Tensor, stride: int) -> torch.Tensor:
    # Refer to `Unroll` to see how this performs a maxpool-Nd
    return x.view(x.shape[0], stride, -1, x.shape[-1]).amax(dim=1).clone()


def do_pool_positional(x, stride):
    return x.view(x.shape[0], stride, -1, x.shape[-1]).amax(1).clone()


def do_pool_indexed(x, stride):
    pooled = x.reshape(x.shape[0], stride, -1, x.shape[-1]).amax(dim=1).clone()  # values only
    return pooled


def do_pool_negative_dim(x, stride):
    return x.view(x.shape[0], stride, -1, x.shape[-1]).amax(dim=-3).clone()


class Block(nn.Module):
    def __init__(self, dim, q_stride=4):
        super().__init__()
        self.q_stride = q_stride
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        x = self.proj(x)
        if self.q_stride > 1:
            x = (
                x.view(x.shape[0], self.q_stride, -1, x.shape[-1])
                .amax(dim=1)
            )
        return do_pool_negative_dim(do_pool_indexed(do_pool_positional(do_pool(x, 2), 2), 1), 1)


def golden_example():
    return Block(8).double(), (torch.randn(2, 64, 8, dtype=torch.float64),)
