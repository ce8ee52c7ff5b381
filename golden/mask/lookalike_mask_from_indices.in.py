"""Look-alike: the unit mask rebuilt inside forward, from kept indices or as a
complement.  `mask_from_indices(ids_keep, n)` is True once per distinct index, so a row
keeps ids_keep.shape[1] units only if none repeats (ids a caller passes may); the
complement keeps n minus a count forward is not given.  Refused, naming the line."""
import torch
import torch.nn as nn


def mask_from_indices(ids_keep: torch.Tensor, num_units: int) -> torch.Tensor:
    mask = torch.zeros(ids_keep.shape[0], num_units, device=ids_keep.device)
    return mask.scatter(1, ids_keep, 1.0)


class KeptIndices(nn.Module):
    def __init__(self, mu_size=4):
        super().__init__()
        self.mu_size = mu_size

    def forward(self, x: torch.Tensor, ids_keep: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        num_windows = N // self.mu_size
        mask = mask_from_indices(ids_keep, num_windows).bool()
        x = x[mask[..., None].tile(1, self.mu_size, C)].view(B, -1, C)
        return x


class Complement(KeptIndices):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        mask = 1 - mask
        mask = mask.bool()
        x = x[mask[..., None].tile(1, self.mu_size, C)].view(B, -1, C)
        return x
