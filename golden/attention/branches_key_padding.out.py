"""Golden: the two-layout form (windowed 5-D path under `if C:`, global 4-D path in the
else, one SDPA call, the output restored under `if C:` again) with a key-padding
attn_mask built in each path's own layout.  Only the 5-D path's mask changes layout:
the global path's q is 4-D already and its mask goes to SDPA as it is (converting it
there read the batch as heads: wrong where heads == B, a shape error elsewhere).
num_windows is bound on the windowed path alone in the second class."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class PaddedAttention(nn.Module):
    def __init__(self, dim, heads, q_stride=1, window_size=2, windowed=True, additive=False):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.windowed, self.additive = windowed, additive
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def padding(self, keep):
        """A caller's (B, N) mask as given (bool, or additive); its own bool one, or
        that made additive in float64 with a finite large negative."""
        if keep.is_floating_point() or not self.additive:
            return keep
        return torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, -1e4)

    def forward(self, x, keep=None):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size) if self.windowed else 1
        if keep is None:  # padding: the low-energy tokens
            energy = x.norm(dim=-1)
            keep = energy > energy.mean()
        if self.windowed:
            qkv = (
                self.qkv(x)
                .reshape(B, -1, num_windows, 3, self.heads, self.head_dim)
                .permute(3, 0, 2, 4, 1, 5)
                .flatten(2, 3)
            )
            q, k, v = qkv.unbind(0)
            if self.q_stride > 1:
                q = q.unflatten(2, (self.q_stride, -1)).amax(dim=2)
            pad = self.padding(keep.reshape(B, -1, num_windows).transpose(1, 2))[:, None, :, None, :]
        else:
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            pad = self.padding(keep)[:, None, None, :]
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
                attn_mask=pad,
            )
            .transpose(1, 2)
            .flatten(1, 2)
            if (self.windowed) and pad is not None and pad.is_floating_point()
            else F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=(
                    (
                        None
                        if pad is None
                        else q.new_zeros(pad.shape)
                        .masked_fill(~pad, float("-inf"))
                        .reshape([1] * (5 - pad.dim()) + list(pad.shape))
                        .expand(-1, q.shape[1] // num_windows, num_windows, -1, -1)
                        .transpose(1, 2)
                        .flatten(1, 2)
                    )
                    if self.windowed
                    else pad
                ),
            )
        )
        if self.windowed:
            x = x.transpose(1, 2).reshape(B, -1, C)
        else:
            x = x.transpose(1, 2).reshape(B, -1, C)
        return self.proj(x)


class NegatedPaddedAttention(PaddedAttention):
    """The windowed path in the `else` of `if not C:`, num_windows bound there alone."""

    def forward(self, x, keep=None):
        B, N, C = x.shape
        if keep is None:
            keep = x.norm(dim=-1) > 0.8 * x.norm(dim=-1).mean()
        if not self.windowed:
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            pad = self.padding(keep)[:, None, None, :]
        else:
            num_windows = N // self.window_size
            qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
            q, k, v = qkv.unbind(0)
            pad = self.padding(keep.reshape(B, -1, num_windows).transpose(1, 2))[:, None, :, None, :]
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=pad)
        if not self.windowed:
            x = x.transpose(1, 2).reshape(B, -1, C)
        else:
            x = x.transpose(1, 3).reshape(B, -1, C)
        return self.proj(x)


def _keep(B, N):
    """A caller's padding mask for the dtype matrix (tests/test_attn_mask_dtypes.py): no
    window or row with every key padded."""
    n = torch.arange(N)
    return torch.stack([(n * 7 + b) % 5 != 0 for b in range(B)])


def golden_example():
    # heads == B == 2 in the global stages: a mask converted there is read per head
    model = nn.Sequential(
        PaddedAttention(8, 2, q_stride=2, window_size=4),
        PaddedAttention(8, 2, windowed=False),
        PaddedAttention(8, 2, window_size=2, additive=True),
        PaddedAttention(8, 4, windowed=False, additive=True),
        NegatedPaddedAttention(8, 2, window_size=2),
        NegatedPaddedAttention(8, 2, windowed=False),
        NegatedPaddedAttention(8, 4, windowed=False, additive=True),
    )
    return model.double(), (torch.randn(2, 64, 8, dtype=torch.float64),)
