"""What the rewrites ask about a parsed module, computed once and cheaply.

libcst's metadata providers (parents, positions, qualified names through a full
scope analysis) cost about a second per 500-line file, several times the parse, and
each libcst visitor walk costs a tenth of a second.  The rewrites need much less: the
parent of a node, the span of a handful of nodes, the nodes of a few types in document
order, and whether a callee is an imported ``torch`` function.  One codegen pass that
records each node's span, parent and place in document order answers all of them; it
runs at most once per module, on the first question.

Name resolution is deliberately stricter than Python's scoping: a name resolves to
what an import binds only if every other occurrence of that name in the file is a
plain read.  A file that also assigns, deletes, declares ``global`` or takes that
name as a parameter anywhere gets no resolution at all, so a rewrite keyed on it
does not match (the code is left alone).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import re
import weakref
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState


class Pos(NamedTuple):
    line: int  # 1-based
    column: int  # 0-based, in characters


class Span(NamedTuple):
    start: Pos
    end: Pos


class ModuleIndex:
    """Parents, positions, visit order and import-bound names of one module.

    Everything comes from one codegen pass that records each node's span, parent and
    place in document order; it runs at most once, on the first question.  Whitespace
    and newline leaves are not recorded (see ``_UNRECORDED``).
    """

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._state: Optional[_PositionState] = None
        self._by_type: Dict[type, List[int]] = {}
        self._resolved: Dict[str, Optional[List[Tuple[str, Optional[cst.CSTNode]]]]] = {}
        # facts the rewrites derive from this module (e.g. a function's data flow),
        # shared by every rewrite that plans on it
        self.memo: Dict[Any, Any] = {}

    def _recorded(self) -> "_PositionState":
        if self._state is None:
            self._state = _record(self.module)
        return self._state

    @property
    def code(self) -> str:
        """``module.code``, from the recording pass (no second codegen)."""
        state = self._recorded()
        text = state.text()
        return text[: len(text) - len(state.tokens[-1])] if state.dropped_final_newline else text

    # -- parents --------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        state = self._recorded()
        i = state.index_of.get(id(node), -1)
        if i < 0 or state.order[i] is not node:
            return None
        p = state.parent_of[i]
        return state.order[p] if p >= 0 else None

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        state = self._recorded()
        order, parent_of = state.order, state.parent_of
        i = state.index_of.get(id(node), -1)
        if i < 0 or order[i] is not node:
            return
        i = parent_of[i]
        while i >= 0:
            yield order[i]
            i = parent_of[i]

    # -- positions ------------------------------------------------------------------
    def span(self, node: cst.CSTNode) -> Span:
        """Syntactic start and end of ``node``, as libcst's PositionProvider gives them."""
        state = self._recorded()
        i = state.index_of[id(node)]
        return Span(state.pos(state.starts[i]), state.pos(state.stops[i]))

    def position(self, node: cst.CSTNode) -> Pos:
        return self.span(node).start

    # -- visiting -------------------------------------------------------------------
    def nodes(self, kind: type) -> List[cst.CSTNode]:
        """Every node of exactly this type, in document order."""
        if kind in _UNRECORDED:
            raise ValueError(f"{kind.__name__} nodes are not indexed")
        order = self._recorded().order
        return [order[i] for i in self._indices(kind)]

    def _indices(self, kind: type) -> List[int]:
        if not self._by_type:
            by_type = self._by_type
            for i, node in enumerate(self._recorded().order):
                found = by_type.get(type(node))
                if found is None:
                    by_type[type(node)] = [i]
                else:
                    found.append(i)
        return self._by_type.get(kind, [])

    def visit(self, visitor: cst.CSTVisitor, root: Optional[cst.CSTNode] = None) -> None:
        """``(root or module).visit(visitor)`` for a visitor that only reads: the same
        ``visit_X``/``leave_X`` calls in the same order (``visit_X`` returning False
        skips the children), replayed from the recorded document order instead of
        libcst's visitor machinery.  Attribute hooks (``visit_X_attr``) are not called.
        A ``root`` that is not part of this module is visited the libcst way."""
        state = self._recorded()
        order, end = state.order, state.end
        if root is None:
            low, high = 0, len(order)
        else:
            low = state.index_of.get(id(root), -1)
            if low < 0 or order[low] is not root:
                root.visit(visitor)
                return
            high = end[low]
        visits: Dict[type, object] = {}
        leaves: Dict[type, object] = {}
        for name, kind, is_visit in _hooks(type(visitor)):
            (visits if is_visit else leaves)[kind] = getattr(visitor, name)
        if _UNRECORDED.intersection(visits) or _UNRECORDED.intersection(leaves):
            (self.module if root is None else root).visit(visitor)
            return
        if high - low <= _SCAN:
            # A small subtree (a statement, an expression): walk its nodes in order.
            pending: List[int] = []  # entered nodes with a leave hook, innermost last
            i = low
            while i < high:
                while pending and end[pending[-1]] <= i:
                    node = order[pending.pop()]
                    leaves[type(node)](node)  # type: ignore[operator]
                node = order[i]
                kind = type(node)
                if kind in leaves:
                    pending.append(i)
                visit = visits.get(kind)
                i = end[i] if visit is not None and visit(node) is False else i + 1  # type: ignore[operator]
            while pending:
                node = order[pending.pop()]
                leaves[type(node)](node)  # type: ignore[operator]
            return
        # A large one: only the nodes of the hooked types, found by type.
        # (position, 1, i) enters node i; (end[i], 0, -i) leaves it: after its last
        # descendant, before the next node, the innermost first.
        def inside(kind: type) -> List[int]:
            found = self._indices(kind)
            if low == 0 and high == len(order):
                return found
            return found[bisect.bisect_left(found, low):bisect.bisect_left(found, high)]

        events = [(i, 1, i) for kind in set(visits) | set(leaves) for i in inside(kind)]
        events += [(end[i], 0, -i) for kind in leaves for i in inside(kind)]
        events.sort()
        skip_until = -1
        skipped = set()
        for _, enter, i in events:
            if not enter:
                if -i not in skipped:
                    node = order[-i]
                    leaves[type(node)](node)  # type: ignore[operator]
                continue
            if i < skip_until:
                skipped.add(i)
                continue
            node = order[i]
            visit = visits.get(type(node))
            if visit is not None and visit(node) is False:  # type: ignore[operator]
                skip_until = max(skip_until, end[i])

    # -- names ----------------------------------------------------------------------
    def qualified_names(self, node: cst.CSTNode) -> Set[str]:
        """``torch.nn.functional.softmax`` for ``F.softmax`` after ``import torch.nn.functional as F``.

        Only dotted chains whose head name is bound by imports visible at ``node``
        and read-only everywhere else in the file resolve; anything else gives an
        empty set.
        """
        tail: List[str] = []
        head = node
        while isinstance(head, cst.Attribute):
            tail.append(head.attr.value)
            head = head.value
        if not isinstance(head, cst.Name):
            return set()
        bindings = self._import_bindings(head.value)
        if not bindings:
            return set()
        scopes = {a for a in self.ancestors(head) if isinstance(a, (cst.FunctionDef, cst.Lambda))}
        found = set()
        for qualified, scope in bindings:
            if scope is None or scope in scopes:
                found.add(".".join([qualified, *reversed(tail)]))
        return found

    def _import_bindings(self, name: str) -> Optional[List[Tuple[str, Optional[cst.CSTNode]]]]:
        """(qualified name, defining function or None for module level) of each import
        binding ``name``; None if the file binds ``name`` any other way."""
        if name in self._resolved:
            return self._resolved[name]  # type: ignore[return-value]
        state = self._recorded()
        result: Optional[List[Tuple[str, Optional[cst.CSTNode]]]] = []
        for occurrence in state.names.get(name, []):
            parent = self.parent(occurrence)
            if _is_read(occurrence, parent) or self._in_import(occurrence):
                continue
            result = None  # assigned, a parameter, deleted, global, a def/class name, ...
            break
        if result is not None:
            for stmt in state.imports:
                for local, qualified in import_names(stmt):  # type: ignore[arg-type]
                    if local == name:
                        result.append((qualified, self._scope_of(stmt)))
        self._resolved[name] = result  # type: ignore[assignment]
        return result

    def _in_import(self, node: cst.CSTNode) -> bool:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.Import, cst.ImportFrom)):
                return True
            if isinstance(ancestor, cst.BaseStatement):
                return False
        return False

    def _scope_of(self, stmt: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The function an import binds in; None for the module; the class for a class body."""
        for ancestor in self.ancestors(stmt):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return ancestor
        return None


_SCAN = 1024  # subtrees up to this many nodes are walked node by node in ModuleIndex.visit

# Parents under which a Name is never bound (tuples, lists and starred elements are
# not here: they can be assignment targets).
_READ_PARENTS = (
    cst.Attribute,  # the object of `name.x`, or the attribute `x.name`
    cst.Arg,  # `f(name)`, or the keyword `name=`
    cst.Subscript,  # `name[i]` (also as an assignment target: that binds no name)
    cst.Index,
    cst.Annotation,
    cst.Return,
    cst.Expr,
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.BooleanOperation,
    cst.Comparison,
    cst.ComparisonTarget,
    cst.IfExp,
    cst.Decorator,
    cst.Await,
)


def _is_read(name: cst.Name, parent: Optional[cst.CSTNode]) -> bool:
    """A plain load of ``name`` (or not a use of the variable at all)."""
    if isinstance(parent, cst.Call):
        return parent.func is name
    return isinstance(parent, _READ_PARENTS)


# libcst's node types by name, found once at import (before a CLI forks its workers);
# ``in __mro__``, as issubclass on libcst's abstract bases costs a second per process.
_KINDS: Dict[str, type] = {
    name: value
    for name, value in vars(cst).items()
    if isinstance(value, type) and cst.CSTNode in value.__mro__
}


_HOOKS: "weakref.WeakKeyDictionary[type, List[Tuple[str, type, bool]]]" = weakref.WeakKeyDictionary()


def _hooks(cls: type) -> List[Tuple[str, type, bool]]:
    """(method, node type, is visit) for each visit_X/leave_X ``cls`` overrides
    (libcst's CSTVisitor defines a no-op for every node type)."""
    found = _HOOKS.get(cls)
    if found is None:
        kinds = _KINDS
        found = []
        seen: Set[str] = set()
        for klass in cls.__mro__:
            if klass is cst.CSTVisitor or klass is object:
                break
            for name in vars(klass):
                prefix = name[:6]
                if prefix in ("visit_", "leave_") and name[6:] in kinds and name not in seen:
                    seen.add(name)
                    found.append((name, kinds[name[6:]], prefix == "visit_"))
        _HOOKS[cls] = found
    return found


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    assert isinstance(node, cst.Attribute)
    return f"{_dotted(node.value)}.{node.attr.value}"


def import_names(stmt: "cst.Import | cst.ImportFrom") -> List[Tuple[str, str]]:
    """(local name, qualified name) for each name an import statement binds."""
    found: List[Tuple[str, str]] = []
    if isinstance(stmt, cst.Import):
        for alias in stmt.names:
            full = _dotted(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                found.append((alias.asname.name.value, full))
            else:
                head = full.split(".")[0]
                found.append((head, head))
        return found
    if isinstance(stmt.names, cst.ImportStar):
        return found
    base = "." * len(stmt.relative) + (_dotted(stmt.module) if stmt.module is not None else "")
    for alias in stmt.names:
        local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else _dotted(alias.name)
        found.append((local, f"{base}.{_dotted(alias.name)}" if base and not base.endswith(".") else base + _dotted(alias.name)))
    return found


def _record(module: cst.Module) -> "_PositionState":
    """``module._codegen(state)``: libcst's Module._codegen_impl, step by step, except
    that the final newline a module without one drops stays in the tokens (the last
    statement's recorded end lies after it); ``code`` leaves it out."""
    state = _PositionState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.before_codegen(module)
    for line in module.header:
        line._codegen(state)
    for stmt in module.body:
        stmt._codegen(state)
    for line in module.footer:
        line._codegen(state)
    if module.has_trailing_newline:
        if not state.tokens:  # nothing in the header, body or footer
            state.add_token(state.default_newline)
    else:
        state.dropped_final_newline = bool(state.tokens)
    state.after_codegen(module)
    return state


# Leaves no rewrite asks about, nearly half of all nodes: not recorded (no parent,
# span or place); a visitor with hooks for them is run by libcst.
_UNRECORDED = frozenset({cst.SimpleWhitespace, cst.Newline})

_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclasses.dataclass(frozen=False)
class _PositionState(CodegenState):
    """libcst's position-providing codegen, recording in lists by the node's place in
    document order where its tokens start and end, and on the way each node's parent,
    the Name nodes by identifier and the import statements.  Token places become
    lines and columns only when asked.  Nodes are found by ``id`` (the module keeps
    them alive; libcst's identity hash is a Python-level call)."""

    order: List[cst.CSTNode] = dataclasses.field(default_factory=list)  # document (pre)order
    index_of: Dict[int, int] = dataclasses.field(default_factory=dict)  # id(node) -> place
    parent_of: List[int] = dataclasses.field(default_factory=list)  # place of the parent, -1: root
    end: List[int] = dataclasses.field(default_factory=list)  # order[i+1:end[i]]: i's descendants
    starts: List[int] = dataclasses.field(default_factory=list)  # token index of the (syntactic) start
    stops: List[int] = dataclasses.field(default_factory=list)  # token index after the end; -1: not yet
    names: Dict[str, List[cst.Name]] = dataclasses.field(default_factory=dict)
    imports: List[cst.CSTNode] = dataclasses.field(default_factory=list)
    dropped_final_newline: bool = False
    _stack: List[int] = dataclasses.field(default_factory=list)
    _offsets: Optional[List[int]] = None  # character offset of each token
    _line_starts: Optional[List[int]] = None  # character offset of each line
    _text: Optional[str] = None

    def text(self) -> str:
        """Every token, joined (with the final newline ``code`` drops)."""
        if self._text is None:
            self._text = "".join(self.tokens)
        return self._text

    def pos(self, token: int) -> Pos:
        """Line and column where token number ``token`` starts."""
        if self._offsets is None:
            self._offsets = [0, *itertools.accumulate(map(len, self.tokens))]
            self._line_starts = [0, *(m.end() for m in _NEWLINE.finditer(self.text()))]
        offset = self._offsets[token]
        line = bisect.bisect_right(self._line_starts, offset)  # type: ignore[arg-type]
        return Pos(line, offset - self._line_starts[line - 1])  # type: ignore[index]

    def before_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in _UNRECORDED:
            return
        stack = self._stack
        i = len(self.order)
        self.order.append(node)
        self.index_of[id(node)] = i
        self.parent_of.append(stack[-1] if stack else -1)
        stack.append(i)
        self.starts.append(len(self.tokens))
        self.stops.append(-1)
        self.end.append(0)
        kind = type(node)
        if kind is cst.Name:
            self.names.setdefault(node.value, []).append(node)  # type: ignore[attr-defined]
        elif kind is cst.Import or kind is cst.ImportFrom:
            self.imports.append(node)

    def after_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in _UNRECORDED:
            return
        i = self._stack.pop()
        self.end[i] = len(self.order)
        if self.stops[i] < 0:  # else a syntactic position was recorded
            self.stops[i] = len(self.tokens)

    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: Optional[cst.CSTNode] = None,
        end_node: Optional[cst.CSTNode] = None,
    ) -> "_Syntactic":
        return _Syntactic(self, node, start_node, end_node)


class _Syntactic:
    """The context manager of record_syntactic_position, as a plain class (libcst
    enters one for most nodes; contextlib's generator version costs 3x more)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _PositionState, node: cst.CSTNode,
                 start_node: Optional[cst.CSTNode], end_node: Optional[cst.CSTNode]) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)

    def __exit__(self, *exc: object) -> None:
        state = self.state
        start, stop = self.start, len(state.tokens)
        if self.start_node is not None:
            start = state.starts[state.index_of[id(self.start_node)]]
        if self.end_node is not None:
            stop = state.stops[state.index_of[id(self.end_node)]]
        i = state.index_of[id(self.node)]
        state.starts[i] = start
        state.stops[i] = stop
