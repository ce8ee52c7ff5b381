"""HR001: mask-unit attention on 4-D q/k/v, so SDPA can use a fused kernel.

What it matches (by data flow, not by names):

    qkv = <E>.reshape(B, T, nw, 3, H, D).permute(3, 0, 4, 2, 1, 5)   # one or split statements
    q, k, v = qkv[0], qkv[1], qkv[2]          # or qkv.unbind(0), or q = qkv[0] ...
    q = q.view(B, H, nw, S, Tq, D).max(dim=3).values     # optional q-pool (or .amax(dim=3))
    out = F.scaled_dot_product_attention(q, k, v, ...)   # optionally under hasattr(F, ...)
    y = out.transpose(1, 3).reshape(B, N, C)

What it emits:

    qkv = <E>.reshape(B, T, nw, 3, H, D).permute(3, 0, 2, 4, 1, 5).flatten(1, 2)
    q, k, v = ...                              # unchanged: each is (B*nw, H, T, D)
    q = q.unflatten(2, (S, Tq)).amax(dim=2)
    out = F.scaled_dot_product_attention(q, k, v, ...)
    y = out.unflatten(0, (B, -1)).permute(0, 3, 1, 2, 4).reshape(B, N, C)
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import libcst as cst
from libcst.metadata import QualifiedNameProvider

from hiera_rewrite.rewrite import PlanContext, Replacement, Rewrite, register

from ._flow import (
    FunctionFlow,
    Stmt,
    code,
    dim_arg,
    enclosing_function,
    enclosing_line,
    int_args,
    int_value,
    is_name,
    method_call,
    positional,
    reduction_values,
    same_code,
    single_assign,
    target_code,
)

SDPA_NAMES = {
    "torch.nn.functional.scaled_dot_product_attention",
    "torch._C._nn.scaled_dot_product_attention",
}
# SDPA keywords that mean the same on 4-D as on 5-D inputs.
PASS_THROUGH_KEYWORDS = {"scale", "is_causal"}
FIVE_D_PERMUTE = [3, 0, 4, 2, 1, 5]


class Refuse(Exception):
    """Raised inside the matcher with the reason the spot is left alone."""


@register
class MaskUnitAttention(Rewrite):
    code = "HR001"
    name = "mask-unit-attention-4d"
    message = "mask-unit attention: 5-D q/k/v -> 4-D (B*num_windows, heads, T, head_dim) so SDPA runs a fused kernel"
    explanation = """
    FAIR's MaskUnitAttention reshapes qkv to (B, T, num_windows, 3, heads, head_dim),
    permutes it (3, 0, 4, 2, 1, 5) and hands 5-D q/k/v (B, heads, num_windows, T,
    head_dim) to F.scaled_dot_product_attention.  Every fused SDPA backend (flash,
    memory-efficient, cuDNN) refuses 5-D input, so PyTorch silently runs the math
    backend: it materialises the attention matrix and is 1.7-2.5x slower on Hiera's
    short windows (H200, bf16: 5-D math 284 us vs 4-D mem-efficient 114 us).

    The rewrite folds the windows into the batch instead: it permutes qkv to
    (3, B, num_windows, heads, T, head_dim) and flattens it to
    (3, B*num_windows, heads, T, head_dim), so q, k and v are 4-D.  The q-pool
    `q.view(B, heads, num_windows, q_stride, -1, head_dim).max(dim=3).values` becomes
    `q.unflatten(2, (q_stride, -1)).amax(dim=2)` (the stride is the slowest part of
    the in-window position, so the same elements are pooled).  The attention output
    (B*num_windows, heads, Tq, head_dim) is put back as (B, Tq*num_windows, dim_out)
    with token n = tq*num_windows + w, exactly the order the 5-D code produced.

    Same parameters, same state_dict, same outputs and gradients (up to float
    rounding of the SDPA kernel).  Two things differ, on purpose:
    - the `hasattr(F, "scaled_dot_product_attention")` fallback branch is removed:
      every torch >= 2.0 has SDPA, and the branch would otherwise be dead code;
    - `.amax` splits the gradient evenly between exactly tied maxima, where
      `.max(...).values` gives it all to one of them (the forward value is identical;
      ties need bit-identical activations).

    Left alone, with a reason: a different permutation or reshape (windows merged
    into the batch in another order, a 3-D reshape), q/k/v used anywhere besides the
    pool and SDPA, an `attn_mask` or non-zero `dropout_p` (mask layout / RNG order
    would change), SDPA under a condition other than the hasattr guard.
    """

    def plan(self, ctx: PlanContext) -> None:
        finder = _SdpaCalls()
        ctx.wrapper.visit(finder)
        flows: Dict[cst.FunctionDef, FunctionFlow] = {}
        for call in finder.calls:
            func = enclosing_function(ctx, call)
            try:
                if func is None:
                    raise Refuse("SDPA call is not inside a function body")
                flow = flows.setdefault(func, FunctionFlow(func))
                edits = _Match(ctx, flow, call).edits()
            except Refuse as reason:
                ctx.refuse(call, str(reason))
                continue
            ctx.add_site(call, edits)


class _SdpaCalls(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (QualifiedNameProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        names = {q.name for q in self.get_metadata(QualifiedNameProvider, node.func, set())}
        if names & SDPA_NAMES:
            self.calls.append(node)


class _Match:
    """Follows q, k, v back from one SDPA call; builds the edits or raises Refuse."""

    def __init__(self, ctx: PlanContext, flow: FunctionFlow, call: cst.Call) -> None:
        self.ctx = ctx
        self.flow = flow
        self.call = call

    # -- the SDPA call --------------------------------------------------------------
    def qkv_arg_names(self) -> Tuple[str, str, str]:
        names: Dict[str, cst.BaseExpression] = {}
        slots = ["query", "key", "value"]
        for i, arg in enumerate(self.call.args):
            if arg.star:
                raise Refuse("SDPA is called with *args/**kwargs")
            if arg.keyword is None:
                if i >= 3:
                    raise Refuse("SDPA gets more than three positional arguments (attn_mask?)")
                names[slots[i]] = arg.value
                continue
            key = arg.keyword.value
            if key in slots:
                names[key] = arg.value
            elif key in PASS_THROUGH_KEYWORDS:
                continue
            elif key == "attn_mask" and is_name(arg.value, "None"):
                continue
            elif key == "dropout_p" and int_value(arg.value) == 0 or (
                key == "dropout_p" and isinstance(arg.value, cst.Float) and float(arg.value.value) == 0.0
            ):
                continue
            elif key == "attn_mask":
                raise Refuse("SDPA gets an attn_mask: its 5-D layout would need rewriting too")
            elif key == "dropout_p":
                raise Refuse("SDPA gets a dropout_p that may be non-zero: the dropout RNG order would change")
            else:
                raise Refuse(f"SDPA gets a keyword this rewrite does not know: {key}=")
        if set(names) != set(slots) or not all(is_name(v) for v in names.values()):
            raise Refuse("q, k and v are not plain local names")
        q, k, v = (names[s].value for s in slots)  # type: ignore[attr-defined]
        if len({q, k, v}) != 3:
            raise Refuse("q, k and v are not three distinct names")
        return q, k, v

    # -- main ----------------------------------------------------------------------
    def edits(self) -> Dict[cst.CSTNode, Replacement]:
        ctx, flow = self.ctx, self.flow
        q, k, v = self.qkv_arg_names()
        sdpa_line = enclosing_line(ctx, self.call)
        if sdpa_line is None:
            raise Refuse("SDPA call is not in a simple statement")
        sdpa_stmt = flow.stmt_of(sdpa_line)
        guard, removed = self.guard(sdpa_line)

        # q, k, v come from one unpack of qkv (and q maybe from a pool of itself).
        unpack = self.unpack(q, k, v, sdpa_stmt)
        qkv_name, unpack_stmts = unpack
        q_defs = [s for s in flow.assigning(q) if s not in unpack_stmts]
        pool_stmt: Optional[Stmt] = None
        if q_defs:
            if len(q_defs) != 1:
                raise Refuse(f"{q} is assigned more than once besides the unpack and the q-pool")
            pool_stmt = q_defs[0]
            if not (max(s.index for s in unpack_stmts) < pool_stmt.index < sdpa_stmt.index):
                raise Refuse(f"{q} is reassigned outside the span between the qkv unpack and SDPA")
        permute_stmt, reshape_args, permute_receiver = self.qkv_definition(qkv_name, unpack_stmts)
        batch, heads, windows, head_dim = reshape_args[0], reshape_args[4], reshape_args[2], reshape_args[5]

        # The only reads of q, k, v are the pool and SDPA (the removed fallback aside).
        for name, allowed in ((q, [pool_stmt, sdpa_stmt]), (k, [sdpa_stmt]), (v, [sdpa_stmt])):
            for stmt, node in flow.loads_of(name):
                if stmt in allowed or self.inside(node, removed):
                    continue
                raise Refuse(f"{name} is read at line {ctx.position(node).line} besides the pool and SDPA")

        new: Dict[cst.CSTNode, Replacement] = {}
        new[permute_stmt.line] = ctx.statement(
            f"{target_code(permute_stmt.line)} {code(permute_receiver)}.permute(3, 0, 2, 4, 1, 5).flatten(1, 2)",
            like=permute_stmt.line,
        )
        if pool_stmt is not None:
            new[pool_stmt.line] = self.pool(q, pool_stmt, permute_stmt, batch, heads, windows, head_dim)

        restore_line, restore_value, restore_args = self.restore(sdpa_line, guard, removed, sdpa_stmt)
        restore_stmt = flow.stmt_of(restore_line)
        if not same_code(restore_args[0], batch) or not flow.stable_between(batch, permute_stmt, restore_stmt):
            raise Refuse("the output reshape's batch size is not provably the qkv reshape's batch size")
        receiver = restore_value  # `out` name or the SDPA call itself
        new_restore = ctx.statement(
            f"{target_code(restore_line)} {code(receiver)}.unflatten(0, ({code(batch)}, -1))"
            f".permute(0, 3, 1, 2, 4).reshape({', '.join(code(a) for a in restore_args)})",
            like=restore_line,
        )
        if guard is not None:
            body = [new_restore if s is restore_line else s for s in guard.body.body]  # type: ignore[union-attr]
            first = body[0].with_changes(leading_lines=list(guard.leading_lines) + list(body[0].leading_lines))
            new[guard] = cst.FlattenSentinel([first, *body[1:]])
            if restore_line is not sdpa_line:
                new[restore_line] = new_restore
        else:
            new[restore_line] = new_restore
        return new

    # -- pieces ----------------------------------------------------------------------
    def guard(self, sdpa_line: cst.SimpleStatementLine) -> Tuple[Optional[cst.If], List[cst.CSTNode]]:
        """The `if hasattr(F, "scaled_dot_product_attention"):` around SDPA, if any."""
        block = self.ctx.parent(sdpa_line)
        owner = self.ctx.parent(block) if block is not None else None
        if isinstance(owner, cst.FunctionDef):
            return None, []
        if isinstance(owner, cst.If) and owner.body is block:
            test = owner.test
            if (
                isinstance(test, cst.Call)
                and is_name(test.func, "hasattr")
                and len(test.args) == 2
                and isinstance(test.args[1].value, cst.SimpleString)
                and test.args[1].value.evaluated_value == "scaled_dot_product_attention"
            ):
                return owner, [owner.orelse] if owner.orelse is not None else []
            raise Refuse(f"SDPA is under a condition this rewrite does not understand: if {code(test)}")
        if isinstance(owner, cst.With):
            if self.ctx.parent(self.ctx.parent(owner)) is self.flow.func:
                return None, []
        raise Refuse("SDPA is nested in control flow this rewrite does not understand")

    def inside(self, node: cst.CSTNode, roots: List[cst.CSTNode]) -> bool:
        return bool(roots) and any(a in roots for a in self.ctx.ancestors(node))

    def unpack(self, q: str, k: str, v: str, sdpa_stmt: Stmt) -> Tuple[str, List[Stmt]]:
        sources: Dict[int, str] = {}
        stmts: List[Stmt] = []
        for name in (q, k, v):
            candidates = [s for s in self.flow.assigning(name) if s.index < sdpa_stmt.index]
            found = None
            for stmt in candidates:
                comp = _component(stmt.line, name)
                if comp is not None:
                    found = (stmt, comp)
            if found is None:
                raise Refuse(f"{name} is not unpacked from a qkv tensor (qkv[0], qkv.unbind(0), ...)")
            stmt, (source, index) = found
            if len(self.flow.assigning(name)) > (2 if name == q else 1):
                raise Refuse(f"{name} is assigned more than once")
            if index in sources:
                raise Refuse("q, k and v do not take three different qkv components")
            sources[index] = source
            if stmt not in stmts:
                stmts.append(stmt)
        if len(set(sources.values())) != 1 or set(sources) != {0, 1, 2}:
            raise Refuse("q, k and v do not come from the same qkv tensor")
        return sources[0], stmts

    def qkv_definition(
        self, qkv: str, unpack_stmts: List[Stmt]
    ) -> Tuple[Stmt, List[cst.BaseExpression], cst.BaseExpression]:
        first_unpack = min(s.index for s in unpack_stmts)
        defs = [s for s in self.flow.assigning(qkv) if s.index < first_unpack]
        if not defs:
            raise Refuse(f"{qkv} is not assigned in this function")
        permute_stmt = defs[-1]
        assign = single_assign(permute_stmt.line)
        found = method_call(assign[1], "permute") if assign else None
        if found is None or not is_name(assign[0], qkv):  # type: ignore[index]
            raise Refuse(f"{qkv} is not made by .permute(...): not the 5-D mask-unit layout")
        receiver, permute_call = found
        if int_args(permute_call) != FIVE_D_PERMUTE:
            raise Refuse(f"{qkv} is made by {code(permute_call.func)}(...) with another order than (3, 0, 4, 2, 1, 5)")
        reshape = method_call(receiver, "reshape", "view")
        if reshape is None and is_name(receiver):
            # reshape and permute as separate statements
            rdefs = [s for s in self.flow.assigning(receiver.value) if s.index < permute_stmt.index]  # type: ignore[attr-defined]
            rassign = single_assign(rdefs[-1].line) if rdefs else None
            if rassign is not None and is_name(rassign[0], receiver.value):  # type: ignore[attr-defined]
                reshape = method_call(rassign[1], "reshape", "view")
                if reshape is not None:
                    self.only_read_in(receiver.value, rdefs[-1], [permute_stmt])  # type: ignore[attr-defined]
        if reshape is None:
            raise Refuse(f"{qkv} is not a reshape of the qkv projection into 6 dims")
        args = positional(reshape[1])
        if args is None or len(args) != 6 or int_value(args[3]) != 3:
            raise Refuse(f"{qkv} is not reshaped to (B, T, num_windows, 3, heads, head_dim)")
        self.only_read_in(qkv, permute_stmt, unpack_stmts)
        return permute_stmt, args, receiver

    def only_read_in(self, name: str, definition: Stmt, readers: List[Stmt]) -> None:
        for stmt, node in self.flow.loads_of(name):
            if stmt.index <= definition.index and stmt is not definition:
                continue
            if stmt is definition or stmt in readers:
                continue
            if any(s.index < stmt.index for s in self.flow.assigning(name) if s.index > definition.index and s not in readers):
                continue  # rebound in between: a different value
            raise Refuse(f"{name} is also read at line {self.ctx.position(node).line}; its layout would change")

    def pool(
        self,
        q: str,
        pool_stmt: Stmt,
        permute_stmt: Stmt,
        batch: cst.BaseExpression,
        heads: cst.BaseExpression,
        windows: cst.BaseExpression,
        head_dim: cst.BaseExpression,
    ) -> cst.BaseStatement:
        assign = single_assign(pool_stmt.line)
        reduced = reduction_values(assign[1]) if assign and is_name(assign[0], q) else None
        if reduced is None:
            raise Refuse(f"{q} is reassigned by something other than a q-pool max")
        _, pooled, dim = reduced
        view = method_call(pooled, "view", "reshape")
        args = positional(view[1]) if view else None
        if view is None or not is_name(view[0], q) or args is None or len(args) != 6 or dim not in (3, -3):
            raise Refuse(f"{q}'s pool is not q.view(B, heads, num_windows, q_stride, -1, head_dim).max(dim=3)")
        for got, want in ((args[0], batch), (args[1], heads), (args[2], windows), (args[5], head_dim)):
            if not same_code(got, want) or not self.flow.stable_between(want, permute_stmt, pool_stmt):
                raise Refuse(f"the q-pool view's {code(got)} is not provably the qkv reshape's {code(want)}")
        return self.ctx.statement(
            f"{target_code(pool_stmt.line)} {q}.unflatten(2, ({code(args[3])}, {code(args[4])})).amax(dim=2)",
            like=pool_stmt.line,
        )

    def restore(
        self,
        sdpa_line: cst.SimpleStatementLine,
        guard: Optional[cst.If],
        removed: List[cst.CSTNode],
        sdpa_stmt: Stmt,
    ) -> Tuple[cst.SimpleStatementLine, cst.BaseExpression, List[cst.BaseExpression]]:
        """Find `y = out.transpose(1, 3).reshape(B, N, C)` (or on the call itself)."""
        assign = single_assign(sdpa_line)
        if assign is None:
            raise Refuse("SDPA's result is not assigned by a single assignment")
        target, value = assign
        matched = _restore_chain(value)
        if matched is not None and matched[0] is self.call:
            return sdpa_line, self.call, matched[1]
        if value is not self.call or not is_name(target):
            raise Refuse("SDPA's result is not assigned to a plain name")
        out = target.value  # type: ignore[attr-defined]
        anchor: cst.CSTNode = guard if guard is not None else sdpa_line
        block = self.ctx.parent(anchor)
        body = list(block.body)  # type: ignore[union-attr]
        after = body.index(anchor) + 1
        if guard is not None and guard.body.body[-1] is not sdpa_line:  # type: ignore[union-attr]
            raise Refuse("statements follow SDPA inside the hasattr guard")
        if after >= len(body) or not isinstance(body[after], cst.SimpleStatementLine):
            raise Refuse(f"SDPA's output {out} is not restored by the next statement")
        restore_line = body[after]
        rassign = single_assign(restore_line)
        matched = _restore_chain(rassign[1]) if rassign else None
        if matched is None or not is_name(matched[0], out):
            raise Refuse(f"SDPA's output {out} is not restored by {out}.transpose(1, 3).reshape(B, N, C)")
        restore_stmt = self.flow.stmt_of(restore_line)
        reads = [
            node for stmt, node in self.flow.loads_of(out)
            if stmt.index > sdpa_stmt.index and not self.inside(node, removed)
        ]
        rebinding = [s for s in self.flow.assigning(out) if s.index >= restore_stmt.index]
        until = rebinding[0].index if rebinding else len(self.flow.stmts)
        extra = [n for n in reads if self.flow_index(n) != restore_stmt.index and self.flow_index(n) <= until]
        if extra:
            raise Refuse(f"SDPA's output {out} is read elsewhere (line {self.ctx.position(extra[0]).line})")
        return restore_line, matched[0], matched[1]

    def flow_index(self, node: cst.Name) -> int:
        for stmt in self.flow.stmts:
            if any(n is node for n in stmt.loaded):
                return stmt.index
        return -1


def _restore_chain(value: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, List[cst.BaseExpression]]]:
    """Match `<out>.transpose(1, 3).reshape(B, N, C)`: returns (out, [B, N, C])."""
    outer = method_call(value, "reshape")
    if outer is None:
        return None
    args = positional(outer[1])
    inner = method_call(outer[0], "transpose")
    if args is None or len(args) != 3 or inner is None:
        return None
    dims = int_args(inner[1])
    if dims is None or sorted(dims) != [1, 3]:
        return None
    return inner[0], args


def _component(line: cst.SimpleStatementLine, name: str) -> Optional[Tuple[str, int]]:
    """If ``line`` binds ``name`` to component i of a tensor X, return (X, i)."""
    assign = single_assign(line)
    if assign is None:
        return None
    target, value = assign
    if is_name(target, name):
        return _subscript(value)
    if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != 3:
        return None
    names = [e.value for e in target.elements]
    if not all(is_name(n) for n in names):
        return None
    position = [n.value for n in names].index(name) if name in [n.value for n in names] else None  # type: ignore[attr-defined]
    if position is None:
        return None
    if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == 3:
        parts = [_subscript(e.value) for e in value.elements]
        if any(p is None for p in parts) or [p[1] for p in parts] != [0, 1, 2]:  # type: ignore[index]
            return None
        if len({p[0] for p in parts}) != 1:  # type: ignore[index]
            return None
        return parts[position]  # type: ignore[return-value]
    if is_name(value):
        return value.value, position  # type: ignore[attr-defined]
    found = method_call(value, "unbind")
    if found and is_name(found[0]):
        ok, dim = dim_arg(found[1]) if found[1].args else (True, 0)
        if ok and dim == 0:
            return found[0].value, position  # type: ignore[attr-defined]
    return None


def _subscript(value: cst.BaseExpression) -> Optional[Tuple[str, int]]:
    if isinstance(value, cst.Subscript) and is_name(value.value) and len(value.slice) == 1:
        index = value.slice[0].slice
        if isinstance(index, cst.Index):
            i = int_value(index.value)
            if i in (0, 1, 2):
                return value.value.value, i  # type: ignore[attr-defined]
    return None
