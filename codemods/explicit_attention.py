"""HR006: explicit matmul-softmax mask-unit attention -> 4-D SDPA where no one sees the weights.

What it matches (by data flow, not by names), as statements of one function body:

    qkv = <E>.reshape(B, T, nw, 3, H, D).permute(3, 0, 4, 2, 1, 5)   # one or split statements
    q, k, v = qkv.unbind(0)                   # or qkv[0], qkv[1], qkv[2], or one per line
    if <cond>:                                # optional q-pool, one or two statements,
        q = q.view(B, H, nw, S, Tq, D)        # with or without the `if`
        q = q.max(dim=3).values               # (or .amax(dim=3), or .max(dim=3)[0])
    attn = (q * scale) @ k.transpose(-1, -2)  # or (q @ k.transpose(-2, -1)) * scale, ...
    attn = attn.softmax(dim=-1)               # or F.softmax(attn, dim=-1)
    out = attn @ v
    out = out.transpose(1, 3).reshape(B, N, C)

(the attention lines may be merged or split; every one of them must feed the output).

The attention probabilities ``attn`` (B, H, nw, Tq, T) are the one thing SDPA cannot
give.  Two cases are provably equivalent:

- ``attn`` is never read after the attention: the whole path becomes a 4-D one,
  the windows folded into the batch (q, k, v are (B*num_windows, heads, T, head_dim);
  HR001 folds them into the heads instead), the q-pool by the same reduction, SDPA with the same
  scale, the output put back in the same token order.
- ``attn`` is read after the attention only under a flag ``F`` (a parameter of the
  function that is never reassigned), in ``X if F else Y`` or in an ``if F:`` body,
  as transformers' ``(out, attn) if output_attentions else (out, None)``: the path
  is wrapped in ``if F:`` (the original 5-D statements, unchanged, so the returned
  probabilities keep their shape and order) ``else:`` (the 4-D SDPA path, and
  ``attn = None``, which nothing reads).

A scale that reads an attribute (``self.scale``) is checked at run time,
``isinstance(self.scale, (int, float))``: SDPA's ``scale=`` takes a number, and a tensor
(a per-head temperature a subclass or a caller sets) broadcasts against the 5-D dims.
Where it fails, the original 5-D statements run: they are kept under
``if not isinstance(...):`` (or ``if F or not isinstance(...):`` with the flag).

Anything else is left alone with the reason.  An explicit attention in one branch
of an ``if`` whose other branch calls SDPA (a fused/unfused pair, HR001's business,
or this rewrite's own output) is left alone silently.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import FunctionFlow, enclosing_function, enclosing_line, names_in, statement_names
from hiera_rewrite.rewrite import NotThisIdiom, PlanContext, Refuse, Replacement, Rewrite, register

from ._attention import (
    CLONE_WHY,
    FIVE_D_PERMUTE,
    QkvSources,
    all_loads,
    component,
    pool_view_args,
    qkv_sizes,
    restore_chain,
    restore_clone_reason,
    scalar,
    scalar_problem,
    scale_check,
    sdpa_calls,
    softmax_operand,
    top_level_bindings,
    transposed_last,
)
from ._inplace import InplaceFlow
from ._match import (
    code,
    int_args,
    int_value,
    is_name,
    method_call,
    reduction_values,
    rewrap_code,
    same_code,
    single_assign,
    target_code,
)


@register
class ExplicitAttention(Rewrite):
    code = "HR006"
    name = "explicit-attention-sdpa"
    message = (
        "explicit mask-unit attention: 5-D matmul-softmax -> 4-D SDPA"
        " (the explicit path is kept where the attention probabilities are returned)"
    )
    explanation = """
    Some Hiera ports (transformers' HieraMaskUnitAttention) compute the mask-unit
    attention by hand on 5-D tensors (B, heads, num_windows, T, head_dim):
    `attn = (q * scale) @ k.transpose(-1, -2)`, `attn.softmax(dim=-1)`, `attn @ v`.
    That materialises the whole attention matrix and its softmax, and keeps both
    alive for backward.  F.scaled_dot_product_attention on 4-D q/k/v runs a fused
    kernel (flash / memory-efficient / cuDNN) that never stores the matrix.

    The rewrite folds the windows into the batch: qkv is permuted (3, 0, 2, 4, 1, 5)
    and flattened to (3, B*num_windows, heads, T, head_dim), so q, k and v are
    (B*num_windows, heads, T, head_dim) (HR001 flattens the same permutation the
    other way, to (B, num_windows*heads, T, head_dim)), the q-pool becomes
    `q.unflatten(2, (q_stride, Tq)).max(dim=2).values` (the user's own reduction:
    `.amax(dim=2)` where they wrote `.amax`, so exactly tied maxima get the same gradient),
    SDPA gets the same `scale=`, and the output (B*num_windows, heads, Tq, head_dim)
    is put back as (B, Tq*num_windows, C) with token n = tq*num_windows + w, the
    order the 5-D code produced.  Where num_windows or Tq is 1 (global attention)
    that is a view of SDPA's output, which the fused and CPU flash kernels save for
    backward: where an in-place op, or code that may do one, can reach the restored
    output, or it is returned, the restore gets `.clone()` (the copy the original's
    reshape made), so backward does not raise "modified by an inplace operation".

    SDPA does not return the attention probabilities.  When the code returns them
    only under a flag (`(out, attn) if output_attentions else (out, None)`), the
    rewrite keeps the original 5-D statements, byte for byte, under `if <flag>:` so
    the probabilities keep their documented (B, heads, num_windows, Tq, T) shape,
    and uses SDPA in the `else:`.  When nothing reads them, SDPA is used always.
    If they are read in any other way, the attention is left alone.

    A scale that reads an attribute (`self.scale`) may be a tensor where a subclass,
    in this file or another, or a caller sets one (a per-head learnable temperature):
    SDPA's scale= takes a number only, and a tensor broadcasts against the 5-D dims.
    The rewrite checks `isinstance(self.scale, (int, float))` at run time and keeps
    the original 5-D statements for anything else, in the same `if` as the
    probabilities flag (`if output_attentions or not isinstance(...):`).

    Same parameters, same state_dict, same outputs and gradients up to float
    rounding (the scale is applied inside SDPA instead of to q first).

    One limit comes from PyTorch, not from the rewrite: the fused kernels (CPU flash,
    CUDA flash / memory-efficient / cuDNN) have no double backward and no forward-mode
    AD.  A gradient penalty or Hessian-vector product (`create_graph=True`) or
    `torch.func.jvp` through the rewritten attention raises "derivative for
    aten::_scaled_dot_product_flash_attention_for_cpu_backward is not implemented"
    (or the CUDA kernel's), where the original's explicit matmul-softmax ran.  Run those steps
    under `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`: the same math as the
    original's explicit attention (a gradient penalty through transformers' Hiera
    then equals the original's in float64).

    Left alone, with a reason: another permutation or reshape, q/k/v or the qkv
    tensor read besides the attention, a scale the class itself does not set to a
    Python number (a tensor, a property, a store outside __init__), softmax over
    another dim or with a dtype, dropout or anything else between the steps, the
    attention inside a loop or a branch (other than the fused/unfused pair), the
    probabilities read without the flag guard.
    """

    def plan(self, ctx: PlanContext) -> None:
        finder = _ScoreLines()
        ctx.visit(finder)
        seen: Set[int] = set()
        for node in finder.matmuls:
            line = enclosing_line(ctx, node)
            if line is None or id(line) in seen:
                continue
            seen.add(id(line))
            found = ctx.attempt(line, lambda: _Match(ctx, line).edits())
            if found is None:
                continue
            edits, (flag, check, clone) = found
            if flag is not None:
                message = (
                    f"explicit mask-unit attention -> 4-D SDPA under `else` of `if {flag}:`"
                    " (the explicit 5-D path is kept where the probabilities are returned"
                    + (", and where the scale is not a Python number)" if check else ")")
                )
            elif check is not None:
                message = (
                    "explicit mask-unit attention -> 4-D SDPA where the scale is a Python number"
                    f" (`{check}`, checked at run time; the explicit 5-D path is kept otherwise)"
                )
            else:
                message = "explicit mask-unit attention: 5-D matmul-softmax -> 4-D SDPA (probabilities never read)"
            if clone is not None:
                message += f"; the restored output gets .clone(): {clone} ({CLONE_WHY})"
            ctx.add_site(line, edits, message)


class _ScoreLines(cst.CSTVisitor):
    """`A @ K.transpose(-1, -2)`: the scores of an explicit attention."""

    def __init__(self) -> None:
        super().__init__()
        self.matmuls: List[cst.BinaryOperation] = []

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply) and transposed_last(node.right) is not None:
            self.matmuls.append(node)


@dataclasses.dataclass
class _Binding:
    index: int  # position in the function body
    value: cst.BaseExpression
    env: Dict[str, "_Binding"]


class _Match:
    def __init__(self, ctx: PlanContext, line: cst.SimpleStatementLine) -> None:
        self.ctx = ctx
        self.line = line
        func = enclosing_function(ctx, line)
        if func is None:
            raise Refuse("the explicit attention is not inside a function")
        self.func = func
        self.used: Set[int] = set()

    # -- entry ------------------------------------------------------------------------
    def edits(self) -> Tuple[Dict[cst.CSTNode, Replacement], Tuple[Optional[str], Optional[str]]]:
        ctx, func = self.ctx, self.func
        block = ctx.parent(self.line)
        if not isinstance(block, cst.IndentedBlock) or ctx.parent(block) is not func:
            self.check_pair()
            raise Refuse("the explicit attention is inside control flow this rewrite does not follow")
        body = list(block.body)
        start = body.index(self.line)
        flow = ctx.flow(func)

        # 1. The attention chain, from the scores line to the output restore.
        chain_end, parts = self.chain(body, start)
        q, k, v = parts["q"], parts["k"], parts["v"]
        if len({q, k, v}) != 3:
            raise Refuse("q, k and v are not three distinct names")

        # 2. Where q, k, v come from: an unpack of qkv, maybe a q-pool in between.
        pool_at, pool_parts = self.pool(body, start, q)
        before_pool = pool_at[0] if pool_at else start
        unpack_at, qkv = self.unpack(body, before_pool, q, k, v)
        if pool_at and min(pool_at) < max(unpack_at):
            raise Refuse(f"{q} is pooled before k and v are unpacked")
        permute_at, reshape_args, receiver = self.qkv_definition(body, min(unpack_at), qkv)
        region = list(range(permute_at, chain_end + 1))
        known = {permute_at, *unpack_at, *pool_at, *range(start, chain_end + 1)}
        for i in region:
            if i not in known:
                raise Refuse(f"line {self.lineno(body[i])} sits inside the attention and is not part of it")

        # 3. What the region binds, and who reads it afterwards.
        bound: Set[str] = set()
        for i in region:
            bound |= statement_names(self.ctx, body[i])[0]
        batch = reshape_args[0]
        if int_value(batch) is not None:
            raise Refuse("the qkv reshape's batch size is a literal: the output cannot be unflattened by it")
        if names_in(self.ctx, batch) & bound:
            raise Refuse("the batch size is rebound inside the attention")
        restore_args = parts["restore_args"]
        if not same_code(restore_args[0], batch):
            raise Refuse("the output reshape's batch size is not provably the qkv reshape's batch size")
        for what, expr in [("the output reshape", a) for a in restore_args] + [("the scale", parts["scale"])] + [
            ("the q-pool", e) for e in pool_parts.get("exprs", [])
        ]:
            if expr is not None and names_in(self.ctx, expr) & bound:
                raise Refuse(f"{what} reads {sorted(names_in(self.ctx, expr) & bound)[0]}, which the attention rebinds")
        for got, want in zip(pool_parts.get("checked", []), (reshape_args[0], reshape_args[4], reshape_args[2], reshape_args[5])):
            if not same_code(got, want):
                raise Refuse(f"the q-pool view's {code(got)} is not provably the qkv reshape's {code(want)}")
        out = parts["out"]  # None: `return <restore>`
        weights = parts["weights"]
        if out in (q, k, v, qkv):
            raise Refuse("the attention output is bound to q, k, v or qkv")
        end = self.ctx.span(body[chain_end]).end
        late = {n.value: n for n in self.loads_after(end) if n.value in bound - {out}}
        for name in sorted(late):
            if name != weights:
                raise Refuse(f"{name} is read after the attention at line {self.lineno(late[name])}: its layout changes")
        flag = None
        if weights in late:
            flag = self.flag_guard(weights, end, flow)
        for name in bound:
            for stmt in flow.assigning(name):
                if self.ctx.span(stmt.line).start.line > end.line and stmt.line.body:
                    if name == weights or name in (q, k, v, qkv):
                        raise Refuse(f"{name} is bound again after the attention")
        if any(flow.compound_assigned.get(n) for n in bound):
            raise Refuse("a name of the attention is also bound by a for/with/except header")
        sdpa = self.sdpa_function(flow)
        # SDPA's scale= takes a number, and a tensor scale (a subclass's per-head
        # temperature) broadcasts against the 5-D dims: checked at run time.
        check = scale_check(ctx, func, [parts["scale"]] if parts["scale"] is not None else [])
        # The 4-D restore is a view of SDPA's saved output where num_windows or Tq is 1
        # (global attention): an in-place op on it would make backward raise.
        last = body[chain_end]
        restored = last.body[0].value if isinstance(last.body[0], cst.Return) else single_assign(last)[1]  # type: ignore[attr-defined, index]
        clone = restore_clone_reason(InplaceFlow(ctx), func, last, restored)
        edits = self.emit(
            body, region, permute_at, unpack_at, pool_at, pool_parts, start, chain_end, parts, receiver, sdpa, flag, check,
            clone is not None,
        )
        return edits, (flag, check, clone)

    def check_pair(self) -> None:
        """Silent when the attention is one side of an `if` whose other side calls SDPA."""
        for ancestor in self.ctx.ancestors(self.line):
            if ancestor is self.func:
                return
            if isinstance(ancestor, cst.If) and sdpa_calls(self.ctx, ancestor):
                raise NotThisIdiom()

    # -- the attention chain --------------------------------------------------------------
    def chain(self, body: List[cst.BaseStatement], start: int) -> Tuple[int, Dict]:
        env: Dict[str, _Binding] = {}
        for i in range(start, min(len(body), start + 8)):
            stmt = body[i]
            if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                raise Refuse(f"line {self.lineno(stmt)} inside the explicit attention is not a single simple statement")
            small = stmt.body[0]
            value: Optional[cst.BaseExpression]
            target: Optional[str] = None
            if isinstance(small, cst.Return):
                value = small.value
            else:
                assign = single_assign(stmt)
                if assign is None or not is_name(assign[0]):
                    raise Refuse(f"line {self.lineno(stmt)} inside the explicit attention is not `name = ...`")
                target, value = assign[0].value, assign[1]  # type: ignore[attr-defined]
            if value is None:
                raise Refuse("the attention ends in a bare return")
            self.used = set()
            parts = self.restore(value, env)
            if parts is not None:
                consumed = self.used | {i}
                missing = [j for j in range(start, i + 1) if j not in consumed]
                if missing:
                    raise Refuse(f"line {self.lineno(body[missing[0]])} inside the explicit attention does not feed its output")
                parts["out"] = target
                parts["weights"] = self.weights_name(env, parts["softmax"])
                return i, parts
            if isinstance(small, cst.Return):
                break
            env = {**env, target: _Binding(i, value, env)}  # type: ignore[dict-item]
        raise Refuse("the explicit attention's output is not restored by out.transpose(1, 3).reshape(B, N, C)")

    def deref(self, node: cst.BaseExpression, env: Dict[str, _Binding]) -> Tuple[cst.BaseExpression, Dict[str, _Binding]]:
        while is_name(node) and node.value in env:  # type: ignore[attr-defined]
            binding = env[node.value]  # type: ignore[attr-defined]
            self.used.add(binding.index)
            node, env = binding.value, binding.env
        return node, env

    def restore(self, value: cst.BaseExpression, env: Dict[str, _Binding]) -> Optional[Dict]:
        value, env = self.deref(value, env)
        matched = restore_chain(value)
        if matched is None:
            return None
        av, av_env = self.deref(matched[0], env)
        if not (isinstance(av, cst.BinaryOperation) and isinstance(av.operator, cst.MatrixMultiply)):
            raise Refuse("the restored output is not probabilities @ v")
        probs, probs_env = self.deref(av.left, av_env)
        v = av.right
        if not is_name(v) or v.value in av_env:  # type: ignore[attr-defined]
            raise Refuse("the probabilities are not multiplied by a plain v")
        scores, scores_env = self.deref(self.softmax(probs), probs_env)
        q, k, scale, divide = self.scores(scores, scores_env)
        return {
            "q": q, "k": k, "v": v.value,  # type: ignore[attr-defined]
            "scale": scale, "divide": divide, "restore_args": matched[1], "softmax": probs,
        }

    def softmax(self, node: cst.BaseExpression) -> cst.BaseExpression:
        softmax = softmax_operand(self.ctx, node)
        if softmax is None:
            raise Refuse(f"the attention probabilities are not a softmax of the scores: {code(node)}")
        spelling, operand = softmax
        if operand is None and spelling == "function":
            raise Refuse(f"{code(node)} is not softmax over dim=-1 (without dtype)")
        if operand is None:
            raise Refuse(f"{code(node)} is not .softmax(dim=-1)")
        return operand

    def scores(self, node: cst.BaseExpression, env: Dict) -> Tuple[str, str, Optional[cst.BaseExpression], bool]:
        """`(q * s) @ k.T`, `(s * q) @ k.T`, `(q @ k.T) * s`, `s * (q @ k.T)`, `(q @ k.T) / d`, `q @ k.T`."""
        scale: Optional[cst.BaseExpression] = None
        divide = False
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Multiply, cst.Divide)):
            if self.scalar(node.right):
                divide = isinstance(node.operator, cst.Divide)
                scale, node = node.right, node.left
            elif isinstance(node.operator, cst.Multiply) and self.scalar(node.left):
                scale, node = node.left, node.right
            else:
                raise Refuse(
                    f"the scores are scaled by something not provably a Python number: {code(node)}{self.why_not(node)}"
                )
            node, env = self.deref(node, env)
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply)):
            raise Refuse(f"the scores are not q @ k.transpose(-1, -2): {code(node)}")
        k_expr = transposed_last(node.right)
        if k_expr is None or not is_name(k_expr) or k_expr.value in env:  # type: ignore[attr-defined]
            raise Refuse("the scores are not q @ k.transpose(-1, -2) with a plain k")
        left, left_env = self.deref(node.left, env)
        if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Multiply):
            if scale is not None:
                raise Refuse("the scores are scaled twice")
            if self.scalar(left.right):
                scale, left = left.right, left.left
            elif self.scalar(left.left):
                scale, left = left.left, left.right
            else:
                raise Refuse(f"q is scaled by something not provably a Python number: {code(left)}{self.why_not(left)}")
        if not is_name(left) or left.value in left_env:  # type: ignore[attr-defined]
            raise Refuse("the scores are not computed from a plain q")
        return left.value, k_expr.value, scale, divide  # type: ignore[attr-defined]

    def weights_name(self, env: Dict[str, _Binding], probs: cst.BaseExpression) -> Optional[str]:
        names = [n for n, b in env.items() if b.value is probs]
        if len(names) > 1:
            raise Refuse("the attention probabilities are bound to several names")
        return names[0] if names else None

    # -- scalars --------------------------------------------------------------------------
    def scalar(self, expr: cst.BaseExpression) -> bool:
        return scalar(self.ctx, self.func, expr)

    def why_not(self, product: cst.BinaryOperation) -> str:
        """` (why)` for the factor of ``product`` that looks like a scale, or ""."""
        for factor in (product.right, product.left):
            if isinstance(factor, (cst.Attribute, cst.Integer, cst.Float, cst.BinaryOperation, cst.UnaryOperation)):
                why = scalar_problem(self.ctx, self.func, factor)
                if why is not None:
                    return f" ({why})"
        return ""

    # -- where q, k, v come from ------------------------------------------------------------
    def pool(self, body: List[cst.BaseStatement], start: int, q: str) -> Tuple[List[int], Dict]:
        """The q-pool right before the scores: an `if` holding it, or 1-2 top-level lines."""
        i = start - 1
        if i < 0 or q not in statement_names(self.ctx, body[i])[0]:
            return [], {}
        stmt = body[i]
        if isinstance(stmt, cst.SimpleStatementLine) and component(stmt, q) is not None:
            return [], {}  # the unpack itself: no pool
        if isinstance(stmt, cst.If):
            if stmt.orelse is not None or not isinstance(stmt.body, cst.IndentedBlock):
                raise Refuse(f"{q} is reassigned under control flow this rewrite does not follow")
            lines = list(stmt.body.body)
            if names_in(self.ctx, stmt.test) & {q}:
                raise Refuse("the q-pool condition reads q")
            parts = self.pool_lines(lines, q)
            parts["if"] = stmt
            parts["exprs"] = parts["exprs"] + [stmt.test]
            return [i], parts
        # one or two top-level lines
        lines = [stmt]
        if i - 1 >= 0 and isinstance(body[i - 1], cst.SimpleStatementLine):
            prev = single_assign(body[i - 1])  # type: ignore[arg-type]
            if prev is not None and is_name(prev[0], q) and method_call(prev[1], "view", "reshape") and is_name(
                method_call(prev[1], "view", "reshape")[0], q  # type: ignore[index]
            ):
                lines = [body[i - 1], stmt]
        parts = self.pool_lines(lines, q)
        return list(range(i - len(lines) + 1, i + 1)), parts

    def pool_lines(self, lines: List[cst.BaseStatement], q: str) -> Dict:
        if not 1 <= len(lines) <= 2 or not all(isinstance(s, cst.SimpleStatementLine) for s in lines):
            raise Refuse(f"{q} is reassigned by something other than a q-pool max")
        assigns = [single_assign(s) for s in lines]  # type: ignore[arg-type]
        if any(a is None or not is_name(a[0], q) for a in assigns):
            raise Refuse(f"{q} is reassigned by something other than a q-pool max")
        reduced = reduction_values(assigns[-1][1])  # type: ignore[index]
        if reduced is None or reduced[2] not in (3, -3):
            raise Refuse(f"{q}'s pool is not a max over dim 3 of q.view(B, heads, num_windows, q_stride, -1, head_dim)")
        pooled = reduced[1]
        if len(lines) == 2:
            if not is_name(pooled, q):
                raise Refuse(f"{q}'s pool does not reduce the view of the line before")
            pooled = assigns[0][1]  # type: ignore[index]
        args = pool_view_args(pooled, q)
        if args is None:
            raise Refuse(f"{q}'s pool is not q.view(B, heads, num_windows, q_stride, -1, head_dim).max(dim=3)")
        return {
            "lines": lines, "stride": args[3], "tq": args[4], "checked": [args[0], args[1], args[2], args[5]],
            "exprs": list(args), "spelling": reduced[0],
        }

    def unpack(self, body: List[cst.BaseStatement], before: int, q: str, k: str, v: str) -> Tuple[List[int], str]:
        where: List[int] = []
        sources = QkvSources()
        for name in (q, k, v):
            at = next((i for i in range(before - 1, -1, -1) if name in statement_names(self.ctx, body[i])[0]), None)
            comp = component(body[at], name) if at is not None and isinstance(body[at], cst.SimpleStatementLine) else None  # type: ignore[arg-type]
            if comp is None:
                raise Refuse(f"{name} is not unpacked from a qkv tensor (qkv[0], qkv.unbind(0), ...) right before the attention")
            sources.add(comp)
            where.append(at)  # type: ignore[arg-type]
        return sorted(set(where)), sources.qkv()

    def qkv_definition(self, body: List[cst.BaseStatement], first_unpack: int, qkv: str):
        at = first_unpack - 1
        stmt = body[at] if at >= 0 else None
        assign = single_assign(stmt) if isinstance(stmt, cst.SimpleStatementLine) else None
        if assign is None or not is_name(assign[0], qkv):
            raise Refuse(f"{qkv} is not built by the statement right before the unpack")
        found = method_call(assign[1], "permute")
        if found is None:
            raise Refuse(f"{qkv} is not a .permute(...) of a 6-D reshape: not the 5-D mask-unit layout")
        receiver, permute = found
        if int_args(permute) != FIVE_D_PERMUTE:
            raise Refuse(f"{qkv} is permuted in another order than (3, 0, 4, 2, 1, 5)")
        reshape = method_call(receiver, "reshape", "view")
        if reshape is None and is_name(receiver) and at >= 1 and isinstance(body[at - 1], cst.SimpleStatementLine):
            prev = single_assign(body[at - 1])  # type: ignore[arg-type]
            if prev is not None and is_name(prev[0], receiver.value):  # type: ignore[attr-defined]
                reshape = method_call(prev[1], "reshape", "view")
        args = qkv_sizes(reshape[1] if reshape else None)
        if args is None:
            raise Refuse(f"{qkv} is not reshaped to (B, T, num_windows, 3, heads, head_dim) right before the permute")
        return at, args, receiver

    # -- reads after ----------------------------------------------------------------------
    def loads_after(self, end) -> List[cst.Name]:
        found = []
        for node in all_loads(self.ctx, self.func.body):
            start = self.ctx.span(node).start
            if (start.line, start.column) > (end.line, end.column):
                found.append(node)
        return found

    def flag_guard(self, weights: str, end, flow: FunctionFlow) -> str:
        flags: Set[str] = set()
        for node in self.loads_after(end):
            if node.value != weights:
                continue
            flag = self.guarding_flag(node)
            if flag is None:
                raise Refuse(
                    f"the attention probabilities {weights} are read at line {self.lineno(node)} without a flag guard:"
                    " SDPA cannot give them"
                )
            flags.add(flag)
        if len(flags) != 1:
            raise Refuse(f"the attention probabilities {weights} are read under different flags")
        (flag,) = flags
        params = {p.name.value for p in (*self.func.params.params, *self.func.params.kwonly_params, *self.func.params.posonly_params)}
        if flag not in params:
            raise Refuse(f"the flag {flag} guarding the probabilities is not a parameter of {self.func.name.value}")
        if flow.assigning(flag) or flow.compound_assigned.get(flag):
            raise Refuse(f"the flag {flag} guarding the probabilities is reassigned in {self.func.name.value}")
        return flag

    def guarding_flag(self, node: cst.Name) -> Optional[str]:
        child: cst.CSTNode = node
        for ancestor in self.ctx.ancestors(node):
            if ancestor is self.func:
                return None
            if isinstance(ancestor, cst.IfExp) and child is ancestor.body and is_name(ancestor.test):
                return ancestor.test.value  # type: ignore[attr-defined]
            if isinstance(ancestor, cst.If) and child is ancestor.body and is_name(ancestor.test):
                return ancestor.test.value  # type: ignore[attr-defined]
            if isinstance(ancestor, (cst.Lambda, cst.FunctionDef, cst.For, cst.While)):
                return None
            child = ancestor
        return None

    def sdpa_function(self, flow: FunctionFlow) -> str:
        module = self.ctx.module
        choices: List[Tuple[str, str]] = []
        for stmt in module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        full = code(alias.name)
                        if full == "torch.nn.functional" and alias.asname is not None:
                            choices.append((alias.asname.name.value, "{}"))  # type: ignore[attr-defined]
                        elif full == "torch" and alias.asname is None:
                            choices.append(("torch", "{}.nn.functional"))
                elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar) and small.module is not None:
                    mod = code(small.module)
                    for alias in small.names:
                        bound = alias.asname.name.value if alias.asname else code(alias.name)  # type: ignore[attr-defined]
                        if mod == "torch.nn" and code(alias.name) == "functional":
                            choices.append((bound, "{}"))
                        elif mod == "torch" and code(alias.name) == "nn":
                            choices.append((bound, "{}.functional"))
        local = set(flow.params)
        for s in flow.stmts:
            local |= s.assigned
        top_bindings = top_level_bindings(self.ctx)
        for root, pattern in choices:
            if root not in local and top_bindings[root] == 1:
                return pattern.format(root) + ".scaled_dot_product_attention"
        raise Refuse("the module imports neither torch nor torch.nn.functional at top level")

    def lineno(self, node: cst.CSTNode) -> int:
        return self.ctx.span(node).start.line

    # -- emitting -------------------------------------------------------------------------
    def emit(self, body, region, permute_at, unpack_at, pool_at, pool_parts, start, chain_end, parts, receiver, sdpa, flag, check, clone):
        ctx = self.ctx
        permute_line = body[permute_at]
        batch = code(parts["restore_args"][0])
        q, k, v = parts["q"], parts["k"], parts["v"]
        scale = parts["scale"]
        if scale is None:
            scale_code = "1.0"
        elif parts["divide"]:
            scale_code = f"1 / ({code(scale)})"
        else:
            scale_code = code(scale)
        permute_src = f"{target_code(permute_line)} {rewrap_code(receiver)}.permute(3, 0, 2, 4, 1, 5).flatten(1, 2)\n"
        pool_src = None
        if pool_at:
            # the user's own reduction: `.amax` splits the gradient between exactly tied
            # maxima, where `.max(...).values` gives it to one of them
            reduce = ".amax(dim=2)" if pool_parts["spelling"] == "amax" else ".max(dim=2).values"
            pool_src = f"{q} = {q}.unflatten(2, ({code(pool_parts['stride'])}, {code(pool_parts['tq'])})){reduce}\n"
        call = f"{sdpa}({q}, {k}, {v}, scale={scale_code})"
        restore_args = ", ".join(code(a) for a in parts["restore_args"])
        tail = ".clone()" if clone else ""
        out = parts["out"]
        last = body[chain_end]
        if out is None:
            sdpa_src = None
            restore_src = f"return {call}.unflatten(0, ({batch}, -1)).permute(0, 3, 1, 2, 4).reshape({restore_args}){tail}\n"
        else:
            sdpa_src = f"{out} = {call}\n"
            restore_src = (
                f"{target_code(last)} {out}.unflatten(0, ({batch}, -1)).permute(0, 3, 1, 2, 4).reshape({restore_args}){tail}\n"
            )
        edits: Dict[cst.CSTNode, Replacement] = {}

        if flag is None and check is None:
            removed_comments: List[cst.EmptyLine] = []
            for i in region:
                stmt = body[i]
                if i == permute_at:
                    edits[stmt] = _const(ctx.statement(permute_src, like=stmt))
                elif i in unpack_at:
                    continue
                elif i in pool_at:
                    edits.update(self.pool_edit(body, pool_at, pool_parts, pool_src, i))
                elif i == chain_end:
                    new: List[cst.BaseStatement] = []
                    if sdpa_src is not None:
                        first = ctx.statement(sdpa_src, like=body[start], replaces=False)
                        restored = ctx.statement(restore_src, like=stmt)
                        new.append(first.with_changes(leading_lines=[*removed_comments, *restored.leading_lines]))
                        new.append(restored.with_changes(leading_lines=[]))
                    else:
                        restored = ctx.statement(restore_src, like=stmt)
                        new.append(restored.with_changes(leading_lines=[*removed_comments, *restored.leading_lines]))
                    edits[stmt] = _const(cst.FlattenSentinel(new))
                else:  # a scores/softmax line: its comments move to the SDPA line
                    removed_comments += [line for line in stmt.leading_lines if line.comment is not None]
                    if i == start and stmt.leading_lines and stmt.leading_lines[0].comment is None:
                        removed_comments.insert(0, stmt.leading_lines[0])
                    edits[stmt] = _const(cst.RemovalSentinel.REMOVE)
            return edits

        # `if flag or not <scale check>:` the original statements, `else:` the 4-D SDPA path.
        inner: List[str] = [permute_src]
        for i in unpack_at:
            inner.append(code(body[i].body[0]) + "\n")  # type: ignore[attr-defined]
        if pool_at:
            if "if" in pool_parts:
                inner.append(f"if {code(pool_parts['if'].test)}:\n    {pool_src}")
            else:
                inner.append(pool_src)  # type: ignore[arg-type]
        if sdpa_src is not None:
            inner.append(sdpa_src)
        if parts["weights"] is not None and flag is not None:
            inner.append(f"# SDPA does not materialise the probabilities: read only when {flag}\n{parts['weights']} = None\n")
        inner.append(restore_src)
        conditions = [flag] if flag is not None else []
        if check is not None:
            conditions.append(f"not ({check})" if " and " in check else f"not {check}")
        if flag is not None and check is not None:
            notes = [
                "# the attention probabilities are returned, or the scale is a tensor:",
                "# the explicit 5-D attention, unchanged",
            ]
        elif flag is not None:
            notes = ["# the attention probabilities are returned: the explicit 5-D attention, unchanged"]
        else:
            notes = ["# a tensor scale (not a Python number): the explicit 5-D attention, unchanged"]
        source = (
            f"if {' or '.join(conditions)}:\n"
            "    pass\n"
            "else:\n"
            "    # 4-D q/k/v (batch*windows, heads, tokens, head_dim): SDPA runs a fused kernel\n"
            + "".join("    " + line.replace("\n", "\n    ").rstrip(" ") for line in inner)
        )
        template = ctx.statement(source, like=permute_line, replaces=False)
        collected: Dict[int, cst.BaseStatement] = {}

        def removed(i):
            def edit(updated):
                collected[i] = updated
                return cst.RemovalSentinel.REMOVE

            return edit

        def wrap(updated):
            collected[chain_end] = updated
            stmts = [collected[i] for i in region]
            leading = list(stmts[0].leading_lines)
            stmts[0] = stmts[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(n)) for n in notes])
            stmts = [_shift_continuations(s, ctx.module.default_indent) for s in stmts]
            return template.with_changes(
                leading_lines=leading, body=template.body.with_changes(body=stmts)  # type: ignore[union-attr]
            )

        for i in region[:-1]:
            edits[body[i]] = removed(i)
        edits[body[chain_end]] = wrap
        return edits

    def pool_edit(self, body, pool_at, pool_parts, pool_src, i) -> Dict[cst.CSTNode, Replacement]:
        ctx = self.ctx
        stmt = body[i]
        if "if" in pool_parts:
            lines = pool_parts["lines"]
            new_line = ctx.statement(pool_src, like=lines[0])
            extra = [line for s in lines[1:] for line in s.leading_lines if line.comment is not None]
            new_line = new_line.with_changes(leading_lines=[*new_line.leading_lines, *extra])
            new_if = stmt.with_changes(body=stmt.body.with_changes(body=[new_line]))
            return {stmt: _const(new_if)}
        lines = pool_parts["lines"]
        if stmt is lines[-1] and len(lines) == 2:
            return {stmt: _const(cst.RemovalSentinel.REMOVE)}
        new_line = ctx.statement(pool_src, like=stmt)
        if len(lines) == 2:
            extra = [line for line in lines[1].leading_lines if line.comment is not None]
            new_line = new_line.with_changes(leading_lines=[*new_line.leading_lines, *extra])
        return {stmt: _const(new_line)}


def _const(node):
    """A replacement that ignores inner edits (HR002 may rewrite a q-pool line we replace)."""
    return lambda updated: node


def _shift_continuations(stmt: cst.BaseStatement, indent: str) -> cst.BaseStatement:
    """Backslash continuations hold absolute indentation: move them one level in."""

    class _Shift(cst.CSTTransformer):
        def leave_SimpleWhitespace(self, original_node, updated_node):
            if "\\" in updated_node.value and "\n" in updated_node.value:
                return updated_node.with_changes(value=updated_node.value.replace("\n", "\n" + indent))
            return updated_node

    return stmt.visit(_Shift())  # type: ignore[return-value]
