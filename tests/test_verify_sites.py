"""verify's coverage rule for a rewrite whose emitted helper keeps the original
statement as a fallback branch: the site is proven only when its static path ran,
not the fallback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hiera_rewrite.engine import rewrite_bytes
from hiera_rewrite.verify.sites import regions_run, sites_of

CASE = Path(__file__).resolve().parent.parent / "golden" / "mask" / "token_drop_one_line.in.py"


def _lines_with(text: str, *needles: str):
    return {i for i, line in enumerate(text.split("\n"), 1) if any(n in line for n in needles)}


def test_fallback_branch_alone_does_not_prove_the_token_drop():
    """The token drop calls the helper the rewrite adds above the class, kept_tokens,
    whose first branch is the original boolean selection (a caller's mask with no
    count): the helper's region belongs to the site that calls it, and only its static
    path (its last statement) proves the site, not the fallback."""
    source = CASE.read_bytes()
    result = rewrite_bytes(source)
    site = [s for s in sites_of(str(CASE), source, result.output, result.reports) if s.code == "HR003"][0]
    spec = dataclasses.asdict(site)
    before, after = source.decode(), result.output.decode()
    lines = after.split("\n")
    helpers = [r for r in spec["regions"] if r["helper"]]
    assert len(helpers) == 1 and any("def kept_tokens" in ln for ln in lines[helpers[0]["new"][0] - 1 : helpers[0]["new"][1]])
    everything_before = set(range(1, before.count("\n") + 2))
    call = _lines_with(after, "kept_tokens(x, mask, self.mu_size, num_kept)", "num_kept = None  #", "random_mask_ratio is not None")
    fallback_only = call | _lines_with(after, "    if num_kept is None:", "        return x[mask[..., None]")
    assert not all(regions_run(spec, everything_before, fallback_only))
    static = call | _lines_with(after, "num_kept = int(mask.shape[1]", "return x.unflatten(1, (mu_size, N))")
    assert all(regions_run(spec, everything_before, static))
