"""Golden: `unsqueeze(-1)` / `unsqueeze(2)` instead of `[..., None]`, `.repeat` instead of
`.tile`, and comments on and inside the idiom lines."""
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


class Unsqueezed(nn.Module):
    def __init__(self, dim=4, mu_size=3):
        super().__init__()
        self.mu_size = mu_size
        self.embed = nn.Linear(dim, dim)

    def forward(self, x, mask=None, num_kept=None):
        x = self.embed(x)
        if mask is not None:
            # keep only the visible mask units
            x = kept_tokens(x, mask, num_kept).view(x.shape[0], -1, x.shape[-1])  # drop
        return x.cumsum(dim=1)


class Repeated(Unsqueezed):
    def forward(self, x, mask=None, num_kept=None):
        x = self.embed(x)
        if mask is not None:
            # [B, N, C] bool
            # back to [B, N_kept, C]
            x = kept_tokens(x, mask, num_kept).view(x.shape[0], -1, x.shape[-1])
        return x.cumsum(dim=1)


class UnsqueezeTwoRepeat(Unsqueezed):
    def forward(self, x, mask=None, num_kept=None):
        x = self.embed(x)
        if mask is not None:
            x = kept_tokens(x, mask, num_kept).view(x.shape[0], -1, x.shape[-1])
        return x.cumsum(dim=1)


class All(nn.Module):
    def __init__(self):
        super().__init__()
        self.parts = nn.ModuleList([Unsqueezed(), Repeated(), UnsqueezeTwoRepeat()])

    def forward(self, x, mask):
        return [part(x, mask) for part in self.parts]


def golden_example():
    x = torch.randn(3, 4 * 3, 4, dtype=torch.float64)
    return All().double(), (x, random_unit_mask(3, 4, 3))
