"""Golden: the encoder token drop as upstream writes it (black-wrapped) and on one line."""
import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
    """A (B, windows) bool mask keeping ``kept`` units per row (True = keep)."""
    return torch.rand(batch, windows).argsort(dim=1).argsort(dim=1) < kept


def kept_tokens(x, mask, num_kept=None):
    """x[mask[..., None].tile(1, mu_size, C)]; with num_kept per row, static shapes."""
    B, N = mask.shape
    if num_kept is None:
        return x[mask[..., None].tile(1, x.shape[1] // N, x.shape[2])]
    kept = mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
    rows = torch.arange(0, B * x.shape[1], N, device=x.device).view(B, -1, 1)
    return x.flatten(0, 1).index_select(0, (rows + kept[:, None]).flatten())


class TinyHiera(nn.Module):
    def __init__(self, dim=6, num_windows=4, mu_size=3):
        super().__init__()
        self.mu_size = mu_size
        self.num_windows = num_windows
        self.embed = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, dim)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor = None, num_kept=None
    ) -> torch.Tensor:
        x = self.embed(x)

        # Discard masked tokens
        if mask is not None:
            x = kept_tokens(x, mask, num_kept).view(x.shape[0], -1, x.shape[-1])

        return self.head(x).cumsum(dim=1)


class OneLine(TinyHiera):
    def forward(self, x, mask=None, num_kept=None):
        x = self.embed(x)
        if mask is not None:
            x = kept_tokens(x, mask, num_kept).view(x.shape[0], -1, x.shape[-1])
        return self.head(x).cumsum(dim=1)


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = TinyHiera(), OneLine()

    def forward(self, x, mask):
        return self.a(x, mask), self.b(x, mask), self.b(x)


def golden_example():
    x = torch.randn(3, 4 * 3, 6, dtype=torch.float64)
    return Both().double(), (x, random_unit_mask(3, 4, 2))
