"""Look-alike: `x[mask]` where nothing proves a (B, N) boolean mask: an int index, an
unannotated argument that is a 3-D mask, and a token drop whose mask is rebuilt."""
import torch
import torch.nn as nn


class Picker(nn.Module):
    def pick(self, x: torch.Tensor, mask: int) -> torch.Tensor:
        row = x[mask]
        return row

    def select_3d(self, x: torch.Tensor, mask) -> torch.Tensor:
        # mask: [B, N, C] bool
        picked = x[mask]
        return picked

    def forward(self, x, mask=None):
        if mask is not None:
            mask = mask.flatten(1)
            x = x[mask[..., None].tile(1, 2, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return x
