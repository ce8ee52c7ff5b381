"""Golden: the encoder token drop as upstream writes it (black-wrapped) and on one line."""
import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
    """A (B, windows) bool mask keeping ``kept`` units per row (True = keep)."""
    return torch.rand(batch, windows).argsort(dim=1).argsort(dim=1) < kept


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


class TinyHiera(nn.Module):
    def __init__(self, dim=6, num_windows=4, mu_size=3):
        super().__init__()
        self.mu_size = mu_size
        self.num_windows = num_windows
        self.embed = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, dim)

    def get_random_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
        """A random (B, num_windows) unit mask, True = keep; the same count in every row."""
        B = x.shape[0]
        len_keep = int(self.num_windows * (1 - mask_ratio))
        noise = torch.rand(B, self.num_windows, device=x.device)
        rank = torch.argsort(torch.argsort(noise, dim=1), dim=1)
        keep = torch.zeros([B, self.num_windows], device=x.device)
        keep[:, :len_keep] = 1
        keep = torch.gather(keep, dim=1, index=rank)
        return keep.bool()

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor = None, random_mask_ratio=None
    ) -> torch.Tensor:
        x = self.embed(x)

        # Discard masked tokens
        if mask is not None:
            num_kept = None  # kept units per row, known for get_random_mask's masks
            if (
                type(random_mask_ratio) in (int, float)
                and type(self).get_random_mask is __class__.get_random_mask
            ):
                num_kept = int(mask.shape[1] * (1 - random_mask_ratio))
            x = kept_tokens(x, mask, self.mu_size, num_kept).view(
                x.shape[0], -1, x.shape[-1]
            )

        return self.head(x).cumsum(dim=1)


class OneLine(TinyHiera):
    def forward(self, x, mask=None, random_mask_ratio=None):
        x = self.embed(x)
        if mask is not None:
            num_kept = None  # kept units per row, known for get_random_mask's masks
            if (
                type(random_mask_ratio) in (int, float)
                and type(self).get_random_mask is __class__.get_random_mask
            ):
                num_kept = int(mask.shape[1] * (1 - random_mask_ratio))
            x = kept_tokens(x, mask, self.mu_size, num_kept).view(
                x.shape[0], -1, x.shape[-1]
            )
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
