"""Golden: the token drop split across statements: the unit mask in its own name, the
boolean index and the view in separate statements."""
import torch
import torch.nn as nn


def random_unit_mask(batch, windows, kept):
    return torch.rand(batch, windows).argsort(dim=1).argsort(dim=1) < kept


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
        token_mask = mask[..., None].tile(1, self.mu_size, C)
        if num_kept is None:
            # a mask from the caller: rows may keep different counts, so select as before
            x = x[token_mask]
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
                            0, x.shape[1], mask.shape[-1], device=kept_windows.device
                        )[None, :, None]
                        + torch.arange(
                            0,
                            x.shape[0] * x.shape[1],
                            x.shape[1],
                            device=kept_windows.device,
                        )[:, None, None]
                    ).flatten(),
                )
                .flatten()
            )
        x = x.view(B, -1, C)
        return x.cumsum(dim=1)

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return SplitHiera.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class ViewInline(SplitHiera):
    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, num_kept=None
    ) -> torch.Tensor:
        hidden_states = self.embed(x)
        unit_mask = mask.unsqueeze(-1).tile(1, self.mu_size, hidden_states.shape[2])
        if num_kept is None:
            # a mask from the caller: rows may keep different counts, so select as before
            hidden_states = hidden_states[unit_mask].reshape(
                x.shape[0], -1, x.shape[-1]
            )
        else:
            kept_windows = (
                mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
            )
            hidden_states = (
                hidden_states.view(
                    hidden_states.shape[0], -1, mask.shape[-1], hidden_states.shape[-1]
                )
                .flatten(0, 2)
                .index_select(
                    0,
                    (
                        kept_windows[:, None, :]
                        + torch.arange(
                            0,
                            hidden_states.shape[1],
                            mask.shape[-1],
                            device=kept_windows.device,
                        )[None, :, None]
                        + torch.arange(
                            0,
                            hidden_states.shape[0] * hidden_states.shape[1],
                            hidden_states.shape[1],
                            device=kept_windows.device,
                        )[:, None, None]
                    ).flatten(),
                )
                .view(x.shape[0], -1, x.shape[-1])
            )
        return hidden_states.cumsum(dim=1)

    # hiera-rewrite: whether forward leaves the mask it is given alone (it is the class's own
    # and the submodules it gives the mask run their own forward), for callers that keep its count
    def _forward_leaves_mask(self, _leaving=forward):
        return ViewInline.forward is _leaving

    forward.leaves_mask = _forward_leaves_mask
    del _forward_leaves_mask


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = SplitHiera(), ViewInline()

    def forward(self, x, mask):
        return self.a(x, mask), self.b(x, mask)


def golden_example():
    x = torch.randn(2, 5 * 2, 4, dtype=torch.float64)
    return Both().double(), (x, random_unit_mask(2, 5, 3))
