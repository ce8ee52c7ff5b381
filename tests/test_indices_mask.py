"""HR003 on a unit mask made from the caller's kept indices (codemods/_indices_mask.py).

A public fork's token-omission encoder (`masked_encoding_omission(x, ids_keep)`) builds its
mask with `mask = mask_from_indices(ids_keep, num_windows)`, a function of another module
of the package (`from pkg.common.masking import mask_from_indices`).  Cast to bool, row r
keeps one unit per distinct index of ids_keep[r]: the drop gets ids_keep.shape[1] with a
check that every row keeps that many, so a repeated index raises instead of selecting
other units.  Only the helper bodies of the module docstring are proven."""

import importlib
import sys
from pathlib import Path

import pytest

from hiera_rewrite.engine import rewrite_bytes
from hiera_rewrite.files import sibling_reader

torch = pytest.importorskip("torch")

HELPER = '''import torch


def mask_from_indices(indices: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Return a mask with indices set to 1"""
    B = indices.size(0)
    row_indices = torch.arange(B, device=indices.device).unsqueeze(1).expand_as(indices)

    mask = torch.zeros([B, seq_len], device=indices.device)
    mask[row_indices.flatten(), indices.flatten()] = 1

    return mask
'''

ENCODER = '''import math
from typing import Optional

import torch
import torch.nn as nn

from {package}.common.masking import mask_from_indices


class Encoder(nn.Module):
    def __init__(self, units=6, mu_size=2, dim=5):
        super().__init__()
        self.units, self.mu_size = units, mu_size
        self.embed = nn.Linear(3, dim)
        self.block = nn.Linear(dim, dim)

    def masked_encoding_omission(self, x: torch.Tensor, ids_keep: Optional[torch.Tensor] = None):
        if ids_keep is not None:
            num_windows = self.units
{making}
        x = self.embed(x)

        # Discard masked tokens
        if ids_keep is not None:
            x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return self.block(x)
'''

MAKING = "            mask = mask_from_indices(ids_keep, num_windows)\n            mask = mask.bool()\n"


def _package(tmp_path: Path, name: str, helper: str = HELPER, making: str = MAKING) -> Path:
    root = tmp_path / name
    for sub in ("common", "net"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "common" / "masking.py").write_text(helper)
    encoder = root / "net" / "encoder.py"
    encoder.write_text(ENCODER.format(package=name, making=making))
    return encoder


def _drop_report(path: Path):
    result = rewrite_bytes(path.read_bytes(), siblings=sibling_reader(path))
    reports = [r for r in result.reports if r.code == "HR003"]
    assert len(reports) == 1, result.reports
    return result, reports[0]


def _import(tmp_path: Path, name: str):
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(f"{name}.net.encoder")
    finally:
        sys.path.remove(str(tmp_path))


def _pair(tmp_path: Path):
    """The encoder module as written and as rewritten (two packages, same code)."""
    before = _package(tmp_path / "a", "omit_a")
    after = _package(tmp_path / "b", "omit_b")
    result, report = _drop_report(after)
    assert report.applied, report.message
    after.write_bytes(result.output)
    return _import(tmp_path / "a", "omit_a"), _import(tmp_path / "b", "omit_b")


def _run(module, x, ids_keep):
    torch.manual_seed(0)
    model = module.Encoder().double()
    x = x.clone().requires_grad_()
    out = model.masked_encoding_omission(x, ids_keep)
    (out * torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
    return out, x.grad, [p.grad for p in model.parameters()]


def test_helper_in_another_module_of_the_package_is_read_and_the_rewrite_is_exact(tmp_path: Path):
    before, after = _pair(tmp_path)
    text = Path(after.__file__).read_text()
    assert "kept_tokens(x, mask, self.mu_size, ids_keep.shape[1])" in text
    assert "torch._assert_async((mask.sum(1) == kept.shape[1]).all())" in text  # kept_tokens checks the count
    torch.manual_seed(3)
    x = torch.randn(4, 12, 3, dtype=torch.float64)
    for ids_keep in (
        torch.argsort(torch.rand(4, 6), dim=1)[:, :3],  # unsorted, distinct
        torch.tensor([[0, 5], [5, 0], [2, 3], [1, 4]]),
        torch.argsort(torch.rand(4, 6), dim=1),  # every unit
    ):
        out_a, gx_a, gp_a = _run(before, x, ids_keep)
        out_b, gx_b, gp_b = _run(after, x, ids_keep)
        assert out_a.shape == out_b.shape
        assert torch.equal(out_a, out_b) and torch.equal(gx_a, gx_b)
        assert all(torch.equal(a, b) for a, b in zip(gp_a, gp_b))
    # no ids_keep: no drop, the same code on both sides
    assert torch.equal(_run(before, x, None)[0], _run(after, x, None)[0])


def test_a_repeated_index_raises_where_the_original_keeps_fewer_units(tmp_path: Path):
    """The contract's one exception (README): each row of ids_keep names distinct units."""
    before, after = _pair(tmp_path)
    x = torch.randn(2, 12, 3, dtype=torch.float64)
    repeated = torch.tensor([[1, 1, 4], [2, 0, 2]])  # two distinct units in each row
    assert _run(before, x, repeated)[0].shape == (2, 4, 5)  # the original keeps 2 per row
    with pytest.raises(RuntimeError):
        _run(after, x, repeated)
    # 2, 3 and 2 units: 14 tokens, which the original's view(3, -1, C) cannot split
    x = torch.randn(3, 12, 3, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 4], [2, 0, 3], [5, 4, 5]])
    with pytest.raises(RuntimeError):
        _run(before, x, ragged)
    with pytest.raises(RuntimeError):
        _run(after, x, ragged)



def test_indices_for_another_batch_raise_as_the_original_does(tmp_path: Path):
    """ids_keep of one row (one fixed set of kept units) given images of batch 2: the
    original's boolean index raises; the rewrite must not gather row 0's tokens and split
    them over two rows (kept_tokens keeps the boolean index for shapes it does not fit)."""
    before, after = _pair(tmp_path)
    x = torch.randn(2, 12, 3, dtype=torch.float64)
    one_row = torch.tensor([[3, 0]])
    with pytest.raises(IndexError) as original:
        _run(before, x, one_row)
    with pytest.raises(IndexError) as rewritten:
        _run(after, x, one_row)
    assert str(rewritten.value) == str(original.value)


NOT_PROVEN = {
    "another value": (HELPER.replace("] = 1\n", "] = 2\n"), MAKING, "`mask[row_indices.flatten(), indices.flatten()] = 2`"),
    "another statement": (
        HELPER.replace("    return mask\n", "    mask[:, 0] = 1\n    return mask\n"), MAKING, "`mask[:, 0] = 1` is not one"
    ),
    "rows and columns swapped": (
        HELPER.replace("mask[row_indices.flatten(), indices.flatten()]", "mask[indices.flatten(), row_indices.flatten()]"),
        MAKING, "is not one of its statements",
    ),
    # hunt 17d: one index flattened, the other not: with one kept unit per row ([B, 1]) they
    # broadcast to [B, B], and every row keeps every row's unit (the original keeps B per row)
    "one index flattened, the other not": (
        HELPER.replace("mask[row_indices.flatten(), indices.flatten()]", "mask[row_indices, indices.flatten()]"),
        MAKING, "is not one of its statements",
    ),
    "ones, not zeros": (HELPER.replace("torch.zeros(", "torch.ones("), MAKING, "`mask = torch.ones("),
    "a third parameter": (
        HELPER.replace("seq_len: int)", "seq_len: int, value: float = 1.0)"), MAKING, "does not take exactly (indices, size)"
    ),
    "decorated": (HELPER.replace("def mask_from_indices", "@torch.no_grad()\ndef mask_from_indices"), MAKING, "does not take exactly"),
    "no bool cast": (HELPER, "            mask = mask_from_indices(ids_keep, num_windows)\n", "is not cast to bool once"),
    "cast under a condition": (
        HELPER,
        "            mask = mask_from_indices(ids_keep, num_windows)\n            if self.training:\n                mask = mask.bool()\n",
        "is not cast to bool once, in its block",
    ),
    "ids_keep rebound": (
        HELPER,
        "            ids_keep = ids_keep[:, :2]\n" + MAKING,
        "ids_keep is not a parameter the function leaves bound as given",
    ),
    # hunt 10: the name the call runs, or the indices' width, other than the proof assumed
    "the helper's name imported in the function": (
        HELPER, "            from torch import ones as mask_from_indices\n" + MAKING,
        "`mask_from_indices` is bound in the function calling it",
    ),
    "the helper's name a nested def": (
        HELPER, "            def mask_from_indices(ids, n):\n                return torch.ones(ids.shape[0], n)\n\n" + MAKING,
        "`mask_from_indices` is bound in the function calling it",
    ),
    "ids_keep captured by a match": (
        HELPER, "            match ids_keep:\n                case ids_keep if ids_keep.numel() > 0:\n                    pass\n" + MAKING,
        "ids_keep is not a parameter the function leaves bound as given",
    ),
    "ids_keep reshaped in place": (
        HELPER, MAKING + "            ids_keep.unsqueeze_(1)\n", "ids_keep is written in place by `ids_keep.unsqueeze_(1)`",
    ),
    "ids_keep stored on self": (HELPER, MAKING + "            self.ids = ids_keep\n", "ids_keep is stored by `self.ids = ...`"),
    "mask rebound after the drop's count is known": (
        HELPER, MAKING + "            mask = mask.roll(1, dims=1)\n", "mask is rebuilt by `mask = mask.roll(1, dims=1)`",
    ),
}


def test_neither_index_flattened_is_proven(tmp_path: Path):
    """`mask[row_indices, indices] = 1` pairs the two [B, K] indices entry by entry, as the
    flattened form does (only the mixed form broadcasts)."""
    helper = HELPER.replace("mask[row_indices.flatten(), indices.flatten()]", "mask[row_indices, indices]")
    _, report = _drop_report(_package(tmp_path, "omit", helper))
    assert report.applied, report.message


@pytest.mark.parametrize("case", sorted(NOT_PROVEN))
def test_what_is_not_proven_keeps_the_original_statement(tmp_path: Path, case: str):
    helper, making, reason = NOT_PROVEN[case]
    path = _package(tmp_path, "omit", helper, making)
    _, report = _drop_report(path)
    assert not report.applied
    assert reason in report.message, report.message


def test_the_helper_module_not_found_is_not_proven(tmp_path: Path):
    """The file is neither under a folder named like the import's first part nor in a
    repo holding one (its own repo root, marked by pyproject.toml): nothing read."""
    path = _package(tmp_path, "omit")
    repo = tmp_path / "other_repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("")
    moved = repo / "elsewhere.py"
    moved.write_bytes(path.read_bytes())
    _, report = _drop_report(moved)
    assert not report.applied and "mask is rebuilt by `mask = mask_from_indices(ids_keep, num_windows)`" in report.message
