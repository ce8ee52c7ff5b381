"""Issue 31: a build that trips on code, not on size, is not rebuilt larger for every
candidate of its class.

A real fork's forward permutes every intermediate as a 4-D feature map, which a masked
forward's (B, units, My, Mx, C) intermediates are not: every masked case raises at that
statement, whatever the size.  verify built each candidate small, then larger, up to its
own configuration and its factory (142 s on that repo).  Once one candidate raised at the
same statement in every size, another candidate of the class raising there in its small
build is not built larger; the report says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_layouts import classifier_fork, sub, verify, write

pytest.importorskip("torch")
pytest.importorskip("timm")

PYRAMID = (
    "        if return_intermediates:\n"
    "            # feature maps (B, C, H, W) for a detection head\n"
    "            intermediates = [t.permute(0, 3, 1, 2) for t in intermediates]\n"
)
FACTORIES = (
    "\n\ndef hiera_pyramid_tiny(**kwdargs):\n"
    "    return Hiera(embed_dim=96, num_heads=1, stages=(1, 2, 7, 2), **kwdargs)\n"
)


def test_a_code_error_at_every_size_is_not_rebuilt_larger(tmp_path: Path, capsys):
    sources = classifier_fork()
    hiera = sources["hiera.py"]
    marker = "        if mask is None:\n            x = x.mean(dim=1)\n"
    hiera = sub(hiera, marker, PYRAMID + marker)
    sources["hiera.py"] = hiera + FACTORIES
    folder = write(tmp_path / "x" / "hiera", sources)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "verify: NOT PROVEN" in out, out  # the masked path raises in the original
    builds = [line for line in err.splitlines() if "building hiera.hiera:" in line and "(rewritten)" not in line]
    first = [line for line in builds if "hiera_pyramid_tiny" in line]
    second = [line for line in builds if "hiera.hiera:Hiera (class)" in line]
    assert len(first) >= 3, builds  # small, then larger up to its own configuration
    assert len(second) == 1, builds  # the class: its small build raised there too, not built larger
    assert "as every size of another build of the class raised there: not built larger" in out, out
