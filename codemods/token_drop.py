"""HR003: encoder token drop by a gather with a static kept count.

In the encoder forward it matches

    x = x[mask[..., None].tile(1, MU, C)].view(B, -1, C)       # or mask.unsqueeze(-1), .repeat

and emits (the function gains a ``num_kept=None`` argument):

    if num_kept is None:  # a mask from the caller: count it (one host sync)
        num_kept = int(mask[0].sum())
    kept_windows = mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
    x = x.view(x.shape[0], -1, mask.shape[-1], x.shape[-1]).gather(
        2, kept_windows[:, None, :, None].expand(-1, x.shape[1] // mask.shape[-1], -1, x.shape[-1])
    ).view(B, -1, C)

The index is expanded, not broadcast by `take_along_dim`: autograd then saves the
small (B, n) index instead of a materialised (B, T, n, C) int64 one.

In an MAE's ``forward_encoder``-like method, where the mask is made by
``self.get_random_mask(x, mask_ratio)`` and handed to ``super().forward(x, mask, ...)``,
it computes the kept count as a Python int and passes it on, when the base class's
``forward`` accepts ``num_kept`` (hiera.py may be rewritten separately).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import libcst as cst

from hiera_rewrite.rewrite import PlanContext, Replacement, Rewrite, register

from ._flow import (
    FunctionFlow,
    code,
    enclosing_function,
    enclosing_line,
    int_value,
    is_name,
    method_call,
    positional,
    single_assign,
    target_code,
)
from ._mask import (
    is_docstring,
    module_binds,
    ascending_true,
    free_names,
    imports_module,
    imports_typing_optional,
    last_top_level_import,
    with_keyword_param,
)

COUNT = "num_kept"
INDEX = "kept_windows"
FLAG = "__super_forward_takes_num_kept"


class Refuse(Exception):
    pass


@register
class EncoderTokenDrop(Rewrite):
    code = "HR003"
    name = "encoder-token-drop"
    message = "encoder token drop: boolean-mask indexing -> gather of the kept windows (static shape, no sync)"
    explanation = """
    Hiera drops masked mask units with
    `x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(B, -1, C)`.  Boolean
    indexing is a data-dependent `nonzero`: the host waits for the GPU to learn the
    output size, the backward is a slow index_put, torch.compile breaks the graph
    there and CUDA graphs cannot capture the step.

    The rewrite gathers instead: token n of the unrolled (B, N, C) sequence belongs
    to window n % num_windows at in-window position n // num_windows, so
    `x.view(B, T, num_windows, C)` gathered along the window axis with the kept
    windows in ascending order gives exactly the tokens, in exactly the order, of
    the boolean index.  The kept windows come from a stable argsort of `~mask`,
    sliced to a count that is a Python int, so every shape is static.

    The count: the encoder's forward gains an optional `num_kept` argument.  An MAE
    that makes the mask with `get_random_mask(x, mask_ratio)` knows the count as a
    Python int (`int(num_windows * (1 - mask_ratio))`, get_random_mask's own
    formula) and passes it, so the training step has no sync at all.  When a caller
    passes its own mask and no count, it is counted from the mask
    (`int(mask[0].sum())`, one host sync; the mask must keep the same number of
    units in every row, as upstream already requires).  The MAE passes the count
    only when the encoder's forward accepts it, so a rewritten hiera_mae.py works
    with an original hiera.py and the reverse.
    """

    def plan(self, ctx: PlanContext) -> None:
        finder = _Finder()
        ctx.index.visit(finder)
        for node, via in finder.drops + _drops_through_names(ctx, finder.tile_lines):
            try:
                edits = _token_drop(ctx, node, via)
            except Refuse as reason:
                ctx.refuse(node, str(reason))
                continue
            ctx.add_site(node, edits)
        for call in finder.super_forwards:
            try:
                edits = _mae_count(ctx, call)
            except Refuse as reason:
                if str(reason):
                    ctx.refuse(call, str(reason))
                continue
            ctx.add_site(call, edits, "MAE encoder: pass the kept count of get_random_mask as a Python int")
        for call in finder.submodule_masks:
            encoder = code(call.func.value)  # type: ignore[attr-defined]
            ctx.refuse(
                call,
                f"the mask comes from {encoder}.get_random_mask: the encoder is a submodule (composition, not a "
                f"base class), so its forward's signature is unknown here; the kept count is not passed and "
                f"{encoder} counts the mask itself (one host sync)",
            )


class _Finder(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.drops: List[Tuple[cst.Subscript, Optional[cst.SimpleStatementLine]]] = []
        self.tile_lines: List[cst.SimpleStatementLine] = []
        self.super_forwards: List[cst.Call] = []
        self.submodule_masks: List[cst.Call] = []

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            if _unit_mask(node.slice[0].slice.value) is not None:
                self.drops.append((node, None))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        assign = single_assign(node)
        if assign is not None and is_name(assign[0]) and _unit_mask(assign[1]) is not None:
            self.tile_lines.append(node)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "forward"
            and isinstance(func.value, cst.Call)
            and is_name(func.value.func, "super")
        ):
            self.super_forwards.append(node)
        found = method_call(node, "get_random_mask")
        if found is not None and isinstance(found[0], cst.Attribute) and is_name(found[0].value, "self"):
            self.submodule_masks.append(node)


def _drops_through_names(ctx: PlanContext, tile_lines: List[cst.SimpleStatementLine]):
    """`keep = mask[..., None].tile(1, MU, C)` then `x[keep]` in the same function."""
    found: List[Tuple[cst.Subscript, Optional[cst.SimpleStatementLine]]] = []
    for line in tile_lines:
        func = enclosing_function(ctx, line)
        if func is None:
            continue
        name = single_assign(line)[0].value  # type: ignore[index, attr-defined]

        class _Uses(cst.CSTVisitor):
            def visit_Subscript(self, node: cst.Subscript) -> None:
                if (
                    len(node.slice) == 1
                    and isinstance(node.slice[0].slice, cst.Index)
                    and is_name(node.slice[0].slice.value, name)
                ):
                    found.append((node, line))

        ctx.index.visit(_Uses(), func.body)
    return found


def _unit_mask(index: cst.BaseExpression) -> Optional[Tuple[str, cst.BaseExpression, cst.BaseExpression]]:
    """Match `mask[..., None].tile(1, MU, C)`: returns (mask name, MU, C)."""
    found = method_call(index, "tile", "repeat")
    if found is None:
        return None
    receiver, call = found
    args = positional(call)
    if args is None or len(args) != 3 or int_value(args[0]) != 1:
        return None
    base = None
    if isinstance(receiver, cst.Subscript) and len(receiver.slice) == 2:
        first, second = (s.slice for s in receiver.slice)
        if (
            isinstance(first, cst.Index)
            and isinstance(first.value, cst.Ellipsis)
            and isinstance(second, cst.Index)
            and is_name(second.value, "None")
        ):
            base = receiver.value
    unsqueeze = method_call(receiver, "unsqueeze")
    if unsqueeze is not None:
        dims = positional(unsqueeze[1])
        if dims is not None and len(dims) == 1 and int_value(dims[0]) in (-1, 2):
            base = unsqueeze[0]
    if base is None or not is_name(base):
        return None
    return base.value, args[1], args[2]  # type: ignore[attr-defined]


def _token_drop(
    ctx: PlanContext, node: cst.Subscript, via: Optional[cst.SimpleStatementLine]
) -> Dict[cst.CSTNode, Replacement]:
    index = node.slice[0].slice.value  # type: ignore[attr-defined]
    mask, _, _ = _unit_mask(index if via is None else single_assign(via)[1])  # type: ignore[misc, index]
    func = enclosing_function(ctx, node)
    line = enclosing_line(ctx, node)
    if func is None or line is None:
        raise Refuse("the boolean token drop is not a statement inside a function")
    flow = FunctionFlow.of(func)
    if via is not None:
        name = index.value  # type: ignore[attr-defined]
        made = flow.stmt_of(via)
        if (
            [s.index for s in flow.assigning(name)] != [made.index]
            or flow.compound_assigned.get(name)
            or made.index >= flow.stmt_of(line).index
        ):
            raise Refuse(f"{name} is not the unit mask made once before the token drop")
    assign = single_assign(line)
    view = method_call(assign[1], "view", "reshape") if assign else None
    if assign is not None and assign[1] is node:
        # `x = x[m]` then `x = x.view(B, -1, C)`: the flat result, viewed by the next
        # statement.  Without that view, masks keeping different counts per row are
        # valid input and a gather sized by one row would differ: refuse.
        view_args = None
        block = ctx.parent(line)
        siblings = list(getattr(block, "body", ()))
        after = siblings[siblings.index(line) + 1] if line in siblings[:-1] else None
        follow = single_assign(after) if isinstance(after, cst.SimpleStatementLine) else None
        then = method_call(follow[1], "view", "reshape") if follow else None
        if not (
            is_name(assign[0])
            and then is not None
            and is_name(then[0], assign[0].value)  # type: ignore[attr-defined]
            and positional(then[1]) is not None
            and len(positional(then[1])) == 3  # type: ignore[arg-type]
        ):
            raise Refuse("the boolean token drop is not followed by `.view(B, -1, C)`: rows may keep different counts")
    elif view is None or view[0] is not node:
        raise Refuse("the boolean token drop is not `x = x[mask...]` or `x = x[mask...].view(B, -1, C)`")
    else:
        view_args = positional(view[1])
        if view_args is None or len(view_args) != 3:
            raise Refuse("the token drop's view is not (B, -1, C)")
    tokens = node.value
    if not is_name(tokens):
        raise Refuse("the tokens indexed by the mask are not a local name")
    if mask not in flow.params or flow.assigning(mask):
        raise Refuse(f"{mask} is not the function's own mask argument (reassigned or not a parameter)")
    clash = free_names(flow, COUNT, INDEX)
    if clash:
        raise Refuse(f"the function already uses the name(s) {', '.join(clash)}")
    if not imports_module(ctx.module, "torch"):
        raise Refuse("the module does not `import torch`")

    x = tokens.value  # type: ignore[attr-defined]
    target = target_code(line)
    new_lines = [
        f"if {COUNT} is None:\n"
        f"    # a mask from the caller: count its kept units (one host sync)\n"
        f"    {COUNT} = int({mask}[0].sum())\n",
        f"{INDEX} = {ascending_true(mask, COUNT)}\n",
        f"{target} {x}.view({x}.shape[0], -1, {mask}.shape[-1], {x}.shape[-1]).gather("
        f"2, {INDEX}[:, None, :, None].expand(-1, {x}.shape[1] // {mask}.shape[-1], -1, {x}.shape[-1]))"
        + (".flatten()" if view_args is None else f".view({', '.join(code(a) for a in view_args)})")
        + "\n",
    ]
    guard, index, drop = (ctx.statement(src, like=line) for src in new_lines)
    # The comments above the old statement go above the first new one; its
    # trailing comment stays on the statement that replaces it.
    index = index.with_changes(leading_lines=[], trailing_whitespace=cst.TrailingWhitespace())
    statements = [guard, index, drop.with_changes(leading_lines=[])]
    annotation = "Optional[int]" if imports_typing_optional(ctx.module) else None
    return {line: cst.FlattenSentinel(statements), func: with_keyword_param(ctx, func, COUNT, annotation)}


def _mae_count(ctx: PlanContext, call: cst.Call) -> Dict[cst.CSTNode, Replacement]:
    """`super().forward(x, mask, ...)` after `if mask is None: mask = self.get_random_mask(x, r)`."""
    func = enclosing_function(ctx, call)
    line = enclosing_line(ctx, call)
    if func is None or line is None or len(call.args) < 2:
        raise Refuse("")
    mask_arg = call.args[1]
    if mask_arg.keyword is not None or mask_arg.star or not is_name(mask_arg.value):
        raise Refuse("")
    mask = mask_arg.value.value  # type: ignore[attr-defined]
    if any(a.star or a.keyword is not None and a.keyword.value == COUNT for a in call.args):
        raise Refuse("")
    flow = FunctionFlow.of(func)
    generate = _random_mask_guard(ctx, func, mask)
    if generate is None or not is_name(generate[2], "self"):
        raise Refuse("")
    guard, ratio, _ = generate
    if ratio not in flow.params or flow.assigning(ratio) or flow.compound_assigned.get(ratio):
        raise Refuse(f"the mask ratio {ratio} is not an unmodified argument of {func.name.value}")
    made = flow.stmt_of(guard.body.body[0])  # type: ignore[union-attr, arg-type]
    if [s.index for s in flow.assigning(mask)] != [made.index] or flow.compound_assigned.get(mask):
        raise Refuse(f"{mask} is assigned elsewhere in {func.name.value}: the kept count may not be get_random_mask's")
    if ctx.position(call).line <= ctx.position(guard).line:
        raise Refuse("the encoder call does not come after the random mask is made")
    cls = next((a for a in ctx.ancestors(func) if isinstance(a, cst.ClassDef)), None)
    if cls is None or not cls.bases or not is_name(cls.bases[0].value) or ctx.parent(ctx.parent(func)) is not cls:
        raise Refuse("the MAE's encoder base class is not a plain name")
    base = cls.bases[0].value.value  # type: ignore[attr-defined]
    if _defines(cls, "get_random_mask"):
        raise Refuse("the MAE overrides get_random_mask: its kept count is not provably upstream's")
    unknown = _same_file_random_mask(ctx, base)
    if unknown:
        raise Refuse(unknown)
    if not (imports_module(ctx.module, "math") and imports_module(ctx.module, "torch")):
        raise Refuse("the module does not `import math` and `import torch`")
    clash = free_names(flow, COUNT)
    if clash:
        raise Refuse(f"{func.name.value} already uses the name {COUNT}")
    if _defines(cls, FLAG):
        raise Refuse("")

    edits: Dict[cst.CSTNode, Replacement] = {}
    count_stmt = ctx.statement(
        f"# the kept count of get_random_mask, as a Python int: no host sync\n"
        f"{COUNT} = int(math.prod(self.mask_spatial_shape) * (1 - {ratio}))\n",
        like=guard.body.body[-1],  # type: ignore[arg-type]
        replaces=False,
    )
    body = guard.body.with_changes(body=[*guard.body.body, count_stmt])  # type: ignore[union-attr]
    init = cst.parse_statement(f"{COUNT} = None\n").with_changes(leading_lines=guard.leading_lines)
    edits[guard] = cst.FlattenSentinel([init, guard.with_changes(body=body, leading_lines=[])])

    assign = single_assign(line)
    call_code = code(call)
    new_call = call_code[:-1].rstrip().rstrip(",") + f", **({{{COUNT!r}: {COUNT}}} if self.{FLAG} else {{}}))"
    if assign is not None:
        new_line = ctx.statement(f"{target_code(line)} {new_call}\n", like=line)
    elif len(line.body) == 1 and isinstance(line.body[0], (cst.Expr, cst.Return)):
        keyword = "return " if isinstance(line.body[0], cst.Return) else ""
        new_line = ctx.statement(f"{keyword}{new_call}\n", like=line)
    else:
        raise Refuse("the encoder call is not a plain assignment, expression or return")
    if not (
        isinstance(line.body[0], cst.Return) and line.body[0].value is call
        or assign is not None and assign[1] is call
        or len(line.body) == 1 and isinstance(line.body[0], cst.Expr) and line.body[0].value is call
    ):
        raise Refuse("the encoder call is part of a larger expression")
    edits[line] = new_line

    # A class attribute with a private (mangled) name: each rewritten MAE class asks
    # its own base, and a subclass cannot shadow it.
    first = cls.body.body[0]  # type: ignore[union-attr]
    has_doc = is_docstring(first) and len(cls.body.body) > 1  # type: ignore[union-attr]
    anchor = cls.body.body[1] if has_doc else first  # type: ignore[union-attr]
    flag = ctx.statement(
        f"# hiera.py may be rewritten separately: pass {COUNT} only if {base}.forward takes it.\n"
        f'{FLAG} = "{COUNT}" in inspect.signature({base}.forward).parameters\n',
        like=anchor,  # type: ignore[arg-type]
        replaces=False,
    )

    def add_flag(updated: cst.ClassDef) -> cst.ClassDef:
        statements = list(updated.body.body)  # type: ignore[union-attr]
        at = 1 if has_doc else 0
        following = statements[at]
        statements[at:at + 1] = [
            flag.with_changes(
                leading_lines=[*(ln for ln in following.leading_lines if ln.comment is None), *flag.leading_lines]
            ),
            following.with_changes(
                leading_lines=[
                    *([cst.EmptyLine(indent=False)] if isinstance(following, (cst.FunctionDef, cst.ClassDef)) else []),
                    *(ln for ln in following.leading_lines if ln.comment is not None),
                ]
            ),
        ]
        return updated.with_changes(body=updated.body.with_changes(body=statements))

    edits[cls] = add_flag
    # The flag is computed when the class body runs: `inspect` must be imported above it.
    top = next((a for a in [cls, *ctx.ancestors(cls)] if ctx.parent(a) is ctx.module), None)
    above = list(ctx.module.body[: ctx.module.body.index(top)]) if top is not None else []
    if imports_module(ctx.module, "inspect"):
        if module_binds(ctx.module, "inspect") not in above:
            raise Refuse("`import inspect` comes after the MAE class, which reads it when the class is created")
    else:
        anchor_import = last_top_level_import(cst.Module(body=above))
        if anchor_import is None:
            raise Refuse("no top-level import above the MAE class to add `import inspect` after")
        edits[anchor_import] = lambda updated: cst.FlattenSentinel([updated, cst.parse_statement("import inspect\n")])
    return edits


def _assigned_names(stmt: cst.CSTNode) -> List[cst.CSTNode]:
    if isinstance(stmt, cst.SimpleStatementLine):
        return [t.target for s in stmt.body if isinstance(s, cst.Assign) for t in s.targets]
    return []


def _defines(cls: cst.ClassDef, name: str) -> bool:
    for stmt in cls.body.body:  # type: ignore[union-attr]
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
            return True
        if isinstance(stmt, cst.SimpleStatementLine) and any(code(t) == name for t in _assigned_names(stmt)):
            return True
    return False



def _same_file_random_mask(ctx: PlanContext, base: str) -> Optional[str]:
    """When the base class (or a class it derives from) is defined in this file, its
    get_random_mask must keep `int(math.prod(self.mask_spatial_shape) * (1 - ratio))`
    units, the count the MAE passes.  A base imported from another file is upstream's
    contract (hiera.py's get_random_mask); it cannot be checked here."""
    classes = {s.name.value: s for s in ctx.module.body if isinstance(s, cst.ClassDef)}
    seen = set()
    while base in classes and base not in seen:
        seen.add(base)
        cls = classes[base]
        method = next(
            (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "get_random_mask"),  # type: ignore[union-attr]
            None,
        )
        if method is not None:
            return None if _upstream_random_mask(method) else (
                f"{base}.get_random_mask does not keep int(math.prod(self.mask_spatial_shape) * (1 - ratio)) "
                "units as upstream does: the kept count is not known"
            )
        if not cls.bases or not is_name(cls.bases[0].value):
            return f"{base}'s base class is not a plain name: its get_random_mask cannot be checked"
        base = cls.bases[0].value.value  # type: ignore[attr-defined]
    return None


def _upstream_random_mask(func: cst.FunctionDef) -> bool:
    """`n = math.prod(self.mask_spatial_shape)`, `k = int(n * (1 - ratio))` with ratio the
    second parameter, `mask[:, :k] = 1` and k not changed elsewhere."""
    params = [p.name.value for p in func.params.params]
    if len(params) != 3 or isinstance(func.params.star_arg, (cst.Param, cst.ParamStar)) or func.params.kwonly_params:
        return False
    flow = FunctionFlow.of(func)
    ratio = params[2]
    if flow.assigning(ratio) or flow.compound_assigned:
        return False
    windows = keep = None
    for stmt in flow.stmts:
        assign = single_assign(stmt.line) if stmt.line.body else None
        if assign is None or not is_name(assign[0]):
            continue
        value = code(assign[1]).replace(" ", "")
        if value == "math.prod(self.mask_spatial_shape)":
            windows = assign[0].value  # type: ignore[attr-defined]
        elif windows and value == f"int({windows}*(1-{ratio}))":
            keep = assign[0].value  # type: ignore[attr-defined]
    if windows is None or keep is None or len(flow.assigning(keep)) != 1 or len(flow.assigning(windows)) != 1:
        return False
    slices = [
        s for s in flow.stmts if s.line.body and re.fullmatch(rf"\w+\[:,:{keep}\]=1", code(s.line).replace(" ", ""))
    ]
    return len(slices) == 1


def _random_mask_guard(
    ctx: PlanContext, func: cst.FunctionDef, mask: str
) -> Optional[Tuple[cst.If, str, cst.BaseExpression]]:
    """Find `if mask is None: mask = self.get_random_mask(x, ratio)` at the top level of ``func``."""
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
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
            return None
        assign = single_assign(body[0])
        if assign is None or not is_name(assign[0], mask):
            return None
        found = method_call(assign[1], "get_random_mask")
        if found is None:
            return None
        args = positional(found[1])
        if args is None or len(args) != 2 or not is_name(args[1]):
            return None
        return stmt, args[1].value, found[0]  # type: ignore[attr-defined]
    return None
