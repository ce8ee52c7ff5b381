"""Golden: `unsqueeze(-1)` / `unsqueeze(2)` instead of `[..., None]`, `.repeat` instead of
`.tile`, and comments on and inside the idiom lines."""
import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
    return torch.rand(batch, windows).argsort(dim=1).argsort(dim=1) < kept


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

    def forward(self, x, mask=None):
        x = self.embed(x)
        if mask is not None:
            # keep only the visible mask units
            x = x[mask.unsqueeze(-1).tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])  # drop
        return x.cumsum(dim=1)


class Repeated(Unsqueezed):
    def forward(self, x, mask=None):
        x = self.embed(x)
        if mask is not None:
            x = x[
                mask[..., None].repeat(1, self.mu_size, x.shape[2])  # [B, N, C] bool
            ].view(
                x.shape[0], -1, x.shape[-1]  # back to [B, N_kept, C]
            )
        return x.cumsum(dim=1)


class UnsqueezeTwoRepeat(Unsqueezed):
    def forward(self, x, mask=None):
        x = self.embed(x)
        if mask is not None:
            x = x[mask.unsqueeze(2).repeat((1, self.mu_size, x.shape[2]))].view(x.shape[0], -1, x.shape[-1])
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
