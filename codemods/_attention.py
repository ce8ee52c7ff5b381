"""What the two attention rewrites (HR001 mask_unit_attention, HR006 explicit_attention)
recognise alike: the names of SDPA and softmax, Hiera's 5-D qkv layout, how q, k and v
are unpacked from it and q pooled, how the output is put back, and when a scale is
provably a Python number.

Hiera's 5-D layout: qkv is reshaped to (B, T, num_windows, 3, heads, head_dim) and
permuted by FIVE_D_PERMUTE to (3, B, heads, num_windows, T, head_dim).  Both rewrites
permute by FOUR_D_PERMUTE instead, to (3, B, num_windows, heads, T, head_dim), and
flatten two dims: HR001 (2, 3), the windows into the heads; HR006 (1, 2), the windows
into the batch.
"""

from __future__ import annotations

import collections
from typing import Counter, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import statement_names
from hiera_rewrite.rewrite import PlanContext, Refuse

from ._inplace import WHAT, InplaceFlow
from ._match import code, dim_arg, flatten_targets, int_args, int_value, is_name, may_setattr, method_call, positional, single_assign

SDPA_NAMES = {
    "torch.nn.functional.scaled_dot_product_attention",
    "torch._C._nn.scaled_dot_product_attention",
}
SOFTMAX_NAMES = {"torch.nn.functional.softmax", "torch.softmax"}
FIVE_D_PERMUTE = [3, 0, 4, 2, 1, 5]
FOUR_D_PERMUTE = [3, 0, 2, 4, 1, 5]


# SDPA's 4-D output put back in token order can be a view of it (the fused kernels and
# CPU's flash kernel write (B, Tq, heads, head_dim) order), and those kernels save their
# output for backward; the 5-D restore copied.
CLONE_WHY = "in the 4-D layout it can be a view of SDPA's output, which SDPA saves for backward"


def restore_clone_reason(
    flow: InplaceFlow, func: cst.FunctionDef, stmt: cst.CSTNode, value: cst.BaseExpression
) -> Optional[str]:
    """Why the restored attention output ``value`` (made by the statement ``stmt``)
    needs `.clone()`: an in-place op, or code that may do one, can reach it, or it is
    returned (a caller may modify it in place).  None: nothing can."""
    outcome = flow.follow(func, stmt, seed_nodes=[value])
    if outcome.hazards:
        return outcome.hazards[0].replace(WHAT, "it")
    if outcome.returned:
        return "it is returned, and a caller may modify it in place"
    return None


# -- calls ------------------------------------------------------------------------------


def sdpa_calls(ctx: PlanContext, root: Optional[cst.CSTNode] = None) -> List[cst.Call]:
    """The calls of F.scaled_dot_product_attention under ``root`` (the module), in order."""
    found: List[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if ctx.qualified_names(node.func) & SDPA_NAMES:
                found.append(node)

    ctx.visit(_Calls(), root)
    return found


def softmax_operand(ctx: PlanContext, node: cst.BaseExpression) -> Optional[Tuple[str, Optional[cst.BaseExpression]]]:
    """("function", t) for `F.softmax(t, dim=-1)`, ("method", t) for `t.softmax(dim=-1)`;
    that spelling with None for a softmax over another dim or with more arguments (a
    dtype); None where ``node`` is no softmax."""
    if isinstance(node, cst.Call) and ctx.qualified_names(node.func) & SOFTMAX_NAMES:
        args = node.args
        if len(args) == 2 and not args[0].star and args[0].keyword is None and not args[1].star:
            second = args[1]
            if (second.keyword is None or second.keyword.value == "dim") and int_value(second.value) == -1:
                return "function", args[0].value
        return "function", None
    found = method_call(node, "softmax")
    if found is not None:
        ok, dim = dim_arg(found[1])
        return "method", found[0] if ok and dim == -1 else None
    return None


def transposed_last(node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """X of `X.transpose(-1, -2)` (either order), else None."""
    found = method_call(node, "transpose")
    if found is None:
        return None
    dims = int_args(found[1])
    if dims is None or sorted(dims) != [-2, -1]:
        return None
    return found[0]


# -- the 5-D qkv, its unpack and the q-pool ------------------------------------------------


def qkv_sizes(reshape: Optional[cst.Call]) -> Optional[List[cst.BaseExpression]]:
    """The sizes (B, T, num_windows, 3, heads, head_dim) of a qkv reshape/view call:
    six positional ones, the fourth a literal 3; else None."""
    args = positional(reshape) if reshape is not None else None
    if args is None or len(args) != 6 or int_value(args[3]) != 3:
        return None
    return args


class QkvSources:
    """The qkv components q, k and v take (see :func:`component`), checked as found."""

    def __init__(self) -> None:
        self.sources: Dict[int, str] = {}

    def add(self, component: Tuple[str, int]) -> None:
        source, index = component
        if index in self.sources:
            raise Refuse("q, k and v do not take three different qkv components")
        self.sources[index] = source

    def qkv(self) -> str:
        """The one tensor q, k and v are unpacked from."""
        if len(set(self.sources.values())) != 1 or set(self.sources) != {0, 1, 2}:
            raise Refuse("q, k and v do not come from the same qkv tensor")
        return self.sources[0]


def pool_view_args(pooled: cst.BaseExpression, q: str) -> Optional[List[cst.BaseExpression]]:
    """The six sizes of `q.view(B, heads, num_windows, q_stride, Tq, head_dim)` (or
    .reshape), the tensor a q-pool reduces; else None."""
    view = method_call(pooled, "view", "reshape")
    args = positional(view[1]) if view else None
    if view is None or not is_name(view[0], q) or args is None or len(args) != 6:
        return None
    return args


def component(line: cst.SimpleStatementLine, name: str) -> Optional[Tuple[str, int]]:
    """If ``line`` binds ``name`` to component i of a tensor X, return (X, i)."""
    assign = single_assign(line)
    if assign is None:
        return None
    target, value = assign
    if is_name(target, name):
        return _subscript(value)
    if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != 3:
        return None
    names = [e.value for e in target.elements]
    if not all(is_name(n) for n in names):
        return None
    values = [n.value for n in names]  # type: ignore[attr-defined]
    if name not in values or len(set(values)) != 3:
        return None
    position = values.index(name)
    if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == 3:
        parts = [_subscript(e.value) for e in value.elements]
        if any(p is None for p in parts) or [p[1] for p in parts] != [0, 1, 2]:  # type: ignore[index]
            return None
        if len({p[0] for p in parts}) != 1:  # type: ignore[index]
            return None
        return parts[position]  # type: ignore[return-value]
    if is_name(value):
        return value.value, position  # type: ignore[attr-defined]
    found = method_call(value, "unbind")
    if found and is_name(found[0]):
        ok, dim = dim_arg(found[1]) if found[1].args else (True, 0)
        if ok and dim == 0:
            return found[0].value, position  # type: ignore[attr-defined]
    return None


def _subscript(value: cst.BaseExpression) -> Optional[Tuple[str, int]]:
    if isinstance(value, cst.Subscript) and is_name(value.value) and len(value.slice) == 1:
        index = value.slice[0].slice
        if isinstance(index, cst.Index):
            i = int_value(index.value)
            if i in (0, 1, 2):
                return value.value.value, i  # type: ignore[attr-defined]
    return None

# -- the output ---------------------------------------------------------------------------


def restore_chain(value: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, List[cst.BaseExpression]]]:
    """Match `<out>.transpose(1, 3).reshape(B, N, C)`: returns (out, [B, N, C])."""
    outer = method_call(value, "reshape")
    if outer is None:
        return None
    args = positional(outer[1])
    inner = method_call(outer[0], "transpose")
    if args is None or len(args) != 3 or inner is None:
        return None
    dims = int_args(inner[1])
    if dims is None or sorted(dims) != [1, 3]:
        return None
    return inner[0], args


# -- names and scales -----------------------------------------------------------------------


def all_loads(ctx: PlanContext, root: cst.CSTNode) -> List[cst.Name]:
    """Every Name node under ``root`` (attribute names and keywords excluded)."""
    found: List[cst.Name] = []

    class _Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            ctx.visit(self, node.value)
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            ctx.visit(self, node.value)
            return False

    ctx.visit(_Names(), root)
    return found


def scalar(ctx: PlanContext, func: cst.FunctionDef, expr: cst.BaseExpression) -> bool:
    """A Python number: a literal, arithmetic on numbers, or a numeric `self.attr`."""
    return scalar_problem(ctx, func, expr) is None


def scalar_problem(ctx: PlanContext, func: cst.FunctionDef, expr: cst.BaseExpression) -> Optional[str]:
    """None if ``expr`` is a Python number for instances of the method's own class
    (literals, arithmetic, numeric `self.attr`), else why not.

    Subclasses (in this file or not) and other objects may still replace `self.attr`
    by a tensor: the rewrites check `isinstance(..., (int, float))` at run time
    wherever the scale reads an attribute (see :func:`scale_check`)."""
    for leaf in _operands(expr):
        problem = _leaf_problem(ctx, func, leaf)
        if problem is not None:
            return problem
    return None


def _leaf_problem(ctx: PlanContext, func: cst.FunctionDef, expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, (cst.Integer, cst.Float)):
        return None
    if isinstance(expr, cst.Attribute) and is_name(expr.value, "self"):
        return _attribute_problem(ctx, func, expr.attr.value)
    return f"{code(expr)} is not a literal or a self attribute"


def _attribute_problem(ctx: PlanContext, func: cst.FunctionDef, attr: str) -> Optional[str]:
    """None if `self.attr` is a number for an instance of the class holding ``func``:
    the class and its bases in this file bind `attr` only by `self.attr = <arithmetic,
    no calls>` directly in an `__init__` or by `attr = <number>` in the class body (at
    least once), never by a `def`/property, another statement in the class body, a
    store outside `__init__`, or a setattr.  Else why not (the reason names the line)."""
    cls = next((a for a in ctx.ancestors(func) if isinstance(a, cst.ClassDef)), None)
    if cls is None:
        return f"self.{attr} is read outside a class"
    key = ("numeric attribute", id(cls), attr)
    if key in ctx.memo:
        return ctx.memo[key]
    found: List[str] = []  # problems
    numeric: List[cst.CSTNode] = []

    def where(node: cst.CSTNode) -> str:
        return f"line {ctx.span(node).start.line}"

    class _Stores(cst.CSTVisitor):
        def __init__(self, owner: cst.ClassDef) -> None:
            super().__init__()
            self.owner = owner

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            self._target(node.target, node)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self._target(node.target, node)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self._target(node.target, node)

        def _target(self, target: cst.BaseExpression, node: cst.CSTNode) -> None:
            for element in flatten_targets(target):
                if isinstance(element, cst.Attribute) and element.attr.value == attr:
                    if self._numeric_init_store(node, element):
                        numeric.append(node)
                    else:
                        stmt = ctx.parent(node) if isinstance(node, cst.AssignTarget) else node
                        found.append(
                            f"self.{attr} is set by `{code(stmt)}` at {where(node)}, not by arithmetic in __init__"
                        )
                elif is_name(element, attr):
                    self._class_level(node)

        def _class_level(self, node: cst.CSTNode) -> None:
            # `attr = ...` directly in the class body is a class attribute
            line = next((a for a in ctx.ancestors(node) if isinstance(a, cst.SimpleStatementLine)), None)
            block = ctx.parent(line) if line is not None else None
            if block is None or ctx.parent(block) is not self.owner:
                return
            assign = ctx.parent(node) if isinstance(node, cst.AssignTarget) else None
            if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and _literal_number(assign.value):
                numeric.append(node)
            else:
                found.append(f"{self.owner.name.value}.{attr} is a class attribute set by `{code(line)}` at {where(node)}")

        def _numeric_init_store(self, node: cst.CSTNode, element: cst.Attribute) -> bool:
            if not isinstance(node, cst.AssignTarget) or not is_name(element.value, "self"):
                return False
            owner = next((a for a in ctx.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.ClassDef, cst.Lambda))), None)
            if not isinstance(owner, cst.FunctionDef) or owner.name.value != "__init__":
                return False
            if next((a for a in ctx.ancestors(owner) if isinstance(a, (cst.FunctionDef, cst.ClassDef))), None) is not self.owner:
                return False
            assign = ctx.parent(node)
            return isinstance(assign, cst.Assign) and len(assign.targets) == 1 and arithmetic(assign.value)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            if node.name.value == attr and next(
                (a for a in ctx.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.ClassDef))), None
            ) is self.owner:
                found.append(f"{self.owner.name.value}.{attr} is a method or property at {where(node)}")

        def visit_Call(self, node: cst.Call) -> None:
            # setattr(self, "attr", ...) also stores
            if may_setattr(node, attr):
                found.append(f"a setattr at {where(node)} may set self.{attr}")

    for owner_class in _class_and_local_bases(ctx.module, cls):
        ctx.visit(_Stores(owner_class), owner_class)
    problem = found[0] if found else None
    if problem is None and not numeric:
        problem = f"self.{attr} is not set in {cls.name.value}.__init__ (or its bases in this file)"
    ctx.memo[key] = problem
    return problem


def _literal_number(expr: cst.BaseExpression) -> bool:
    """Literals combined by arithmetic (no names)."""
    return all(isinstance(leaf, (cst.Integer, cst.Float)) for leaf in _operands(expr))


SCALE_CHECK_BUILTINS = ("isinstance", "int", "float")


def scale_check(ctx: PlanContext, func: cst.FunctionDef, scales: Sequence[cst.BaseExpression]) -> Optional[str]:
    """The run-time test that every scale is a Python number, or None when each one is
    made of literals only.  A subclass (in this file or another) or any other code may
    set `self.scale` to a tensor: a per-head temperature broadcasts against the 5-D
    layout's dims, which the 4-D layout orders differently, and SDPA's `scale=` takes a
    number only.  Where the test fails the original 5-D computation runs."""
    checks: List[str] = []
    for scale in scales:
        if _literal_number(scale):
            continue
        test = f"isinstance({code(scale)}, (int, float))"
        if test not in checks:
            checks.append(test)
    if not checks:
        return None
    bound = _bound_names(ctx, func)
    shadowed = [n for n in SCALE_CHECK_BUILTINS if n in bound]
    if shadowed:
        raise Refuse(f"the scale needs a run-time isinstance check but the file binds {shadowed[0]}")
    return " and ".join(checks)


def shadowed_builtins(ctx: PlanContext, func: cst.FunctionDef, *names: str) -> List[str]:
    """Those of ``names`` (builtins emitted code calls) that ``func``, a function
    around it or the module's top level binds."""
    bound = _bound_names(ctx, func)
    return [n for n in names if n in bound or "*" in bound]


def _bound_names(ctx: PlanContext, func: cst.FunctionDef) -> Set[str]:
    """Names bound in ``func``, the functions around it and the module's top level."""
    bound = set(top_level_bindings(ctx))
    for owner in [func, *(a for a in ctx.ancestors(func) if isinstance(a, cst.FunctionDef))]:
        flow = ctx.flow(owner)
        bound |= flow.params
        for stmt in flow.stmts:
            bound |= stmt.assigned
    return bound


def top_level_bindings(ctx: PlanContext) -> Counter[str]:
    """How many top-level statements of the module bind each name."""
    found = ctx.memo.get("top-level bindings")
    if found is None:
        found = ctx.memo["top-level bindings"] = collections.Counter(
            name for s in ctx.module.body for name in statement_names(ctx, s)[0]
        )
    return found


def arithmetic(expr: cst.BaseExpression) -> bool:
    """Literals, names and attributes combined by arithmetic only (no calls)."""
    return all(_arithmetic_leaf(leaf) for leaf in _operands(expr))


def _arithmetic_leaf(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value not in ("None", "True", "False")
    return isinstance(expr, cst.Attribute) and isinstance(expr.value, (cst.Name, cst.Attribute)) and _arithmetic_leaf(expr.value)


_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Power)


def _operands(expr: cst.BaseExpression) -> List[cst.BaseExpression]:
    """The operands, left to right, of the unary +/- and arithmetic that build ``expr``
    (``expr`` itself where it is neither)."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _operands(expr.expression)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _ARITHMETIC):
        return _operands(expr.left) + _operands(expr.right)
    return [expr]


def _class_and_local_bases(module: cst.Module, cls: cst.ClassDef) -> List[cst.ClassDef]:
    """``cls`` and the base classes defined (once) at the top of the same module."""
    classes: Dict[str, List[cst.ClassDef]] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef):
            classes.setdefault(stmt.name.value, []).append(stmt)
    found = [cls]
    for current in found:
        for base in current.bases:
            same = classes.get(base.value.value, []) if is_name(base.value) else []  # type: ignore[attr-defined]
            if len(same) == 1 and same[0] not in found:
                found.append(same[0])
    return found


