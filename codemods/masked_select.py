"""HR005: loss and label selection `t[mask]` -> static-shape index_select, same rows, same order.

In a method whose tensor argument ``mask`` (a ``(B, N)`` bool mask, True = selected)
selects rows of a ``(B, N, F)`` tensor:

    label = label[mask]                      # (B * n_selected, F)

it emits (the method gains ``num_masked=None``):

    if num_masked is None:  # a mask from the caller: rows may select different counts
        label = label[mask]                  # the original
    else:
        masked_tokens = <the ascending True indices of each row, num_masked of them>
        label = label.flatten(0, 1).index_select(0, (masked_tokens + <b * N>[:, None]).flatten())

Calls inside the method to methods of the same class that gain ``num_masked`` pass it
on when they pass the same mask -- and, at run time, only when the callee is the
class's own (``type(self).m is Cls.m``): a subclass's override keeps upstream's
signature.  An MAE ``forward`` (see ``_mae_forward_calls``) computes the counts of
the mask the model makes itself and passes them to the decoder and the loss.
A method under `# hiera-rewrite: skip` neither gains the count nor is passed it.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple, Union

import dataclasses

import libcst as cst

from hiera_rewrite.flow import FunctionFlow, Stmt
from hiera_rewrite.rewrite import PlanContext, Refuse, Replacement, Rewrite, register

from ._match import code, is_name, method_call, single_assign, target_code
from ._random_mask import count_call, get_random_mask_call, random_mask_guard
from .decoder_fill import planned_fill
from ._mask import (
    MASK_CONTRACT,
    is_bool_cast,
    before_statement,
    with_fallback,
    emitted_fallback,
    shadowed,
    class_reference,
    keyword_if_own,
    own_method,
    ascending_true,
    free_names,
    imports_module,
    imports_typing_optional,
    with_keyword_param,
    written_in_place,
    written_by_a_call,
    methods_given,
    capture,
    leaves_mask_check,
)

COUNT = "num_masked"
INDEX = "masked_tokens"
KEPT = "num_kept"


@register
class MaskedSelect(Rewrite):
    code = "HR005"
    name = "masked-select"
    message = "loss/label selection: t[mask] -> static-shape index_select of the masked tokens (same rows, same order)"
    explanation = """
    The MAE loss selects the masked tokens of the prediction and of the pixel
    labels with boolean indexing, `pred[mask]` and `label[mask]`: a data-dependent
    `nonzero` each (host sync, graph break, no CUDA graph) and a slow backward.

    With a (B, N) bool mask that selects the same number of tokens in every row,
    `t[mask]` is the rows of t at the True positions, row by row, in ascending
    token order.  The rewrite selects exactly those rows with `index_select` on
    t flattened to (B * N, F), at the flat rows b*N + masked_tokens[b] (the indices
    from a stable argsort of `~mask` sliced to a Python-int count): the same
    copy as a `gather` along the token axis, and each row is selected once, so the
    backward is the same bit for bit, but autograd saves only the (B, n) int64 row
    index, not t (the prediction, (B, N, F), for the loss's `pred[mask]`).  The
    result is (B * n, F): the same
    tensor, same shape, same row order, so `forward_loss` still returns
    `(loss, pred[mask], label[mask])` as before.

    The count: the methods gain an optional `num_masked` argument and pass it on to
    each other's own versions.  The MAE's forward computes it from static shapes
    (prediction tokens minus kept units times tokens per unit) only when the mask is
    the model's own -- made by its own forward_encoder with a get_random_mask that
    states its kept count (see HR003), passed through a base forward that states it
    leaves the mask alone (HR003's `forward.leaves_mask`), and decoded by its own
    forward_decoder -- so the training step has no sync.  "Own" is the function as the
    class body defined it, captured there (`__own_forward_loss = forward_loss`): a
    function set on the class later, a subclass's or an instance's is not.  Called without it (a caller's mask: ragged,
    1-D, all-True or all-False masks are all legal), the original boolean selection
    runs, unchanged.  Each keyword goes only to the file's own method: a user's
    subclass that overrides forward_loss or get_pixel_label_2d with upstream's
    signature gets the original call.  And a method passing its mask to such an
    override (forward_loss to get_pixel_label_2d) drops its own count first: the
    override may write the mask in place, and `pred[mask]` then selects as before.
    """ + MASK_CONTRACT

    def plan(self, ctx: PlanContext) -> None:
        if not imports_module(ctx.module, "torch"):
            return
        finder = _Selections()
        ctx.visit(finder)
        for line, name in finder.unannotated:
            ctx.refuse(
                line,
                f"{name} has no tensor annotation: nothing proves it is a (B, N) boolean mask rather than an index",
            )
        # Methods that gain `num_masked`, per class: name -> (function, mask parameter).
        gaining: Dict[cst.ClassDef, Dict[str, _Method]] = {}
        lines_of: Dict[cst.FunctionDef, List[cst.SimpleStatementLine]] = {}
        for func, lines in finder.by_function.items():
            lines = [line for line in lines if not emitted_fallback(ctx, line, COUNT)]
            if not lines:
                continue  # this rewrite's own output
            method = ctx.attempt(lines, lambda: _gaining(ctx, func, lines))
            if method is None:
                continue
            gaining.setdefault(_class_of(ctx, func), {})[func.name.value] = method  # type: ignore[arg-type]
            lines_of[func] = lines
        for cls, methods in gaining.items():
            for method in methods.values():
                func, mask = method.func, method.mask
                edits: Dict[cst.CSTNode, Replacement] = {}
                for line in lines_of[func]:
                    target, value = single_assign(line)  # type: ignore[misc]
                    source = code(value.value)  # type: ignore[attr-defined]
                    edits[line] = with_fallback(
                        ctx,
                        line,
                        COUNT,
                        "a mask from the caller: rows may select different counts, so select as before",
                        [
                            f"{INDEX} = {ascending_true(mask, COUNT)}",
                            f"{target_code(line)} {source}.flatten(0, 1).index_select(0, ({INDEX} + torch.arange("
                            f"0, {source}.shape[0] * {source}.shape[1], {source}.shape[1], device={INDEX}.device)"
                            "[:, None]).flatten())",
                        ],
                    )
                owned: List[str] = []
                resets = _count_only_while_own(ctx, cls, func, mask, methods, owned)
                reset_calls = {call for call, _ in resets}
                calls = _pass_count_on(ctx, cls, func, methods, lambda arg: is_name(arg, mask), owned=owned, reset=reset_calls)
                _calls_in_lines(ctx, calls, edits)
                for stmt, reset in {stmt: reset for _, (stmt, reset) in resets}.items():
                    edits[stmt] = before_statement(reset, edits.get(stmt))
                if owned:
                    edits[cls] = capture(ctx, cls, owned)
                annotation = "Optional[int]" if imports_typing_optional(ctx.module) else None
                edits[func] = with_keyword_param(ctx, func, COUNT, annotation)
                ctx.add_site(lines_of[func][0], edits)
            for site in _mae_forward_calls(ctx, cls, methods):
                ctx.add_site(*site)


@dataclasses.dataclass
class _Method:
    """A method gaining `num_masked`, and the name of its mask parameter."""

    func: cst.FunctionDef
    mask: str

    def mask_argument(self, call: cst.Call) -> Optional[cst.BaseExpression]:
        """The expression ``call`` (a ``self.<method>(...)`` call) binds to the mask."""
        if any(a.star for a in call.args):
            return None
        params = [p.name.value for p in (*self.func.params.posonly_params, *self.func.params.params)][1:]
        positional = [a.value for a in call.args if a.keyword is None]
        if self.mask in params and params.index(self.mask) < len(positional):
            return positional[params.index(self.mask)]
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == self.mask:
                return arg.value
        return None


def _class_of(ctx: PlanContext, func: cst.FunctionDef) -> Optional[cst.ClassDef]:
    block = ctx.parent(func)
    owner = ctx.parent(block) if block is not None else None
    return owner if isinstance(owner, cst.ClassDef) else None


class _Selections(cst.CSTVisitor):
    """`t = s[mask]` where ``mask`` is an argument of the enclosing method."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: List[cst.FunctionDef] = []
        self.by_function: Dict[cst.FunctionDef, List[cst.SimpleStatementLine]] = {}
        self.unannotated: List[Tuple[cst.SimpleStatementLine, str]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if not self.stack:
            return
        func = self.stack[-1]
        assign = single_assign(node)
        if assign is None or not is_name(assign[0]) or not isinstance(assign[1], cst.Subscript):
            return
        sub = assign[1]
        if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index) or not is_name(sub.value):
            return
        index = sub.slice[0].slice.value
        if not is_name(index):
            return
        kind = _param_kind(func, index.value)  # type: ignore[attr-defined]
        if kind == "tensor":
            self.by_function.setdefault(func, []).append(node)
        elif kind == "unannotated":
            self.unannotated.append((node, index.value))  # type: ignore[attr-defined]


def _param_kind(func: cst.FunctionDef, name: str) -> Optional[str]:
    """"tensor" for a parameter annotated as a tensor, "unannotated" for one without an
    annotation, None otherwise (another annotation, or not a parameter)."""
    for param in (*func.params.posonly_params, *func.params.params):
        if param.name.value == name:
            if param.annotation is None:
                return "unannotated"
            if code(param.annotation.annotation) in ("torch.Tensor", "Tensor", "torch.BoolTensor"):
                return "tensor"
            return None
    return None


def _gaining(ctx: PlanContext, func: cst.FunctionDef, lines: List[cst.SimpleStatementLine]) -> "_Method":
    """The method ``func`` as one that gains `num_masked` for its selections ``lines``."""
    masks = {code(line.body[0].value.slice[0].slice.value) for line in lines}  # type: ignore[attr-defined]
    owner = ctx.skipped_by(func)
    if owner is not None:
        raise Refuse(f"left alone: `# hiera-rewrite: skip` on {owner}")
    cls = _class_of(ctx, func)
    flow = ctx.flow(func)
    if len(masks) != 1:
        raise Refuse(f"{func.name.value} selects with several masks ({', '.join(sorted(masks))})")
    if free_names(flow, COUNT, INDEX):
        raise Refuse(f"{func.name.value} already uses the name {COUNT} or {INDEX}")
    if cls is None or not func.params.params or func.params.params[0].name.value != "self" or func.decorators:
        raise Refuse(f"{func.name.value} is not a plain method of a class: its callers cannot pass the count")
    (mask,) = masks
    if [s for s in flow.assigning(mask) if not is_bool_cast(s.line, mask)] or flow.compound_assigned.get(mask):
        raise Refuse(f"the mask argument {mask} is reassigned in {func.name.value}")
    written = written_in_place(ctx, func, mask) or written_by_a_call(ctx, cls, func, mask, ordered=True)
    if written is not None:
        raise Refuse(f"{written}: how many tokens it selects in each row is not proven")
    return _Method(func, mask)


def _pass_count_on(
    ctx: PlanContext,
    cls: cst.ClassDef,
    func: cst.FunctionDef,
    methods: Dict[str, "_Method"],
    same_mask: Callable[[cst.BaseExpression], bool],
    value: str = COUNT,
    owned: Optional[List[str]] = None,
    reset: frozenset = frozenset(),
) -> Dict[cst.CSTNode, Replacement]:
    """`self.<method>(...)` calls inside ``func`` to methods of the same class that gain
    ``num_masked`` pass it when the mask they pass is the one counted (``same_mask``)
    and, at run time, the method is the class's own (``own_method``; its name is added
    to ``owned``, for ``capture``): a subclass's override keeps upstream's signature
    and gets the call as it was.  A call in ``reset`` comes after
    ``_count_only_while_own``'s reset, which already made the count None unless the
    method is the class's own: it passes the count when there is one."""
    edits: Dict[cst.CSTNode, Replacement] = {}
    owner = class_reference(ctx, cls)
    if owner is None or shadowed(ctx, "type"):
        return edits

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found = method_call(node, *methods)
            if not found or not is_name(found[0], "self") or not node.args:
                return
            if any(a.keyword is not None and a.keyword.value == COUNT or a.star == "**" for a in node.args):
                return
            method = found[1].func.attr.value  # type: ignore[attr-defined]
            argument = methods[method].mask_argument(node)
            if argument is None or not same_mask(argument):
                return
            if node in reset and value == COUNT:
                edits[node] = _with_keyword(node, f'**({{}} if {COUNT} is None else {{"{COUNT}": {COUNT}}})')
                return
            if owned is not None:
                owned.append(method)
            edits[node] = _with_keyword(node, keyword_if_own(owner, method, COUNT, value))

    ctx.visit(_Calls(), func.body)
    return edits


def _count_only_while_own(
    ctx: PlanContext, cls: cst.ClassDef, func: cst.FunctionDef, mask: str, methods: Dict[str, "_Method"],
    owned: List[str],
) -> List[Tuple[cst.Call, Tuple[cst.BaseStatement, cst.BaseStatement]]]:
    """Before each `self.<m>(..., mask, ...)` call that runs before the count's last use:
    `num_masked = num_masked if <m is the file's own> else None` (each call, with the
    statement holding it and the reset to put before that statement; the methods it
    asks about are added to ``owned``).  The file's own <m> leaves the mask alone
    (``written_by_a_call`` proved it); an override in a subclass of the user's, or a
    function set on the class or the instance, may write it in place (`mask[:, 0] =
    True` in a get_pixel_label_2d of its own), and the selections after the call then
    count the mask themselves."""
    owner = class_reference(ctx, cls)
    if owner is None or shadowed(ctx, "type"):
        return []  # no method of the file passes the count then
    by_statement: Dict[cst.BaseStatement, List[str]] = {}
    calls: List[Tuple[cst.Call, cst.BaseStatement]] = []
    for call, reached in methods_given(ctx, cls, func, mask, set(methods)):
        stmt = _statement_holding(ctx, call)
        names = by_statement.setdefault(stmt, [])
        names += [m for m in reached if m not in names]
        calls.append((call, stmt))
    resets: Dict[cst.BaseStatement, cst.BaseStatement] = {}
    for stmt, names in by_statement.items():
        owned += [m for m in names if m not in owned]
        own = " and ".join(own_method(owner, m) for m in names)
        resets[stmt] = ctx.statement(
            f"# an override of {' or '.join(names)} may write {mask} in place: then its count is unknown\n"
            f"{COUNT} = {COUNT} if {own} else None\n",
            like=stmt,  # type: ignore[arg-type]
            replaces=False,
        )
    return [(call, (stmt, resets[stmt])) for call, stmt in calls]


def _statement_holding(ctx: PlanContext, node: cst.CSTNode) -> cst.BaseStatement:
    """The statement of a block (a function's, an if's...) that holds ``node``."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and isinstance(
            ctx.parent(ancestor), cst.IndentedBlock
        ):
            return ancestor
    raise Refuse("a call given the mask is not in a statement of a block")  # pragma: no cover


def _calls_in_lines(ctx: PlanContext, calls: Dict[cst.CSTNode, Replacement], edits: Dict[cst.CSTNode, Replacement]) -> None:
    """Put each edited call back into its statement, formatted (the statement is the edit)."""
    by_line: Dict[cst.SimpleStatementLine, Dict[cst.CSTNode, Replacement]] = {}
    for call, new in calls.items():
        line = next(a for a in ctx.ancestors(call) if isinstance(a, cst.SimpleStatementLine))
        by_line.setdefault(line, {})[call] = new
    for line, swaps in by_line.items():
        edits[line] = _replace_in_line(ctx, line, swaps)


def _with_keyword(node: cst.Call, argument: str) -> cst.Call:
    """``node`` with one more argument (``**(...)``) at the end."""
    args = list(node.args)
    last = args[-1]
    if last.comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    extra = cst.parse_expression(f"f({argument})").args[0]  # type: ignore[attr-defined]
    args.append(extra.with_changes(comma=last.comma if last.comma is not cst.MaybeSentinel.DEFAULT else cst.MaybeSentinel.DEFAULT))
    return node.with_changes(args=args)


def _mae_forward_calls(ctx: PlanContext, cls: cst.ClassDef, methods: Dict[str, "_Method"]):
    """The MAE forward passes static counts, only for the mask the model makes itself:

        latent, mask = self.forward_encoder(x, mask_ratio, mask=mask)   # E
        pred, pred_mask = self.forward_decoder(latent, mask)             # D
        return *self.forward_loss(x, pred, ~pred_mask), mask             # L

    When E's mask argument is None and forward_encoder is the class's own (it then
    makes the mask with ``self.get_random_mask(x, mask_ratio)``), the count that
    get_random_mask states (if it does) is computed before E.  D passes it to a
    decoder whose fill HR004 rewrites; L passes the masked-token count
    ``pred_mask.shape[1] - latent.shape[1] * math.prod(latent.shape[2:-1])`` (the
    kept units, upsampled by the class's own decoder) to the methods gaining it.
    Every keyword goes only to the file's own method (an override keeps upstream's
    signature), and every count is None when the mask came from a caller."""
    if not imports_module(ctx.module, "math"):
        return []
    owner = class_reference(ctx, cls)
    if owner is None or shadowed(ctx, "type", "getattr"):
        return []
    sites = []
    defined = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}  # type: ignore[union-attr]
    decoder = defined.get("forward_decoder")
    if decoder is None or not _fills_units(ctx, decoder):
        # pred_mask's count is known only for Hiera's decoder: the kept units, upsampled.
        return []
    for func in defined.values():
        if ctx.skipped_by(func) is not None:
            continue
        flow = ctx.flow(func)
        for stmt in flow.stmts:
            decoded = single_assign(stmt.line) if stmt.line.body else None
            if decoded is None or not isinstance(decoded[0], cst.Tuple) or len(decoded[0].elements) != 2:
                continue
            call = method_call(decoded[1], "forward_decoder")
            if call is None or not is_name(call[0], "self") or len(call[1].args) != 2:
                continue
            if any(a.keyword is not None or a.star for a in call[1].args):
                continue
            pred, pred_mask = (e.value for e in decoded[0].elements)
            latent, unit_mask = (a.value for a in call[1].args)
            if not (is_name(pred) and is_name(pred_mask) and is_name(latent) and is_name(unit_mask)):
                continue
            names = (pred_mask.value, latent.value)  # type: ignore[attr-defined]
            if any(len(flow.assigning(n)) != 1 or flow.compound_assigned.get(n) or n in flow.params for n in names):
                continue  # the count is right only for the decoder's own outputs
            if len({pred_mask.value, latent.value, pred.value}) != 3:  # type: ignore[attr-defined]
                continue
            encoded = _encoder_call(ctx, defined, flow, stmt, latent.value, unit_mask.value)  # type: ignore[attr-defined]
            if isinstance(encoded, str):
                ctx.refuse(call[1], encoded)
                continue
            if encoded is not None:
                changed = [w for w in (written_in_place(ctx, func, n.value) for n in (unit_mask, pred_mask)) if w]  # type: ignore[attr-defined]
                unproven = _decoded_mask(ctx, decoder)
                if changed or unproven:
                    why = f"{changed[0]} in {func.name.value}" if changed else unproven
                    ctx.refuse(call[1], f"{why}: the masked counts are not passed")
                    continue
            if encoded is None:
                unguarded = _unguarded_random_mask(ctx, defined, flow, stmt, latent.value)  # type: ignore[attr-defined]
                if unguarded is not None:
                    ctx.refuse(call[1], unguarded)
                continue
            toggled = lambda arg: (  # noqa: E731
                isinstance(arg, cst.UnaryOperation)
                and isinstance(arg.operator, cst.BitInvert)
                and is_name(arg.expression, pred_mask.value)  # type: ignore[attr-defined]
            )
            for after in flow.stmts[stmt.index + 1:]:
                if not after.line.body:
                    continue
                holder = cst.FunctionDef(cst.Name("f"), cst.Parameters(), cst.IndentedBlock([after.line]))
                owned: List[str] = []
                calls = _pass_count_on(ctx, cls, holder, methods, toggled, owned=owned)
                if not calls:
                    continue
                clash = free_names(flow, COUNT, KEPT)
                if clash:
                    ctx.refuse(next(iter(calls)), f"{func.name.value} already uses the name(s) {', '.join(clash)}")
                    break
                encoder_line, encoder, mask_arg, receiver, count_args = encoded
                edits: Dict[cst.CSTNode, Replacement] = {}
                prelude = ctx.statement(
                    f"# the mask {encoder} makes when none is given: how many units get_random_mask\n"
                    f"# keeps in every row, if it states it (a Python int: no host sync)\n"
                    f"{KEPT} = None\n",
                    like=encoder_line,
                    replaces=False,
                )
                # the encoder gives its mask to super().forward: the count holds after it only
                # while that forward states it leaves the mask alone (HR003's leaves_mask)
                through = _super_forward_check(ctx, cls, owner, defined[encoder])
                if through is None:
                    ctx.refuse(call[1], f"{encoder} calls super().forward, and the class's base is not a plain name:"
                               " the masked counts are not passed")
                    break
                compute = ctx.statement(
                    f"if {mask_arg} is None and {own_method(owner, encoder)}{through}:\n"
                    f"    {KEPT} = {count_call(receiver, count_args)}\n",
                    like=encoder_line,
                    replaces=False,
                )
                recheck = ctx.statement(
                    f"# an encoder that kept another count (the mask changed on the way) gets none\n"
                    f"{KEPT} = None if {KEPT} is None or {latent.value}.shape[1] != {KEPT} else {KEPT}\n",  # type: ignore[attr-defined]
                    like=encoder_line,
                    replaces=False,
                )
                edits[encoder_line] = cst.FlattenSentinel(
                    [prelude.with_changes(leading_lines=[*encoder_line.leading_lines, *prelude.leading_lines]),
                     compute, encoder_line.with_changes(leading_lines=[]), recheck]
                )
                fill = planned_fill(ctx, decoder)
                if fill:
                    edits[call[1]] = _with_keyword(call[1], keyword_if_own(owner, "forward_decoder", KEPT, KEPT))
                    edits[stmt.line] = _replace_in_line(ctx, stmt.line, {call[1]: edits.pop(call[1])})
                count = (
                    f"{pred_mask.value}.shape[1] - {latent.value}.shape[1]"  # type: ignore[attr-defined]
                    f" * math.prod({latent.value}.shape[2:-1])"  # type: ignore[attr-defined]
                )
                count_stmts = [
                    ctx.statement(
                        "# masked prediction tokens, when every row keeps num_kept units: all of\n"
                        "# them minus the kept units' (static shapes)\n"
                        f"{COUNT} = None\n",
                        like=after.line,
                        replaces=False,
                    ),
                    ctx.statement(
                        f"if {KEPT} is not None and {pred_mask.value}.dim() == 2 and "  # type: ignore[attr-defined]
                        f"{own_method(owner, 'forward_decoder')}:\n"
                        f"    {COUNT} = {count}\n",
                        like=after.line,
                        replaces=False,
                    ),
                ]
                edits[cls] = capture(ctx, cls, [encoder, "forward_decoder", *owned])
                new_line = _replace_in_line(ctx, after.line, calls)
                edits[after.line] = cst.FlattenSentinel(
                    [count_stmts[0].with_changes(leading_lines=[*after.line.leading_lines, *count_stmts[0].leading_lines]),
                     count_stmts[1], new_line.with_changes(leading_lines=[])]
                )
                sites.append((next(iter(calls)), edits, "MAE forward: pass the counts of the model's own mask (static shapes)"))
                break
    return sites


def _super_forward_check(ctx: PlanContext, cls: cst.ClassDef, owner: str, encoder: cst.FunctionDef) -> Optional[str]:
    """`` and <super().forward is the base's and leaves the mask alone>`` when ``encoder``
    calls ``super().forward(...)`` (the mask it makes goes there), "" when it does not,
    None when the base class is not a plain name."""
    found: List[cst.Call] = []

    class _Super(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            f = node.func
            if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Call) and is_name(f.value.func, "super"):
                found.append(node)

    ctx.visit(_Super(), encoder.body)
    if not found:
        return ""
    if not cls.bases or not is_name(cls.bases[0].value):
        return None
    return f" and {leaves_mask_check(owner, cls.bases[0].value.value)}"  # type: ignore[attr-defined]


def _encoder_call(
    ctx: PlanContext, defined: Dict[str, cst.FunctionDef], flow: FunctionFlow, decode: Stmt, latent: str, mask: str
) -> Union[None, str, Tuple[cst.SimpleStatementLine, str, str, str, List[str]]]:
    """`latent, mask = self.<encoder>(...)` before ``decode``, the one binding of both,
    where <encoder> is a method of the class that makes the mask with
    ``self.get_random_mask(a, b)`` when its mask argument is None and returns it.
    ``self.<module>.get_random_mask`` (an encoder held as a submodule) counts too.
    Returns (line, encoder, the name passed as its mask, the get_random_mask's
    owner, the names passed as a and b)."""
    found = [s for s in flow.assigning(latent) if s.index < decode.index]
    if len(found) != 1 or [s.index for s in flow.assigning(mask) if s.index < decode.index] != [found[0].index]:
        return None
    line = found[0].line
    assign = single_assign(line)
    if assign is None or not isinstance(assign[0], cst.Tuple) or len(assign[0].elements) != 2:
        return None
    if not (is_name(assign[0].elements[0].value, latent) and is_name(assign[0].elements[1].value, mask)):
        return None
    if any(s.index > found[0].index and s.index < decode.index and mask in s.assigned for s in flow.stmts):
        return None
    call = assign[1]
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and is_name(call.func.value, "self")):
        return None
    encoder = defined.get(call.func.attr.value)
    if encoder is None or encoder.decorators or any(a.star for a in call.args):
        return None
    params = [p.name.value for p in encoder.params.params]
    if not params or params[0] != "self" or encoder.params.posonly_params or encoder.params.kwonly_params:
        return None
    bound: Dict[str, cst.BaseExpression] = {}
    for i, arg in enumerate(call.args):
        name = arg.keyword.value if arg.keyword is not None else (params[i + 1] if i + 1 < len(params) else None)
        if name is None or name in bound:
            return None
        bound[name] = arg.value
    encoder_flow = ctx.flow(encoder)
    for param in params[1:]:
        made = random_mask_guard(ctx, encoder, param)
        if made is None or not made.self_owned():
            continue
        if not made.once:
            return None
        written = written_in_place(ctx, encoder, param)
        if written is not None:
            return (
                f"{written} in {encoder.name.value}: the count get_random_mask states may not be the mask's;"
                " the counts are not passed"
            )
        inner = made.args
        if not all(
            is_name(a)
            and a.value in params[1:]  # type: ignore[attr-defined]
            and not any(s.index < made.made.index for s in encoder_flow.assigning(a.value))  # type: ignore[attr-defined]
            and not encoder_flow.compound_assigned.get(a.value)  # type: ignore[attr-defined]
            for a in inner
        ):
            return None
        last = encoder.body.body[-1]  # type: ignore[union-attr]
        returned = last.body[0] if isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 else None
        if not (
            isinstance(returned, cst.Return)
            and isinstance(returned.value, cst.Tuple)
            and len(returned.value.elements) == 2
            and is_name(returned.value.elements[1].value, param)
        ):
            return None
        returns = [r for r in _returns(ctx, encoder) if r is not returned]
        if returns:
            return None
        passed = [bound.get(param), *(bound.get(a.value) for a in inner)]  # type: ignore[attr-defined]
        if not all(is_name(p) for p in passed):
            return None
        return line, encoder.name.value, passed[0].value, code(made.owner), [p.value for p in passed[1:]]  # type: ignore[union-attr, arg-type]
    return None


def _unguarded_random_mask(
    ctx: PlanContext, defined: Dict[str, cst.FunctionDef], flow: FunctionFlow, decode: Stmt, latent: str
) -> Optional[str]:
    """Why the counts are not passed where the encoder method whose output is decoded
    (`latent, mask = self.<encoder>(...)`) makes its mask with get_random_mask, but not
    as `if mask is None: mask = self.get_random_mask(x, ratio)`; else None (no MAE)."""
    found = [s for s in flow.assigning(latent) if s.index < decode.index]
    assign = single_assign(found[-1].line) if found and found[-1].line.body else None
    call = assign[1] if assign is not None else None
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and is_name(call.func.value, "self")):
        return None
    encoder = defined.get(call.func.attr.value)
    made = get_random_mask_call(ctx, encoder) if encoder is not None else None
    if encoder is None or made is None:
        return None
    params = [p.name.value for p in encoder.params.params]
    if any(random_mask_guard(ctx, encoder, p) is not None for p in params):
        return None
    line = next((a for a in ctx.ancestors(made) if isinstance(a, cst.SimpleStatementLine)), None)
    return (
        f"{encoder.name.value} makes its mask by `{code(line or made)}` at line {ctx.position(made).line}, not by"
        " `if mask is None: mask = self.get_random_mask(x, mask_ratio)`: the masked counts are not passed"
        " (the loss and label selection count the mask themselves: host syncs)"
    )


def _decoded_mask(ctx: PlanContext, decoder: cst.FunctionDef) -> Optional[str]:
    """None when the mask ``decoder`` returns is its fill mask brought back to token
    order, as upstream's:

        x_dec[mask] = x.flatten()                    # mask: the unit mask, expanded
        ...
        mask = undo_windowing(mask[..., 0:1], ...)   # (B, *tokens, 1)
        mask = mask.view(x.shape[0], -1)             # (B, tokens), views/reshapes only
        return x, mask

    -- so it is True at exactly the kept units' tokens and the masked count is all
    tokens minus theirs.  Else why not (a fork's decoder predicting every token
    returns another mask)."""
    returns = _returns(ctx, decoder)
    last = decoder.body.body[-1]  # type: ignore[union-attr]
    returned = last.body[0] if isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 else None
    if (
        returns != [returned]
        or not isinstance(returned.value, cst.Tuple)  # type: ignore[union-attr]
        or len(returned.value.elements) != 2  # type: ignore[union-attr]
        or not is_name(returned.value.elements[1].value)  # type: ignore[union-attr]
    ):
        return f"{decoder.name.value} does not end with one `return x, mask`, so the mask it returns is not followed"
    flow = ctx.flow(decoder)
    fills = [
        s for s in flow.stmts
        if s.line.body and (assign := single_assign(s.line)) is not None and isinstance(assign[0], cst.Subscript)
        and method_call(assign[1], "flatten") is not None and len(assign[0].slice) == 1
        and isinstance(assign[0].slice[0].slice, cst.Index) and is_name(assign[0].slice[0].slice.value)
    ]
    if len(fills) != 1:
        return f"{decoder.name.value} does not fill the grid once with `x_dec[mask] = x.flatten()`, so the mask it returns is not followed"
    fill = fills[0]
    filled = single_assign(fill.line)[0].slice[0].slice.value.value  # type: ignore[index, union-attr]
    name = returned.value.elements[1].value.value  # type: ignore[union-attr]
    stmt = flow.stmt_of(last)
    why = (
        f"the mask {decoder.name.value} returns is not its fill mask brought back to token order"
        f" (`undo_windowing({filled}[..., 0:1], ...)`, then views), so how many tokens it masks is not known"
    )
    while True:
        defs = [s for s in flow.assigning(name) if s.index < stmt.index]
        if not defs or flow.compound_assigned.get(name) or not defs[-1].line.body:
            return why
        stmt = defs[-1]
        assign = single_assign(stmt.line)
        if assign is None or not is_name(assign[0], name) or written_in_place(ctx, decoder, name):
            return why
        value = assign[1]
        view = method_call(value, "view", "reshape")
        if view is not None and is_name(view[0]):
            name = view[0].value  # type: ignore[attr-defined]
            continue
        if (
            isinstance(value, cst.Call)
            and is_name(value.func, "undo_windowing")
            and value.args
            and value.args[0].keyword is None
            and code(value.args[0].value).replace(" ", "") == f"{filled}[...,0:1]"
        ):
            source = [s for s in flow.assigning(filled) if s.index < stmt.index]
            at_fill = [s for s in flow.assigning(filled) if s.index < fill.index]
            if not source or not at_fill or source[-1] is not at_fill[-1]:
                return why
            return None
        return why


def _returns(ctx: PlanContext, func: cst.FunctionDef) -> List[cst.Return]:
    found: List[cst.Return] = []

    class _Returns(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is func

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

    ctx.visit(_Returns(), func)
    return found


def _fills_units(ctx: PlanContext, decoder: cst.FunctionDef) -> bool:
    """The decoder puts the kept units on the full grid: `x_dec[mask] = x.flatten()`,
    or HR004's scatter of `kept_windows` (a file rewritten in two runs)."""
    found = []

    class _Fill(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            assign = single_assign(node)
            if assign is None:
                return
            if isinstance(assign[0], cst.Subscript) and method_call(assign[1], "flatten"):
                found.append(node)
            scatter = method_call(assign[1], "scatter")
            if scatter and "kept_windows" in code(scatter[1]):
                found.append(node)

    ctx.visit(_Fill(), decoder.body)
    return bool(found)


def _replace_in_line(ctx: PlanContext, line: cst.SimpleStatementLine, calls: Dict[cst.CSTNode, Replacement]) -> cst.BaseStatement:
    class _Swap(cst.CSTTransformer):
        def leave_Call(self, original_node, updated_node):
            new = calls.get(original_node)
            return new if new is not None else updated_node

    swapped = line.visit(_Swap())
    body_code = "; ".join(cst.Module(body=[]).code_for_node(s) for s in swapped.body)  # type: ignore[attr-defined]
    return ctx.statement(_one_line(body_code) + "\n", like=line)


def _one_line(source: str) -> str:
    from ._match import code as one_line_code

    return "; ".join(one_line_code(s) for s in cst.parse_module(source).body[0].body)  # type: ignore[attr-defined]
