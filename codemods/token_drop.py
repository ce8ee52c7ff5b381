"""HR003: encoder token drop by an index_select with a static kept count.

In the encoder forward it matches

    x = x[mask[..., None].tile(1, MU, C)].view(B, -1, C)       # or mask.unsqueeze(-1), .repeat

and emits (the function gains a ``num_kept=None`` argument):

    if num_kept is None:  # a mask from the caller: rows may keep different counts
        x = x[mask[..., None].tile(1, MU, C)].view(B, -1, C)   # the original, as it was
    else:
        kept_windows = mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
        x = x.view(x.shape[0], -1, mask.shape[-1], x.shape[-1]).flatten(0, 2).index_select(
            0, (kept_windows[:, None, :] + <t * num_windows>[None, :, None] + <b * N>[:, None, None]).flatten()
        ).view(B, -1, C)

`index_select` on the flat row indices of x, not a `gather` along the window axis:
both copy the same rows in the same order, and each row is selected once, so the
backward (an index_add / a scatter_add into zeros) is the same bit for bit; but
`gather` saves its whole input x for the backward, `index_select` only the
(B, T, n) int64 row index (Hiera-Base MAE, B=128 bf16: 73.5 -> 1.2 MiB).

A class's ``get_random_mask`` whose body proves the count it keeps in every row
gets that count attached (``get_random_mask.num_kept``, codemods/_random_mask.py).
In an MAE's ``forward_encoder``-like method, where the mask is made by
``self.get_random_mask(x, mask_ratio)`` and handed to ``super().forward(x, mask, ...)``,
the count the running get_random_mask states (None for an override) is passed on,
when the base class's ``forward`` accepts ``num_kept`` (hiera.py may be rewritten
separately).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from hiera_rewrite.flow import enclosing_function, enclosing_line, statement_names, tensor_aliases
from hiera_rewrite.rewrite import NotThisIdiom, PlanContext, Refuse, Replacement, Rewrite, refusing_as, register

from ._match import code, int_value, is_name, method_call, positional, single_assign, target_code
from ._random_mask import count_call, get_random_mask_call, helper_source, kept_count, random_mask_guard
from ._mask import (
    MASK_CONTRACT,
    is_bool_cast,
    before_statement,
    LEAVES,
    with_fallback,
    emitted_fallback,
    shadowed,
    class_reference,
    declares,
    ascending_true,
    free_names,
    imports_module,
    imports_typing_optional,
    with_keyword_param,
    written_in_place,
)

COUNT = "num_kept"
INDEX = "kept_windows"
FLAG = "__super_forward_takes_num_kept"


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

    The rewrite gathers instead: token n of the unrolled (B, N, C) sequence belongs
    to window n % num_windows at in-window position n // num_windows, so
    `x.view(B, T, num_windows, C)` gathered along the window axis with the kept
    windows in ascending order gives exactly the tokens, in exactly the order, of
    the boolean index.  It is emitted as `index_select` of the rows
    b*N + t*num_windows + j of x flattened to (B*N, C): the same copy as a gather
    along the window axis, but autograd saves only the int64 row index, not x.  The kept windows come from a stable argsort of `~mask`,
    sliced to a count that is a Python int, so every shape is static.

    The count: the encoder's forward gains an optional `num_kept` argument, and only
    a count proves that every row keeps as many units.  Without one (a mask from a
    caller, which may be ragged) the original boolean indexing runs, unchanged.
    The count comes from the code that makes the mask: a `get_random_mask` whose
    body is upstream's (noise, a double argsort, `mask[:, :len_keep] = 1`, a gather)
    gets a small function attached, `get_random_mask.num_kept`, made of the
    statements of its own body that compute `len_keep` (a fork's `round(...)`
    included).  The MAE reads it through `self.get_random_mask` when it makes the
    mask, so a subclass that overrides get_random_mask (another count) carries no
    count and takes the boolean path.  The training step has no sync at all.  The
    MAE passes the count only when the encoder's forward accepts it, so a rewritten
    hiera_mae.py works with an original hiera.py and the reverse.  A submodule given
    the mask before the drop (upstream's patch_embed) keeps the count only while it runs
    its class's own forward (captured in the model's class body): the user's class may
    write the mask.  And the forward states `forward.leaves_mask(self)`: whether it and
    every submodule it gives the mask (patch_embed, reroll) are still the file's own,
    for the MAE, which keeps the count for its decoder only then.
    """ + MASK_CONTRACT

    def plan(self, ctx: PlanContext) -> None:
        finder = _Finder()
        ctx.visit(finder)
        for node, via in finder.drops + _drops_through_names(ctx, finder.tile_lines):
            line = enclosing_line(ctx, node)
            if line is not None and emitted_fallback(ctx, line, COUNT):
                continue  # this rewrite's own output
            edits = ctx.attempt(node, lambda: _token_drop(ctx, node, via))
            if edits is not None:
                ctx.add_site(node, edits)
        for call in finder.super_forwards:
            edits = ctx.attempt(call, lambda: _mae_count(ctx, call))
            if edits is not None:
                ctx.add_site(call, edits, "MAE encoder: pass the kept count get_random_mask states (a Python int)")
        for func in finder.random_masks:
            edits = ctx.attempt(func, lambda: _random_mask_count(ctx, func))
            if edits is not None:
                ctx.add_site(
                    func, edits,
                    "get_random_mask: state its kept count, read from its code (callers drop tokens with static shapes)",
                )
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
        self.random_masks: List[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value == "get_random_mask":
            self.random_masks.append(node)

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
    clash = free_names(flow, COUNT, INDEX)
    if clash:
        raise Refuse(f"the function already uses the name(s) {', '.join(clash)}")
    if not imports_module(ctx.module, "torch"):
        raise Refuse("the module does not `import torch`")

    x = tokens.value  # type: ignore[attr-defined]
    target = target_code(line)
    # rows of x viewed (B, T, num_windows, C) and flattened to (B*T*num_windows, C):
    # batch b, in-window position t, kept window j, in the order the gather had
    gather = (
        f"{target} {x}.view({x}.shape[0], -1, {mask}.shape[-1], {x}.shape[-1]).flatten(0, 2).index_select(0, ("
        f"{INDEX}[:, None, :] + torch.arange(0, {x}.shape[1], {mask}.shape[-1], device={INDEX}.device)[None, :, None]"
        f" + torch.arange(0, {x}.shape[0] * {x}.shape[1], {x}.shape[1], device={INDEX}.device)[:, None, None]"
        ").flatten())"
        + (".flatten()" if view_args is None else f".view({', '.join(code(a) for a in view_args)})")
    )
    drop = with_fallback(
        ctx,
        line,
        COUNT,
        "a mask from the caller: rows may keep different counts, so select as before",
        [f"{INDEX} = {ascending_true(mask, COUNT)}", gather],
    )
    annotation = "Optional[int]" if imports_typing_optional(ctx.module) else None
    edits: Dict[cst.CSTNode, Replacement] = {line: drop, func: with_keyword_param(ctx, func, COUNT, annotation)}
    _count_only_while_own_submodules(ctx, func, mask, line, edits)
    return edits


def _count_only_while_own_submodules(
    ctx: PlanContext, func: cst.FunctionDef, mask: str, drop: cst.SimpleStatementLine, edits: Dict[cst.CSTNode, Replacement]
) -> None:
    """A submodule called with the mask (or a view of it), upstream's
    `self.patch_embed(x, mask=mask.view(...))` before the token drop and
    `self.reroll(x, i, mask=mask)` after it, may write it in place when it is of the
    user's class (a subclass, a function set on it).  Before the drop: `num_kept =
    num_kept if <the submodule runs its class's own forward> else None`, that forward
    captured in the model's class body when the class is made
    (``__own_patch_embed_forward = PatchEmbed.forward``).  And the method gets
    ``<method>.leaves_mask(self)``: whether it is still the class's own and every such
    submodule runs its own forward, for a caller keeping the mask's count after the call
    (an MAE's decoder).  A submodule's class must be one a top-level class statement or
    import above the model's class binds (``self.patch_embed = PatchEmbed(...)`` in
    ``__init__``); one of another kind given the mask before the drop refuses it, after
    it leaves the method without ``leaves_mask``."""
    block = ctx.parent(func)
    cls = ctx.parent(block) if block is not None else None
    if not isinstance(cls, cst.ClassDef) or func.decorators or not func.params.params:
        return
    owner = class_reference(ctx, cls)
    aliases = tensor_aliases(ctx, func, mask)
    body = list(func.body.body)  # type: ignore[union-attr]
    above = [drop, *ctx.ancestors(drop)]
    here = next((i for i, s in enumerate(body) if any(s is a for a in above)), len(body))
    calls: List[Tuple[cst.BaseStatement, str, bool]] = []
    others: List[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def __init__(self, stmt, before):
            super().__init__()
            self.stmt, self.before = stmt, before

        def visit_Call(self, node: cst.Call) -> None:
            callee = node.func
            names: List[str] = []

            class _Names(cst.CSTVisitor):
                def visit_Name(self, name: cst.Name) -> None:
                    names.append(name.value)

                def visit_Call(self, inner: cst.Call) -> bool:
                    # self.<submodule>(..., mask) inside: that call is followed by itself
                    return not (isinstance(inner.func, cst.Attribute) and is_name(inner.func.value, "self"))

            for arg in node.args:
                ctx.visit(_Names(), arg.value)
            if not aliases & set(names):
                return
            if isinstance(callee, cst.Attribute) and is_name(callee.value, "self"):
                calls.append((self.stmt, callee.attr.value, self.before))
            elif not (code(callee).startswith("torch.") and not code(callee).endswith("_")):
                others.append(node)  # a function of the file's or a library's, given the mask

    for i, stmt in enumerate(body):
        ctx.visit(_Calls(stmt, i < here), stmt)
    methods = {s.name.value for s in cls.body.body if isinstance(s, cst.FunctionDef)}  # type: ignore[union-attr]
    init = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)  # type: ignore[union-attr]
    top = list(ctx.module.body)
    bound: Dict[str, cst.CSTNode] = {}
    for stmt in top[: top.index(cls)] if cls in top else []:
        if isinstance(stmt, cst.ClassDef) and any(
            isinstance(m, cst.FunctionDef) and m.name.value == "forward" for m in stmt.body.body  # type: ignore[union-attr]
        ):
            bound[stmt.name.value] = stmt
        elif isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(x, (cst.Import, cst.ImportFrom)) for x in stmt.body):
            bound.update({n: stmt for n in statement_names(ctx, stmt)[0]})
        else:
            for n in statement_names(ctx, stmt)[0]:
                bound.pop(n, None)
    usable = owner is not None and not shadowed(ctx, "type", "getattr")
    checks: List[str] = []
    captures: List[str] = []
    leaves = usable and not others  # a function given the mask: not followed, no leaves_mask
    for stmt, attr, before in calls:
        made = []
        if init is not None:
            for s in ctx.flow(init).stmts:
                assign = single_assign(s.line) if s.line.body else None
                if assign is not None and code(assign[0]) == f"self.{attr}":
                    made.append(assign[1])
        kind = made[0].func.value if len(made) == 1 and isinstance(made[0], cst.Call) and is_name(made[0].func) else None  # type: ignore[attr-defined]
        known = usable and attr not in methods and kind in bound
        if not known:
            if before:
                raise Refuse(
                    f"{mask} is passed to self.{attr}(...) before the token drop, and self.{attr} is not built from a"
                    " class this file defines or imports above: it may write the mask in place"
                )
            leaves = False
            continue
        captured = f"__own_{attr}_forward"
        check = f'type(self.{attr}).forward is {owner}.{captured} and "forward" not in self.{attr}.__dict__'
        if check not in checks:
            checks.append(check)
            captures.append(f"{captured} = {kind}.forward")
        if before:
            reset = ctx.statement(
                f"# a {attr} of another class may write the view of {mask} it is given: then its count is unknown\n"
                f"{COUNT} = {COUNT} if {check} else None\n",
                like=stmt,  # type: ignore[arg-type]
                replaces=False,
            )
            edits[stmt] = before_statement(reset, edits.get(stmt))
    name = func.name.value
    sources = [f"{c}\n" for c in captures]
    if leaves:
        helper = f"_{name}_leaves_mask"
        test = " and ".join([f"{owner}.{name} is _leaving", *checks])
        sources.append(
            f"# hiera-rewrite: whether {name} leaves the mask it is given alone (it is the class's own\n"
            f"# and the submodules it gives the mask run their own forward), for callers that keep its count\n"
            f"def {helper}(self, _leaving={name}):\n"
            f"    return {test}\n"
        )
        sources.append(f"{name}.{LEAVES} = {helper}\n")
        sources.append(f"del {helper}\n")
    if not sources:
        return
    lines = [ctx.statement(src, like=func, replaces=False) for src in sources]
    lines = [
        ln.with_changes(leading_lines=[cst.EmptyLine(indent=False), *ln.leading_lines])
        if i == 0 or isinstance(ln, cst.FunctionDef) or isinstance(lines[i - 1], cst.FunctionDef)
        else ln
        for i, ln in enumerate(lines)
    ]

    def add_after(updated: cst.ClassDef) -> cst.ClassDef:
        statements = list(updated.body.body)  # type: ignore[union-attr]
        at = max(i for i, s in enumerate(statements) if isinstance(s, cst.FunctionDef) and s.name.value == name) + 1
        return updated.with_changes(body=updated.body.with_changes(body=[*statements[:at], *lines, *statements[at:]]))

    edits[cls] = add_after


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
        raise NotThisIdiom()
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
    if _defines(cls, FLAG):
        raise NotThisIdiom()  # rewritten already (by a version that emitted this flag)
    clash = free_names(flow, COUNT)
    if clash:
        raise Refuse(f"{func.name.value} already uses the name {COUNT}")
    taken = shadowed(ctx, "getattr")
    if taken:
        raise Refuse(f"the count needs the builtin {taken[0]}, which the module binds itself")

    mask_args = made.args
    if not all(is_name(a) and a.value != mask for a in mask_args):  # type: ignore[attr-defined]
        raise Refuse("get_random_mask is not called on plain names: its count would evaluate them again")

    edits: Dict[cst.CSTNode, Replacement] = {}
    count_stmt = ctx.statement(
        "# how many units get_random_mask keeps in every row, if it states it (a Python\n"
        "# int: no host sync); an override that does not leaves the count to the mask\n"
        f"{COUNT} = {count_call('self', [code(a) for a in mask_args])}\n",  # type: ignore[union-attr]
        like=guard.body.body[0],  # type: ignore[arg-type]
        replaces=False,
    )
    # right after the mask is made, from the values it was made with: the block may
    # rebind them after (a fork logging the realised ratio)
    made_line, *rest = guard.body.body  # type: ignore[union-attr]
    body = guard.body.with_changes(body=[made_line, count_stmt, *rest])  # type: ignore[union-attr]
    init = cst.parse_statement(f"{COUNT} = None\n").with_changes(leading_lines=guard.leading_lines)
    edits[guard] = cst.FlattenSentinel([init, guard.with_changes(body=body, leading_lines=[])])

    assign = single_assign(line)
    call_code = code(call)
    owner = class_reference(ctx, cls)
    if owner is None:
        raise Refuse(f"the class name {cls.name.value} is bound again in the module: the encoder check needs it")
    taken = shadowed(ctx, "type")
    if taken:
        raise Refuse(f"the count needs the builtin {taken[0]}, which the module binds itself")
    # super().forward is {base}.forward only if no class between (a mixin's, in the user's
    # MRO) defines forward: that one keeps upstream's signature; and {base}.forward takes
    # the count only where hiera.py is rewritten too (it may be rewritten separately).
    resolved = (
        f'[c for c in type(self).__mro__[type(self).__mro__.index({owner}) + 1:] if "forward" in c.__dict__][:1]'
        f" == [{base}] and {declares(f'{base}.forward', COUNT)}"
    )
    new_call = (
        call_code[:-1].rstrip().rstrip(",")
        + f", **({{{COUNT!r}: {COUNT}}} if {resolved} else {{}}))"
    )
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



def _random_mask_count(ctx: PlanContext, func: cst.FunctionDef) -> Dict[cst.CSTNode, Replacement]:
    """Attach to a class's get_random_mask the count it keeps, read from its body
    (codemods/_random_mask.py): the callers' static shapes rest on it."""
    block = ctx.parent(func)
    cls = ctx.parent(block) if block is not None else None
    if not isinstance(cls, cst.ClassDef):
        raise NotThisIdiom()
    body = list(cls.body.body)  # type: ignore[union-attr]
    attribute = f"{func.name.value}.num_kept"
    if any(isinstance(s, cst.SimpleStatementLine) and any(code(t) == attribute for t in _assigned_names(s)) for s in body):
        raise NotThisIdiom()  # rewritten already
    helper = f"_{func.name.value}_num_kept"
    taken = [n for n in shadowed(ctx, "len", "range", "type")]
    taken += [helper] if any(helper in statement_names(ctx, s)[0] for s in body) else []
    if taken:
        raise Refuse(f"the kept count's code needs the name(s) {', '.join(taken)}, which the file binds itself")
    with refusing_as(
        f"the kept count of {cls.name.value}.get_random_mask is not read: {{}}; "
        "token drops of its masks stay boolean indexing"
    ):
        count = kept_count(ctx, func)
    comment = (
        "# hiera-rewrite: how many units get_random_mask keeps in every row, read from\n"
        "# its code, for callers that drop tokens with static shapes.  An override of\n"
        "# get_random_mask does not carry it: its callers select with the mask as before.\n"
    )
    helper = cst.parse_module(helper_source(func.name.value, count)).body
    sources = [comment + cst.Module(body=[helper[0]]).code, *(cst.Module(body=[s]).code for s in helper[1:])]
    indented = [ctx.statement(source, like=func, replaces=False) for source in sources]
    indented[0] = indented[0].with_changes(leading_lines=[cst.EmptyLine(indent=False), *indented[0].leading_lines])
    indented[1] = indented[1].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    return {func: lambda updated: cst.FlattenSentinel([updated, *indented])}
