"""Golden: which callees get the count.  forward_loss passes `num_masked` only to a
method of its own class that gains it *and* receives the same mask: not to a
skip-marked helper, not to one called with another mask, not to another class's."""
import torch
import torch.nn as nn


def masked_rows(batch, tokens, selected):
    return torch.rand(batch, tokens).argsort(dim=1).argsort(dim=1) < selected


class Other(nn.Module):
    def gather(
        self, x: torch.Tensor, mask: torch.Tensor, num_masked=None
    ) -> torch.Tensor:
        if num_masked is None:
            # a mask from the caller: rows may select different counts, so select as before
            rows = x[mask]
        else:
            masked_tokens = (
                mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_masked]
            )
            rows = x.flatten(0, 1).index_select(
                0,
                (
                    masked_tokens
                    + torch.arange(
                        0,
                        x.shape[0] * x.shape[1],
                        x.shape[1],
                        device=masked_tokens.device,
                    )[:, None]
                ).flatten(),
            )
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

    __own_labels_skipped = labels_skipped

    def labels(
        self, x: torch.Tensor, mask: torch.Tensor, norm: bool = True, num_masked=None
    ) -> torch.Tensor:
        if num_masked is None:
            # a mask from the caller: rows may select different counts, so select as before
            label = x[mask]
        else:
            masked_tokens = (
                mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_masked]
            )
            label = x.flatten(0, 1).index_select(
                0,
                (
                    masked_tokens
                    + torch.arange(
                        0,
                        x.shape[0] * x.shape[1],
                        x.shape[1],
                        device=masked_tokens.device,
                    )[:, None]
                ).flatten(),
            )
        return label - label.mean(dim=-1, keepdim=True) if norm else label

    __own_labels = labels

    def weights(
        self, w: torch.Tensor, mask: torch.Tensor, num_masked=None
    ) -> torch.Tensor:
        if num_masked is None:
            # a mask from the caller: rows may select different counts, so select as before
            picked = w[mask]  # (B * n,): a 2-D source selects single values
        else:
            masked_tokens = (
                mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_masked]
            )
            picked = w.flatten(0, 1).index_select(
                0,
                (
                    masked_tokens
                    + torch.arange(
                        0,
                        w.shape[0] * w.shape[1],
                        w.shape[1],
                        device=masked_tokens.device,
                    )[:, None]
                ).flatten(),
            )
        return picked

    __own_weights = weights

    def forward_loss(
        self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor, num_masked=None
    ):
        # an override of labels or labels_skipped may write mask in place: then its count is unknown
        num_masked = (
            num_masked
            if (
                type(self).labels is Loss.__own_labels and "labels" not in self.__dict__
            )
            and (
                type(self).labels_skipped is Loss.__own_labels_skipped
                and "labels_skipped" not in self.__dict__
            )
            else None
        )
        label = self.labels(
            x, mask, **({} if num_masked is None else {"num_masked": num_masked})
        ) + self.labels_skipped(x, mask)
        visible = self.labels(x, ~mask, norm=False)
        # an override of weights may write mask in place: then its count is unknown
        num_masked = (
            num_masked
            if (
                type(self).weights is Loss.__own_weights
                and "weights" not in self.__dict__
            )
            else None
        )
        w = self.weights(
            x.sum(-1),
            mask=mask,
            **({} if num_masked is None else {"num_masked": num_masked})
        )
        pred = self.proj(pred)[mask] if False else pred
        if num_masked is None:
            # a mask from the caller: rows may select different counts, so select as before
            pred = pred[mask]
        else:
            masked_tokens = (
                mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_masked]
            )
            pred = pred.flatten(0, 1).index_select(
                0,
                (
                    masked_tokens
                    + torch.arange(
                        0,
                        pred.shape[0] * pred.shape[1],
                        pred.shape[1],
                        device=masked_tokens.device,
                    )[:, None]
                ).flatten(),
            )
        return (((pred - label) ** 2).mean(-1) * w).mean(), pred, label, visible, self.other.gather(x, mask)

    def forward(self, x, pred, mask):
        return self.forward_loss(x, self.proj(pred), mask)


def golden_example():
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    pred = torch.randn(3, 6, 4, dtype=torch.float64)
    return Loss().double(), (x, pred, masked_rows(3, 6, 4))
