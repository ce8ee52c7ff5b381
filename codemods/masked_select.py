"""HR005: loss and label selection `t[mask]` -> static-shape gather, same rows, same order.

In a method whose tensor argument ``mask`` (a ``(B, N)`` bool mask, True = selected)
selects rows of a ``(B, N, F)`` tensor:

    label = label[mask]                      # (B * n_selected, F)

it emits (the method gains ``num_masked=None``, counted from the mask if not given):

    if num_masked is None:
        # a mask from the caller: count its selected tokens (one host sync)
        num_masked = int(mask[0].sum())
    ...
    label = torch.take_along_dim(label, <ascending True indices>[..., None], dim=1).flatten(0, 1)

Calls inside the method to sibling methods that gain ``num_masked`` pass it on, and an
MAE ``forward`` that computes ``self.forward_loss(x, pred, ~pred_mask)`` right after
``pred, pred_mask = self.forward_decoder(latent, mask)`` passes the static count
``pred.shape[1] - latent.shape[1] * math.prod(latent.shape[2:-1])``.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from hiera_rewrite.rewrite import PlanContext, Replacement, Rewrite, register

from ._flow import FunctionFlow, code, is_name, method_call, single_assign, target_code
from ._mask import ascending_true, free_names, imports_module, imports_typing_optional, with_keyword_param

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
    token order.  The rewrite gathers exactly those rows with
    `torch.take_along_dim` along the token axis, using a stable argsort of `~mask`
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
        ctx.module.visit(finder)
        gaining: Dict[cst.FunctionDef, List[cst.SimpleStatementLine]] = {}
        for func, lines in finder.by_function.items():
            masks = {code(line.body[0].value.slice[0].slice.value) for line in lines}  # type: ignore[attr-defined]
            reason = _unsupported(func, masks)
            if reason:
                for line in lines:
                    ctx.refuse(line, reason)
                continue
            gaining[func] = lines
        names = {f.name.value for f in gaining}
        for func, lines in gaining.items():
            edits: Dict[cst.CSTNode, Replacement] = {}
            for line in lines:
                target, value = single_assign(line)  # type: ignore[misc]
                source = code(value.value)  # type: ignore[attr-defined]
                mask = code(value.slice[0].slice.value)  # type: ignore[attr-defined]
                index = ctx.statement(f"{INDEX} = {ascending_true(mask, COUNT)}\n", like=line)
                select = ctx.statement(
                    f"{target_code(line)} torch.take_along_dim({source}, {INDEX}[..., None], dim=1).flatten(0, 1)\n",
                    like=line,
                    replaces=False,
                )
                edits[line] = cst.FlattenSentinel(
                    [index.with_changes(trailing_whitespace=cst.TrailingWhitespace()),
                     select.with_changes(trailing_whitespace=line.trailing_whitespace)]
                )
            mask = code(lines[0].body[0].value.slice[0].slice.value)  # type: ignore[attr-defined]
            edits.update(_pass_count_on(ctx, func, names))
            edits.update(_count_prelude(ctx, func, mask))
            ctx.add_site(lines[0], edits)
        for site in _mae_forward_calls(ctx, names):
            ctx.add_site(*site)


class _Selections(cst.CSTVisitor):
    """`t = s[mask]` where ``mask`` is an argument of the enclosing method."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: List[cst.FunctionDef] = []
        self.by_function: Dict[cst.FunctionDef, List[cst.SimpleStatementLine]] = {}

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
        if is_name(index) and _tensor_param(func, index.value):  # type: ignore[attr-defined]
            self.by_function.setdefault(func, []).append(node)


def _tensor_param(func: cst.FunctionDef, name: str) -> bool:
    for param in func.params.params:
        if param.name.value == name and param.annotation is not None:
            return code(param.annotation.annotation) in ("torch.Tensor", "Tensor", "torch.BoolTensor")
    return False


def _unsupported(func: cst.FunctionDef, masks: Set[str]) -> Optional[str]:
    flow = FunctionFlow(func)
    if len(masks) != 1:
        return f"{func.name.value} selects with several masks ({', '.join(sorted(masks))})"
    if free_names(flow, COUNT, INDEX):
        return f"{func.name.value} already uses the name {COUNT} or {INDEX}"
    if not func.params.params or func.params.params[0].name.value != "self":
        return f"{func.name.value} is not a method: its callers cannot pass the count"
    (mask,) = masks
    if flow.assigning(mask):
        return f"the mask argument {mask} is reassigned in {func.name.value}"
    return None


def _count_prelude(ctx: PlanContext, func: cst.FunctionDef, mask: str) -> Dict[cst.CSTNode, Replacement]:
    body = list(func.body.body)  # type: ignore[union-attr]
    first = 1 if body and _is_docstring(body[0]) and len(body) > 1 else 0
    anchor = body[first]
    like = anchor if isinstance(anchor, cst.SimpleStatementLine) else None
    indent_source = like or _first_simple(anchor)
    prelude = ctx.statement(
        f"if {COUNT} is None:\n"
        f"    # a mask from the caller: count its selected tokens (one host sync)\n"
        f"    {COUNT} = int({mask}[0].sum())\n",
        like=indent_source,  # type: ignore[arg-type]
        replaces=False,
    )
    annotation = "Optional[int]" if imports_typing_optional(ctx.module) else None
    return {
        func: with_keyword_param(ctx, func, COUNT, annotation),
        anchor: lambda updated: cst.FlattenSentinel(
            [prelude.with_changes(leading_lines=updated.leading_lines), updated.with_changes(leading_lines=[])]
            if first == 0
            else [prelude, updated]
        ),
    }


def _first_simple(stmt: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
    """A simple statement at the same indentation as compound ``stmt``: not needed, so
    fall back to the statement itself (its column is the indentation)."""
    return stmt  # type: ignore[return-value]


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _pass_count_on(ctx: PlanContext, func: cst.FunctionDef, names: Set[str]) -> Dict[cst.CSTNode, Replacement]:
    """`self.<sibling>(..., mask)` calls inside ``func`` get `num_masked=num_masked`."""
    edits: Dict[cst.CSTNode, Replacement] = {}

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found = method_call(node, *names)
            if found and is_name(found[0], "self") and not any(
                a.keyword is not None and a.keyword.value == COUNT for a in node.args
            ):
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
                edits[node] = node.with_changes(args=args)

    func.body.visit(_Calls())
    return edits


def _mae_forward_calls(ctx: PlanContext, names: Set[str]):
    """In the MAE forward: `self.forward_loss(x, pred, ~pred_mask)` gets the static count."""
    if not imports_module(ctx.module, "math"):
        return []
    sites = []
    for cls in [n for n in ctx.module.body if isinstance(n, cst.ClassDef)]:
        methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}  # type: ignore[union-attr]
        if "forward_decoder" not in methods:
            continue
        for func in methods.values():
            flow = FunctionFlow(func)
            for stmt in flow.stmts:
                decoded = single_assign(stmt.line) if stmt.line.body else None
                if decoded is None or not isinstance(decoded[0], cst.Tuple) or len(decoded[0].elements) != 2:
                    continue
                call = method_call(decoded[1], "forward_decoder")
                if call is None or not is_name(call[0], "self") or not call[1].args:
                    continue
                pred, pred_mask = (e.value for e in decoded[0].elements)
                latent = call[1].args[0].value
                if not (is_name(pred) and is_name(pred_mask) and is_name(latent)):
                    continue
                later = [s for s in flow.stmts if s.index > stmt.index]
                reassigned = {pred.value, pred_mask.value, latent.value}  # type: ignore[attr-defined]
                for after in later:
                    for loss_call in _loss_calls(after.line, names):
                        args = loss_call.args
                        if len(args) != 3 or any(a.keyword or a.star for a in args):
                            continue
                        mask_arg = args[2].value
                        if not (
                            is_name(args[1].value, pred.value)  # type: ignore[attr-defined]
                            and isinstance(mask_arg, cst.UnaryOperation)
                            and isinstance(mask_arg.operator, cst.BitInvert)
                            and is_name(mask_arg.expression, pred_mask.value)  # type: ignore[attr-defined]
                        ):
                            continue
                        count = (
                            f"{pred.value}.shape[1] - {latent.value}.shape[1]"  # type: ignore[attr-defined]
                            f" * math.prod({latent.value}.shape[2:-1])"  # type: ignore[attr-defined]
                        )
                        new_args = list(args)
                        new_args[-1] = new_args[-1].with_changes(
                            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                        )
                        new_args.append(
                            cst.Arg(
                                keyword=cst.Name(COUNT),
                                value=cst.Name(COUNT),
                                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                            )
                        )
                        if free_names(flow, COUNT):
                            ctx.refuse(loss_call, f"{func.name.value} already uses the name {COUNT}")
                            continue
                        new_call = loss_call.with_changes(args=new_args)
                        count_stmt = ctx.statement(
                            "# masked prediction tokens: all of them minus the kept units' (static shapes)\n"
                            f"{COUNT} = {count}\n",
                            like=after.line,
                            replaces=False,
                        )
                        new_line = _replace_in_line(ctx, after.line, loss_call, new_call)
                        sites.append(
                            (loss_call,
                             {after.line: cst.FlattenSentinel(
                                 [count_stmt.with_changes(
                                     leading_lines=[*after.line.leading_lines, *count_stmt.leading_lines]),
                                  new_line.with_changes(leading_lines=[])])},
                             "MAE forward: pass the masked-token count from static shapes")
                        )
                    if after.assigned & reassigned:
                        break
    return sites


def _loss_calls(line: cst.SimpleStatementLine, names: Set[str]) -> List[cst.Call]:
    found: List[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            hit = method_call(node, "forward_loss")
            if hit and "forward_loss" in names and is_name(hit[0], "self"):
                if not any(a.keyword is not None and a.keyword.value == COUNT for a in node.args):
                    found.append(node)

    line.visit(_Calls())
    return found


def _replace_in_line(ctx: PlanContext, line: cst.SimpleStatementLine, old: cst.Call, new: cst.Call) -> cst.BaseStatement:
    class _Swap(cst.CSTTransformer):
        def leave_Call(self, original_node, updated_node):
            return new if original_node is old else updated_node

    swapped = line.visit(_Swap())
    body_code = "; ".join(cst.Module(body=[]).code_for_node(s) for s in swapped.body)  # type: ignore[attr-defined]
    return ctx.statement(_one_line(body_code) + "\n", like=line)


def _one_line(source: str) -> str:
    from ._flow import code as one_line_code

    return "; ".join(one_line_code(s) for s in cst.parse_module(source).body[0].body)  # type: ignore[attr-defined]
