"""Golden: renamed encoders (GeneralizedHiera, SignHiera) whose forward takes extra
arguments: keyword-only ones, *args, **kwargs and a typing.Optional import."""
from typing import List, Optional

import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
    return torch.rand(batch, windows).argsort(dim=1).argsort(dim=1) < kept


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
            if num_kept is None:
                # a mask from the caller: rows may keep different counts, so select as before
                x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(
                    x.shape[0], -1, x.shape[-1]
                )
            else:
                kept_windows = (
                    mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
                )
                x = (
                    x.view(x.shape[0], -1, mask.shape[-1], x.shape[-1])
                    .flatten(0, 2)
                    .index_select(
                        0,
                        (
                            kept_windows[:, None, :]
                            + torch.arange(
                                0,
                                x.shape[1],
                                mask.shape[-1],
                                device=kept_windows.device,
                            )[None, :, None]
                            + torch.arange(
                                0,
                                x.shape[0] * x.shape[1],
                                x.shape[1],
                                device=kept_windows.device,
                            )[:, None, None]
                        ).flatten(),
                    )
                    .view(x.shape[0], -1, x.shape[-1])
                )
        outs = [x.cumsum(dim=1)]
        if return_intermediates:
            outs.append(x.sin())
        return outs

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return GeneralizedHiera.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class SignHiera(GeneralizedHiera):
    def forward(
        self, x, mask, *extra, sign=None, num_kept: Optional[int] = None, **kwargs
    ):
        x = self.embed(x)
        if sign is not None:
            x = x * sign
        if num_kept is None:
            # a mask from the caller: rows may keep different counts, so select as before
            x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(
                x.shape[0], -1, x.shape[-1]
            )
        else:
            kept_windows = (
                mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
            )
            x = (
                x.view(x.shape[0], -1, mask.shape[-1], x.shape[-1])
                .flatten(0, 2)
                .index_select(
                    0,
                    (
                        kept_windows[:, None, :]
                        + torch.arange(
                            0, x.shape[1], mask.shape[-1], device=kept_windows.device
                        )[None, :, None]
                        + torch.arange(
                            0,
                            x.shape[0] * x.shape[1],
                            x.shape[1],
                            device=kept_windows.device,
                        )[:, None, None]
                    ).flatten(),
                )
                .view(x.shape[0], -1, x.shape[-1])
            )
        return [x.cumsum(dim=1), *extra]

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return SignHiera.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = GeneralizedHiera(), SignHiera()

    def forward(self, x, mask):
        return self.a(x, mask, True, scale=0.5), self.b(x, mask, sign=-1.0, unused=1)


def golden_example():
    x = torch.randn(2, 6 * 2, 4, dtype=torch.float64)
    return Both().double(), (x, random_unit_mask(2, 6, 4))
