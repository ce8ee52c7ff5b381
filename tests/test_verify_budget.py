"""Issue 22, class 6: verify bounds its own memory and time per case.

A fork's MAE allocates a buffer from a constructor argument (4 GiB by default); another
spins in its encoder.  Under a small budget (``--verify-budget``) the case stops cleanly:
"too large to verify here", the flags that build it smaller, the classifier still
compared, and the verdict NOT PROVEN (not a mismatch, no worker killed).  Given the
argument that makes it small, the same repo PASSES.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hiera_rewrite import cli
from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_layouts import site_rows, sub, upstream_files, verify, write

pytest.importorskip("torch")
pytest.importorskip("timm")

_INIT = "        self,\n        in_chans: int = 3,"


def _mae_fork(tmp_path: Path, arg: str, body: str, where: str = "        del self.norm, self.head\n") -> Path:
    sources = upstream_files()
    mae = sub(sources["hiera_mae.py"], _INIT, f"        self,\n        {arg},\n        in_chans: int = 3,")
    mae = sub(mae, where, where + body)
    sources["hiera_mae.py"] = mae
    return write(tmp_path / "x" / "hiera", sources)


def memory_fork(tmp_path: Path) -> Path:
    """The MAE allocates a float64 buffer of ``cache_gib`` (default 4 GiB) in __init__."""
    return _mae_fork(
        tmp_path,
        "cache_gib: float = 4.0",
        '        self.register_buffer("cache", torch.zeros(int(cache_gib * 2**27), dtype=torch.float64), persistent=False)\n',
    )


def test_over_the_memory_budget_stops_cleanly(tmp_path: Path, capsys):
    folder = memory_fork(tmp_path)
    code, out, err = verify(folder, capsys, "--verify-budget", "3,60")
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "too large to verify here" in out and "needs more than the 3 GiB memory budget" in out, out
    assert "build it smaller: --factory hiera.hiera_mae:MaskedAutoencoderHiera:'{" in out, out
    assert "died" not in out and "FAILED" not in out, out
    rows = site_rows(out)
    assert all(row.rstrip().endswith("pass") for key, row in rows.items() if "hiera_mae.py" not in key), out
    unproven = [line for line in out.splitlines() if line.startswith("not proven:")]
    assert unproven and all("too large to verify here" in line for line in unproven), out
    assert "verify: NOT PROVEN" in out
    # the argument that makes it small: every site proven
    code, out, err = verify(folder, capsys, "--verify-budget", "3,60", "--kwargs", '{"cache_gib": 0.001}')
    assert code == cli.EXIT_CHANGED, out + err
    assert "verify: PASSED (8/8 sites exercised" in out, out


def test_over_the_time_budget_stops_cleanly(tmp_path: Path, capsys):
    folder = _mae_fork(
        tmp_path,
        "warmup_steps: int = 10**12",
        "        while warmup_steps:  # a fork's slow setup (here: endless)\n            warmup_steps -= 1\n",
    )
    code, out, err = verify(folder, capsys, "--verify-budget", "4,5")
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "ran past the 5 s time budget of a case" in out, out
    assert "verify: NOT PROVEN" in out and "FAILED" not in out, out
    rows = site_rows(out)
    assert all(row.rstrip().endswith("pass") for key, row in rows.items() if "hiera_mae.py" not in key), out


def test_budget_flag_is_checked(capsys):
    assert cli.main(["--verify", "--check", "--verify-budget", "lots", "x.py"]) == cli.EXIT_ERROR
    assert "--verify-budget 'lots': expected GIB,SECONDS" in capsys.readouterr().err
