"""Golden: the encoder token drop as upstream writes it (black-wrapped) and on one line."""
import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
    """A (B, windows) bool mask keeping ``kept`` units per row (True = keep)."""
    return torch.rand(batch, windows).argsort(dim=1).argsort(dim=1) < kept


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
            if num_kept is None:
                # a mask from the caller: rows may keep different counts, so select as before
                x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(
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

        return self.head(x).cumsum(dim=1)

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return TinyHiera.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class OneLine(TinyHiera):
    def forward(self, x, mask=None, num_kept=None):
        x = self.embed(x)
        if mask is not None:
            if num_kept is None:
                # a mask from the caller: rows may keep different counts, so select as before
                x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(
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
        return self.head(x).cumsum(dim=1)

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return OneLine.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = TinyHiera(), OneLine()

    def forward(self, x, mask):
        return self.a(x, mask), self.b(x, mask), self.b(x)


def golden_example():
    x = torch.randn(3, 4 * 3, 6, dtype=torch.float64)
    return Both().double(), (x, random_unit_mask(3, 4, 2))
