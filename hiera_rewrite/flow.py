"""Small, conservative data-flow facts about one function body: which statements
bind a name, where a name is read.

Rewrites prove an idiom by following names from statement to statement; they get a
function's facts from :meth:`PlanContext.flow <hiera_rewrite.rewrite.PlanContext.flow>`
(computed once per module and shared by every rewrite) and a statement's or an
expression's names from the functions below, which take the PlanContext: the walks
replay from the module's index (:meth:`ModuleIndex.visit`) where the node is part of
the module, libcst's visit elsewhere.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

if TYPE_CHECKING:
    from .rewrite import PlanContext


@dataclasses.dataclass
class Stmt:
    """A simple statement line of the function, in source order."""

    index: int
    line: cst.SimpleStatementLine
    assigned: Set[str]
    loaded: List[cst.Name]


class FunctionFlow:
    """Source-ordered simple statements of one function (nested defs excluded)."""

    def __init__(self, func: cst.FunctionDef, ctx: "PlanContext") -> None:
        """Use ``ctx.flow(func)``: computed once per module."""
        self.func = func
        self.params: Set[str] = {p.name.value for p in all_params(func.params)}
        self.stmts: List[Stmt] = []
        self.compound_assigned: Dict[str, int] = {}
        self._collect(ctx, func.body)
        self.opaque = _opaque(ctx, func, self)

    def _collect(self, ctx: "PlanContext", block: cst.BaseSuite) -> None:
        for stmt in body_of(block):
            if isinstance(stmt, cst.SimpleStatementLine):
                assigned: Set[str] = set()
                loaded: List[cst.Name] = []
                for small in stmt.body:
                    _names(ctx, small, assigned, loaded)
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
                    _names(ctx, child, header_assigned, header_loaded)
                self.stmts.append(Stmt(len(self.stmts), cst.SimpleStatementLine([]), header_assigned, header_loaded))
                for name in header_assigned:
                    self.compound_assigned[name] = self.compound_assigned.get(name, 0) + 1
                for child in _suites(stmt):
                    self._collect(ctx, child)

    @classmethod
    def of_statements(cls, ctx: "PlanContext", statements: Sequence[cst.BaseStatement]) -> "FunctionFlow":
        """The same facts for a list of statements (e.g. one branch of an ``if``)."""
        flow = cls.__new__(cls)
        flow.func = None  # type: ignore[assignment]
        flow.params = set()
        flow.stmts = []
        flow.compound_assigned = {}
        flow._collect(ctx, cst.IndentedBlock(body=list(statements)))
        flow.opaque = None
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


# Calls that read or write a function's locals by name, out of any statement's sight.
DYNAMIC_SCOPE = frozenset({"locals", "vars", "eval", "exec", "_getframe", "currentframe", "stack", "getouterframes"})


def _opaque(ctx: "PlanContext", func: cst.FunctionDef, flow: "FunctionFlow") -> Optional[str]:
    """Why the statements of ``func`` may not show every read and write of its locals,
    else None: a nested def, lambda or class that names one of them (a call of it,
    anywhere, may write the tensor one holds, or rebind it with ``nonlocal``), or a
    call that reaches them by name (`locals()`, `sys._getframe()`...)."""
    local = set(flow.params)
    for stmt in flow.stmts:
        local |= stmt.assigned
    found: List[Tuple[cst.CSTNode, str]] = []

    def line(node: cst.CSTNode) -> str:
        try:
            return f" (line {ctx.position(node).line})"
        except KeyError:  # a function of another module, read with this one's context
            return ""

    class _Scopes(cst.CSTVisitor):
        def _nested(self, node: cst.CSTNode, own: Set[str], what: str) -> bool:
            named = sorted(_referenced(ctx, node) & local - own)
            if named:
                found.append((node, f"{what}{line(node)} names {', '.join(named)} of"
                              f" {func.name.value}: a call of it may write or rebind them unseen"))
            return False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            # its own names: its parameters and what it binds without `nonlocal`/`global`
            inner = FunctionFlow(node, ctx)
            bound = set().union(*(s.assigned for s in inner.stmts)) - declared_names(ctx, node)
            return self._nested(node, {node.name.value} | inner.params | bound, f"the nested `def {node.name.value}`")

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return self._nested(node, {node.name.value}, f"the nested `class {node.name.value}`")

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return self._nested(node, {p.name.value for p in all_params(node.params)}, "a lambda")

        def visit_Call(self, node: cst.Call) -> None:
            callee = node.func
            name = callee.attr.value if isinstance(callee, cst.Attribute) else getattr(callee, "value", None)
            if name in DYNAMIC_SCOPE:
                found.append((node, f"`{name}()`{line(node)} reaches the locals of"
                              f" {func.name.value} by name"))

    ctx.visit(_Scopes(), func.body)
    if not found:
        return None
    return f"{found[0][1]}, so nothing about them is proven there"


def declared_names(ctx: "PlanContext", func: cst.FunctionDef) -> Set[str]:
    """The names ``func``'s own body declares ``nonlocal`` or ``global`` (not those of a
    scope nested in it)."""
    names: Set[str] = set()

    class _Declared(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
            names.update(n.name.value for n in node.names)

        def visit_Global(self, node: cst.Global) -> None:
            names.update(n.name.value for n in node.names)

    ctx.visit(_Declared(), func.body)
    return names


def _referenced(ctx: "PlanContext", node: cst.CSTNode) -> Set[str]:
    """Every variable name ``node`` reads, binds or declares (``nonlocal``), at any
    depth; not attribute names or keywords."""
    names: Set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            names.add(name.value)

        def visit_Attribute(self, attr: cst.Attribute) -> bool:
            ctx.visit(self, attr.value)
            return False

        def visit_Arg(self, arg: cst.Arg) -> bool:
            ctx.visit(self, arg.value)
            return False

    ctx.visit(_Names(), node)
    return names


def body_of(block: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    """The statements of a block; `if c: a; b` gives its small statements (indexed
    nodes) as one line."""
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
        if handler.type is not None:
            parts.append(handler.type)
        if handler.name is not None and isinstance(handler.name.name, cst.Name):  # `except E as e`: binds e
            parts.append(cst.Assign([cst.AssignTarget(handler.name.name)], cst.Name("None")))
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
    if isinstance(stmt, cst.Match):
        # `case m:`, `case [*rest]`, `case {**rest}`, `case P() as m` bind names; a value
        # pattern (`case self.k:`) and a guard read names.
        for case in stmt.cases:
            for node in subtree(case.pattern):
                captured = getattr(node, "name", None) if isinstance(node, (cst.MatchAs, cst.MatchStar)) else None
                if isinstance(node, cst.MatchMapping):
                    captured = node.rest
                if isinstance(captured, cst.Name):
                    parts.append(cst.Assign([cst.AssignTarget(captured)], cst.Name("None")))
                elif isinstance(node, cst.MatchValue):
                    parts.append(node.value)
                elif isinstance(node, cst.MatchClass):
                    parts.append(node.cls)
                elif isinstance(node, cst.MatchMappingElement):
                    parts.append(node.key)
            if case.guard is not None:
                parts.append(case.guard)
    return parts


def subtree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it, in source order."""
    yield node
    for child in node.children:
        yield from subtree(child)


def all_params(params: cst.Parameters) -> List[cst.Param]:
    found = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            found.append(star)
    return found


def bound_parameter(func: cst.FunctionDef, call: cst.Call, arg: cst.Arg, bound_self: bool = False) -> Optional[str]:
    """The parameter of ``func`` that the argument ``arg`` of ``call`` binds; None where
    that is not plain: a ``*``/``**`` in the call, a position past the named parameters,
    a keyword naming none that a keyword binds (a positional-only one or ``**kwargs``'s
    own name goes into ``**kwargs``).  ``bound_self``: ``call`` calls the bound method
    (`self.m(...)`), whose first parameter is the instance."""
    if any(a.star for a in call.args):
        return None
    params = func.params
    positional = [*params.posonly_params, *params.params][1 if bound_self else 0 :]
    if arg.keyword is None:
        index = [a for a in call.args if a.keyword is None].index(arg)
        return positional[index].name.value if index < len(positional) else None
    keywords = {p.name.value for p in (*positional, *params.kwonly_params) if p not in params.posonly_params}
    return arg.keyword.value if arg.keyword.value in keywords else None


def _names(ctx: "PlanContext", node: cst.CSTNode, assigned: Set[str], loaded: List[cst.Name]) -> None:
    """Split the names in a small statement into bindings and reads."""
    ctx.visit(_NamesVisitor(ctx, assigned, loaded), node)


class _NamesVisitor(cst.CSTVisitor):
    def __init__(self, ctx: "PlanContext", assigned: Set[str], loaded: List[cst.Name]) -> None:
        super().__init__()
        self.ctx = ctx
        self.assigned = assigned
        self.loaded = loaded

    def visit_AssignTarget(self, target: cst.AssignTarget) -> bool:
        _bind(self.ctx, target.target, self.assigned, self.loaded)
        return False

    def visit_AnnAssign(self, ann: cst.AnnAssign) -> bool:
        _bind(self.ctx, ann.target, self.assigned, self.loaded)
        if ann.value is not None:
            self.ctx.visit(self, ann.value)
        return False

    def visit_AugAssign(self, aug: cst.AugAssign) -> bool:
        if isinstance(aug.target, cst.Name):
            self.assigned.add(aug.target.value)
            self.loaded.append(aug.target)
        else:
            self.ctx.visit(self, aug.target)
        self.ctx.visit(self, aug.value)
        return False

    def visit_NamedExpr(self, named: cst.NamedExpr) -> bool:
        _bind(self.ctx, named.target, self.assigned, self.loaded)
        self.ctx.visit(self, named.value)
        return False

    def visit_Global(self, node: cst.Global) -> bool:
        self.assigned.update(n.name.value for n in node.names)
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        self.assigned.update(n.name.value for n in node.names)
        return False

    def visit_Del(self, node: cst.Del) -> bool:
        _bind(self.ctx, node.target, self.assigned, self.loaded)
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
        self.ctx.visit(self, node.value)
        return False

    def visit_Name(self, node: cst.Name) -> bool:
        self.loaded.append(node)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.ctx.visit(self, node.value)
        return False


def _bind(ctx: "PlanContext", target: cst.CSTNode, assigned: Set[str], loaded: List[cst.Name]) -> None:
    if isinstance(target, cst.Name):
        assigned.add(target.value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _bind(ctx, element.value, assigned, loaded)
    elif isinstance(target, cst.StarredElement):
        _bind(ctx, target.value, assigned, loaded)
    else:  # subscript or attribute target: reads its base
        _names(ctx, target, assigned, loaded)


def loaded_names(ctx: "PlanContext", expr: cst.CSTNode) -> List[cst.Name]:
    """The Name nodes ``expr`` reads (not those it binds), in order."""
    assigned: Set[str] = set()
    loaded: List[cst.Name] = []
    _names(ctx, expr, assigned, loaded)
    return loaded


def names_in(ctx: "PlanContext", expr: cst.CSTNode) -> Set[str]:
    return {n.value for n in loaded_names(ctx, expr)}


def statement_names(ctx: "PlanContext", stmt: cst.BaseStatement) -> Tuple[Set[str], List[cst.Name]]:
    """Every name a statement binds (in any branch) and every name node it reads."""
    flow = FunctionFlow.of_statements(ctx, [stmt])
    assigned: Set[str] = set()
    for s in flow.stmts:
        assigned |= s.assigned
    return assigned, [n for s in flow.stmts for n in s.loaded]


# -- where a node sits -----------------------------------------------------------------


def enclosing_line(ctx: "PlanContext", node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.SimpleStatementLine):
            return ancestor
        if isinstance(ancestor, cst.BaseCompoundStatement):
            return None
    return None


def enclosing_function(ctx: "PlanContext", node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return ancestor
        if isinstance(ancestor, (cst.ClassDef, cst.Lambda)):
            return None
    return None


# -- in-place writes ---------------------------------------------------------------------

# Dunders that write their receiver: the in-place operators (`m += v` runs
# `m.__iadd__(v)`), item and attribute stores and deletes (`m[i] = v` runs
# `m.__setitem__(i, v)`), `__setstate__`.
WRITING_DUNDERS = frozenset(
    "__iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__ __idiv__ __imod__ __ipow__ __imatmul__ "
    "__iand__ __ior__ __ixor__ __ilshift__ __irshift__ __setitem__ __delitem__ __setattr__ __delattr__ "
    "__setstate__".split()
)


def is_inplace_method(name: str) -> bool:
    """True when the method (or torch function) ``name`` may write its receiver (first
    argument) in place, by PyTorch's naming: a trailing ``_`` marks in-place (`add_`,
    `index_fill_`, and private ones alike: `Tensor._coalesced_`, `torch._foreach_add_`),
    a dunder only when it is one of WRITING_DUNDERS (`__iadd__`, `__setitem__`; not
    `__add__`, `__getitem__`); a name without the trailing ``_`` (`_private`) is not."""
    if name.startswith("__") and name.endswith("__"):
        return name in WRITING_DUNDERS
    return name.endswith("_")


def is_inplace_function(qualified: str) -> bool:
    """True when the function with this qualified name may write an argument in place:
    the operator module's writes (`operator.setitem`, `operator.iadd`, or their dunder
    spellings) and torch's in-place functions (`torch.relu_`, `torch.Tensor.logical_or_`,
    `torch.nn.init.zeros_`)."""
    module, _, name = qualified.rpartition(".")
    if module in ("operator", "_operator"):
        return is_inplace_method(name) or f"__{name}__" in WRITING_DUNDERS
    return (module == "torch" or module.startswith("torch.")) and is_inplace_method(name)


# Reading these from a tensor gives an int, a torch.Size, a dtype or a device: nothing
# that shares the tensor's storage, so passing `m.shape[0]` on is not passing m.
METADATA_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "layout", "is_cuda"})
METADATA_METHODS = frozenset({"size", "dim", "ndimension", "numel", "nelement", "element_size", "get_device"})


def root_name(expr: cst.CSTNode, through_metadata: bool = True) -> Optional[str]:
    """The name a method/attribute/subscript chain starts from: `m` for
    `m.view(...)[..., 0].bool()`; None for anything else (`~m`, `f(m)`, `m | n`) and,
    without ``through_metadata``, for a chain that only reads the tensor's metadata
    (`m.shape[0]`, `m.view(B, -1).size(1)`, `m.dim()`)."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Attribute):
            if not through_metadata and expr.attr.value in METADATA_ATTRIBUTES:
                return None
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if not through_metadata and expr.func.attr.value in METADATA_METHODS:
                return None
            expr = expr.func.value
        else:
            return None


def tensor_root(expr: cst.CSTNode) -> Optional[str]:
    """:func:`root_name` of a chain that may hand on the tensor itself (a view, an
    element, a method's result); None for one that only reads its metadata."""
    return root_name(expr, through_metadata=False)


def chain_roots(ctx: "PlanContext", expr: cst.CSTNode, through_metadata: bool = True) -> Set[str]:
    """:func:`root_name`'s, and through a module function's call in the chain (one an
    import names: `torch.narrow(m, 1, 0, 1)`, `F.pad(m, ...)`, `torch.flatten(m)[0]`),
    the roots of its arguments (it may return a view of any of them)."""
    while True:
        if isinstance(expr, cst.Name):
            return {expr.value}
        if isinstance(expr, cst.Attribute):
            if not through_metadata and expr.attr.value in METADATA_ATTRIBUTES:
                return set()
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and ctx.qualified_names(expr.func):
            roots: Set[str] = set()
            for arg in expr.args:
                if arg.keyword is None or arg.keyword.value == "input":
                    roots |= chain_roots(ctx, arg.value, through_metadata=False)  # (not `m.shape`)
            return roots
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if not through_metadata and expr.func.attr.value in METADATA_METHODS:
                return set()
            expr = expr.func.value
        else:
            return set()


def in_place_write(ctx: "PlanContext", func: cst.FunctionDef, name: str) -> Optional[cst.CSTNode]:
    """The first node of ``func`` (nested code included) that may write in place into
    the tensor ``name`` holds, or into a view of it; None if there is none.

    Writes: `m[...] = v`, `m.attr = v`, `m op= v` and `m[...] op= v` (augmented
    assignment is in place on tensors), `m.<method>(...)` for an in-place method
    (:func:`is_inplace_method`: `logical_or_`, `index_fill_`, `__setitem__`, `__iadd__`...),
    `f(..., m, ...)` for an in-place function (:func:`is_inplace_function`:
    `operator.setitem`, `torch.relu_`...), `f(..., out=m)`.  ``m`` is ``name`` or
    a name bound to a method, attribute or subscript chain of one (`k = mask.view(...)`,
    `k = mask[:, 1:]`: a view shares the storage; a copy is taken as one too).  What a
    call does with a tensor it is given (`self.fix(mask)`) is not followed."""
    aliases = tensor_aliases(ctx, func, name)
    found: List[cst.CSTNode] = []

    def held(expr: cst.CSTNode, through_metadata: bool = True) -> bool:
        return bool(chain_roots(ctx, expr, through_metadata) & aliases)

    class _Writes(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            if isinstance(node.target, (cst.Subscript, cst.Attribute)) and held(node.target):
                found.append(node)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if held(node.target):
                found.append(node)

        def visit_Call(self, node: cst.Call) -> None:
            func_ = node.func
            if isinstance(func_, cst.Attribute) and is_inplace_method(func_.attr.value) and held(func_.value):
                found.append(node)
            elif any(held(arg.value, False) for arg in node.args) and any(
                is_inplace_function(q) for q in ctx.qualified_names(func_)
            ):
                found.append(node)
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == "out" and held(arg.value):
                    found.append(node)

    ctx.visit(_Writes(), func.body)
    if not found:
        return None
    return min(found, key=lambda n: (ctx.position(n).line, ctx.position(n).column))


def tensor_aliases(ctx: "PlanContext", func: cst.FunctionDef, name: str) -> Set[str]:
    """``name`` and the names of ``func`` bound to a method, attribute or subscript chain
    of one of them (`k = mask.view(...)`: may share its storage), transitively; not
    those bound to its metadata (`n = mask.shape[1]`, :func:`tensor_root`)."""
    aliases = {name}
    assigns: List[Tuple[List[cst.BaseExpression], cst.BaseExpression]] = []

    class _Assigns(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            assigns.append(([t.target for t in node.targets], node.value))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:  # `m: Tensor = mask.view(...)`
            if node.value is not None:
                assigns.append(([node.target], node.value))

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:  # `(m := mask)`
            assigns.append(([node.target], node.value))

    ctx.visit(_Assigns(), func.body)
    changed = True
    while changed:
        changed = False
        for targets, value in assigns:
            if chain_roots(ctx, value, through_metadata=False) & aliases:
                for target in targets:
                    if isinstance(target, cst.Name) and target.value not in aliases:
                        aliases.add(target.value)
                        changed = True
    return aliases
