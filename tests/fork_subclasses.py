"""Subclasses a user writes in their own training code, in a module of their own.

The rewritten hiera_mae.py cannot see these classes: whatever it proved about
``self.<method>`` from its own file may be false at run time.  Each subclass
overrides one method with upstream's signature; tests/test_mask_exactness.py builds
each over the original and over the rewritten package and compares them.
"""

from __future__ import annotations

import functools
import math

import torch


def subclasses(mae_class):
    """{name: subclass of ``mae_class``}, one override each."""

    class RoundedKeep(mae_class):
        """get_random_mask keeps round(...) units, not int(...): another count."""

        def get_random_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
            B = x.shape[0]
            num_windows = math.prod(self.mask_spatial_shape)
            len_keep = round(num_windows * (1 - mask_ratio)) + 1
            noise = torch.rand(B, num_windows, device=x.device)
            ids_restore = torch.argsort(torch.argsort(noise, dim=1), dim=1)
            mask = torch.zeros([B, num_windows], device=x.device)
            mask[:, :len_keep] = 1
            return torch.gather(mask, dim=1, index=ids_restore).bool()

    class SuperThenFlip(mae_class):
        """get_random_mask calls the original, then keeps one unit more in each row."""

        def get_random_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
            mask = super().get_random_mask(x, mask_ratio)
            first_dropped = mask.logical_not().byte().argmax(dim=1)
            return mask.scatter(1, first_dropped[:, None], True)

    class EveryTokenLoss(mae_class):
        """forward_decoder predicts every token: pred_mask is all True."""

        def forward_decoder(self, x: torch.Tensor, mask: torch.Tensor):
            pred, pred_mask = super().forward_decoder(x, mask)
            return pred, torch.zeros_like(pred_mask)

    class OwnLoss(mae_class):
        """forward_loss of its own, with upstream's signature (no num_masked)."""

        def forward_loss(self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor):
            label = self.get_pixel_label_2d(x, mask, norm=False)
            pred = pred[mask]
            loss = (pred - label).abs()
            return loss.mean(), pred, label

    class OwnLabels(mae_class):
        """get_pixel_label_2d of its own, with upstream's signature."""

        def get_pixel_label_2d(self, input_img: torch.Tensor, mask: torch.Tensor, norm: bool = True):
            input_img = input_img.permute(0, 2, 3, 1)
            size = self.pred_stride
            label = input_img.unfold(1, size, size).unfold(2, size, size)
            label = label.flatten(1, 2).flatten(2)
            return label[mask] * 2.0

    class LabelsWriteTheMask(mae_class):
        """get_pixel_label_2d masks one more token in each row, writing the mask it is
        given (forward_loss's own): forward_loss's `pred[mask]` must select that mask."""

        def get_pixel_label_2d(self, input_img: torch.Tensor, mask: torch.Tensor, norm: bool = True):
            mask[torch.arange(mask.shape[0]), mask.logical_not().byte().argmax(dim=1)] = True
            return super().get_pixel_label_2d(input_img, mask, norm)

    class OwnEncoder(mae_class):
        """forward_encoder of its own: a mask made here, not by get_random_mask."""

        def forward_encoder(self, x: torch.Tensor, mask_ratio: float, mask=None):
            if mask is None:
                units = math.prod(self.mask_spatial_shape)
                mask = torch.zeros(x.shape[0], units, dtype=torch.bool, device=x.device)
                mask[:, 1::2] = True
            return super().forward_encoder(x, mask_ratio, mask=mask)

    class WrapsKeepOneMore(mae_class):
        """get_random_mask wraps the file's own with functools.wraps -- which copies the
        function's attributes, the count it states included -- and keeps one unit more
        in each row: the copied count is not this mask's."""

        @functools.wraps(getattr(mae_class, "get_random_mask", None))
        def get_random_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
            mask = mae_class.get_random_mask(self, x, mask_ratio)
            first_dropped = mask.logical_not().byte().argmax(dim=1)
            return mask.scatter(1, first_dropped[:, None], True)

    return {
        cls.__name__: cls
        for cls in (
            RoundedKeep, SuperThenFlip, EveryTokenLoss, OwnLoss, OwnLabels, LabelsWriteTheMask, OwnEncoder,
            WrapsKeepOneMore,
        )
    }
