"""Look-alike: boolean indexing in unrelated code: a comparison mask, a local mask, a
module-level function and a fill that is not `x.flatten()`."""
import torch
import torch.nn as nn


def positives(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    kept = x[mask]
    return kept


class Clamp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        valid = x > 0
        y = x[valid]
        out = torch.zeros_like(x)
        out[valid] = y * 2
        out[x < -1] = -1.0
        return out

    def decoder_fill(self, x, mask):
        x_dec = torch.zeros(*mask.shape, *x.shape[2:], dtype=x.dtype)
        mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))
        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()
        x_dec[mask] = x.reshape(-1)
        return x_dec
