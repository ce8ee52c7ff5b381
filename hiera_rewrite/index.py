"""What the rewrites ask about a parsed module, computed once and cheaply.

libcst's metadata providers (parents, positions, qualified names through a full
scope analysis) cost about a second per 500-line file, several times the parse.
The rewrites need much less: the parent of a node, the line of a handful of nodes,
and whether a call's callee is an imported ``torch`` function.  This module answers
exactly those, from one plain walk over the tree and one position-recording codegen,
each done at most once per module and only when a rewrite asks.

Name resolution is deliberately stricter than Python's scoping: a name resolves to
what an import binds only if every other occurrence of that name in the file is a
plain read.  A file that also assigns, deletes, declares ``global`` or takes that
name as a parameter anywhere gets no resolution at all, so a rewrite keyed on it
does not match (the code is left alone).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState


class Pos(NamedTuple):
    line: int  # 1-based
    column: int  # 0-based, in characters


class Span(NamedTuple):
    start: Pos
    end: Pos


_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _fields(cls: type) -> Tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


class ModuleIndex:
    """Parents, positions and import-bound names of one module (lazily, once)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._parents: Optional[Dict[cst.CSTNode, cst.CSTNode]] = None
        self._names: Dict[str, List[cst.Name]] = {}
        self._imports: List[cst.CSTNode] = []
        self._spans: Optional[Dict[cst.CSTNode, Tuple[int, int, int, int]]] = None
        self._events: List[Optional[cst.CSTNode]] = []
        self._resolved: Dict[str, Optional[List[Tuple[str, cst.CSTNode]]]] = {}

    # -- parents --------------------------------------------------------------------
    def _walk(self) -> Dict[cst.CSTNode, cst.CSTNode]:
        if self._parents is not None:
            return self._parents
        parents: Dict[cst.CSTNode, cst.CSTNode] = {}
        names = self._names
        imports = self._imports
        node_type = cst.CSTNode
        stack: List[cst.CSTNode] = [self.module]
        pop, push = stack.pop, stack.append
        while stack:
            node = pop()
            kind = type(node)
            if kind is cst.Name:
                names.setdefault(node.value, []).append(node)  # type: ignore[attr-defined]
                continue
            if kind is cst.Import or kind is cst.ImportFrom:
                imports.append(node)
            for name in _fields(kind):
                value = getattr(node, name)
                if isinstance(value, node_type):
                    parents[value] = node
                    push(value)
                elif type(value) is tuple or type(value) is list:
                    for item in value:
                        if isinstance(item, node_type):
                            parents[item] = node
                            push(item)
        self._parents = parents
        return parents

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self._walk().get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parents = self._walk()
        parent = parents.get(node)
        while parent is not None:
            yield parent
            parent = parents.get(parent)

    # -- positions ------------------------------------------------------------------
    def span(self, node: cst.CSTNode) -> Span:
        """Syntactic start and end of ``node``, as libcst's PositionProvider gives them."""
        sl, sc, el, ec = self._codegen()[node]
        return Span(Pos(sl, sc), Pos(el, ec))

    def _codegen(self) -> Dict[cst.CSTNode, Tuple[int, int, int, int]]:
        if self._spans is None:
            state = _PositionState(default_indent=self.module.default_indent,
                                   default_newline=self.module.default_newline)
            self.module._codegen(state)
            self._spans = state.spans
            self._events = state.events
        return self._spans

    # -- visiting -------------------------------------------------------------------
    def visit(self, visitor: cst.CSTVisitor) -> None:
        """``module.visit(visitor)`` for a visitor that only reads: the same
        ``visit_X``/``leave_X`` calls in the same order (``visit_X`` returning False
        skips the children), replayed from the recorded codegen order instead of
        libcst's visitor machinery.  Attribute hooks (``visit_X_attr``) are not called."""
        self._codegen()
        handlers: Dict[type, Tuple[Optional[object], Optional[object]]] = {}
        kinds = _node_kinds()
        for name in dir(visitor):
            for prefix, slot in (("visit_", 0), ("leave_", 1)):
                if name.startswith(prefix) and name[len(prefix):] in kinds:
                    kind = kinds[name[len(prefix):]]
                    pair = list(handlers.get(kind, (None, None)))
                    pair[slot] = getattr(visitor, name)
                    handlers[kind] = (pair[0], pair[1])
        stack: List[Tuple[cst.CSTNode, Optional[object]]] = []
        skipping = 0
        get = handlers.get
        for node in self._events:
            if node is None:  # the innermost open node ends
                done, leave = stack.pop()
                if skipping:
                    skipping -= 1
                    if skipping:
                        continue
                if leave is not None:
                    leave(done)  # type: ignore[operator]
                continue
            if skipping:
                skipping += 1
                stack.append((node, None))
                continue
            visit, leave = get(type(node), (None, None))
            stack.append((node, leave))
            if visit is not None and visit(node) is False:  # type: ignore[operator]
                skipping = 1

    def position(self, node: cst.CSTNode) -> Pos:
        return self.span(node).start

    @property
    def spans(self) -> "_Spans":
        """``spans[node].start.line`` etc., the shape of libcst's PositionProvider map."""
        return _Spans(self)

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
        parents = self._walk()
        result: Optional[List[Tuple[str, Optional[cst.CSTNode]]]] = []
        for occurrence in self._names.get(name, []):
            parent = parents.get(occurrence)
            if _is_read(occurrence, parent) or self._in_import(occurrence):
                continue
            result = None  # assigned, a parameter, deleted, global, a def/class name, ...
            break
        if result is not None:
            for stmt in self._imports:
                for local, qualified in _import_names(stmt):  # type: ignore[arg-type]
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


_KINDS: Dict[str, type] = {}


def _node_kinds() -> Dict[str, type]:
    if not _KINDS:
        for name in dir(cst):
            value = getattr(cst, name)
            if isinstance(value, type) and issubclass(value, cst.CSTNode):
                _KINDS[name] = value
    return _KINDS


class _Spans:
    def __init__(self, index: ModuleIndex) -> None:
        self._index = index

    def __getitem__(self, node: cst.CSTNode) -> Span:
        return self._index.span(node)


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    assert isinstance(node, cst.Attribute)
    return f"{_dotted(node.value)}.{node.attr.value}"


def _import_names(stmt: "cst.Import | cst.ImportFrom") -> List[Tuple[str, str]]:
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


@dataclasses.dataclass(frozen=False)
class _PositionState(CodegenState):
    """libcst's position-providing codegen, recording plain tuples."""

    line: int = 1
    column: int = 0
    spans: Dict[cst.CSTNode, Tuple[int, int, int, int]] = dataclasses.field(default_factory=dict)
    events: List[Optional[cst.CSTNode]] = dataclasses.field(default_factory=list)  # node: starts; None: ends
    _stack: List[Tuple[int, int]] = dataclasses.field(default_factory=list)

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self._advance(token)

    def add_token(self, value: str) -> None:
        self._advance(value)

    def pop_trailing_newline(self) -> None:
        pass

    def _advance(self, value: str) -> None:
        if "\n" not in value and "\r" not in value:
            self.column += len(value)
            return
        lines = value.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.line += len(lines) - 1
        self.column = len(lines[-1])

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append((self.line, self.column))
        self.events.append(node)

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.events.append(None)
        start = self._stack.pop()
        if node not in self.spans:  # a syntactic position was recorded already
            self.spans[node] = (start[0], start[1], self.line, self.column)

    @contextlib.contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: Optional[cst.CSTNode] = None,
        end_node: Optional[cst.CSTNode] = None,
    ) -> Iterator[None]:
        start = (self.line, self.column)
        try:
            yield
        finally:
            end = (self.line, self.column)
            if start_node is not None:
                start = self.spans[start_node][:2]
            if end_node is not None:
                end = self.spans[end_node][2:]
            self.spans[node] = (start[0], start[1], end[0], end[1])
