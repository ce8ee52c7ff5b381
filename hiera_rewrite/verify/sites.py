"""Rewritten sites and the lines that prove them (``--verify``'s coverage verdict).

Each applied report of the engine (``path:line CODE``) is a *site*.  The changed
regions of the file (the non-equal blocks of a line diff of the original against the
rewritten text) are given to the sites: a region holding a site's reported line is
that site's; a region holding none goes to the nearest site of the same function
(else class, else file).  A region is *run* on one side when a statement of a
function body that overlaps it ran there (a compound statement counts by its header
lines).  On the rewritten side, where a region holds simple statements of new text
(not a line of the original), only those count: a rewrite that keeps the original
statement as a fallback branch (``if num_kept is None: <original> else: <new>``) is
proven by its new branch running, not by its test or its fallback.  Statements in the else
branch of `if hasattr(F, "scaled_dot_product_attention"):` run only on torch < 2.0: they
are not asked for (the suite runs that branch with SDPA deleted).  Regions that touch no function body (an import, a signature, a class
attribute) run at import on both sides and prove nothing about behaviour: they are
not required.  A whole function the rewrite adds for the file's callers (a *helper*
region: ``forward.leaves_mask``, which only an MAE calls) is required only when some
compared case runs it, where the site changes more than it: uncalled, it took no part in
any compared result (where the helper is all the site changes, it stays required).  A site is exercised by a case when each of its required regions ran
in that case on both sides (sides without a statement in the region are not asked).
A site in a function that a later ``def`` of the same name in the same class replaces
(a fork pasting a new ``forward_encoder`` below the old one) is dead code: *shadowed*.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re
from typing import Iterable, List, Optional, Sequence, Set, Tuple

Range = Tuple[int, int]  # inclusive 1-based line range


@dataclasses.dataclass
class Region:
    orig: Range  # lines of the original it replaces (empty when lo > hi: an insertion)
    new: Range  # lines of the rewritten text
    orig_stmts: List[Range]  # statement line ranges that count as running it
    new_stmts: List[Range]
    # a whole function the rewrite adds for callers of the file (``get_random_mask.num_kept``,
    # ``forward.leaves_mask``): required only where a compared case calls it
    helper: bool = False

    @property
    def required(self) -> bool:
        return bool(self.orig_stmts or self.new_stmts)


@dataclasses.dataclass
class SiteSpec:
    key: str  # "path:line:col CODE"
    path: str  # as the user named it
    line: int
    col: int
    code: str
    owner: str  # Class.function holding it (in the original)
    owner_class: Optional[str]
    regions: List[Region]
    # the line of a later def of the same name in the same class (or module) body that
    # replaces the function holding the site: dead code, no call runs it
    shadowed: Optional[int] = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class _Statements(ast.NodeVisitor):
    """Line ranges of the statements inside function bodies, and each line's owner."""

    def __init__(self) -> None:
        self.ranges: List[Range] = []
        self.headers: Set[Range] = set()  # compound statements' header lines
        self.owners: List[Tuple[int, int, str, Optional[str]]] = []  # (lo, hi, qualname, class)
        self._stack: List[Tuple[str, ast.AST]] = []

    def _qual(self) -> Tuple[str, Optional[str]]:
        names = [n for n, _ in self._stack]
        classes = [n for n, node in self._stack if isinstance(node, ast.ClassDef)]
        return ".".join(names), (classes[-1] if classes else None)

    def _scoped(self, node) -> None:
        self._stack.append((node.name, node))
        qual, cls = self._qual()
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        self.owners.append((start, node.end_lineno or node.lineno, qual, cls))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in node.body:
                self._statement(stmt)
        else:
            self.generic_visit(node)
        self._stack.pop()

    visit_ClassDef = _scoped
    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped

    def _statement(self, stmt: ast.stmt) -> None:
        bodies = [getattr(stmt, f) for f in ("body", "orelse", "finalbody", "handlers", "cases") if isinstance(getattr(stmt, f, None), list)]
        children = [s for body in bodies for s in body if isinstance(s, (ast.stmt, ast.excepthandler)) or type(s).__name__ == "match_case"]
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.ranges.append((stmt.lineno, stmt.lineno))
            self._scoped(stmt)
            return
        if children:
            first = min(getattr(c, "lineno", None) or c.pattern.lineno for c in children)
            self.ranges.append((stmt.lineno, max(stmt.lineno, first - 1)))
            self.headers.add(self.ranges[-1])
            for child in children:
                if isinstance(child, ast.stmt):
                    self._statement(child)
                else:  # except handler / match case: its header, then its body
                    line = getattr(child, "lineno", None) or child.pattern.lineno
                    self.ranges.append((line, line))
                    self.headers.add(self.ranges[-1])
                    for s in child.body:
                        self._statement(s)
        else:
            self.ranges.append((stmt.lineno, stmt.end_lineno or stmt.lineno))


def _scan(text: str) -> _Statements:
    scan = _Statements()
    scan.visit(ast.parse(text))
    return scan


def _decode(data: bytes) -> str:
    text = data.decode("utf-8-sig", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _overlapping(ranges: Iterable[Range], lo: int, hi: int) -> List[Range]:
    return sorted({r for r in ranges if r[0] <= hi and r[1] >= lo})


def _owner(scan: _Statements, line: int) -> Tuple[str, Optional[str]]:
    best = None
    for lo, hi, qual, cls in scan.owners:
        if lo <= line <= hi and (best is None or hi - lo < best[1] - best[0]):
            best = (lo, hi, qual, cls)
    return (best[2], best[3]) if best else ("<module>", None)


def _shadowed(text: str) -> List[Tuple[int, int, int]]:
    """(first line, last line, the replacing def's line) of each function that a later
    ``def`` of the same name in the same class or module body replaces (undecorated both:
    a property's setter, an ``@overload`` or a ``register`` is no replacement)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    out: List[Tuple[int, int, int]] = []
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
        defs = [n for n in scope.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for i, node in enumerate(defs):
            later = [d for d in defs[i + 1:] if d.name == node.name]
            if later and not node.decorator_list and not later[-1].decorator_list:
                out.append((node.lineno, node.end_lineno or node.lineno, later[-1].lineno))
    return out


def _span(scan: _Statements, line: int) -> Range:
    """The lines of the innermost function or class holding ``line`` (else all)."""
    holders = [(lo, hi) for lo, hi, _, _ in scan.owners if lo <= line <= hi]
    return min(holders, key=lambda h: h[1] - h[0]) if holders else (0, 1 << 30)


def sites_of(path: str, source: bytes, output: bytes, reports: Sequence) -> List[SiteSpec]:
    """The applied reports of one file as sites, each with its changed regions."""
    before, after = _decode(source), _decode(output)
    old_scan, new_scan = _scan(before), _scan(after)
    a_lines, b_lines = before.split("\n"), after.split("\n")
    sites: List[SiteSpec] = []
    for r in reports:
        if not r.applied:
            continue
        owner, cls = _owner(old_scan, r.line)
        sites.append(SiteSpec(f"{path}:{r.line}:{r.col} {r.code}", path, r.line, r.col, r.code, owner, cls, []))
    if not sites:
        return sites
    for lo, hi, by in _shadowed(before):
        for site in sites:
            if lo <= site.line <= hi:
                site.shadowed = by
    original_text = {line.strip() for line in a_lines}
    old_torch = (_without_sdpa(before), _without_sdpa(after))
    helpers: List[Region] = []
    matcher = difflib.SequenceMatcher(None, a_lines, b_lines, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        # 1-based inclusive; an insertion has orig (a0+1, a0): empty
        orig, new = (a0 + 1, a1), (b0 + 1, b1)
        new_stmts = _overlapping(new_scan.ranges, *new) if b1 > b0 else []
        fresh = [
            r for r in new_stmts
            if r not in new_scan.headers and new[0] <= r[0] <= new[1] and b_lines[r[0] - 1].strip() not in original_text
        ]
        orig_stmts = _overlapping(old_scan.ranges, *orig) if a1 > a0 else []
        # statements only torch < 2.0 runs (a hasattr(F, "scaled_dot_product_attention")
        # guard's else) prove nothing here: the suite runs them with SDPA deleted
        orig_stmts = [r for r in orig_stmts if not _inside(r, old_torch[0])]
        new_stmts = [r for r in new_stmts if not _inside(r, old_torch[1])]
        fresh = [r for r in fresh if not _inside(r, old_torch[1])]
        region = Region(
            orig,
            new,
            orig_stmts,
            fresh or new_stmts,
            a1 == a0 and bool(new_stmts) and all(_in_added_function(new_scan, r, new) for r in new_stmts),
        )
        anchor = a0 + 1 if a1 > a0 else max(a0, 1)
        inside = [s for s in sites if orig[0] <= s.line <= max(orig[1], orig[0])]
        if region.helper:
            # a helper with a fallback (`if count is None: return t[mask]`) is proven by its
            # last statement, the static path, not by its first lines
            region.new_stmts = _last_statements(new_scan, new)
        if not inside and region.helper:
            helpers.append(region)
            continue
        if not inside:
            owner, cls = _owner(old_scan, anchor)
            span = _span(old_scan, anchor)
            # the function holding it first (two defs of one name: the one it is in)
            pool = ([s for s in sites if s.owner == owner and span[0] <= s.line <= span[1]] or [s for s in sites if s.owner == owner]
                    or [s for s in sites if cls and s.owner_class == cls] or sites)
            inside = [min(pool, key=lambda s: abs(s.line - anchor))]
        for site in inside:
            site.regions.append(region)
    for region in helpers:
        # a helper function the rewrite adds (true_rows, kept_mask_units): the sites whose
        # new lines call it, else the nearest site
        names = {qual.split(".")[-1] for lo, hi, qual, _ in new_scan.owners if region.new[0] <= lo and hi <= region.new[1]}
        calling = [
            s for s in sites
            if any(re.search(rf"\b(?:{'|'.join(map(re.escape, names))})\(", "\n".join(b_lines[r.new[0] - 1:r.new[1]]))
                   for r in s.regions if r.new[1] >= r.new[0] and not r.helper)
        ] if names else []
        for site in calling or [min(sites, key=lambda s: abs(s.line - region.orig[1]))]:
            site.regions.append(region)
    return sites


def _without_sdpa(text: str) -> List[Range]:
    """The line ranges of the else branches of `if hasattr(X, "scaled_dot_product_attention"):`
    (what torch < 2.0, which has no SDPA, runs instead)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    out: List[Range] = []
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
            and len(test.args) == 2 and isinstance(test.args[1], ast.Constant)
            and test.args[1].value == "scaled_dot_product_attention" and node.orelse  # type: ignore[union-attr]
        ):
            last = node.orelse[-1]  # type: ignore[union-attr]
            out.append((node.orelse[0].lineno, last.end_lineno or last.lineno))  # type: ignore[union-attr]
    return out


def _inside(stmt: Range, ranges: Sequence[Range]) -> bool:
    return any(lo <= stmt[0] and stmt[1] <= hi for lo, hi in ranges)


def _last_statements(scan: _Statements, added: Range) -> List[Range]:
    """The last body statement of each function defined in the ``added`` lines."""
    out: List[Range] = []
    for lo, hi, _, _ in scan.owners:
        if added[0] <= lo and hi <= added[1]:
            body = [r for r in scan.ranges if lo < r[0] and r[1] <= hi and r not in scan.headers and _in_added_function(scan, r, (lo, hi))]
            inner = [r for r in body if min((h for h in scan.owners if h[0] <= r[0] and r[1] <= h[1]), key=lambda h: h[1] - h[0])[:2] == (lo, hi)]
            if inner:
                out.append(max(inner))
    return sorted(set(out))


def _in_added_function(scan: _Statements, stmt: Range, added: Range) -> bool:
    """``stmt`` lies in a function whose whole definition is in the ``added`` lines."""
    holders = [(lo, hi) for lo, hi, _, _ in scan.owners if lo <= stmt[0] and stmt[1] <= hi]
    if not holders:
        return False
    lo, hi = min(holders, key=lambda h: h[1] - h[0])
    return added[0] <= lo and hi <= added[1]


def ran(stmts: Sequence[Range], lines: Set[int]) -> bool:
    return any(line in lines for lo, hi in stmts for line in range(lo, hi + 1))


def regions_run(site: dict, orig_cov: Set[int], new_cov: Set[int]) -> List[bool]:
    """For each required region of a site (JSON form): did this case run it on both sides?"""
    return [
        (not r["orig_stmts"] or ran(r["orig_stmts"], orig_cov)) and (not r["new_stmts"] or ran(r["new_stmts"], new_cov))
        for r in site["regions"]
        if r["orig_stmts"] or r["new_stmts"]
    ]
