"""HR002: max-pooling over an unrolled stride, `.max(dim=k).values` -> `.amax(dim=k)`.

Matches a max-reduction whose input is a `.view(...)`/`.reshape(...)` (the Unroll
pooling idiom of `do_pool` and of the q-pool), spelled `.max(dim=k).values`,
`.max(k).values` or `.max(dim=k)[0]`.  The receiver keeps its formatting: only
the reduction call is replaced.

`.amax` saves its input and its output for backward, `.max(...).values` only its
indices: an in-place op on either one before backward would raise after the rewrite
where the original ran.  Each site is followed through its function
(codemods/_inplace.py) and refused where an in-place op, or code that may do one,
can reach the pooled tensor or the tensor it pools.  A pooled tensor the function
returns gets `.clone()` (callers anywhere may modify it in place; the copy costs
nothing measurable next to the reduction, benchmarks/pool_forms.py).
"""

from __future__ import annotations

from typing import List, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import enclosing_function
from hiera_rewrite.rewrite import PlanContext, Refuse, Rewrite, register

from ._match import code, method_call, reduction_values
from ._inplace import ALIAS_ATTRS, ALIAS_METHODS, WHAT, InplaceFlow


@register
class PoolAmax(Rewrite):
    code = "HR002"
    default = False  # opt-in: measured slower in eager, and not exact for tied maxima
    name = "pool-amax"
    message = "max-pool: .max(dim=k).values -> .amax(dim=k) (no unused int64 index tensor)"
    clone_message = (
        "max-pool: .max(dim=k).values -> .amax(dim=k).clone() (no unused int64 index tensor;"
        " returned, so a caller may modify it in place)"
    )
    explanation = """
    Opt-in (`--select HR002`): not run by default, because it does not pay.
    Measured on an H200, bf16, Hiera-Base MAE at 224 px, B=128 (2026-12-01):
    the Hiera-Base step's pooling windows hold bit-identical maxima in 1.8e-3 of
    cases (do_pool and q-pool alike; benchmarks/ties.py), where `.amax` splits the
    gradient and the original gives it to one element; the pool's forward+backward
    is about 2.4x slower in eager (do_pool 202 -> 485 us of GPU time) and 0-15%
    faster compiled (104 -> 89 us); the eager step was 56.05 ms with `.amax` in
    do_pool and the q-pool vs 55.09 ms with `.max(...).values` (two runs of one
    machine); peak memory 8.11 vs 8.21 GiB compiled.  Select it for that memory.
    HR001 keeps the q-pool's own reduction for the same reasons.

    Hiera max-pools by viewing the stride as its own dimension and reducing it:
    `x.view(B, stride, -1, C).max(dim=1).values` (do_pool) and the q-pool in the
    attention.  `Tensor.max(dim)` returns values *and* an int64 index tensor; the
    indices are never used, but they are computed, written to memory and kept
    alive for backward.  `Tensor.amax(dim)` returns the same values and nothing
    else, so the forward writes less.  Its backward is not cheaper: it keeps the
    input and the output (not the indices) and finds the maxima again.  Measured
    on an H200 in bf16 at Hiera-Base MAE shapes (benchmarks/pool_forms.py), the
    pool's forward+backward GPU time is 0-15% lower under torch.compile, and
    about 2.5x higher in eager mode.

    Forward values are identical.  The gradient differs when two inputs of a
    pooling window are bit-identical maxima: `.max(...).values` sends the whole
    gradient to one of them, `.amax` splits it evenly between them; and when a
    window holds a NaN: `.amax`'s backward gives every input of that window a NaN
    gradient (even where the gradient reaching the pool is 0, as after
    `torch.nan_to_num`), `.max(...).values` only the NaN's own.

    `.amax` keeps its input and its output for backward (`.max(...).values` keeps
    only the indices), so an in-place op on either before backward would raise
    after the rewrite.  The pooled tensor and the tensor it pools are followed
    through the function (views, aliases, branches, loops; calls to `torch`,
    `torch.nn` modules and functions of the same file); a site is skipped, with
    the op and its line, where an in-place op (`x += ...`, `x[...] = ...`,
    `x.mul_(...)`, `torch.relu_(x)`, `inplace=True`, `out=x`) or code that may do
    one (an unknown function or module it is passed to, an attribute, or a
    container other code can reach, it is stored in) can reach either; for the
    tensor it pools also before the pool, and where it comes from (a global, an
    attribute or an item of one, a loop over one, a call not known to make a new
    tensor that it does not keep).  A pooled tensor the function returns becomes
    `.amax(dim=k).clone()`: the callers, in any file, may then modify it in
    place; under torch.compile the copy adds nothing measurable, in eager mode
    1-3% of the pool's time.  A pooled parameter is checked where its function is
    called, in the file and in the other modules of its folder (the other files of
    the run, a script beside them); the site is skipped where its callers are not
    all found: a method (but a module's `forward`), a function passed as a value,
    rebound, imported under another name or called with `*args`.  What callers
    outside the folder (and a `forward`'s callers) do with the tensor they passed
    in is not seen: they are assumed not to modify it in place before backward.
    """

    def plan(self, ctx: PlanContext) -> None:
        finder = _Reductions()
        ctx.visit(finder)
        if not finder.found:
            return
        flow = InplaceFlow(ctx)
        for node in finder.found:
            found = ctx.attempt(node, lambda: _amax_site(ctx, flow, node))
            if found is not None:
                replacement, clone = found
                ctx.add_site(node, {node: replacement}, self.clone_message if clone else None)


def _amax_site(ctx: PlanContext, flow: InplaceFlow, node: "cst.Attribute | cst.Subscript") -> Tuple[cst.BaseExpression, bool]:
    """The `.amax` replacement of a q-pool/do_pool max, and whether it clones."""
    clone = _check_inplace(ctx, flow, node)
    return _amax(node, clone), clone


def _check_inplace(ctx: PlanContext, flow: InplaceFlow, node: "cst.Attribute | cst.Subscript") -> bool:
    """Refuse where an in-place op may reach the pooled tensor or its input before
    backward; whether the pooled tensor is returned (then it is cloned)."""
    func = enclosing_function(ctx, node)
    if func is None:
        raise Refuse("not inside a function: HR002 follows the pooled tensor through the function that pools it")
    point = _statement_of(ctx, node)
    result = flow.follow(func, point, seed_nodes=[node])
    if result.hazards:
        raise Refuse(_reason(result.hazards[0], "the pooled tensor", "output"))
    reduced = reduction_values(node)
    assert reduced is not None
    root = _storage_root(reduced[1])
    if isinstance(root, cst.Attribute):
        raise Refuse(
            f"it pools `{code(root)}`, which other code may modify in place before backward"
            " (.amax saves its input for backward, .max(...).values does not)"
        )
    if isinstance(root, cst.Name):
        names = [root.value]
    else:
        # a call, `a if c else b`, a walrus...: what other code may hold, or the names
        # whose storage its value may share (`torch.flatten(h)`, `(h := x * 2)`)
        held, names = flow.view_names(root)
        if held is not None:
            raise Refuse(_reason(held, "the tensor it pools", "input"))
    for name in dict.fromkeys(names):
        _check_input(ctx, flow, func, point, name)
    return result.returned


def _check_input(ctx: PlanContext, flow: InplaceFlow, func: cst.FunctionDef, point: cst.CSTNode, name: str) -> None:
    """The tensor it pools shares the storage of the local ``name``: nothing may keep or
    modify that storage, before the pool or after, nor may it come from what other code
    holds; a parameter is checked at its callers."""
    role = f"the tensor it pools (`{name}`)"
    group = flow.storage_names(func, name)
    # before the pool too: what keeps it (a store, a call that may store it) lets
    # other code modify it after the pool
    kept = flow.kept(func, group)
    if kept:
        raise Refuse(_reason(kept[0], role, "input"))
    held = flow.held_elsewhere(func, group)
    if held is not None:
        raise Refuse(_reason(held, role, "input"))
    source = flow.follow(func, point, seed_names=sorted(group))
    if source.hazards:
        raise Refuse(_reason(source.hazards[0], role, "input"))
    if source.returned:
        raise Refuse(
            f"{role} is returned, and a caller may modify it in place"
            " before backward (.amax saves its input for backward, .max(...).values does not)"
        )
    if group & _param_names(func):
        _check_callers(ctx, flow, func, sorted(group & _param_names(func)))


def _reason(hazard: str, role: str, saved: str) -> str:
    text = hazard.replace(WHAT, role)
    text += " before backward" if text.endswith("in place") else ", so it may be modified in place before backward"
    return text + f" (.amax saves its {saved} for backward, .max(...).values does not)"


def _param_names(func: cst.FunctionDef) -> Set[str]:
    params = func.params
    return {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]}


def _check_callers(ctx: PlanContext, flow: InplaceFlow, func: cst.FunctionDef, params: List[str]) -> None:
    """A pooled parameter is the caller's tensor: where the function is called (in this
    file, and in the other modules of its folder: the other files of the run, scripts
    beside them), the caller must not modify what it passed in place after the call, nor
    keep it.  Refused where the callers are not all found: a method (its calls are not
    resolved), a function passed as a value or rebound, imported under another name or
    referenced otherwise than by a call in a module beside it.  (Modules outside the
    folder are not read; see the explanation.)"""
    name = func.name.value
    calls = flow.calls_of(func)
    if calls is None and name == "forward" and isinstance(ctx.parent(ctx.parent(func)), cst.ClassDef):  # type: ignore[arg-type]
        return  # a module's forward: its callers call the module, in any file (see the explanation)
    if calls is None:
        kind = "a method" if any(isinstance(a, cst.ClassDef) for a in ctx.ancestors(func)) else "a function"
        raise Refuse(
            f"it pools a parameter of {kind} (`{name}`) whose callers are not all seen (called other than"
            " directly by its name in this file, or passed as a value), which may modify the tensor they"
            " pass in place before backward (.amax saves its input for backward, .max(...).values does not)"
        )
    for call in calls:
        _check_call(ctx, flow, func, call, params)
    if any(isinstance(a, (cst.ClassDef, cst.FunctionDef)) for a in ctx.ancestors(func)):
        return  # (calls_of finds no callers of a nested def: refused above)
    if ctx.beside_unread():
        raise Refuse(
            f"it pools a parameter of `{name}`, whose callers in the modules beside this file are not read"
            " (too many modules): they may modify the tensor they pass in place before backward"
            " (.amax saves its input for backward, .max(...).values does not)"
        )
    for module in ctx.modules_beside([name.encode()]) or ():
        if module is ctx.module:
            continue
        octx = ctx.context_of(module)
        oflow = flow.sibling_flow(octx)
        for call in _references(octx, module, name):
            _check_call(octx, oflow, func, call, params, elsewhere=True)


def _references(ctx: PlanContext, module: cst.Module, name: str) -> List[cst.Call]:
    """The calls of ``name`` in ``module`` (another module of the folder): `name(...)`,
    `m.name(...)`; Refuse where it is referenced otherwise (passed as a value, imported
    under another name)."""
    calls: List[cst.Call] = []
    for node in ctx.nodes(cst.ImportAlias):
        alias = node  # type: cst.ImportAlias
        if code(alias.name).rsplit(".", 1)[-1] == name and alias.asname is not None:
            raise Refuse(f"`{name}` is imported as another name at line {ctx.position(alias).line} of a module beside this file: its callers there are not seen")
    for node in [*ctx.nodes(cst.Name), *ctx.nodes(cst.Attribute)]:
        if isinstance(node, cst.Name):
            if node.value != name:
                continue
            parent = ctx.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue  # as an attribute: below
            if isinstance(parent, cst.Arg) and parent.keyword is node or isinstance(parent, (cst.FunctionDef, cst.Param)) and parent.name is node:
                continue  # `f(do_pool=...)`, its own `def do_pool` or parameter (their calls are checked too)
        elif node.attr.value != name:  # type: ignore[union-attr]
            continue
        parent = ctx.parent(node)
        if isinstance(parent, cst.Call) and parent.func is node:
            calls.append(parent)
            continue
        if any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in ctx.ancestors(node)):
            continue  # `from .hiera_utils import do_pool` (another name: refused above)
        raise Refuse(
            f"`{name}` is referenced other than by a call at line {ctx.position(node).line} of a module beside"
            " this file: its callers there are not seen"
        )
    return calls


def _check_call(ctx: PlanContext, flow: InplaceFlow, func: cst.FunctionDef, call: cst.Call, params: List[str], elsewhere: bool = False) -> None:
    """The caller at ``call`` (of ``ctx``'s module) leaves alone and keeps nowhere what it
    passes for ``params``."""
    where = f"line {ctx.position(call).line}" + (" of a module beside this file" if elsewhere else "")
    fname = func.name.value
    if any(a.star for a in call.args):
        raise Refuse(f"{fname} is called with `*`/`**` arguments at {where}: what it pools there is not followed")
    caller = enclosing_function(ctx, call)
    for param in params:
        passed = flow.param_for(func, call, param)
        if passed is None:
            continue
        role = f"the tensor it pools (passed to {fname} at {where})"
        if caller is None:
            raise Refuse(f"{fname} is called outside a function at {where}: what it pools there is not followed")
        held, names = flow.view_names(passed)  # `pool(self.buf)`, `pool(self.make(x))`
        if held is not None:
            raise Refuse(_reason(held, role, "input"))
        for name in dict.fromkeys(names):
            group = flow.storage_names(caller, name)
            after = flow.follow(caller, _statement_of(ctx, call), seed_names=sorted(group))
            # the call's own statement reads it as an argument; only later uses count,
            # and anything, before or after, that may keep it or that it may come from
            hazards = [h for h in after.hazards + flow.kept(caller, group) if f"`{fname}(...)`" not in h]
            held = flow.held_elsewhere(caller, group)
            if held is not None:
                hazards.append(held)
            if hazards:
                raise Refuse(_reason(hazards[0], f"the tensor it pools (`{name}`, passed to {fname} at {where})", "input"))


def _statement_of(ctx: PlanContext, node: cst.CSTNode) -> cst.CSTNode:
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return ancestor
    raise Refuse("not inside a statement")


def _storage_root(expr: cst.BaseExpression) -> cst.BaseExpression:
    """The expression whose storage ``expr`` (the pooled view) shares: through views,
    indexing and alias attributes down to a name, an attribute or a call."""
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ALIAS_METHODS:
            expr = expr.func.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in ALIAS_ATTRS:
            expr = expr.value
        else:
            return expr


def _amax(node: "cst.Attribute | cst.Subscript", clone: bool = False) -> cst.BaseExpression:
    """``X.max(k).values`` / ``X.max(k)[0]`` -> ``X.amax(k)`` (``X.amax(k).clone()``),
    keeping layout and comments.

    Only the ``.max`` name changes and the ``.values``/``[0]`` goes; a comment that
    sat before the dropped ``.values`` moves to the line of the closing parenthesis.
    """
    max_call = node.value
    assert isinstance(max_call, cst.Call) and isinstance(max_call.func, cst.Attribute)
    lpar = [*node.lpar, *max_call.lpar]
    rpar = [*max_call.rpar, *node.rpar]
    if isinstance(node, cst.Subscript):
        if _has_comment(node.lbracket) or _has_comment(node.rbracket) or _has_comment(node.whitespace_after_value):
            raise Refuse("a comment inside the [0] would be lost")
    else:
        dropped = node.dot.whitespace_before
        if _has_comment(node.dot.whitespace_after):
            raise Refuse("a comment inside .values would be lost")
        if _has_comment(dropped):
            assert isinstance(dropped, cst.ParenthesizedWhitespace)
            if not node.rpar:
                raise Refuse("a comment before .values would be lost (no closing parenthesis to move it to)")
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
    if not clone:
        return max_call.with_changes(func=max_call.func.with_changes(attr=cst.Name("amax")), lpar=lpar, rpar=rpar)
    inner = max_call.with_changes(func=max_call.func.with_changes(attr=cst.Name("amax")))
    return cst.Call(
        func=cst.Attribute(value=inner, attr=cst.Name("clone")),
        lpar=lpar[: len(node.lpar)],
        rpar=rpar[len(max_call.rpar):],
    )


def _has_comment(node: cst.CSTNode) -> bool:
    found = []

    class _Comments(cst.CSTVisitor):
        def visit_Comment(self, comment: cst.Comment) -> None:
            found.append(comment)

    node.visit(_Comments())
    return bool(found)


def _torch_only(node: cst.BaseExpression) -> bool:
    """`.max(...).values`, or `.max(dim=k)[0]`: spelled so only a tensor runs it (numpy's
    `a.reshape(...).max(1)[0]` is the first row of the maxima, and an array has no `.amax`)."""
    if isinstance(node, cst.Attribute):
        return True
    found = method_call(node.value, "max") if isinstance(node, cst.Subscript) else None  # type: ignore[attr-defined]
    return found is not None and any(a.keyword is not None and a.keyword.value == "dim" for a in found[1].args)


class _Reductions(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: list = []

    def _check(self, node: cst.BaseExpression) -> None:
        reduced = reduction_values(node)
        if reduced is not None and reduced[0] == "max" and method_call(reduced[1], "view", "reshape") and _torch_only(node):
            self.found.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._check(node)
