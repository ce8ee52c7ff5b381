"""Where the user's files are imported from (``--verify``), found from the files alone.

The *import root* is the folder that goes on ``sys.path`` so that the files import
as in the user's repo; module names are dotted paths below it.  It is the highest of:

* the folder above the top-most regular package (walk up while ``__init__.py``
  exists); a file with none beside it starts at its own folder (flat);
* for relative imports of level L in a folder without ``__init__.py`` (a namespace
  package), the folder L levels up -- or the VCS root (``.git``) above it, so that
  absolute imports from the repo root work too;
* for each absolute import of a *local* name (``from models.hiera import Hiera``),
  the nearest folder from which that module resolves to a file of the repo (searched
  up to the repo root, else three levels up); the imports of the folder's files and of
  the package ``__init__.py`` files above it (they run first);
* the repo root (VCS root, else the folder holding ``pyproject.toml``, ``setup.py``...)
  where the repo's own files import the folder through a plain folder there
  (``from src.models.components.hiera import ...``, ``src/`` without ``__init__.py``);
* an *installed* layout: an absolute import whose top-level name resolves nowhere
  in the repo but to an installed package whose folder is the repo folder (or above
  the files): ``from mypkg.models.backbones import ...`` with the files at the repo
  root and the repo installed as ``mypkg`` (editable, ``package-dir``, a link).  The
  root is that folder and module names get the package's name in front;
* a *clone* that is itself a package, not installed: ``from myrepo.models.x import ...``
  with the files in a folder named ``myrepo`` (the clone): imported as if installed
  editable, that folder under its own name.

Nothing here imports or writes anything.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

# never local: the standard library and the libraries every Hiera copy imports
_NOT_LOCAL: Set[str] = set(getattr(sys, "stdlib_module_names", ())) | {"torch", "torchvision", "numpy", "timm", "typing", "os", "sys", "math"}
_VCS = (".git", ".hg", ".svn")


@dataclasses.dataclass(frozen=True)
class Layout:
    root: Path  # the import root (on sys.path); for "installed": the package's own folder
    kind: str  # "package" | "namespace" | "flat" | "installed" | "clone"
    alias: Optional[str] = None  # "installed": the name the root folder is imported as


def _evidence(folder: Path, extra: Sequence[Path] = ()) -> Tuple[int, Set[str]]:
    """(deepest relative-import level, absolute module names) of the folder's files;
    ``extra``: more files whose absolute imports count (their relative ones are their own)."""
    level = 0
    names: Set[str] = set()
    for path in [*sorted(folder.glob("*.py")), *extra]:
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        if path.parent != folder:
            names.update(node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level and node.module)
            names.update(a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names)
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    level = max(level, node.level)
                elif node.module:
                    names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
    return level, {n for n in names if n.split(".")[0] not in _NOT_LOCAL}


def relative_imports(folder: Path) -> bool:
    """The folder's files import each other relatively (it is a package, if a namespace one)."""
    return _evidence(folder)[0] > 0


def vcs_root(folder: Path) -> Optional[Path]:
    for candidate in [folder, *folder.parents]:
        if any((candidate / v).exists() for v in _VCS):
            return candidate
    return None


# files that mark a project's root where it is not a VCS checkout (an unpacked archive)
_PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "environment.yml", "environment.yaml")


def repo_root(folder: Path) -> Optional[Path]:
    """The repo the folder belongs to: its VCS root, else the nearest folder above holding
    a project file (``pyproject.toml``, ``setup.py``, ``requirements.txt``...), else None."""
    vcs = vcs_root(folder)
    if vcs is not None:
        return vcs
    for candidate in folder.parents:
        if any((candidate / f).is_file() for f in _PROJECT_FILES):
            return candidate
    return None


def _resolves(base: Path, dotted: str) -> bool:
    target = base.joinpath(*dotted.split("."))
    return target.with_suffix(".py").is_file() or (target.is_dir() and any(target.glob("*.py")))


def _above(a: Path, b: Path) -> bool:
    """a is b or an ancestor of b."""
    return a == b or a in b.parents


def installed_package(folder: Path, names: Set[str], limit: Sequence[Path]) -> Optional[Tuple[Path, str]]:
    """(folder, name) of an installed package that holds ``folder`` and that one of the
    absolute ``names`` imports, where the name resolves from no folder of ``limit``."""
    for name in sorted(names):
        top = name.split(".")[0]
        if any(_resolves(base, top) for base in limit):
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        for location in list(getattr(spec, "submodule_search_locations", None) or []) if spec else []:
            real = Path(os.path.realpath(location))
            if _above(real, folder):
                return real, top
    return None


def clone_package(folder: Path, names: Set[str], limit: Sequence[Path], vcs: Optional[Path], repo: Optional[Path] = None) -> Optional[Path]:
    """A repo that is itself a package, not installed: the files import
    ``<repo>.models.hiera_utils`` and a folder holding them (the clone, named after the
    repo) bears that name, so Python resolves it from the folder above once the repo is
    installed editable.  The folder, or None.  Not a plain folder inside the repo root
    (``repo``: ``src/`` without ``__init__.py``): that one imports from the repo root."""
    holders = [f for f in [folder, *folder.parents] if vcs is None or _above(vcs, f)]
    if repo is not None:
        holders = [f for f in holders if f == repo or not _above(repo, f) or (f / "__init__.py").is_file()]
    for name in sorted(names):
        top = name.split(".")[0]
        if any(_resolves(base, top) for base in limit):
            continue
        for holder in holders:
            if holder.name == top and _resolves(holder.parent, name) and not _named_from_above(holder, names, repo):
                return holder
    return None


def _named_from_above(holder: Path, names: Set[str], repo: Optional[Path]) -> bool:
    """The files also import the holder's tree by a longer name from the repo root
    (``src.models.components.utils`` beside ``models.components.utils``, with the files in
    ``src/models/``): run from the repo root, as that name needs, the holder is no top-level
    package; it is imported under the longer name."""
    if repo is None or holder == repo or not _above(repo, holder):
        return False
    for name in names:
        top = repo / name.split(".")[0]
        if top != holder and _above(top, holder) and _resolves(repo, name):
            return True
    return False


def find_layout(path: Path) -> Layout:
    folder = path.resolve().parent
    if (folder / "__init__.py").is_file():
        top = folder
        while (top.parent / "__init__.py").is_file() and top.parent != top:
            top = top.parent
        floor, kind = top.parent, "package"
    else:
        floor, kind = folder, "flat"
    # the __init__.py of each package above the folder runs first when the files import:
    # its absolute imports name the root too (a lightning-hydra src/models/__init__.py
    # importing `from src.models.module import ...` while src/ has no __init__.py)
    inits = [f / "__init__.py" for f in folder.parents if _above(floor, f) and f != floor and (f / "__init__.py").is_file()]
    level, names = _evidence(folder, inits)
    chain = [folder, *folder.parents]
    needed = chain[min(level, len(chain) - 1)]
    if level and not _above(floor, needed):
        floor, kind = needed, "namespace"
    vcs = vcs_root(folder)
    repo = repo_root(folder)
    ups = [floor, *floor.parents]
    limit = ups.index(repo) + 1 if repo is not None and repo in ups else 4
    installed = installed_package(folder, names, ups[:limit])
    if installed is not None:
        return Layout(installed[0], "installed", installed[1])
    clone = clone_package(folder, names, ups[:limit], vcs, repo)
    if clone is not None:
        return Layout(clone, "clone", clone.name)
    root = floor
    for name in sorted(names):
        for candidate in ups[:limit]:
            if _resolves(candidate, name):
                if not _above(root, candidate):
                    root = candidate
                break
    if root == floor and kind == "namespace" and vcs is not None and _above(vcs, floor):
        root = vcs
    if repo is not None and root != repo and _above(repo, root) and _imported_from_repo_root(repo, folder):
        root, kind = repo, "namespace"
    if root != floor and kind == "flat":
        kind = "namespace"
    # a namespace folder never takes a top-level name an installed distribution holds (a
    # fork's models/hiera/ without __init__.py beside an installed hiera-transformer: the
    # installed regular package would win the import): the folder above imports the files
    # under their own names (models.hiera.hiera), as Python does run from the repo root
    for up in [*root.parents][:3]:
        top = path.resolve().relative_to(root).parts[0]
        shadowed = (root / top).is_dir() and not (root / top / "__init__.py").is_file() and _installed_elsewhere(top, root)
        if not shadowed or (vcs is not None and not _above(vcs, up)):
            break
        root, kind = up, "namespace"
    return Layout(root, kind)


MAX_REPO_FILES = 400


def _imported_from_repo_root(repo: Path, folder: Path) -> bool:
    """The repo's own Python files (its scripts, tests, other packages) import the files'
    folder by a dotted name from the repo root whose top is a plain directory there (no
    ``__init__.py``, a namespace package): ``from src.models.components.hiera import ...``
    with the files in ``src/models/components/hiera/``.  Python, run from the repo root
    as the repo runs, imports them under that name: the root is the repo root."""
    try:
        top = folder.relative_to(repo).parts[0]
    except (ValueError, IndexError):
        return False
    if (repo / top / "__init__.py").is_file() or not (repo / top).is_dir() or top in _NOT_LOCAL:
        return False
    if _installed_elsewhere(top, repo):  # an installed regular package of that name wins over the plain folder
        return False
    needle = top + "."
    seen = 0
    for base, dirs, names in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_WALK)
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > MAX_REPO_FILES:
                return False
            path = Path(base, name)
            try:
                data = path.read_bytes()
                if needle.encode() not in data or len(data) > 1024 * 1024:
                    continue
                tree = ast.parse(data)
            except (SyntaxError, ValueError, OSError):
                continue
            for node in ast.walk(tree):
                dotted = [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for module in dotted:
                    if module.split(".")[0] != top or not _resolves(repo, module):
                        continue
                    target = repo.joinpath(*module.split("."))
                    if _above(target, folder) or _above(folder, target):
                        return True
    return False


_SKIP_WALK = {"__pycache__", "node_modules", "site-packages", "venv", "build", "dist", "wandb", "outputs", "checkpoints", "data"}


def _installed_elsewhere(name: str, root: Path) -> bool:
    """``name`` imports, outside ``root``, as an installed module or regular package."""
    if name in _NOT_LOCAL:
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    places = [spec.origin] if spec.origin and spec.origin not in ("built-in", "frozen", "namespace") else []
    places += list(spec.submodule_search_locations or []) if spec.origin not in (None, "namespace") else []
    return any(not _above(root, Path(os.path.realpath(p))) for p in places)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.resolve().relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


class Group:
    """Target files under one import root, with the rewritten results of the changed ones."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.targets: List[Path] = []
        self.names: Dict[Path, str] = {}  # path -> as the user named it
        self.results: Dict[Path, object] = {}  # changed files: engine FileResult

    @property
    def root(self) -> Path:
        return self.layout.root

    def rel(self, path: Path) -> Path:
        """Where ``path`` lies in a copy of the import root (the package name first for
        an installed layout)."""
        rel = path.resolve().relative_to(self.root)
        return Path(self.layout.alias) / rel if self.layout.alias else rel

    def module(self, path: Path) -> str:
        parts = list(self.rel(path).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join(parts)

    @property
    def tops(self) -> List[str]:
        """First path components below the root holding targets ('' for files at the root)."""
        return sorted({self.rel(p).parts[0] if len(self.rel(p).parts) > 1 else "" for p in self.targets})

    def copies(self) -> List[Tuple[Path, str, bool]]:
        """(folder, its name in the copy, only .py files and packages) to copy per side."""
        if self.layout.alias:
            return [(self.root, self.layout.alias, False)]
        return [(self.root / top, top, False) if top else (self.root, "", True) for top in self.tops]

    @property
    def label(self) -> str:
        if self.layout.alias:
            kind = "repo-as-package layout" if self.layout.kind == "clone" else "installed layout"
            return f"{kind}, {self.root} imported as {self.layout.alias}"
        names = ", ".join(t or "(root files)" for t in self.tops)
        return f"{self.layout.kind} layout, import root {self.root} ({names})"


def group_files(files: Sequence[Tuple[str, Optional[object]]], package_root: Optional[Path]) -> List[Group]:
    """Group (name, changed FileResult or None) by import root."""
    groups: Dict[Path, Group] = {}
    for name, result in files:
        path = Path(name).resolve()
        if package_root is not None:
            top = package_root.resolve()
            if not _above(top, path.parent):
                raise ValueError(f"{path} is not inside --package-root {top}")
            layout = Layout(top.parent, "package")
        else:
            layout = find_layout(path)
        group = groups.setdefault(layout.root, Group(layout))
        group.targets.append(path)
        group.names[path] = name
        if result is not None:
            group.results[path] = result
    return list(groups.values())
