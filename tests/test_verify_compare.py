"""verify's comparison of one case (hiera_rewrite/verify/compare.py), on hand-made tensors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hiera_rewrite.verify.compare import Comparison  # noqa: E402


def _grad_row(grads_a, grads_b, tol=1e-9):
    rows = Comparison().compare("float64 cpu", "forward(x)", [], grads_a, [], grads_b, tol, torch)
    (row,) = [r for r in rows if r["what"].startswith("grads")]
    return row


def _grads(bias):
    weight = torch.linspace(-2.0, 3.0, 12, dtype=torch.float64).view(3, 4)
    return {"conv.weight": weight, "conv.bias": torch.tensor(bias, dtype=torch.float64)}


def test_a_gradient_that_cancels_to_round_off_is_judged_against_its_group():
    """A conv bias before train-mode BatchNorm: its gradient is zero in exact arithmetic,
    round-off (~1e-11) on each side, so its error relative to itself is ~1 -- a real
    fork's correct rewrite was FAILED on it.  Against the largest gradient of the model it
    is round-off: pass."""
    row = _grad_row(_grads([1.8e-11, -3.0e-12]), _grads([-1.1e-11, 4.0e-12]))
    assert row["ok"], row
    assert row["rel"] <= 1e-9


def test_a_wrong_small_gradient_still_fails():
    """The floor is round-off of the group's scale, not the group's scale: a bias gradient
    off by 1e-6 of the largest gradient is a wrong rewrite."""
    row = _grad_row(_grads([1.8e-11, -3.0e-12]), _grads([3.0e-6, -3.0e-12]))
    assert not row["ok"]
    assert "conv.bias" in row["note"]
