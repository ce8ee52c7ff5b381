"""Look-alike: the idiom only in comments and strings - nothing to rewrite.

    qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
    q, k, v = qkv[0], qkv[1], qkv[2]
    x = F.scaled_dot_product_attention(q, k, v)
    x = x.transpose(1, 3).reshape(B, -1, self.dim_out)
"""
import torch.nn as nn

# q = q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim).max(dim=3).values
# x = F.scaled_dot_product_attention(q, k, v)
IDIOM = "x = F.scaled_dot_product_attention(q, k, v).transpose(1, 3).reshape(B, -1, C)"
POOL = "x.view(B, 4, -1, C).max(dim=1).values"


class Documented(nn.Module):
    def forward(self, x):
        # qkv = qkv.permute(3, 0, 4, 2, 1, 5)
        return x  # F.scaled_dot_product_attention(q, k, v)
