"""Golden files: every ``golden/**/NAME.in.py`` is rewritten and compared, as bytes,
with ``NAME.out.py`` beside it (no ``.out.py``: the file must come out unchanged).

Adding a case is adding files.  Every case is also checked for idempotency (its
expected output rewrites to itself).  A fixture that defines ``golden_example()``
returning ``(model, inputs)`` is also built from the input and the output source
and compared numerically (outputs and every parameter gradient, float64).
"""

from __future__ import annotations

import functools

import types
from pathlib import Path

import pytest

from hiera_rewrite.engine import every_code, rewrite_bytes

# every rewrite, HR002 (opt-in) included: the fixtures exercise them all
rewrite_bytes = functools.partial(rewrite_bytes, codes=every_code())

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CASES = sorted(GOLDEN.rglob("*.in.py"))


def _id(path: Path) -> str:
    return str(path.relative_to(GOLDEN)).replace(".in.py", "")


def _expected(case: Path) -> bytes:
    out = case.with_name(case.name.replace(".in.py", ".out.py"))
    return out.read_bytes() if out.exists() else case.read_bytes()


def test_there_are_goldens():
    assert len(CASES) >= 1


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_golden_bytes(case: Path):
    result = rewrite_bytes(case.read_bytes())
    assert result.output == _expected(case)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_golden_idempotent(case: Path):
    expected = _expected(case)
    assert rewrite_bytes(expected).output == expected


def _load(source: bytes, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


EXAMPLES = [c for c in CASES if b"def golden_example(" in c.read_bytes()]


@pytest.mark.parametrize("case", EXAMPLES, ids=_id)
def test_golden_parity(case: Path):
    torch = pytest.importorskip("torch")
    from tests.parity_tools import assert_same_model_behaviour

    before = _load(case.read_bytes(), "golden_before")
    after = _load(_expected(case), "golden_after")
    assert_same_model_behaviour(before.golden_example, after.golden_example, torch)
