"""``--export DIR``: rewritten copies of the installed hiera-transformer, ready to vendor."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import List, Sequence

from .engine import DEFAULT_LINE_LENGTH
from .files import process_file, replan_with_siblings

UPSTREAM_PACKAGE = "hiera"


def upstream_dir() -> Path:
    """The installed upstream package folder, found without importing it (no torch needed)."""
    spec = importlib.util.find_spec(UPSTREAM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the upstream Hiera package is not installed: pip install hiera-transformer "
            "(or pip install --no-deps hiera-transformer, which needs no torch)"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / "hiera.py").is_file():
        raise FileNotFoundError(f"{folder} does not look like hiera-transformer (no hiera.py)")
    return folder


def export_upstream(target: Path, codes: Sequence[str], quiet: bool = False) -> int:
    """Write every module of the installed package, rewritten, into ``target``."""
    try:
        source = upstream_dir()
    except FileNotFoundError as exc:
        print(f"hiera-rewrite: {exc}", file=sys.stderr)
        return 2
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        print(f"hiera-rewrite: {target}: export folder exists and is not empty; choose a new folder", file=sys.stderr)
        return 2
    files = sorted(source.glob("*.py"))
    # as a CLI run over the folder does: a file whose plan read a sibling (hiera_mae.py
    # reads hiera.py) is planned again against the sibling's rewritten bytes
    jobs = [(str(path), codes, DEFAULT_LINE_LENGTH, False) for path in files]
    results = []
    for _, result, error, _ in replan_with_siblings(jobs, [process_file(job) for job in jobs]):
        if error is not None:
            print(error, file=sys.stderr)
            return 2
        results.append(result)
    outputs: List[bytes] = []
    for path, result in zip(files, results):
        outputs.append(result.output)
        if not quiet:
            for r in result.changes:
                print(f"{target / path.name}:{r.line}:{r.col}: {r.code} {r.message}", file=sys.stderr)
    target.mkdir(parents=True, exist_ok=True)
    for path, data in zip(files, outputs):
        (target / path.name).write_bytes(data)
    changed = sum(1 for p, d in zip(files, outputs) if p.read_bytes() != d)
    print(
        f"hiera-rewrite: exported {len(files)} modules of {source} to {target} ({changed} rewritten).\n"
        f"Import it as a package named after the folder, e.g. `from {target.name} import mae_hiera_base_224`.",
        file=sys.stderr,
    )
    return 0

