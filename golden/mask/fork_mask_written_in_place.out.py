"""Golden fork: the merged Hiera-like MAE of mae_merged.in.py, with a fork's
in-place writes into its masks.  forward_encoder overwrites the mask get_random_mask
made with a fixed one, through a view (`units.copy_(...)`: every other unit kept, not
get_random_mask's count), and forward_loss never scores the first token
(`mask[:, 0] = False`: rows then select different counts).  So the count
get_random_mask states, and the masked count derived from it, are not the masks':
the count the MAE's encoder would pass, the counts its forward would pass and
forward_loss's selection are refused, each naming the write.  The token drop and the
decoder fill are still rewritten; the label methods are left alone (no count reaches
them)."""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C_in, *spatial) -> (B, *tokens, C_in * patch**d)."""
    B, C, d = x.shape[0], x.shape[1], x.dim() - 2
    split = [s for n in x.shape[2:] for s in (n // patch, patch)]
    x = x.reshape(B, C, *split)
    order = [0] + [2 + 2 * i for i in range(d)] + [1] + [3 + 2 * i for i in range(d)]
    return x.permute(order).flatten(d + 1)


def unroll(x: torch.Tensor, units: List[int], unit_shape: List[int]) -> torch.Tensor:
    """(B, *tokens, C) -> (B, N, C), in-unit position slowest, unit fastest."""
    B, C, d = x.shape[0], x.shape[-1], len(units)
    x = x.reshape(B, *[s for pair in zip(units, unit_shape) for s in pair], C)
    order = [0] + [2 + 2 * i for i in range(d)] + [1 + 2 * i for i in range(d)] + [2 * d + 1]
    return x.permute(order).reshape(B, -1, C)


def undo_windowing(x: torch.Tensor, units: List[int], unit_shape: List[int]) -> torch.Tensor:
    """(B, #units, *unit_shape, C) -> (B, *tokens, C) in spatial order."""
    B, C, d = x.shape[0], x.shape[-1], len(units)
    x = x.reshape(B, *units, *unit_shape, C)
    order = [0] + [p for i in range(d) for p in (1 + i, 1 + d + i)] + [2 * d + 1]
    return x.permute(order).reshape(B, *[u * s for u, s in zip(units, unit_shape)], C)


def kept_tokens(x, mask, mu_size, num_kept=None):
    """x[mask[..., None].tile(1, mu_size, x.shape[2])]; given each row's kept count, in static shapes."""
    if num_kept is None or x.dim() != 3 or mask.dim() != 2 or x.shape[:2] != (len(mask), mu_size * mask.shape[1]):
        return x[mask[..., None].tile(1, mu_size, x.shape[2])]  # (which raises for the latter shapes)
    B, N = mask.shape
    # token n is unit n % N at position n // N: (b, t, j) is row (b * mu_size + t) * N + j
    kept = mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
    torch._assert_async((mask.sum(1) == kept.shape[1]).all())  # a count not every row's raises
    rows = torch.arange(0, B * mu_size * N, N, device=x.device).view(B, mu_size, 1) + kept[:, None]
    return x.unflatten(1, (mu_size, N)).flatten(0, 2).index_select(0, rows.flatten())


class TinyHiera(nn.Module):
    def __init__(self, in_chans=2, dim=8, mask_spatial_shape=(2, 2), unit_shape=(2, 1), patch=2, depth=2):
        super().__init__()
        d = len(unit_shape)
        self.mask_spatial_shape = list(mask_spatial_shape)
        self.unit_shape = list(unit_shape)
        self.mu_size = math.prod(unit_shape)
        self.tokens_spatial_shape = [u * s for u, s in zip(mask_spatial_shape, unit_shape)]
        self.q_stride = [1] * d
        self.patch = patch
        self.patch_embed = nn.Linear(in_chans * patch**d, dim)
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, math.prod(self.tokens_spatial_shape), dim))
        self.blocks = nn.ModuleList([nn.Linear(dim, dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 3)

    def get_random_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
        """A random (B, #units) mask, True = keep; the same count in every row."""
        B = x.shape[0]
        num_windows = math.prod(self.mask_spatial_shape)
        len_keep = int(num_windows * (1 - mask_ratio))
        noise = torch.rand(B, num_windows, device=x.device)
        rank = torch.argsort(torch.argsort(noise, dim=1), dim=1)
        keep = torch.zeros([B, num_windows], device=x.device)
        keep[:, :len_keep] = 1
        keep = torch.gather(keep, dim=1, index=rank)
        return keep.bool()

    def reroll(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T * kept, C) -> (B, kept, *unit_shape, C)."""
        B, C = x.shape[0], x.shape[-1]
        return x.view(B, self.mu_size, -1, C).transpose(1, 2).reshape(B, -1, *self.unit_shape, C)

    def forward(
        self,
        x: torch.Tensor,
        mask: Optional[torch.Tensor] = None,
        return_intermediates: bool = False,
        random_mask_ratio: Optional[float] = None,
    ):
        x = self.patch_embed(patchify(x, self.patch))
        x = x + self.pos_embed.view(1, *self.tokens_spatial_shape, -1)
        x = unroll(x, self.mask_spatial_shape, self.unit_shape)

        # Discard masked tokens
        if mask is not None:
            num_kept = None  # kept units per row, known for get_random_mask's masks
            if (
                type(random_mask_ratio) in (int, float)
                and type(self).get_random_mask is __class__.get_random_mask
            ):
                num_kept = int(mask.shape[1] * (1 - random_mask_ratio))
            x = kept_tokens(x, mask, self.mu_size, num_kept).view(
                x.shape[0], -1, x.shape[-1]
            )

        intermediates = []
        for blk in self.blocks:
            x = x + torch.tanh(blk(x)).cumsum(dim=1) / x.shape[1]
            if return_intermediates:
                intermediates.append(self.reroll(x))
        if mask is None:
            x = self.head(self.norm(x.mean(dim=1)))
        if return_intermediates:
            return x, intermediates
        return x


def true_rows(mask, count):
    """Indices of mask.flatten()'s count True entries, ascending (static shapes)."""
    return mask.flatten().logical_not().byte().argsort(stable=True)[:count]


class TinyMAE(TinyHiera):
    """The MAE: a subclass of the encoder, as upstream's."""

    def __init__(self, decoder_dim=6, norm_pix_loss=True, **kwargs):
        super().__init__(**kwargs)
        dim = self.patch_embed.out_features
        in_features = self.patch_embed.in_features
        self.pred_stride = self.patch
        self.norm_pix_loss = norm_pix_loss
        self.fusion = nn.Linear(dim, dim)
        self.encoder_norm = nn.LayerNorm(dim)
        self.decoder_embed = nn.Linear(dim, decoder_dim)
        self.mask_token = nn.Parameter(torch.randn(1, 1, decoder_dim))
        self.decoder_pos_embed = nn.Parameter(0.02 * torch.randn(1, math.prod(self.tokens_spatial_shape), decoder_dim))
        self.decoder_block = nn.Linear(decoder_dim, decoder_dim)
        self.decoder_pred = nn.Linear(decoder_dim, in_features)

    def get_pixel_label_1d(self, input_seq: torch.Tensor, mask: torch.Tensor, norm: bool = True) -> torch.Tensor:
        # mask (boolean tensor): True must correspond to *masked*
        size = self.pred_stride
        label = input_seq.permute(0, 2, 1).unfold(1, size, size).flatten(2)
        label = label[mask]
        if norm:
            label = (label - label.mean(dim=-1, keepdim=True)) / (label.var(dim=-1, keepdim=True) + 1.0e-6) ** 0.5
        return label

    def get_pixel_label_2d(self, input_img: torch.Tensor, mask: torch.Tensor, norm: bool = True) -> torch.Tensor:
        size = self.pred_stride
        label = input_img.permute(0, 2, 3, 1).unfold(1, size, size).unfold(2, size, size)
        label = label.flatten(1, 2).flatten(2)
        label = label[mask]
        if norm:
            label = (label - label.mean(dim=-1, keepdim=True)) / (label.var(dim=-1, keepdim=True) + 1.0e-6) ** 0.5
        return label

    def get_pixel_label_3d(self, input_vid: torch.Tensor, mask: torch.Tensor, norm: bool = True) -> torch.Tensor:
        size = self.pred_stride
        label = input_vid.permute(0, 2, 3, 4, 1)
        label = label.unfold(1, size, size).unfold(2, size, size).unfold(3, size, size)
        label = label.flatten(1, 3).flatten(2)
        label = label[mask]

        if norm:
            label = (label - label.mean(dim=-1, keepdim=True)) / (label.var(dim=-1, keepdim=True) + 1.0e-6) ** 0.5
        return label

    def forward_encoder(
        self, x: torch.Tensor, mask_ratio: float, mask: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if mask is None:
            mask = self.get_random_mask(x, mask_ratio)  # [B, #units]
            units = mask.view(mask.shape[0], -1)
            units.copy_(torch.arange(units.shape[1], device=x.device) % 2 == 0)  # a fixed mask, to debug

        _, intermediates = super().forward(x, mask, return_intermediates=True)
        x = 0.0
        for interm in intermediates:
            x = x + self.fusion(interm)
        return self.encoder_norm(x), mask

    def forward_decoder(self, x: torch.Tensor, mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.decoder_embed(x)

        # x: [B, #units kept, *unit_shape, C]; mask: [B, #units]
        x_dec = torch.zeros(*mask.shape, *x.shape[2:], device=x.device, dtype=x.dtype)
        mask_tokens = self.mask_token.view((1,) * (len(mask.shape) + len(x.shape[2:-1])) + (-1,))
        kept = true_rows(mask, x.shape[0] * x.shape[1])
        torch._assert_async(mask.count_nonzero() == len(kept))  # x fills all True units
        mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))
        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()
        x_dec.flatten(0, 1).index_copy_(0, kept, x.flatten(0, 1))
        x_dec = ~mask * mask_tokens + mask * x_dec

        x = undo_windowing(x_dec, self.mask_spatial_shape, self.unit_shape)
        mask = undo_windowing(mask[..., 0:1], self.mask_spatial_shape, self.unit_shape)
        x = x.reshape(x.shape[0], -1, x.shape[-1])
        mask = mask.reshape(x.shape[0], -1)

        x = x + self.decoder_pos_embed
        x = x + torch.tanh(self.decoder_block(x)).cumsum(dim=1) / x.shape[1]
        return self.decoder_pred(x), mask

    def forward_loss(
        self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """mask: True is *masked*."""
        mask[:, 0] = False  # never score the first token
        if len(self.q_stride) == 1:
            label = self.get_pixel_label_1d(x, mask, norm=self.norm_pix_loss)
        elif len(self.q_stride) == 2:
            label = self.get_pixel_label_2d(x, mask)
        else:
            label = self.get_pixel_label_3d(x, mask, self.norm_pix_loss)

        pred = pred[mask]
        loss = (pred - label) ** 2

        return loss.mean(), pred, label

    def forward(
        self, x: torch.Tensor, mask_ratio: float = 0.6, mask: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        latent, mask = self.forward_encoder(x, mask_ratio, mask=mask)
        pred, pred_mask = self.forward_decoder(latent, mask)
        return *self.forward_loss(x, pred, ~pred_mask), mask


def tiny_mae(dims: int = 2) -> TinyMAE:
    if dims == 1:
        return TinyMAE(mask_spatial_shape=(4,), unit_shape=(3,))
    if dims == 2:
        return TinyMAE(mask_spatial_shape=(2, 2), unit_shape=(2, 1))
    return TinyMAE(mask_spatial_shape=(2, 1, 2), unit_shape=(1, 2, 1), norm_pix_loss=False)


class Suite(nn.Module):
    """1-D, 2-D and 3-D MAEs with generated masks, and a caller's own mask."""

    def __init__(self):
        super().__init__()
        self.mae1, self.mae2, self.mae3 = tiny_mae(1), tiny_mae(2), tiny_mae(3)

    def forward(self, x1, x2, x3, mask2):
        return (
            self.mae1(x1, 0.5),
            self.mae2(x2),
            self.mae3(x3, 0.75),
            self.mae2(x2, mask=mask2),
            self.mae2.forward_encoder(x2, 0.25)[0],
        )


def golden_example():
    x1 = torch.randn(2, 2, 24, dtype=torch.float64)
    x2 = torch.randn(3, 2, 8, 4, dtype=torch.float64)
    x3 = torch.randn(2, 2, 4, 4, 4, dtype=torch.float64)
    mask2 = torch.tensor([[True, False, True, False], [False, False, True, True], [True, True, False, False]])
    return Suite().double(), (x1, x2, x3, mask2)
