"""HR002: max-pooling over an unrolled stride, `.max(dim=k).values` -> `.amax(dim=k)`.

Matches a max-reduction whose input is a `.view(...)`/`.reshape(...)` (the Unroll
pooling idiom of `do_pool` and of the q-pool), spelled `.max(dim=k).values`,
`.max(k).values` or `.max(dim=k)[0]`.  The receiver keeps its formatting: only
the reduction call is replaced.
"""

from __future__ import annotations

import libcst as cst

from hiera_rewrite.rewrite import PlanContext, Rewrite, register

from ._flow import method_call, reduction_values


@register
class PoolAmax(Rewrite):
    code = "HR002"
    name = "pool-amax"
    message = "max-pool: .max(dim=k).values -> .amax(dim=k) (no unused int64 index tensor)"
    explanation = """
    Hiera max-pools by viewing the stride as its own dimension and reducing it:
    `x.view(B, stride, -1, C).max(dim=1).values` (do_pool) and the q-pool in the
    attention.  `Tensor.max(dim)` returns values *and* an int64 index tensor; the
    indices are never used, but they are computed, written to memory and kept
    alive for backward.  `Tensor.amax(dim)` returns the same values and nothing
    else, so the reduction moves less memory and autograd stores less.

    Forward values are identical.  The gradient differs only when two inputs of a
    pooling window are bit-identical maxima: `.max(...).values` sends the whole
    gradient to one of them, `.amax` splits it evenly between them.
    """

    def plan(self, ctx: PlanContext) -> None:
        finder = _Reductions()
        ctx.module.visit(finder)
        for node in finder.found:
            _, pooled, dim = reduction_values(node)  # type: ignore[misc]
            replacement = cst.Call(
                func=cst.Attribute(value=pooled, attr=cst.Name("amax")),
                args=[cst.Arg(keyword=cst.Name("dim"), value=cst.Integer(str(dim)) if dim >= 0 else cst.UnaryOperation(cst.Minus(), cst.Integer(str(-dim))), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))],
                lpar=node.lpar,
                rpar=node.rpar,
            )
            ctx.add_site(node, {node: replacement})


class _Reductions(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: list = []

    def _check(self, node: cst.BaseExpression) -> None:
        reduced = reduction_values(node)
        if reduced is not None and reduced[0] == "max" and method_call(reduced[1], "view", "reshape"):
            self.found.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._check(node)
