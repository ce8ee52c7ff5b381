"""The comparison helpers the parity tests rely on."""

from __future__ import annotations

import pytest

from tests.parity_tools import max_rel_error


def test_max_rel_error_of_empty_tensors_is_zero():
    """`pred[mask]` of an all-False mask is a (0, C) tensor on both sides (before: the
    helper raised, `.max()` of an empty tensor, before it looked at the size)."""
    torch = pytest.importorskip("torch")
    empty = torch.zeros(0, 3, dtype=torch.float64)
    assert max_rel_error(empty, empty.clone(), torch) == 0.0


def test_max_rel_error_is_relative_to_the_first():
    torch = pytest.importorskip("torch")
    a = torch.tensor([[4.0, -2.0]], dtype=torch.float64)
    assert max_rel_error(a, a.clone(), torch) == 0.0
    assert max_rel_error(a, torch.tensor([[4.0, -1.0]], dtype=torch.float64), torch) == 0.25
