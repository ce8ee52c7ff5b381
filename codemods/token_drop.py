"""HR003: encoder token drop by an index_select with a static kept count.

In the encoder forward it matches

    x = x[mask[..., None].tile(1, MU, C)].view(B, -1, C)       # or mask.unsqueeze(-1), .repeat

and emits (the function gains ``num_kept=None``; ``kept_tokens`` goes above the class):

    x = kept_tokens(x, mask, num_kept).view(B, -1, C)

``kept_tokens(x, mask, None)`` is the original boolean selection (a caller's mask, ragged
rows allowed); with a count, an ``index_select`` of x's flat rows b*N + t*#MUs + j for
the kept units j of each row (a stable argsort of ``~mask`` sliced to the count): the
same rows in the same order, and autograd saves only the int64 row index, not x.

Where the same class defines upstream's ``get_random_mask`` (codemods/_random_mask.py
proves the count its body keeps), the count becomes a method of its own that
get_random_mask calls:

    len_keep = self.kept_mask_units(x, mask_ratio)      # was int(num_windows * (1 - mask_ratio))

An MAE's ``forward_encoder`` that makes the mask with ``self.get_random_mask(x, r)``
passes ``num_kept=self.kept_mask_units(x, r)`` to ``super().forward`` when
``takes_kept_count`` says the forward super() reaches is the base's, rewritten, and
get_random_mask is the base's own: a subclass overriding either gets upstream's call.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import enclosing_function, enclosing_line
from hiera_rewrite.rewrite import NotThisIdiom, PlanContext, Refuse, Replacement, Rewrite, register

from ._match import code, int_value, is_name, method_call, positional, single_assign
from ._random_mask import get_random_mask_call, kept_count, random_mask_guard
from ._mask import (
    COUNT_METHOD,
    KEPT_TOKENS,
    MASK_CONTRACT,
    TAKES_COUNT,
    add_helper,
    class_reference,
    name_taken,
    free_names,
    imports_module,
    imports_typing_optional,
    is_bool_cast,
    line_with,
    with_argument,
    with_keyword_param,
    written_in_place,
)

COUNT = "num_kept"
TAKEN = "counted"  # whether the base's forward takes the count (takes_kept_count)
ARGS = "kept"  # the MAE encoder's keyword arguments for super().forward: the count, or none


@register
class EncoderTokenDrop(Rewrite):
    code = "HR003"
    name = "encoder-token-drop"
    message = "encoder token drop: boolean-mask indexing -> index_select of the kept windows (static shape, no sync)"
    explanation = """
    Hiera drops masked mask units with
    `x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(B, -1, C)`.  Boolean
    indexing is a data-dependent `nonzero`: the host waits for the GPU to learn the
    output size, the backward is a slow index_put, torch.compile breaks the graph
    there and CUDA graphs cannot capture the step.

    Token n of the unrolled (B, N, C) sequence belongs to mask unit n % #MUs at
    in-unit position n // #MUs, so with the kept units of each row in ascending
    order, the rows b*N + t*#MUs + j of x flattened to (B*N, C) are exactly the
    tokens, in exactly the order, of the boolean index.  The rewrite selects them
    with `index_select` in a helper it puts above the class, `kept_tokens(x, mask,
    num_kept)`, and keeps the original `.view(...)`.  The kept units come from a
    stable argsort of `~mask`, sliced to `num_kept`, a Python int: every shape is
    static.  Without a count (a mask from a caller, which may keep different counts
    per row) the helper runs the original boolean selection.

    The count is kept at its source: get_random_mask's `len_keep = ...` becomes
    `len_keep = self.kept_mask_units(x, mask_ratio)`, an ordinary method made of the
    statements of get_random_mask's own body that compute it (a fork's `round(...)`
    included).  A subclass that changes the count overrides that method, and
    get_random_mask follows.  The MAE's forward_encoder passes it to the token drop
    only while `takes_kept_count(type(self), MAE, Hiera)` holds: Hiera's file is
    rewritten too (hiera_mae.py's rewrite stands alone over an original hiera.py),
    super().forward reaches Hiera.forward (no class between overrides it), and
    get_random_mask is Hiera's own (an override may keep another count).  That check
    is evaluated once per class, outside torch.compile's graph.
    """ + MASK_CONTRACT

    def plan(self, ctx: PlanContext) -> None:
        finder = _Finder()
        ctx.visit(finder)
        for node, via in finder.drops + _drops_through_names(ctx, finder.tile_lines):
            if _in_helper(ctx, node):
                continue  # kept_tokens' own fallback (this rewrite's output)
            edits = ctx.attempt(node, lambda: _token_drop(ctx, node, via))
            if edits is not None:
                ctx.add_site(node, edits)
                func = enclosing_function(ctx, node)
                method = _count_method(ctx, func) if func is not None else None
                if method is not None:
                    ctx.add_site(
                        method[0], method[1],
                        f"get_random_mask: its kept count as a method, {COUNT_METHOD} (callers drop tokens with static shapes)",
                    )
        for call in finder.super_forwards:
            edits = ctx.attempt(call, lambda: _mae_count(ctx, call))
            if edits is not None:
                ctx.add_site(call, edits, "MAE encoder: pass the kept count of get_random_mask to the token drop (a Python int)")
        for call in finder.submodule_masks:
            encoder = code(call.func.value)  # type: ignore[attr-defined]
            ctx.refuse(
                call,
                f"the mask comes from {encoder}.get_random_mask: the encoder is a submodule (composition, not a "
                f"base class), so its forward's signature is unknown here; the kept count is not passed and "
                f"{encoder} counts the mask itself (one host sync)",
            )


def _in_helper(ctx: PlanContext, node: cst.CSTNode) -> bool:
    func = enclosing_function(ctx, node)
    return func is not None and func.name.value == KEPT_TOKENS and ctx.parent(func) is ctx.module


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

        ctx.visit(_Uses(), func.body)
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
    flow = ctx.flow(func)
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
    casts = [st for st in flow.assigning(mask) if is_bool_cast(st.line, mask)]
    if mask not in flow.params or len(casts) != len(flow.assigning(mask)):
        here = flow.stmt_of(line).index
        bindings = [st for st in flow.assigning(mask) if st.index < here and st.line.body and st not in casts]
        if bindings:
            # e.g. `mask = mask_from_indices(ids_keep, n).bool()`: True once per distinct
            # index, so ids_keep.shape[1] per row only where no row repeats one;
            # `mask = 1 - mask` keeps n minus a count the function is not given
            last = bindings[-1].line
            raise Refuse(
                f"{mask} is rebuilt by `{code(last)}` at line {ctx.position(last).line}: how many units it keeps"
                " in each row is not proven (not the function's own mask argument)"
            )
        raise Refuse(f"{mask} is not the function's own mask argument (reassigned or not a parameter)")
    written = written_in_place(ctx, func, mask)
    if written is not None:
        raise Refuse(f"{written}: how many units it keeps in each row is not proven")
    clash = free_names(flow, COUNT)
    if clash:
        raise Refuse(f"the function already uses the name(s) {', '.join(clash)}")
    if not imports_module(ctx.module, "torch"):
        raise Refuse("the module does not `import torch`")
    taken = name_taken(ctx, KEPT_TOKENS)
    if taken:
        raise Refuse(f"the token drop needs the name {taken}, which the module binds itself")

    x = tokens.value  # type: ignore[attr-defined]
    selected = cst.parse_expression(f"{KEPT_TOKENS}({x}, {mask}, {COUNT})")
    edits: Dict[cst.CSTNode, Replacement] = {
        line: line_with(ctx, line, {node: selected}),
        func: with_keyword_param(ctx, func, COUNT, "Optional[int]" if imports_typing_optional(ctx.module) else None),
    }
    if via is not None and len(flow.loads_of(index.value)) == 1:  # type: ignore[attr-defined]
        edits[via] = cst.RemovalSentinel.REMOVE  # the unit mask, now made by kept_tokens
    module, helper = add_helper(ctx, func, KEPT_TOKENS)
    edits[module] = helper
    return edits


def _count_method(ctx: PlanContext, forward: cst.FunctionDef) -> Optional[Tuple[cst.FunctionDef, Dict[cst.CSTNode, Replacement]]]:
    """Where the class of ``forward`` (the token drop's) defines get_random_mask and its
    body proves the count it keeps in every row (codemods/_random_mask.py), the count
    becomes a method of its own, ``kept_mask_units``, which get_random_mask calls:

        len_keep = self.kept_mask_units(x, mask_ratio)   # was: int(num_windows * (1 - mask_ratio))

    A subclass that changes the count overrides it; an MAE passes it to the drop
    (``takes_kept_count``).  A count that is not read is reported; the drop then
    keeps the boolean path for the model's own masks."""
    block = ctx.parent(forward)
    cls = ctx.parent(block) if block is not None else None
    if not isinstance(cls, cst.ClassDef):
        return None
    body = list(cls.body.body)  # type: ignore[union-attr]
    func = next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "get_random_mask"), None)
    if func is None or any(isinstance(s, cst.FunctionDef) and s.name.value == COUNT_METHOD for s in body):
        return None
    try:
        if ctx.skipped_by(func) is not None:
            raise Refuse(f"left alone: `# hiera-rewrite: skip` on {ctx.skipped_by(func)}")
        count = kept_count(ctx, func)
    except Refuse as exc:
        ctx.refuse(
            func,
            f"the kept count of {cls.name.value}.get_random_mask is not read: {exc.reason}; "
            "token drops of its masks stay boolean indexing",
        )
        return None
    edits: Dict[cst.CSTNode, Replacement] = {}
    params = [p.name.value for p in func.params.params]
    call = f"self.{COUNT_METHOD}({', '.join(params[1:])})"
    flow = ctx.flow(func)
    keep = count.keep_node
    bound = [s for s in flow.assigning(code(keep))] if is_name(keep) else []
    if len(bound) == 1 and single_assign(bound[0].line) is not None:
        line = bound[0].line
        edits[line] = ctx.statement(f"{code(keep)} = {call}\n", like=line)
    else:
        edits[keep] = cst.parse_expression(call)
    statements, result = list(count.statements), count.keep
    own = [st for st in statements if is_name(keep) and st.startswith(f"{code(keep)} = ")]
    if own:
        statements.remove(own[0])
        result = own[0][len(f"{code(keep)} = "):]
    method = ctx.statement(
        f"def {COUNT_METHOD}({count.params}) -> int:\n"
        + "".join(f"    {st}\n" for st in statements)
        + f"    return {result}\n",
        like=func,
        replaces=False,
    ).with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    edits[func] = lambda updated: cst.FlattenSentinel([updated, method])
    reads = sorted({r[len("self."):] for st in [*statements, result] for r in _reads_of(cst.parse_expression(st.split(" = ", 1)[-1])) if r.startswith("self.")})
    _python_ints(ctx, cls, reads, edits)
    return func, edits


def _python_ints(ctx: PlanContext, cls: cst.ClassDef, reads: Sequence[str], edits: Dict[cst.CSTNode, Replacement]) -> None:
    """The attributes the kept count reads (``self.mask_spatial_shape``), followed back
    through the class's ``__init__``: a value made by numpy there (a fork's
    ``mask_unit_size = tuple(np.prod(q_strides, axis=0))``) holds numpy integers, which
    torch.compile traces as data, so the count is no static int and the step does not
    compile fullgraph (the original's neither).  The fix is at the source: that
    statement makes the same values as Python numbers (``.item()`` of each element:
    exactly the numpy scalar's value).  Only ``tuple(<numpy call>)`` and ``list(...)``
    are converted; any other numpy source is reported."""
    init = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)  # type: ignore[union-attr]
    if init is None or not reads:
        return
    flow = ctx.flow(init)
    seen: Set[str] = set()
    todo = [f"self.{r}" for r in reads]
    while todo:
        target = todo.pop()
        if target in seen:
            continue
        seen.add(target)
        for stmt in flow.stmts:
            assign = single_assign(stmt.line) if stmt.line.body else None
            if assign is None:
                continue
            value = _value_for(assign, target)
            if value is None:
                continue
            source = _numpy_call(ctx, value)
            if source is not None:
                wrapper = value.func.value if isinstance(value, cst.Call) and is_name(value.func) else None  # type: ignore[attr-defined]
                if wrapper in ("tuple", "list") and len(value.args) == 1 and value.args[0].value is source and not name_taken(ctx, wrapper):  # type: ignore[attr-defined]
                    made = f"{wrapper}(v.item() for v in {code(source)})" if wrapper == "tuple" else f"[v.item() for v in {code(source)}]"
                    edits[stmt.line] = line_with(ctx, stmt.line, {value: cst.parse_expression(made)})
                else:
                    ctx.refuse(
                        stmt.line,
                        f"`{code(stmt.line)}` makes {target} with numpy: the kept count is traced as data under"
                        " torch.compile (no fullgraph); make it Python numbers (`.tolist()`)",
                    )
                continue
            todo += _reads_of(value)


def _value_for(assign, target: str) -> Optional[cst.BaseExpression]:
    """The expression an assignment binds to ``target`` (`a, b = x, y` paired)."""
    left, right = assign
    if code(left) == target:
        return right
    if isinstance(left, cst.Tuple) and isinstance(right, cst.Tuple) and len(left.elements) == len(right.elements):
        for l, r in zip(left.elements, right.elements):
            if code(l.value) == target:
                return r.value
    return None


def _numpy_call(ctx: PlanContext, value: cst.BaseExpression) -> Optional[cst.Call]:
    """The numpy call making ``value``: the value itself or the one argument of a
    ``tuple(...)``/``list(...)`` around it."""
    inner = value.args[0].value if isinstance(value, cst.Call) and is_name(value.func) and value.func.value in ("tuple", "list") and len(value.args) == 1 else value  # type: ignore[attr-defined]
    if isinstance(inner, cst.Call) and any(q.split(".")[0] == "numpy" for q in ctx.qualified_names(inner.func)):
        return inner
    return None


def _reads_of(value: cst.BaseExpression) -> List[str]:
    """The names and ``self.<attr>`` chains ``value`` reads."""
    found: List[str] = []

    class _Reads(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            if is_name(node.value, "self"):
                found.append(code(node))
                return False
            return True

        def visit_Name(self, node: cst.Name) -> None:
            found.append(node.value)

    value.visit(_Reads())
    return found


def _mae_count(ctx: PlanContext, call: cst.Call) -> Dict[cst.CSTNode, Replacement]:
    """`super().forward(x, mask, ...)` after `if mask is None: mask = self.get_random_mask(x, r)`."""
    func = enclosing_function(ctx, call)
    line = enclosing_line(ctx, call)
    if func is None or line is None or len(call.args) < 2:
        raise NotThisIdiom()
    mask_arg = call.args[1]
    made_here = get_random_mask_call(ctx, func)
    if mask_arg.keyword is not None or mask_arg.star or not is_name(mask_arg.value):
        if made_here is not None and not mask_arg.star:
            if mask_arg.keyword is not None:
                passed = f"passes the mask as `{mask_arg.keyword.value}={code(mask_arg.value)}`, not as the second positional argument"
            else:
                passed = f"passes `{code(mask_arg.value)}` as the mask, not a plain name"
            raise Refuse(
                f"the encoder call {passed}: the kept count is not passed (the encoder counts the mask itself:"
                " one host sync)"
            )
        raise NotThisIdiom()
    mask = mask_arg.value.value  # type: ignore[attr-defined]
    if any(a.star or a.keyword is not None and a.keyword.value == COUNT for a in call.args):
        raise NotThisIdiom()  # rewritten already (`**kept`)
    flow = ctx.flow(func)
    made = random_mask_guard(ctx, func, mask)
    if made is None and made_here is not None:
        made_line = enclosing_line(ctx, made_here)
        raise Refuse(
            f"{mask} is made by `{code(made_line or made_here)}` at line {ctx.position(made_here).line}, not by"
            f" `if {mask} is None: {mask} = self.get_random_mask(x, mask_ratio)`: the kept count is not passed"
            " (the encoder counts the mask itself: one host sync)"
        )
    if made is None or not is_name(made.owner, "self"):
        raise NotThisIdiom()
    guard = made.guard
    if not made.once:
        raise Refuse(f"{mask} is assigned elsewhere in {func.name.value}: the kept count may not be get_random_mask's")
    written = written_in_place(ctx, func, mask)
    if written is not None:
        raise Refuse(f"{written}: the kept count may not be get_random_mask's; it is not passed")
    if ctx.position(call).line <= ctx.position(guard).line:
        raise Refuse("the encoder call does not come after the random mask is made")
    cls = next((a for a in ctx.ancestors(func) if isinstance(a, cst.ClassDef)), None)
    if cls is None or not cls.bases or not is_name(cls.bases[0].value) or ctx.parent(ctx.parent(func)) is not cls:
        raise Refuse("the MAE's encoder base class is not a plain name")
    base = cls.bases[0].value.value  # type: ignore[attr-defined]
    if not imports_module(ctx.module, "torch"):
        raise Refuse("the module does not `import torch`")
    clash = free_names(flow, ARGS, TAKEN)
    if clash:
        raise Refuse(f"{func.name.value} already uses the name(s) {', '.join(clash)}")

    mask_args = made.args
    if not all(
        is_name(a) and a.value != mask or isinstance(a, cst.Attribute) and is_name(a.value, "self")  # type: ignore[attr-defined]
        for a in mask_args
    ):
        raise Refuse("get_random_mask is not called on plain names or self's attributes: its count would evaluate them again")
    owner = class_reference(ctx, cls)
    if owner is None:
        raise Refuse(f"the class name {cls.name.value} is bound again in the module: the encoder check needs it")
    taken = name_taken(ctx, "type", "super", "hasattr", TAKES_COUNT)
    if taken:
        raise Refuse(f"the count needs the name {taken}, which the module binds itself")
    assign = single_assign(line)
    if not (
        isinstance(line.body[0], cst.Return) and line.body[0].value is call
        or assign is not None and assign[1] is call
        or len(line.body) == 1 and isinstance(line.body[0], cst.Expr) and line.body[0].value is call
    ):
        raise Refuse("the encoder call is part of a larger expression")

    args = ", ".join(code(a) for a in mask_args)  # type: ignore[union-attr]
    # straight-line (no branch): what runs is the same whether or not the file's base
    # is rewritten, so --verify of this file alone runs (and proves) each line
    counted = [
        ctx.statement(f"{TAKEN} = {TAKES_COUNT}(type(self), {owner}, {base})\n", like=guard.body.body[0], replaces=False),  # type: ignore[arg-type]
        ctx.statement(
            f'{ARGS} = {{"{COUNT}": self.{COUNT_METHOD}({args})}} if {TAKEN} else {{}}\n',
            like=guard.body.body[0],  # type: ignore[arg-type]
            replaces=False,
        ),
    ]
    # right after the mask is made, from the values it was made with: the block may
    # rebind them after (a fork logging the realised ratio)
    made_line, *rest = guard.body.body  # type: ignore[union-attr]
    body = guard.body.with_changes(body=[made_line, *counted, *rest])  # type: ignore[union-attr]
    init = ctx.statement(
        f"{ARGS} = {{}}  # the kept count, for {base}.forward's token drop (static shapes)\n",
        like=guard, replaces=False,
    ).with_changes(leading_lines=guard.leading_lines)
    edits: Dict[cst.CSTNode, Replacement] = {
        guard: cst.FlattenSentinel([init, guard.with_changes(body=body, leading_lines=[])]),
        line: line_with(ctx, line, {call: with_argument(call, f"**{ARGS}")}),
    }
    module, helper = add_helper(ctx, cls, TAKES_COUNT)
    edits[module] = helper
    return edits
