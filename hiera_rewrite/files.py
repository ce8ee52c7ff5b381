"""The file layer shared by the plain CLI and ``--verify``: walk, rewrite one file,
diff, checked write.  No printing, no flags."""

from __future__ import annotations

import dataclasses
import difflib
import os
import stat
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .engine import FileResult, InputError, InternalError, line_length_for, rewrite_bytes, write_atomic

# Folders a directory walk does not enter (as black): environments, caches, builds.
# A folder named on the command line is always entered.
SKIPPED_DIRS = {"venv", "site-packages", "__pypackages__", "__pycache__", "node_modules", "build", "dist", "buck-out", "_build"}



@dataclasses.dataclass(frozen=True)
class FileError:
    """Why a file was not (or not fully) processed; ``str()`` is the line printed."""

    path: str
    line: int
    col: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.reason}"


# (path, codes, line length, traceback wanted[, {real path: bytes} of files this run rewrote])
Job = Tuple[Any, ...]
Outcome = Tuple[str, Optional[FileResult], Optional[FileError], Optional[str]]


def python_files(root: Path) -> List[str]:
    """The *.py files under ``root``, sorted, skipping hidden and environment folders."""
    found: List[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        found.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(".py") and os.path.isfile(os.path.join(folder, n)))
    return found


def expand_paths(paths: Sequence[str]) -> Tuple[List[str], List[FileError]]:
    """(files, errors): folders walked, each file once (by real path);
    '-' is left to the caller (it is not a file)."""
    files: List[str] = []
    errors: List[FileError] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files.extend(python_files(path))
        elif path.exists():
            files.append(name)
        else:
            errors.append(FileError(name, 1, 1, "no such file or directory"))
    unique: dict = {}  # a file named twice (or via a folder too) is done once
    folders: Dict[str, set] = {}  # real path -> the real folders it is named in
    for f in files:
        real = os.path.realpath(f)
        unique.setdefault(real, f)
        folders.setdefault(real, {os.path.dirname(real)}).add(os.path.realpath(os.path.dirname(os.path.abspath(f))))
    for real, where in folders.items():
        if len(where) > 1:  # a link to a file of another folder: imported beside other modules there
            errors.append(FileError(
                unique.pop(real), 1, 1,
                f"a link to {real}, a file of another folder: the modules beside it differ between its folders, not rewritten"
                " (rewrite the file itself, in its own folder)",
            ))
    return list(unique.values()), errors


def sibling_path(path: Path, name: str) -> Optional[Path]:
    """The file of the module ``name`` that ``path`` imports: a plain name beside it
    (``hiera_utils``); a relative one from its folder (``.hiera_utils``, ``..layers.utils``);
    a dotted absolute one (``models.layers.hiera_utils``) under the nearest folder of the
    file's own path named like its first part (the root that makes the file importable
    as ``models....`` too), else in a folder of that name beside the top package (the
    file's own folder in a flat layout: ``from utils import masking``; ``backbones.hiera``
    from ``mae/hiera_mae.py``). None when there is none such, or when a package of that name
    (a folder with ``__init__.py``) is there too: Python imports the package, not the file."""
    found = _module_file(path, name)
    if found is not None and (found.with_suffix("") / "__init__.py").is_file():
        return None
    return found


def _module_file(path: Path, name: str) -> Optional[Path]:
    dots = len(name) - len(name.lstrip("."))
    parts = name.lstrip(".").split(".")
    if not all(parts):
        return None
    if dots:
        base = Path(os.path.abspath(path)).parent  # (a relative path's `..` must not stop at the cwd)
        for _ in range(dots - 1):
            base = base.parent
        return base.joinpath(*parts[:-1], parts[-1] + ".py")
    beside = path.parent / f"{name}.py"
    if len(parts) == 1 and (beside.is_file() or (path.parent / name).is_dir() or name == "__init__"):
        return beside  # (`__init__`: the file's own package, never one further up)
    for ancestor in Path(os.path.abspath(path)).parents if len(parts) > 1 else ():
        if ancestor.name == parts[0]:
            return ancestor.parent.joinpath(*parts[:-1], parts[-1] + ".py")
    # else in the nearest folder up to the repo root holding it: the file's own folder in
    # a flat layout (`from utils import masking`, `utils/` beside the file), the folder
    # above a namespace package, a repo root holding `backbones/`, `mae/` or `masking.py`;
    # never an installed package's site-packages (torch's modules are not read)
    for root in _roots(Path(os.path.abspath(path)).parent):
        if (root / parts[0]).is_dir() or len(parts) == 1 and (root / f"{name}.py").is_file():
            return root.joinpath(*parts[:-1], parts[-1] + ".py")
    return beside if len(parts) == 1 else None


# files that mark a repository's root (the search for a module stops there)
_REPO_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


def _roots(folder: Path) -> List[Path]:
    """``folder`` and the folders above it, up to the first that marks a repo root
    (included), at most 6, none inside an installed package's site-packages."""
    found: List[Path] = []
    for each in [folder, *folder.parents][:6]:
        if each.name in ("site-packages", "dist-packages") or any(p.name in ("site-packages", "dist-packages") for p in each.parents):
            break
        found.append(each)
        if any((each / m).exists() for m in _REPO_MARKERS):
            break
    return found


def stdin_reader() -> Callable[[str], Optional[bytes]]:
    """``siblings`` for a file read from stdin with no path: no module is found, and the
    context knows it is not placed (PlanContext.placed): the modules that import the file
    (its package's `__init__`, which may patch its classes) are not known."""

    def read(name: str) -> Optional[bytes]:
        return None

    read.unplaced = True  # type: ignore[attr-defined]
    return read


def sibling_reader(path: Path, rewritten: Optional[Dict[str, bytes]] = None) -> Callable[[str], Optional[bytes]]:
    """``siblings`` for rewrite_bytes: the module ``name`` that ``path`` imports
    (:func:`sibling_path`), as this run left it (``rewritten``, by real path) or as it
    is on disk."""

    def read(name: str) -> Optional[bytes]:
        sibling = sibling_path(path, name)
        if sibling is None:
            return None
        real = os.path.realpath(sibling)
        if rewritten and real in rewritten:
            return rewritten[real]
        try:
            return sibling.read_bytes()
        except OSError:
            return None

    def path_of(name: str) -> Optional[str]:
        """The real path of the file ``read(name)`` reads ("" : ``path`` itself)."""
        found = path if name == "" else sibling_path(path, name)
        return os.path.realpath(found) if found is not None else None

    def neighbours() -> Optional[List[str]]:
        """The modules beside ``path`` (the ``*.py`` files of its folder but itself), by
        the names ``read`` takes; None where the folder cannot be listed."""
        try:
            entries = sorted(os.listdir(path.parent if str(path.parent) else "."))
        except OSError:
            return None
        own = os.path.realpath(path)
        return [
            e[:-3] for e in entries
            if e.endswith(".py") and e[:-3].isidentifier() and os.path.realpath(path.parent / e) != own
        ]

    read.path_of = path_of  # type: ignore[attr-defined]  # (PlanContext.path_of)
    read.neighbours = neighbours  # type: ignore[attr-defined]  # (PlanContext.modules_beside)
    return read


def process_file(job: Job) -> Outcome:
    """Read and rewrite one file.  Returns (path, result, error, traceback)."""
    name, codes, line_length, want_traceback = job[:4]
    rewritten = job[4] if len(job) > 4 else None
    path = Path(name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return name, None, FileError(name, 1, 1, f"cannot read: {exc.strerror or exc}"), None
    try:
        result = rewrite_bytes(
            data, codes=codes, line_length=line_length or line_length_for(path), siblings=sibling_reader(path, rewritten)
        )
    except InputError as exc:
        return name, None, FileError(name, exc.line, exc.col, exc.message), None
    except InternalError as exc:
        return name, None, FileError(name, 1, 1, f"internal error, nothing written: {exc}"), None
    except Exception as exc:  # a bug in a rewrite must not take the other files down
        tb = traceback.format_exc() if want_traceback else None
        return name, None, FileError(name, 1, 1, f"internal error, nothing written: {type(exc).__name__}: {exc}"), tb
    return name, result, None, None


def replan_with_siblings(jobs: Sequence[Job], outcomes: List[Outcome]) -> List[Outcome]:
    """``outcomes`` of ``jobs``, each file whose plan read a sibling this run rewrites
    (hiera_mae.py reads hiera.py's forward) planned again against the sibling's new bytes."""
    rewritten = {os.path.realpath(n): r.output for n, r, _, _ in outcomes if r is not None and r.changed}
    outcomes = list(outcomes)
    for i, (name, result, _, _) in enumerate(outcomes):
        if result is not None and any(
            (found := sibling_path(Path(name), s)) is not None and os.path.realpath(found) in rewritten for s in result.consulted
        ):
            outcomes[i] = process_file((*jobs[i][:4], rewritten))
    return outcomes


def write_order(outcomes: Sequence[Tuple[str, Optional[FileResult]]]) -> List[Tuple[int, set]]:
    """The changed files of ``outcomes`` (name, result), in the order to write them: a
    file whose plan read another one's rewrite (hiera_mae.py reads hiera.py's forward)
    after that one.  Each with the real paths of the files of this run it read so."""
    real = [os.path.realpath(name) for name, _ in outcomes]
    changed = {real[i] for i, (_, result) in enumerate(outcomes) if result is not None and result.changed}
    deps = {}
    for i, (name, result) in enumerate(outcomes):
        if result is not None and result.changed:
            found = {os.path.realpath(p) for s in result.consulted if (p := sibling_path(Path(name), s)) is not None}
            deps[i] = (found & changed) - {real[i]}
    order: List[Tuple[int, set]] = []
    done: set = set()
    todo = list(deps)
    while todo:
        ready = [i for i in todo if deps[i] <= done] or todo[:1]  # (a cycle: as given)
        for i in ready:
            todo.remove(i)
            done.add(real[i])
            order.append((i, deps[i]))
    return order


def write_in_order(jobs: Sequence[Job], outcomes: List[Outcome]) -> Tuple[List[Outcome], Dict[str, FileError]]:
    """Write each changed file of ``outcomes`` (as :func:`replan_with_siblings` planned
    them) in :func:`write_order`.  Where a write failed (read-only, say), its readers are
    planned again against the bytes on disk before they are written: hiera_mae.py
    rewritten against a hiera.py left as it was passes it nothing new.  Returns the
    outcomes (re-planned ones replaced) and each failed write's error, by name."""
    outcomes = list(outcomes)
    disk: Dict[str, bytes] = {}  # this run's files written, as written
    exact: set = set()  # those written as first planned: the bytes their readers' plans read
    problems: Dict[str, FileError] = {}
    for i, deps in write_order([(name, result) for name, result, _, _ in outcomes]):
        again = bool(deps - exact)
        if again:
            outcomes[i] = process_file((*jobs[i][:4], disk))
        name, result = outcomes[i][0], outcomes[i][1]
        if result is None or not result.changed:
            continue
        problem = write_checked(name, result.output, result.source)
        if problem is not None:
            problems[name] = problem
            continue
        disk[os.path.realpath(name)] = result.output
        if not again:
            exact.add(os.path.realpath(name))
    return outcomes, problems


def write_checked(name: str, data: bytes, source: Optional[bytes] = None) -> Optional[FileError]:
    """Write ``data`` over the file atomically; an error instead if it is read-only,
    if it no longer holds ``source`` (the bytes the rewrite was made from: an edit saved
    while --verify ran), or the write fails."""
    path = Path(name)
    if not path.stat().st_mode & stat.S_IWUSR:
        return FileError(name, 1, 1, "file is read-only, not rewritten")
    if source is not None and path.read_bytes() != source:
        return FileError(name, 1, 1, "file changed on disk since it was read, not rewritten (run again)")
    try:
        write_atomic(path, data)
    except OSError as exc:
        return FileError(name, 1, 1, f"cannot write: {exc.strerror or exc}")
    return None


def unified_diff(name: str, result: FileResult) -> bytes:
    """A unified diff of the file's own bytes (its encoding and newlines), for patch.

    Lines are what patch (and diff, git) take for lines: each ends in \\n (a CRLF
    line keeps its \\r).  A lone \\r (old-Mac line ends, which Python accepts) is no
    line end to them, so it stays inside a line, as in ``diff -u``: split there, the
    hunks would not apply (patch would read them as one line).  Form feeds and the
    other separators str.splitlines knows are no line ends either.
    """
    before = _patch_lines(result.source)
    after = _patch_lines(result.output)
    path = os.fsencode(name)
    lines = difflib.diff_bytes(difflib.unified_diff, before, after, fromfile=b"a/" + path, tofile=b"b/" + path)
    out = []
    for line in lines:
        out.append(line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n")
    return b"".join(out)


def _patch_lines(data: bytes) -> List[bytes]:
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])  # no final newline
    return out
