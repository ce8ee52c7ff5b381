"""What the CLI imports: a run over files with nothing to rewrite (a pre-commit hook on
already rewritten or unrelated files) imports neither black, a third of the start-up,
nor the process pool; a file with code to insert imports black.  Speed itself is
measured in benchmarks/ (RESULTS.md, "CLI throughput"), not here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAZY = ("black", "concurrent.futures.process")
PROBE = (
    "import sys; from hiera_rewrite.cli import main; code = main(sys.argv[1:]); "
    f"print(' '.join(m for m in {LAZY!r} if m in sys.modules)); sys.exit(code)"
)


def _run(path: Path, *args: str) -> "tuple[int, str]":
    done = subprocess.run([sys.executable, "-c", PROBE, "-q", *args, str(path)], capture_output=True, text=True, cwd=ROOT)
    return done.returncode, done.stdout.strip()


def test_nothing_to_rewrite_imports_neither_black_nor_the_pool(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text("import torch\n\n\ndef f(x):\n    return torch.relu(x)\n")
    assert _run(path, "--check") == (0, "")


def test_an_already_rewritten_file_imports_no_black(tmp_path: Path) -> None:
    path = tmp_path / "attention.py"
    path.write_bytes((ROOT / "golden/attention/windowed_basic.out.py").read_bytes())
    assert _run(path, "--check") == (0, "")


def test_inserted_code_imports_black(tmp_path: Path) -> None:
    # the probe sees black when the engine formats inserted code
    path = tmp_path / "attention.py"
    path.write_bytes((ROOT / "golden/attention/windowed_basic.in.py").read_bytes())
    assert _run(path, "--check") == (1, "black")
