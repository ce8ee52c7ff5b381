"""Look-alike: every mask idiom under `# hiera-rewrite: skip`: nothing changes, and the
method that selects through a skipped helper passes it no count."""
import torch
import torch.nn as nn


class Skipped(nn.Module):
    # hiera-rewrite: skip
    def forward(self, x, mask=None):
        x = x[mask[..., None].tile(1, 2, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return x

    def forward_decoder(self, x, mask):  # hiera-rewrite: skip
        x_dec = torch.zeros(*mask.shape, *x.shape[2:], dtype=x.dtype)
        mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))
        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()
        x_dec[mask] = x.flatten()
        return x_dec


# hiera-rewrite: skip
class SkippedLoss(nn.Module):
    def get_pixel_label_2d(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        label = x[mask]
        return label

    def forward_loss(self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor):
        label = self.get_pixel_label_2d(x, mask)
        pred = pred[mask]
        return ((pred - label) ** 2).mean(), pred, label
