"""HR003: encoder token drop by an index_select with a static kept count.

In the encoder forward (a method of a class whose get_random_mask, in the file, keeps a
count the tool reads) it matches

    x = x[mask[..., None].tile(1, MU, C)].view(B, -1, C)       # or mask.unsqueeze(-1), .repeat

and emits (the method gains ``random_mask_ratio=None``; ``kept_tokens`` goes above the class):

    num_kept = None  # kept units per row, known for get_random_mask's masks
    if type(random_mask_ratio) in (int, float) and type(self).get_random_mask is __class__.get_random_mask:
        num_kept = int(mask.shape[1] * (1 - random_mask_ratio))     # get_random_mask's own formula
    x = kept_tokens(x, mask, MU, num_kept).view(B, -1, C)

``kept_tokens(x, mask, MU, None)`` is the original boolean selection (a caller's mask,
ragged rows allowed); with a count, an ``index_select`` of x's rows (b*MU + t)*N + j for
the kept units j of each row (a stable argsort of ``~mask`` sliced to the count): the
same rows in the same order, and autograd saves only the int64 row index, not x.

An MAE's ``forward_encoder`` that makes the mask with ``self.get_random_mask(x, r)``
passes ``random_mask_ratio=r`` to ``super().forward`` when the mask reaches that call
untouched and the forward super() reaches (followed through the file and the module
beside it) is one whose drop takes it.
"""

from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import all_params, bound_parameter, enclosing_function, enclosing_line, loaded_names, names_in, statement_names
from hiera_rewrite.rewrite import NotThisIdiom, PlanContext, Refuse, Replacement, Rewrite, register

from ._calls import (
    base_class, binds, class_hooks, method_of, overridden_below, overridden_between, passed_to_a_writer, registers_hooks, replaced,
    receiver_modules, self_attributes, walk,
)
from ._match import code, int_value, is_name, method_call, positional, single_assign
from ._indices_mask import indicator_of
from ._random_mask import PURE_CALLS, get_random_mask_call, kept_count, random_mask_guard
from ._mask import (
    KEPT_TOKENS,
    MASK_CONTRACT,
    add_helper,
    local_bindings,
    name_taken,
    free_names,
    imports_module,
    imports_typing_optional,
    is_bool_cast,
    line_with,
    stored_or_packed,
    with_argument,
    with_keyword_param,
    written_in_place,
)

COUNT = "num_kept"
RATIO = "random_mask_ratio"  # the encoder's new argument: the ratio get_random_mask drew the mask with


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
    order, the rows (b*mu_size + t)*#MUs + j of x are exactly the tokens, in exactly
    the order, of the boolean index.  The rewrite selects them with `index_select` in
    a helper it puts above the class, `kept_tokens(x, mask, mu_size, num_kept)`, and
    keeps the original `.view(...)`.  The kept units come from a stable argsort of
    `~mask`, sliced to `num_kept`, a Python int: every shape is static.  Without a
    count (a mask from a caller, which may keep different counts per row) the helper
    runs the original boolean selection.

    Where the count comes from, proven step by step (anything else keeps the boolean
    drop, and the report quotes the statement that stopped the proof):
    - the encoder forward gains `random_mask_ratio=None`.  Given it, and while
      `type(self).get_random_mask is __class__.get_random_mask` (`__class__`: the class
      defining the forward; an intermediate class or a subclass overriding
      get_random_mask gets the boolean drop), the count is the file's own
      get_random_mask formula (a fork's `round(...)` included), read from its body and
      evaluated on the mask's column count and that ratio, and only where the ratio is
      a plain int or float (`type(r) in (int, float)`): the formula evaluates
      `1 - r` again, which for another object (a tensor, a ratio class whose
      arithmetic draws a random ratio) need not give the value get_random_mask got.
      A formula reading anything else (an attribute, the batch) is refused.
    - nothing the encoder forward runs before the drop writes the mask: calls given
      it (or a view of it, or what may hold it) are followed into the file's own
      submodule classes (`self.patch_embed = PatchEmbed(...)`: its forward) and
      functions, here or in the module beside it (`do_masked_conv` in
      hiera_utils.py); torch's functions write nothing but in place; any other call
      stops the proof, a method on `self` included (a subclass anywhere may override
      it: the emitted code checks only get_random_mask).  A submodule built by code
      not in the files is out of contract.
    - the MAE's forward_encoder passes `random_mask_ratio=r` only for the mask it
      draws itself with `self.get_random_mask(x, r)` (a ratio read from a property is
      read once, before the call), when no statement between that call and
      `super().forward(x, mask, ...)` uses the mask other than to read it (`.float()`,
      `.sum()`, `.shape`...: a write, an alias or a call given it stops the proof), and
      when the forward super() reaches, followed through this file and the module
      beside it (`from .hiera import Hiera`: as on disk, or as the same run rewrites
      it), takes the ratio.  A rewritten hiera_mae.py over an original hiera.py passes
      nothing there and says so.
    - a mask made from the caller's kept indices, `mask = mask_from_indices(ids_keep,
      n)` then `mask = mask.bool()` in the same block, where the function (here or in a
      module the file imports, `from pkg.common.masking import ...`) is proven to
      return (B, n) zeros with a 1 at each (r, ids_keep[r, j]) (an index write or a
      `scatter` along dim 1: codemods/_indices_mask.py), and ids_keep is a parameter
      the encoder never rebinds: the count is `ids_keep.shape[1]`, which `kept_tokens` checks
      (`torch._assert_async((mask.sum(1) == kept.shape[1]).all())`).  A row of
      ids_keep repeating an index keeps fewer units in the original; the rewrite raises
      there instead (the caller's data, which no file proves), in eager mode: torch.compile's
      inductor drops the check, and a repeated index then selects a masked unit.

    torch >= 2.0 (`argsort(stable=True)`, `unflatten`).
    """ + MASK_CONTRACT

    def plan(self, ctx: PlanContext) -> None:
        finder = _Finder()
        ctx.visit(finder)
        gaining: Dict[cst.FunctionDef, Set[str]] = {}  # functions whose drop takes RATIO: the masks it counts
        binds: Dict[int, str] = {}  # drop -> how its edit binds RATIO: "param" (a new parameter) or "local"
        drops = []
        for node, via in finder.drops + _drops_through_names(ctx, finder.tile_lines):
            if _in_helper(ctx, node):
                continue  # kept_tokens' own fallback (this rewrite's output)
            edits = ctx.attempt(node, lambda: _token_drop(ctx, node, via, binds))
            if edits is not None:
                drops.append((node, via, edits, enclosing_function(ctx, node)))
        # each site binding RATIO counts with it: two in one function (two masks drawn with
        # their own ratios, a caller's mask and a drawn one) would count with the other's
        # value; such a function keeps its drops (unless none draws: one parameter serves all)
        ratio_drops: Dict[Optional[cst.FunctionDef], List[cst.CSTNode]] = {}
        for node, _, _, func in drops:
            if id(node) in binds:
                ratio_drops.setdefault(func, []).append(node)
        for node, via, edits, func in drops:
            shared = ratio_drops.get(func, [])
            if id(node) in binds and len(shared) > 1 and any(binds[id(n)] == "local" for n in shared):
                other = next(n for n in shared if n is not node)
                ctx.refuse(node, _shared_ratio(ctx, func, other))  # type: ignore[arg-type]
                continue
            ctx.add_site(node, edits)
            if binds.get(id(node)) == "param":  # it gained RATIO (not where it draws the mask itself)
                mask = _unit_mask(node.slice[0].slice.value if via is None else single_assign(via)[1])[0]  # type: ignore[attr-defined, index, misc]
                gaining.setdefault(func, set()).add(mask)  # type: ignore[arg-type, index]
        calls = []
        for call in finder.super_forwards:
            edits = ctx.attempt(call, lambda: _mae_ratio(ctx, call, gaining))
            if edits is not None:
                calls.append((call, edits, enclosing_function(ctx, call)))
        for call, edits, func in calls:
            other = next((n for n in ratio_drops.get(func, []) if n is not call), None) or next(
                (c for c, _, f in calls if f is func and c is not call), None
            )
            if other is not None:
                ctx.refuse(call, _shared_ratio(ctx, func, other))  # type: ignore[arg-type]
                continue
            ctx.add_site(call, edits, "MAE encoder: pass get_random_mask's ratio, so the token drop knows its kept count (static shapes)")
        for call in finder.submodule_masks:
            encoder = code(call.func.value)  # type: ignore[attr-defined]
            ctx.refuse(
                call,
                f"the mask comes from {encoder}.get_random_mask: the encoder is a submodule (composition, not a "
                f"base class), so its forward's signature is unknown here; the kept count is not passed and "
                f"{encoder} counts the mask itself (one host sync)",
            )


def _shared_ratio(ctx: PlanContext, func: cst.FunctionDef, other: cst.CSTNode) -> str:
    return (
        f"{func.name.value} has another site counting with {RATIO} (line {ctx.position(other).line}): each would"
        " bind it, and one would count with the other's ratio; the kept count is not passed"
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
    ctx: PlanContext, node: cst.Subscript, via: Optional[cst.SimpleStatementLine], binds: Dict[int, str]
) -> Dict[cst.CSTNode, Replacement]:
    """The drop's edits; ``binds[id(node)]`` set to how they bind RATIO ("param", "local")."""
    index = node.slice[0].slice.value  # type: ignore[attr-defined]
    mask, unit_size, _ = _unit_mask(index if via is None else single_assign(via)[1])  # type: ignore[misc, index]
    func = enclosing_function(ctx, node)
    line = enclosing_line(ctx, node)
    if func is None or line is None:
        raise Refuse("the boolean token drop is not a statement inside a function")
    suspends = next((n for n in walk(func.body) if isinstance(n, (cst.Yield, cst.Await))), None)
    if suspends is not None:
        # the caller runs between its statements, and may write the mask it was handed
        raise Refuse(f"{func.name.value} suspends at `{code(suspends)}` (a generator or coroutine): what its caller does meanwhile is not proven")
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
    drawn = None
    if mask not in flow.params or len(casts) != len(flow.assigning(mask)):
        drawn = _drawn_here(ctx, func, mask, line)
    indices = None  # (the kept indices' name, the function making the mask, that statement)
    if drawn is None and (mask not in flow.params or len(casts) != len(flow.assigning(mask))):
        indices, why = _from_indices(ctx, func, mask, line)
    if indices is None and drawn is None and (mask not in flow.params or len(casts) != len(flow.assigning(mask))):
        here = flow.stmt_of(line).index
        bindings = [st for st in flow.assigning(mask) if st.index < here and st.line.body and st not in casts]
        if bindings:
            # e.g. `mask = 1 - mask`: keeps n minus a count the function is not given
            last = bindings[-1].line
            reason = why or "not the function's own mask argument"
            raise Refuse(
                f"{mask} is rebuilt by `{code(last)}` at line {ctx.position(last).line}: how many units it keeps"
                f" in each row is not proven ({reason})"
            )
        raise Refuse(f"{mask} is not the function's own mask argument (reassigned or not a parameter)")
    written = written_in_place(ctx, func, mask) or stored_or_packed(ctx, func, mask, before=line)
    block = ctx.parent(func)
    owner = ctx.parent(block) if block is not None else None
    cls = owner if isinstance(owner, cst.ClassDef) else None
    written = written or passed_to_a_writer(ctx, cls, func, mask, before=line)
    if written is not None:
        raise Refuse(f"{written}: how many units it keeps in each row is not proven")
    if indices is not None:  # ids.shape[1] at the drop is the width the mask was made from
        ids, _, made = indices
        written = stored_or_packed(ctx, func, ids, proven=made, before=line) or passed_to_a_writer(ctx, cls, func, ids, before=line, after=made)
        if written is not None:
            raise Refuse(f"{written}: its width at the drop is not proven the mask's count")
    clash = free_names(flow, COUNT, RATIO, "__class__")
    if clash:
        raise Refuse(f"the function already uses the name(s) {', '.join(clash)}")
    if not imports_module(ctx.module, "torch"):
        raise Refuse("the module does not `import torch`")
    taken = name_taken(ctx, KEPT_TOKENS, "type", "int", "float", func=func)
    if taken:
        raise Refuse(f"the token drop needs the name {taken}, which {func.name.value} or the module binds itself")
    if not isinstance(ctx.parent(line), cst.IndentedBlock):
        raise Refuse("the token drop shares its line with a compound statement")
    if names_in(ctx, unit_size) - {"self"} - flow.params:
        raise Refuse(f"the unit size `{code(unit_size)}` reads local names: it is not passed to the helper")
    x = tokens.value  # type: ignore[attr-defined]
    if indices is not None:
        ids, maker_name, _ = indices
        selected = cst.parse_expression(f"{KEPT_TOKENS}({x}, {mask}, {code(unit_size)}, {ids}.shape[1])")
        new_line = line_with(ctx, line, {node: selected})
        # the count's comment, above the drop (kept_tokens checks it: a repeated index raises)
        note = ctx.statement(f"# {maker_name}'s mask keeps each row's {ids} (an index repeated in a row raises)\npass\n", like=line, replaces=False)
        module, helper = add_helper(ctx, func, KEPT_TOKENS)
        return {
            line: lambda updated: new_line.with_changes(leading_lines=[*updated.leading_lines, *note.leading_lines]),
            module: helper,
        }
    formula, maker, sources = _random_count(ctx, func, mask)
    # the formula runs here, not in get_random_mask: a name it reads (`round`, `math`) that
    # this function binds itself would be this function's
    parsed = cst.parse_expression(formula)
    attrs = {id(n.attr) for n in walk(parsed) if isinstance(n, cst.Attribute)}
    read = {n.value for n in walk(parsed) if isinstance(n, cst.Name) and id(n) not in attrs} - {mask, RATIO}
    shadowing = sorted(read & local_bindings(ctx, func))
    if shadowing:
        raise Refuse(f"get_random_mask's kept count reads {', '.join(shadowing)}, which {func.name.value} binds itself")
    selected = cst.parse_expression(f"{KEPT_TOKENS}({x}, {mask}, {code(unit_size)}, {COUNT})")
    new_line = line_with(ctx, line, {node: selected})
    counting = _count_lines(ctx, line, formula)
    edits: Dict[cst.CSTNode, Replacement] = {
        line: lambda updated: cst.FlattenSentinel(
            [counting[0].with_changes(leading_lines=updated.leading_lines), counting[1], new_line.with_changes(leading_lines=[])]
        ),
    }
    if drawn is None:
        edits[func] = with_keyword_param(ctx, func, RATIO, "Optional[float]" if imports_typing_optional(ctx.module) else None)
        binds[id(node)] = "param"
    else:
        edits.update(_ratio_kept(ctx, *drawn))
        binds[id(node)] = "local"
    reads = sorted({r[len("self."):] for st in sources for r in _reads_of(cst.parse_expression(st.split(" = ", 1)[-1])) if r.startswith("self.")})
    _python_ints(ctx, maker, reads, edits)
    if via is not None and len(flow.loads_of(index.value)) == 1:  # type: ignore[attr-defined]
        edits[via] = cst.RemovalSentinel.REMOVE  # the unit mask, now made by kept_tokens
    module, helper = add_helper(ctx, func, KEPT_TOKENS)
    edits[module] = helper
    return edits


def _from_indices(
    ctx: PlanContext, func: cst.FunctionDef, mask: str, line: cst.SimpleStatementLine
) -> Tuple[Optional[Tuple[str, str, cst.CSTNode]], Optional[str]]:
    """((ids, H, the statement making the mask), None) where ``func``'s only bindings of the mask are

        mask = H(ids, n)          # H proven by codemods/_indices_mask.py
        mask = mask.bool()        # in the same block (or `.bool()` on the call)

    before the drop, ids a parameter ``func`` never binds (so ``ids.shape[1]`` at the drop
    is the width the mask was made from); else (None, why not, or None)."""
    flow = ctx.flow(func)
    here = flow.stmt_of(line).index
    bindings = flow.assigning(mask)
    if mask in flow.params or flow.compound_assigned.get(mask) or not bindings or any(st.index >= here for st in bindings):
        return None, None
    made = bindings[0].line
    assign = single_assign(made) if isinstance(made, cst.SimpleStatementLine) else None
    if assign is None or not is_name(assign[0], mask):
        return None, None
    value, cast = assign[1], False
    inline = method_call(value, "bool")
    if inline is not None and not inline[1].args:
        value, cast = inline[0], True
    ids, why = indicator_of(ctx, value)
    if ids is None:
        return None, why
    rest = bindings[1:]
    if not all(is_bool_cast(st.line, mask) and ctx.parent(st.line) is ctx.parent(made) for st in rest) or not (cast or rest):
        return None, f"the mask `{code(made)}` makes is not cast to bool once, in its block, before the drop"
    if ids not in flow.params or flow.assigning(ids) or flow.compound_assigned.get(ids) or binds(func.body, ids):
        return None, f"{ids} is not a parameter the function leaves bound as given"
    return (ids, code(value.func), made), None  # type: ignore[attr-defined]


def _drawn_here(ctx: PlanContext, func: cst.FunctionDef, mask: str, line: cst.SimpleStatementLine):
    """(the statement, its ratio, the `if mask is None:` around it or None) where ``func``
    draws the mask the drop uses itself -- its only binding in the function, before the drop:

        mask = self.get_random_mask(x, ratio)                 # a top-level statement
        if mask is None: mask = self.get_random_mask(x, ratio)  # mask a parameter

    (a forward_encoder that drops the tokens itself, never calling Hiera.forward);
    None for any other binding."""
    flow = ctx.flow(func)
    here = flow.stmt_of(line).index
    # its only binding anywhere in the function: one after the drop may run before it
    # again, in a loop around both (`mask = ~mask` for a second view)
    bindings = flow.assigning(mask)
    if len(bindings) != 1 or bindings[0].index >= here or flow.compound_assigned.get(mask):
        return None
    made = bindings[0].line
    assign = single_assign(made) if isinstance(made, cst.SimpleStatementLine) else None
    found = method_call(assign[1], "get_random_mask") if assign is not None and is_name(assign[0], mask) else None
    if found is None or not is_name(found[0], "self"):
        return None
    args = positional(found[1])
    if args is None or len(args) != 2 or mask in names_in(ctx, args[1]):
        return None
    top = list(func.body.body)  # type: ignore[union-attr]
    if made in top:
        return made, args[1], None
    guard = random_mask_guard(ctx, func, mask)
    if (
        guard is not None and guard.guard in top and guard.made.line is made and mask in flow.params
        and not any(a is guard.guard for a in ctx.ancestors(line))  # (the guard is remade from its own lines)
    ):
        return made, args[1], guard.guard
    return None


def _ratio_kept(
    ctx: PlanContext, made: cst.SimpleStatementLine, ratio: cst.BaseExpression, guard: Optional[cst.If]
) -> Dict[cst.CSTNode, Replacement]:
    """The ratio the function draws its mask with, read once into ``RATIO`` before the
    draw (None where the mask is the caller's)."""
    given = ctx.statement(f"{RATIO} = {code(ratio)}\n", like=made, replaces=False).with_changes(leading_lines=made.leading_lines)
    remade = line_with(ctx, made, {ratio: cst.Name(RATIO)}).with_changes(leading_lines=[])  # type: ignore[arg-type]
    if guard is None:
        return {made: cst.FlattenSentinel([given, remade])}
    body = guard.body.with_changes(body=[given, remade, *guard.body.body[1:]])  # type: ignore[union-attr]
    init = ctx.statement(f"{RATIO} = None  # the mask is the caller's\n", like=guard, replaces=False)
    return {guard: cst.FlattenSentinel([init.with_changes(leading_lines=guard.leading_lines), guard.with_changes(body=body, leading_lines=[])])}


def _random_count(ctx: PlanContext, func: cst.FunctionDef, mask: str) -> Tuple[str, cst.ClassDef, List[str]]:
    """The kept count of the get_random_mask that ``func``'s class defines, as an
    expression of the mask it made and the ratio it was given (``RATIO``):

        len_keep = int(num_windows * (1 - mask_ratio))  ->  int(mask.shape[1] * (1 - random_mask_ratio))

    num_windows is the mask's column count (codemods/_random_mask.py proves the body
    makes a (B, num_windows) mask keeping the count in every row).  The count may read
    nothing else (no attribute, no second evaluation of anything): else Refuse.
    Returns it, the class defining that get_random_mask, and the code the mask's size
    comes from there (`num_windows = math.prod(self.mask_spatial_shape)`)."""
    block = ctx.parent(func)
    cls = ctx.parent(block) if block is not None else None
    if not isinstance(cls, cst.ClassDef):
        raise Refuse(f"{func.name.value} is not a method of a class: no get_random_mask of its own gives the count")
    found = method_of(ctx, ctx.module, cls, "get_random_mask")
    if found is None or found[0] is not ctx.module:
        raise Refuse(f"{cls.name.value} has no get_random_mask in this file: no kept count is known for its masks")
    maker = found[2]
    again = replaced(ctx, ctx.module, found[1], "get_random_mask")
    if again is not None:
        raise Refuse(f"{again}: its kept count is not read from the def")
    owner = ctx.skipped_by(maker)
    if owner is not None:
        raise Refuse(f"get_random_mask is left alone (`# hiera-rewrite: skip` on {owner}): its kept count is not read")
    try:
        count = kept_count(ctx, maker)
    except Refuse as exc:
        raise Refuse(f"the kept count of {cls.name.value}.get_random_mask is not read: {exc.reason}") from None
    params = [p.name.value for p in maker.params.params]
    if len(params) != 3 or maker.params.params[1].default is not None or maker.params.params[2].default is not None:
        raise Refuse(f"{cls.name.value}.get_random_mask does not take (self, x, mask_ratio): its callers' ratio is not known")
    ratio = params[2]
    pure = {}
    for line in count.statements:
        name, value = line.split(" = ", 1)
        pure[name] = cst.parse_expression(value)
    windows = count.windows.replace(" ", "")
    column = cst.parse_expression(f"{mask}.shape[1]")

    class _Substitute(cst.CSTTransformer):
        def __init__(self) -> None:
            super().__init__()
            self.unknown: List[str] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, cst.BaseExpression) and code(node).replace(" ", "") == windows:
                return False  # replaced whole in on_leave
            return super().on_visit(node)  # visit_Attribute below

        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # type: ignore[override]
            if isinstance(original, cst.BaseExpression) and code(original).replace(" ", "") == windows:
                return column
            return super().on_leave(original, updated)

        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            name = original.value
            if name == ratio:
                return cst.Name(RATIO)
            if name in pure and code(pure[name]).replace(" ", "") == windows:
                return column
            if name in pure:
                return cst.parse_expression(f"({code(pure[name].visit(self))})")
            if name not in PURE_CALLS and name != "math":
                self.unknown.append(name)
            return updated

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            if is_name(node.value, "math"):
                return False
            self.unknown.append(code(node))
            return False

    visitor = _Substitute()
    formula = cst.parse_expression(count.keep).visit(visitor)
    if visitor.unknown:
        raise Refuse(
            f"the kept count of {cls.name.value}.get_random_mask, `{count.keep}`, reads {', '.join(dict.fromkeys(visitor.unknown))},"
            " not only the mask's size and ratio: it would be evaluated a second time"
        )
    text = code(formula)
    if text.startswith("(") and text.endswith(")"):
        text = code(cst.parse_expression(text[1:-1]))
    return text, found[1], [*count.statements, count.windows]


def _count_lines(ctx: PlanContext, line: cst.SimpleStatementLine, formula: str) -> List[cst.BaseStatement]:
    """The statements before the token drop that set its count."""
    return [
        ctx.statement(f"{COUNT} = None  # kept units per row, known for get_random_mask's masks\n", like=line, replaces=False),
        ctx.statement(
            f"if type({RATIO}) in (int, float) and type(self).get_random_mask is __class__.get_random_mask:\n    {COUNT} = {formula}\n",
            like=line, replaces=False,
        ),
    ]


# Tensor methods and attributes that read a mask without writing it or aliasing it
# (each returns a new tensor, a number or metadata): a statement using the mask only
# through them leaves get_random_mask's mask as it was.
READ_ONLY = {
    "float", "double", "half", "long", "int", "sum", "mean", "any", "all", "count_nonzero", "numel", "dim",
    "size", "item", "tolist", "clone", "shape", "dtype", "device", "ndim", "is_cuda",
}


def _first(stmt: cst.CSTNode) -> cst.CSTNode:
    return stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else stmt  # type: ignore[attr-defined]


def _touches(ctx: PlanContext, stmt: cst.CSTNode, mask: str) -> Optional[str]:
    """The statement (its first line, never the comments above it) when it uses ``mask``
    other than through READ_ONLY (`mask.float().mean()`, `mask.shape[1]`), else None."""
    uses = [n for n in loaded_names(ctx, stmt) if n.value == mask]
    bound = mask in statement_names(ctx, stmt)[0]  # type: ignore[arg-type]
    for name in uses:
        parent = ctx.parent(name)
        if not (isinstance(parent, cst.Attribute) and parent.value is name and parent.attr.value in READ_ONLY):
            bound = True
    if not bound:
        return None
    return code(_first(stmt)).splitlines()[0]  # code() leaves out the comment lines above it


def _mae_ratio(ctx: PlanContext, call: cst.Call, gaining: Dict[cst.FunctionDef, Set[str]]) -> Dict[cst.CSTNode, Replacement]:
    """`super().forward(x, mask, ...)` after `if mask is None: mask = self.get_random_mask(x, r)`:
    passes ``random_mask_ratio=r`` when the mask reaches the call untouched and the
    forward super() reaches (followed through the file and the modules beside it) is
    one whose token drop takes it."""
    func = enclosing_function(ctx, call)
    line = enclosing_line(ctx, call)
    if func is None or line is None or len(call.args) < 2:
        raise NotThisIdiom()
    mask_arg = call.args[1]
    made_here = get_random_mask_call(ctx, func)
    if mask_arg.keyword is not None or mask_arg.star or not is_name(mask_arg.value):
        if made_here is not None and not mask_arg.star:
            passed = (
                f"passes the mask as `{mask_arg.keyword.value}={code(mask_arg.value)}`, not as the second positional argument"
                if mask_arg.keyword is not None else f"passes `{code(mask_arg.value)}` as the mask, not a plain name"
            )
            raise Refuse(f"the encoder call {passed}: the kept count is not passed (the encoder counts the mask itself: one host sync)")
        raise NotThisIdiom()
    mask = mask_arg.value.value  # type: ignore[attr-defined]
    if call.args[0].star or call.args[0].keyword is not None:
        raise NotThisIdiom()  # the mask is not the callee's second argument
    if any(a.star or a.keyword is not None and a.keyword.value == RATIO for a in call.args):
        raise NotThisIdiom()  # rewritten already
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
    top = list(func.body.body)  # type: ignore[union-attr]
    if line not in top or top.index(line) < top.index(guard):
        raise Refuse("the encoder call is not a statement of the function after the random mask is made")
    ratio = made.args[1]
    # Nothing between the mask's making and the call writes it or makes an alias of it
    # (a call given it included): the mask the drop gets is get_random_mask's.
    between = list(guard.body.body[1:]) + top[top.index(guard) + 1:top.index(line)]  # type: ignore[union-attr]
    for stmt in between:
        touching = _touches(ctx, stmt, mask)
        if touching is not None:
            raise Refuse(
                f"`{touching}` at line {ctx.position(_first(stmt)).line} uses {mask} between get_random_mask and the"
                " encoder call (it may write it, or keep an alias that is written): the kept count is not proven"
                " there; it is not passed"
            )
    uses = [a for a in (call.args[0], *call.args[2:]) if mask in names_in(ctx, a.value)]
    if uses:
        raise Refuse(f"the encoder call also passes {mask} in `{code(uses[0].value)}`: the kept count is not passed")
    cls = ctx.parent(ctx.parent(func))
    if not isinstance(cls, cst.ClassDef):
        raise Refuse(f"{func.name.value} is not a method defined in a class body")
    if len(cls.bases) != 1 or not is_name(cls.bases[0].value) or cls.keywords:
        raise Refuse(f"{cls.name.value} does not have one plain base class: the forward super() reaches is not followed")
    chain: List[cst.Module] = []  # the modules Hiera is imported through: each may patch it
    base = base_class(ctx, ctx.module, cls, chain)
    target = method_of(ctx, base[0], base[1], "forward", through=chain) if base is not None else None
    if target is None:
        raise Refuse(
            f"the forward that `super().forward` reaches from {cls.name.value} is not found in this file or the"
            " modules beside it: the kept count is not passed"
        )
    module, owner, forward = target
    counted = gaining.get(forward, set()) if module is ctx.module else _takes_our_ratio(forward)
    # the drop counting with the ratio must drop the mask this call passes, no other
    # parameter's (a forward dropping a second mask, `target_mask`, the same way)
    takes = counted == {bound_parameter(forward, call, mask_arg, bound_self=True)}
    if not takes:
        raise Refuse(
            f"{owner.name.value}.forward, which `super().forward` reaches, does not take {RATIO} as this rewrite adds it"
            " (its token drop is not rewritten there, it is not its file's own, or the name is its own parameter):"
            " the kept count is not passed"
        )
    if module is not ctx.module:
        # that file's rewrite proved its drop then; an edit since (`mask = ~mask` before the
        # drop) would make the count another mask's: the proof is made again on it as it is
        why = _counted_mask_unproven(ctx.context_of(module), owner, forward, next(iter(counted)))
        if why is not None:
            raise Refuse(f"{why} in {owner.name.value}.forward: the kept count is not passed")
        # and its count must still be the one get_random_mask there keeps (an edit since,
        # `round` for `int`, would leave the count it emitted stale)
        why = _stale_count(ctx.context_of(module), forward, next(iter(counted)))
        if why is not None:
            raise Refuse(f"{why} in {owner.name.value}.forward: the kept count is not passed")
    maker = method_of(ctx, module, owner, "get_random_mask")
    if maker is None or maker[1] is not owner:
        raise Refuse(f"{owner.name.value} does not define the get_random_mask its count is read from")
    # the methods that forward calls on self (a hook given the mask) run their defs too
    called = sorted(n for n in self_attributes(forward) if method_of(ctx, module, owner, n) is not None)
    again = next(
        (
            why for where in dict.fromkeys([module, ctx.module, *chain])  # a patch of its class here, or on the way
            for method in dict.fromkeys(["get_random_mask", "forward", *called]) if (why := replaced(ctx, where, owner, method))
        ),
        None,
    )
    if again is not None:
        raise Refuse(f"{again}: the kept count is not passed")
    hooked = next((m for m in dict.fromkeys([ctx.module, module]) if registers_hooks(m)), None)
    if hooked is not None:  # the drop's own proof looked for hooks in its file only
        where = "this file" if hooked is ctx.module else f"the file of {owner.name.value}"
        raise Refuse(f"{where} registers a forward hook or pre-hook, which may be given the mask: the kept count is not passed")
    # For this class, `self.m` in that forward must be what it is for its owner (a fork's
    # hook the forward hands the mask to, overridden between them, may write it), and no
    # class of these files may mix this class with others (its MRO may put another
    # forward between them, where super() lands, that does not take the ratio).
    reads = self_attributes(forward)
    # a subclass elsewhere overriding such a hook (`class KeepCentreMAE(MAE)` in a module
    # the files import, or beside this file naming the class) is this class for that call
    elsewhere = receiver_modules(ctx, cls)[0]
    why = (
        class_hooks(ctx, ctx.module, cls)  # a metaclass, __getattribute__, __init_subclass__...
        or overridden_between(ctx, cls, owner, reads)
        or overridden_below(dict.fromkeys([ctx.module, module, *elsewhere]), cls, reads)
    )
    if why is not None:
        raise Refuse(f"{why}, which {owner.name.value}.forward reads: the kept count is not passed")
    flow = ctx.flow(func)
    clash = free_names(flow, RATIO)
    if clash:
        raise Refuse(f"{func.name.value} already uses the name {RATIO}")
    assign = single_assign(line)
    if not (
        isinstance(line.body[0], cst.Return) and line.body[0].value is call
        or assign is not None and assign[1] is call
        or len(line.body) == 1 and isinstance(line.body[0], cst.Expr) and line.body[0].value is call
    ):
        raise Refuse("the encoder call is part of a larger expression")
    made_line, *rest = guard.body.body  # type: ignore[union-attr]
    given = ctx.statement(f"{RATIO} = {code(ratio)}\n", like=made_line, replaces=False)  # type: ignore[arg-type]
    if is_name(ratio):
        body = guard.body.with_changes(body=[made_line, given, *rest])  # type: ignore[union-attr]
    else:
        # `self.get_random_mask(x, self.mask_ratio)`: the ratio is read once, before the
        # call (where the call read it: x and the method lookup have no side effects)
        given = given.with_changes(leading_lines=made_line.leading_lines)  # type: ignore[attr-defined]
        remade = line_with(ctx, made_line, {ratio: cst.Name(RATIO)}).with_changes(leading_lines=[])  # type: ignore[arg-type]
        body = guard.body.with_changes(body=[given, remade, *rest])  # type: ignore[union-attr]
    init = ctx.statement(
        f"{RATIO} = None  # static token drop for get_random_mask's mask\n",
        like=guard, replaces=False,
    ).with_changes(leading_lines=guard.leading_lines)
    return {
        guard: cst.FlattenSentinel([init, guard.with_changes(body=body, leading_lines=[])]),
        line: line_with(ctx, line, {call: with_argument(call, f"{RATIO}={RATIO}")}),
    }


def _takes_our_ratio(forward: cst.FunctionDef) -> Set[str]:
    """The mask whose drop a forward of another file counts with RATIO as this rewrite
    gave it (a parameter read only by the kept count it emits, `if type(RATIO) in (int,
    float) and ...: COUNT = ...`, given to one `kept_tokens(x, mask, ..., COUNT)`); an
    empty set where it does not.  A fork's own parameter of that name (the original's, or
    one the rewrite refused to add beside) means something else: the count must not be
    passed into it."""
    if not any(p.name.value == RATIO for p in all_params(forward.params)):
        return set()
    counts = 0
    for node in walk(forward.body):
        if not isinstance(node, cst.If):
            continue
        test = node.test
        first = test.left if isinstance(test, cst.BooleanOperation) else test
        guarded = (  # `type(RATIO) in (int, float)`
            isinstance(first, cst.Comparison) and len(first.comparisons) == 1
            and isinstance(first.left, cst.Call) and is_name(first.left.func, "type") and len(first.left.args) == 1
            and is_name(first.left.args[0].value, RATIO)
            and isinstance(first.comparisons[0].operator, cst.In)
            and code(first.comparisons[0].comparator).replace(" ", "") == "(int,float)"
        )
        body = getattr(node.body, "body", ())
        assign = single_assign(body[0]) if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) else None
        if guarded and node.orelse is None and assign is not None and is_name(assign[0], COUNT):
            counts += 1
    reads = sum(1 for node in walk(forward.body) if isinstance(node, cst.Name) and node.value == RATIO)
    drops = [
        node.args[1].value.value for node in walk(forward.body)  # type: ignore[attr-defined]
        if isinstance(node, cst.Call) and is_name(node.func, KEPT_TOKENS) and len(node.args) == 4
        and is_name(node.args[3].value, COUNT) and is_name(node.args[1].value)
    ]
    if counts != 1 or reads != 2 or len(drops) != 1:  # the test's and the count's reads; one drop
        return set()
    return set(drops)


def _stale_count(ctx: PlanContext, forward: cst.FunctionDef, mask: str) -> Optional[str]:
    """Why the count ``forward`` (of another file, rewritten) gives `kept_tokens` is not
    the count its class's get_random_mask keeps as the file is now, else None."""
    try:
        formula = _random_count(ctx, forward, mask)[0]
    except Refuse as exc:
        return f"its kept count is not proven now ({exc.reason})"
    emitted = [
        single_assign(node.body.body[0])[1]  # type: ignore[attr-defined, index]
        for node in walk(forward.body)
        if isinstance(node, cst.If) and len(getattr(node.body, "body", ())) == 1
        and isinstance(node.body.body[0], cst.SimpleStatementLine)  # type: ignore[attr-defined]
        and single_assign(node.body.body[0]) is not None and is_name(single_assign(node.body.body[0])[0], COUNT)  # type: ignore[attr-defined, index]
    ]
    if len(emitted) != 1 or ast.dump(ast.parse(code(emitted[0]), mode="eval")) != ast.dump(ast.parse(formula, mode="eval")):
        shown = f"`{code(emitted[0])}`" if len(emitted) == 1 else "its count"
        return f"{COUNT} = {shown} is not the kept count of get_random_mask as it is now (`{formula}`)"
    return None


def _counted_mask_unproven(ctx: PlanContext, cls: cst.ClassDef, forward: cst.FunctionDef, mask: str) -> Optional[str]:
    """Why the mask ``forward`` (of another file, rewritten) gives `kept_tokens` with the
    count is not proven the parameter it is given, unchanged -- what :func:`_token_drop`
    proved when it rewrote the drop (only bool casts bind it; nothing writes, stores or
    hands it to a writer before the drop) -- else None."""
    flow = ctx.flow(forward)
    bindings = flow.assigning(mask)
    other = [st for st in bindings if not is_bool_cast(st.line, mask)]
    if mask not in flow.params or other or flow.compound_assigned.get(mask):
        shown = f"`{code(other[0].line)}` at line {ctx.position(other[0].line).line}" if other else "a compound statement"
        return f"{mask} is rebound by {shown}" if mask in flow.params else f"{mask} is not a parameter"
    drop = next(
        n for n in walk(forward.body)
        if isinstance(n, cst.Call) and is_name(n.func, KEPT_TOKENS) and len(n.args) == 4 and is_name(n.args[1].value, mask)
    )
    line = enclosing_line(ctx, drop)
    return (
        written_in_place(ctx, forward, mask) or stored_or_packed(ctx, forward, mask, before=line)
        or passed_to_a_writer(ctx, cls, forward, mask, before=line)
    )


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
