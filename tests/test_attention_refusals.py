"""Look-alikes of the 5-D attention stay unchanged (golden/attention/lookalike_*) and
every SDPA call in them gets a ``skipped:`` reason that names what differs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hiera_rewrite.engine import rewrite_bytes

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "attention"

# case -> one expected reason fragment per SDPA call, in source order
EXPECTED = {
    "lookalike_other_permutation": ["with another order than (3, 0, 4, 2, 1, 5)"],
    "lookalike_windows_batch_order": ["not a bare .permute(...) of a 6-D reshape"],
    "lookalike_global_4d": ["with another order than (3, 0, 4, 2, 1, 5)"] * 2,
    "lookalike_q_used_elsewhere": ["q is read after the attention", "the q-pool view reads q"],
    "lookalike_attn_mask_dropout": ["SDPA gets an attn_mask", "dropout_p that may be non-zero"],
    "lookalike_control_flow": [
        "restored under `if self.other` but qkv is not built under the same condition",
        "qkv is built inside control flow",
        "`self.windowed` may change between",
        "self.drop(attn.softmax(dim=-1)) is not an op",
        "not a tensor scaled by a provably numeric scale",
        "SDPA is inside a loop",
        "the output reshape reads x",
        "q's pool is not",
    ],
    "lookalike_comment_string": [],
}


def test_every_lookalike_is_listed():
    found = {p.name[: -len(".in.py")] for p in GOLDEN.glob("lookalike_*.in.py")}
    assert found == set(EXPECTED)
    assert not list(GOLDEN.glob("lookalike_*.out.py")), "look-alikes must come out unchanged"


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_lookalike_reasons(case):
    data = (GOLDEN / f"{case}.in.py").read_bytes()
    result = rewrite_bytes(data)
    assert result.output == data
    hr001 = [r for r in result.reports if r.code == "HR001"]
    assert all(not r.applied and r.message.startswith("skipped: ") for r in hr001)
    assert len(hr001) == len(EXPECTED[case]), [r.message for r in hr001]
    for report, fragment in zip(hr001, EXPECTED[case]):
        assert fragment in report.message, (report.line, report.message)


def test_cli_prints_skipped_reason(tmp_path):
    target = tmp_path / "attention.py"
    target.write_bytes((GOLDEN / "lookalike_attn_mask_dropout.in.py").read_bytes())
    run = subprocess.run(
        [sys.executable, "-m", "hiera_rewrite", "--check", str(target)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert f"{target}:19:13: HR001 skipped: SDPA gets an attn_mask" in run.stderr
    assert f"{target}:30:13: HR001 skipped: SDPA gets a dropout_p" in run.stderr
