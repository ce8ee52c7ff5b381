"""The contract between the engine and one rewrite.

A rewrite (one module in ``codemods/``) looks at a parsed module and *plans* edits:
it never writes files, prints, or knows about flags.  Each planned change is a
:class:`Site`: every node it replaces, keyed by the original node, applied all
together or not at all.  When something looks like the idiom but the data flow
does not prove it, the rewrite calls :meth:`PlanContext.refuse` with the reason
and leaves the code alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Set, Type, Union

import libcst as cst

from .index import ModuleIndex, Pos, Span

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


class PlanContext:
    """What a rewrite gets: the parsed module, what it may ask about it, ways to answer."""

    def __init__(
        self,
        index: ModuleIndex,
        code: str,
        format_statement: Callable[[str, int], cst.BaseStatement],
        codes: Sequence[str] = (),
    ) -> None:
        self.index = index
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

    # -- what the module says (hiera_rewrite.index) ---------------------------
    def position(self, node: cst.CSTNode) -> Pos:
        return self.index.position(node)

    def span(self, node: cst.CSTNode) -> Span:
        return self.index.span(node)

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.index.parent(node)

    def ancestors(self, node: cst.CSTNode):
        return self.index.ancestors(node)

    def qualified_names(self, node: cst.CSTNode) -> Set[str]:
        return self.index.qualified_names(node)

    # -- answers --------------------------------------------------------------
    def add_site(
        self, node: cst.CSTNode, edits: Mapping[cst.CSTNode, Replacement], message: Optional[str] = None
    ) -> None:
        self.sites.append(Site(self.code, node, dict(edits), message or ""))

    def refuse(self, node: cst.CSTNode, reason: str) -> None:
        self.refusals.append(Refusal(self.code, node, reason))

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
        inner_comments = [
            cst.EmptyLine(comment=c)
            for c in _comments(self.index, like.body)
        ]
        leading = list(like.leading_lines) + inner_comments + list(new.leading_lines)
        if isinstance(new, cst.SimpleStatementLine):
            trailing = like.trailing_whitespace
            if new.trailing_whitespace.comment is not None:
                trailing = new.trailing_whitespace
            return new.with_changes(leading_lines=leading, trailing_whitespace=trailing)
        return new.with_changes(leading_lines=leading)


def _comments(index: ModuleIndex, nodes: Sequence[cst.CSTNode]) -> List[cst.Comment]:
    collect = _CollectComments()
    for node in nodes:
        index.visit(collect, node)
    return collect.found


class _CollectComments(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: List[cst.Comment] = []

    def visit_Comment(self, node: cst.Comment) -> None:
        self.found.append(node)
