"""The emitted `masked_rows(t, mask, count)` is `t[mask]` for a mask of any rank over t's
first dims (a fork's decoder returning a spatial (B, H, W) mask with a (B, H, W, D)
prediction: the helper flattened two dims and indexed past the end, or, where the indices
stayed in range, selected other rows)."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from hiera_rewrite.codemods._mask import HELPERS, MASKED_ROWS, TRUE_ROWS  # noqa: E402


def _helpers():
    namespace = {"torch": torch}
    exec(HELPERS[TRUE_ROWS] + HELPERS[MASKED_ROWS], namespace)
    return namespace["masked_rows"]


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4), (2, 2, 3, 2)])
def test_masked_rows_equals_boolean_indexing_at_every_rank(shape):
    masked_rows = _helpers()
    gen = torch.Generator().manual_seed(sum(shape))
    for trailing in itertools.islice(((), (4,), (2, 3)), 3):
        t = torch.randn(*shape, *trailing, dtype=torch.float64, generator=gen, requires_grad=True)
        mask = torch.rand(shape, generator=gen) < 0.5
        want = t[mask]
        got = masked_rows(t, mask, int(mask.sum()))
        assert got.shape == want.shape and torch.equal(got, want)
        (g1,) = torch.autograd.grad(want.square().sum(), t)
        (g2,) = torch.autograd.grad(got.square().sum(), t)
        assert torch.equal(g1, g2)
