"""HR002: max-pooling over an unrolled stride, `.max(dim=k).values` -> `.amax(dim=k)`.

Matches a max-reduction whose input is a `.view(...)`/`.reshape(...)` (the Unroll
pooling idiom of `do_pool` and of the q-pool), spelled `.max(dim=k).values`,
`.max(k).values` or `.max(dim=k)[0]`.  The receiver keeps its formatting: only
the reduction call is replaced.
"""

from __future__ import annotations

import libcst as cst

from hiera_rewrite.index import walk
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
        ctx.index.visit(finder)
        for node in finder.found:
            try:
                replacement = _amax(node)
            except _Refuse as reason:
                ctx.refuse(node, str(reason))
                continue
            ctx.add_site(node, {node: replacement})


class _Refuse(Exception):
    pass


def _amax(node: "cst.Attribute | cst.Subscript") -> cst.Call:
    """``X.max(k).values`` / ``X.max(k)[0]`` -> ``X.amax(k)``, keeping layout and comments.

    Only the ``.max`` name changes and the ``.values``/``[0]`` goes; a comment that
    sat before the dropped ``.values`` moves to the line of the closing parenthesis.
    """
    max_call = node.value
    assert isinstance(max_call, cst.Call) and isinstance(max_call.func, cst.Attribute)
    lpar = [*node.lpar, *max_call.lpar]
    rpar = [*max_call.rpar, *node.rpar]
    if isinstance(node, cst.Subscript):
        if _has_comment(node.lbracket) or _has_comment(node.rbracket) or _has_comment(node.whitespace_after_value):
            raise _Refuse("a comment inside the [0] would be lost")
    else:
        dropped = node.dot.whitespace_before
        if _has_comment(node.dot.whitespace_after):
            raise _Refuse("a comment inside .values would be lost")
        if _has_comment(dropped):
            assert isinstance(dropped, cst.ParenthesizedWhitespace)
            if not node.rpar:
                raise _Refuse("a comment before .values would be lost (no closing parenthesis to move it to)")
            closing = node.rpar[0].whitespace_before
            if isinstance(closing, cst.ParenthesizedWhitespace):
                carried = []
                if closing.first_line.comment is not None:
                    carried.append(
                        cst.EmptyLine(
                            indent=dropped.indent,
                            whitespace=dropped.last_line,
                            comment=closing.first_line.comment,
                            newline=closing.first_line.newline,
                        )
                    )
                moved = closing.with_changes(
                    first_line=dropped.first_line,
                    empty_lines=[*dropped.empty_lines, *carried, *closing.empty_lines],
                )
            else:
                moved = dropped
            rpar[len(max_call.rpar)] = node.rpar[0].with_changes(whitespace_before=moved)
    return max_call.with_changes(
        func=max_call.func.with_changes(attr=cst.Name("amax")),
        lpar=lpar,
        rpar=rpar,
    )


def _has_comment(node: cst.CSTNode) -> bool:
    found = []

    class _Comments(cst.CSTVisitor):
        def visit_Comment(self, comment: cst.Comment) -> None:
            found.append(comment)

    walk(_Comments(), node)
    return bool(found)


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
