"""Golden: which callees get the count.  forward_loss passes `num_masked` only to a
method of its own class that gains it *and* receives the same mask: not to a
skip-marked helper, not to one called with another mask, not to another class's.
That other class defines no forward_loss or forward_decoder: not an MAE, so its own
selection is left as it is (no count could reach it)."""
import torch
import torch.nn as nn


def random_selection(batch, tokens, selected):
    return torch.rand(batch, tokens).argsort(dim=1).argsort(dim=1) < selected


class Other(nn.Module):
    def gather(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        rows = x[mask]
        return rows


def true_rows(mask, count):
    """Indices of mask.flatten()'s count True entries, ascending (static shapes)."""
    return mask.flatten().logical_not().byte().argsort(stable=True)[:count]


def masked_rows(t, mask, count=None):
    """t[mask]; given mask's True count (mask over t's dims 0, 1), in static shapes."""
    if count is None:
        return t[mask]
    return t.flatten(0, 1).index_select(0, true_rows(mask, count))


def not_overridden(model, cls, *methods):
    """Whether type(model) runs cls's own `methods` (cls: the caller's __class__)."""
    return all(getattr(type(model), name) is getattr(cls, name) for name in methods)


class Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.other = Other()

    # hiera-rewrite: skip
    def labels_skipped(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        label = x[mask]
        return label

    def labels(
        self, x: torch.Tensor, mask: torch.Tensor, norm: bool = True, num_masked=None
    ) -> torch.Tensor:
        label = masked_rows(x, mask, num_masked)
        return label - label.mean(dim=-1, keepdim=True) if norm else label

    def weights(
        self, w: torch.Tensor, mask: torch.Tensor, num_masked=None
    ) -> torch.Tensor:
        picked = masked_rows(w, mask, num_masked)  # (B * n,): a 2-D source selects single values
        return picked

    def forward_loss(
        self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor, num_masked=None
    ):
        if not_overridden(self, __class__, "labels", "labels_skipped"):
            label = self.labels(x, mask, num_masked=num_masked) + self.labels_skipped(
                x, mask
            )
        else:  # an override gets upstream's call, and may change mask
            label, num_masked = (
                self.labels(x, mask) + self.labels_skipped(x, mask),
                None,
            )
        visible = self.labels(x, ~mask, norm=False)
        if not_overridden(self, __class__, "weights"):
            w = self.weights(x.sum(-1), mask=mask, num_masked=num_masked)
        else:  # an override gets upstream's call, and may change mask
            w, num_masked = self.weights(x.sum(-1), mask=mask), None
        pred = self.proj(pred)[mask] if False else pred
        pred = masked_rows(pred, mask, num_masked)
        return (((pred - label) ** 2).mean(-1) * w).mean(), pred, label, visible, self.other.gather(x, mask)

    def forward(self, x, pred, mask):
        return self.forward_loss(x, self.proj(pred), mask)


def golden_example():
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    pred = torch.randn(3, 6, 4, dtype=torch.float64)
    return Loss().double(), (x, pred, random_selection(3, 6, 4))
