"""How many units a ``get_random_mask`` keeps in every row, read from its own code.

The static-shape token drop needs that count as a Python int before the mask exists.
Copying upstream's formula into the callers is wrong for a fork whose get_random_mask
keeps another count (``round(...)``) and for a subclass that overrides it.  So the
count is taken from the body of the get_random_mask the file defines and becomes a
method of the class, which get_random_mask itself calls (HR003, codemods/token_drop.py)::

    def get_random_mask(self, x, mask_ratio):
        ...
        len_keep = self.kept_mask_units(x, mask_ratio)
        ...
        mask[:, :len_keep] = 1

    def kept_mask_units(self, x, mask_ratio) -> int:
        num_windows = math.prod(self.mask_spatial_shape)
        return int(num_windows * (1 - mask_ratio))

The token drop slices the kept units with the same value, `argsort(...)[:, :len_keep]`,
so each row keeps exactly as many as `mask[:, :len_keep] = 1` set, for every int.

What is proven: the body is upstream's shape, in any order and spelling that
keeps its meaning --

    noise = torch.rand(B, N, ...)                 # any batch size, N columns
    ids_shuffle = torch.argsort(noise, dim=1)     # or noise.argsort(dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    mask = torch.zeros([B, N], ...)               # the same N
    mask[:, :K] = 1                               # a non-zero constant
    mask = torch.gather(mask, dim=1, index=ids_restore)
    return mask.bool()

-- with N and K pure expressions of the parameters (``self``/``x`` attributes,
ints, ``math.*``, ``int``/``round``/...) and each name bound once.  Gathering with
a permutation of each row's columns keeps the row's count.  Anything else is
reported and gets no count.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import Stmt, names_in
from hiera_rewrite.rewrite import PlanContext, Refuse

from ._match import code, int_value, is_name, method_call, positional, single_assign
from ._mask import is_docstring

PURE_CALLS = {"int", "round", "float", "min", "max", "len", "abs"}


@dataclasses.dataclass
class KeptCount:
    """The pure statements the count needs, and the count's two expressions."""

    params: str
    statements: List[str]
    windows: str
    keep: str
    keep_node: cst.BaseExpression  # K of `mask[:, :K] = 1`, in the function's code


def kept_count(ctx: PlanContext, func: cst.FunctionDef) -> KeptCount:
    """The count upstream's get_random_mask body keeps, or Refuse saying why it is not read."""
    params = func.params
    if (
        isinstance(params.star_arg, (cst.Param, cst.ParamStar))
        or params.kwonly_params
        or params.star_kwarg is not None
        or params.posonly_params
        or not params.params
        or params.params[0].name.value != "self"
    ):
        raise Refuse(f"{func.name.value}'s parameters are not plain (self, ...) positional ones")
    flow = ctx.flow(func)
    if flow.opaque:
        raise Refuse(flow.opaque)
    if flow.compound_assigned or any(not isinstance(s, cst.SimpleStatementLine) for s in func.body.body):  # type: ignore[union-attr]
        raise Refuse(f"{func.name.value} has control flow: its kept count cannot be followed")
    pure: Dict[str, cst.BaseExpression] = {}
    names = {p.name.value for p in params.params}  # what a pure count may read
    bound = set(names)  # every name bound so far (each once)
    tensors: Dict[str, str] = {}  # name -> role
    facts: Dict[str, cst.BaseExpression] = {}
    returned: Optional[cst.BaseExpression] = None
    for index, line in enumerate(func.body.body):  # type: ignore[union-attr]
        if index == 0 and is_docstring(line):
            continue
        if len(line.body) != 1:  # type: ignore[attr-defined]
            raise Refuse(f"line {code(line)!r} holds several statements")
        small = line.body[0]  # type: ignore[attr-defined]
        if isinstance(small, cst.Return):
            if returned is not None or small.value is None:
                raise Refuse(f"{func.name.value} returns more than once")
            returned = small.value
            continue
        if returned is not None:
            raise Refuse(f"{func.name.value} has code after its return")
        assign = single_assign(line)  # type: ignore[arg-type]
        if assign is None:
            raise Refuse(f"`{code(small)}` is not an assignment the count can follow")
        target, value = assign
        if isinstance(target, cst.Subscript):
            if "mask" not in tensors or not is_name(target.value, tensors["mask"]) or "keep" in facts:
                raise Refuse(f"`{code(small)}` writes into a tensor other than the zeros mask, or twice")
            facts["keep"] = _keep_slice(target, value, pure, names)
            continue
        if not is_name(target):
            raise Refuse(f"`{code(small)}` assigns something other than a name")
        name = target.value  # type: ignore[attr-defined]
        role = _tensor_role(value, tensors, pure, names, facts)
        if role is not None:
            if role in tensors and role != "gathered":
                raise Refuse(f"{func.name.value} makes its {role} twice")
            if name in bound and not (role == "gathered" and name == tensors.get("mask")):
                raise Refuse(f"{name} is bound twice in {func.name.value}")
            tensors[role] = name
            bound.add(name)
            continue
        if name in bound:
            raise Refuse(f"{name} is bound twice in {func.name.value}")
        if not _pure(value, names, pure):
            raise Refuse(f"`{code(small)}` is neither a pure count nor a step of upstream's random mask")
        pure[name] = value
        names.add(name)
        bound.add(name)
    missing = [r for r in ("noise", "shuffle", "restore", "mask", "gathered") if r not in tensors]
    if missing or "keep" not in facts:
        raise Refuse(
            f"{func.name.value} does not make its mask as upstream does (rand, argsort twice, zeros, "
            f"mask[:, :K] = 1, gather): no {', '.join(missing) or 'mask[:, :K] = 1'}"
        )
    found = method_call(returned, "bool") if returned is not None else None
    if found is None or found[1].args or not is_name(found[0], tensors["gathered"]):
        raise Refuse(f"{func.name.value} does not return the gathered mask as `.bool()`")
    windows, keep = facts["windows"], facts["keep"]
    if code(facts["noise_windows"]).replace(" ", "") != code(windows).replace(" ", ""):
        raise Refuse("the noise and the zeros mask do not have the same number of columns")
    needed = _needed(ctx, pure, [windows, keep])
    statements = [f"{name} = {code(pure[name])}" for name in pure if name in needed]
    return KeptCount(
        params=code(params).strip().rstrip(","),
        statements=statements,
        windows=code(windows),
        keep=code(keep),
        keep_node=keep,
    )


def _torch_call(value: cst.BaseExpression, name: str) -> Optional[cst.Call]:
    if isinstance(value, cst.Call) and code(value.func) == f"torch.{name}":
        return value
    return None


def _dim_is_1(call: cst.Call, position: int) -> bool:
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == "dim":
            return int_value(arg.value) == 1
        if arg.keyword is None and i == position:
            return int_value(arg.value) == 1
    return False


def _argsort_of(value: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, int]]:
    """(what is sorted, how many times) for `torch.argsort(e, dim=1)` / `e.argsort(dim=1)`,
    nested: `torch.argsort(torch.argsort(noise, dim=1), dim=1)` is (noise, 2)."""
    inner: Optional[cst.BaseExpression] = None
    call = _torch_call(value, "argsort")
    if call is not None and call.args and call.args[0].keyword is None and not call.args[0].star:
        if len(call.args) <= 2 and _dim_is_1(call, 1):
            inner = call.args[0].value
    found = method_call(value, "argsort")
    if found is not None and len(found[1].args) == 1 and _dim_is_1(found[1], 0):
        inner = found[0]
    if inner is None:
        return None
    deeper = _argsort_of(inner)
    if deeper is not None:
        return deeper[0], deeper[1] + 1
    return inner, 1


def _shape_args(call: cst.Call) -> Optional[List[cst.BaseExpression]]:
    """The size arguments of torch.rand/zeros: `(B, N)`, `([B, N])`, `((B, N))`, keywords apart."""
    sizes = [a for a in call.args if a.keyword is None]
    if any(a.star for a in call.args):
        return None
    return positional(call.with_changes(args=sizes))


def _tensor_role(value, tensors, pure, names, facts) -> Optional[str]:
    # torch.rand(B, N) is the noise, torch.zeros(B, N) the mask; N is a fact of each
    for function, role, what, columns in (("rand", "noise", "noise", "noise_windows"), ("zeros", "mask", "zeros mask", "windows")):
        made = _torch_call(value, function)
        if made is not None:
            sizes = _shape_args(made)
            if sizes is None or len(sizes) != 2 or not all(_pure(s, names, pure) for s in sizes):
                raise Refuse(f"`{code(value)}` is not a (B, N) {what} of pure sizes")
            facts[columns] = sizes[1]
            return role
    sorted_ = _argsort_of(value)
    if sorted_ is not None:
        source, times = sorted_
        if is_name(source, tensors.get("noise")) and times in (1, 2) and "shuffle" not in tensors:
            if times == 2:
                tensors["shuffle"] = ""  # sorted twice in one expression
                return "restore"
            return "shuffle"
        if is_name(source, tensors.get("shuffle") or None) and times == 1 and "restore" not in tensors:
            return "restore"
        raise Refuse(f"`{code(value)}` does not sort the noise, or its sort, along the units")
    gathered = _gather_of(value)
    if gathered is not None:
        source, index = gathered
        if (
            "mask" in tensors
            and "keep" in facts
            and "restore" in tensors
            and source == tensors["mask"]
            and index == tensors["restore"]
            and "gathered" not in tensors
        ):
            return "gathered"
        raise Refuse(f"`{code(value)}` does not unshuffle the filled zeros mask by the sort of the sort")
    return None


def _gather_of(value: cst.BaseExpression):
    """(source, index) names of `torch.gather(src, dim=1, index=idx)` / `src.gather(1, idx)`."""
    call = _torch_call(value, "gather")
    args: List[cst.Arg]
    if call is not None:
        args = list(call.args)
        source = args[0].value if args and args[0].keyword is None else None
        rest = args[1:]
    else:
        found = method_call(value, "gather")
        if found is None:
            return None
        source, rest = found[0], list(found[1].args)
    if source is None or not is_name(source) or len(rest) != 2 or any(a.star for a in rest):
        return None
    by_name = {a.keyword.value: a.value for a in rest if a.keyword is not None}
    plain = [a.value for a in rest if a.keyword is None]
    dim = by_name.get("dim", plain[0] if plain else None)
    index = by_name.get("index", plain[-1] if len(plain) == 2 or (plain and "dim" in by_name) else None)
    if int_value(dim) != 1 or not is_name(index):
        return None
    return source.value, index.value  # type: ignore[attr-defined]


def _keep_slice(target: cst.Subscript, value, pure, names) -> cst.BaseExpression:
    """K of `mask[:, :K] = 1` (a non-zero constant)."""
    if len(target.slice) != 2:
        raise Refuse(f"`{code(target)}` is not mask[:, :K]")
    first, second = (s.slice for s in target.slice)
    if not (
        isinstance(first, cst.Slice)
        and first.lower is None and first.upper is None and first.step is None
        and isinstance(second, cst.Slice)
        and second.lower is None and second.step is None and second.upper is not None
        and _pure(second.upper, names, pure)
    ):
        raise Refuse(f"`{code(target)}` is not mask[:, :K] with a pure K")
    constant = value
    if not (
        isinstance(constant, (cst.Integer, cst.Float)) and float(constant.evaluated_value) != 0.0
        or is_name(constant, "True")
    ):
        raise Refuse(f"`{code(target)} = {code(value)}` does not set a non-zero constant")
    return second.upper


def _pure(expr: cst.CSTNode, names: Set[str], pure: Dict[str, cst.BaseExpression]) -> bool:
    """An expression of ints, bound names and their attributes, `math.*` and a few builtins."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in names or expr.value == "math"
    if isinstance(expr, cst.Attribute):
        return _pure(expr.value, names, pure)
    if isinstance(expr, cst.Subscript):
        return _pure(expr.value, names, pure) and all(
            isinstance(s.slice, cst.Index) and _pure(s.slice.value, names, pure) for s in expr.slice
        )
    if isinstance(expr, cst.BinaryOperation):
        return _pure(expr.left, names, pure) and _pure(expr.right, names, pure)
    if isinstance(expr, cst.UnaryOperation):
        return _pure(expr.expression, names, pure)
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(not isinstance(e, cst.StarredElement) and _pure(e.value, names, pure) for e in expr.elements)
    if isinstance(expr, cst.Call):
        func = expr.func
        callee_ok = is_name(func) and func.value in PURE_CALLS or (  # type: ignore[attr-defined]
            isinstance(func, cst.Attribute) and is_name(func.value, "math")
        )
        return callee_ok and all(not a.star and a.keyword is None and _pure(a.value, names, pure) for a in expr.args)
    return False


def _needed(ctx: PlanContext, pure: Dict[str, cst.BaseExpression], exprs: List[cst.BaseExpression]) -> Set[str]:
    """The pure names the expressions read, transitively."""
    needed: Set[str] = set()
    todo = list(exprs)
    while todo:
        expr = todo.pop()
        for node in names_in(ctx, expr):
            if node in pure and node not in needed:
                needed.add(node)
                todo.append(pure[node])
    return needed


@dataclasses.dataclass
class MadeMask:
    """`if <mask> is None: <mask> = <owner>.get_random_mask(a, ratio)` at the top level
    of a function (an MAE's forward_encoder): where the mask the model makes itself
    comes from, and what its count is computed from."""

    guard: cst.If
    owner: cst.BaseExpression
    args: List[cst.BaseExpression]  # a and ratio (a name)
    made: Stmt  # the assignment, in the function's flow
    once: bool  # it is the function's only binding of <mask>

    def self_owned(self) -> bool:
        """get_random_mask is the model's own or a submodule's (``self``, ``self.attr``)."""
        owner = self.owner
        return is_name(owner, "self") or isinstance(owner, cst.Attribute) and is_name(owner.value, "self")


def random_mask_guard(ctx: PlanContext, func: cst.FunctionDef, mask: str) -> Optional[MadeMask]:
    """The top-level `if mask is None: mask = <owner>.get_random_mask(a, ratio)` of
    ``func``.  Statements after the assignment in the if (a count a rewrite added) are
    the caller's to check."""
    for stmt in func.body.body:  # type: ignore[union-attr]
        if not isinstance(stmt, cst.If) or stmt.orelse is not None:
            continue
        test = stmt.test
        if not (
            isinstance(test, cst.Comparison)
            and is_name(test.left, mask)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Is)
            and is_name(test.comparisons[0].comparator, "None")
        ):
            continue
        body = stmt.body.body  # type: ignore[union-attr]
        if not body or not isinstance(body[0], cst.SimpleStatementLine):
            return None
        assign = single_assign(body[0])
        if assign is None or not is_name(assign[0], mask):
            return None
        found = method_call(assign[1], "get_random_mask")
        if found is None:
            return None
        args = positional(found[1])
        if args is None or len(args) != 2 or not (is_name(args[1]) or _self_attribute(args[1])):
            return None  # the ratio: a name, or an attribute of self (`self.mask_ratio`)
        flow = ctx.flow(func)
        made = flow.stmt_of(body[0])
        once = [s.index for s in flow.assigning(mask)] == [made.index] and not flow.compound_assigned.get(mask)
        return MadeMask(stmt, found[0], args, made, once)
    return None


def _self_attribute(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Attribute) and is_name(node.value, "self")


def get_random_mask_call(ctx: PlanContext, func: cst.FunctionDef) -> Optional[cst.Call]:
    """The first `<x>.get_random_mask(...)` call in ``func``, if any."""
    found: List[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if method_call(node, "get_random_mask") is not None:
                found.append(node)

    ctx.visit(_Calls(), func)
    return found[0] if found else None
