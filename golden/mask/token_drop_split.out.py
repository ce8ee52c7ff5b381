"""Golden: the token drop split across statements: the unit mask in its own name, the
boolean index and the view in separate statements."""
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


class SplitHiera(nn.Module):
    def __init__(self, dim=4, mu_size=2):
        super().__init__()
        self.mu_size = mu_size
        self.embed = nn.Linear(dim, dim)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, num_kept=None
    ) -> torch.Tensor:
        x = self.embed(x)
        B, N, C = x.shape
        x = kept_tokens(x, mask, num_kept)
        x = x.view(B, -1, C)
        return x.cumsum(dim=1)


class ViewInline(SplitHiera):
    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, num_kept=None
    ) -> torch.Tensor:
        hidden_states = self.embed(x)
        hidden_states = kept_tokens(hidden_states, mask, num_kept).reshape(
            x.shape[0], -1, x.shape[-1]
        )
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
