"""HR005: loss and label selection `t[mask]` -> static-shape gather, same rows, same order.

In a method whose tensor argument ``mask`` (a ``(B, N)`` bool mask, True = selected)
selects rows of a ``(B, N, F)`` tensor:

    label = label[mask]                      # (B * n_selected, F)

it emits (the method gains ``num_masked=None``, counted from the mask if not given):

    if num_masked is None:
        # a mask from the caller: count its selected tokens (one host sync)
        num_masked = int(mask[0].sum())
    ...
    label = label.gather(1, <ascending True indices, expanded to (B, n, F)>).flatten(0, 1)

Calls inside the method to methods of the same class that gain ``num_masked`` pass it
on when they pass the same mask, and an MAE ``forward`` that computes
``self.forward_loss(x, pred, ~pred_mask)`` after ``pred, pred_mask =
self.forward_decoder(latent, mask)`` (a decoder of the same class that fills the kept
units) passes the static count
``pred_mask.shape[1] - latent.shape[1] * math.prod(latent.shape[2:-1])``.
A method under `# hiera-rewrite: skip` neither gains the count nor is passed it.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Set, Tuple

import dataclasses

import libcst as cst

from hiera_rewrite.index import walk
from hiera_rewrite.rewrite import PlanContext, Replacement, Rewrite, register

from ._flow import FunctionFlow, code, is_name, method_call, single_assign, target_code
from ._mask import (
    is_docstring,
    ascending_true,
    free_names,
    imports_module,
    imports_typing_optional,
    skip_marked_owner,
    with_keyword_param,
)

COUNT = "num_masked"
INDEX = "masked_tokens"


@register
class MaskedSelect(Rewrite):
    code = "HR005"
    name = "masked-select"
    message = "loss/label selection: t[mask] -> static-shape gather of the masked tokens (same rows, same order)"
    explanation = """
    The MAE loss selects the masked tokens of the prediction and of the pixel
    labels with boolean indexing, `pred[mask]` and `label[mask]`: a data-dependent
    `nonzero` each (host sync, graph break, no CUDA graph) and a slow backward.

    With a (B, N) bool mask that selects the same number of tokens in every row,
    `t[mask]` is the rows of t at the True positions, row by row, in ascending
    token order.  The rewrite gathers exactly those rows with `gather` along the
    token axis (the index expanded, so autograd saves only the small (B, n) index),
    using a stable argsort of `~mask`
    sliced to a Python-int count, and flattens (B, n, F) to (B * n, F): the same
    tensor, same shape, same row order, so `forward_loss` still returns
    `(loss, pred[mask], label[mask])` as before.

    The count: the methods gain an optional `num_masked` argument and pass it on to
    each other.  The MAE's forward computes it from static shapes (prediction
    tokens minus kept units times tokens per unit), so the training step has no
    sync.  Called without it (a caller's own mask), the method counts the mask
    once (`int(mask[0].sum())`, one host sync).  A mask whose rows select
    different counts, or that is not 2-D bool, is outside what upstream supports;
    non-2-D masks raise instead of selecting.
    """

    def plan(self, ctx: PlanContext) -> None:
        if not imports_module(ctx.module, "torch"):
            return
        finder = _Selections()
        ctx.index.visit(finder)
        for line, name in finder.unannotated:
            ctx.refuse(
                line,
                f"{name} has no tensor annotation: nothing proves it is a (B, N) boolean mask rather than an index",
            )
        # Methods that gain `num_masked`, per class: name -> (function, mask parameter).
        gaining: Dict[cst.ClassDef, Dict[str, _Method]] = {}
        lines_of: Dict[cst.FunctionDef, List[cst.SimpleStatementLine]] = {}
        for func, lines in finder.by_function.items():
            masks = {code(line.body[0].value.slice[0].slice.value) for line in lines}  # type: ignore[attr-defined]
            owner = skip_marked_owner(ctx, func)
            cls = _class_of(ctx, func)
            reason = _unsupported(func, masks, cls)
            if owner is not None:
                reason = f"left alone: `# hiera-rewrite: skip` on {owner}"
            if reason:
                for line in lines:
                    ctx.refuse(line, reason)
                continue
            (mask,) = masks
            gaining.setdefault(cls, {})[func.name.value] = _Method(func, mask)  # type: ignore[arg-type]
            lines_of[func] = lines
        for cls, methods in gaining.items():
            for method in methods.values():
                func, mask = method.func, method.mask
                edits: Dict[cst.CSTNode, Replacement] = {}
                for line in lines_of[func]:
                    target, value = single_assign(line)  # type: ignore[misc]
                    source = code(value.value)  # type: ignore[attr-defined]
                    index = ctx.statement(f"{INDEX} = {ascending_true(mask, COUNT)}\n", like=line)
                    select = ctx.statement(
                        f"{target_code(line)} {source}.gather(1, {INDEX}.reshape({INDEX}.shape + (1,) * "
                        f"({source}.dim() - 2)).expand(-1, -1, *{source}.shape[2:])).flatten(0, 1)\n",
                        like=line,
                        replaces=False,
                    )
                    edits[line] = cst.FlattenSentinel(
                        [index.with_changes(trailing_whitespace=cst.TrailingWhitespace()),
                         select.with_changes(trailing_whitespace=line.trailing_whitespace)]
                    )
                edits.update(_pass_count_on(func, methods, lambda arg: is_name(arg, mask)))
                _count_prelude(ctx, func, mask, edits)
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


def _unsupported(func: cst.FunctionDef, masks: Set[str], cls: Optional[cst.ClassDef]) -> Optional[str]:
    flow = FunctionFlow.of(func)
    if len(masks) != 1:
        return f"{func.name.value} selects with several masks ({', '.join(sorted(masks))})"
    if free_names(flow, COUNT, INDEX):
        return f"{func.name.value} already uses the name {COUNT} or {INDEX}"
    if cls is None or not func.params.params or func.params.params[0].name.value != "self" or func.decorators:
        return f"{func.name.value} is not a plain method of a class: its callers cannot pass the count"
    (mask,) = masks
    if flow.assigning(mask) or flow.compound_assigned.get(mask):
        return f"the mask argument {mask} is reassigned in {func.name.value}"
    return None


def _count_prelude(ctx: PlanContext, func: cst.FunctionDef, mask: str, edits: Dict[cst.CSTNode, Replacement]) -> None:
    """Add `num_masked=None` to the signature and the count at the top of the body
    (after a docstring), composed with an edit of that first statement if any."""
    body = list(func.body.body)  # type: ignore[union-attr]
    first = 1 if body and is_docstring(body[0]) and len(body) > 1 else 0
    anchor = body[first]
    prelude = ctx.statement(
        f"if {COUNT} is None:\n"
        f"    # a mask from the caller: count its selected tokens (one host sync)\n"
        f"    {COUNT} = int({mask}[0].sum())\n",
        like=anchor,  # type: ignore[arg-type]
        replaces=False,
    )
    annotation = "Optional[int]" if imports_typing_optional(ctx.module) else None
    edits[func] = with_keyword_param(ctx, func, COUNT, annotation)
    replaced = edits.get(anchor)

    def insert(updated: cst.CSTNode) -> cst.FlattenSentinel:
        nodes = list(replaced.nodes) if isinstance(replaced, cst.FlattenSentinel) else [updated]
        if first:
            return cst.FlattenSentinel([prelude, *nodes])
        return cst.FlattenSentinel(
            [prelude.with_changes(leading_lines=nodes[0].leading_lines), nodes[0].with_changes(leading_lines=[]), *nodes[1:]]
        )

    edits[anchor] = insert



def _pass_count_on(
    func: cst.FunctionDef, methods: Dict[str, "_Method"], same_mask: Callable[[cst.BaseExpression], bool]
) -> Dict[cst.CSTNode, Replacement]:
    """`self.<method>(...)` calls inside ``func`` to methods of the same class that gain
    ``num_masked`` get `num_masked=num_masked`, when the mask they pass is the one
    counted (``same_mask``); other calls are left to count their own mask."""
    edits: Dict[cst.CSTNode, Replacement] = {}

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found = method_call(node, *methods)
            if not found or not is_name(found[0], "self") or not node.args:
                return
            if any(a.keyword is not None and a.keyword.value == COUNT for a in node.args):
                return
            argument = methods[found[1].func.attr.value].mask_argument(node)  # type: ignore[attr-defined]
            if argument is None or not same_mask(argument):
                return
            edits[node] = _with_count(node)

    walk(_Calls(), func.body)
    return edits


def _with_count(node: cst.Call) -> cst.Call:
    args = list(node.args)
    last = args[-1]
    if last.comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(
        cst.Arg(
            keyword=cst.Name(COUNT),
            value=cst.Name(COUNT),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
            comma=last.comma if last.comma is not cst.MaybeSentinel.DEFAULT else cst.MaybeSentinel.DEFAULT,
        )
    )
    return node.with_changes(args=args)


def _mae_forward_calls(ctx: PlanContext, cls: cst.ClassDef, methods: Dict[str, "_Method"]):
    """In the MAE forward: `self.forward_loss(x, pred, ~pred_mask)` (any method of the
    class that gains the count, called with `~pred_mask` as its mask) gets the static
    count, right after `pred, pred_mask = self.forward_decoder(latent, mask)`."""
    if not imports_module(ctx.module, "math"):
        return []
    sites = []
    defined = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}  # type: ignore[union-attr]
    decoder = defined.get("forward_decoder")
    if decoder is None or not _fills_units(decoder):
        # pred_mask's count is known only for Hiera's decoder: the kept units, upsampled.
        return []
    for func in defined.values():
        if skip_marked_owner(ctx, func) is not None:
            continue
        flow = FunctionFlow.of(func)
        for stmt in flow.stmts:
            decoded = single_assign(stmt.line) if stmt.line.body else None
            if decoded is None or not isinstance(decoded[0], cst.Tuple) or len(decoded[0].elements) != 2:
                continue
            call = method_call(decoded[1], "forward_decoder")
            if call is None or not is_name(call[0], "self") or not call[1].args or call[1].args[0].keyword:
                continue
            pred, pred_mask = (e.value for e in decoded[0].elements)
            latent = call[1].args[0].value
            if not (is_name(pred) and is_name(pred_mask) and is_name(latent)):
                continue
            names = (pred_mask.value, latent.value)  # type: ignore[attr-defined]
            if any(len(flow.assigning(n)) != 1 or flow.compound_assigned.get(n) or n in flow.params for n in names):
                continue  # the count is right only for the decoder's own outputs
            if latent.value == pred_mask.value:  # type: ignore[attr-defined]
                continue
            toggled = lambda arg: (  # noqa: E731
                isinstance(arg, cst.UnaryOperation)
                and isinstance(arg.operator, cst.BitInvert)
                and is_name(arg.expression, pred_mask.value)  # type: ignore[attr-defined]
            )
            for after in flow.stmts[stmt.index + 1:]:
                if not after.line.body:
                    continue
                calls = _pass_count_on(cst.FunctionDef(cst.Name("f"), cst.Parameters(), cst.IndentedBlock([after.line])),
                                       methods, toggled)
                if not calls:
                    continue
                if free_names(flow, COUNT):
                    ctx.refuse(next(iter(calls)), f"{func.name.value} already uses the name {COUNT}")
                    continue
                count = (
                    f"{pred_mask.value}.shape[1] - {latent.value}.shape[1]"  # type: ignore[attr-defined]
                    f" * math.prod({latent.value}.shape[2:-1])"  # type: ignore[attr-defined]
                )
                count_stmt = ctx.statement(
                    "# masked prediction tokens: all of them minus the kept units' (static shapes)\n"
                    f"{COUNT} = {count}\n",
                    like=after.line,
                    replaces=False,
                )
                new_line = _replace_in_line(ctx, after.line, calls)
                sites.append(
                    (next(iter(calls)),
                     {after.line: cst.FlattenSentinel(
                         [count_stmt.with_changes(
                             leading_lines=[*after.line.leading_lines, *count_stmt.leading_lines]),
                          new_line.with_changes(leading_lines=[])])},
                     "MAE forward: pass the masked-token count from static shapes")
                )
    return sites


def _fills_units(decoder: cst.FunctionDef) -> bool:
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

    walk(_Fill(), decoder.body)
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
    from ._flow import code as one_line_code

    return "; ".join(one_line_code(s) for s in cst.parse_module(source).body[0].body)  # type: ignore[attr-defined]
