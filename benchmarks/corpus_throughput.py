"""CLI throughput on a corpus: N files of about L lines, each with several idioms.

Builds the corpus in a temp folder, then times `hiera-rewrite --check -j J` on the
whole folder (a fresh process, as a pre-commit hook runs it).  Prints files, lines,
wall seconds, files/s and the CPU seconds of all its processes (``--jobs 0``: the
CLI's default, one process per available core for 8 or more files).

- ``--source golden`` (default): our own golden inputs (golden/**/*.in.py),
  concatenated and renamed until a file has about L lines: every class holds an
  idiom, about 20 rewrites per file (a dense worst case).
- ``--source upstream``: copies of the installed hiera-transformer's hiera.py,
  hiera_mae.py and hiera_utils.py (540, 398, 291 lines; read at run time, never kept),
  in turn: what a folder of vendored forks looks like.

    python benchmarks/corpus_throughput.py --files 60 --lines 500 --jobs 2
    python benchmarks/corpus_throughput.py --files 60 --source upstream --jobs 2
    python benchmarks/corpus_throughput.py --files 73 --source upstream --jobs 2  # 30,036 lines
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def build_corpus(folder: Path, files: int, lines: int) -> int:
    sources = []
    for case in sorted(GOLDEN.rglob("*.in.py")):
        data = case.read_bytes()
        if b"\r" in data or b"\t" in data[:200]:
            continue  # keep one encoding per corpus file
        try:
            text = data.decode("utf-8-sig")  # a BOM only belongs at the start of a file
        except UnicodeDecodeError:
            continue
        # `from __future__` must stay first in a file: hoist it out of the copies
        sources.append(re.sub(r"^from __future__ import .*\n", "", text, flags=re.M))
    total = 0
    for n in range(files):
        parts, count, k = [], 0, n
        while count < lines:
            text = sources[k % len(sources)]
            # distinct class names per copy, so a file holds several idioms, not one twice
            text = re.sub(r"^class (\w+)", lambda m: f"class {m.group(1)}_{n}_{k}", text, flags=re.M)
            parts.append(text)
            count += text.count("\n")
            k += 1
        body = "from __future__ import annotations\n\n" + "\n\n".join(parts)
        (folder / f"module_{n:03d}.py").write_text(body, encoding="utf-8")
        total += count
    return total


def build_upstream_corpus(folder: Path, files: int) -> int:
    import importlib.util

    spec = importlib.util.find_spec("hiera")
    if spec is None or spec.origin is None:
        raise SystemExit("--source upstream needs hiera-transformer installed")
    package = Path(spec.origin).parent
    sources = [(package / name).read_text(encoding="utf-8") for name in ("hiera.py", "hiera_mae.py", "hiera_utils.py")]
    total = 0
    for n in range(files):
        text = sources[n % len(sources)]
        (folder / f"module_{n:03d}.py").write_text(text, encoding="utf-8")
        total += text.count("\n")
    return total


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--source", choices=["golden", "upstream"], default="golden")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.source == "golden":
            total = build_corpus(folder, args.files, args.lines)
        else:
            total = build_upstream_corpus(folder, args.files)
        cmd = [sys.executable, "-m", "hiera_rewrite", "--check", "-q", "-j", str(args.jobs), str(folder)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        summary = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        print(f"{args.source}: {args.files} files, {total} lines, -j {args.jobs}: {wall:.1f} s wall "
              f"({args.files / wall:.1f} files/s, {cpu:.1f} s CPU in all processes), exit {done.returncode}; {summary}")
        return 0 if done.returncode in (0, 1) else 1


if __name__ == "__main__":
    sys.exit(main())
