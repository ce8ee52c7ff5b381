"""Golden: `unsqueeze(-1)` / `unsqueeze(2)` instead of `[..., None]`, `.repeat` instead of
`.tile`, and comments on and inside the idiom lines."""
import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
    return torch.rand(batch, windows).argsort(dim=1).argsort(dim=1) < kept


class Unsqueezed(nn.Module):
    def __init__(self, dim=4, mu_size=3):
        super().__init__()
        self.mu_size = mu_size
        self.embed = nn.Linear(dim, dim)

    def forward(self, x, mask=None, num_kept=None):
        x = self.embed(x)
        if mask is not None:
            # keep only the visible mask units
            if num_kept is None:
                # a mask from the caller: rows may keep different counts, so select as before
                x = x[mask.unsqueeze(-1).tile(1, self.mu_size, x.shape[2])].view(
                    x.shape[0], -1, x.shape[-1]
                )  # drop
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
        return x.cumsum(dim=1)

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return Unsqueezed.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class Repeated(Unsqueezed):
    def forward(self, x, mask=None, num_kept=None):
        x = self.embed(x)
        if mask is not None:
            # [B, N, C] bool
            # back to [B, N_kept, C]
            if num_kept is None:
                # a mask from the caller: rows may keep different counts, so select as before
                x = x[mask[..., None].repeat(1, self.mu_size, x.shape[2])].view(
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
        return x.cumsum(dim=1)

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return Repeated.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class UnsqueezeTwoRepeat(Unsqueezed):
    def forward(self, x, mask=None, num_kept=None):
        x = self.embed(x)
        if mask is not None:
            if num_kept is None:
                # a mask from the caller: rows may keep different counts, so select as before
                x = x[mask.unsqueeze(2).repeat((1, self.mu_size, x.shape[2]))].view(
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
        return x.cumsum(dim=1)

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return UnsqueezeTwoRepeat.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class All(nn.Module):
    def __init__(self):
        super().__init__()
        self.parts = nn.ModuleList([Unsqueezed(), Repeated(), UnsqueezeTwoRepeat()])

    def forward(self, x, mask):
        return [part(x, mask) for part in self.parts]


def golden_example():
    x = torch.randn(3, 4 * 3, 4, dtype=torch.float64)
    return All().double(), (x, random_unit_mask(3, 4, 3))
