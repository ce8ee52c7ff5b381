"""Golden: SDPA with an attention mask in the 5-D layout (a padding mask for clips
padded to one length), as the mask is passed by forks: only to global attention
(`attn_mask if not self.use_mask_unit_attn else None`), to every block, as a bool
mask, and added to the logits of a kept manual fallback."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def padding_bias(keep):
    """(B, N) True where a token is real -> 0.0 there, -inf where padded."""
    bias = keep.to(torch.float64)
    return torch.where(bias == 0, float("-inf"), bias * 0.0)


class PaddedMaskUnitAttention(nn.Module):
    def __init__(self, dim, dim_out, heads, q_stride=1, window_size=4, use_mask_unit_attn=False):
        super().__init__()
        self.dim_out, self.heads, self.q_stride = dim_out, heads, q_stride
        self.head_dim = dim_out // heads
        self.scale = self.head_dim**-0.5
        self.window_size, self.use_mask_unit_attn = window_size, use_mask_unit_attn
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)

    def forward(self, x, attn_mask=None):
        B, N, _ = x.shape
        num_windows = (N // (self.q_stride * self.window_size)) if self.use_mask_unit_attn else 1
        if attn_mask is not None:
            attn_mask = attn_mask.reshape(B, -1, num_windows).permute(0, 2, 1)[:, None, :, None, :]
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.q_stride > 1:
            q = q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim).amax(dim=3)
        if hasattr(F, "scaled_dot_product_attention"):
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask if not self.use_mask_unit_attn else None
            )
        else:
            attn = (q * self.scale) @ k.transpose(-1, -2)
            if attn_mask is not None:
                attn = attn + attn_mask
            attn = attn.softmax(dim=-1)
            x = attn @ v
        x = x.transpose(1, 3).reshape(B, -1, self.dim_out)
        return self.proj(x)


class EveryBlockMaskAttention(PaddedMaskUnitAttention):
    """The mask goes to every block, windowed ones too: a padded window is a fully
    masked row of the attention."""

    def forward(self, x, attn_mask=None):
        B, N, _ = x.shape
        num_windows = N // (self.q_stride * self.window_size) if self.use_mask_unit_attn else 1
        mask = attn_mask.reshape(B, -1, num_windows).permute(0, 2, 1)[:, None, :, None, :]
        qkv = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        if self.q_stride > 1:
            q = q.unflatten(2, (self.q_stride, -1)).amax(dim=2)
        # a float attn_mask: the original's 5-D call (math backend; fused kernels read float masks otherwise);
        # a bool one: the additive mask the math backend makes of it, in q's dtype, 4-D
        x = (
            F.scaled_dot_product_attention(
                q.unflatten(1, (num_windows, q.shape[1] // num_windows)).transpose(
                    1, 2
                ),
                k.unflatten(1, (num_windows, q.shape[1] // num_windows)).transpose(
                    1, 2
                ),
                v.unflatten(1, (num_windows, q.shape[1] // num_windows)).transpose(
                    1, 2
                ),
                attn_mask=mask,
            )
            .transpose(1, 2)
            .flatten(1, 2)
            if mask is not None and mask.is_floating_point()
            else F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=(
                    None
                    if mask is None
                    else q.new_zeros(mask.shape)
                    .masked_fill(~mask, float("-inf"))
                    .reshape([1] * (5 - mask.dim()) + list(mask.shape))
                    .expand(-1, q.shape[1] // num_windows, num_windows, -1, -1)
                    .transpose(1, 2)
                    .flatten(1, 2)
                ),
            )
        )
        x = x.transpose(1, 2).reshape(B, -1, self.dim_out)
        return self.proj(x)


class FusedFlagMaskAttention(PaddedMaskUnitAttention):
    """timm-style: SDPA under a flag, the manual fallback adds the same mask."""

    def __init__(self, *args, fused=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused = fused

    def forward(self, x, attn_mask=None):
        B, N, _ = x.shape
        num_windows = N // self.window_size if self.use_mask_unit_attn else 1
        bias = attn_mask.reshape(B, -1, num_windows).permute(0, 2, 1)[:, None, :, None, :]
        qkv = (
            self.qkv(x)
            .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(2, 3)
        )
        q, k, v = qkv.unbind(0)
        if self.fused:
            # a float attn_mask: the original's 5-D call (math backend; fused kernels read float masks otherwise);
            # a bool one: the additive mask the math backend makes of it, in q's dtype, 4-D
            x = (
                F.scaled_dot_product_attention(
                    q.unflatten(1, (num_windows, self.heads)).transpose(1, 2),
                    k.unflatten(1, (num_windows, self.heads)).transpose(1, 2),
                    v.unflatten(1, (num_windows, self.heads)).transpose(1, 2),
                    attn_mask=bias,
                )
                .transpose(1, 2)
                .flatten(1, 2)
                if bias is not None and bias.is_floating_point()
                else F.scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    attn_mask=(
                        None
                        if bias is None
                        else q.new_zeros(bias.shape)
                        .masked_fill(~bias, float("-inf"))
                        .reshape([1] * (5 - bias.dim()) + list(bias.shape))
                        .expand(-1, self.heads, num_windows, -1, -1)
                        .transpose(1, 2)
                        .flatten(1, 2)
                    ),
                )
            )
        else:
            attn = (q * 0.5) @ k.transpose(-1, -2)
            attn = attn + (
                None
                if bias is None
                else bias.reshape([1] * (5 - bias.dim()) + list(bias.shape))
                .expand(-1, self.heads, num_windows, -1, -1)
                .transpose(1, 2)
                .flatten(1, 2)
            )
            attn = attn.softmax(dim=-1)
            x = attn @ v
        x = x.transpose(1, 2).reshape(B, -1, self.dim_out)
        return self.proj(x)


class PaddedClips(nn.Module):
    """Blocks fed one input and one padding mask: float (-inf where padded) or bool (True = real)."""

    def __init__(self, blocks, kind):
        super().__init__()
        self.blocks, self.kind = nn.ModuleList(blocks), kind

    def forward(self, x, keep):
        mask = padding_bias(keep) if self.kind == "float" else keep
        return [block(x, mask) for block in self.blocks]


def _keep(B, N, num_windows, real, fully_masked):
    """Clip 0 has `real` tokens, then padding; token n is in window n % num_windows,
    and `fully_masked` also pads whole windows of clip 1."""
    keep = torch.ones(B, N, dtype=torch.bool)
    keep[0, real:] = False
    grid = keep.view(B, -1, num_windows)  # (B, T, num_windows)
    if fully_masked:
        grid[1, :, 1] = False  # clip 1: windows 1 and 3 are all padding
        grid[1, :, 3] = False
    return keep


def golden_example():
    B, N = 2, 64
    models = []
    for kind in ("float", "bool"):
        models.append(
            PaddedClips(
                [
                    PaddedMaskUnitAttention(8, 8, 2, q_stride=2, window_size=4, use_mask_unit_attn=True),
                    PaddedMaskUnitAttention(8, 8, 2, use_mask_unit_attn=False),
                    EveryBlockMaskAttention(8, 8, 2, q_stride=2, window_size=4, use_mask_unit_attn=True),
                    EveryBlockMaskAttention(8, 8, 2, window_size=2, use_mask_unit_attn=True),
                    EveryBlockMaskAttention(8, 8, 2, use_mask_unit_attn=False),
                    FusedFlagMaskAttention(8, 8, 2, window_size=2, use_mask_unit_attn=True),
                    FusedFlagMaskAttention(8, 8, 2, use_mask_unit_attn=False),
                ],
                kind,
            )
        )
    # the manual fallback gives NaN on fully masked rows (before and after): partly
    # masked only; it adds a bool mask as 0/1, as before
    fallbacks = [
        PaddedClips(
            [
                FusedFlagMaskAttention(8, 8, 2, window_size=2, use_mask_unit_attn=True, fused=False),
                FusedFlagMaskAttention(8, 8, 2, use_mask_unit_attn=False, fused=False),
            ],
            kind,
        )
        for kind in ("float", "bool")
    ]

    class All(nn.Module):
        def __init__(self):
            super().__init__()
            self.parts = nn.ModuleList(models + fallbacks)

        def forward(self, x):
            out = []
            for i, part in enumerate(self.parts):
                fully_masked = i < len(models)
                out += part(x, _keep(B, N, 4, 20 if fully_masked else 40, fully_masked))
            return out

    return All().double(), (torch.randn(B, N, 8, dtype=torch.float64),)
