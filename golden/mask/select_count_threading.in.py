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


class Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.other = Other()

    # hiera-rewrite: skip
    def labels_skipped(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        label = x[mask]
        return label

    def labels(self, x: torch.Tensor, mask: torch.Tensor, norm: bool = True) -> torch.Tensor:
        label = x[mask]
        return label - label.mean(dim=-1, keepdim=True) if norm else label

    def weights(self, w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        picked = w[mask]  # (B * n,): a 2-D source selects single values
        return picked

    def forward_loss(self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor):
        label = self.labels(x, mask) + self.labels_skipped(x, mask)
        visible = self.labels(x, ~mask, norm=False)
        w = self.weights(x.sum(-1), mask=mask)
        pred = self.proj(pred)[mask] if False else pred
        pred = pred[mask]
        return (((pred - label) ** 2).mean(-1) * w).mean(), pred, label, visible, self.other.gather(x, mask)

    def forward(self, x, pred, mask):
        return self.forward_loss(x, self.proj(pred), mask)


def golden_example():
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    pred = torch.randn(3, 6, 4, dtype=torch.float64)
    return Loss().double(), (x, pred, random_selection(3, 6, 4))
