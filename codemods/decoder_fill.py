"""HR004: decoder fill by a scatter of the kept units.

It matches, in one function (names are followed, not assumed):

    x_dec = torch.zeros(*mask.shape, *x.shape[2:], ...)       # [B, #MUs, *unit, C]
    mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))  # [B, #MUs, 1, ..., 1]
    mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()        # [B, #MUs, *unit, C]
    x_dec[mask] = x.flatten()

and emits:

    kept = true_rows(mask, x.shape[0] * x.shape[1])            # before the reshape
    torch._assert_async(mask.count_nonzero() == len(kept))     # x fills all True units
    mask = mask.reshape(...)                                   # unchanged
    mask = mask.expand(...).bool()                             # unchanged
    x_dec.flatten(0, 1).index_copy_(0, kept, x.flatten(0, 1))  # in place, as the original

with ``true_rows`` (codemods/_mask.py) put above the class: the flat indices of the
True units, ascending.  The count needs no caller: `x_dec[mask] = x.flatten()` fills
exactly as many units as x holds (else it raises), so it is exact for every mask the
original accepts, ragged rows included, and each file's rewrite stands alone.  Where the
original raised (x's units and the mask's True units differ in number) the rewrite
raises too, from a check on the device (no host sync; eager mode: torch.compile's
inductor drops the assert, and the step then fills the first units).

The blend with the mask token that follows is left as it is, so dtypes (autocast)
behave exactly as before.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import libcst as cst

from hiera_rewrite.flow import FunctionFlow, Stmt, enclosing_function
from hiera_rewrite.rewrite import PlanContext, Refuse, Replacement, Rewrite, register

from ._calls import passed_to_a_writer, walk
from ._match import code, is_name, method_call, single_assign
from ._mask import MASK_CONTRACT, TRUE_ROWS, add_helper, free_names, imports_module, name_taken, written_in_place

INDEX = "kept"


@register
class DecoderFill(Rewrite):
    code = "HR004"
    name = "decoder-fill"
    message = "decoder fill: x_dec[mask] = x.flatten() -> index_copy of the kept units (static shape, no sync)"
    explanation = """
    The MAE decoder puts the encoder's kept units back on the full grid with
    `x_dec[mask] = x.flatten()`, where `mask` is the unit mask expanded to
    x_dec's shape.  Boolean index_put is a data-dependent `nonzero` (a host sync
    and a graph break under torch.compile) with a slow backward.

    The original fills exactly as many units as x holds (x.shape[0] * x.shape[1]:
    any other count raises), in ascending order of the flattened (B, #MUs) mask.
    The rewrite takes those unit indices from a stable argsort of the 2-D mask
    (before it is expanded), sliced to that count (a Python int: static shapes),
    and copies x's units there with `index_copy_` on x_dec flattened to units (a
    view of the zeros: in place, as the original): the same values land in the same
    places, for the model's own masks and for a caller's, ragged rows included.  No count is passed in, so hiera_mae.py's
    rewrite stands on its own.  Where the original raised (x's units and the mask's
    True units differ in number), `torch._assert_async(mask.count_nonzero() ==
    len(kept))` raises too (it counts the nonzero entries the fill reads as True: a
    uint8 mask of 0/255 included), on the device (no host sync; under torch.compile inductor drops it).
    The blend `~mask * mask_tokens + mask * x_dec` that follows is left untouched, so
    dtype promotion (under autocast too) is exactly as before.

    The kept units are taken where the mask is reshaped; the original fills with the
    mask as it is at the fill.  Between the two only tensor arithmetic on local names
    may run (no method, submodule or function call, no `self`): the decoder's mask is
    the caller's, and code elsewhere may hold an alias of it (`self.m = mask` in
    forward_encoder) that a method called there could write.
    """ + MASK_CONTRACT

    def plan(self, ctx: PlanContext) -> None:
        finder = _IndexPuts()
        ctx.visit(finder)
        for line in finder.lines:
            edits = ctx.attempt(line, lambda: _fill(ctx, line))
            if edits is not None:
                ctx.add_site(line, edits)


class _IndexPuts(cst.CSTVisitor):
    """Statements `X[M] = Y.flatten()`."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: List[cst.SimpleStatementLine] = []

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        assign = single_assign(node)
        if assign is None or not isinstance(assign[0], cst.Subscript):
            return
        flat = method_call(assign[1], "flatten")
        if flat is not None and not flat[1].args and len(assign[0].slice) == 1:
            self.lines.append(node)


def _latest_def(flow: FunctionFlow, name: str, before: Stmt) -> Optional[Stmt]:
    defs = [s for s in flow.assigning(name) if s.index < before.index]
    return defs[-1] if defs else None


def _fill(ctx: PlanContext, line: cst.SimpleStatementLine) -> Dict[cst.CSTNode, Replacement]:
    func = enclosing_function(ctx, line)
    if func is None:
        raise Refuse("the index_put is not inside a function")
    flow = ctx.flow(func)
    put = flow.stmt_of(line)
    target, value = single_assign(line)  # type: ignore[misc]
    grid, index = target.value, target.slice[0].slice  # type: ignore[attr-defined]
    units = method_call(value, "flatten")[0]  # type: ignore[index]
    if not (is_name(grid) and isinstance(index, cst.Index) and is_name(index.value) and is_name(units)):
        raise Refuse("the index_put is not `x_dec[mask] = x.flatten()` on local names")
    grid, mask, units = grid.value, index.value.value, units.value  # type: ignore[attr-defined]

    # mask = mask2.expand(...)[.bool()]  <-  mask2 = mask1.reshape(mask1.shape + (1,) * k)
    expand_stmt = _latest_def(flow, mask, put)
    expanded = single_assign(expand_stmt.line) if expand_stmt else None
    chain = expanded[1] if expanded else None
    cast = method_call(chain, "bool")
    if cast is not None and not cast[1].args:
        chain = cast[0]
    expand = method_call(chain, "expand")
    if expand is None or not is_name(expand[0]):
        raise Refuse(f"{mask} is not a unit mask expanded to the grid (mask.expand(...))")
    reshape_stmt = _latest_def(flow, expand[0].value, expand_stmt)  # type: ignore[attr-defined, arg-type]
    reshaped = single_assign(reshape_stmt.line) if reshape_stmt else None
    reshape = method_call(reshaped[1], "reshape", "view") if reshaped else None
    if reshape is None or not is_name(reshape[0]) or len(reshape[1].args) != 1:
        raise Refuse(f"{mask} does not come from the unit mask reshaped with trailing singleton dims")
    unit_mask = reshape[0].value  # type: ignore[attr-defined]
    shape_arg = reshape[1].args[0].value
    if not (
        isinstance(shape_arg, cst.BinaryOperation)
        and isinstance(shape_arg.operator, cst.Add)
        and code(shape_arg.left) == f"{unit_mask}.shape"
        and isinstance(shape_arg.right, cst.BinaryOperation)
        and isinstance(shape_arg.right.operator, cst.Multiply)
        and code(shape_arg.right.left).replace(" ", "") == "(1,)"
    ):
        raise Refuse(f"{mask} is not reshaped to {unit_mask}.shape + (1,) * k")
    if len(expand[1].args) != 1 or code(expand[1].args[0].value).replace(" ", "") != f"(-1,)*2+{units}.shape[2:]":
        raise Refuse(f"{mask} is not expanded with `(-1,) * 2 + x.shape[2:]`: the unit mask may not be (B, #MUs)")

    # x_dec = torch.zeros(*unit_mask.shape, *x.shape[2:], ...)
    grid_stmt = _latest_def(flow, grid, put)
    made = single_assign(grid_stmt.line) if grid_stmt else None
    zeros = made[1] if made else None
    if not (
        isinstance(zeros, cst.Call)
        and code(zeros.func) == "torch.zeros"
        and len(zeros.args) >= 2
        and zeros.args[0].star == "*"
        and code(zeros.args[0].value) == f"{unit_mask}.shape"
        and zeros.args[1].star == "*"
        and code(zeros.args[1].value).replace(" ", "") == f"{units}.shape[2:]"
        and all(a.keyword is not None and a.keyword.value != "out" for a in zeros.args[2:])
    ):
        raise Refuse(f"{grid} is not torch.zeros(*{unit_mask}.shape, *{units}.shape[2:], ...)")
    if _latest_def(flow, unit_mask, grid_stmt) is not _latest_def(flow, unit_mask, reshape_stmt):  # type: ignore[arg-type]
        raise Refuse(f"{unit_mask} changes between the grid allocation and the reshape")
    steps = [grid_stmt, reshape_stmt, expand_stmt, put]
    blocks = {id(ctx.parent(s.line)) for s in steps}  # type: ignore[union-attr]
    if len(blocks) != 1:
        raise Refuse("the grid allocation, the mask reshape and expand and the fill are not in one block")
    first = min(grid_stmt.index, reshape_stmt.index)  # type: ignore[union-attr]
    for name in (units, grid):
        between = [s for s in flow.assigning(name) if first < s.index < put.index]
        if between or flow.compound_assigned.get(name):
            raise Refuse(f"{name} is reassigned between the grid allocation and the fill")
    # The fill writes into the zeros in place; a scatter makes a new tensor.  Any other
    # reference to the zeros before the fill would see the difference.
    reads = [s for s, _ in flow.loads_of(grid) if grid_stmt.index < s.index < put.index]  # type: ignore[union-attr]
    if reads:
        raise Refuse(f"{grid} is read before the fill: the in-place write may be observed through it")
    owner = ctx.parent(ctx.parent(func))
    cls = owner if isinstance(owner, cst.ClassDef) else None
    for name in dict.fromkeys([unit_mask, expand[0].value, mask]):  # type: ignore[attr-defined]
        # in place anywhere, or through a call (a method of the file, a submodule, a function)
        # between the reshape, where the kept units are taken, and the fill
        written = written_in_place(ctx, func, name) or passed_to_a_writer(
            ctx, cls, func, name, before=put.line, after=reshape_stmt.line  # type: ignore[union-attr]
        )
        if written is not None:
            raise Refuse(f"{written}: the kept units may not be the ones the count states")
    # Between the reshape, where the kept units are taken, and the fill, the mask may be
    # written through an alias other code holds (`self.m = mask` anywhere in the files,
    # then a method writing `self.m`): only tensor arithmetic on local names runs there.
    body = list(getattr(ctx.parent(put.line), "body", ()))
    between = body[body.index(reshape_stmt.line) : body.index(put.line)]  # type: ignore[union-attr]
    untyped = _not_a_value(ctx, cls, func, between, put.line)
    for stmt in between:
        if not _only_tensor_arithmetic(stmt) or stmt is untyped:
            raise Refuse(
                f"`{code(stmt)}` at line {ctx.position(stmt).line} runs between the kept units' reshape and the fill:"
                " only tensor arithmetic on local names is proven not to write the mask there"
            )
    if free_names(flow, INDEX):
        raise Refuse(f"the function already uses the name {INDEX}")
    if not imports_module(ctx.module, "torch"):
        raise Refuse("the module does not `import torch`")
    taken = name_taken(ctx, TRUE_ROWS, "len", func=func)
    if taken:
        raise Refuse(f"the fill needs the name {taken}, which {func.name.value} or the module binds itself")

    index_stmt = ctx.statement(
        f"{INDEX} = {TRUE_ROWS}({unit_mask}, {units}.shape[0] * {units}.shape[1])\n",
        like=reshape_stmt.line,  # type: ignore[union-attr]
        replaces=False,
    )
    # The original raises when x's units are not the mask's True units in number; so
    # does this (on the device: no host sync), instead of filling other units.
    check_stmt = ctx.statement(
        f"torch._assert_async({unit_mask}.count_nonzero() == len({INDEX}))  # x fills all True units\n",
        like=reshape_stmt.line,  # type: ignore[union-attr]
        replaces=False,
    )
    # in place, as the original: x_dec stays the zeros tensor itself (not a view of a new
    # one, which autograd tells apart: a later `x_dec.detach_()`, or an in-place write in
    # grad mode to a grid made under no_grad, raises on a view); a view of the contiguous
    # zeros, flatten(0, 1) writes into them
    fill = ctx.statement(f"{grid}.flatten(0, 1).index_copy_(0, {INDEX}, {units}.flatten(0, 1))\n", like=line)
    anchor = reshape_stmt.line  # type: ignore[union-attr]
    module, helper = add_helper(ctx, func, TRUE_ROWS)
    return {
        anchor: lambda updated: cst.FlattenSentinel(
            [index_stmt.with_changes(leading_lines=[*updated.leading_lines, *index_stmt.leading_lines]),
             check_stmt, updated.with_changes(leading_lines=[])]
        ),
        line: fill,
        module: helper,
    }


# Tensor methods that make a new tensor or a view and write nothing; builtins that read.
_ARITHMETIC_METHODS = frozenset({
    "reshape", "view", "expand", "expand_as", "bool", "flatten", "unflatten", "unsqueeze", "squeeze", "float",
    "double", "half", "int", "long", "to", "contiguous", "repeat", "tile", "permute", "transpose", "logical_not",
    "size", "dim", "numel", "clone", "detach", "type_as", "view_as", "reshape_as",
})
_READING_BUILTINS = frozenset({"len", "tuple", "int"})


def _inside(node: cst.CSTNode, func: cst.FunctionDef) -> bool:
    return any(n is node for n in walk(func.body))


def _not_a_value(
    ctx, cls: Optional[cst.ClassDef], func: cst.FunctionDef, statements: List[cst.CSTNode], fill_line: cst.CSTNode,
) -> Optional[cst.CSTNode]:
    """The first of ``statements`` reading a name not typed a tensor or plain data (HR005's
    reader, ``masked_select._Reader``): an object's operator runs code (`mask_tokens =
    mask_tokens * scale`, `scale = self.grid_vis` earlier, its `__rmul__` moving the kept
    units: hunt 25a F3)."""
    from .masked_select import _Owner, _read_names, _Reader  # (masked_select reads this module's methods)

    # only the bindings before the fill (no loop around it runs later ones first)
    fill = statements[-1] if statements else None
    looped = fill is not None and any(isinstance(a, (cst.For, cst.While)) for a in ctx.ancestors(fill) if a is not func and _inside(a, func))
    reader = _Reader(ctx, _Owner(ctx, cls, True) if cls is not None else None, func, 0, proven := [], until=None if looped else fill_line)
    for stmt in statements:
        # (the called names are `_arithmetic`'s: the reading builtins, torch's, tensor methods)
        skip = {id(c.func) for c in walk(stmt) if isinstance(c, cst.Call)}
        skip |= {id(n) for a in walk(stmt) if isinstance(a, cst.AssignTarget) for n in walk(a.target)}
        if not all(reader.value(n) for n in _read_names(stmt) if id(n) not in skip) or proven:
            return stmt
    return None


def _only_tensor_arithmetic(stmt: cst.CSTNode) -> bool:
    """``stmt`` assigns to local names values made only of local names (not ``self``),
    constants, their metadata, and calls of :data:`_ARITHMETIC_METHODS`, of ``torch``
    functions that are not in place (no ``out=``), or of :data:`_READING_BUILTINS`."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Pass):
            continue
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            targets = [small.target]
        else:
            return False
        names = [e.value if isinstance(t, (cst.Tuple, cst.List)) else t for t in targets for e in getattr(t, "elements", [t])]
        if not all(is_name(n) for n in names) or not _arithmetic(small.value):  # type: ignore[arg-type]
            return False
    return True


def _arithmetic(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Name):
        return node.value != "self"
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString, cst.Ellipsis)):
        return True
    if isinstance(node, (cst.Tuple, cst.List)):
        return all(_arithmetic(e.value) for e in node.elements)
    if isinstance(node, cst.Attribute):
        return node.attr.value in ("shape", "ndim", "dtype", "device") and _arithmetic(node.value)
    if isinstance(node, cst.Subscript):
        return _arithmetic(node.value) and all(
            _arithmetic(e.slice.value) if isinstance(e.slice, cst.Index)
            else all(_arithmetic(p) for p in (e.slice.lower, e.slice.upper, e.slice.step) if p is not None)  # type: ignore[attr-defined]
            for e in node.slice
        )
    if isinstance(node, (cst.BinaryOperation, cst.Comparison, cst.BooleanOperation)):
        parts = [node.left, *[c.comparator for c in node.comparisons]] if isinstance(node, cst.Comparison) else [node.left, node.right]
        return all(_arithmetic(p) for p in parts)
    if isinstance(node, cst.UnaryOperation):
        return _arithmetic(node.expression)
    if isinstance(node, cst.IfExp):
        return all(_arithmetic(p) for p in (node.test, node.body, node.orelse))
    if isinstance(node, cst.Call):
        if any(a.keyword is not None and a.keyword.value == "out" for a in node.args) or not all(
            _arithmetic(a.value) for a in node.args
        ):
            return False
        func = node.func
        if isinstance(func, cst.Name):
            return func.value in _READING_BUILTINS
        if isinstance(func, cst.Attribute):
            if is_name(func.value, "torch"):
                return not func.attr.value.endswith("_")
            return func.attr.value in _ARITHMETIC_METHODS and _arithmetic(func.value)
    return False
