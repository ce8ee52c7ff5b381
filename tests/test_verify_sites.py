"""verify's coverage rule for a rewrite that keeps the original statement as a fallback
branch: the site is proven only when its new branch ran, not its test or fallback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hiera_rewrite.engine import rewrite_bytes
from hiera_rewrite.verify.sites import regions_run, sites_of

CASE = Path(__file__).resolve().parent.parent / "golden" / "mask" / "token_drop_one_line.in.py"


def _lines_with(text: str, *needles: str):
    return {i for i, line in enumerate(text.split("\n"), 1) if any(n in line for n in needles)}


def test_fallback_branch_alone_does_not_prove_the_token_drop():
    source = CASE.read_bytes()
    result = rewrite_bytes(source)
    site = [s for s in sites_of(str(CASE), source, result.output, result.reports) if s.code == "HR003"][0]
    spec = dataclasses.asdict(site)
    before, after = source.decode(), result.output.decode()
    # the forward.leaves_mask helper the rewrite adds (only an MAE calls it) is a helper
    # region: required only where a compared case runs it (report.site_verdicts)
    helpers = [r for r in spec["regions"] if r["helper"]]
    assert [after.split("\n")[r["new"][0] - 1 : r["new"][1]] for r in helpers] and all(
        any("def _forward_leaves_mask" in line for line in after.split("\n")[r["new"][0] - 1 : r["new"][1]]) for r in helpers
    )
    assert not any(r["helper"] for r in spec["regions"] if r not in helpers)
    spec["regions"] = [r for r in spec["regions"] if not r["helper"]]
    everything_before = set(range(1, before.count("\n") + 2))
    fallback_only = _lines_with(after, "if num_kept is None", "x = x[mask")
    assert fallback_only, "the rewritten golden keeps the original statement under `if num_kept is None`"
    assert not all(regions_run(spec, everything_before, fallback_only))
    static = fallback_only | _lines_with(after, "kept_windows = (", "x = (")
    assert all(regions_run(spec, everything_before, static))
