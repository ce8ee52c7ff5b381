"""Small, conservative data-flow facts about one function body, and code splicing.

Rewrites prove an idiom by following names from statement to statement.  This
module answers the questions they ask: which statements assign a name, where a
name is read, whether an expression means the same thing at two program points,
and how to splice an original sub-expression into new code.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from hiera_rewrite.index import active_index, walk

AnyAssign = Union[cst.Assign, cst.AnnAssign]


@dataclasses.dataclass
class Stmt:
    """A simple statement line of the function, in source order."""

    index: int
    line: cst.SimpleStatementLine
    assigned: Set[str]
    loaded: List[cst.Name]


class FunctionFlow:
    """Source-ordered simple statements of one function (nested defs excluded)."""

    def __init__(self, func: cst.FunctionDef) -> None:
        self.func = func
        self.params: Set[str] = {p.name.value for p in _all_params(func.params)}
        self.stmts: List[Stmt] = []
        self.compound_assigned: Dict[str, int] = {}
        self._collect(func.body)

    def _collect(self, block: cst.BaseSuite) -> None:
        for stmt in _body_of(block):
            if isinstance(stmt, cst.SimpleStatementLine):
                assigned: Set[str] = set()
                loaded: List[cst.Name] = []
                for small in stmt.body:
                    _names(small, assigned, loaded)
                self.stmts.append(Stmt(len(self.stmts), stmt, assigned, loaded))
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                # A nested definition binds its name; its body is another scope.
                self.stmts.append(Stmt(len(self.stmts), cst.SimpleStatementLine([]), {stmt.name.value}, []))
            else:
                # Compound statement: names bound by its header (for-targets, with-as,
                # except-as, walrus) count as assignments we do not understand.
                header_assigned: Set[str] = set()
                header_loaded: List[cst.Name] = []
                for child in _headers(stmt):
                    _names(child, header_assigned, header_loaded)
                self.stmts.append(Stmt(len(self.stmts), cst.SimpleStatementLine([]), header_assigned, header_loaded))
                for name in header_assigned:
                    self.compound_assigned[name] = self.compound_assigned.get(name, 0) + 1
                for child in _suites(stmt):
                    self._collect(child)

    @classmethod
    def of(cls, func: cst.FunctionDef) -> "FunctionFlow":
        """``FunctionFlow(func)``, computed once per module being planned (every
        rewrite asks about the same functions; a flow is never changed)."""
        index = active_index()
        if index is None:
            return cls(func)
        key = ("FunctionFlow", id(func))
        found = index.memo.get(key)
        if found is None or found.func is not func:
            found = index.memo[key] = cls(func)
        return found

    @classmethod
    def of_statements(cls, statements: Sequence[cst.BaseStatement]) -> "FunctionFlow":
        """The same facts for a list of statements (e.g. one branch of an ``if``)."""
        flow = cls.__new__(cls)
        flow.func = None  # type: ignore[assignment]
        flow.params = set()
        flow.stmts = []
        flow.compound_assigned = {}
        flow._collect(cst.IndentedBlock(body=list(statements)))
        return flow

    def stmt_of(self, line: cst.SimpleStatementLine) -> Stmt:
        for stmt in self.stmts:
            if stmt.line is line:
                return stmt
        raise KeyError(line)

    def assigning(self, name: str) -> List[Stmt]:
        return [s for s in self.stmts if name in s.assigned]

    def loads_of(self, name: str) -> List[Tuple[Stmt, cst.Name]]:
        return [(s, n) for s in self.stmts for n in s.loaded if n.value == name]


def _body_of(block: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    if isinstance(block, cst.IndentedBlock):
        return block.body
    if isinstance(block, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(block.body)]
    return []


def _suites(stmt: cst.BaseCompoundStatement) -> Iterator[cst.BaseSuite]:
    for field in ("body", "orelse", "finalbody"):
        part = getattr(stmt, field, None)
        if isinstance(part, cst.BaseSuite):
            yield part
        elif isinstance(part, (cst.If, cst.Else, cst.Finally)):
            if isinstance(part, cst.If):
                yield part.body
                yield from _suites_of_if_tail(part)
            else:
                yield part.body
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    for case in getattr(stmt, "cases", ()):
        yield case.body


def _suites_of_if_tail(node: cst.If) -> Iterator[cst.BaseSuite]:
    tail = node.orelse
    while tail is not None:
        yield tail.body
        tail = tail.orelse if isinstance(tail, cst.If) else None


def _headers(stmt: cst.BaseCompoundStatement) -> List[cst.CSTNode]:
    parts: List[cst.CSTNode] = []
    for field in ("test", "target", "iter", "items", "subject"):
        value = getattr(stmt, field, None)
        if isinstance(value, cst.CSTNode):
            parts.append(value)
        elif isinstance(value, (list, tuple)):
            parts.extend(value)
    for handler in getattr(stmt, "handlers", ()):
        if handler.name is not None:
            parts.append(handler.name)
    if isinstance(stmt, cst.If):
        tail = stmt.orelse
        while isinstance(tail, cst.If):  # elif tests are read too
            parts.append(tail.test)
            tail = tail.orelse
    if isinstance(stmt, cst.For):
        # A for-target is a binding.
        parts = [cst.Assign([cst.AssignTarget(stmt.target)], stmt.iter)]
    if isinstance(stmt, cst.With):
        parts = []
        for item in stmt.items:
            parts.append(item.item)
            if item.asname is not None:
                parts.append(cst.Assign([cst.AssignTarget(item.asname.name)], cst.Name("None")))
    return parts


def _all_params(params: cst.Parameters) -> List[cst.Param]:
    found = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            found.append(star)
    return found


def _names(node: cst.CSTNode, assigned: Set[str], loaded: List[cst.Name]) -> None:
    """Split the names in a small statement into bindings and reads."""
    walk(_NamesVisitor(assigned, loaded), node)


class _NamesVisitor(cst.CSTVisitor):
    def __init__(self, assigned: Set[str], loaded: List[cst.Name]) -> None:
        super().__init__()
        self.assigned = assigned
        self.loaded = loaded

    def visit_AssignTarget(self, target: cst.AssignTarget) -> bool:
        _bind(target.target, self.assigned, self.loaded)
        return False

    def visit_AnnAssign(self, ann: cst.AnnAssign) -> bool:
        _bind(ann.target, self.assigned, self.loaded)
        if ann.value is not None:
            walk(self, ann.value)
        return False

    def visit_AugAssign(self, aug: cst.AugAssign) -> bool:
        if isinstance(aug.target, cst.Name):
            self.assigned.add(aug.target.value)
            self.loaded.append(aug.target)
        else:
            walk(self, aug.target)
        walk(self, aug.value)
        return False

    def visit_NamedExpr(self, named: cst.NamedExpr) -> bool:
        _bind(named.target, self.assigned, self.loaded)
        walk(self, named.value)
        return False

    def visit_Global(self, node: cst.Global) -> bool:
        self.assigned.update(n.name.value for n in node.names)
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        self.assigned.update(n.name.value for n in node.names)
        return False

    def visit_Del(self, node: cst.Del) -> bool:
        _bind(node.target, self.assigned, self.loaded)
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            bound = alias.asname.name if alias.asname else alias.name
            while isinstance(bound, cst.Attribute):
                bound = bound.value
            if isinstance(bound, cst.Name):
                self.assigned.add(bound.value)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if isinstance(node.names, cst.ImportStar):
            self.assigned.add("*")
            return False
        for alias in node.names:
            bound = alias.asname.name if alias.asname else alias.name
            if isinstance(bound, cst.Name):
                self.assigned.add(bound.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return True

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(self, node.value)
        return False

    def visit_Name(self, node: cst.Name) -> bool:
        self.loaded.append(node)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(self, node.value)
        return False


def _bind(target: cst.CSTNode, assigned: Set[str], loaded: List[cst.Name]) -> None:
    if isinstance(target, cst.Name):
        assigned.add(target.value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _bind(element.value, assigned, loaded)
    elif isinstance(target, cst.StarredElement):
        _bind(target.value, assigned, loaded)
    else:  # subscript or attribute target: reads its base
        _names(target, assigned, loaded)


def _loaded_names(expr: cst.CSTNode) -> List[cst.Name]:
    assigned: Set[str] = set()
    loaded: List[cst.Name] = []
    _names(expr, assigned, loaded)
    return loaded


def names_in(expr: cst.CSTNode) -> Set[str]:
    return {n.value for n in _loaded_names(expr)}


def statement_names(stmt: cst.BaseStatement) -> Tuple[Set[str], List[cst.Name]]:
    """Every name a statement binds (in any branch) and every name node it reads."""
    flow = FunctionFlow.of_statements([stmt])
    assigned: Set[str] = set()
    for s in flow.stmts:
        assigned |= s.assigned
    return assigned, [n for s in flow.stmts for n in s.loaded]


# -- statements ---------------------------------------------------------------------


def single_assign(line: cst.SimpleStatementLine) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) of a line holding exactly one plain or annotated assignment."""
    if len(line.body) != 1:
        return None
    small = line.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return small.targets[0].target, small.value
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        return small.target, small.value
    return None


def target_code(line: cst.SimpleStatementLine) -> str:
    """The ``target =`` or ``target: annotation =`` part of a single assignment."""
    small = line.body[0]
    if isinstance(small, cst.AnnAssign):
        return f"{code(small.target)}: {code(small.annotation.annotation)} ="
    assert isinstance(small, cst.Assign)
    return f"{code(small.targets[0].target)} ="


def enclosing_line(ctx, node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.SimpleStatementLine):
            return ancestor
        if isinstance(ancestor, cst.BaseCompoundStatement):
            return None
    return None


def enclosing_function(ctx, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return ancestor
        if isinstance(ancestor, (cst.ClassDef, cst.Lambda)):
            return None
    return None


# -- expressions --------------------------------------------------------------------


class _OneLine(cst.CSTTransformer):
    """Drop line breaks and comments inside an expression, so it can be re-wrapped."""

    def leave_ParenthesizedWhitespace(self, original_node, updated_node):
        return cst.SimpleWhitespace(" ")

    def leave_SimpleWhitespace(self, original_node, updated_node):
        if "\\" in updated_node.value or "\n" in updated_node.value:
            return cst.SimpleWhitespace(" ")
        return updated_node

    def leave_TrailingWhitespace(self, original_node, updated_node):
        return updated_node.with_changes(comment=None)


_EMPTY = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    """Source of ``node`` on one line (black re-wraps what we emit)."""
    text = _EMPTY.code_for_node(node)
    if not any(c in text for c in "\n\r\\#"):
        return text.strip()  # no line break, continuation or comment: nothing to drop
    return _EMPTY.code_for_node(node.visit(_OneLine())).strip()


class _NoMagicComma(cst.CSTTransformer):
    """Drop a trailing comma after the last call argument (black's "magic" comma)."""

    def leave_Call(self, original_node, updated_node):
        if updated_node.args and updated_node.args[-1].comma is not cst.MaybeSentinel.DEFAULT:
            args = list(updated_node.args)
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated_node.with_changes(args=args)
        return updated_node


def rewrap_code(node: cst.CSTNode) -> str:
    """Like :func:`code`, and without magic trailing commas, so black may join lines."""
    return code(node.visit(_NoMagicComma()))


def same_code(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return code(a).replace(" ", "") == code(b).replace(" ", "")


def int_value(node: Optional[cst.BaseExpression]) -> Optional[int]:
    """The value of an int literal, allowing a unary minus and parentheses."""
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = int_value(node.expression)
        return None if inner is None else -inner
    return None


def method_call(node: cst.CSTNode, *names: str) -> Optional[Tuple[cst.BaseExpression, cst.Call]]:
    """If ``node`` is ``<receiver>.<name>(...)``, return (receiver, call)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names:
        return node.func.value, node
    return None


def positional(call: cst.Call) -> Optional[List[cst.BaseExpression]]:
    """Positional args, with one tuple/list argument expanded (``view((a, b))``)."""
    if any(a.keyword is not None or a.star for a in call.args):
        return None
    values = [a.value for a in call.args]
    if len(values) == 1 and isinstance(values[0], (cst.Tuple, cst.List)):
        elements = values[0].elements
        if any(isinstance(e, cst.StarredElement) for e in elements):
            return None
        return [e.value for e in elements]
    return values


def int_args(call: cst.Call) -> Optional[List[int]]:
    values = positional(call)
    if values is None:
        return None
    ints = [int_value(v) for v in values]
    return None if any(i is None for i in ints) else ints  # type: ignore[return-value]


def dim_arg(call: cst.Call, name: str = "dim") -> Tuple[bool, Optional[int]]:
    """(ok, dim) for a reduction call taking only a dim (positional or keyword)."""
    if len(call.args) != 1:
        return False, None
    arg = call.args[0]
    if arg.star or (arg.keyword is not None and arg.keyword.value != name):
        return False, None
    return True, int_value(arg.value)


def is_name(node: Optional[cst.CSTNode], value: Optional[str] = None) -> bool:
    return isinstance(node, cst.Name) and (value is None or node.value == value)


def reduction_values(node: cst.BaseExpression) -> Optional[Tuple[str, cst.BaseExpression, int]]:
    """Match ``X.max(dim=k).values`` / ``X.max(k)[0]`` / ``X.amax(dim=k)``.

    Returns (spelling, X, k) where spelling is "max" or "amax".
    """
    if isinstance(node, cst.Attribute) and node.attr.value == "values":
        return _reduction(node.value, "max")  # type: ignore[attr-defined]
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and int_value(index.value) == 0:
            return _reduction(node.value, "max")
        return None
    return _reduction(node, "amax")


def _reduction(node: cst.BaseExpression, spelling: str) -> Optional[Tuple[str, cst.BaseExpression, int]]:
    """``X.<spelling>(dim=k)`` with an int k: (spelling, X, k)."""
    found = method_call(node, spelling)
    if found:
        ok, dim = dim_arg(found[1])
        if ok and dim is not None:
            return spelling, found[0], dim
    return None
