"""Look-alikes of the pool: an in-place op (or code that may do one) reaches the pooled
tensor or the tensor it pools before backward.  `.max(...).values` keeps only indices
for backward, so all of these run; `.amax` keeps its input and output, so after a
rewrite backward would raise.  Every pool here must be left alone, with a reason."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ScaledQPool(nn.Module):
    """q-pool, then `q *= self.scale`."""

    def __init__(self, dim=8, heads=2, q_stride=2):
        super().__init__()
        self.heads, self.q_stride = heads, q_stride
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = (
            q.view(B, self.heads, self.q_stride, -1, C // self.heads)
            .max(dim=2)
            .values
        )
        q *= self.scale
        attn = (q @ k.transpose(-1, -2)).softmax(dim=-1)
        return (attn @ v).transpose(1, 2).reshape(B, -1, C)


class MulUnderscore(nn.Module):
    """Pooled, then `.mul_(...)` on it."""

    def forward(self, x):
        x = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        x.mul_(2.0)
        return x.sum(-1)


class AliasAdd(nn.Module):
    """`.add_` through another name (a view of it)."""

    def forward(self, x):
        pooled = x.view(x.shape[0], 2, -1, x.shape[-1]).max(1).values
        flat = pooled.flatten(1)
        flat.add_(1.0)
        return pooled * 3


class IndexAssign(nn.Module):
    """Indexing assignment in a branch."""

    def forward(self, x, zero_first: bool = True):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1)[0]
        if zero_first:
            y[..., 0] = 0.0
        return y * y


class InplaceActivation(nn.Module):
    """Passed to a module built with inplace=True, then `torch.relu_` and `clamp_`."""

    def __init__(self):
        super().__init__()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        a = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        a = self.act(a)
        b = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        torch.relu_(b)
        c = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        c.clamp_(min=0.0)
        d = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        d = F.relu(d, inplace=True)
        return a * b * c * d


def scale_in_place(t):
    t.mul_(0.5)
    return t


class HelperMutates(nn.Module):
    """Passed to a function of this file that modifies it in place."""

    def forward(self, x):
        x = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        return scale_in_place(x) * x


class InputModified(nn.Module):
    """The tensor it pools is modified in place after the pool (a sibling view too)."""

    def __init__(self, dim=8):
        super().__init__()
        self.proj = nn.Linear(dim, 2 * dim)

    def forward(self, x):
        h = self.proj(x)
        left, right = h[..., :8], h[..., 8:]
        pooled = left.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        right += 1.0
        return pooled.sum(-1) + right.sum(-1).mean(-1, keepdim=True)


class LoopCarried(nn.Module):
    """An in-place op earlier in a loop body reaches the pool of the previous round."""

    def forward(self, x):
        out = x
        y = None
        for i in range(2):
            if y is not None:
                y.mul_(2.0)
                out = out + y.repeat(1, 2, 1)
            y = out.view(out.shape[0], 2, -1, out.shape[-1]).max(dim=1).values
        return out.sum() + y.sum()


class UnknownModule(nn.Module):
    """Passed to a module the file cannot see into, and stored on self."""

    def __init__(self, post: nn.Module = None):
        super().__init__()
        self.post = post if post is not None else nn.Identity()

    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        z = self.post(y)
        w = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        self.last = w
        return z + w


def pool_rows(t):
    return t.view(t.shape[0], 2, -1, t.shape[-1]).max(dim=1).values


class CallerModifiesInput(nn.Module):
    """A caller in this file modifies in place the tensor it passed to be pooled."""

    def forward(self, x):
        h = x * 1.0
        p = pool_rows(h)
        h.add_(1.0)
        return p.sum(-1) + h.sum(-1).mean(-1, keepdim=True)


class ClampInPlace(nn.Module):
    def forward(self, x):
        return x.clamp_(-1e6, 1e6)


class SequentialPost(nn.Module):
    """Passed to an nn.Sequential holding a module of the file's own that modifies its
    input in place (nn.Sequential runs what it is given)."""

    def __init__(self):
        super().__init__()
        self.post = nn.Sequential(nn.Identity(), ClampInPlace())

    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        return self.post(y)


import torch.utils.checkpoint


class CheckpointedPost(nn.Module):
    """Passed through activation checkpointing of a function that modifies it in place."""

    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        return torch.utils.checkpoint.checkpoint(lambda t: t.mul_(0.5), y, use_reentrant=False)


CASES = [
    ScaledQPool, MulUnderscore, AliasAdd, IndexAssign, InplaceActivation, HelperMutates, InputModified, LoopCarried,
    CallerModifiesInput, SequentialPost, CheckpointedPost,
]


class All(nn.Module):
    def __init__(self):
        super().__init__()
        self.parts = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), case()) for case in CASES + [UnknownModule]])

    def forward(self, x):
        return [part(x) for part in self.parts]


def golden_example():
    return All().double(), (torch.randn(2, 8, 8, dtype=torch.float64),)
