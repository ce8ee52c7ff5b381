"""Already-rewritten code reports nothing new.

Running the tool again on its own output (a pre-commit hook, ``--check`` in CI) must
neither change it nor print a ``skipped:`` line about code a rewrite emitted: the 4-D
attention of HR001 and HR006, the gathers and scatters of the mask rewrites, the
``.amax`` pools are not look-alikes of anything.  Checked on every
``golden/**/NAME.out.py`` and on the rewritten upstream files (there: no report at all).

What a golden's output may still print is what its input prints about code that stays
as it was: a look-alike kept on purpose next to the rewritten code, or the user's own
``# hiera-rewrite: skip`` marker ("left alone: ..."), reported on every run.  Those are
matched by code and message (line numbers move, in the message too).
"""

from __future__ import annotations

import functools
import re

from collections import Counter
from pathlib import Path
from typing import Iterable, List, Tuple

import pytest

from hiera_rewrite.engine import every_code, Report, rewrite_bytes

# every rewrite, HR002 (opt-in) included: the fixtures exercise them all
rewrite_bytes = functools.partial(rewrite_bytes, codes=every_code())

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
OUTPUTS = sorted(GOLDEN.rglob("*.out.py"))

# The mask rewrites (HR003/HR004/HR005) are being changed right now and still report
# on their own output (e.g. "the function already uses the name(s) num_kept,
# kept_windows").  While this is True, a case whose only noise comes from them is an
# expected failure; noise of any other rewrite still fails.  Set it to False once they
# are quiet.
MASK_REWRITES_IN_FLUX = False
MASK_CODES = {"HR003", "HR004", "HR005"}


def _id(path: Path) -> str:
    return str(path.relative_to(GOLDEN)).replace(".out.py", "")


def _key(report: Report) -> Tuple[str, str]:
    # a reason may name another line ("made ... at line 140"): it moves as well
    return report.code, re.sub(r"\bline \d+", "line N", report.message)


def _assert_quiet(data: bytes, allowed: Iterable[Report] = ()) -> None:
    result = rewrite_bytes(data)
    budget = Counter(_key(r) for r in allowed if not r.applied)
    noise: List[Report] = []
    for report in result.reports:
        # applied reports count too: a rewrite that changes its own output is noise
        if not report.applied and budget[_key(report)] > 0:
            budget[_key(report)] -= 1
            continue
        noise.append(report)
    shown = [(r.line, r.code, r.message) for r in noise]
    if noise and MASK_REWRITES_IN_FLUX and {r.code for r in noise} <= MASK_CODES:
        pytest.xfail(f"mask rewrites in flux: {shown}")
    assert noise == [], shown
    assert result.output == data, "the output is not a fixed point"


def test_there_are_outputs():
    assert len(OUTPUTS) >= 10


@pytest.mark.parametrize("path", OUTPUTS, ids=_id)
def test_golden_output_reports_nothing_new(path: Path):
    source = path.with_name(path.name.replace(".out.py", ".in.py"))
    _assert_quiet(path.read_bytes(), rewrite_bytes(source.read_bytes()).reports)


def _upstream_files() -> List[Path]:
    try:
        from hiera_rewrite.export import upstream_dir

        folder = upstream_dir()
    except (FileNotFoundError, ImportError):
        return []
    return sorted(folder.glob("*.py"))


@pytest.mark.parametrize("path", _upstream_files(), ids=lambda p: p.name)
def test_upstream_export_reports_nothing(path: Path):
    """What ``hiera-rewrite --export`` writes, rewritten again (alone, as a pre-commit
    run on one file does): no report at all."""

    def original(name: str):
        sibling = path.parent / f"{name}.py"
        return sibling.read_bytes() if sibling.is_file() else None

    def exported(name: str):
        # as --export rewrites it: beside the package's other modules (hiera.py's token
        # drop is proven through hiera_utils.py's do_masked_conv)
        data = original(name)
        return rewrite_bytes(data, siblings=original).output if data is not None else None

    _assert_quiet(rewrite_bytes(path.read_bytes(), siblings=exported).output)


def test_upstream_is_installed():
    if not _upstream_files():
        pytest.skip("hiera-transformer is not installed")
