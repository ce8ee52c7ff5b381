"""Bytes in, bytes out: parse, plan every selected rewrite, apply, check, re-encode.

The engine knows nothing about Hiera.  It asks each registered rewrite for a plan
against the *original* module (so every reported line and column is a line of the
file the user has), drops sites that overlap an earlier one or sit under a
``# hiera-rewrite: skip`` marker, applies the rest in one transform, and checks its
own output: it must compile, and a second pass must plan nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from .index import ModuleIndex
from .rewrite import REGISTRY, SKIP_MARKER, PlanContext, Refusal, Replacement, Site

DEFAULT_LINE_LENGTH = 88


class InputError(Exception):
    """The input cannot be processed (decode or parse error).  Exit code 2."""

    def __init__(self, message: str, line: int = 1, col: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col


# The report code of a file Python compiles and libcst cannot parse (a backslash
# continuation at the end of the file): nothing is rewritten, the file is not an error.
UNREAD_CODE = "HR000"


class _LibcstOnly(InputError):
    """Python compiles the file; libcst's parser rejects it."""


class InternalError(Exception):
    """The engine produced output that failed its own checks; nothing is written."""


@dataclasses.dataclass
class Report:
    code: str
    line: int
    col: int
    message: str
    applied: bool  # False: a refusal or a dropped site (message says why)


@dataclasses.dataclass
class FileResult:
    source: bytes
    output: bytes
    reports: List[Report]
    consulted: Tuple[str, ...] = ()  # the sibling modules the plan read (``siblings``)

    @property
    def changed(self) -> bool:
        return self.output != self.source

    @property
    def changes(self) -> List[Report]:
        return [r for r in self.reports if r.applied]


def every_code() -> List[str]:
    """Every registered rewrite, opt-in ones included (the golden files test them all)."""
    _load_rewrites()
    return list(REGISTRY)


def selected_codes(select: Optional[Iterable[str]] = None, ignore: Optional[Iterable[str]] = None) -> List[str]:
    """Codes to run, in registry order: the default ones, or those ``select`` names
    (opt-in rewrites included).  Unknown codes raise ValueError."""
    _load_rewrites()
    chosen = list(REGISTRY) if select else [c for c, r in REGISTRY.items() if r.default]
    for given in (select, ignore):
        unknown = sorted(set(given or ()) - set(REGISTRY))
        if unknown:
            raise ValueError(f"unknown rewrite code(s): {', '.join(unknown)}")
    if select:
        chosen = [c for c in chosen if c in set(select)]
    if ignore:
        chosen = [c for c in chosen if c not in set(ignore)]
    return chosen


def _load_rewrites() -> None:
    from . import codemods  # noqa: F401  (registers every rewrite)


def rewrite_bytes(
    data: bytes,
    *,
    codes: Optional[Sequence[str]] = None,
    line_length: int = DEFAULT_LINE_LENGTH,
    siblings: Optional[Callable[[str], Optional[bytes]]] = None,
) -> FileResult:
    """Rewrite one file's bytes.  Raises InputError or InternalError.

    ``siblings(name)`` gives the bytes of the module ``name`` beside the file (as this
    run leaves it), or None: a rewrite that proves a fact across files (the MAE's
    encoder passing the kept count to hiera.py's forward) reads it; without it, it
    refuses."""
    if codes is None:
        codes = selected_codes()
    if not data.strip():
        return FileResult(data, data, [])
    try:
        index = _parse(data)
    except _LibcstOnly as exc:  # valid Python libcst cannot read: left as it is, said why
        return FileResult(data, data, [Report(UNREAD_CODE, exc.line, exc.col, f"skipped: {exc.message}", False)])
    consulted: Set[str] = set()
    reports, new_module = _rewrite_module(index, codes, line_length, siblings, consulted)
    if new_module is None:
        return FileResult(data, data, reports, tuple(sorted(consulted)))
    output, reparsed = _reparse(new_module)
    _check_stable(reparsed, codes, line_length, siblings)
    return FileResult(data, output, reports, tuple(sorted(consulted)))


def _parse(data: bytes) -> ModuleIndex:
    """The parsed module, indexed; Python's compiler accepts its code too."""
    if b"\x00" in data:
        raise InputError("binary file (contains NUL bytes)")
    try:
        module = cst.parse_module(data)
    except cst.ParserSyntaxError as exc:
        # libcst's native parser reports imprecise positions (often column 0 of a
        # later line); Python's own compiler names the real line, column and reason.
        try:
            _compile(data)
        except SyntaxError as syn:
            raise InputError(f"cannot parse: {syn.msg}", syn.lineno or 1, syn.offset or 1) from None
        except ValueError:
            pass
        else:
            raise _LibcstOnly(f"valid Python that libcst cannot parse ({exc.message}); file left untouched", exc.raw_line, exc.raw_column + 1) from None
        raise InputError(f"cannot parse: {exc.message}", exc.raw_line, exc.raw_column + 1) from None
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        line = 1
        if isinstance(exc, SyntaxError):  # tokenize's check of the first two lines
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as bad:
                exc = bad
        if isinstance(exc, UnicodeDecodeError):
            line = len(_LINE_ENDS.findall(data, 0, exc.start)) + 1
        raise InputError(f"cannot decode: {exc}", line) from None
    index = ModuleIndex(_keep_final_cr(module, data))
    _check_compiles(index.code)  # the index's codegen is module.code: one codegen, not two
    return index


_LINE_ENDS = re.compile(rb"\r\n|\r|\n")  # every line end Python's tokenizer accepts


def _keep_final_cr(module: cst.Module, data: bytes) -> cst.Module:
    """libcst's parser does not take a final ``\r`` (old-Mac line ends, which Python
    accepts, alone or mixed with others) for the file's trailing newline: the module
    says ``has_trailing_newline=False`` and its code drops that last byte.  Say True
    where that gives the file's bytes back."""
    if module.has_trailing_newline or not data.endswith(b"\r"):
        return module
    fixed = module.with_changes(has_trailing_newline=True)
    return fixed if fixed.bytes == data else module


def _check_compiles(code: str) -> None:
    """Python's compiler accepts ``code``, else InputError with its line and reason."""
    try:
        _compile(code)
    except SyntaxError as exc:
        raise InputError(f"cannot parse: {exc.msg}", exc.lineno or 1, exc.offset or 1) from None
    except ValueError as exc:  # e.g. source code string cannot contain null bytes
        raise InputError(f"cannot parse: {exc}") from None


def _compile(source: "str | bytes") -> None:
    """Python's own syntax check, quietly: SyntaxWarnings about the user's code
    (``1()``, ``"\\d"``) are not ours to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(source, "<input>", "exec", dont_inherit=True)


def _rewrite_module(
    index: ModuleIndex, codes: Sequence[str], line_length: int,
    siblings: Optional[Callable[[str], Optional[bytes]]] = None, consulted: Optional[Set[str]] = None,
) -> "tuple[List[Report], Optional[cst.Module]]":
    sites: List[Site] = []
    refusals: List[Refusal] = []

    def format_statement(source: str, indent: int) -> cst.BaseStatement:
        return _formatted_statement(source, max(20, line_length - indent))

    shared: Dict[Any, Any] = {}
    for code in codes:
        ctx = PlanContext(index, code, format_statement, codes, siblings, consulted, shared)
        REGISTRY[code]().plan(ctx)
        sites.extend(ctx.sites)
        refusals.extend(ctx.refusals)

    accepted: List[Site] = []
    claimed: Set[cst.CSTNode] = set()
    reports: List[Report] = []
    probe = PlanContext(index, "", format_statement)
    for site in sites:
        skip_owner = probe.skipped_by(site.node)
        if skip_owner is not None:
            refusals.append(Refusal(site.code, site.node, f"left alone: `# {SKIP_MARKER}` on {skip_owner}"))
            continue
        # A wrapping edit (a function of the updated node, e.g. "insert a statement
        # before this class") composes with edits inside it; others must not overlap.
        touched = {n for n, r in site.edits.items() if not callable(r)}
        family = set(touched)
        for node in touched:
            family.update(probe.ancestors(node))
        if family & claimed or any(_descends_from(probe, c, touched) for c in claimed):
            # An earlier rewrite already replaces this code; the stability check
            # (a second pass plans nothing) proves the idiom did not survive.
            continue
        claimed.update(touched)
        accepted.append(site)

    for site in accepted:
        pos = probe.position(site.node)
        reports.append(Report(site.code, pos.line, pos.column + 1, site.message or REGISTRY[site.code].message, True))
    for ref in refusals:
        pos = probe.position(ref.node)
        reports.append(Report(ref.code, pos.line, pos.column + 1, f"skipped: {ref.reason}", False))
    reports.sort(key=lambda r: (r.line, r.col, r.code))

    if not accepted:
        return reports, None
    edits: Dict[cst.CSTNode, Replacement] = {}
    for site in accepted:
        for node, edit in site.edits.items():
            earlier = edits.get(node)
            if isinstance(node, (cst.ClassDef, cst.Module)) and callable(earlier) and callable(edit) and earlier is not edit:
                # two edits of one class or of the module (statements put into its body, a
                # helper function above a class, by several sites): both
                edit = _composed(earlier, edit)
            edits[node] = edit
    return reports, _apply(index, edits)


def _composed(first: Callable[[cst.CSTNode], Any], then: Callable[[cst.CSTNode], Any]) -> Callable[[cst.CSTNode], Any]:
    return lambda updated: then(first(updated))


def _apply(index: ModuleIndex, edits: Dict[cst.CSTNode, Replacement]) -> cst.Module:
    """The module with ``edits`` made.  The transform descends only into the edited
    nodes' ancestors (rebuilding the whole tree costs more than planning); an edit of
    a node the index does not know makes it walk the whole tree."""
    module = index.module
    on_path: Set[int] = {id(module)}
    for node in edits:
        reached = node is module
        for ancestor in index.ancestors(node):
            if id(ancestor) in on_path:
                reached = True  # its ancestors are on the path already
                break
            on_path.add(id(ancestor))
            if ancestor is module:
                reached = True
        if not reached:
            return module.visit(_ApplyEdits(edits))
    return module.visit(_ApplyEdits(edits, on_path))


@functools.lru_cache(maxsize=1024)
def _formatted_statement(source: str, line_length: int) -> cst.BaseStatement:
    """black is deterministic: the same emitted statement at the same width (the same
    idiom in several files of a run) is formatted and parsed once.  Sharing the node
    is safe: libcst nodes are immutable, and the self-check parses changed code anew.
    black is imported here, on the first statement to format: it is a third of the
    tool's start-up, and a file with nothing to rewrite (a pre-commit run over
    already rewritten or unrelated files) does not need it."""
    import black

    return cst.parse_statement(black.format_str(source, mode=black.Mode(line_length=line_length)))


def _descends_from(ctx: PlanContext, node: cst.CSTNode, roots: Set[cst.CSTNode]) -> bool:
    return any(a in roots for a in ctx.ancestors(node))


class _ApplyEdits(cst.CSTTransformer):
    def __init__(self, edits: Dict[cst.CSTNode, Replacement], on_path: Optional[Set[int]] = None) -> None:
        super().__init__()
        self.edits = edits
        self.on_path = on_path  # ids of the edited nodes' ancestors; None: every node

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self.on_path is None or id(node) in self.on_path

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        edit = self.edits.get(original_node, updated_node)
        return edit(updated_node) if callable(edit) else edit


def _reparse(new: cst.Module) -> "tuple[bytes, ModuleIndex]":
    """The output's bytes, and the output parsed (by libcst and by Python's compiler)
    and indexed, as a fresh run of the tool on the written file sees it."""
    output = new.bytes
    try:
        return output, _parse(output)
    except InputError as exc:
        raise InternalError(f"rewritten code does not parse (line {exc.line}): {exc.message}") from None


def _check_stable(index: ModuleIndex, codes: Sequence[str], line_length: int, siblings=None) -> None:
    reports, again = _rewrite_module(index, codes, line_length, siblings)
    if again is not None:
        lines = ", ".join(f"{r.code} at line {r.line}" for r in reports if r.applied)
        raise InternalError(f"rewrite is not stable: a second pass changes the output again ({lines})")


# -- files -------------------------------------------------------------------------


def line_length_for(path: Path) -> int:
    """black's line length from the nearest pyproject.toml, else 88."""
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python < 3.11: black depends on tomli there
        import tomli as tomllib  # type: ignore[no-redef]

    for folder in [path.resolve().parent, *path.resolve().parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                config = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError):
                return DEFAULT_LINE_LENGTH
            value = config.get("tool", {}).get("black", {}).get("line-length")
            return value if isinstance(value, int) and value > 0 else DEFAULT_LINE_LENGTH
    return DEFAULT_LINE_LENGTH


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder, fsync, os.replace; keep the mode, and
    the owner and group where the process may set them (as root; a group of the user's).

    A symlink is followed: its target is replaced and the link stays a link.  A file with
    other hard links is written through its own inode instead (a rename would leave the
    other names holding the old text): the new bytes are first complete on disk in the
    temp file, then copied over the file.
    """
    path = Path(os.path.realpath(path))
    stat = path.stat()
    mode = stat.st_mode & 0o7777
    tmp = path.with_name(f".{path.name}.hiera-rewrite-{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if stat.st_nlink > 1:
            with open(path, "r+b") as handle:
                handle.write(data)
                handle.truncate()
                handle.flush()
                os.fsync(handle.fileno())
            return
        os.chmod(tmp, mode)
        if hasattr(os, "chown") and (stat.st_uid, stat.st_gid) != (os.getuid(), os.getgid()):
            for uid, gid in ((stat.st_uid, stat.st_gid), (-1, stat.st_gid)):
                try:
                    os.chown(tmp, uid, gid)
                    break
                except OSError:
                    continue
            os.chmod(tmp, mode)  # chown clears set-id bits
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
