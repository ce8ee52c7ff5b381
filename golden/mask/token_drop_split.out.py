"""Golden: the token drop split across statements: the unit mask in its own name, the
boolean index and the view in separate statements."""
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


class SplitHiera(nn.Module):
    def __init__(self, dim=4, mu_size=2, num_windows=4):
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

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, random_mask_ratio=None
    ) -> torch.Tensor:
        x = self.embed(x)
        B, N, C = x.shape
        num_kept = None  # kept units per row, known for get_random_mask's masks
        if (
            type(random_mask_ratio) in (int, float)
            and type(self).get_random_mask is __class__.get_random_mask
        ):
            num_kept = int(mask.shape[1] * (1 - random_mask_ratio))
        x = kept_tokens(x, mask, self.mu_size, num_kept)
        x = x.view(B, -1, C)
        return x.cumsum(dim=1)


class ViewInline(SplitHiera):
    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, random_mask_ratio=None
    ) -> torch.Tensor:
        hidden_states = self.embed(x)
        num_kept = None  # kept units per row, known for get_random_mask's masks
        if (
            type(random_mask_ratio) in (int, float)
            and type(self).get_random_mask is __class__.get_random_mask
        ):
            num_kept = int(mask.shape[1] * (1 - random_mask_ratio))
        hidden_states = kept_tokens(
            hidden_states, mask, self.mu_size, num_kept
        ).reshape(x.shape[0], -1, x.shape[-1])
        return hidden_states.cumsum(dim=1)


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = SplitHiera(), ViewInline()

    def forward(self, x, mask):
        return self.a(x, mask), self.b(x, mask)


def golden_example():
    x = torch.randn(2, 5 * 2, 4, dtype=torch.float64)
    return Both().double(), (x, random_unit_mask(2, 5, 3))
