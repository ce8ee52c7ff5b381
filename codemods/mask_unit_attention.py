"""HR001: mask-unit attention on 4-D q/k/v, so SDPA can use a fused kernel.

What it matches (by data flow, not by names):

    qkv = <E>.reshape(B, T, nw, 3, H, D).permute(3, 0, 4, 2, 1, 5)   # one or split statements
    q, k, v = qkv[0], qkv[1], qkv[2]          # or qkv.unbind(0), or q = qkv[0] ...
    q = q.view(B, H, nw, S, Tq, D).max(dim=3).values     # optional q-pool (or .amax(dim=3))
    out = F.scaled_dot_product_attention(q, k, v, ...)   # optionally under hasattr(F, ...)
    y = out.transpose(1, 3).reshape(B, N, C)
    # SDPA may get attn_mask=m (or m if C else None), m broadcasting to (B, H, nw, Tq, Tk)

What it emits:

    qkv = <E>.reshape(B, T, nw, 3, H, D).permute(3, 0, 2, 4, 1, 5).flatten(2, 3)
    q, k, v = ...                              # unchanged: each is (B, nw*H, T, D)
    q = q.unflatten(2, (S, Tq)).max(dim=2).values        # the user's own reduction
    out = F.scaled_dot_product_attention(q, k, v, ...)
    y = out.transpose(1, 2).reshape(B, N, C)
    # with attn_mask=m: a float m goes to the original's 5-D call on 5-D views,
    #     F.scaled_dot_product_attention(q.unflatten(1, (nw, H)).transpose(1, 2), ..., attn_mask=m)
    #     .transpose(1, 2).flatten(1, 2); else attn_mask=None if m is None else
    #     <bool m as 0/-inf in q's dtype>.reshape([1] * (5 - m.dim()) + list(m.shape)).expand(-1, H, nw, -1, -1)
    #     .transpose(1, 2).flatten(1, 2)                                 (B, nw*H, Tq, Tk)

Two shapes of control flow around it are understood (timm's MaskUnitAttention has
both):

- SDPA in one branch of ``if <flag>:`` whose other branch is a manual attention
  built only from ops that treat every leading dim as batch (``q * scale``,
  ``@``, ``.transpose(-1, -2)``, ``.softmax(dim=-1)``): both branches are kept,
  they are correct on 4-D q/k/v as on 5-D ones.
- The 5-D path inside ``if C:`` (a global 4-D path in the ``else``) and the output
  restored under a second ``if C:``: the windowed side of both is rewritten, the
  other side is not touched.  C must be a plain flag (``self.attr``/a local name)
  that nothing in between can change.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import FunctionFlow, enclosing_function, enclosing_line, names_in, statement_names
from hiera_rewrite.rewrite import NotThisIdiom, PlanContext, Refuse, Replacement, Rewrite, register

from ._attention import (
    CLONE_WHY,
    FIVE_D_PERMUTE,
    FOUR_D_PERMUTE,
    QkvSources,
    all_loads,
    arithmetic,
    component,
    flatten_targets,
    pool_view_args,
    qkv_sizes,
    restore_chain,
    restore_clone_reason,
    scalar,
    scalar_problem,
    scale_check,
    sdpa_calls,
    shadowed_builtins,
    softmax_operand,
    transposed_last,
)
from ._inplace import WHAT, InplaceFlow
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

# SDPA keywords that mean the same on 4-D as on 5-D inputs.
PASS_THROUGH_KEYWORDS = {"scale", "is_causal"}
# Above the statement that calls SDPA with a converted attn_mask.
MASK_NOTE = (
    "# a float attn_mask: the original's 5-D call (math backend; fused kernels read float masks otherwise);\n"
    "# a bool one: the additive mask the math backend makes of it, in q's dtype, 4-D\n"
)


@register
class MaskUnitAttention(Rewrite):
    code = "HR001"
    name = "mask-unit-attention-4d"
    message = "mask-unit attention: 5-D q/k/v -> 4-D (B, num_windows*heads, T, head_dim) so SDPA runs a fused kernel"
    explanation = """
    FAIR's MaskUnitAttention reshapes qkv to (B, T, num_windows, 3, heads, head_dim),
    permutes it (3, 0, 4, 2, 1, 5) and hands 5-D q/k/v (B, heads, num_windows, T,
    head_dim) to F.scaled_dot_product_attention.  Every fused SDPA backend (flash,
    memory-efficient, cuDNN) refuses 5-D input, so PyTorch silently runs the math
    backend: it materialises the attention matrix and is 1.7-2.5x slower on Hiera's
    short windows (H200, bf16: 5-D math 284 us vs 4-D mem-efficient 114 us).

    The rewrite folds the windows into the heads instead: it permutes qkv to
    (3, B, num_windows, heads, T, head_dim) and flattens it to
    (3, B, num_windows*heads, T, head_dim), so q, k and v are 4-D (one copy, as
    before).  The q-pool
    `q.view(B, heads, num_windows, q_stride, -1, head_dim).max(dim=3).values` becomes
    `q.unflatten(2, (q_stride, -1)).max(dim=2).values` (the stride is the slowest part
    of the in-window position, so the same elements are pooled; the reduction stays
    the user's own -- `.amax` where they wrote `.amax` -- so tied maxima get the same
    gradient and an in-place op on q stays legal; see `--explain HR002` for why
    `.amax` is not faster).  The attention output
    (B, num_windows*heads, Tq, head_dim) is restored by `.transpose(1, 2)` and the
    original reshape: (B, Tq, num_windows*heads, head_dim) has exactly the element
    order of the 5-D code's (B, Tq, num_windows, heads, head_dim), token
    n = tq*num_windows + w.  The fused kernels write their output in that
    (B, Tq, heads, head_dim) memory layout, so the restore is a free view and the
    projection's saved input is the attention output itself, not a second copy.
    Those kernels (and CPU's flash kernel) also save their output for backward, so
    where an in-place op, or code that may do one (a module of the fork's own), can
    reach the restored output, or it is returned to a caller, the restore gets
    `.clone()` (the copy the original made): an in-place op on the view would make
    backward raise "modified by an inplace operation" where the original ran.

    Same parameters, same state_dict, same outputs and gradients (up to float
    rounding of the SDPA kernel).  The `hasattr(F, "scaled_dot_product_attention")`
    guard stays, and so does its else branch, which torch < 2.0 runs (it has no SDPA):
    there q, k and v are made 5-D views (B, heads, num_windows, T, head_dim) of the 4-D
    ones first and the output is put back in the 4-D order after, so the branch runs as
    the original did, whatever its scale (a per-head tensor included) or mask.  Its
    statements must be a manual attention whose values do not depend on strides
    (matmul, a scale, transpose(-1, -2), softmax(dim=-1), the added attn_mask), else
    the site is refused.

    One limit comes from PyTorch, not from the rewrite: the fused kernels (CPU flash,
    CUDA flash / memory-efficient / cuDNN) have no double backward and no forward-mode
    AD.  A gradient penalty or Hessian-vector product (`create_graph=True`) or
    `torch.func.jvp` through the rewritten attention raises "derivative for
    aten::_scaled_dot_product_flash_attention_for_cpu_backward is not implemented"
    (or the CUDA kernel's), where the original ran the math backend.  Run those steps
    under `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`: the original's kernel,
    the same values (tests/test_parity.py checks a gradient penalty in float64).

    A manual-attention fallback under another flag (timm's `if self.fused_attn:`)
    is kept when every op in it treats the leading dims as batch: `q * scale` with
    a numeric scale, `@`, `.transpose(-1, -2)`, `.softmax(dim=-1)`.  When the 5-D
    path sits under `if C:` next to a 4-D global path and the output is restored
    under a second `if C:`, only the windowed side of each is rewritten.

    A fallback scale that reads an attribute (`self.scale`) is a number where the
    class sets it, but a subclass (in this file or another) or a caller may make it
    a tensor, e.g. a per-head learnable temperature (heads, 1, 1, 1): it broadcasts
    against the 5-D dims (B, heads, num_windows, T, head_dim), and so against other
    dims of the 4-D q.  The fallback therefore checks `isinstance(self.scale, (int,
    float))` at run time; where that fails it runs on 5-D views of q, k and v, as the
    original did, and hands its output back in the 4-D order.  SDPA itself never
    reads self.scale (its default scale is head_dim ** -0.5, the same on 4-D input).

    An `attn_mask=m` (or `m if C else None`) in the 5-D layout, e.g. a padding mask
    `mask.reshape(B, -1, num_windows).permute(0, 2, 1)[:, None, :, None, :]`:
    a bool m is brought to the 4-D layout and to q's dtype at the call:
    `q.new_zeros(m.shape).masked_fill(~m, float("-inf")).reshape([1] * (5 - m.dim()) + list(m.shape))
    .expand(-1, heads, num_windows, -1, -1).transpose(1, 2).flatten(1, 2)` (None stays
    None).  SDPA broadcast the mask against (B, heads, num_windows, Tq, Tk); the 4-D
    mask holds at (b, w*heads + h, i, j) the element the 5-D call read at (b, h, w, i, j)
    for every broadcastable shape; batch, Tq and Tk keep the mask's own sizes.  It is a
    view where num_windows is 1 (global attention) and otherwise a copy of (B,
    num_windows*heads, 1, T) for a padding mask, small beside the attention.  0/-inf in
    q's dtype is the additive mask the math backend makes of a bool one, and every
    backend reads it so, fully masked rows included (zeros); cuDNN gives a bool mask's
    fully masked rows other values.  A float m is not given to the fused kernels at
    all: the call becomes `(<the original call on 5-D views of q, k, v, with m as it
    is>.transpose(1, 2).flatten(1, 2) if m is not None and m.is_floating_point() else
    <the 4-D call>)` -- the original's own 5-D call, which SDPA runs on its math backend.
    Fused kernels read float masks otherwise: a float32 mask under bf16/fp16 q on cuDNN
    (errors 0.37-1.3, NaN in fp16 with -inf entries, H200, torch 2.11) or under float64
    q on CPU's flash kernel (errors 1.6-4.4); a cast to q's dtype turns
    torch.finfo(torch.float32).min into -inf in bf16 (a row padded entirely then gets
    zeros where the math backend's absorbed logits give uniform weights); and with such
    large finite fills the fused backwards lose rows padded entirely (CPU flash,
    float64: gradients off by 2e5).  So a float mask costs the fast path in that call
    alone, and is exact.  An integer mask raises before (SDPA) and after (masked_fill).
    With `m if C else None`, C is tested once, before the call (`(<the above on m> if C
    else <the 4-D call without a mask>)`), so m is read only where the original reads
    it (it may be unbound, or not a tensor, where C is false); the arguments before the
    mask must then be names or constants (nothing evaluated before C may change it).
    A kept manual fallback that adds the same mask to its logits gets the same layout
    change only (a bool mask stays bool there: it adds 0/1, as before).  Fully masked
    rows under a bool mask: the 5-D original runs the math backend, which returns zeros
    there on recent torch (its safe softmax, since 2.5; checked on 2.14), as the 4-D
    call does; on older torch the math backend returned NaN there, and such a row may
    then differ.  The manual fallback gives NaN there before and after.

    The unpack `q, k, v = qkv[0], qkv[1], qkv[2]` becomes `q, k, v = qkv.unbind(0)`:
    the same three views, and a backward of one `stack` instead of three
    `select_backward` (each a zero-filled qkv-sized tensor and a copy) and two adds
    of them (Hiera-Base MAE, B=128 bf16 eager on an H200: -7 kernels per attention).
    unbind's outputs are multi-output views, and an in-place op on one raises
    ("Output 0 of UnbindBackward0 is a view and is being modified inplace") where
    `qkv[0]` allows it; so the unbind form is emitted only where HR002's in-place
    flow finds no in-place op on qkv, q, k or v after the unpack, nothing that may do
    one (a function or module it does not know, an attribute store, a closure) and no
    return.  Otherwise the same rewrite keeps the select unpack (no report: the
    result is equally exact); one per line (`q = qkv[0]` ...) is kept too.

    Left alone, with a reason: a different permutation or reshape (windows merged
    into the batch in another order, a 3-D reshape), q/k/v used anywhere besides the
    pool and SDPA, an `attn_mask` built in the call or added in a fallback whose
    scale needs a run-time check, a non-zero `dropout_p` (RNG order would change), SDPA under a condition or in a loop this rewrite cannot follow,
    a manual fallback with any op that is not provably batch-rank-agnostic, or whose
    scale the class itself sets to something other than a number (a property, a
    tensor class attribute, a store outside __init__).

    Already-rewritten code (the 4-D qkv this rewrite or HR006 emits) is recognised
    and not reported.
    """

    def plan(self, ctx: PlanContext) -> None:
        for call in sdpa_calls(ctx):
            func = enclosing_function(ctx, call)

            def analyse() -> Tuple["_Match", Dict[cst.CSTNode, Replacement]]:
                if func is None:
                    raise Refuse("SDPA call is not inside a function body")
                match = _Match(ctx, func, call)
                return match, match.edits()

            found = ctx.attempt(call, analyse, quiet_if=lambda: _already_4d(ctx, func, call))
            if found is None:
                continue
            match, edits = found
            message = None
            if match.manual_check is not None:
                message = (
                    f"{self.message}; the manual fallback runs on 5-D views where"
                    f" `{match.manual_check}` fails (a tensor scale, checked at run time)"
                )
            if match.clone_reason is not None:
                message = (
                    f"{message or self.message}; the restored output gets .clone(): {match.clone_reason} ({CLONE_WHY})"
                )
            if match.mask_arg is not None:
                message = (
                    f"{message or self.message} where `{code(match.mask_arg.value)}` is None or bool"
                    " (a float mask keeps the original's 5-D call, on the math backend)"
                )
            ctx.add_site(call, edits, message)


@dataclasses.dataclass
class _Item:
    """One statement on the windowed path, in execution order."""

    node: cst.BaseStatement
    assigned: Set[str]
    loaded: List[cst.Name]
    branch: Optional[cst.If]  # the `if C:` it was taken from; None: runs on every path


@dataclasses.dataclass
class _Region:
    """The statement(s) that turn q, k, v into the attention output."""

    top: cst.BaseStatement  # the outermost statement of the region
    out: Optional[str]  # the name the output is bound to (None: restored on the SDPA line)
    guard: Optional[cst.If]  # the hasattr(F, "scaled_dot_product_attention") guard, kept
    old_torch: Optional[cst.IndentedBlock]  # its else branch (torch < 2.0), run on 5-D views
    manual: Optional[cst.IndentedBlock]  # kept rank-agnostic fallback
    temporaries: Set[str]  # names the fallback binds besides out
    allowed_reads: Set[int]  # ids of Name nodes that may read q, k, v


@dataclasses.dataclass
class _Restore:
    line: cst.SimpleStatementLine
    receiver: cst.BaseExpression
    args: List[cst.BaseExpression]
    condition: Optional[cst.BaseExpression]  # `C` of `if C:` around the restore
    side: str  # "body" or "orelse" of that if
    statement: cst.BaseStatement  # the statement after the region (the if, or the line)


class _Match:
    """Follows q, k, v back from one SDPA call; builds the edits or raises Refuse."""

    def __init__(self, ctx: PlanContext, func: cst.FunctionDef, call: cst.Call) -> None:
        self.ctx = ctx
        self.func = func
        self.call = call
        self.manual_scales: List[cst.BaseExpression] = []  # scales the manual fallback multiplies by
        self.manual_check: Optional[str] = None  # the run-time test emitted into the fallback
        self.mask_arg: Optional[cst.Arg] = None  # SDPA's attn_mask= (not None)
        self.mask_name: Optional[str] = None  # the local name holding the 5-D mask
        self.fallback_mask_reads: List[cst.Name] = []  # `attn + mask` in a kept manual fallback
        self.flow: Optional[InplaceFlow] = None  # for the unbind unpack, made when needed
        self.clone_reason: Optional[str] = None  # why the restored output gets .clone()

    # -- the SDPA call --------------------------------------------------------------
    def qkv_arg_names(self) -> Tuple[str, str, str, List[cst.BaseExpression]]:
        names: Dict[str, cst.BaseExpression] = {}
        extra: List[cst.BaseExpression] = []
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
                extra.append(arg.value)
            elif key == "attn_mask" and is_name(arg.value, "None"):
                continue
            elif key == "dropout_p" and _is_zero(arg.value):
                continue
            elif key == "attn_mask":
                self.mask_arg = arg
                self.mask_name = _mask_name(arg.value)
            elif key == "dropout_p":
                raise Refuse("SDPA gets a dropout_p that may be non-zero: the dropout RNG order would change")
            else:
                raise Refuse(f"SDPA gets a keyword this rewrite does not know: {key}=")
        if set(names) != set(slots):
            raise Refuse("SDPA does not get all of query, key and value")
        for slot in slots:
            if not is_name(names[slot]) and _five_d_view(names[slot]):
                raise NotThisIdiom()  # this rewrite's own call for a float attn_mask
            if not is_name(names[slot]):
                raise Refuse(
                    f"SDPA's {slot} is `{code(names[slot])}`, not a plain local name: q, k and v are not"
                    " the 5-D layout's unpack"
                )
        q, k, v = (names[s].value for s in slots)  # type: ignore[attr-defined]
        if len({q, k, v}) != 3:
            raise Refuse("q, k and v are not three distinct names")
        return q, k, v, extra

    # -- main ----------------------------------------------------------------------
    def edits(self) -> Dict[cst.CSTNode, Replacement]:
        ctx = self.ctx
        q, k, v, sdpa_extra = self.qkv_arg_names()
        sdpa_line = enclosing_line(ctx, self.call)
        if sdpa_line is None:
            raise Refuse("SDPA call is not in a simple statement")
        for ancestor in ctx.ancestors(sdpa_line):
            if isinstance(ancestor, (cst.For, cst.While)):
                raise Refuse("SDPA is inside a loop: the data flow would have to hold for every iteration")
            if ancestor is self.func:
                break
        region = self.region(sdpa_line, q, k, v)
        block = ctx.parent(region.top)
        if not isinstance(block, cst.IndentedBlock):
            raise Refuse("SDPA is in a one-line block")
        index = list(block.body).index(region.top)
        try:
            restore = self.restore(sdpa_line, region, block, index)
        except Refuse:
            # Prefer the reason on the input side when there is one (a 4-D or
            # 3-D reshape is better described by its qkv than by its output).
            items, _ = self.path(block.body[:index], None)
            unpack, _, _ = self.unpack(items, q, k, v)
            self.qkv_definition(items, unpack[0], min(unpack[1]), max(unpack[1]))
            raise
        items, first_cond_if = self.path(block.body[:index], restore)
        if restore.condition is not None:
            self.check_condition_stable(restore, block, first_cond_if)

        # q, k, v come from one unpack of qkv (and q maybe from a pool of itself).
        unpack, pool_item, pool_line = self.unpack(items, q, k, v)
        qkv_name = unpack[0]
        unpack_items = unpack[1]
        first_unpack = min(unpack_items)
        permute_at, reshape_args, permute_receiver = self.qkv_definition(items, qkv_name, first_unpack, max(unpack_items))
        if restore.condition is not None:
            for where, what in [(permute_at, "the 5-D qkv"), *((u, "the q/k/v unpack") for u in unpack_items)] + (
                [(pool_item, "the q-pool")] if pool_item is not None else []
            ):
                if items[where].branch is None:
                    raise Refuse(
                        f"{what} also runs when `{code(restore.condition)}` selects the other output layout"
                    )
        batch, heads, windows, head_dim = reshape_args[0], reshape_args[4], reshape_args[2], reshape_args[5]
        self.base_unchanged(items[permute_at].node, qkv_name, {q, k, v, qkv_name})
        changed = {q, k, v, qkv_name} | region.temporaries
        if region.out is not None:
            changed_out = changed | {region.out}
        else:
            changed_out = changed

        # Reads of q, k, v, qkv on the path: only the unpack, the pool and the attention.
        allowed = set(region.allowed_reads)
        for u in unpack_items:
            allowed |= {id(n) for n in items[u].loaded}
        if pool_line is not None:
            allowed |= {id(n) for n in statement_names(self.ctx, pool_line)[1]}
        for item in items[permute_at + 1 :]:
            for node in item.loaded:
                if node.value in changed and id(node) not in allowed:
                    raise Refuse(f"{node.value} is read at line {self.line(node)} besides the pool and SDPA")
        region_loads = statement_names(self.ctx, region.top)[1]
        for node in region_loads:
            if node.value in changed and id(node) not in allowed:
                raise Refuse(f"{node.value} is read at line {self.line(node)} besides the pool and SDPA")
        for value in sdpa_extra:
            self.not_reading(value, changed_out, "an SDPA keyword argument")
        # A name the attention's output rebinds (qkv under the input's own name, x) is
        # read after it as that output, which the restore checks below.
        rebound_by_out = {region.out} if region.out is not None else set()
        self.no_reads_after(region.top, changed - rebound_by_out, "its layout changes")
        self.no_closure_reads(changed)

        new: Dict[cst.CSTNode, Replacement] = {}
        call_code = code(self.call)
        if self.mask_arg is not None:
            self.not_reading(self.mask_arg.value, changed_out, "SDPA's attn_mask")
            to_4d, (h, w) = self.mask_to_4d(q, heads, windows, items[permute_at + 1 :], changed, additive=True)
            given_mask = self.mask_arg.value
            m = self.mask_name
            # `m if C else None`: C is tested once, first, and m read only where the original
            # reads it (m may be unbound, or not a tensor, where C is false)
            mask_arg = self.mask_arg.with_changes(value=cst.Name(m)) if isinstance(given_mask, cst.IfExp) else self.mask_arg
            if mask_arg is not self.mask_arg:
                self.evaluated_before_the_mask()
            value = to_4d
            if restore.condition is not None:
                # two layouts, one SDPA call: the mask is converted on the 5-D path alone;
                # the other path's q is 4-D already, and its mask goes in as it is (the
                # condition is the one the restore reads, stable between the two ifs)
                given, test = code(mask_arg.value), code(restore.condition)
                value = f"({value}) if {test} else {given}" if restore.side == "body" else f"{given} if {test} else ({value})"
            bool_call = code(self.call.with_changes(args=[
                a.with_changes(value=cst.parse_expression(value)) if a is self.mask_arg else a
                for a in self.call.args
            ]))
            # A float mask goes to the original's 5-D call, on 5-D views of the 4-D q, k, v:
            # its math backend reads the mask in its own dtype, and rows masked entirely by
            # large finite values (torch.finfo(dtype).min) as uniform weights, where fused
            # kernels misread another dtype, saturate a cast to -inf or lose such rows in
            # their backward (CPU flash, float64: gradients off by 2e5).
            float_call = code(self.call.with_changes(args=[
                a.with_changes(value=cst.parse_expression(f"{code(a.value)}.unflatten(1, ({w}, {h})).transpose(1, 2)"))
                if (a.keyword is None and i < 3) or (a.keyword is not None and a.keyword.value in ("query", "key", "value"))
                else mask_arg if a is self.mask_arg else a
                for i, a in enumerate(self.call.args)
            ]))
            floating = f"{m} is not None and {m}.is_floating_point()"
            if restore.condition is not None:
                test = code(restore.condition)
                floating = f"({test}) and {floating}" if restore.side == "body" else f"not ({test}) and {floating}"
            call_code = f"({float_call}.transpose(1, 2).flatten(1, 2) if {floating} else {bool_call})"
            if mask_arg is not self.mask_arg:
                assert isinstance(given_mask, cst.IfExp)
                unmasked = code(self.call.with_changes(args=[a for a in self.call.args if a is not self.mask_arg]))
                masked_side, other = (call_code, unmasked) if is_name(given_mask.orelse, "None") else (unmasked, call_code)
                call_code = f"({masked_side} if {code(given_mask.test)} else {other})"
            # the fallback adds the mask as it is (a bool mask adds 0/1): its layout only
            layout, _ = self.mask_to_4d(q, heads, windows, items[permute_at + 1 :], changed, additive=False)
            for name in self.fallback_mask_reads:
                line = enclosing_line(ctx, name)
                assert line is not None
                new[line] = ctx.statement(code(_replace_name(line, name, f"({layout})")), like=line)
        permute_line = items[permute_at].node
        new[permute_line] = ctx.statement(
            f"{_layout_target(permute_line)} {rewrap_code(permute_receiver)}.permute(3, 0, 2, 4, 1, 5).flatten(2, 3)",
            like=permute_line,
        )
        if pool_line is not None:
            new[pool_line] = self.pool(
                q, pool_line, items, permute_at, pool_item, batch, heads, windows, head_dim, changed
            )
        if len(unpack_items) == 1:
            unbind = self.unbind(items[unpack_items[0]].node, qkv_name)
            if unbind is not None:
                new[items[unpack_items[0]].node] = unbind

        # The restore needs no batch size: (B, Tq, num_windows*heads, head_dim) has the
        # row-major order of the 5-D code's (B, Tq, num_windows, heads, head_dim).
        for arg in restore.args:
            self.not_reading(arg, changed_out, "the output reshape")
        receiver = call_code if restore.receiver is self.call else code(restore.receiver)
        clone = ".clone()" if self.restored_may_change(restore) else ""
        # the statement that calls SDPA says why its attn_mask is cast
        note = MASK_NOTE if self.mask_arg is not None else ""
        new_restore = ctx.statement(
            f"{note if restore.receiver is self.call else ''}"
            f"{_restore_prefix(restore.line)} {receiver}.transpose(1, 2)"
            f".reshape({', '.join(code(a) for a in restore.args)}){clone}",
            like=restore.line,
        )
        if region.out is not None:
            assign = single_assign(restore.line)
            if assign is None or not is_name(assign[0], region.out):
                self.no_reads_after(restore.statement, {region.out}, "SDPA's output changes layout")
        new_sdpa: Optional[cst.BaseStatement] = None
        if restore.line is not sdpa_line and (call_code != code(self.call) or _shape_annotation(sdpa_line)):
            new_sdpa = ctx.statement(f"{note}{_layout_target(sdpa_line)} {call_code}", like=sdpa_line)
        # Other annotations of q, k, v, qkv on the path (`q: Float[Tensor, "B H nw T D"]`)
        for item in items[permute_at + 1 :]:
            line = item.node
            if isinstance(line, cst.SimpleStatementLine) and line is not pool_line and _shape_annotation(line):
                small = line.body[0]
                if is_name(small.target) and small.target.value in changed:  # type: ignore[attr-defined]
                    value = f" = {code(small.value)}" if small.value is not None else ""  # type: ignore[attr-defined]
                    new[line] = ctx.statement(f"{_layout_target(line).rstrip(' =')}{value}", like=line)
        new[restore.line] = new_restore
        if new_sdpa is not None:
            new[sdpa_line] = new_sdpa
        if region.old_torch is not None:
            split = self.five_d_split(reshape_args, items, permute_at, changed, "torch < 2.0's manual attention (the hasattr guard's else branch)")
            # (two layouts: only the windowed path's q, k, v are 4-D views of 5-D ones)
            new.update(five_d_views(
                self.ctx, region.old_torch, q, k, v, region.out, split, self.windowed(restore),  # type: ignore[arg-type]
                "torch < 2.0 (no SDPA): the manual attention on 5-D views, as before",
            ))
        if region.manual is not None:
            new.update(self.manual_tensor_scale(region, restore, reshape_args, items, permute_at, changed, q, k, v))
        return new

    def restored_may_change(self, restore: _Restore) -> bool:
        """Whether the restored output needs `.clone()` (see restore_clone_reason): the
        5-D restore `.transpose(1, 3).reshape(...)` copied the math backend's output;
        the 4-D one can be a view of the saved output of a fused (or CPU flash)
        kernel, and an in-place op on it would make backward raise "modified by an
        inplace operation" where the original ran.  The clone is the copy the
        original made."""
        value = _restore_value(restore.line)
        assert value is not None
        if self.flow is None:
            self.flow = InplaceFlow(self.ctx)
        self.clone_reason = restore_clone_reason(self.flow, self.func, restore.line, value)
        return self.clone_reason is not None

    def mask_to_4d(
        self,
        q: str,
        heads: cst.BaseExpression,
        windows: cst.BaseExpression,
        between: List[_Item],
        changed: Set[str],
        additive: bool,
    ) -> Tuple[str, Tuple[str, str]]:
        """The expression that brings the mask (a name) to q's 4-D layout, and the code of
        the heads and num_windows it reads (again at SDPA: the float mask's 5-D views split
        q's dim 1 by them); with ``additive`` (SDPA's mask), also to q's dtype: a bool
        mask becomes the float mask SDPA makes of it (a float mask goes to the 5-D call).

        SDPA broadcasts the mask against (B, heads, num_windows, Tq, Tk); the 4-D q is
        (B, num_windows*heads, Tq, Tk) with index w*heads + h.  Prepending dims up to
        5-D (as broadcasting does), expanding the heads and windows dims to their sizes,
        swapping them and flattening them gives, at (b, w*heads + h, i, j), the
        element the 5-D call read at (b, h, w, i, j); batch, Tq and Tk keep their own
        sizes and broadcast alike in 4-D.  A view where num_windows is 1 or the mask
        has size 1 along both; else a copy of (B, num_windows*heads, Tq', Tk'), Tq'
        and Tk' the mask's own sizes (1 and T for a padding mask)."""
        assert self.mask_name is not None
        rebound = set().union(set(), *(item.assigned for item in between)) | changed

        def readable(expr: cst.BaseExpression) -> Optional[str]:
            names = names_in(self.ctx, expr)
            if int_value(expr) == -1 or not arithmetic(expr) or names & rebound or not all(self.on_every_path(n) for n in names):
                return None
            roots = {_flag_root(leaf) for leaf in _leaves(expr) if isinstance(leaf, cst.Attribute)}
            for root in roots - {None}:
                for item in between:
                    if _may_change(self.ctx, item.node, root) is not None:  # type: ignore[arg-type]
                        return None
            text = code(expr)
            return text if isinstance(expr, (cst.Name, cst.Attribute, cst.Integer)) else f"({text})"

        h, w = readable(heads), readable(windows)
        if h is None and w is None:
            raise Refuse(
                "SDPA gets an attn_mask, and neither the heads nor the num_windows of the qkv reshape"
                " can be read again at SDPA to bring it to the 4-D layout (unchanged since the reshape, and bound on every path to SDPA, as TorchScript needs)"
            )
        h = h or f"{q}.shape[1] // {w}"
        w = w or f"{q}.shape[1] // {h}"
        if additive and shadowed_builtins(self.ctx, self.func, "float"):
            raise Refuse("SDPA's attn_mask needs float(\"-inf\") in the emitted code, but the file binds float")
        m = self.mask_name
        # The 4-D call hands the mask to fused kernels: a bool mask becomes the additive
        # mask SDPA's math backend makes of it (0 where True, -inf where False, in q's
        # dtype; with a bool mask, cuDNN gives fully masked rows other values than the
        # math backend's zeros, H200, bf16/fp16).  A float mask never reaches them (the
        # call site sends it to the original's 5-D call).
        source = m
        if additive:
            source = f"{q}.new_zeros({m}.shape).masked_fill(~{m}, float(\"-inf\"))"
        return (
            f"None if {m} is None else {source}.reshape([1] * (5 - {m}.dim()) + list({m}.shape))"
            f".expand(-1, {h}, {w}, -1, -1).transpose(1, 2).flatten(1, 2)"
        ), (h, w)

    def evaluated_before_the_mask(self) -> None:
        """SDPA's arguments before `attn_mask=m if C else None` are names or constants: the
        emitted code tests C before the call, so nothing evaluated before it may change it."""
        for arg in self.call.args:
            if arg is self.mask_arg:
                return
            if not isinstance(arg.value, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
                raise Refuse(
                    f"SDPA's `{code(arg.value)}` is evaluated before its attn_mask's condition, which"
                    " the rewrite tests first"
                )

    def manual_tensor_scale(
        self,
        region: _Region,
        restore: _Restore,
        reshape_args: List[cst.BaseExpression],
        items: List[_Item],
        permute_at: int,
        changed: Set[str],
        q: str,
        k: str,
        v: str,
    ) -> Dict[cst.CSTNode, Replacement]:
        """A manual fallback scaled by an attribute gets a run-time check: a tensor scale
        (a per-head temperature a subclass sets) broadcasts against the dims of q, which
        the 4-D layout orders differently, so there the branch runs on 5-D views of q, k,
        v, as in the original, and its output is put back for the 4-D restore."""
        check = scale_check(self.ctx, self.func, self.manual_scales)
        if check is None:
            return {}
        if self.fallback_mask_reads:
            raise Refuse(
                f"the manual fallback adds the attn_mask (line {self.line(self.fallback_mask_reads[0])}) and its scale"
                f" needs a run-time check (`{check}`): its 5-D views would need the 5-D mask"
            )
        self.manual_check = check
        assert region.manual is not None and region.out is not None
        split = self.five_d_split(reshape_args, items, permute_at, changed, "the manual fallback's scale needs a run-time check")
        condition = f"not ({check})" if " and " in check else f"not {check}"
        windowed = self.windowed(restore)
        if windowed is not None:
            condition = f"{windowed} and {condition}"
        return five_d_views(
            self.ctx, region.manual, q, k, v, region.out, split, condition,
            "a tensor scale broadcasts against the 5-D dims (B, heads, num_windows, T, D):\n"
            "run the manual attention on 5-D views, as before",
        )

    def windowed(self, restore: _Restore) -> Optional[str]:
        """The test that selects the 5-D (windowed) path where the output is restored under
        `if C:` (two layouts, one SDPA call), else None (one layout)."""
        test = restore.condition
        if test is None:
            return None
        if restore.side == "body":
            return code(test)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return code(test.expression)
        return f"not {code(test)}"

    def on_every_path(self, name: str) -> bool:
        """``name`` is a parameter or bound by a top-level statement of the function
        (TorchScript compiles only names bound on every path to their use: timm's
        two-layout forward binds num_windows under `if self.use_mask_unit_attn:` only)."""
        flow = self.ctx.flow(self.func)
        top = list(self.func.body.body)  # type: ignore[union-attr]
        return name in flow.params or any(s.line in top for s in flow.assigning(name))

    def five_d_split(
        self, reshape_args: List[cst.BaseExpression], items: List[_Item], permute_at: int, changed: Set[str], why: str
    ) -> str:
        """`(-1, heads)` or `(num_windows, -1)`: unflatten's sizes for dim 1 of the 4-D q, k,
        v, from a size of the qkv reshape that can be read again at the attention."""
        rebound = set().union(*(item.assigned for item in items[permute_at + 1 :]))
        heads, windows = reshape_args[4], reshape_args[2]
        for expr, pattern in ((heads, "(-1, {})"), (windows, "({}, -1)")):
            names = names_in(self.ctx, expr)
            if int_value(expr) != -1 and arithmetic(expr) and not names & (rebound | changed) and all(self.on_every_path(n) for n in names):
                return pattern.format(code(expr))
        raise Refuse(
            f"{why}, and neither the heads nor the num_windows of the qkv reshape can be read again there"
            " to give it 5-D views"
        )

    # -- the attention region -------------------------------------------------------
    def region(self, sdpa_line: cst.SimpleStatementLine, q: str, k: str, v: str) -> _Region:
        ctx = self.ctx
        allowed: Set[int] = {id(a.value) for a in self.call.args if is_name(a.value, q) or is_name(a.value, k) or is_name(a.value, v)}
        assign = single_assign(sdpa_line)
        out = assign[0].value if assign is not None and is_name(assign[0]) and assign[1] is self.call else None  # type: ignore[attr-defined]
        guard: Optional[cst.If] = None
        old_torch: Optional[cst.IndentedBlock] = None
        manual: Optional[cst.IndentedBlock] = None
        temporaries: Set[str] = set()
        cur: cst.BaseStatement = sdpa_line
        while True:
            block = ctx.parent(cur)
            if not isinstance(block, cst.IndentedBlock):
                raise Refuse("SDPA is in a one-line block")
            owner = ctx.parent(block)
            if owner is self.func:
                break
            if len(block.body) != 1:
                raise Refuse("SDPA shares its block with other statements inside control flow")
            if isinstance(owner, cst.With):
                cur = owner
                continue
            if isinstance(owner, cst.If) and owner.body is block and self.is_hasattr_guard(owner) and guard is None:
                guard = owner
                if owner.orelse is not None:  # torch < 2.0's branch: kept, on 5-D views of q, k, v
                    old_torch = self.old_torch_fallback(owner, q, k, v, out)
                    allowed |= {id(n) for n in all_loads(ctx, owner.orelse)}
                cur = owner
                continue
            if isinstance(owner, cst.If) and owner.body is block:
                branch_if, other = owner, owner.orelse
            elif isinstance(owner, cst.Else):
                branch_if, other = ctx.parent(owner), None  # type: ignore[assignment]
                if isinstance(branch_if, cst.If) and branch_if.orelse is owner:
                    other = branch_if.body  # type: ignore[assignment]
            else:
                raise Refuse("SDPA is nested in control flow this rewrite does not understand")
            if isinstance(other, cst.Else):
                other = other.body  # type: ignore[assignment]
            if not isinstance(other, cst.IndentedBlock):
                raise Refuse(
                    f"SDPA is under a condition this rewrite does not understand: if {code(branch_if.test)}"
                    " (no else branch with a manual attention)"
                )
            if manual is not None or guard is not None or out is None:
                raise Refuse("SDPA is nested in control flow this rewrite does not understand")
            temporaries = self.manual_attention(other, q, k, v, out)
            manual = other
            allowed |= {id(n) for s in other.body for n in statement_names(self.ctx, s)[1]}
            cur = branch_if
        return _Region(cur, out, guard, old_torch, manual, temporaries, allowed)

    def old_torch_fallback(self, guard: cst.If, q: str, k: str, v: str, out: Optional[str]) -> cst.IndentedBlock:
        """The else branch of `if hasattr(F, "scaled_dot_product_attention"):` (torch < 2.0,
        which has no SDPA): kept, and run on 5-D views of the 4-D q, k, v, so it computes
        what the original's did whatever its scale or mask (see five_d_views).  Its ops must
        not depend on the views' strides (the proof of a manual attention: matmul, a
        numeric scale, transpose(-1, -2), softmax(dim=-1), the added attn_mask)."""
        orelse = guard.orelse
        if not isinstance(orelse, cst.Else) or not isinstance(orelse.body, cst.IndentedBlock):
            raise Refuse("the hasattr(F, \"scaled_dot_product_attention\") guard has an elif or a one-line else")
        if out is None:
            raise Refuse(
                "SDPA's output is restored on the SDPA line inside the hasattr guard, and its else branch"
                " (torch < 2.0) would need its own restore"
            )
        recorded = (list(self.manual_scales), list(self.fallback_mask_reads))
        self.manual_attention(orelse.body, q, k, v, out)
        # on 5-D views the branch reads its scale and its mask as the original did
        self.manual_scales, self.fallback_mask_reads = recorded
        return orelse.body

    def is_hasattr_guard(self, node: cst.If) -> bool:
        test = node.test
        if not (
            isinstance(test, cst.Call)
            and is_name(test.func, "hasattr")
            and len(test.args) == 2
            and isinstance(test.args[1].value, cst.SimpleString)
            and test.args[1].value.evaluated_value == "scaled_dot_product_attention"
        ):
            return False
        # hasattr(<the module SDPA is called from>, ...): torch >= 2.0 makes it True.
        func = self.call.func
        owner = test.args[0].value
        if isinstance(func, cst.Attribute):
            return same_code(owner, func.value)
        names = self.ctx.qualified_names(owner)
        return bool(names & {"torch.nn.functional", "torch._C._nn"})

    def manual_attention(self, block: cst.IndentedBlock, q: str, k: str, v: str, out: str) -> Set[str]:
        """Prove a fallback treats every leading dim as batch; return its temporaries."""
        tensors = {q, k, v}
        bound: List[str] = []
        for stmt in block.body:
            assign = single_assign(stmt) if isinstance(stmt, cst.SimpleStatementLine) else None
            if assign is None or not is_name(assign[0]):
                what = _statement_code(stmt) if isinstance(stmt, cst.SimpleStatementLine) else _header(stmt)
                raise Refuse(
                    "the manual-attention branch has a statement this rewrite cannot prove rank-agnostic:"
                    f" `{what}` at line {self.line(stmt)}"
                )
            target = assign[0].value  # type: ignore[attr-defined]
            why = self.rank_agnostic(assign[1], tensors)
            if why is not None:
                raise Refuse(f"the manual-attention branch is not provably rank-agnostic: {why}")
            if target in (q, k, v):
                raise Refuse(f"the manual-attention branch rebinds {target}")
            tensors.add(target)
            bound.append(target)
        if not bound or bound[-1] != out:
            raise Refuse(f"the manual-attention branch does not end by binding {out}")
        return set(bound) - {out}

    def rank_agnostic(self, expr: cst.BaseExpression, tensors: Set[str]) -> Optional[str]:
        """None if ``expr`` is built from ops that treat leading dims as batch, else why not."""
        if isinstance(expr, cst.Name):
            return None if expr.value in tensors else f"{expr.value} is not q, k, v or a value made from them"
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.MatrixMultiply):
                return self.rank_agnostic(expr.left, tensors) or self.rank_agnostic(expr.right, tensors)
            if isinstance(expr.operator, cst.Add) and self.mask_name is not None:
                # the logits plus SDPA's own mask: the mask is brought to 4-D there too
                for mask, other in ((expr.right, expr.left), (expr.left, expr.right)):
                    if is_name(mask, self.mask_name) and self.rank_agnostic(other, tensors) is None:
                        self.fallback_mask_reads.append(mask)  # type: ignore[arg-type]
                        return None
            if isinstance(expr.operator, (cst.Multiply, cst.Divide)):
                if self.rank_agnostic(expr.left, tensors) is None and self.scalar(expr.right):
                    self.manual_scales.append(expr.right)
                    return None
                if isinstance(expr.operator, cst.Multiply) and self.scalar(expr.left):
                    self.manual_scales.append(expr.left)
                    return self.rank_agnostic(expr.right, tensors)
                why = None
                if self.rank_agnostic(expr.left, tensors) is None:
                    why = scalar_problem(self.ctx, self.func, expr.right)
                elif isinstance(expr.operator, cst.Multiply) and self.rank_agnostic(expr.right, tensors) is None:
                    why = scalar_problem(self.ctx, self.func, expr.left)
                detail = f" ({why})" if why is not None else ""
                return f"{code(expr)} is not a tensor scaled by a provably numeric scale{detail}"
            return f"operator in {code(expr)}"
        if method_call(expr, "transpose") is not None:
            transposed = transposed_last(expr)
            if transposed is None:
                return f"{code(expr)} is not .transpose(-1, -2)"
            return self.rank_agnostic(transposed, tensors)
        softmax = softmax_operand(self.ctx, expr)
        if softmax is not None:
            spelling, operand = softmax
            if operand is not None:
                return self.rank_agnostic(operand, tensors)
            if spelling == "function":
                return f"{code(expr)} is not softmax over dim=-1"
            return f"{code(expr)} is not .softmax(dim=-1)"
        return f"{code(expr)} is not an op this rewrite knows to treat leading dims as batch"

    def scalar(self, expr: cst.BaseExpression) -> bool:
        return scalar(self.ctx, self.func, expr)

    # -- the output restore ---------------------------------------------------------
    def restore(
        self, sdpa_line: cst.SimpleStatementLine, region: _Region, block: cst.IndentedBlock, index: int
    ) -> _Restore:
        """Find `y = out.transpose(1, 3).reshape(B, N, C)` (or on the call itself)."""
        value = _restore_value(sdpa_line)
        if value is None:
            raise Refuse("SDPA's result is not assigned by a single assignment")
        matched = restore_chain(value)
        if matched is not None and matched[0] is self.call:
            if region.manual is not None:
                raise Refuse("SDPA's output is restored on the SDPA line but the fallback branch is not")
            if region.guard is not None and region.guard.body.body[0] is not sdpa_line:  # type: ignore[union-attr]
                raise Refuse("SDPA is nested in control flow this rewrite does not understand")
            return _Restore(sdpa_line, self.call, matched[1], None, "body", region.top)
        if region.out is None:
            raise Refuse("SDPA's result is not assigned to a plain name")
        out = region.out
        body = list(block.body)
        if index + 1 >= len(body):
            raise Refuse(f"SDPA's output {out} is not restored by the next statement")
        following = body[index + 1]
        if isinstance(following, cst.SimpleStatementLine):
            found = self.restore_line(following, out)
            if found is None:
                raise Refuse(f"SDPA's output {out} is not restored by {out}.transpose(1, 3).reshape(B, N, C)")
            return _Restore(following, found[0], found[1], None, "body", following)
        if isinstance(following, cst.If):
            sides = []
            for side, suite in (("body", following.body), ("orelse", following.orelse)):
                if isinstance(suite, cst.Else):
                    suite = suite.body
                if isinstance(suite, cst.IndentedBlock) and len(suite.body) == 1 and isinstance(suite.body[0], cst.SimpleStatementLine):
                    found = self.restore_line(suite.body[0], out)
                    if found is not None:
                        sides.append((side, suite.body[0], found))
            if len(sides) != 1:
                raise Refuse(
                    f"SDPA's output {out} is not restored by {out}.transpose(1, 3).reshape(B, N, C)"
                    " in exactly one branch of the next if"
                )
            if isinstance(following.orelse, cst.If):
                raise Refuse("the output restore is under an if/elif chain this rewrite does not understand")
            side, line, found = sides[0]
            if _flag_root(following.test) is None:
                raise Refuse(
                    f"the output restore is under `if {code(following.test)}`: not a plain flag that"
                    " provably has the same value as where qkv was built"
                )
            return _Restore(line, found[0], found[1], following.test, side, following)
        raise Refuse(f"SDPA's output {out} is not restored by the next statement")

    def restore_line(
        self, line: cst.SimpleStatementLine, out: str
    ) -> Optional[Tuple[cst.BaseExpression, List[cst.BaseExpression]]]:
        value = _restore_value(line)
        matched = restore_chain(value) if value is not None else None
        if matched is None or not is_name(matched[0], out):
            return None
        return matched

    # -- the windowed path ----------------------------------------------------------
    def path(
        self, before: Sequence[cst.BaseStatement], restore: Optional[_Restore]
    ) -> Tuple[List[_Item], Optional[cst.If]]:
        """Statements before the attention, with `if C:` replaced by its restore side."""
        items: List[_Item] = []
        first: Optional[cst.If] = None
        for stmt in before:
            if restore is not None and restore.condition is not None and isinstance(stmt, cst.If) and same_code(stmt.test, restore.condition):
                if restore.side == "body":
                    chosen: Sequence[cst.BaseStatement] = stmt.body.body  # type: ignore[union-attr]
                elif isinstance(stmt.orelse, cst.Else):
                    chosen = stmt.orelse.body.body  # type: ignore[union-attr]
                elif stmt.orelse is None:
                    chosen = []
                else:
                    raise Refuse(f"`if {code(stmt.test)}` has an elif chain this rewrite does not follow")
                if not isinstance(stmt.body, cst.IndentedBlock):
                    raise Refuse(f"`if {code(stmt.test)}` is a one-line block")
                first = first or stmt
                for inner in chosen:
                    assigned, loaded = statement_names(self.ctx, inner)
                    items.append(_Item(inner, assigned, loaded, stmt))
                continue
            assigned, loaded = statement_names(self.ctx, stmt)
            items.append(_Item(stmt, assigned, loaded, None))
        return items, first

    def check_condition_stable(self, restore: _Restore, block: cst.IndentedBlock, first: Optional[cst.If]) -> None:
        condition = restore.condition
        if first is None:
            raise Refuse(
                f"the output is restored under `if {code(condition)}` but qkv is not built under the same condition"
            )
        root = _flag_root(condition)  # type: ignore[arg-type]
        body = list(block.body)
        between = body[body.index(first) + 1 : body.index(restore.statement)]
        for stmt in between:
            why = _may_change(self.ctx, stmt, root)  # type: ignore[arg-type]
            if why is not None:
                raise Refuse(
                    f"`{code(condition)}` may change between the two `if {code(condition)}` ({why})"
                )

    def unpack(
        self, items: List[_Item], q: str, k: str, v: str
    ) -> Tuple[Tuple[str, List[int]], Optional[int], Optional[cst.SimpleStatementLine]]:
        def last(name: str, before: int) -> Optional[int]:
            found = [i for i in range(before) if name in items[i].assigned]
            return found[-1] if found else None

        sources = QkvSources()
        where: List[int] = []
        pool_item: Optional[int] = None
        pool_line: Optional[cst.SimpleStatementLine] = None
        for name in (q, k, v):
            at = last(name, len(items))
            nearest = at
            comp = self.component(items, at, name)
            if comp is None and name == q and at is not None:
                pool_item, pool_line = at, self.pool_line(items[at], q)
                at = last(name, pool_item)
                comp = self.component(items, at, name)
            if comp is None and nearest is not None:
                stmt = items[nearest].node
                what = _statement_code(stmt) if isinstance(stmt, cst.SimpleStatementLine) else _header(stmt)
                pooled = " nor a q-pool of the unpacked q" if name == q else ""
                raise Refuse(
                    f"{name} is bound by `{what}` at line {self.line(stmt)}, not unpacked from a qkv tensor"
                    f" (qkv[0], qkv.unbind(0), ...){pooled}"
                )
            if comp is None:
                raise Refuse(f"{name} is not bound before SDPA in this function (not unpacked from a qkv tensor)")
            sources.add(comp)
            where.append(at)  # type: ignore[arg-type]
        qkv = sources.qkv()
        if pool_item is not None and pool_item < max(where):
            raise Refuse(f"{q} is pooled before k and v are unpacked")
        return (qkv, sorted(set(where))), pool_item, pool_line

    def base_unchanged(self, permute_line: cst.BaseStatement, qkv: str, names: Set[str]) -> None:
        """Refuse where a tensor qkv is a view of (`y` of `qkv = y.permute(...)`, or of
        `qkv = y.reshape(...).permute(...)`) may be modified in place from the permute
        on: in the original, q, k and v are views of it and see the change; the
        rewritten qkv is a copy (the flatten) and would not."""
        if self.flow is None:
            self.flow = InplaceFlow(self.ctx)
        bases = self.flow.storage_names(self.func, qkv) - names
        if not bases:
            return
        outcome = self.flow.follow(self.func, permute_line, seed_names=sorted(bases))
        if outcome.hazards:
            what = outcome.hazards[0].replace(WHAT, f"the tensor {qkv} is a view of (`{'`, `'.join(sorted(bases))}`)")
            raise Refuse(f"{what}: q, k and v of the original are views of it, the 4-D qkv is a copy")

    def unbind(self, line: cst.BaseStatement, qkv: str) -> Optional[cst.BaseStatement]:
        """`q, k, v = qkv.unbind(0)` for `q, k, v = qkv[0], qkv[1], qkv[2]`, or None.

        The same three views; the backward is one `stack` instead of three
        `select_backward` (each a zero-filled qkv-sized tensor and a copy) and two adds
        of them.  But unbind's outputs are multi-output views: an in-place op on one
        raises where the select form runs, so it is emitted only where the in-place flow
        (HR002's) finds no in-place op on qkv, q, k or v, nothing that may do one
        (a call it does not know, an attribute store, a closure), and no return."""
        assert isinstance(line, cst.SimpleStatementLine)
        assign = single_assign(line)
        if assign is None or not isinstance(assign[1], cst.Tuple):
            return None  # already unbind, or a tuple name
        if self.flow is None:
            self.flow = InplaceFlow(self.ctx)
        outcome = self.flow.follow(self.func, line, seed_names=[qkv])
        if outcome.hazards or outcome.returned:
            return None
        return self.ctx.statement(f"{target_code(line)} {qkv}.unbind(0)", like=line)

    def component(self, items: List[_Item], at: Optional[int], name: str) -> Optional[Tuple[str, int]]:
        if at is None or not isinstance(items[at].node, cst.SimpleStatementLine):
            return None
        return component(items[at].node, name)  # type: ignore[arg-type]

    def pool_line(self, item: _Item, q: str) -> cst.SimpleStatementLine:
        node = item.node
        if isinstance(node, cst.If) and node.orelse is None and isinstance(node.body, cst.IndentedBlock):
            if len(node.body.body) == 1 and isinstance(node.body.body[0], cst.SimpleStatementLine):
                node = node.body.body[0]
        if isinstance(node, cst.SimpleStatementLine):
            assign = single_assign(node)
            if assign is not None and is_name(assign[0], q):
                return node
        what = _statement_code(node) if isinstance(node, cst.SimpleStatementLine) else _header(node)
        raise Refuse(f"{q} is reassigned by `{what}` at line {self.line(node)}, not by a q-pool max")

    def qkv_definition(
        self, items: List[_Item], qkv: str, first_unpack: int, last_unpack: int
    ) -> Tuple[int, List[cst.BaseExpression], cst.BaseExpression]:
        defs = [i for i in range(first_unpack) if qkv in items[i].assigned]
        if not defs:
            raise Refuse(f"{qkv} is not assigned before the unpack on this path")
        at = defs[-1]
        if any(qkv in items[i].assigned for i in range(first_unpack, last_unpack)):
            raise Refuse(f"{qkv} is rebound between the unpacks of q, k and v")
        node = items[at].node
        if not isinstance(node, cst.SimpleStatementLine):
            raise Refuse(f"{qkv} is built inside control flow this rewrite does not follow")
        assign = single_assign(node)
        found = method_call(assign[1], "permute") if assign else None
        if found is None or not is_name(assign[0], qkv):  # type: ignore[index]
            raise Refuse(f"{qkv} is not a bare .permute(...) of a 6-D reshape: not the 5-D mask-unit layout")
        receiver, permute_call = found
        if int_args(permute_call) != FIVE_D_PERMUTE:
            raise Refuse(f"{qkv} is made by {code(permute_call.func)}(...) with another order than (3, 0, 4, 2, 1, 5)")
        reshape = method_call(receiver, "reshape", "view")
        if reshape is None and is_name(receiver):
            # reshape and permute as separate statements
            name = receiver.value  # type: ignore[attr-defined]
            rdefs = [i for i in range(at) if name in items[i].assigned]
            rnode = items[rdefs[-1]].node if rdefs else None
            rassign = single_assign(rnode) if isinstance(rnode, cst.SimpleStatementLine) else None
            if rassign is not None and is_name(rassign[0], name):
                reshape = method_call(rassign[1], "reshape", "view")
                if reshape is not None and rdefs[-1] + 1 < at:
                    # the sizes (heads, num_windows) are read again where SDPA runs: code between
                    # the two may rebind a name they read (`H = W = ...`) or change an attribute
                    raise Refuse(f"code runs between {name}'s reshape and the permute: the sizes the reshape read are not proven the same after it")
        if reshape is None:
            raise Refuse(f"{qkv} is not a reshape of the qkv projection into 6 dims")
        args = qkv_sizes(reshape[1])
        if args is None:
            raise Refuse(f"{qkv} is not reshaped to (B, T, num_windows, 3, heads, head_dim)")
        return at, args, receiver

    def pool(
        self,
        q: str,
        line: cst.SimpleStatementLine,
        items: List[_Item],
        permute_at: int,
        pool_at: int,
        batch: cst.BaseExpression,
        heads: cst.BaseExpression,
        windows: cst.BaseExpression,
        head_dim: cst.BaseExpression,
        changed: Set[str],
    ) -> cst.BaseStatement:
        assign = single_assign(line)
        reduced = reduction_values(assign[1]) if assign and is_name(assign[0], q) else None
        if reduced is None:
            raise Refuse(f"{q} is reassigned by `{_statement_code(line)}` at line {self.line(line)}, not by a q-pool max")
        spelling, pooled, dim = reduced
        args = pool_view_args(pooled, q)
        if args is None or dim not in (3, -3):
            raise Refuse(f"{q}'s pool is not q.view(B, heads, num_windows, q_stride, -1, head_dim).max(dim=3)")
        rebound = set().union(*(item.assigned for item in items[permute_at + 1 : pool_at]))
        for got, want in ((args[0], batch), (args[1], heads), (args[2], windows), (args[5], head_dim)):
            if not same_code(got, want) or names_in(self.ctx, want) & rebound:
                raise Refuse(f"the q-pool view's {code(got)} is not provably the qkv reshape's {code(want)}")
        for arg in args:
            self.not_reading(arg, changed, "the q-pool view")
        # The same reduction as the user's: .max(...).values keeps its gradient rule
        # for tied maxima and saves only indices (an in-place op on q stays legal).
        reduce = ".amax(dim=2)" if spelling == "amax" else ".max(dim=2).values"
        return self.ctx.statement(
            f"{_layout_target(line)} {q}.unflatten(2, ({code(args[3])}, {code(args[4])})){reduce}",
            like=line,
        )

    # -- checks ---------------------------------------------------------------------
    def line(self, node: cst.CSTNode) -> int:
        return self.ctx.span(node).start.line

    def not_reading(self, expr: cst.BaseExpression, names: Set[str], what: str) -> None:
        read = names_in(self.ctx, expr) & names
        if read:
            raise Refuse(f"{what} reads {sorted(read)[0]}, whose layout changes")

    def no_closure_reads(self, names: Set[str]) -> None:
        """A nested def or lambda that reads q/k/v/qkv may run after the attention."""
        nested: List[cst.CSTNode] = []

        class _Nested(cst.CSTVisitor):
            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                nested.append(node)
                return False

            def visit_Lambda(self, node: cst.Lambda) -> bool:
                nested.append(node)
                return False

        self.ctx.visit(_Nested(), self.func.body)
        for node in nested:
            for name in all_loads(self.ctx, node):
                if name.value in names:
                    raise Refuse(f"a nested function reads {name.value} (line {self.line(name)}): its layout changes")

    def no_reads_after(self, stmt: cst.CSTNode, names: Set[str], why: str) -> None:
        """No name in ``names`` is read after ``stmt`` (up to a top-level return)."""
        end = self.ctx.span(stmt).end
        stop = None
        for top in self.func.body.body:  # type: ignore[union-attr]
            if self.ctx.span(top).start > end and isinstance(top, cst.SimpleStatementLine):
                if any(isinstance(s, (cst.Return, cst.Raise)) for s in top.body):
                    stop = self.ctx.span(top).end  # code after it never runs
                    break
        for node in all_loads(self.ctx, self.func.body):
            if node.value in names:
                start = self.ctx.span(node).start
                if start > end and (stop is None or start <= stop):
                    raise Refuse(f"{node.value} is read after the attention at line {start[0]}: {why}")


# -- helpers --------------------------------------------------------------------------



def five_d_views(
    ctx: PlanContext,
    block: cst.IndentedBlock,
    q: str,
    k: str,
    v: str,
    out: str,
    split: str,
    condition: Optional[str],
    why: str,
) -> Dict[cst.CSTNode, Replacement]:
    """A kept manual attention run as the original ran it: q, k, v made 5-D views
    (B, heads, num_windows, T, D) of the 4-D ones before its first statement, its 5-D
    output put back in the 4-D order after its last (the restore below transposes (1, 2),
    not (1, 3)); under ``if condition:`` when given, else always."""
    comment = "".join(f"# {line}\n" for line in why.split("\n"))
    to_5d = [f"{t} = {t}.unflatten(1, {split}).transpose(1, 2)\n" for t in (q, k, v)]
    back = f"{out} = {out}.transpose(1, 3).transpose(1, 2)"
    if condition is not None:
        indent = lambda text: "".join(f"    {line}\n" for line in text.splitlines())  # noqa: E731
        back = f"# back to 4-D order: the restore below transposes (1, 2), not (1, 3)\n{back}\n"
        first_src, last_src = [f"if {condition}:\n{indent(comment + ''.join(to_5d))}"], [f"if {condition}:\n{indent(back)}"]
    else:
        first_src, last_src = [comment + to_5d[0], *to_5d[1:]], [f"{back}  # back to 4-D order\n"]
    body = list(block.body)
    first = [ctx.statement(src, like=body[0], replaces=False) for src in first_src]  # type: ignore[arg-type]
    last = [ctx.statement(src, like=body[-1], replaces=False) for src in last_src]  # type: ignore[arg-type]
    if len(body) == 1:
        return {body[0]: lambda updated: cst.FlattenSentinel([*first, updated, *last])}
    return {
        body[0]: lambda updated: cst.FlattenSentinel([*first, updated]),
        body[-1]: lambda updated: cst.FlattenSentinel([updated, *last]),
    }

def _already_4d(ctx: PlanContext, func: Optional[cst.FunctionDef], call: cst.Call) -> bool:
    """SDPA's k and v come from this rewrite's (or HR006's) own 4-D qkv: the code is
    already rewritten, so a second pass says nothing about it.

    k and v (positional or keyword) are plain names; an assignment of each that can
    reach the call takes a component of a name that an assignment reaching that one
    binds to `<6-D reshape>.permute(3, 0, 2, 4, 1, 5).flatten(2, 3)` (HR001's form) or
    `.flatten(1, 2)` (HR006's).  No 5-D look-alike has that permute-and-flatten."""
    if func is None:
        return False
    slots = {"key": 1, "value": 2}
    names: Dict[str, str] = {}
    for i, arg in enumerate(call.args):
        if arg.keyword is not None:
            slot: Optional[str] = arg.keyword.value
        else:
            slot = ("query", "key", "value")[i] if i < 3 and not arg.star else None
        if slot in slots and is_name(arg.value):
            names[slot] = arg.value.value  # type: ignore[attr-defined]
    line = enclosing_line(ctx, call)
    if set(names) != set(slots) or line is None:
        return False
    flow = ctx.flow(func)
    for name in names.values():
        found = False
        for stmt in _reaching(ctx, flow, line, name):
            unpacked = component(stmt.line, name)
            if unpacked is None:
                continue
            for earlier in _reaching(ctx, flow, stmt.line, unpacked[0]):
                assign = single_assign(earlier.line)
                if assign is not None and is_name(assign[0], unpacked[0]) and _emitted_4d(assign[1]):
                    found = True
        if not found:
            return False
    return True


def _reaching(ctx: PlanContext, flow: "FunctionFlow", line: cst.SimpleStatementLine, name: str) -> List:
    """The statements before ``line`` that bind ``name`` and may be the last to do so:
    going back in source order, up to the first one in a block around ``line``."""
    around = {id(a) for a in ctx.ancestors(line)}
    try:
        at = flow.stmt_of(line).index
    except KeyError:
        return []
    found = []
    for stmt in reversed(flow.stmts[:at]):
        if name not in stmt.assigned or not stmt.line.body:  # (compound headers: not a plain binding)
            continue
        found.append(stmt)
        if id(ctx.parent(stmt.line)) in around:
            break
    return found


def _emitted_4d(value: cst.BaseExpression) -> bool:
    """`X.permute(3, 0, 2, 4, 1, 5).flatten(2, 3)` or `.flatten(1, 2)`, X a name or a
    reshape/view to (B, T, num_windows, 3, heads, head_dim)."""
    found = method_call(value, "flatten")
    if found is None or int_args(found[1]) not in ([2, 3], [1, 2]):
        return False
    permute = method_call(found[0], "permute")
    if permute is None or int_args(permute[1]) != FOUR_D_PERMUTE:
        return False
    if is_name(permute[0]):
        return True
    reshape = method_call(permute[0], "reshape", "view")
    return qkv_sizes(reshape[1] if reshape else None) is not None


def _mask_name(value: cst.BaseExpression) -> str:
    """The local name SDPA's attn_mask reads: `m`, `m if C else None`, `None if C else m`."""
    if isinstance(value, cst.IfExp):
        sides = [value.body, value.orelse]
        names = [s for s in sides if is_name(s) and not is_name(s, "None")]
        if len(names) == 1 and any(is_name(s, "None") for s in sides):
            return names[0].value  # type: ignore[attr-defined]
    elif is_name(value) and value.value not in ("None", "True", "False"):  # type: ignore[attr-defined]
        return value.value  # type: ignore[attr-defined]
    raise Refuse(
        f"SDPA's attn_mask is `{code(value)}`: not a name (or `name if C else None`) whose 5-D layout"
        " this rewrite brings to 4-D"
    )


def _shape_annotation(line: cst.SimpleStatementLine) -> Optional[cst.Subscript]:
    """The annotation of an annotated assignment (or declaration) when it is a
    subscript with a string in it, a shape (jaxtyping's `Float[Tensor, "B H nw T D"]`)."""
    small = line.body[0] if len(line.body) == 1 else None
    if not isinstance(small, cst.AnnAssign):
        return None
    annotation = small.annotation.annotation
    if not isinstance(annotation, cst.Subscript) or len(annotation.slice) < 2:
        return None
    strings = [e for e in annotation.slice if isinstance(e.slice, cst.Index) and isinstance(e.slice.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))]
    first = annotation.slice[0].slice
    return annotation if strings and isinstance(first, cst.Index) else None


def _layout_target(line: cst.SimpleStatementLine) -> str:
    """``target: annotation =`` of a line whose value changes layout: a shape annotation
    becomes its array type, after a comment that keeps the old one (it is documentation)."""
    annotation = _shape_annotation(line)
    if annotation is None:
        return target_code(line)
    small = line.body[0]
    array = annotation.slice[0].slice.value  # type: ignore[union-attr]
    return (
        f"# was {code(annotation)}: the shape of the 5-D layout, which this line no longer has\n"
        f"{code(small.target)}: {code(array)} ="  # type: ignore[union-attr]
    )


def _statement_code(line: cst.SimpleStatementLine) -> str:
    """A statement on one line for a message, without the comment lines above it."""
    return code(line.with_changes(leading_lines=[]))


def _header(stmt: cst.BaseStatement) -> str:
    """The first line of a compound statement, e.g. `if attn_mask is not None:`."""
    lines = cst.Module(body=[]).code_for_node(stmt).splitlines()
    return next(line.strip() for line in lines if line.strip() and not line.strip().startswith("#"))


def _leaves(expr: cst.BaseExpression) -> List[cst.BaseExpression]:
    if isinstance(expr, cst.UnaryOperation):
        return _leaves(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return _leaves(expr.left) + _leaves(expr.right)
    return [expr]


def _replace_name(root: cst.CSTNode, target: cst.Name, source: str) -> cst.CSTNode:
    """``root`` with the Name node ``target`` replaced by the expression ``source``."""
    replacement = cst.parse_expression(source)

    class _Replace(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
            return replacement if original is target else updated

    return root.visit(_Replace())


def _is_zero(node: cst.BaseExpression) -> bool:
    if int_value(node) == 0:
        return True
    return isinstance(node, cst.Float) and float(node.value) == 0.0


def _flag_root(test: cst.BaseExpression) -> Optional[str]:
    """The root name of a plain flag: `name`, `self.attr`, `not self.attr`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _flag_root(test.expression)
    node = test
    while isinstance(node, cst.Attribute):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def _may_change(ctx: PlanContext, stmt: cst.BaseStatement, root: str) -> Optional[str]:
    """Why running ``stmt`` may change a flag read through ``root`` (None: it cannot)."""
    assigned, _ = statement_names(ctx, stmt)
    if root in assigned:
        return f"{root} is rebound"
    reasons: List[str] = []

    def rooted(node: cst.BaseExpression) -> bool:
        while isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        return is_name(node, root)

    class _Visitor(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            if any(rooted(t) for t in flatten_targets(node.target)):
                reasons.append(f"an assignment to {code(node.target)}")

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if rooted(node.target):
                reasons.append(f"an assignment to {code(node.target)}")

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if rooted(node.target):
                reasons.append(f"an assignment to {code(node.target)}")

        def visit_Del(self, node: cst.Del) -> None:
            reasons.append("a del statement")

        def visit_Call(self, node: cst.Call) -> None:
            if rooted(node.func) or any(rooted(a.value) for a in node.args):
                reasons.append(f"a call {code(node.func)}(...) that can reach {root}")

    ctx.visit(_Visitor(), stmt)
    return reasons[0] if reasons else None


def _restore_value(line: cst.SimpleStatementLine) -> Optional[cst.BaseExpression]:
    """The value of `target = <value>` or `return <value>`."""
    assign = single_assign(line)
    if assign is not None:
        return assign[1]
    if len(line.body) == 1 and isinstance(line.body[0], cst.Return):
        return line.body[0].value
    return None


def _restore_prefix(line: cst.SimpleStatementLine) -> str:
    return "return" if isinstance(line.body[0], cst.Return) else target_code(line)


def _five_d_view(expr: cst.BaseExpression) -> bool:
    """``q.unflatten(1, (...)).transpose(1, 2)``: the 5-D view of a 4-D q the float
    attn_mask branch this rewrite emits gives SDPA."""
    outer = method_call(expr, "transpose")
    inner = method_call(outer[0], "unflatten") if outer is not None else None
    return (
        inner is not None and is_name(inner[0])
        and [int_value(a.value) for a in outer[1].args] == [1, 2]  # type: ignore[index]
        and len(inner[1].args) == 2 and int_value(inner[1].args[0].value) == 1
    )
