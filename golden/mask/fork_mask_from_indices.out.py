"""Golden (fork): an encoder given the kept units' indices, not a mask, as a public
fork's token-omission encoder is (`masked_encoding_omission(x, ids_keep)`):

    mask = mask_from_indices(ids_keep, num_windows)   # zeros, 1 at (r, ids_keep[r, j])
    mask = mask.bool()
    ...
    x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(B, -1, C)

Row r keeps one unit per distinct index of ids_keep[r]: ids_keep.shape[1] where no index
repeats, which only the caller knows.  The drop gets that count with a check that every
row keeps it (`torch._assert_async`): a repeated index raises instead of selecting
other units.  Both helper spellings (an index write, a scatter) are proven; a helper
that writes another value, scatters along another dim or does anything else is not
(`NotProven`, below), nor is a mask not cast to bool in its own block."""
import math
from typing import Optional

import torch
import torch.nn as nn


def mask_from_indices(indices: torch.Tensor, seq_len: int) -> torch.Tensor:
    """A (B, seq_len) mask, 1 at each row's indices."""
    B = indices.size(0)
    row_indices = torch.arange(B, device=indices.device).unsqueeze(1).expand_as(indices)
    mask = torch.zeros([B, seq_len], device=indices.device)
    mask[row_indices.flatten(), indices.flatten()] = 1
    return mask


def scatter_mask(ids_keep, num_units):
    mask = torch.zeros(ids_keep.shape[0], num_units, dtype=torch.bool, device=ids_keep.device)
    return mask.scatter(1, ids_keep, True)


def half_mask(ids_keep, num_units):
    mask = torch.zeros(ids_keep.shape[0], num_units, device=ids_keep.device)
    return mask.scatter(1, ids_keep, 0.5)


def kept_tokens(x, mask, mu_size, num_kept=None):
    """x[mask[..., None].tile(1, mu_size, x.shape[2])]; given each row's kept count, in static shapes."""
    if num_kept is None or x.dim() != 3 or mask.dim() != 2 or x.shape[:2] != (len(mask), mu_size * mask.shape[1]):
        return x[mask[..., None].tile(1, mu_size, x.shape[2])]  # (which raises for the latter shapes)
    B, N = mask.shape
    # token n is unit n % N at position n // N: (b, t, j) is row (b * mu_size + t) * N + j
    kept = mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
    torch._assert_async((mask.sum(1) == kept.shape[1]).all())  # a count not every row's raises
    rows = torch.arange(0, B * mu_size * N, N, device=x.device).view(B, mu_size, 1) + kept[:, None]
    return x.unflatten(1, (mu_size, N)).flatten(0, 2).index_select(0, rows.flatten())


class Omission(nn.Module):
    def __init__(self, in_dim=4, dim=6, mask_spatial_shape=(2, 3), mu_size=2):
        super().__init__()
        self.mask_spatial_shape = list(mask_spatial_shape)
        self.mu_size = mu_size
        self.embed = nn.Linear(in_dim, dim)
        self.block = nn.Linear(dim, dim)

    def masked_encoding_omission(self, x: torch.Tensor, ids_keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        if ids_keep is not None:
            num_windows = math.prod(self.mask_spatial_shape)

            # Mask already in opposite form
            mask = mask_from_indices(ids_keep, num_windows)
            mask = mask.bool()
            patch_mask = mask.view(x.shape[0], 1, *self.mask_spatial_shape)
            x = x * patch_mask.flatten(2).repeat(1, 1, self.mu_size).transpose(1, 2)

        x = self.embed(x)

        # Discard masked tokens
        if ids_keep is not None:
            # mask_from_indices's mask keeps each row's ids_keep (an index repeated in a row raises)
            x = kept_tokens(x, mask, self.mu_size, ids_keep.shape[1]).view(
                x.shape[0], -1, x.shape[-1]
            )

        return self.block(x)


class Scattered(Omission):
    def forward(self, x: torch.Tensor, ids_keep: torch.Tensor) -> torch.Tensor:
        mask = scatter_mask(ids_keep, math.prod(self.mask_spatial_shape)).bool()
        x = self.embed(x)
        # scatter_mask's mask keeps each row's ids_keep (an index repeated in a row raises)
        x = kept_tokens(x, mask, self.mu_size, ids_keep.shape[1]).view(
            x.shape[0], -1, x.shape[-1]
        )
        return self.block(x)


class NotProven(Omission):
    def forward(self, x: torch.Tensor, ids_keep: torch.Tensor) -> torch.Tensor:
        mask = half_mask(ids_keep, math.prod(self.mask_spatial_shape))
        mask = mask.bool()
        x = self.embed(x)
        x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return self.block(x)


class Suite(nn.Module):
    def __init__(self):
        super().__init__()
        self.omission = Omission()
        self.scattered = Scattered()
        self.not_proven = NotProven()

    def forward(self, x, ids_keep):
        return (
            self.omission.masked_encoding_omission(x, ids_keep),
            self.omission.masked_encoding_omission(x),
            self.scattered(x, ids_keep),
            self.not_proven(x, ids_keep),
        )


def golden_example():
    x = torch.randn(3, 12, 4, dtype=torch.float64)
    ids_keep = torch.argsort(torch.rand(3, 6), dim=1)[:, :4]  # distinct per row, unsorted
    return Suite().double(), (x, ids_keep)
