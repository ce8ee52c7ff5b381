"""HR002 and in-place ops: `.amax` saves its input and output for backward, where
`.max(...).values` saves only indices, so a pool an in-place op can reach before
backward is left alone, with the op and its line (golden/pool/lookalike_inplace and
its reports file); a pool the function returns is cloned (golden/pool/inplace_safe,
whose example modifies the returned tensors in place and runs backward after the
rewrite).

Each refusal is a real hazard: forcing the rewrite onto the look-alike makes its
backward raise, while the original runs."""

from __future__ import annotations

import functools

import subprocess
import sys
import types
from pathlib import Path

import libcst as cst
import pytest

from hiera_rewrite.codemods.pool_amax import _amax, _Reductions
from hiera_rewrite.engine import every_code, rewrite_bytes

# every rewrite, HR002 (opt-in) included: the fixtures exercise them all
rewrite_bytes = functools.partial(rewrite_bytes, codes=every_code())

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "pool"
LOOKALIKE = GOLDEN / "lookalike_inplace.in.py"

# The pools of lookalike_inplace: every one is refused (the exact reasons are in
# lookalike_inplace.reports.txt, checked by tests/test_golden.py).
POOLS = sum(" HR002 skipped: " in line for line in LOOKALIKE.with_name("lookalike_inplace.reports.txt").read_text().splitlines())


def test_cli_prints_skipped_reason(tmp_path):
    target = tmp_path / "pools.py"
    target.write_bytes(LOOKALIKE.read_bytes())
    run = subprocess.run(
        [sys.executable, "-m", "hiera_rewrite", "--select", "HR002", "--check", str(target)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert (
        f"{target}:24:13: HR002 skipped: `q *= ...` at line 28 modifies the pooled tensor in place before backward"
        " (.amax saves its output for backward, .max(...).values does not)"
    ) in run.stderr
    assert f"{target}:104:18: HR002 skipped: `right += ...` at line 105 modifies the tensor it pools (`left`)" in run.stderr


def _forced(data: bytes) -> bytes:
    """Every pool rewritten to `.amax`, whatever follows it (what HR002 must not do)."""
    module = cst.parse_module(data)
    finder = _Reductions()
    module.visit(finder)
    found = set(map(id, finder.found))

    class Force(cst.CSTTransformer):
        def leave_Attribute(self, original, updated):
            return _amax(updated) if id(original) in found else updated

        def leave_Subscript(self, original, updated):
            return _amax(updated) if id(original) in found else updated

    forced = module.visit(Force()).code.encode()
    assert POOLS and forced.count(b".amax(") == POOLS  # every pool found is refused
    return forced


def _load(source: bytes, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def _backward(module: types.ModuleType, case: str, torch) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), getattr(module, case)()).double()
    out = model(torch.randn(2, 8, 8, dtype=torch.float64))
    out.sum().backward()


@pytest.mark.parametrize(
    "case",
    [
        "ScaledQPool",
        "MulUnderscore",
        "AliasAdd",
        "IndexAssign",
        "InplaceActivation",
        "HelperMutates",
        "InputModified",
        "LoopCarried",
        "CallerModifiesInput",
    ],
)
def test_each_refusal_is_a_real_hazard(case):
    torch = pytest.importorskip("torch")
    data = LOOKALIKE.read_bytes()
    original = _load(data, "pool_original")
    assert case in [c.__name__ for c in original.CASES]
    _backward(original, case, torch)  # the original runs
    forced = _load(_forced(data), "pool_forced")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _backward(forced, case, torch)


def test_upstream_do_pool_still_rewritten():
    pytest.importorskip("hiera")
    from tests.upstream import upstream_dir

    data = (upstream_dir() / "hiera_utils.py").read_bytes()
    result = rewrite_bytes(data)
    applied = [r for r in result.reports if r.applied]
    assert [r.code for r in applied] == ["HR002"], [(r.code, r.message) for r in result.reports]
    assert b"return x.view(x.shape[0], stride, -1, x.shape[-1]).amax(dim=1).clone()" in result.output
    assert not [r for r in result.reports if r.code == "HR002" and not r.applied]


# Another tensor's method given the pool may keep it, not only read it: `buf.set_(p)`
# makes buf share p's storage, a dunder may store it (`held.__setitem__(0, p)` on a
# list).  An in-place op through buf or held then modifies the pool: after a rewrite
# to `.amax` the gradient is NaN (set_: no version check sees it) or backward raises.
KEPT_BY_A_METHOD = '''import torch
import torch.nn as nn


class SetStorage(nn.Module):
    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        buf = torch.empty(0, dtype=y.dtype)
        buf.set_(y.detach())
        buf.mul_(2)
        return y * 3


class ListSetitem(nn.Module):
    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        held = [None]
        held.__setitem__(0, y)
        held[0].mul_(2)
        return y * 3
'''


@pytest.mark.parametrize("case, line, call", [("SetStorage", 9, "buf.set_"), ("ListSetitem", 18, "held.__setitem__")])
def test_a_pool_kept_by_another_tensors_method_is_refused(case, line, call):
    """Before: both were rewritten (`buf.set_(p)` and `held.__setitem__(0, p)` were taken
    as reading p, like `out.copy_(p)`)."""
    torch = pytest.importorskip("torch")
    reports = [r for r in rewrite_bytes(KEPT_BY_A_METHOD.encode()).reports if r.code == "HR002"]
    assert len(reports) == 2 and not any(r.applied for r in reports), reports
    assert any(f"the pooled tensor is passed to `{call}(...)` at line {line}" in r.message for r in reports)

    def gradient(source: str):
        module = _load(source.encode(), "pool_kept")
        torch.manual_seed(0)
        x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
        getattr(module, case)()(x).sum().backward()
        return x.grad

    expected = gradient(KEPT_BY_A_METHOD)
    assert torch.isfinite(expected).all() and expected.abs().sum() > 0  # the original runs
    forced = KEPT_BY_A_METHOD.replace(".max(dim=1).values", ".amax(dim=1)")
    try:
        assert not torch.equal(gradient(forced), expected)
    except RuntimeError as exc:
        assert "modified by an inplace operation" in str(exc)
