"""Golden: explicit matmul-softmax mask-unit attention (transformers-style).

The probabilities are returned under a flag (kept explicit there, SDPA otherwise),
or never read (SDPA always)."""
import torch
import torch.nn as nn


class FlagAttention(nn.Module):
    def __init__(self, dim, heads, q_stride=1, window_size=4, windowed=True):
        super().__init__()
        self.heads, self.q_stride, self.window_size, self.windowed = heads, q_stride, window_size, windowed
        self.head_dim = dim // heads
        self.scale = (self.head_dim) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, hidden_states, output_attentions=False):
        batch_size, seq_len, _ = hidden_states.shape
        num_windows = 1
        tokens_per_window = seq_len
        if self.windowed:
            num_windows = seq_len // (self.q_stride * self.window_size)
            tokens_per_window = self.q_stride * self.window_size
        qkv = self.qkv(hidden_states)
        qkv = qkv.reshape(batch_size, tokens_per_window, num_windows, 3, self.heads, self.head_dim)
        if output_attentions or not isinstance(self.scale, (int, float)):
            # the attention probabilities are returned, or the scale is a tensor:
            # the explicit 5-D attention, unchanged
            qkv = qkv.permute(3, 0, 4, 2, 1, 5)

            query, key, value = qkv.unbind(0)

            if self.q_stride > 1:
                # max-pool the query over the stride
                query = query.view(
                    batch_size,
                    self.heads,
                    num_windows,
                    self.q_stride,
                    tokens_per_window // self.q_stride,
                    self.head_dim,
                )
                query = query.max(dim=3).values

            attn_weights = (query * self.scale) @ key.transpose(-1, -2)
            attn_weights = attn_weights.softmax(dim=-1)

            attn_output = attn_weights @ value
            attn_output = attn_output.transpose(1, 3).reshape(batch_size, -1, self.heads * self.head_dim)
        else:
            # 4-D q/k/v (batch*windows, heads, tokens, head_dim): SDPA runs a fused kernel
            qkv = qkv.permute(3, 0, 2, 4, 1, 5).flatten(1, 2)
            query, key, value = qkv.unbind(0)
            if self.q_stride > 1:
                query = (
                    query.unflatten(
                        2, (self.q_stride, tokens_per_window // self.q_stride)
                    )
                    .max(dim=2)
                    .values
                )
            attn_output = torch.nn.functional.scaled_dot_product_attention(
                query, key, value, scale=self.scale
            )
            # SDPA does not materialise the probabilities: read only when output_attentions
            attn_weights = None
            attn_output = (
                attn_output.unflatten(0, (batch_size, -1))
                .permute(0, 3, 1, 2, 4)
                .reshape(batch_size, -1, self.heads * self.head_dim)
            )
        attn_output = self.proj(attn_output)
        return (attn_output, attn_weights) if output_attentions else (attn_output, None)


class NoWeights(nn.Module):
    """One-line chain and one-line q-pool; the probabilities are never read."""

    def __init__(self, dim, heads, q_stride=2, window_size=4):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        nw = N // (self.q_stride * self.window_size)
        qkv = (
            self.qkv(x)
            .reshape(B, -1, nw, 3, self.heads, C // self.heads)
            .permute(3, 0, 2, 4, 1, 5)
            .flatten(1, 2)
        )
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q.unflatten(2, (self.q_stride, -1)).max(dim=2).values
        # scores, probabilities and output in one line
        return (
            torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.25)
            .unflatten(0, (B, -1))
            .permute(0, 3, 1, 2, 4)
            .reshape(B, -1, C)
            .clone()
        )


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = FlagAttention(8, 2, q_stride=2, window_size=4)
        self.b = FlagAttention(8, 2, windowed=False)
        self.c = NoWeights(8, 2)

    def forward(self, x):
        y, w = self.a(x, output_attentions=True)
        z, none = self.a(x)
        assert none is None
        g, gw = self.b(x, True)
        return y, w, z, g, gw, self.c(x)


def golden_example():
    return Both().double(), (torch.randn(2, 32, 8, dtype=torch.float64),)
