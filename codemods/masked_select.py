"""HR005: loss and label selection `t[mask]` -> static-shape index_select, same rows, same order.

In a method whose tensor argument ``mask`` (a ``(B, N)`` bool mask, True = selected)
selects rows of a ``(B, N, F)`` tensor:

    label = label[mask]                      # (B * n_selected, F)

it emits (the method gains ``num_masked=None``; ``masked_rows`` and ``true_rows`` go
above the class):

    label = masked_rows(label, mask, num_masked)

``masked_rows(t, mask, None)`` is ``t[mask]``; with the mask's True count, the rows of t
flattened to (B * N, F) at the flat indices of mask's True entries, ascending: the
same rows, in the same order, for every mask with that count (ragged rows included).

The count comes from the data's shapes: an MAE ``forward`` whose class's own
``forward_decoder`` fills the grid (HR004's idiom, whose fill holds exactly
``latent``'s units, ``math.prod(latent.shape[:2])``, each brought by ``undo_windowing``
to ``per_unit = pred_mask.numel() // mask.numel()`` tokens) masks
``per_unit * (mask.numel() - math.prod(latent.shape[:2]))`` prediction tokens, and passes that to ``forward_loss`` while ``not_overridden(self, __class__,
"forward_decoder", "forward_loss")``.  A method passing the mask to another of the
class's methods (forward_loss to get_pixel_label_2d) passes the count only to the
class's own; an override gets upstream's call, and the count is dropped after it (it
may write the mask).  A method under `# hiera-rewrite: skip` neither gains the count
nor is passed it.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

import dataclasses

import libcst as cst

from hiera_rewrite.flow import METADATA_ATTRIBUTES, METADATA_METHODS, enclosing_line, loaded_names, root_name, tensor_aliases
from hiera_rewrite.rewrite import PlanContext, Refuse, Replacement, Rewrite, proves, register

from ._calls import binds as _calls_binds
from ._calls import (
    _PURE_BUILTINS,
    base_class,
    hands_on,
    value_bindings,
    FRESH_METHODS,
    bound_locally,
    class_bindings,
    followed_function,
    function_of,
    imported_modules,
    nodes_of,
    method_of,
    resolve_class,
    passed_to_a_writer,
    _bindings,
    injected,
    _built_classes,
    _outside_the_files,
    _patches,
    _submodules,
    module_class_unproven,
    _writes_a_namespace,
    receiver_modules,
    registers_hooks,
    replaced,
    run_time_checked,
    self_call_unproven,
    sets_submodule_by_name,
    stored_elsewhere,
    torch_or_builtin,
    walk,
)
from ._inplace import FORWARD_HOOKS
from .decoder_fill import _ARITHMETIC_METHODS
from ._match import code, exact_types, flatten_targets, is_name, keeps_dtype, method_call, single_assign, target_code
from ._mask import (
    MASK_CONTRACT,
    RUNS_OWN,
    MASKED_ROWS,
    TRUE_ROWS,
    add_helper,
    line_with,
    class_reference,
    name_taken,
    free_names,
    imports_module,
    is_bool_cast,
    methods_given,
    returned_as_is,
    stored_or_packed,
    with_argument,
    with_keyword_param,
    written_by_a_call,
    written_in_place,
)

COUNT = "num_masked"
PER_UNIT = "per_unit"  # MAE forward: tokens per mask unit at the prediction's resolution


@register
class MaskedSelect(Rewrite):
    code = "HR005"
    name = "masked-select"
    message = "loss/label selection: t[mask] -> static-shape index_select of the masked tokens (same rows, same order)"
    explanation = """
    The MAE loss selects the masked tokens of the prediction and of the pixel
    labels with boolean indexing, `pred[mask]` and `label[mask]`: a data-dependent
    `nonzero` each (host sync, graph break, no CUDA graph) and a slow backward.

    For a (B, N) bool mask with n True entries in all, `t[mask]` is the rows of t at
    the True positions of the flattened mask, in ascending order.  The rewrite
    selects exactly those rows with `index_select` on t flattened to (B * N, F), at
    the indices of a stable argsort of the flattened `~mask` sliced to n, a Python
    int: `masked_rows(t, mask, n)`, a helper it puts above the class (without a
    count, it is `t[mask]`).  Each row is selected once, so the backward is the
    same bit for bit, and autograd saves only the int64 index.  The result is the
    same tensor, shape and row order, so `forward_loss` still returns
    `(loss, pred[mask], label[mask])`.

    The count comes from the shapes the data already has, for the model's own masks
    and a caller's alike: the class's own forward_decoder fills exactly as many
    units as the latent holds (its `x_dec[mask] = x.flatten()` raises otherwise; proven
    only where the fill's source is the latent argument itself or made from it by an
    `nn.Linear` the class sets in __init__: a fork slicing off a unit it added, or
    expanding pooled units, fills another count and keeps `t[mask]`), so
    the MAE's forward passes `per_unit * (mask.numel() - math.prod(latent.shape[:2]))`
    (`per_unit = pred_mask.numel() // mask.numel()`: tokens per unit, whatever the module
    the decoder embeds with; undo_windowing proven to only rearrange) to forward_loss, which passes it to get_pixel_label_2d/3d.  Each count goes only to
    a method that is not overridden (`not_overridden(self, __class__, ...)`, one
    helper; `__class__` is the class defining the caller, whatever the module's name
    for it is later bound to): a subclass's override
    of forward_decoder, forward_loss or the labels gets upstream's call, and the
    selections after it count the mask themselves.
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
            candidates = {f.name.value for f in finder.by_function}
            method = ctx.attempt(lines, lambda: _gaining(ctx, func, lines, candidates))
            if method is None:
                continue
            gaining.setdefault(_class_of(ctx, func), {})[func.name.value] = method  # type: ignore[arg-type]
            lines_of[func] = lines
        for cls, methods in list(gaining.items()):
            if cls is None or all(method_of(ctx, ctx.module, cls, m) is None for m in ("forward_loss", "forward_decoder")):
                # not an MAE (detectron2's ROIHeads indexing by matched ids): no count ever
                # reaches it, and an edit would only select as before
                for method in methods.values():
                    ctx.refuse(
                        lines_of[method.func][0],
                        f"{cls.name.value if cls is not None else method.func.name.value} defines no forward_loss or forward_decoder"
                        " (here or in a base class of the files): not an MAE's selection, no masked count reaches it",
                    )
                del gaining[cls]
        for cls, methods in gaining.items():
            owner = class_reference(ctx, cls)
            # A method whose own site is refused gains no `num_masked`: no caller may pass
            # it one (a module binding `masked_rows` itself refuses every site).  Refusing
            # one may refuse its callers' sites: repeat until none more drops out.
            while True:
                failing = [
                    name for name, method in methods.items()
                    if not proves(lambda: _method_site(ctx, cls, owner, method, lines_of[method.func], methods))
                ]
                if not failing:
                    break
                for name in failing:
                    method = methods.pop(name)
                    ctx.attempt(lines_of[method.func], lambda: _method_site(ctx, cls, owner, method, lines_of[method.func], {**methods, name: method}))
            # The count enters at the class's forward (forward_decoder, then the calls it
            # passes the count to) and goes on from method to method with the mask: a method
            # no such chain reaches gains a parameter nobody passes (a fork's forward without
            # forward_loss), and its selection would only run as before.
            sites, roots = _mae_forward_calls(ctx, cls, owner, methods) if owner is not None else ([], set())
            reached = _reached(ctx, cls, methods, roots)
            for name in [n for n in methods if n not in reached]:
                method = methods.pop(name)
                ctx.refuse(
                    lines_of[method.func][0],
                    f"no count reaches {name}: {cls.name.value}'s forward passes none (no `forward_decoder` then a call"
                    " given its mask, e.g. `forward_loss`), nor does a method it reaches",
                )
            for method in methods.values():
                lines = lines_of[method.func]
                edits = ctx.attempt(lines, lambda: _method_site(ctx, cls, owner, method, lines, methods))
                if edits is not None:
                    ctx.add_site(lines[0], edits)
            for site in sites:
                ctx.add_site(*site)


@dataclasses.dataclass
class _Method:
    """A method gaining `num_masked`, and the name of its mask parameter."""

    func: cst.FunctionDef
    mask: str
    guarded: FrozenSet[int] = frozenset()  # the calls its proof took as guarded by the emitted check

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


def _gaining(ctx: PlanContext, func: cst.FunctionDef, lines: List[cst.SimpleStatementLine], candidates: Set[str] = frozenset()) -> "_Method":  # type: ignore[assignment]
    """The method ``func`` as one that gains `num_masked` for its selections ``lines``."""
    masks = {code(line.body[0].value.slice[0].slice.value) for line in lines}  # type: ignore[attr-defined]
    owner = ctx.skipped_by(func)
    if owner is not None:
        raise Refuse(f"left alone: `# hiera-rewrite: skip` on {owner}")
    cls = _class_of(ctx, func)
    flow = ctx.flow(func)
    if len(masks) != 1:
        raise Refuse(f"{func.name.value} selects with several masks ({', '.join(sorted(masks))})")
    if free_names(flow, COUNT):
        raise Refuse(f"{func.name.value} already uses the name {COUNT}")
    if cls is None or not func.params.params or func.params.params[0].name.value != "self" or func.decorators:
        raise Refuse(f"{func.name.value} is not a plain method of a class: its callers cannot pass the count")
    again = replaced(ctx, ctx.module, cls, func.name.value)
    if again is not None:
        raise Refuse(f"{again}: its callers' count may not be for the mask it selects with")
    (mask,) = masks
    if [s for s in flow.assigning(mask) if not is_bool_cast(s.line, mask)] or flow.compound_assigned.get(mask):
        raise Refuse(f"the mask argument {mask} is reassigned in {func.name.value}")
    written = written_in_place(ctx, func, mask) or written_by_a_call(ctx, cls, func, mask, ordered=True)
    # through anything that may hold it (`for row in mask: row[...] = ...`, a chunk, a
    # comprehension) and the calls given it (hunt 13 A)
    # the class's own methods given the mask before its count's use: `_method_site` calls
    # them with the count only while they are the ones read here (`not_overridden`)
    # (``candidates``: the methods that may gain the count; `_method_site` checks that the
    # calls taken as guarded here are the ones it guards, with the methods that do)
    given = methods_given(ctx, cls, func, mask, set(candidates))
    checked = {m for _, reached in given for m in reached}
    with run_time_checked(cls, checked, func, [call for call, _ in given]):
        written = written or passed_to_a_writer(ctx, cls, func, mask) or stored_or_packed(ctx, func, mask)
    if written is not None:
        raise Refuse(f"{written}: how many tokens it selects in each row is not proven")
    return _Method(func, mask, frozenset(id(call) for call, _ in given))


def _method_site(
    ctx: PlanContext, cls: cst.ClassDef, owner: Optional[str], method: "_Method", lines: List[cst.SimpleStatementLine],
    methods: Dict[str, "_Method"],
) -> Dict[cst.CSTNode, Replacement]:
    """The method's selections `t = s[mask]` as flat index_selects of ``true_rows(mask,
    num_masked)``; its calls given the mask (``methods_given``) go to the class's own
    methods only with the count, else as upstream's call, and the count is dropped
    after them (an override may write the mask)."""
    func, mask = method.func, method.mask
    edits: Dict[cst.CSTNode, Replacement] = {}
    for line in lines:
        target, value = single_assign(line)  # type: ignore[misc]
        source = code(value.value)  # type: ignore[attr-defined]
        edits[line] = ctx.statement(f"{target_code(line)} {MASKED_ROWS}({source}, {mask}, {COUNT})\n", like=line)
    helpers = [TRUE_ROWS, MASKED_ROWS]
    given = _given_the_mask(ctx, cls, func, mask, methods)
    if method.guarded - {id(c) for _, calls, _ in given for c in calls}:
        raise Refuse(f"a call {func.name.value} gives {mask} runs unchecked after the count's last use here: not proven")
    for stmt, calls, names in given:
        if owner is None:
            raise Refuse(f"the class name {cls.name.value} is bound again in the module: the own-method check needs it")
        # the count goes only with the mask itself: `m(x, ~mask)`, `m(x, mask.repeat(2, 1))`
        # or `m(x, mask & valid)` select other rows (their call keeps upstream's form)
        swaps = {
            c: with_argument(c, f"{COUNT}={COUNT}") for c in calls
            if _callee(c) in methods and is_name(methods[_callee(c)].mask_argument(c), mask)  # type: ignore[index]
        }
        edits[stmt] = _own_or_upstream(
            ctx, owner, stmt, names, swaps, f"an override gets upstream's call, and may change {mask}",
            after=[f"{COUNT} = None"],
        )
        helpers.append(RUNS_OWN)
    taken = name_taken(ctx, *helpers, "getattr", "type", "all", func=func)
    if taken:
        raise Refuse(f"the selection needs the name {taken}, which {func.name.value} or the module binds itself")
    edits[func] = with_keyword_param(ctx, func, COUNT, None)
    module, helper = add_helper(ctx, cls, *dict.fromkeys(helpers))
    edits[module] = helper
    return edits


def _reached(ctx: PlanContext, cls: cst.ClassDef, methods: Dict[str, "_Method"], roots: Set[str]) -> Set[str]:
    """The methods a count reaches: ``roots`` (those the forward passes it to), then each
    method of ``methods`` such a method calls with its own mask (``_given_the_mask``)."""
    reached: Set[str] = set()
    todo = [r for r in roots if r in methods]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        method = methods[name]
        try:
            given = _given_the_mask(ctx, cls, method.func, method.mask, methods)
        except Refuse:
            continue
        todo += [_callee(c) for _, calls, _ in given for c in calls if _callee(c) in methods]
    return reached


def _callee(call: cst.Call) -> Optional[str]:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _given_the_mask(
    ctx: PlanContext, cls: cst.ClassDef, func: cst.FunctionDef, mask: str, methods: Dict[str, "_Method"]
) -> List[Tuple[cst.SimpleStatementLine, List[cst.Call], List[str]]]:
    """The statements of ``func`` holding `self.<m>(..., mask, ...)` calls: each with its
    calls and the methods they reach (``methods_given``)."""
    found: Dict[cst.CSTNode, Tuple[List[cst.Call], List[str]]] = {}
    for call, reached in methods_given(ctx, cls, func, mask, set(methods)):
        stmt = _statement_holding(ctx, call)
        if not isinstance(stmt, cst.SimpleStatementLine):
            raise Refuse(f"`{code(call)}` is given {mask} inside a compound statement's header")
        calls, names = found.setdefault(stmt, ([], []))
        calls.append(call)
        names += [m for m in reached if m not in names]
    return [(stmt, calls, names) for stmt, (calls, names) in found.items()]  # type: ignore[misc]


def _own_or_upstream(
    ctx: PlanContext, owner: str, stmt: cst.SimpleStatementLine, names: List[str], swaps: Dict[cst.CSTNode, Replacement],
    why: str, before: Sequence[str] = (), after: Sequence[str] = (),
) -> Replacement:
    """``stmt`` as ``if not_overridden(self, __class__, "m", ...): <before>; <stmt with swaps> else:
    <stmt>; <after>``: the class's own methods get the count, an override upstream's call.
    A return is left as it is, after the branch (no else)."""
    new = line_with(ctx, stmt, swaps)
    new_code = "; ".join(code(s) for s in new.body)  # type: ignore[attr-defined]
    old_code = "; ".join(code(s) for s in stmt.body)
    quoted = ", ".join(f'"{n}"' for n in names)
    head = f"if {RUNS_OWN}(self, __class__, {quoted}):\n" + "".join(f"    {b}\n" for b in before) + f"    {new_code}\n"
    if isinstance(stmt.body[-1], cst.Return) and not after:
        # the original return stays as it is, after the branch that returns with the count
        branch = ctx.statement(head, like=stmt, replaces=False)
        return lambda updated: cst.FlattenSentinel(
            [branch.with_changes(leading_lines=updated.leading_lines), updated.with_changes(leading_lines=[])]
        )
    assign = single_assign(stmt)
    if list(after) == [f"{COUNT} = None"] and assign is not None and is_name(assign[0]):
        # `label, num_masked = self.m(x, mask), None`: the override's call, then no count
        old_code, after = f"{code(assign[0])}, {COUNT} = {code(assign[1])}, None", []
    return ctx.statement(
        head + f"else:  # {why}\n" + f"    {old_code}\n" + "".join(f"    {a}\n" for a in after), like=stmt
    )


def _statement_holding(ctx: PlanContext, node: cst.CSTNode) -> cst.BaseStatement:
    """The statement of a block (a function's, an if's...) that holds ``node``."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and isinstance(
            ctx.parent(ancestor), cst.IndentedBlock
        ):
            return ancestor
    raise Refuse("a call given the mask is not in a statement of a block")  # pragma: no cover


def _mae_forward_calls(ctx: PlanContext, cls: cst.ClassDef, owner: str, methods: Dict[str, "_Method"]):
    """The MAE forward passes the masked-token count, derived from shapes:

        pred, pred_mask = self.forward_decoder(latent, mask)             # D
        return *self.forward_loss(x, pred, ~pred_mask), mask             # L

    The class's own forward_decoder fills exactly as many units as ``latent`` holds
    (its `x_dec[mask] = x.flatten()` raises otherwise: one unit per row of the
    latent's first two dims) and returns that fill mask in token order
    (``_decoded_mask``: undo_windowing only rearranges, so each unit has
    ``pred_mask.numel() // mask.numel()`` tokens), so ``~pred_mask`` selects
    ``per_unit * (mask.numel() - math.prod(latent.shape[:2]))`` tokens: for every mask,
    the model's own or a caller's, ragged rows included, whatever module embeds the
    latent for the decoder (a subclass's per-unit pooling included) -- while nothing
    between D and L can write a tensor (``_writes_between``: pred_mask may be a view of
    the unit mask, reached through an alias the names do not show).  L becomes ``if not_overridden(self,
    __class__, "forward_decoder", "forward_loss"): <count>; <L with num_masked> else: <L>``.
    (the sites, the methods given the count there)."""
    if not imports_module(ctx.module, "math"):
        return [], set()
    sites = []
    roots: Set[str] = set()
    defined = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}  # type: ignore[union-attr]
    decoder = defined.get("forward_decoder")
    if decoder is None or not _fills_units(ctx, decoder):
        # pred_mask's count is known only for Hiera's decoder: the kept units, upsampled.
        return [], set()
    again = replaced(ctx, ctx.module, cls, "forward_decoder")
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
            if len({pred.value, pred_mask.value, latent.value, unit_mask.value}) != 4:  # type: ignore[attr-defined]
                continue
            if any(s.index > stmt.index for s in flow.assigning(unit_mask.value)) or flow.compound_assigned.get(unit_mask.value):  # type: ignore[attr-defined]
                continue  # the count reads the unit mask's size at the loss: the one the decoder got
            names = (pred_mask.value, latent.value)  # type: ignore[attr-defined]
            if any(len(flow.assigning(n)) != 1 or flow.compound_assigned.get(n) for n in names):
                continue  # the count is right only for the decoder's own outputs
            if len({pred_mask.value, latent.value, pred.value}) != 3:  # type: ignore[attr-defined]
                continue
            if any(s.index >= stmt.index for s in flow.assigning(latent.value)):  # type: ignore[attr-defined]
                continue  # the count reads the latent's shape at the loss: the one the decoder got
            changed = (
                flow.opaque  # a nested def that may rebind them (`nonlocal latent`), locals()...
                or written_in_place(ctx, func, pred_mask.value)  # type: ignore[attr-defined]
                or stored_or_packed(ctx, func, pred_mask.value)  # type: ignore[attr-defined]
                or written_in_place(ctx, func, latent.value)  # type: ignore[attr-defined]  (its shape: `unsqueeze_`)
                # pred_mask may be a view of it (1x1 final mask units): `mask.logical_not_()`
                or written_in_place(ctx, func, unit_mask.value)  # type: ignore[attr-defined]
            )
            unproven = (
                again or _decoded_mask(ctx, decoder) or _fills_the_latent(ctx, cls, decoder)
                or _after_the_fill(ctx, cls, decoder, checked := []) or _unit_mask_kept(ctx, cls, func, unit_mask.value)  # type: ignore[attr-defined]
            )
            if changed or unproven:
                ctx.refuse(call[1], f"{changed or unproven}: the masked count is not passed")
                continue
            toggled = lambda arg: (  # noqa: E731
                isinstance(arg, cst.UnaryOperation)
                and isinstance(arg.operator, cst.BitInvert)
                and is_name(arg.expression, pred_mask.value)  # type: ignore[attr-defined]
            )
            for after in flow.stmts[stmt.index + 1:]:
                if not after.line.body:
                    continue
                calls = _count_calls(ctx, after.line, methods, toggled)
                if not calls:
                    continue
                other = (
                    _other_use(ctx, func, pred_mask.value, after.line, calls)  # type: ignore[attr-defined]
                    # nor the unit mask after the decoder got it (pred_mask may be a view of it)
                    or _other_use(ctx, func, unit_mask.value, after.line, calls, since=stmt.line)  # type: ignore[attr-defined]
                )
                given = {pred.value, pred_mask.value, latent.value, unit_mask.value}  # type: ignore[attr-defined]
                other = other or _writes_between(ctx, cls, func, stmt.line, after.line, calls, given)
                if other is not None:
                    ctx.refuse(next(iter(calls)), f"{other}: the masked count is not passed")
                    break
                clash = free_names(flow, COUNT, PER_UNIT)
                if clash:
                    ctx.refuse(next(iter(calls)), f"{func.name.value} already uses the name {clash[0]}")
                    break
                taken = name_taken(ctx, "getattr", "type", "all", RUNS_OWN, func=func, modules=("math",))
                if taken:
                    ctx.refuse(next(iter(calls)), f"the count needs the name {taken}, which {func.name.value} or the module binds itself")
                    break
                # tokens per unit x units not filled: the decoder fills one unit per row of
                # the latent's first two dims, and brings each unit to the same number of
                # tokens (its mask's numel over the unit mask's)
                per_unit = f"{PER_UNIT} = {pred_mask.value}.numel() // {unit_mask.value}.numel()"  # type: ignore[attr-defined]
                count = f"{PER_UNIT} * ({unit_mask.value}.numel() - math.prod({latent.value}.shape[:2]))"  # type: ignore[attr-defined]
                called = [m for m in dict.fromkeys(_callee(c) for c in calls) if m]
                new = _own_or_upstream(
                    ctx, owner, after.line, list(dict.fromkeys(["forward_decoder", *checked, *called])),  # type: ignore[arg-type]
                    {c: with_argument(c, f"{COUNT}={COUNT}") for c in calls},
                    "an override gets upstream's call",
                    before=[f"# forward_decoder filled {latent.value}'s units: the rest are masked (static shapes)",  # type: ignore[attr-defined]
                            per_unit, f"{COUNT} = {count}"],
                )
                module, helper = add_helper(ctx, cls, RUNS_OWN)
                sites.append((next(iter(calls)), {after.line: new, module: helper},
                              "MAE forward: pass the masked-token count, from the decoder's shapes (static shapes)"))
                roots.update(called)
                break
    return sites, roots


def _other_use(
    ctx: PlanContext, func: cst.FunctionDef, pred_mask: str, line: cst.SimpleStatementLine, calls: List[cst.Call],
    since: Optional[cst.CSTNode] = None,
) -> Optional[str]:
    """Where ``func`` reads the decoder's mask before the count is used, other than as
    `~pred_mask` given to ``calls`` in ``line``; else None.  Proven, not searched for
    writers: a call given it (a method, a hook, a helper), an alias (an attribute, a
    list) or anything else may change how many tokens it masks, so any other read
    before ``line`` ends the proof.  Reads after ``line``, and an early `return ...,
    pred_mask` (that path uses no count), are free.  ``since``: only the statements after
    the one holding it are looked at (the unit mask, once the decoder got it)."""
    allowed = {
        id(arg.value.expression) for call in calls for arg in call.args
        if isinstance(arg.value, cst.UnaryOperation) and is_name(arg.value.expression, pred_mask)
    }
    top = list(func.body.body)  # type: ignore[union-attr]

    def holding(node: Optional[cst.CSTNode]) -> Optional[int]:  # the top-level statement holding it
        return next((i for i, s in enumerate(top) if s is node or any(n is node for n in walk(s))), None)

    last = holding(line)
    start = holding(since) if since is not None else None
    after = None  # what runs after since's statement in the top-level statement holding it
    if start is not None:
        inner = enclosing_line(ctx, since) or since
        loops = [a for a in ctx.ancestors(inner) if isinstance(a, (cst.For, cst.While)) and any(n is a for n in walk(top[start]))]
        after = ctx.position(loops[-1]) if loops else ctx.span(inner).end  # a loop runs its start again
        start -= 1
    for stmt in top[(0 if start is None else start + 1) : (len(top) if last is None else last + 1)]:
        for node in loaded_names(ctx, stmt):
            if after is not None and ctx.position(node) < after:
                continue
            if node.value == pred_mask and id(node) not in allowed and not returned_as_is(ctx, node):
                shown = _statement_holding(ctx, node)
                text = code(shown).strip().splitlines()[0] if not isinstance(shown, cst.SimpleStatementLine) else "; ".join(code(b) for b in shown.body)
                return f"{pred_mask} is used by `{text}` at line {ctx.position(node).line} before the loss"
    return None


# context managers whose enter and exit write no tensor (a `with` around the decoder exits
# between the decoder and the loss)
_QUIET_CONTEXTS = frozenset({
    "torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
    "torch.no_grad", "torch.enable_grad", "torch.inference_mode", "torch.set_grad_enabled",
})
# torch's SDPA kernel selection (a fork's `with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):`)
_KERNEL_CONTEXTS = frozenset({"torch.nn.attention.sdpa_kernel", "torch.backends.cuda.sdp_kernel"})
# tensor methods that make a new tensor, a view or a value and write nothing
_READING_METHODS = _ARITHMETIC_METHODS | FRESH_METHODS


def _writes_between(
    ctx: PlanContext, cls: cst.ClassDef, func: cst.FunctionDef, decoded: cst.SimpleStatementLine,
    line: cst.SimpleStatementLine, calls: List[cst.Call], given: Set[str] = frozenset(),  # type: ignore[assignment]
) -> Optional[str]:
    """None when nothing ``func`` runs after the decoder's statement ``decoded`` and until
    ``calls`` in ``line`` are given `~pred_mask` can write a tensor; else what may.  The
    count is read from shapes, so it holds only while pred_mask's True entries stay those
    the decoder filled -- and pred_mask may be a view of the unit mask (1x1 final units),
    which a method given nothing may reach through an alias held on ``self`` (`self.last_mask
    .logical_not_()`), a helper through a local view (`invert_(mask_2d)`): names are not
    enough.  Proven to write nothing: bindings of local names, expression statements,
    `return`, `assert`, `if`/`while`/`try` and `for ... in range(...)` made only of names,
    constants, a tensor's metadata, `self.<attribute>` loads (no property or method of the
    class), operators, torch's functions that compute (no `out=`, none ending in `_`), the
    listed builtins, and tensor methods that make a new tensor or a view
    (:data:`_READING_METHODS`, not on what ``self`` holds: `Module.to` converts its
    parameters); `with` only around torch's grad and autocast modes.  Each name and
    `self.<attribute>` read is typed a value by :class:`_Reader` (``given``: the decoder's
    outputs and arguments, which the count proof reads as its tensors): an object's
    operator, `__len__` or `__format__` runs code (`pred = pred + self.vis`).  In a loop
    around the decoder, the whole loop runs after it; a loss in a loop: not proven."""
    top = list(func.body.body)  # type: ignore[union-attr]
    bindings = class_bindings(cls)

    def ancestors(node: cst.CSTNode) -> List[cst.CSTNode]:
        found = []
        for a in ctx.ancestors(node):
            if a is func:
                break
            found.append(a)
        return found

    around = ancestors(decoded)
    if any(isinstance(a, (cst.For, cst.While)) for a in ancestors(line)):
        return f"the loss `{code(line.body[0]).strip()}` at line {ctx.position(line).line} runs in a loop"
    loops = [a for a in around if isinstance(a, (cst.For, cst.While))]
    lo = ctx.position(loops[-1]) if loops else ctx.span(decoded).end  # a loop runs its start again
    hi = ctx.span(line).end
    exempt = {id(c) for c in calls}

    def builtin(call: cst.Call, names=_PURE_BUILTINS) -> bool:  # `len(...)`, `range(...)`: the builtin itself
        name = call.func.value if isinstance(call.func, cst.Name) else None
        return (
            name in names and not ctx.qualified_names(call.func) - {f"builtins.{name}"}
            and function_of(ctx, ctx.module, name) is None and not bound_locally(ctx, call, name)  # type: ignore[arg-type]
            and not any(a.keyword is not None and a.keyword.value == "key" for a in call.args)
        )

    owner = _Owner(ctx, cls, True)
    typing = _Reader(ctx, owner, func, 0, proven := [])
    typing.assume(given)

    def attribute_of_self(node: cst.Attribute) -> bool:  # `self.training`: a plain attribute, data
        name = node.attr.value
        return name not in _class_names(ctx, ctx.module, cls) and method_of(ctx, ctx.module, cls, name) is None \
            and _held_everywhere(ctx, owner, name)

    def reads(node: Optional[cst.CSTNode]) -> bool:
        if isinstance(node, cst.Name):  # a value: no object's `__add__`, `__len__`, `__bool__`...
            # (a method proven to type it: not one the emitted check guards)
            return typing.value(node) and not proven
        if node is None or isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.Ellipsis)):
            return True
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            return all(reads(e.value) for e in node.elements)
        if isinstance(node, cst.Attribute):
            if is_name(node.value, "self"):
                return attribute_of_self(node)
            return node.attr.value in METADATA_ATTRIBUTES | {"type"} and reads(node.value)
        if isinstance(node, cst.Subscript):
            return reads(node.value) and all(
                reads(e.slice.value) if isinstance(e.slice, cst.Index)
                else all(reads(p) for p in (e.slice.lower, e.slice.upper, e.slice.step))  # type: ignore[attr-defined]
                for e in node.slice
            )
        if isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)):
            return reads(node.left) and reads(node.right)
        if isinstance(node, cst.UnaryOperation):
            return reads(node.expression)
        if isinstance(node, cst.Comparison):
            return reads(node.left) and all(reads(c.comparator) for c in node.comparisons)
        if isinstance(node, cst.IfExp):
            return reads(node.test) and reads(node.body) and reads(node.orelse)
        if isinstance(node, cst.Call):
            if any(a.keyword is not None and a.keyword.value == "out" for a in node.args) or not all(reads(a.value) for a in node.args):
                return False
            if id(node) in exempt:  # the calls given the count: forward_loss's own proof
                return True
            func_ = node.func
            if isinstance(func_, cst.Attribute) and func_.attr.value in _READING_METHODS and root_name(func_.value) != "self":
                return reads(func_.value) and not _an_object(ctx, node, func_.value, {})  # (`vis = self.vis` earlier: hunt 24a F7)
            if is_name(func_) and func_.value in ("getattr", "hasattr") and node.args and root_name(node.args[0].value) == "self":  # type: ignore[attr-defined]
                return False  # may run a property (hunt 22a F8)
            if is_name(func_) and func_.value in _ITERATING_BUILTINS and not all(  # type: ignore[attr-defined]
                _iterates_known(ctx, None, a.value, {}) or isinstance(a.value, (cst.ListComp, cst.GeneratorExp, cst.List, cst.Tuple)) for a in node.args
            ):
                return False  # `list(steps)`: a generator's body (hunt 24a F5)
            return torch_or_builtin(ctx, node) or builtin(node)
        return False

    def small_reads(small: cst.BaseSmallStatement) -> bool:
        if isinstance(small, cst.Pass):
            return True
        if isinstance(small, (cst.Expr, cst.Return)):
            return reads(small.value)
        if isinstance(small, cst.Assert):
            return reads(small.test) and reads(small.msg)
        if isinstance(small, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            plain = all(
                isinstance(n, cst.Name) for t in targets
                for n in ([e.value for e in t.elements] if isinstance(t, (cst.Tuple, cst.List)) else [t])
            )
            return plain and reads(small.value)
        return False

    def quiet(item: cst.WithItem) -> bool:
        call = item.item
        return (
            isinstance(call, cst.Call) and all(reads(a.value) for a in call.args)
            and bool(ctx.qualified_names(call.func)) and ctx.qualified_names(call.func) <= _QUIET_CONTEXTS
            and (item.asname is None or isinstance(item.asname.name, cst.Name))
        )

    def where(node: cst.CSTNode) -> str:
        text = code(node).strip().splitlines()[0]
        return f"`{text}` at line {ctx.position(node).line} runs between the decoder and the loss and may write a tensor"

    def statement(stmt: cst.CSTNode) -> Optional[str]:
        if stmt is decoded or ctx.span(stmt).end <= lo or ctx.position(stmt) >= hi:
            return None
        if isinstance(stmt, cst.SimpleStatementLine):
            bad = next((s for s in stmt.body if not small_reads(s)), None)
            return where(bad if bad is not None else stmt) if bad is not None else None
        header_in = ctx.position(stmt) >= lo  # its header runs after the decoder
        if isinstance(stmt, cst.If):
            if header_in and not reads(stmt.test):
                return where(stmt)
            return block(stmt.body) or (statement(stmt.orelse) if isinstance(stmt.orelse, cst.If) else block(stmt.orelse.body if stmt.orelse else None))
        if isinstance(stmt, cst.While):
            if header_in and not reads(stmt.test):
                return where(stmt)
            return block(stmt.body) or block(stmt.orelse.body if stmt.orelse else None)
        if isinstance(stmt, cst.For):
            iterated = stmt.iter
            ranged = (
                isinstance(iterated, cst.Call) and builtin(iterated, {"range"})
                and all(reads(a.value) for a in iterated.args)
            )
            if stmt.asynchronous or header_in and not (ranged and isinstance(stmt.target, cst.Name)):
                return where(stmt)
            return block(stmt.body) or block(stmt.orelse.body if stmt.orelse else None)
        if isinstance(stmt, cst.With):
            # its exit runs after the decoder when it holds it, its entry too when after
            if stmt.asynchronous or (header_in or any(a is stmt for a in around)) and not all(quiet(i) for i in stmt.items):
                return where(stmt)
            return block(stmt.body)
        if isinstance(stmt, cst.Try):
            for handler in stmt.handlers:
                if ctx.position(handler) >= lo and not reads(handler.type):
                    return where(handler)
            return (
                block(stmt.body) or next((w for h in stmt.handlers if (w := block(h.body))), None)
                or block(stmt.orelse.body if stmt.orelse else None) or block(stmt.finalbody.body if stmt.finalbody else None)
            )
        return where(stmt)  # a def, a class, a match...: not read

    def block(body: Optional[cst.BaseSuite]) -> Optional[str]:
        if body is None:
            return None
        if isinstance(body, cst.SimpleStatementSuite):  # `if c: a = 1` on one line
            bad = next((s for s in body.body if ctx.span(s).end > lo and ctx.position(s) < hi and not small_reads(s)), None)
            return where(bad) if bad is not None else None
        return next((w for s in body.body if (w := statement(s))), None)

    return next((w for s in top if (w := statement(s))), None)


def _count_calls(ctx: PlanContext, line: cst.SimpleStatementLine, methods: Dict[str, "_Method"], same_mask) -> List[cst.Call]:
    """`self.<method>(...)` calls in ``line`` to methods gaining the count, given the mask
    ``same_mask`` accepts, and not passed a count already."""
    found: List[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            hit = method_call(node, *methods)
            if not hit or not is_name(hit[0], "self") or not node.args:
                return
            if any(a.keyword is not None and a.keyword.value == COUNT or a.star == "**" for a in node.args):
                return
            argument = methods[hit[1].func.attr.value].mask_argument(node)  # type: ignore[attr-defined]
            if argument is not None and same_mask(argument):
                found.append(node)

    ctx.visit(_Calls(), line)
    return found


_FRESH_FACTORIES = frozenset({
    "zeros", "ones", "empty", "full", "arange", "linspace", "eye", "rand", "randn", "zeros_like", "ones_like", "empty_like", "full_like",
})
# nn.Module methods that convert a module's tensors in place, named like tensor methods
_MODULE_CONVERTERS = frozenset({"to", "float", "double", "half", "bfloat16", "cuda", "cpu", "type", "requires_grad_", "share_memory_"})
# tensor methods that make a new tensor (or a view, or a number) and write nothing, beyond
# _READING_METHODS: what the decoder's blocks and attention use
_COMPUTING_METHODS = frozenset({
    "max", "min", "amax", "amin", "argmax", "argmin", "softmax", "log_softmax", "sigmoid", "exp", "log", "sqrt", "rsqrt", "abs",
    "neg", "pow", "mul", "add", "sub", "div", "matmul", "clamp", "norm", "var", "std", "unbind", "chunk", "split", "narrow",
    "select", "gather", "index_select", "masked_fill", "where", "roll", "flip", "t", "new_zeros", "new_ones", "new_full",
    "new_empty", "new_tensor",
})
# a mapping's reads (a forward given a batch dict, `x = batch.get("video")`): a value's
# element is a value, as the caller hands it
_MAPPING_READS = frozenset({"get", "keys", "values", "items"})


@dataclasses.dataclass(frozen=True)
class _Owner:
    """Whose methods `self.<m>(...)` runs where a body is read: the MAE (``guarded``: an
    override anywhere may run, so a method read is named in the emitted check), or a
    submodule's class, built there by its constructor (exactly that class)."""

    ctx: PlanContext
    cls: cst.ClassDef
    guarded: bool


def _after_the_fill(ctx: PlanContext, cls: cst.ClassDef, decoder: cst.FunctionDef, checked: List[str]) -> Optional[str]:
    """None when what ``decoder`` runs after its fill (`x_dec[mask] = x.flatten()`, a
    statement of its body, not under an `if`) can write no tensor but its own locals:
    the unit mask may be held elsewhere (a caller's `self.vis_mask = mask`, a global, a
    dict on `self`: hunts 21a, 22a), and the count read from shapes holds only while its
    True entries stay those the fill used.  Proven (:func:`_writes_no_tensor`): bindings of
    local names (no `global`), writes into locals bound only to torch's factories, torch's
    and math's computing functions, the listed builtins (`getattr`/`hasattr` not on
    `self`), tensor methods making a new tensor or a view (on `self`'s, not a Module
    converter), no property read on `self`, module functions of the files made of the
    same (`undo_windowing`), submodules built by a constructor call (`self.decoder_norm =
    norm_layer(...)`, `nn.ModuleList([HieraBlock(...) ...])`) whose class, where the files
    define it, has a forward made of the same and no `__call__`, and methods of the class
    made of the same, which the emitted code then checks at run time to be the ones read
    (their names go to ``checked``); while no module the files read registers a forward
    hook.  Nothing else."""
    body = list(decoder.body.body)  # type: ignore[union-attr]
    # every `<subscript> = <x>.flatten()` of the decoder, nested ones too: a decoy at the
    # top level with the fill under an `if` is not the fill (hunt 23a F11)
    fills = [
        s for s in walk(decoder.body) if isinstance(s, cst.SimpleStatementLine) and (a := single_assign(s)) is not None
        and isinstance(a[0], cst.Subscript) and method_call(a[1], "flatten") is not None
    ]
    if len(fills) != 1 or not any(s is fills[0] for s in body):
        return f"{decoder.name.value}'s fill `x_dec[mask] = x.flatten()` is not one statement of its body"
    fill = next(i for i, s in enumerate(body) if s is fills[0])
    modules, _ = receiver_modules(ctx, cls)
    if any(registers_hooks(m) for m in modules):
        return (
            f"a module the files read registers a forward hook or pre-hook, which may run after {decoder.name.value}'s fill:"
            " the unit mask may be held there"
        )
    why = _Reader(ctx, _Owner(ctx, cls, True), decoder, 0, checked).unproven(body[fill + 1:])
    if why is not None:
        return f"{why}, after {decoder.name.value}'s fill: the unit mask may be held there"
    return None


# torch's module lists (a class of the files named `ModuleList` is not: hunt 25a F2)
_MODULE_LISTS = frozenset({
    "torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.Sequential",
})


def _listed_modules(owner: _Owner, attr: str) -> Optional[List[cst.BaseExpression]]:
    """What `self.<attr>` holds where it is torch's `nn.ModuleList([...])` /
    `nn.Sequential(...)` of constructor calls, the only value stored there, and every other
    mention of `<x>.<attr>` in the modules read only iterates it (`for blk in
    self.decoder_blocks`, through `enumerate`/`zip`/`reversed`) or counts it (`len`): the
    element calls; else None.  A whitelist of uses, not a list of changers: an alias (`blocks
    = self.decoder_blocks`, in a tuple too), a helper given it (`add_vis_block(
    self.decoder_blocks)`), an attribute set on it (`self.decoder_blocks.vis = Vis()`, which
    Module.__setattr__ registers), `append`, an item store, `+=`, another module's store
    (hunts 23a F8, 24a F8, 25a F2)."""
    ctx = owner.ctx
    return ctx.fact(("listed modules", id(ctx.module), id(owner.cls), attr), lambda: _find_listed_modules(owner, attr), ctx.module, owner.cls)


def _find_listed_modules(owner: _Owner, attr: str) -> Optional[List[cst.BaseExpression]]:
    ctx = owner.ctx
    if attr in _class_names(ctx, ctx.module, owner.cls):
        return None
    elements: List[cst.BaseExpression] = []
    stores = _submodules(ctx, attr)
    for value in stores:
        arg = value.args[0].value if isinstance(value, cst.Call) and len(value.args) >= 1 else None
        listed = isinstance(value, cst.Call) and bool(q := ctx.qualified_names(value.func)) and q <= _MODULE_LISTS
        if listed and isinstance(arg, (cst.ListComp, cst.GeneratorExp)):
            elements.append(arg.elt)  # type: ignore[union-attr]
        elif listed and isinstance(arg, cst.List):
            elements.extend(e.value for e in arg.elements)
        else:
            return None
    if not elements or not all(isinstance(e, cst.Call) for e in elements):
        return None
    if stored_elsewhere(ctx, owner.cls, attr) is not None:
        return None  # `model.decoder_blocks = nn.ModuleList([...])` in hiera_utils.py (hunt 24a F8)
    read = [m for _, m in imported_modules(ctx, [ctx.module, ctx.planned().module])[0]]
    stored = {id(v) for v in stores}
    for m in dict.fromkeys([ctx.module, *read, *(ctx.modules_beside([attr.encode()]) or [])]):
        inner = ctx.context_of(m)
        for n in walk(m):
            if isinstance(n, cst.Attribute) and n.attr.value == attr and not _iterated_or_counted(inner, n, stored, ctx.module):
                return None
    return elements


def _iterated_or_counted(ctx: PlanContext, node: cst.Attribute, stored: Set[int], owner_module: Optional[cst.Module] = None) -> bool:
    """``node`` (`<x>.<attr>`) is stored one of ``stored`` (`self.<attr> = nn.ModuleList(...)`),
    iterated (`for blk in <x>.<attr>`, through `enumerate`/`zip`/`reversed`), or given to `len`."""
    parent = ctx.parent(node)
    if isinstance(parent, cst.AssignTarget):
        statement = ctx.parent(parent)
        if isinstance(statement, cst.Assign) and len(statement.targets) == 1 and id(statement.value) in stored:
            return True
        # another module's class storing its own list (DenseTact's dpt.py beside the MAE);
        # a subclass's or mixin's there is `stored_elsewhere`'s, refused before
        return is_name(node.value, "self") and ctx.module is not owner_module
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
        return True
    arg = parent if isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star else None
    call = ctx.parent(arg) if arg is not None else None
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name):
        return False
    if call.func.value == "len" and len(call.args) == 1:
        return True
    around = ctx.parent(call)
    return call.func.value in ("enumerate", "zip", "reversed") and isinstance(around, (cst.For, cst.CompFor)) and around.iter is call


def _fresh_locals(ctx: PlanContext, func: cst.FunctionDef) -> Set[str]:
    """The names ``func`` binds only by `name = torch.<factory>(...)` (`pe = torch.zeros(1,
    T, dim)`), a new tensor: writes into them write nothing else.  Any other binding of the
    name, or a use of it inside an assignment's target, a tuple or a list, makes it not."""
    fresh: Dict[str, bool] = {}
    for n in walk(func.body):
        if not isinstance(n, cst.Name):
            continue
        parent = ctx.parent(n)
        statement = ctx.parent(parent) if isinstance(parent, cst.AssignTarget) else None
        if isinstance(parent, cst.AssignTarget) and isinstance(statement, cst.Assign) and len(statement.targets) == 1:
            value = statement.value
            fresh[n.value] = fresh.get(n.value, True) and (
                isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and is_name(value.func.value, "torch")
                and value.func.attr.value in _FRESH_FACTORIES and imports_module(ctx.module, "torch")
                and not any(a.keyword is not None and a.keyword.value == "out" for a in value.args)
            )
        elif isinstance(parent, (
            cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.AsName, cst.CompFor, cst.For, cst.Element,
            cst.StarredElement, cst.Param, cst.Global, cst.Nonlocal, cst.MatchAs, cst.MatchStar, cst.ImportAlias, cst.ExceptHandler,
        )):
            fresh[n.value] = False
    params = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
    return {name for name, ok in fresh.items() if ok and name not in params}


# What the after-the-fill reader types an expression as (:class:`_Reader`).
_VALUE = "value"  # a tensor or plain data (a number, a shape, a string, a tuple, list or dict of such)
_LIBRARY = "library"  # what a package the files do not hold binds (`torch.float32`, `F`, `SDPBackend.MATH`)
_SELF = "self"  # the instance whose methods run (only `self.<a>` is read on it)
_TOP = "top"  # not yet known (the greatest fixpoint's start)
# torch's functions whose result may be any object (an unpickled one)
_ANY_OBJECT = frozenset({"torch.load", "torch.serialization.load"})


@dataclasses.dataclass(frozen=True, eq=False)
class _Modules:
    """A name iterating a module list :func:`_listed_modules` proves (`for blk in
    self.decoder_blocks`): the calls building its elements."""

    built: Tuple[cst.BaseExpression, ...]


def _join(a, b):
    """The type of a name bound to a value of type ``a`` and elsewhere of type ``b``."""
    if a == _TOP:
        return b
    if b == _TOP or a is b:
        return a
    if a in (_VALUE, _LIBRARY) and b in (_VALUE, _LIBRARY):
        return _VALUE
    return None


class _Reader:
    """Proves that running statements of ``func`` (of ``ctx``'s module) can write no tensor
    but the new ones its locals hold, by typing every expression they evaluate, from the
    bindings of each name outwards; anything not typed ends the proof (hunts 21a to 24a
    each found an object the older reader, a list of object forms, took for data).

    A value (:data:`_VALUE`) is a tensor or plain data: the function's parameters (their
    callers hand it only values: the decoder gets the latent and the mask), literals,
    `self.<a>` where every store to it is a tensor torch makes or data
    (:func:`_holds_data`), a plain attribute of a proven submodule (`self.attn.q_stride`),
    what a package the files do not hold binds (`torch.float32`: out of contract, as its
    code is), and what these make: operators, items, attributes, displays, comprehensions,
    and calls of torch's computing functions and the listed builtins given values, of
    tensor methods that make a new tensor, a view or a number (no `fill_`), of the files'
    module functions, methods and submodules whose own statements this reader proves
    (given values, returning values).  A loop over a proven module list types its name as
    those modules (only called).  Writes: bindings of local names, and item stores into
    locals bound only to torch's factories (:func:`_fresh_locals`).  Every other form --
    an object of a class of the files, a global of the files, `self` handed on, a
    generator, a lambda, `getattr(...)(...)`, `+=`, `del`, `global`, a def, a `try` -- is
    not typed, and the statement reading it is named."""

    def __init__(
        self, ctx: PlanContext, owner: Optional[_Owner], func: cst.FunctionDef, depth: int, checked: List[str], trust_calls: bool = False,
        until: Optional[cst.CSTNode] = None,
    ):
        self.ctx, self.owner, self.func, self.depth, self.checked = ctx, owner, func, depth, checked
        # (a call's result taken for a value: for a proof that follows the calls itself)
        self.trust_calls = trust_calls
        self.until = until  # bindings from there on run later (HR004's region, before its fill)
        self.fresh = _fresh_locals(ctx, func)
        params = func.params
        listed = [*params.posonly_params, *params.params]
        static = any(is_name(d.decorator, "staticmethod") for d in func.decorators)
        self.self_name = listed[0].name.value if owner is not None and listed and not static else None
        # name -> what binds it: ("value", expr), ("item", iterable, path), ("aug", statement), ("param", default), ("other", node)
        self.sources: Dict[str, List[tuple]] = {}
        for p in [*listed, *params.kwonly_params, *(p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param))]:
            if p.name.value != self.self_name:
                self.sources.setdefault(p.name.value, []).append(("param", p.default))
        later = ctx.position(until) if until is not None else None
        for node in walk(func.body):
            if later is not None and isinstance(node, (cst.Assign, cst.AnnAssign, cst.NamedExpr, cst.For, cst.CompFor, cst.AugAssign)) \
                    and ctx.position(node) >= later:
                continue
            if isinstance(node, cst.Assign):
                for t in node.targets:
                    self._bind(t.target, node.value)
            elif isinstance(node, (cst.AnnAssign, cst.NamedExpr)) and node.value is not None:
                self._bind(node.target, node.value)
            elif isinstance(node, (cst.For, cst.CompFor)):
                self._bind_item(node.target, node.iter, ())
            elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
                self.sources.setdefault(node.target.value, []).append(("aug", node))
            elif isinstance(node, (cst.AsName, cst.Global, cst.Nonlocal, cst.Del, cst.FunctionDef, cst.ClassDef, cst.ExceptHandler, cst.ImportAlias)) \
                    or type(node).__name__.startswith("Match"):
                for n in walk(node.name if isinstance(node, (cst.AsName, cst.FunctionDef, cst.ClassDef)) else node):
                    if isinstance(n, cst.Name):
                        self.sources.setdefault(n.value, []).append(("other", node))
        self.types: Dict[str, object] = {}
        self.untyped: Dict[str, str] = {}  # why a name is not typed
        self.proven: Dict[int, Optional[str]] = {}  # id of a call -> why what it runs is not proven
        self.lists: Dict[str, Optional[_Modules]] = {}  # `self.<a>` -> the module list it holds
        self.blame: Optional[str] = None

    # -- names

    def assume(self, names: Iterable[str]) -> None:
        """Types ``names`` values, as another proof reads them."""
        for name in names:
            self.types[name] = _VALUE

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self.sources.setdefault(target.value, []).append(("value", value))
        elif isinstance(target, (cst.Tuple, cst.List)):
            pairs = isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements) and not any(
                isinstance(e, cst.StarredElement) for e in (*value.elements, *target.elements)
            )
            for i, t in enumerate(target.elements):
                if pairs:
                    self._bind(t.value, value.elements[i].value)  # type: ignore[union-attr]
                else:
                    for n in walk(t.value):  # an element of a value
                        if isinstance(n, cst.Name) and n is not None and self._bound_name(n, t.value):
                            self.sources.setdefault(n.value, []).append(("element", value))
        # (an attribute or item store binds no name: the statement is read)

    @staticmethod
    def _bound_name(n: cst.Name, target: cst.BaseExpression) -> bool:
        """``n`` is a name ``target`` binds (not one inside an item or attribute target)."""
        def names(t):
            if isinstance(t, cst.Name):
                yield t
            elif isinstance(t, (cst.Tuple, cst.List)):
                for e in t.elements:
                    yield from names(e.value)
            elif isinstance(t, cst.StarredElement):
                yield from names(t.value)
        return any(x is n for x in names(target))

    def _bind_item(self, target: cst.BaseExpression, iterable: cst.BaseExpression, path: Tuple[Tuple[int, int], ...]) -> None:
        if isinstance(target, cst.Name):
            self.sources.setdefault(target.value, []).append(("item", iterable, path))
        elif isinstance(target, (cst.Tuple, cst.List)):
            starred = any(isinstance(e, cst.StarredElement) for e in target.elements)
            for i, e in enumerate(target.elements):
                inner = e.value if not isinstance(e, cst.StarredElement) else e.value
                self._bind_item(inner, iterable, path + ((i, -1 if starred else len(target.elements)),))

    def _source_type(self, source: tuple):
        kind = source[0]
        if kind == "value":
            return self.type_of(source[1])
        if kind == "element":
            return _VALUE if self.value(source[1]) else None
        if kind == "item":
            t = self.element(source[1])
            for i, n in source[2]:
                if isinstance(t, tuple) and len(t) == n:
                    t = t[i]
                elif t in (_VALUE, _LIBRARY, _TOP):
                    t = _VALUE if t != _TOP else _TOP
                else:
                    return None
            if isinstance(t, tuple):  # a name for a tuple of values (`for p in zip(a, b)`)
                return _VALUE if all(x in (_VALUE, _LIBRARY, _TOP) for x in t) else None
            return t
        if kind == "aug":
            statement = source[1]
            return _VALUE if self.value(statement.target) and self.value(statement.value) else None
        if kind == "param":
            default = source[1]
            return _VALUE if default is None or self.value(default) else None
        return self._fail(source[1], "binds a name this reader does not type")

    def settle(self, names: Set[str]) -> None:
        """Types ``names`` and every local their bindings read: the greatest fixpoint."""
        closure: List[str] = []
        stack = [n for n in names if n in self.sources and n not in self.types]
        seen: Set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            closure.append(name)
            for source in self.sources[name]:
                for part in source[1:2]:
                    if isinstance(part, cst.CSTNode):
                        stack.extend(n.value for n in _read_names(part) if n.value in self.sources and n.value not in self.types)
        for name in closure:
            self.types[name] = _TOP
        changed = True
        while changed:
            changed = False
            for name in closure:
                t, why = _TOP, None
                for source in self.sources[name]:
                    before, self.blame = self.blame, None
                    s = self._source_type(source)
                    if s is None and why is None:
                        why = self.blame
                    self.blame = before
                    t = _join(t, s)
                if t is not self.types[name] and t != self.types[name]:
                    self.types[name] = t
                    changed = True
                if t is None and why is not None:
                    self.untyped[name] = why
        for name in closure:
            if self.types[name] == _TOP:
                self.types[name] = _VALUE  # bound only from itself: reading it first raises

    def _fail(self, node: cst.CSTNode, why: str):
        if self.blame is None:
            self.blame = f"`{code(node).strip().splitlines()[0]}` {why}"
        return None

    def _blamed(self, why: str):
        if self.blame is None:
            self.blame = why
        return None

    # -- expressions

    def value(self, e: cst.BaseExpression) -> bool:
        """``e`` is typed a value (or a library's, or not yet known)."""
        t = self.type_of(e)
        if t in (_VALUE, _LIBRARY, _TOP):
            return True
        if t is not None:
            self._fail(e, "is a module or another object, whose code is not read here")
        return False

    def type_of(self, e: cst.BaseExpression):
        if isinstance(e, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)):
            return _VALUE
        if isinstance(e, cst.ConcatenatedString):
            return _VALUE if self.value(e.left) and self.value(e.right) else None
        if isinstance(e, cst.FormattedString):
            parts = [p.expression for p in walk(e) if isinstance(p, cst.FormattedStringExpression)]
            return _VALUE if all(self.value(p) for p in parts) else None
        if isinstance(e, cst.Name):
            return self._name_type(e)
        if isinstance(e, (cst.Tuple, cst.List, cst.Set)):
            return _VALUE if all(self.value(x.value) for x in e.elements) else None
        if isinstance(e, cst.Dict):
            return _VALUE if all(
                self.value(x.value) and (not isinstance(x, cst.DictElement) or self.value(x.key)) for x in e.elements
            ) else None
        if isinstance(e, (cst.BinaryOperation, cst.BooleanOperation)):
            return _VALUE if self.value(e.left) and self.value(e.right) else None
        if isinstance(e, cst.UnaryOperation):
            return _VALUE if self.value(e.expression) else None
        if isinstance(e, cst.Comparison):
            return _VALUE if self.value(e.left) and all(self.value(c.comparator) for c in e.comparisons) else None
        if isinstance(e, cst.IfExp):
            return _VALUE if self.value(e.test) and self.value(e.body) and self.value(e.orelse) else None
        if isinstance(e, cst.Subscript):
            return _VALUE if self.value(e.value) and all(
                self.value(x.slice.value) if isinstance(x.slice, cst.Index)
                else all(p is None or self.value(p) for p in (x.slice.lower, x.slice.upper, x.slice.step))  # type: ignore[attr-defined]
                for x in e.slice
            ) else None
        if isinstance(e, cst.Attribute):
            return self._attribute_type(e)
        if isinstance(e, cst.Call):
            return self._call_type(e)
        if isinstance(e, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            comp: Optional[cst.CompFor] = e.for_in
            while comp is not None:
                if not all(isinstance(t, cst.Name) for t in flatten_targets(comp.target)):  # (`for mask[0] in ...`: a store)
                    return self._fail(comp.target, "is a target that may write what it does not bind")
                if comp.asynchronous is not None or self.element(comp.iter) is None or not all(self.value(i.test) for i in comp.ifs):
                    return self._fail(comp.iter, "is iterated: what its iterator runs is not read") if self.blame is None else None
                comp = comp.inner_for_in
            parts = [e.key, e.value] if isinstance(e, cst.DictComp) else [e.elt]
            return _VALUE if all(self.value(p) for p in parts) else None
        if isinstance(e, cst.NamedExpr):
            return _VALUE if self.value(e.value) else None
        return self._fail(e, "is not read (a lambda, a generator's yield, an await...)")

    def _name_type(self, n: cst.Name):
        name = n.value
        if name == self.self_name:
            return _SELF
        if name in self.sources:
            if name not in self.types:
                self.settle({name})
            t = self.types[name]
            if t is None:  # (the first reason, through the names bound from it)
                why = self.untyped.get(name)
                return self._blamed(why) if why else self._fail(n, "may hold an object whose code is not read")
            return t
        if name in ("True", "False", "None", "Ellipsis", "NotImplemented", "__debug__"):
            return _VALUE
        if _a_library_name(self.ctx, n):
            return _LIBRARY
        return self._fail(n, "is a global of the files: an object whose code is not read here")

    def _on_self(self, e: cst.CSTNode) -> bool:
        return self.self_name is not None and is_name(e, self.self_name)

    def _attribute_type(self, e: cst.Attribute):
        ctx, owner, attr = self.ctx, self.owner, e.attr.value
        if self._on_self(e.value) and owner is not None:
            if attr in _class_names(owner.ctx, owner.ctx.module, owner.cls):
                return self._fail(e, "reads a method or property of the class")
            if _held_everywhere(ctx, owner, attr):
                return _VALUE
            if attr not in self.lists:
                listed = _listed_modules(owner, attr) if ctx.module is owner.ctx.module else None
                self.lists[attr] = _Modules(tuple(listed)) if listed is not None else None
            if self.lists[attr] is not None:
                return self.lists[attr]
            return self._fail(e, "is used as a value: it may be a module or other object, whose methods are not read")
        inner = e.value
        if isinstance(inner, cst.Attribute) and self._on_self(inner.value) and owner is not None:
            held = inner.attr.value
            if held not in _class_names(owner.ctx, owner.ctx.module, owner.cls) and (
                _held_everywhere(ctx, owner, held, _holds_a_tensor)
                or _plain_attribute(ctx, held, attr) and _held_everywhere(ctx, owner, attr)
            ):
                return _VALUE
            return self._fail(e, f"reads `{code(inner)}`, which may be a module or other object: what it runs is not read")
        t = self.type_of(inner)
        if t in (_VALUE, _LIBRARY, _TOP):
            return t
        if t is not None:
            return self._fail(e, "reads an attribute of a module or other object: what it runs is not read")
        return None

    def element(self, it: cst.BaseExpression):
        """What iterating ``it`` gives: a type, or a tuple of types (`enumerate`, `zip`)."""
        ctx = self.ctx
        if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value in ("enumerate", "zip", "reversed") \
                and not bound_locally(ctx, it, it.func.value) and function_of(ctx, ctx.module, it.func.value) is None \
                and not ctx.qualified_names(it.func) - {f"builtins.{it.func.value}"} and all(a.keyword is None and not a.star for a in it.args):
            items = [self.element(a.value) for a in it.args]
            if any(i is None for i in items):
                return None
            if it.func.value == "reversed":
                return items[0] if len(items) == 1 else None
            if it.func.value == "enumerate":
                return (_VALUE, items[0]) if len(items) == 1 else None
            return tuple(items)
        if isinstance(it, cst.Attribute) and self._on_self(it.value) and self.owner is not None and not _held_everywhere(ctx, self.owner, it.attr.value) \
                and not isinstance(self._attribute_type(it), _Modules):
            self.blame = None
            return self._fail(it, "is iterated: what its iterator runs is not read")  # (a module's `__iter__`, hunt 23a F6)
        t = self.type_of(it)
        if isinstance(t, _Modules) or t == _TOP:
            return t
        if t in (_VALUE, _LIBRARY):
            return _VALUE
        if t is not None:
            return self._fail(it, "is iterated: what its iterator runs is not read")
        return None

    def _proof(self, call: cst.Call, prove) -> Optional[str]:
        if id(call) not in self.proven:
            self.proven[id(call)] = prove()
        return self.proven[id(call)]

    def _call_type(self, call: cst.Call):
        ctx, owner, func = self.ctx, self.owner, call.func
        if self.trust_calls:
            return _VALUE
        if any(a.keyword is not None and a.keyword.value == "out" for a in call.args):
            return self._fail(call, "writes its `out=`")
        if any(a.keyword is not None and a.keyword.value == "inplace" and not is_name(a.value, "False") for a in call.args):
            return self._fail(call, "may write its argument (`inplace=`)")  # (hunt 23a F10)
        is_len = isinstance(func, cst.Name) and func.value == "len" and len(call.args) == 1
        for a in call.args:
            if not (is_len and isinstance(self.type_of(a.value), _Modules)) and not self.value(a.value):
                return None
        if isinstance(func, cst.Attribute) and self._on_self(func.value) and owner is not None:
            why = self._proof(call, lambda: _self_call_unproven(owner, call, self.depth, self.checked))
            return _VALUE if why is None else self._blamed(why)
        if isinstance(func, cst.Name) and func.value in self.sources:
            t = self._name_type(func)
            if t == _TOP:
                return _TOP
            if isinstance(t, _Modules):
                why = self._proof(call, lambda: _modules_unproven(ctx, t.built, self.depth, self.checked))
                return _VALUE if why is None else self._blamed(why)
            return self._fail(call, f"calls `{func.value}`, a local whose code is not read") if t is not None else None
        qualified = ctx.qualified_names(func)
        if qualified & _ANY_OBJECT:
            return self._fail(call, "may make any object")
        if torch_or_builtin(ctx, call):
            return _VALUE
        if (  # a builtin itself (`len(shape)`: a module read far has no qualified names)
            isinstance(func, cst.Name) and func.value in _PURE_BUILTINS and not qualified - {f"builtins.{func.value}"}
            and not any(a.keyword is not None and a.keyword.value == "key" for a in call.args)
            and function_of(ctx, ctx.module, func.value) is None and not bound_locally(ctx, call, func.value)
        ):
            return _VALUE
        if isinstance(func, cst.Name) and not bound_locally(ctx, call, func.value):
            found = followed_function(ctx, ctx.module, func.value)  # (not replaced from another module: hunt 24a F9)
            if found is not None and not found[1].decorators:
                inner = ctx.context_of(found[0])
                why = self._proof(call, lambda: _Reader(inner, None, found[1], self.depth + 1, self.checked).unproven(found[1].body.body))  # type: ignore[union-attr]
                return _VALUE if why is None else self._blamed(why)
        if isinstance(func, cst.Attribute):
            t = self.type_of(func.value)
            if t in (_VALUE, _TOP) and func.attr.value in _READING_METHODS | _COMPUTING_METHODS | METADATA_METHODS | _MAPPING_READS:
                return _VALUE  # (`self.decoder_pos_embed.repeat(...)`: a parameter's new tensor)
            if t is None:
                return None
        return self._fail(call, "may write a tensor it is not given")

    # -- statements

    def unproven(self, statements: Sequence[cst.BaseStatement]) -> Optional[str]:
        """Why running ``statements`` (of ``func``) may write a tensor not a new local's."""
        if self.depth > 4:
            return f"`{self.func.name.value}` is called more than 4 deep"
        self.settle({n.value for s in statements for n in _read_names(s)})
        for st in statements:
            why = self._statement(st)
            if why is not None:
                return why
        return None

    def _statement(self, st: cst.CSTNode) -> Optional[str]:
        self.blame = None

        def at(n: cst.CSTNode) -> str:
            return f"`{code(n).strip().splitlines()[0]}`"

        def typed(e: Optional[cst.BaseExpression]) -> bool:
            return e is None or self.value(e)

        def block(suite: Optional[cst.CSTNode]) -> Optional[str]:
            if isinstance(suite, cst.Else):
                suite = suite.body
            if suite is None or isinstance(suite, (cst.If, cst.SimpleStatementSuite)):
                return None if suite is None else self._statement(suite)
            return next((w for s in suite.body if (w := self._statement(s))), None)  # type: ignore[attr-defined]

        if isinstance(st, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            for small in st.body:
                self.blame = None
                if isinstance(small, (cst.Pass, cst.Break, cst.Continue)):
                    continue
                if isinstance(small, (cst.Global, cst.Nonlocal, cst.Del, cst.AugAssign)):
                    return f"{at(small)} may write what it does not bind"
                if isinstance(small, cst.Expr):
                    ok = self.type_of(small.value) is not None
                elif isinstance(small, cst.Return):
                    ok = typed(small.value)
                elif isinstance(small, cst.Assert):
                    ok = typed(small.test) and typed(small.msg)
                elif isinstance(small, (cst.Assign, cst.AnnAssign)):
                    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                    for t in (x for t in targets for x in flatten_targets(t)):
                        if not (isinstance(t, cst.Name) or isinstance(t, cst.Subscript) and is_name(t.value) and t.value.value in self.fresh):  # type: ignore[attr-defined]
                            return f"{at(small)} may write what it does not bind"
                        if isinstance(t, cst.Subscript) and not self.value(t):
                            return self.blame or f"{at(small)} is not read"
                    ok = small.value is None or self.type_of(small.value) not in (None, _SELF)
                else:
                    return f"{at(small)} is not read"
                if not ok:
                    return self.blame or f"{at(small)} is not read"
            return None
        if isinstance(st, cst.If):
            if not typed(st.test):
                return self.blame
            return block(st.body) or block(st.orelse)
        if isinstance(st, cst.While):
            if not typed(st.test):
                return self.blame
            return block(st.body) or block(st.orelse)
        if isinstance(st, cst.For):
            if st.asynchronous is not None or not all(isinstance(t, cst.Name) for t in flatten_targets(st.target)):
                return f"{at(st)} may write what it does not bind"
            if self.element(st.iter) is None:
                return self.blame or f"`{code(st.iter)}` is iterated: what its iterator runs is not read"
            return block(st.body) or block(st.orelse)
        if isinstance(st, cst.With) and st.asynchronous is None and all(
            isinstance(i.item, cst.Call) and (i.asname is None or isinstance(i.asname.name, cst.Name))
            and bool(self.ctx.qualified_names(i.item.func)) and self.ctx.qualified_names(i.item.func) <= _QUIET_CONTEXTS | _KERNEL_CONTEXTS
            for i in st.items
        ):  # torch's grad, autocast or SDPA-kernel mode
            if not all(typed(a.value) for i in st.items for a in i.item.args):  # type: ignore[attr-defined]
                return self.blame
            return block(st.body)
        return f"{at(st)} is not read"


def _read_names(node: cst.CSTNode) -> List[cst.Name]:
    """The names in ``node`` but an attribute's (`x.shape`) and a keyword's (`dim=1`)."""
    skip = {id(n.attr) for n in walk(node) if isinstance(n, cst.Attribute)}
    skip |= {id(n.keyword) for n in walk(node) if isinstance(n, cst.Arg) and n.keyword is not None}
    return [n for n in walk(node) if isinstance(n, cst.Name) and id(n) not in skip]


def _class_names(ctx: PlanContext, module: cst.Module, cls: cst.ClassDef, depth: int = 0) -> Set[str]:
    """Every name the body of ``cls`` or of a base the files define binds: a def, a
    `vis_masked = property(getter)`, a constant (``ANY_NAME`` for a base not read)."""
    names = set(class_bindings(cls))
    for base in cls.bases:
        found = resolve_class(ctx, module, base.value.value, at=cls) if is_name(base.value) and depth < 8 else None  # type: ignore[attr-defined]
        if found is not None:
            names |= _class_names(ctx.context_of(found[0]), found[0], found[1], depth + 1)
    return names


# torch's tensor makers: what `self.<attr> = <one of these>(...)` holds is a tensor
_TENSOR_MAKERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.Tensor", "torch.tensor"})


def _holds_a_tensor(ctx: PlanContext, attr: str) -> bool:
    """Every value ``ctx``'s module stores to `<obj>.<attr>` is a tensor torch makes
    (`nn.Parameter(torch.zeros(...))`, `torch.zeros(...)`), and none is set by name:
    its methods are tensor methods, its attributes a tensor's."""
    values = _submodules(ctx, attr)
    return bool(values) and all(
        isinstance(v, cst.Call) and bool(q := ctx.qualified_names(v.func))
        # a new tensor: not `torch.compile(Vis())`, `torch.load(...)`, `torch.as_tensor(mask)` (hunt 24a F2, F6)
        and all(n in _TENSOR_MAKERS or n.startswith("torch.") and n[len("torch."):] in _FRESH_FACTORIES for n in q)
        for v in values
    )


def _holds_data(ctx: PlanContext, attr: str) -> bool:
    """Every value ``ctx``'s module stores to `<obj>.<attr>` is a tensor torch makes or data
    (:func:`_data_value`: `self.tokens_spatial_shape_final = [i // s for ...]`, `self.heads =
    heads`, `self.q_stride = flat_q_stride`)."""
    if _holds_a_tensor(ctx, attr):
        return True
    values = _stored_values(ctx, attr)
    if not values and attr in _MODULE_FLAGS:
        return True  # `self.training`: nn.Module's own bool
    key = (id(ctx.module), attr)
    if not values:
        return False
    if key in _HOLDING:
        # being proven (`self.mask_spatial_shape = self.encoder.mask_spatial_shape`): data
        # unless another of its values is not, which the outer proof reads (a greatest
        # fixpoint; what is proven meanwhile is not kept)
        return True

    def find() -> bool:
        _HOLDING.add(key)
        try:
            return all(_data_value(ctx, v, 0) for v in values)
        finally:
            _HOLDING.discard(key)

    if _HOLDING:
        return find()
    return ctx.fact(("holds data", id(ctx.module), attr), find, ctx.module)


_HOLDING: Set[Tuple[int, str]] = set()  # the attributes being proven data (a cycle is not)


def _data_attribute(ctx: PlanContext, attr: str) -> bool:
    """`self.<attr>`, read in ``ctx``'s module, holds data in it and in every module it
    imports storing `<obj>.<attr>` (a base's `self.q_pool = q_pool` in hiera.py)."""
    read, incomplete = imported_modules(ctx, [ctx.module])
    # (a module not read may store an object under the name)
    return incomplete is None and _held_in(ctx, [ctx.module, *(m for _, m in read)], attr, _holds_data)


def _held_in(ctx: PlanContext, modules: Sequence[cst.Module], attr: str, holds) -> bool:
    """``holds(module's context, attr)`` in each of ``modules`` storing `<obj>.<attr>`, none
    setting it by name, one storing it at least (or nn.Module's own flag, for data)."""
    stored = False
    for m in dict.fromkeys(modules):
        inner = ctx.context_of(m)
        if sets_submodule_by_name(m, attr) is not None:
            return False
        if _stored_values(inner, attr) or _submodules(inner, attr):
            if not holds(inner, attr):
                return False
            stored = True
    return stored or holds is _holds_data and attr in _MODULE_FLAGS


def _data_value(ctx: PlanContext, value: cst.BaseExpression, depth: int, seen: FrozenSet[str] = frozenset()) -> bool:
    """``value`` (of ``ctx``'s module) makes data: literals, displays, comprehensions,
    operators and items made of data; calls of the builtins making data and of math; names a
    library binds (`math.pi`); `self.<a>` holding data; a parameter of the function around
    it no caller of the files hands a class or instance of the files, defaulting to nothing
    of the files (`self.heads = heads`, :func:`_calls._a_parameter`); a local bound only to
    such values (`flat_q_stride = math.prod(q_stride)`).  Not a lambda, another attribute
    (`cfg.recorder`), a local bound to any other call (`recorder = MaskVis()`; hunt 25a F1:
    these were taken for data, having no call but the builtins')."""
    if depth > 4:
        return False
    targets = {n.value for c in walk(value) if isinstance(c, cst.CompFor) for n in walk(c.target) if isinstance(n, cst.Name)}
    # a lambda's parameters are its arguments: data where what it maps is (`map(lambda e:
    # reduce(mul, e), zip(*self.q_strides))`), its body read as the rest
    targets |= {p.name.value for c in walk(value) if isinstance(c, cst.Lambda) for p in _params(c)}  # type: ignore[arg-type]
    callees = {id(c.func) for c in walk(value) if isinstance(c, cst.Call)}
    proven: Set[int] = set()  # `self.patch_embed` read only for a plain data attribute of its proven class
    for n in walk(value):
        if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Attribute) and is_name(n.value.value, "self") and id(n) not in callees \
                and _plain_attribute(ctx, n.value.attr.value, n.attr.value) and _data_attribute(ctx, n.attr.value):
            proven.add(id(n.value))  # (`self.patch_embed.grid_size`)
            continue
        if id(n) in proven:
            continue
        if isinstance(n, (cst.Yield, cst.Await, cst.NamedExpr, cst.FormattedString)):
            return False
        if isinstance(n, cst.Call) and not (
            isinstance(n.func, cst.Name) and n.func.value in _DATA_BUILTINS | {"map", "filter"}
            and not ctx.qualified_names(n.func) - {f"builtins.{n.func.value}"}
            or bool(q := ctx.qualified_names(n.func)) and all(x.startswith(_DATA_MODULES) for x in q)
            # a method of data (`v.item()` of a numpy array; its receiver's names are read below)
            or isinstance(n.func, cst.Attribute) and n.func.attr.value in _DATA_METHODS and not ctx.qualified_names(n.func)
        ):
            return False
        if isinstance(n, cst.Attribute) and id(n) not in callees and not (
            is_name(n.value, "self") and _data_attribute(ctx, n.attr.value)
            or isinstance(n.value, cst.Name) and n.value.value != "self" and _a_library_name(ctx, n.value)
            or isinstance(n.value, cst.Attribute)  # (its own base is read below)
        ):
            return False
    scope = next((a for a in ctx.ancestors(value) if isinstance(a, cst.FunctionDef)), None)
    for name in _read_names(value):
        v = name.value
        if v in targets or v in ("None", "True", "False", "self") or id(name) in callees or v in seen:
            continue  # (a name bound from itself, `s = tuple(np.prod([s], axis=0))`: its other sources are read)
        if v in _DATA_BUILTINS | {"str"} and not ctx.qualified_names(name) - {f"builtins.{v}"} and not _calls_binds(ctx.module, v):
            continue  # (`grid_size.astype(int)`)
        bound = _name_bindings(scope, v) if scope is not None else []
        param = next((p for p in _params(scope) if p.name.value == v), None) if scope is not None else None
        if bound is None or not all(_data_value(ctx, b, depth + 1, seen | {v}) for b in bound):
            return False  # (`recorder = MaskVis(); self.recorder = recorder`: hunt 25a F1)
        if param is not None:
            # no caller of the files hands it a class or instance of the files (`Model(recorder=MaskVis())`)
            if param.default is not None and not _data_value(ctx, param.default, depth + 1) or injected(ctx, ctx.module, scope, v) is not None:  # type: ignore[arg-type]
                return False
            continue
        if not bound and not _a_library_name(ctx, name):
            return False
    return True


# modules whose functions make data of data (`math.prod`, `functools.reduce(operator.mul, ...)`)
_DATA_MODULES = ("math.", "functools.reduce", "operator.", "itertools.", "numpy.")
_DATA_METHODS = frozenset({"item", "tolist", "index", "count", "copy", "get", "keys", "values", "items", "prod", "sum", "astype", "reshape", "flatten"})


def _params(scope) -> List[cst.Param]:
    params = scope.params
    return [*params.posonly_params, *params.params, *params.kwonly_params, *(p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param))]


_NAME_BINDING_TYPES = exact_types(
    cst.Assign, cst.AnnAssign, cst.NamedExpr, cst.For, cst.CompFor, cst.AugAssign, cst.WithItem, cst.Del, cst.ExceptHandler,
    cst.Global, cst.Nonlocal, cst.ImportAlias, cst.FunctionDef, cst.ClassDef, cst.MatchAs, cst.MatchStar, cst.MatchMapping,
)


def _name_bindings(scope: cst.FunctionDef, name: str) -> Optional[List[cst.BaseExpression]]:
    """What ``scope``'s body binds the name ``name`` to (a loop's: what it iterates); None
    where another form binds it (an import, a def, `with ... as`, `except ... as`, `global`,
    `del`, `+=`, a `match` capture)."""
    values: List[cst.BaseExpression] = []
    for node in walk(scope.body):
        if type(node) not in _NAME_BINDING_TYPES:
            continue
        if isinstance(node, cst.Assign):
            pairs = [(t.target, node.value) for t in node.targets]
        elif isinstance(node, (cst.AnnAssign, cst.NamedExpr)) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, (cst.For, cst.CompFor)):
            pairs = [(node.target, node.iter)]
        elif isinstance(node, (cst.AugAssign, cst.WithItem, cst.Del, cst.ExceptHandler, cst.Global, cst.Nonlocal, cst.ImportAlias,
                               cst.FunctionDef, cst.ClassDef, cst.MatchAs, cst.MatchStar, cst.MatchMapping)):
            if _calls_binds(node, name) if not isinstance(node, cst.AugAssign) else is_name(node.target, name):
                return None
            continue
        else:
            continue
        values += [value for target, value in pairs if any(is_name(t, name) for t in flatten_targets(target))]
    return values


def _held_everywhere(ctx: PlanContext, owner: _Owner, attr: str, holds=None) -> bool:
    """``holds`` (:func:`_holds_data` by default) of `<obj>.<attr>` in ``ctx``'s module and
    in each module of ``owner``'s class's receivers storing to it: a data attribute's name
    stored an object in another module (a base's `self.scale = Vis()`, a factory's
    `model.scale = ...`) is not data.  No module sets it by name; one stores it at least
    (or it is nn.Module's own flag)."""
    modules, _ = receiver_modules(owner.ctx, owner.cls)
    return _held_in(ctx, [ctx.module, owner.ctx.module, *modules], attr, holds or _holds_data)


def _stored_values(ctx: PlanContext, attr: str) -> List[cst.BaseExpression]:
    """What ``ctx``'s module stores to `<obj>.<attr>`, a tuple target's paired element
    (`self.q_pool, self.q_stride = q_pool, q_stride`) or its whole value; [] where it may
    set it by name."""
    return ctx.fact(("stored values", id(ctx.module), attr), lambda: _find_stored_values(ctx, attr), ctx.module)


def _find_stored_values(ctx: PlanContext, attr: str) -> List[cst.BaseExpression]:
    if sets_submodule_by_name(ctx.module, attr) is not None:
        return []
    found: List[cst.BaseExpression] = []
    for node in nodes_of(ctx.module, (cst.Assign, cst.AnnAssign, cst.AugAssign)):  # the only nodes read below
        if isinstance(node, cst.Assign):
            pairs = [(t.target, node.value) for t in node.targets]
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)) and node.value is not None:
            pairs = [(node.target, node.value)]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)) and len(target.elements) == len(value.elements):
                pairs_ = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
            else:
                pairs_ = [(t, value) for t in flatten_targets(target)]
            found += [v for t, v in pairs_ if isinstance(t, cst.Attribute) and t.attr.value == attr]
    return found


# nn.Module's own plain attributes (set by `train()`/`eval()`, not in the files)
_MODULE_FLAGS = frozenset({"training"})
_DATA_BUILTINS = frozenset({"list", "tuple", "int", "float", "bool", "len", "range", "zip", "sum", "min", "max", "abs", "round", "dict", "set", "sorted", "reversed", "enumerate"})
# the builtins that iterate an argument (a generator's body runs: hunt 24a F5)
_ITERATING_BUILTINS = frozenset({"list", "tuple", "dict", "set", "sum", "min", "max", "sorted", "any", "all", "zip", "enumerate", "reversed"})


def _plain_attribute(ctx: PlanContext, attr: str, name: str) -> bool:
    """`self.<attr>.<name>` reads a plain attribute (upstream's `self.attn.q_stride`):
    ``attr`` holds instances of classes of the files proven as :func:`module_class_unproven`
    proves them (or of torch's), none binding ``name`` in its class body (a property)."""
    values = [v for v in _submodules(ctx, attr) if not is_name(v, "None")]
    classes = _built_classes(ctx, ctx.module, values, 0) if values else None
    read = [m for _, m in imported_modules(ctx, [ctx.module, ctx.planned().module])[0]] if classes else []
    return classes is not None and all(
        module_class_unproven(ctx, m, c) is None and name not in _class_names(ctx.context_of(m), m, c)
        # nor set on the class from outside its body (`MaskVis.shown = property(f)`: hunt 24a F4)
        and not any(_patches(r, c.name.value, name, set()) for r in dict.fromkeys([ctx.module, m, *read]))
        for m, c in classes
    )


def _a_library_name(ctx: PlanContext, name: cst.Name) -> bool:
    """The global ``name`` is bound only by imports of modules the files do not hold
    (`import torch`, `from torch.nn.attention import SDPBackend`)."""
    imported = False
    for stmt in ctx.module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            imported = imported or _calls_binds(stmt, name.value)
        elif _calls_binds(stmt, name.value):
            return False  # an assignment, a def, a class (or an import under `try:`/`if`: not read)
    if not imported:
        return False
    qualified = ctx.qualified_names(name)
    return bool(qualified) and all(
        not q.startswith(".") and ctx.module_named(q) is None and ctx.module_named(q.rpartition(".")[0] or q) is None for q in qualified
    )


def _an_object(
    ctx: PlanContext, call: cst.CSTNode, receiver: cst.BaseExpression, blocks: Dict[str, List[cst.BaseExpression]], seen: FrozenSet[str] = frozenset(),
) -> bool:
    """The receiver of a tensor-named method (`vis.add(...)`) may be another object, whose
    method of that name is not read (hunt 23a F1): a loop's submodule, a global, a local
    bound to `self.<attr>` not holding a tensor or to an instance of a class of the files."""
    if isinstance(receiver, cst.Attribute) and is_name(receiver.value, "self"):
        return not _holds_data(ctx, receiver.attr.value)
    if isinstance(receiver, (cst.Attribute, cst.Subscript)):  # `self.vis.rec`, `self.vis_list[0]`, `vis.rec` (hunt 24a F1)
        if isinstance(receiver, cst.Attribute) and receiver.attr.value in METADATA_ATTRIBUTES:
            return False  # `x.shape`, `x.T`: a tensor's
        inner = receiver.value
        if isinstance(inner, cst.Attribute) and is_name(inner.value, "self"):
            if isinstance(receiver, cst.Attribute) and _plain_attribute(ctx, inner.attr.value, receiver.attr.value):
                return not _holds_data(ctx, receiver.attr.value)  # `self.attn.q_stride`: data of a proven class
            return not _holds_data(ctx, inner.attr.value)  # an item or attribute of what `self.<a>` holds
        return _an_object(ctx, call, inner, blocks, seen)
    if isinstance(receiver, (cst.IfExp, cst.BooleanOperation)):
        parts = [receiver.body, receiver.orelse] if isinstance(receiver, cst.IfExp) else [receiver.left, receiver.right]
        return any(_an_object(ctx, call, p, blocks, seen) for p in parts)
    if not isinstance(receiver, cst.Name):
        return False  # a call's result, arithmetic...: a tensor the code made
    name = receiver.value
    if name in seen:
        return False
    if name in blocks:
        return True
    if name in ("None", "True", "False"):
        return False
    if not bound_locally(ctx, call, name):  # type: ignore[arg-type]
        # a global: an object of the files (`VIS = MaskVis()`), or a name another package's
        # import binds (`torch.float`, `SDPBackend.FLASH_ATTENTION`: out of contract, as its code is)
        return not _a_library_name(ctx, receiver)
    scope = next((a for a in ctx.ancestors(call) if isinstance(a, cst.FunctionDef)), None)
    if scope is None:
        return True
    for target, value in _assignments(scope):
        if any(is_name(t, name) for t in flatten_targets(target)):  # type: ignore[arg-type]
            if isinstance(ctx.parent(target), (cst.For, cst.CompFor)) or isinstance(target, (cst.Tuple, cst.List)) \
                    and isinstance(ctx.parent(ctx.parent(target) or target), (cst.For, cst.CompFor)):
                # a loop's target: an element of what it iterates (`for i, v in enumerate(self.vis_list)`)
                if not (isinstance(value, cst.Call) and is_name(value.func, "range")):
                    return True
                continue
            if _an_object(ctx, call, value, blocks, seen | {name}) if isinstance(value, (cst.Attribute, cst.Subscript, cst.IfExp, cst.BooleanOperation, cst.Name)) else False:
                return True
            if isinstance(value, cst.Call) and is_name(value.func) and resolve_class(ctx, ctx.module, value.func.value) is not None:  # type: ignore[attr-defined]
                return True
    return False


def _iterates_known(ctx: PlanContext, owner: Optional[_Owner], it: cst.BaseExpression, blocks: Dict[str, List[cst.BaseExpression]]) -> bool:
    """``it``, a loop's iterable, runs no code but what is read: `range`/`zip`/`enumerate`/
    `reversed` of such, a literal list or tuple, a tensor's `.shape`, a submodule list
    `_blocks` follows (`self.decoder_blocks`)."""
    if isinstance(it, (cst.List, cst.Tuple)):
        return True
    if isinstance(it, cst.Call) and is_name(it.func) and it.func.value in ("range", "zip", "enumerate", "reversed") \
            and not bound_locally(ctx, it, it.func.value) and function_of(ctx, ctx.module, it.func.value) is None:  # type: ignore[attr-defined]
        return it.func.value == "range" or all(_iterates_known(ctx, owner, a.value, blocks) for a in it.args)  # type: ignore[attr-defined]
    if isinstance(it, cst.Attribute) and it.attr.value == "shape":
        return True
    if isinstance(it, cst.Name):  # a parameter, or a local bound by no call but torch's and the builtins'
        scope = next((a for a in ctx.ancestors(it) if isinstance(a, cst.FunctionDef)), None)
        if scope is None or not bound_locally(ctx, it, it.value):  # type: ignore[arg-type]
            return False
        return not any(  # (`gen = self._vis_steps()` before the fill: a generator's body: hunt 23a F6)
            any(is_name(t, it.value) for t in flatten_targets(target)) and any(
                isinstance(c, cst.Call) and not torch_or_builtin(ctx, c) and not (is_name(c.func) and c.func.value in _PURE_BUILTINS)  # type: ignore[attr-defined]
                for c in walk(value)
            )
            for target, value in _assignments(scope)
        )
    if isinstance(it, cst.Attribute) and is_name(it.value, "self") and owner is not None:
        return _listed_modules(owner, it.attr.value) is not None
    return False


def _assignments(scope: cst.FunctionDef) -> List[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) of each assignment and walrus in ``scope`` (a loop's: its iterable)."""
    return list(_bindings(scope))  # type: ignore[arg-type]


def _self_call_unproven(owner: _Owner, call: cst.Call, depth: int, checked: List[str]) -> Optional[str]:
    """Why `self.<name>(...)` (``call``), where ``owner``'s methods run, may write a tensor
    it is not given: a submodule (:func:`_modules_unproven`) or a method, read as
    :func:`_writes_no_tensor` reads a body; None when neither."""
    ctx, cls = owner.ctx, owner.cls
    name = call.func.attr.value  # type: ignore[attr-defined]
    where = f"`{code(call).strip().splitlines()[0]}`"
    found = method_of(ctx, ctx.module, cls, name)
    if found is None:
        values = [v for v in _submodules(ctx, name) if not is_name(v, "None")]  # (None: calling it raises)
        if not values or not all(isinstance(v, (cst.Call, cst.IfExp)) for v in values):
            return f"{where} may write a tensor it is not given (`self.{name}` is not a module built here)"
        if owner.guarded and (why := self_call_unproven(ctx, cls, name)) is not None:
            return f"{where} may write a tensor it is not given ({why})"
        # a submodule's own: another module's store (`m.decoder_blocks[-1].attn = Vis()` in
        # hiera_mae.py: hunt 23a F5)
        if not owner.guarded and (why := stored_elsewhere(ctx, cls, name)) is not None:
            return f"{where} may write a tensor it is not given (`{why}` may replace self.{name})"
        return _modules_unproven(ctx, values, depth, checked)
    module, method_cls, method = found
    if not all(is_name(d.decorator, "staticmethod") for d in method.decorators):
        return f"{where} may write a tensor it is not given (a decorated method)"
    inner = ctx.context_of(module)
    why = (replaced(ctx, ctx.module, cls, name) if owner.guarded and method_cls is not cls else None) or replaced(
        inner, module, method_cls, name, static=True
    )
    if why is not None:
        return f"{where} may write a tensor it is not given ({why})"
    # the method's own self calls resolve on the same instance: ``owner``, not the class
    # the def is in (hunts 22a F5, 22b F7: a base's helper calling a hook the MAE overrides)
    why = _Reader(inner, owner, method, depth + 1, checked).unproven(method.body.body)  # type: ignore[union-attr]
    if why is not None:
        return why
    if owner.guarded:
        checked.append(name)
    return None


def _modules_unproven(ctx: PlanContext, values: Sequence[cst.BaseExpression], depth: int, checked: List[str]) -> Optional[str]:
    """Why a submodule built by ``values`` (of ``ctx``'s module) may write a tensor it is not
    given when called: a class of the files with its own `__call__`, a module of its
    class registering a hook, or a forward not made as :func:`_writes_no_tensor` reads.
    One built by code the files do not hold (`nn.Linear`, a `norm_layer` parameter) is
    out of contract (README)."""
    classes = _built_classes(ctx, ctx.module, values, 0)
    if classes is None:
        return f"`{code(values[0]).splitlines()[0]}` builds a module this rewrite does not read"
    for made_module, made in classes:
        where = f"{made.name.value}'s forward"
        why = module_class_unproven(ctx, made_module, made)
        if why is not None:
            return f"{where} is not read ({why})"
        forward = method_of(ctx, made_module, made, "forward")
        inner = ctx.context_of(forward[0])
        owner = _Owner(ctx.context_of(made_module), made, False)
        why = _Reader(inner, owner, forward[2], depth + 1, checked).unproven(forward[2].body.body)  # type: ignore[union-attr]
        if why is not None:
            return f"{why} (in {where})"
    return None


def _unit_mask_kept(ctx: PlanContext, cls: cst.ClassDef, func: cst.FunctionDef, unit_mask: str) -> Optional[str]:
    """Where the unit mask may be kept beyond the locals of the methods it passes through
    (hunt 18c: `self.last_mask = mask` in forward_encoder, then a method the decoder runs
    after its fill writes it through `self`): a value made from it or a view of it
    (:func:`hiera_rewrite.flow.tensor_aliases`) stored on an attribute, an item or a global,
    or packed, by ``func`` (the MAE method calling the decoder), by the class's
    forward_encoder or forward_decoder or the forward its super() reaches (their
    parameters after ``x``), or by its get_random_mask (what it returns); else None.  (A
    helper they call, given the mask, storing it is not followed.)"""
    places = [(ctx, func, {unit_mask})]
    for name in ("forward_encoder", "forward_decoder", "get_random_mask", "forward"):
        found = method_of(ctx, ctx.module, cls, "forward_encoder" if name == "forward" else name)
        if name == "forward" and found is not None:  # the one forward_encoder's super().forward reaches
            base = base_class(ctx, found[0], found[1])
            found = method_of(ctx, base[0], base[1], "forward") if base is not None else None
        if found is None:
            continue
        module, _, method = found
        if name == "get_random_mask":
            names = {n.value for r in walk(method.body) if isinstance(r, cst.Return) and r.value is not None for n in walk(r.value) if isinstance(n, cst.Name)}
        else:
            names = {p.name.value for p in method.params.params[2:]}  # (after self and x)
        places.append((ctx.context_of(module), method, names))
    for where, method, names in places:
        held = set().union(*(tensor_aliases(where, method, n) for n in names)) if names else set()
        for value, target, binding in value_bindings(method):
            if not hands_on(where, value, held):  # (a number made from it, `mask.float().mean().item()`, is not it)
                continue
            for bound in flatten_targets(target):  # type: ignore[arg-type]
                if not isinstance(bound, cst.Name):
                    return f"`{code(bound)} = ...` at line {where.position(binding).line} in {method.name.value} keeps the mask"
        for node in walk(method.body):
            if isinstance(node, (cst.List, cst.Tuple, cst.Set, cst.Dict)) and not isinstance(where.parent(node), (cst.AssignTarget, cst.For, cst.Return)):
                if any(isinstance(n, cst.Name) and n.value in held for n in walk(node)) and isinstance(node, (cst.List, cst.Set, cst.Dict)):
                    return f"`{code(node)}` at line {where.position(node).line} in {method.name.value} packs the mask"
    return None


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
    if flow.opaque:
        return flow.opaque
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
    def straight(binds) -> bool:  # each binding a top-level statement: the last one reaches
        return all(ctx.parent(b.line) is decoder.body for b in binds)

    while True:
        defs = [s for s in flow.assigning(name) if s.index < stmt.index]
        if not defs or flow.compound_assigned.get(name) or not defs[-1].line.body or not straight(defs):
            return why  # (a binding under `if` may be the one that reaches the return, or not)
        stmt = defs[-1]
        assign = single_assign(stmt.line)
        if assign is None or not is_name(assign[0], name) or written_in_place(ctx, decoder, name):
            return why
        value = assign[1]
        view = method_call(value, "view", "reshape")
        if view is not None and is_name(view[0]) and keeps_dtype(view[1]):
            name = view[0].value  # type: ignore[attr-defined]
            continue
        if (
            isinstance(value, cst.Call)
            and is_name(value.func, "undo_windowing")
            and value.args
            and value.args[0].keyword is None
            and not value.args[0].star
            and code(value.args[0].value).replace(" ", "") == f"{filled}[...,0:1]"
        ):
            source = [s for s in flow.assigning(filled) if s.index < stmt.index]
            at_fill = [s for s in flow.assigning(filled) if s.index < fill.index]
            if not source or not at_fill or source[-1] is not at_fill[-1] or not straight(source):
                return why
            rearranged = _rearranges_only(ctx, "undo_windowing")
            if rearranged is not None:
                return rearranged
            chain: List[str] = []
            unfolded = _unfolds_the_argument(ctx, decoder, filled, fill, chain)
            if unfolded is not None:
                return unfolded
            # the fill mask unchanged after the fill (`mask[:, 0] = True`, a call writing
            # it), nor any name it was made from, the argument included (it views them all:
            # `m = mask.reshape(...)...; invert_(mask)` writes m): the units filled are the
            # units the returned mask shows
            written = next((
                why for name in chain
                if (why := written_in_place(ctx, decoder, name)
                    or stored_or_packed(ctx, decoder, name)
                    or passed_to_a_writer(ctx, _class_of(ctx, decoder), decoder, name))
            ), None)
            if written is not None:
                return f"{written}: the units {decoder.name.value} fills may not be those the mask it returns shows"
            return None
        return why


def _unfolds_the_argument(ctx: PlanContext, decoder: cst.FunctionDef, filled: str, fill, chain: List[str]) -> Optional[str]:
    """None when the fill mask is the decoder's mask argument brought to the grid's shape
    by upstream's steps alone, and made bool on the way:

        mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))
        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()

    each keeping the argument's two dims, so the units filled are the argument's (the
    count reads the unit mask the forward gives the decoder), and `~pred_mask` selects
    the tokens not filled (a uint8 mask's `~` is 254 or 255 everywhere).  A fork's
    `mask = mask.repeat(1, T)` (tube masking) or `mask.expand(B, -1)` (one mask for the
    batch) fills another count: why not.  ``chain`` gets the names from the fill mask
    to the argument, each once."""
    flow = ctx.flow(decoder)
    ordered = [*decoder.params.posonly_params, *decoder.params.params]
    argument = ordered[2].name.value if len(ordered) > 2 else None
    why = (
        f"the mask {decoder.name.value} fills with is not its mask argument brought to the grid's shape as upstream's"
        " (`reshape(mask.shape + (1,) * k)`, `expand((-1,) * 2 + ...)`, `.bool()`), so how many units it fills is not"
        " the argument's"
    )
    name, stmt, made_bool = filled, fill, False
    while True:
        if name not in chain:
            chain.append(name)
        if flow.compound_assigned.get(name) or written_in_place(ctx, decoder, name):
            return why
        defs = [s for s in flow.assigning(name) if s.index < stmt.index]
        if not defs:
            return None if name == argument and made_bool else why
        stmt = defs[-1]
        assign = single_assign(stmt.line) if stmt.line.body else None
        if assign is None or not is_name(assign[0], name) or ctx.parent(stmt.line) is not decoder.body:
            return why
        value = assign[1]
        cast = method_call(value, "bool")
        if cast is not None and not cast[1].args:
            value, made_bool = cast[0], True
        step = method_call(value, "reshape", "expand")
        if step is None or not is_name(step[0]) or len(step[1].args) != 1 or step[1].args[0].keyword or step[1].args[0].star:
            return why
        source = step[0].value  # type: ignore[attr-defined]
        shape = code(step[1].args[0].value).replace(" ", "")
        kept = f"{source}.shape+(1,)*" if step[1].func.attr.value == "reshape" else "(-1,)*2+"  # type: ignore[attr-defined]
        if not shape.startswith(kept):
            return why
        name = source


# the tensor methods that only rearrange elements (each element kept once: a bool
# mask keeps its count of True), and reads of a tensor that give its geometry alone
_REARRANGE = {"view", "reshape", "permute", "flatten", "unflatten", "transpose", "contiguous", "movedim"}
_GEOMETRY = {"shape", "ndim", "dtype", "device"}


def _rearranges_only(ctx: PlanContext, name: str) -> Optional[str]:
    """None when the module-level function ``name`` (here or in a module beside the
    file) returns its first argument only rearranged: straight-line statements, each
    binding it again to a chain of view/reshape/permute/... of itself, other names
    reading only its shape, and one final `return x` (upstream's undo_windowing).  Its
    output then has as many True entries as its input, in every unit alike.  Else why not."""
    found = function_of(ctx, ctx.module, name)
    if found is None:
        return f"the {name} called is not a function this rewrite can read (here or in a module beside the file)"
    module, func = found
    here = ctx.context_of(module)
    why = f"{name} (line {here.position(func).line}) does more than rearrange its first argument"
    opaque = here.flow(func).opaque
    if opaque:
        return opaque
    params = func.params.params
    if not params or func.decorators or func.asynchronous:
        return why
    x = params[0].name.value
    body = list(func.body.body)  # type: ignore[union-attr]
    if body and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1 and isinstance(body[0].body[0], cst.Expr) and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
        body = body[1:]  # the docstring
    if not body:
        return why
    last = body[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 and isinstance(last.body[0], cst.Return) and last.body[0].value is not None):
        return why

    def rearranged(value: cst.BaseExpression) -> Optional[cst.Name]:
        """x in `x.view(...).permute(...)...` (rearranging calls only on x), else None."""
        while (
            isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _REARRANGE
            and (value.func.attr.value != "view" or keeps_dtype(value))
        ):
            value = value.func.value
        return value if is_name(value, x) else None  # type: ignore[return-value]

    def geometry(node: cst.Name) -> bool:  # x.shape, x.ndim, x.dim(), x.size(...)
        parent = here.parent(node)
        if not isinstance(parent, cst.Attribute) or parent.value is not node:
            return False
        if parent.attr.value in _GEOMETRY:
            return True
        return parent.attr.value in ("dim", "size") and isinstance(here.parent(parent), cst.Call)

    for stmt in body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], (cst.Assign, cst.AnnAssign, cst.Return)):
            return why
        small = stmt.body[0]
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target] if isinstance(small, cst.AnnAssign) else []
        if small.value is None or any(not isinstance(t, (cst.Name, cst.Tuple, cst.List)) for t in targets):
            return why  # a store into an item or attribute (it may be a view of x)
        bound = {n.value for t in targets for n in walk(t) if isinstance(n, cst.Name)}
        allowed: Set[int] = set()
        if x in bound or isinstance(small, cst.Return):  # x again, or returned: x rearranged
            root = rearranged(small.value)
            if root is None or (x in bound and (len(targets) != 1 or not is_name(targets[0], x))):
                return why
            allowed.add(id(root))
        for node in loaded_names(here, small.value):
            if node.value == x and id(node) not in allowed and not geometry(node):
                return why
    return None


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
    """The decoder puts the kept units on the full grid: `x_dec[mask] = x.flatten()`.
    (HR004's `index_copy_` of a file rewritten in an earlier run is not read: the count
    then stays back, and the loss's selections say why.)"""
    found = []

    class _Fill(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            assign = single_assign(node)
            if assign is not None and isinstance(assign[0], cst.Subscript) and method_call(assign[1], "flatten"):
                found.append(node)

    ctx.visit(_Fill(), decoder.body)
    return bool(found)


def _fills_the_latent(ctx: PlanContext, cls: cst.ClassDef, decoder: cst.FunctionDef) -> Optional[str]:
    """None when the units ``decoder`` fills into the grid are its first argument's, row
    for row: the fill's source is the argument itself or made from it only by
    ``x = self.<name>(x)`` with ``self.<name> = nn.Linear(...)`` set once, in the
    class's ``__init__`` (a Linear keeps every dimension but the last).  Then the
    latent's ``shape[:-1]`` counts the tokens the fill keeps, and the rest of the
    prediction grid is masked.  A fork slicing off a unit it added, or expanding one
    vector per unit back to the unit's tokens, fills another count: why not."""
    params = [p.name.value for p in decoder.params.params]
    flow = ctx.flow(decoder)
    if flow.opaque:
        return flow.opaque
    fills = [
        s for s in flow.stmts
        if s.line.body and (assign := single_assign(s.line)) is not None and isinstance(assign[0], cst.Subscript)
        and (m := method_call(assign[1], "flatten")) is not None and is_name(m[0])
    ]
    why = (
        f"the units {decoder.name.value} fills are not its latent argument's (made from it only by a Linear):"
        " how many tokens it masks is not read from the latent's shape"
    )
    if len(params) < 2 or len(fills) != 1:
        return why
    fill = fills[0]
    source = method_call(single_assign(fill.line)[1], "flatten")[0].value  # type: ignore[index, union-attr]
    if source != params[1] or flow.compound_assigned.get(source):
        return why
    linears = _linear_attributes(ctx, cls)
    for stmt in flow.assigning(source):
        assign = single_assign(stmt.line) if stmt.line.body else None
        if stmt.index > fill.index:
            continue
        call = assign[1] if assign is not None and is_name(assign[0], source) else None
        if not (
            isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and is_name(call.func.value, "self")
            and call.func.attr.value in linears and len(call.args) == 1 and is_name(call.args[0].value, source)
            and call.args[0].keyword is None and not call.args[0].star
        ):
            return why
    return None


def _unrelated_classes(ctx: PlanContext, cls: cst.ClassDef) -> Set[int]:
    """ids of the module's top-level classes that no inheritance in the module connects
    to ``cls`` (not a base, a subclass, a base of a subclass...: their methods never run
    on an instance of it, unless a class outside the module mixes them in, which the
    files do not show); a class with a base that is not a plain name of the module is
    taken as connected."""
    classes = {s.name.value: s for s in ctx.module.body if isinstance(s, cst.ClassDef)}
    if sum(1 for s in ctx.module.body if isinstance(s, cst.ClassDef)) != len(classes):
        return set()  # a name bound twice: which class a base names is not read here
    edges: Dict[str, Set[str]] = {name: set() for name in classes}
    connected = {cls.name.value}
    for name, node in classes.items():
        for base in node.bases:
            if isinstance(base.value, cst.Name) and base.value.value in classes:
                edges[name].add(base.value.value)
                edges[base.value.value].add(name)
            elif not (isinstance(base.value, cst.Name) or isinstance(base.value, cst.Attribute)) or base.keyword is not None:
                connected.add(name)  # `class C(*bases)`, `metaclass=...`: not followed
        if node.keywords:
            connected.add(name)
    todo = list(connected)
    while todo:
        for other in edges.get(todo.pop(), ()):
            if other not in connected:
                connected.add(other)
                todo.append(other)
    return {id(node) for name, node in classes.items() if name not in connected}


# calls that may set a submodule, or run code around one, unseen by `self.<name> = ...`
_MODULE_CHANGERS = {"add_module", "register_module", "setattr", "__setattr__", *FORWARD_HOOKS}

# attributes whose store on a module changes what calling it runs
_CALL_ATTRIBUTES = ("forward", "__call__", "_call_impl")


def _linear_attributes(ctx: PlanContext, cls: cst.ClassDef) -> Set[str]:
    """``self.<name>`` the class sets once, in ``__init__``, to ``nn.Linear(...)``, and
    nowhere else in the module; none where the module may set submodules otherwise
    (`add_module`, `setattr`, `_modules[...]`) or hooks a module's forward."""
    for node in walk(ctx.module):
        if isinstance(node, cst.Call) and (
            isinstance(node.func, cst.Attribute) and node.func.attr.value in _MODULE_CHANGERS
            or isinstance(node.func, cst.Name) and node.func.value in _MODULE_CHANGERS
        ):
            return set()
        if isinstance(node, cst.Attribute) and node.attr.value == "_modules":
            return set()
        # `self.decoder_embed.forward = f`, `nn.Linear.forward = f`, `vars(m)["forward"] = f`
        if _writes_a_namespace(node) or isinstance(node, (cst.AssignTarget, cst.AugAssign)) and any(
            isinstance(t, cst.Attribute) and t.attr.value in _CALL_ATTRIBUTES for t in flatten_targets(node.target)
        ):
            return set()
    made: Dict[str, List[bool]] = {}
    unrelated = _unrelated_classes(ctx, cls)

    class _Stores(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> Optional[bool]:
            return id(node) not in unrelated  # its `self` is never an instance of cls
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            self.store(node.target, ctx.parent(node))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self.store(node.target, node)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self.store(node.target, None)

        def store(self, target: cst.CSTNode, assign: Optional[cst.CSTNode]) -> None:
            for t in (target.elements if isinstance(target, (cst.Tuple, cst.List)) else [target]):  # type: ignore[attr-defined]
                t = getattr(t, "value", t) if isinstance(t, cst.Element) else t
                if isinstance(t, cst.Attribute) and is_name(t.value, "self"):
                    func = next((a for a in ctx.ancestors(t) if isinstance(a, cst.FunctionDef)), None)
                    value = getattr(assign, "value", None)
                    linear = (
                        isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(value, cst.Call)
                        and func is not None and func.name.value == "__init__" and ctx.parent(ctx.parent(func)) is cls
                        and any(q in ("torch.nn.Linear", "torch.nn.modules.linear.Linear") for q in ctx.qualified_names(value.func))
                    )
                    made.setdefault(t.attr.value, []).append(linear)

    ctx.visit(_Stores())
    return {name for name, kinds in made.items() if kinds == [True]}
