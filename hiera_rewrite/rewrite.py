"""The contract between the engine and one rewrite.

A rewrite (one module in ``codemods/``) looks at a parsed module and *plans* edits:
it never writes files, prints, or knows about flags.  Each planned change is a
:class:`Site`: every node it replaces, keyed by the original node, applied all
together or not at all.  When something looks like the idiom but the data flow
does not prove it, the site's analysis raises :class:`Refuse` with the reason (or
:class:`NotThisIdiom`, reported nowhere, where it is not the idiom at all), and
:meth:`PlanContext.attempt` reports it and leaves the code alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import OrderedDict
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Type, TypeVar, Union

import libcst as cst

from .flow import FunctionFlow
from .index import ModuleIndex, Pos, Span

SKIP_MARKER = "hiera-rewrite: skip"  # on a class or function: no rewrite touches it

# A replacement node, or a function of the updated node (for edits that wrap code
# which other edits change, such as inserting a statement before a class).
Replacement = Union[
    cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel, Callable[[cst.CSTNode], Any]
]


@dataclasses.dataclass
class Site:
    """One change: the node reported, and the edits that make it."""

    code: str
    node: cst.CSTNode
    edits: Dict[cst.CSTNode, Replacement]
    message: str


class Refuse(Exception):
    """Raised from a site's analysis: the spot looks like the idiom but is left alone,
    and ``reason`` (a sentence naming the cause, and the line where it helps) is reported."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotThisIdiom(Refuse):
    """Raised from a site's analysis: not this idiom at all (or this rewrite's own
    output), left alone without a report."""

    def __init__(self) -> None:
        super().__init__("")


def proves(analyse: Callable[[], object]) -> bool:
    """Whether ``analyse()`` completes without a Refuse: a probe of another site
    (e.g. "does HR004 rewrite this decoder?"); nothing is reported."""
    try:
        analyse()
    except Refuse:
        return False
    return True


@contextlib.contextmanager
def refusing_as(template: str) -> Iterator[None]:
    """A Refuse raised inside is raised again with its reason put into ``template``
    (at ``{}``): a step of a larger proof says which proof it stops."""
    try:
        yield
    except NotThisIdiom:
        raise
    except Refuse as inner:
        raise Refuse(template.format(inner.reason)) from None


T = TypeVar("T")


@dataclasses.dataclass
class Refusal:
    """A spot that looks like an idiom but is left untouched, and why."""

    code: str
    node: cst.CSTNode
    reason: str


class Rewrite:
    """Base of every rewrite.  Subclasses set the class attributes and ``plan``."""

    code: ClassVar[str]
    # False: runs only when selected by code (--select); measured not to help by default
    default: ClassVar[bool] = True
    name: ClassVar[str]
    message: ClassVar[str]
    explanation: ClassVar[str]

    def plan(self, ctx: "PlanContext") -> None:  # pragma: no cover - interface
        raise NotImplementedError


REGISTRY: Dict[str, Type[Rewrite]] = {}


def register(cls: Type[Rewrite]) -> Type[Rewrite]:
    if cls.code in REGISTRY:
        raise ValueError(f"duplicate rewrite code {cls.code}")
    REGISTRY[cls.code] = cls
    return cls


# modules read beside the file, parsed once for every plan of the run (each rewrite code
# plans with its own context; the proofs' caches, hiera_rewrite.flow and codemods._calls,
# key on the module object): (where, its bytes) -> the module
_PARSED: "OrderedDict[Tuple[str, bytes], cst.Module]" = OrderedDict()


def _parsed(where: str, data: bytes) -> cst.Module:
    """``data`` parsed (raises as cst.parse_module), the same object for the same file
    and bytes (a module is never changed in place: libcst's nodes are immutable)."""
    key = (where, data)
    found = _PARSED.get(key)
    if found is None:
        found = _PARSED[key] = cst.parse_module(data)
        while len(_PARSED) > 512:  # a folder's 128 modules, read by each plan in turn
            _PARSED.popitem(last=False)
    else:
        _PARSED.move_to_end(key)
    return found


class PlanContext:
    """What a rewrite gets: the parsed module, what it may ask about it, ways to answer.

    The only channel from a rewrite to the module: every question goes through these
    methods (answered by the module's index, computed once per module), every answer
    is a site or a refusal."""

    def __init__(
        self,
        index: ModuleIndex,
        code: str,
        format_statement: Callable[[str, int], cst.BaseStatement],
        codes: Sequence[str] = (),
        siblings: Optional[Callable[[str], Optional[bytes]]] = None,
        consulted: Optional[Set[str]] = None,
        shared: Optional[Dict[Any, Any]] = None,
    ) -> None:
        self._index = index
        self._siblings = siblings
        self._root: "PlanContext" = self  # the context of the file planned (context_of)
        self._near = True  # a module in the file's folder (the file itself): its imports are read
        self._consulted = consulted if consulted is not None else set()
        # facts about the files (not about a rewrite's plan) every code's plan of this
        # file shares (fact): the same modules, read the same way
        self._shared: Dict[Any, Any] = shared if shared is not None else {}
        # the rewrites selected for this run: a rewrite whose edit calls code another
        # one changes passes arguments only where that one runs too
        self.codes = tuple(codes)
        self.module = index.module
        self.code = code
        self._format_statement = format_statement
        self.sites: List[Site] = []
        self.refusals: List[Refusal] = []
        # facts about the whole module a rewrite computes once per plan, not per site
        self.memo: Dict[str, Any] = {}
        # the other files read (sibling, modules_beside), parsed once for every code's plan
        # of this file: a shared fact holding a module (imported_modules) names it in each
        # plan (a module parsed once per plan was unnamed in the next: its imports unread)
        self._files: Dict[Any, Any] = self._shared.setdefault(("files",), {})

    def sibling(self, name: str) -> Optional[cst.Module]:
        """The module ``name`` that this file imports, parsed, as the run leaves it (None
        when not known: stdin, no such file, or it does not parse): a plain name is the
        module beside the file, a dotted or ``..`` one is found as the file imports it
        (hiera_rewrite.files.sibling_path).  Asked of a module found that way elsewhere,
        None: its own imports would be read from the file's folder, not its own."""
        if self._root is not self:
            return self._root.sibling(name) if self._near else None
        key = f"sibling:{name}"
        if key not in self._files:
            self._consulted.add(name)
            data = self._siblings(name) if self._siblings is not None else None
            try:
                self._files[key] = _parsed(self.path_of(name) or name, data) if data is not None else None
            except Exception:  # a sibling that does not parse proves nothing
                self._files[key] = None
            if self._files[key] is not None:
                self._files[("near", id(self._files[key]))] = "." not in name
                self._files[("name", id(self._files[key]))] = name
        return self._files[key]

    def modules_beside(self, needles: Sequence[bytes], limit: int = 128) -> Optional[List[cst.Module]]:
        """The modules of the planned file's folder (the file itself included, as planned;
        each other one as this run leaves it) whose text holds one of ``needles``, parsed
        (a module that does not parse cannot be imported either: left out).  None where
        the folder is not known (stdin, a reader of names only), or it holds more than
        ``limit`` modules.  Asked of a module found elsewhere (not beside the file): None.
        Not recorded as consulted: what is asked of them here is not what a rewrite changes."""
        root = self._root
        if root is not self and not self._near:
            return None
        lister = getattr(root._siblings, "neighbours", None)
        if lister is None:
            return None
        key = "beside"
        if key not in root._files:
            names = lister()
            root._files[key] = None if names is None or len(names) > limit else {n: None for n in names}
            root._files["beside unread"] = names is not None and len(names) > limit
        found = root._files[key]
        if found is None:
            return None
        modules: List[cst.Module] = [root.module]
        for name in found:
            entry = found[name]
            if entry is None:
                data = root._siblings(name) if root._siblings is not None else None
                module = None
                if data is not None:
                    try:
                        module = _parsed(root.path_of(name) or name, data)
                    except Exception:
                        module = None
                entry = found[name] = (data or b"", module)
                if module is not None:
                    root._files[("near", id(module))] = True
            data, module = entry
            if module is not None and any(n in data for n in needles):
                modules.append(module)
        return modules

    def beside_unread(self) -> bool:
        """The planned file's folder is known but was too large to read (modules_beside)."""
        self.modules_beside([])
        return bool(self._root._files.get("beside unread"))

    def module_named(self, name: str) -> Optional[cst.Module]:
        """:meth:`sibling` of the file planned, asked from any context: ``name`` is read
        from the file's folder (`.m`, `..pkg.m`, `pkg.m`) whichever module asks."""
        return self._root.sibling(name)

    def fact(self, key: Any, compute: Callable[[], T], *alive: object) -> T:
        """``compute()``, once for the file's plans (every rewrite code's; ``key`` names
        what it depends on, by the ids of ``alive``, kept alive with it)."""
        shared = self._root._shared
        if key not in shared:
            shared[key] = compute()
            shared.setdefault(("alive",), []).extend(alive)
        return shared[key]

    def planned(self) -> "PlanContext":
        """The context of the file planned (this one, or the one that read this module)."""
        return self._root

    def placed(self) -> bool:
        """False for a file read from stdin with no path (hiera_rewrite.files.stdin_reader):
        the package it belongs to, whose modules run when it is imported, is not known."""
        return not getattr(self._root._siblings, "unplaced", False)

    def path_of(self, name: str) -> Optional[str]:
        """The real path of the file of the module ``name`` (:meth:`sibling`; "" for the
        file planned), where the file is read from disk (hiera_rewrite.files.sibling_reader);
        None where the reader knows names only (stdin, a test's reader)."""
        finder = getattr(self._root._siblings, "path_of", None)
        return finder(name) if finder is not None else None

    def name_of(self, module: cst.Module) -> Optional[str]:
        """The name :meth:`sibling` found ``module`` by, as the file planned imports it
        ("" for that file itself); None for a module not found so."""
        root = self._root
        if module is root.module:
            return ""
        name = root._files.get(("name", id(module)))
        return name if name is not None and root._files.get(f"sibling:{name}") is module else None

    def context_of(self, module: cst.Module) -> "PlanContext":
        """A context that answers questions about ``module``: this one, or (for a module
        :meth:`sibling` returned) one of its own, which proposes nothing."""
        if module is self.module:
            return self
        if self._root is not self:
            return self._root.context_of(module)
        key = ("context", id(module))
        found = self.memo.get(key)
        if found is None or found.module is not module:
            found = self.memo[key] = PlanContext(
                ModuleIndex(module), "", self._format_statement, self.codes, self._siblings, self._consulted
            )
            found._root = self._root  # siblings parsed once, by the file's own context
            found._near = bool(self._root._files.get(("near", id(module))))  # in the file's folder
        return found

    # -- what the module says (hiera_rewrite.index) ---------------------------
    def position(self, node: cst.CSTNode) -> Pos:
        return self._index.position(node)

    def span(self, node: cst.CSTNode) -> Span:
        return self._index.span(node)

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self._index.parent(node)

    def ancestors(self, node: cst.CSTNode):
        return self._index.ancestors(node)

    def qualified_names(self, node: cst.CSTNode) -> Set[str]:
        return self._index.qualified_names(node)

    def nodes(self, kind: type) -> List[cst.CSTNode]:
        """Every node of exactly this type, in document order."""
        return self._index.nodes(kind)

    def visit(self, visitor: cst.CSTVisitor, root: Optional[cst.CSTNode] = None) -> None:
        """``(root or module).visit(visitor)`` for a visitor that only reads
        (``visit_X``/``leave_X``), replayed from the index where ``root`` is part of
        the module (libcst's visit rebuilds every node it passes)."""
        self._index.visit(visitor, root)

    def flow(self, func: cst.FunctionDef) -> FunctionFlow:
        """The data flow of ``func``'s body (hiera_rewrite.flow), computed once per
        module: every rewrite asks about the same functions, and a flow never changes."""
        key = ("FunctionFlow", id(func))
        found = self._index.memo.get(key)
        if found is None or found.func is not func:
            found = self._index.memo[key] = FunctionFlow(func, self)
        return found

    def skipped_by(self, node: cst.CSTNode) -> Optional[str]:
        """The function or class (``"class Name"``) whose ``# hiera-rewrite: skip``
        marker covers ``node``, or None."""
        for owner in [node, *self.ancestors(node)]:
            if isinstance(owner, (cst.FunctionDef, cst.ClassDef)) and _has_skip_marker(owner, self.module):
                kind = "class" if isinstance(owner, cst.ClassDef) else "function"
                return f"{kind} {owner.name.value}"
        return None

    # -- answers --------------------------------------------------------------
    def add_site(
        self, node: cst.CSTNode, edits: Mapping[cst.CSTNode, Replacement], message: Optional[str] = None
    ) -> None:
        self.sites.append(Site(self.code, node, dict(edits), message or ""))

    def refuse(self, node: cst.CSTNode, reason: str) -> None:
        """Report ``node`` left alone for ``reason`` where no analysis runs (the finder
        alone knows it is refused); a site's analysis raises Refuse instead."""
        self.refusals.append(Refusal(self.code, node, reason))

    def attempt(
        self,
        at: "cst.CSTNode | Sequence[cst.CSTNode]",
        analyse: Callable[[], T],
        quiet_if: Optional[Callable[[], bool]] = None,
    ) -> Optional[T]:
        """Run one site's analysis: what it returns (never None), or None where it
        raised Refuse, whose reason is then reported at ``at`` (each node of it).  Not
        reported: a NotThisIdiom, or any refusal where ``quiet_if()`` holds (asked only
        then: code this rewrite emitted is recognised only once the match fails)."""
        try:
            first = at[0] if isinstance(at, (list, tuple)) else at
            func = next((a for a in [first, *self.ancestors(first)] if isinstance(a, cst.FunctionDef)), None)
            opaque = self.flow(func).opaque if func is not None else None
            if opaque:
                raise Refuse(opaque)
            return analyse()
        except Refuse as refusal:
            if not isinstance(refusal, NotThisIdiom) and not (quiet_if is not None and quiet_if()):
                for node in at if isinstance(at, (list, tuple)) else [at]:
                    self.refuse(node, refusal.reason)
            return None

    # -- emitting code ----------------------------------------------------------
    def statement(
        self, source: str, like: cst.SimpleStatementLine, replaces: bool = True
    ) -> cst.BaseStatement:
        """Parse and black-format ``source`` at the indentation of statement ``like``.

        When it ``replaces`` ``like``, the user's comments there are kept: the lines
        above it, the trailing comment, and comments inside the replaced expression
        (moved above).  Comment lines at the top of ``source`` come after those.
        """
        indent = self.position(like).column
        new = self._format_statement(source, indent)
        if not replaces:
            return new
        inner_comments = [cst.EmptyLine(comment=c) for c in _comments(self, like.body)]
        leading = list(like.leading_lines) + inner_comments + list(new.leading_lines)
        if isinstance(new, cst.SimpleStatementLine):
            trailing = like.trailing_whitespace
            if new.trailing_whitespace.comment is not None:
                trailing = new.trailing_whitespace
            return new.with_changes(leading_lines=leading, trailing_whitespace=trailing)
        return new.with_changes(leading_lines=leading)


def _comments(ctx: PlanContext, nodes: Sequence[cst.CSTNode]) -> List[cst.Comment]:
    collect = _CollectComments()
    for node in nodes:
        ctx.visit(collect, node)
    return collect.found


def _has_skip_marker(owner: "cst.FunctionDef | cst.ClassDef", module: cst.Module) -> bool:
    comments = [line.comment for line in owner.leading_lines]
    if module.body and module.body[0] is owner:
        # libcst gives the comments above a file's first statement to Module.header:
        # take the comment block directly above it (no blank line in between).
        for line in reversed(module.header):
            if line.comment is None:
                break
            comments.append(line.comment)
    comments += [line.comment for d in owner.decorators for line in d.leading_lines]
    comments.append(owner.body.header.comment if isinstance(owner.body, cst.IndentedBlock) else None)
    return any(c is not None and SKIP_MARKER in c.value for c in comments)


class _CollectComments(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: List[cst.Comment] = []

    def visit_Comment(self, node: cst.Comment) -> None:
        self.found.append(node)
