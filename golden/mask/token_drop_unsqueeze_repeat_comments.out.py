"""Golden: `unsqueeze(-1)` / `unsqueeze(2)` instead of `[..., None]`, `.repeat` instead of
`.tile`, and comments on and inside the idiom lines."""
import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
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


class Unsqueezed(nn.Module):
    def __init__(self, dim=4, mu_size=3, num_windows=4):
        super().__init__()
        self.num_windows = num_windows
        self.mu_size = mu_size
        self.embed = nn.Linear(dim, dim)

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

    def forward(self, x, mask=None, random_mask_ratio=None):
        x = self.embed(x)
        if mask is not None:
            # keep only the visible mask units
            num_kept = None  # kept units per row, known for get_random_mask's masks
            if (
                type(random_mask_ratio) in (int, float)
                and type(self).get_random_mask is __class__.get_random_mask
            ):
                num_kept = int(mask.shape[1] * (1 - random_mask_ratio))
            x = kept_tokens(x, mask, self.mu_size, num_kept).view(
                x.shape[0], -1, x.shape[-1]
            )  # drop
        return x.cumsum(dim=1)


class Repeated(Unsqueezed):
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
        return x.cumsum(dim=1)


class UnsqueezeTwoRepeat(Unsqueezed):
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
