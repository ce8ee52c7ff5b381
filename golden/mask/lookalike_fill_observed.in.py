"""Look-alike: decoder fills that a scatter would not reproduce: the zeros are read
(aliased) before the in-place fill, and the mask reshape sits in a branch."""
import torch
import torch.nn as nn


class Observed(nn.Module):
    def forward_decoder(self, x, mask):
        x_dec = torch.zeros(*mask.shape, *x.shape[2:], dtype=x.dtype)
        first = x_dec[:, :1]
        mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))
        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()
        x_dec[mask] = x.flatten()
        return x_dec, first

    def forward_branch(self, x, mask):
        x_dec = torch.zeros(*mask.shape, *x.shape[2:], dtype=x.dtype)
        if x.dim() > 2:
            mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))
        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()
        x_dec[mask] = x.flatten()
        return x_dec
