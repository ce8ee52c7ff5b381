"""Build importable copies of the installed upstream ``hiera`` package, some files rewritten.

Third-party source never enters this repository: at test time the installed
``hiera-transformer`` package is copied into a temporary folder under a new package
name (``hiera_orig``, ``hiera_new``, ``hiera_mix_101``...), the chosen files are
passed through :func:`hiera_rewrite.engine.rewrite_bytes` (every rewrite), and the copy
is imported.  Relative imports inside the package (``from .hiera import ...``) keep
working because the whole package folder is copied.

Mixed states (say a rewritten ``hiera.py`` next to an original ``hiera_mae.py``) are
what a pre-commit hook that rewrites one file at a time leaves behind, so any subset
of :data:`REWRITABLE` can be rewritten.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import sys
import types
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

from hiera_rewrite.engine import Report, rewrite_bytes

# The upstream files the tool is meant to rewrite; order fixes the ``hiera_mix_XYZ`` bits.
REWRITABLE: Tuple[str, ...] = ("hiera.py", "hiera_mae.py", "hiera_utils.py")


def upstream_dir() -> Path:
    """Folder of the installed ``hiera`` package (found without importing it)."""
    spec = importlib.util.find_spec("hiera")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("hiera-transformer is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def package_name(rewritten: Iterable[str]) -> str:
    chosen = frozenset(rewritten)
    unknown = chosen - set(REWRITABLE)
    if unknown:
        raise ValueError(f"not an upstream file: {sorted(unknown)}")
    if not chosen:
        return "hiera_orig"
    if chosen == set(REWRITABLE):
        return "hiera_new"
    return "hiera_mix_" + "".join("1" if f in chosen else "0" for f in REWRITABLE)


class UpstreamBuilder:
    """Creates (once per subset) and imports the package copies under ``root``."""

    def __init__(self, root: Path, source: Optional[Path] = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.source = source or upstream_dir()
        self._packages: Dict[FrozenSet[str], types.ModuleType] = {}
        # (file name, rewritten siblings) -> output and applied rewrites, computed once
        self._rewrites: Dict[Tuple[str, FrozenSet[str]], Tuple[bytes, List[Report]]] = {}
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))

    def original_bytes(self, filename: str) -> bytes:
        return (self.source / filename).read_bytes()

    def rewritten_bytes(self, filename: str, rewritten: Iterable[str] = REWRITABLE) -> bytes:
        """``filename`` rewritten beside the files ``rewritten`` (rewritten) and the rest (original)."""
        return self._rewrite(filename, frozenset(rewritten))[0]

    def changes(self, filename: str, rewritten: Iterable[str] = REWRITABLE) -> List[Report]:
        """The rewrites applied to ``filename`` (empty if the tool leaves it unchanged)."""
        return self._rewrite(filename, frozenset(rewritten))[1]

    def _rewrite(self, filename: str, rewritten: FrozenSet[str]) -> Tuple[bytes, List[Report]]:
        key = (filename, rewritten - {filename})
        if key not in self._rewrites:

            def sibling(name: str) -> Optional[bytes]:
                path = self.source / f"{name}.py"
                if not path.is_file():
                    return None
                return self.rewritten_bytes(path.name, ()) if path.name in rewritten and path.name != filename else path.read_bytes()

            result = rewrite_bytes(self.original_bytes(filename), siblings=sibling)
            self._rewrites[key] = (result.output, result.changes)
        return self._rewrites[key]

    def package(self, rewritten: Iterable[str] = ()) -> types.ModuleType:
        """The imported package with the files in ``rewritten`` rewritten."""
        key = frozenset(rewritten)
        if key not in self._packages:
            self._packages[key] = self._build(key)
        return self._packages[key]

    def _build(self, rewritten: FrozenSet[str]) -> types.ModuleType:
        name = package_name(rewritten)
        if name in sys.modules:
            raise RuntimeError(f"a module named {name!r} is already imported")
        dest = self.root / name
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir()
        for path in sorted(self.source.glob("*.py")):
            data = self.rewritten_bytes(path.name, rewritten) if path.name in rewritten else path.read_bytes()
            (dest / path.name).write_bytes(data)
        importlib.invalidate_caches()
        package = importlib.import_module(name)
        package.REWRITTEN = rewritten  # type: ignore[attr-defined]
        return package


def all_subsets() -> List[FrozenSet[str]]:
    """The 8 combinations of rewritten / original upstream files."""
    return [
        frozenset(f for bit, f in zip(format(n, "03b"), REWRITABLE) if bit == "1") for n in range(2 ** len(REWRITABLE))
    ]


def read_upstream_module(name: str) -> Optional[bytes]:
    """``siblings`` for rewrite_bytes: the installed package's module ``name`` (``.hiera``)."""
    path = upstream_dir() / (name.lstrip(".") + ".py")
    return path.read_bytes() if path.is_file() else None


def edited_site_report(file: str, code: str, anchor: str, offset: int, edits) -> Report:
    """The report of ``code`` at the line ``offset`` lines below the first line of
    ``anchor`` in the installed ``file`` after ``edits`` ((old, new), each old once)."""
    text = (upstream_dir() / file).read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    line = text.splitlines().index(anchor.rstrip("\n").splitlines()[0]) + 1 + offset
    result = rewrite_bytes(text.encode(), siblings=read_upstream_module)
    return next(r for r in result.reports if r.code == code and r.line == line)
