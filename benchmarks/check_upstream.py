"""Start-up plus work as a pre-commit hook feels it: `hiera-rewrite --check -q` on the
installed hiera-transformer's hiera.py, hiera_mae.py and hiera_utils.py, one fresh
process per run (imports included), wall and CPU seconds of every run.

Several code trees can be compared in interleaved rounds (this machine's speed drifts
by ~30% over minutes): each TREE is put first on PYTHONPATH (a checkout or an extracted
commit; with a `hiera_rewrite/codemods -> ../codemods` link where the package is not
installed from that tree).  ``--rewritten`` runs on the files as `--export` writes them
(nothing left to rewrite: the hook's usual case after the first run).

    python benchmarks/check_upstream.py --runs 8
    python benchmarks/check_upstream.py --runs 8 /tmp/old-checkout .
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAMES = ("hiera.py", "hiera_mae.py", "hiera_utils.py")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="*", default=["."], help="code trees to put first on PYTHONPATH (default: .)")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--rewritten", action="store_true", help="check the --export output instead")
    args = parser.parse_args()
    exe = shutil.which("hiera-rewrite") or sys.exit("hiera-rewrite is not on PATH")
    trees = [str(Path(t).resolve()) for t in args.trees]
    with tempfile.TemporaryDirectory() as tmp:
        if args.rewritten:
            folder = Path(tmp) / "hiera_fast"
            subprocess.run([exe, "--export", str(folder), "-q"], check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=trees[-1]))
        else:
            import importlib.util

            spec = importlib.util.find_spec("hiera")
            if spec is None or spec.origin is None:
                sys.exit("needs hiera-transformer installed (pip install --no-deps hiera-transformer)")
            folder = Path(spec.origin).parent
        files = [str(folder / n) for n in NAMES]
        runs: dict = {t: [] for t in trees}
        for _ in range(args.runs):
            for tree in trees:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run([exe, "--check", "-q", *files], capture_output=True, env=dict(os.environ, PYTHONPATH=tree))
                wall = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if done.returncode not in (0, 1):
                    sys.exit(f"{tree}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
                cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                runs[tree].append((wall, cpu, done.stderr.decode().strip().splitlines()[-1]))
    for tree, rows in runs.items():
        walls = [w for w, _, _ in rows]
        print(f"{tree}: wall " + " ".join(f"{w:.2f}" for w in walls)
              + f" s | median {statistics.median(walls):.2f}, min {min(walls):.2f}; CPU median {statistics.median(c for _, c, _ in rows):.2f} s; {rows[-1][2]}")
    print("load average", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
