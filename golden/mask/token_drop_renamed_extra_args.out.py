"""Golden: renamed encoders (GeneralizedHiera, SignHiera) whose forward takes extra
arguments: keyword-only ones, *args, **kwargs and a typing.Optional import."""
from typing import List, Optional

import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
    return torch.rand(batch, windows).argsort(dim=1).argsort(dim=1) < kept


def kept_tokens(x, mask, num_kept=None):
    """x[mask[..., None].tile(1, mu_size, C)]; with num_kept per row, static shapes."""
    B, N = mask.shape
    if num_kept is None:
        return x[mask[..., None].tile(1, x.shape[1] // N, x.shape[2])]
    kept = mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
    rows = torch.arange(0, B * x.shape[1], N, device=x.device).view(B, -1, 1)
    return x.flatten(0, 1).index_select(0, (rows + kept[:, None]).flatten())


class GeneralizedHiera(nn.Module):
    def __init__(self, dim=4, mu_size=2):
        super().__init__()
        self.mu_size = mu_size
        self.embed = nn.Linear(dim, dim)

    def forward(
        self,
        x: torch.Tensor,
        mask: Optional[torch.Tensor] = None,
        return_intermediates: bool = False,
        *,
        scale: float = 1.0,
        num_kept: Optional[int] = None
    ) -> List[torch.Tensor]:
        x = self.embed(x) * scale
        if mask is not None:
            x = kept_tokens(x, mask, num_kept).view(x.shape[0], -1, x.shape[-1])
        outs = [x.cumsum(dim=1)]
        if return_intermediates:
            outs.append(x.sin())
        return outs


class SignHiera(GeneralizedHiera):
    def forward(
        self, x, mask, *extra, sign=None, num_kept: Optional[int] = None, **kwargs
    ):
        x = self.embed(x)
        if sign is not None:
            x = x * sign
        x = kept_tokens(x, mask, num_kept).view(x.shape[0], -1, x.shape[-1])
        return [x.cumsum(dim=1), *extra]


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = GeneralizedHiera(), SignHiera()

    def forward(self, x, mask):
        return self.a(x, mask, True, scale=0.5), self.b(x, mask, sign=-1.0, unused=1)


def golden_example():
    x = torch.randn(2, 6 * 2, 4, dtype=torch.float64)
    return Both().double(), (x, random_unit_mask(2, 6, 4))
