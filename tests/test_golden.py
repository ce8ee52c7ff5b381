"""Golden files: every ``golden/**/NAME.in.py`` is rewritten and compared, as bytes,
with ``NAME.out.py`` beside it (no ``.out.py``: the file must come out unchanged),
and its reports with ``NAME.reports.txt`` beside it.

``NAME.reports.txt`` holds the exact report lines the tool prints for the file, applied
and skipped (``skipped: reason``), one ``line:col: CODE message`` per line in the order
printed, without the path (``hiera-rewrite`` prefixes it: ``path:line:col: ...``); an
empty file when it prints none.  Both ``.out.py`` and ``.reports.txt`` are what the tool
does with every rewrite selected, opt-in ones (HR002) included, as
``hiera-rewrite --select HR001,HR002,...`` does.  A default run (opt-in rewrites off)
must print exactly those lines less the opt-in codes' lines: that is checked too, so
one file states both.

A changed report fails with a diff.  When the change is intended, regenerate the files
with ``python -m pytest tests/test_golden.py --update-reports`` and review ``git diff
golden/`` (CI never passes that option).

Adding a case is adding files.  Every case is also checked for idempotency (its
expected output rewrites to itself).  A fixture that defines ``golden_example()``
returning ``(model, inputs)`` is also built from the input and the output source
and compared numerically (outputs and every parameter gradient, float64).
"""

from __future__ import annotations

import difflib
import functools

import types
from pathlib import Path
from typing import List, Sequence

import pytest

from hiera_rewrite.engine import FileResult, Report, every_code, rewrite_bytes, selected_codes
from hiera_rewrite.rewrite import REGISTRY

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CASES = sorted(GOLDEN.rglob("*.in.py"))
UPDATE_COMMAND = "python -m pytest tests/test_golden.py --update-reports"


def _id(path: Path) -> str:
    return str(path.relative_to(GOLDEN)).replace(".in.py", "")


def _expected(case: Path) -> bytes:
    out = case.with_name(case.name.replace(".in.py", ".out.py"))
    return out.read_bytes() if out.exists() else case.read_bytes()


def _reports_file(case: Path) -> Path:
    return case.with_name(case.name.replace(".in.py", ".reports.txt"))


@functools.lru_cache(maxsize=None)
def _rewritten(case: Path) -> FileResult:
    """Every rewrite, HR002 (opt-in) included: the fixtures exercise them all."""
    return rewrite_bytes(case.read_bytes(), codes=every_code())


def report_lines(reports: Sequence[Report]) -> List[str]:
    """The lines ``hiera-rewrite`` prints for these reports, less the ``path:``."""
    return [f"{r.line}:{r.col}: {r.code} {r.message}" for r in reports]


def _code_of(line: str) -> str:
    return line.split(" ", 2)[1]


def _fail_with_diff(what: str, expected: List[str], actual: List[str], fix: str) -> None:
    diff = "\n".join(difflib.unified_diff(expected, actual, "expected", "actual", lineterm=""))
    pytest.fail(f"{what} (- expected, + actual):\n{diff}\n{fix}", pytrace=False)


def test_there_are_goldens():
    assert len(CASES) >= 1


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_golden_bytes(case: Path):
    assert _rewritten(case).output == _expected(case)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_golden_idempotent(case: Path):
    expected = _expected(case)
    assert rewrite_bytes(expected, codes=every_code()).output == expected


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_golden_reports(case: Path, request):
    actual = report_lines(_rewritten(case).reports)
    path = _reports_file(case)
    name = path.relative_to(GOLDEN.parent)
    text = "".join(line + "\n" for line in actual)
    if request.config.getoption("update_reports"):
        if not path.exists() or path.read_bytes() != text.encode("utf-8"):
            path.write_bytes(text.encode("utf-8"))
            pytest.skip(f"wrote {name}: review git diff")
        return
    if not path.exists():
        pytest.fail(f"{name} is missing: write it with {UPDATE_COMMAND} and review it", pytrace=False)
    stored = path.read_bytes().decode("utf-8")
    expected = stored.split("\n")
    if expected[-1] == "":
        expected.pop()  # the final newline ends the last line (an empty file: no line)
    fix = f"If the change is intended: {UPDATE_COMMAND}, then review git diff golden/"
    if stored != text:
        _fail_with_diff(f"the reports of {case.relative_to(GOLDEN.parent)} differ from {name}", expected, actual, fix)

    # a default run prints the same lines, less those of the opt-in rewrites
    opt_in = {code for code, rewrite in REGISTRY.items() if not rewrite.default}
    default = report_lines(rewrite_bytes(case.read_bytes(), codes=selected_codes()).reports)
    without_opt_in = [line for line in expected if _code_of(line) not in opt_in]
    if default != without_opt_in:
        _fail_with_diff(
            f"a default run on {case.relative_to(GOLDEN.parent)} reports other lines than {name}"
            f" less {', '.join(sorted(opt_in))}",
            without_opt_in,
            default,
            "Selecting an opt-in rewrite must not change what the others report.",
        )


def test_every_rewrite_has_applied_and_skipped_goldens():
    """A rewrite comes with golden cases: at least one applied and one refused report."""
    lines = [line for case in CASES if _reports_file(case).exists() for line in _reports_file(case).read_text("utf-8").splitlines()]
    every = set(every_code())
    skipped = {_code_of(line) for line in lines if line.split(" ", 2)[2].startswith("skipped: ")}
    applied = {_code_of(line) for line in lines if not line.split(" ", 2)[2].startswith("skipped: ")}
    assert (every - applied, every - skipped) == (set(), set())


def test_every_reports_file_has_its_input():
    orphans = [p for p in GOLDEN.rglob("*.reports.txt") if not p.with_name(p.name.replace(".reports.txt", ".in.py")).exists()]
    assert orphans == []


def test_lookalikes_come_out_unchanged():
    """A case named ``lookalike*`` is code that must be left alone: it has no ``.out.py``."""
    assert CASES and not list(GOLDEN.rglob("lookalike*.out.py"))


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


GUARDED = [c for c in EXAMPLES if b'hasattr(F, "scaled_dot_product_attention")' in c.read_bytes()]


@pytest.mark.parametrize("case", GUARDED, ids=_id)
def test_golden_parity_without_sdpa(case: Path, monkeypatch):
    """torch < 2.0 has no SDPA: both sides run the else branch of the
    `hasattr(F, "scaled_dot_product_attention")` guard (the rewritten one on 5-D views)."""
    torch = pytest.importorskip("torch")
    from tests.parity_tools import assert_same_model_behaviour

    monkeypatch.delattr(torch.nn.functional, "scaled_dot_product_attention")
    before = _load(case.read_bytes(), "golden_before")
    after = _load(_expected(case), "golden_after")
    model, inputs = before.golden_example()
    try:
        model(*inputs)
    except AttributeError as exc:  # a model calling SDPA outside the guard: the rewritten one too
        assert "scaled_dot_product_attention" in str(exc)
        model, inputs = after.golden_example()
        with pytest.raises(AttributeError, match="scaled_dot_product_attention"):
            model(*inputs)
        return
    assert_same_model_behaviour(before.golden_example, after.golden_example, torch)
