"""Look-alike: the idioms only in comments, strings and a commented-out method.

    x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
    x_dec[mask] = x.flatten()
    label = label[mask]
"""
import torch
import torch.nn as nn

SNIPPET = "x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(B, -1, C)"


class Documented(nn.Module):
    # def forward_loss(self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor):
    #     pred = pred[mask]
    #     x_dec[mask] = x.flatten()
    def forward(self, x):
        note = "pred = pred[mask]"  # x_dec[mask] = x.flatten()
        return x, note
