"""A unit mask made from the caller's kept indices: ``mask = H(ids_keep, n)`` where the
module-level function H (in the file, or imported from a module the file imports)
returns a (B, n) tensor that is zero except at (r, ids_keep[r, j]):

    def mask_from_indices(indices, seq_len):
        B = indices.size(0)
        row_indices = torch.arange(B, device=indices.device).unsqueeze(1).expand_as(indices)
        mask = torch.zeros([B, seq_len], device=indices.device)
        mask[row_indices.flatten(), indices.flatten()] = 1
        return mask

    def mask_from_indices(ids_keep, num_units):
        mask = torch.zeros(ids_keep.shape[0], num_units, device=ids_keep.device)
        return mask.scatter(1, ids_keep, 1.0)

Cast to bool, row r keeps one unit per *distinct* index of ids_keep[r]: ids_keep.shape[1]
units where no row repeats an index.  That is the caller's data, which no file proves,
so the count is checked: ``kept_tokens`` asserts (``torch._assert_async``) that every row
of the mask keeps exactly that many units.  A row repeating an index then raises (the original
keeps fewer units there); no other row count is ever selected.

The vocabulary is exactly the statements above (any order of the row-index and zeros
statements; ``scatter_`` or ``mask = mask.scatter(...)``; the value 1, 1.0 or True);
anything else is not proven.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import libcst as cst

from hiera_rewrite.rewrite import PlanContext

from ._calls import bound_locally, function_of
from ._mask import imports_module, is_docstring
from ._match import code, int_value, is_name, method_call, positional, single_assign

_ONE = {"1", "1.0", "True"}


def indicator_of(ctx: PlanContext, value: cst.BaseExpression) -> Tuple[Optional[str], Optional[str]]:
    """(the indices' name, None) when ``value`` is ``H(ids, n)`` for a proven H (see the
    module's docstring); (None, why not) when it is a call of a function the files define
    that is not proven; (None, None) when it is no such call."""
    if not (isinstance(value, cst.Call) and is_name(value.func)):
        return None, None
    args = positional(value)
    if args is None or len(args) != 2 or not is_name(args[0]):
        return None, None
    name = value.func.value  # type: ignore[attr-defined]
    if bound_locally(ctx, value, name):
        return None, f"`{name}` is bound in the function calling it, not only by the module"
    found = function_of(ctx, ctx.module, name)
    if found is None:
        return None, None
    module, func = found
    why = _proven(module, func)
    if why is not None:
        return None, f"`{name}` is not proven to set exactly each row's indices: {why}"
    return args[0].value, None  # type: ignore[attr-defined]


def _proven(module: cst.Module, func: cst.FunctionDef) -> Optional[str]:
    """None when ``func``'s body is the vocabulary of the module docstring, else why not."""
    params = func.params
    if (
        func.decorators
        or func.asynchronous is not None
        or len(params.params) != 2
        or params.posonly_params
        or params.kwonly_params
        or not isinstance(params.star_arg, cst.MaybeSentinel)
        or params.star_kwarg is not None
        or any(p.default is not None for p in params.params)
    ):
        return "it does not take exactly (indices, size)"
    if not imports_module(module, "torch"):
        return "its module does not `import torch`"
    ids, size = (p.name.value for p in params.params)
    body = list(func.body.body)  # type: ignore[union-attr]
    if body and is_docstring(body[0]):
        body = body[1:]
    facts: Dict[str, str] = {}  # local name -> "rows" (B), "row_index", "zeros", "filled"
    for stmt in body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return f"`{code(stmt)}` is not one of its statements"
        small = stmt.body[0]
        if isinstance(small, cst.Return):
            if small.value is None:
                return "it returns nothing"
            if is_name(small.value) and facts.get(small.value.value) == "filled":
                return None
            found = method_call(small.value, "scatter")
            if found is not None and is_name(found[0]) and facts.get(found[0].value) == "zeros" and _scatters(found[1], ids):
                return None
            return f"`{code(stmt)}` does not return the filled mask"
        assign = single_assign(stmt)
        if assign is not None and is_name(assign[0]):
            target, value = assign[0].value, assign[1]  # type: ignore[attr-defined]
            if target in (ids, size, "torch") or target in facts:
                return f"`{code(stmt)}` binds a name again"
            kind = _value_kind(value, ids, size, facts)
            if kind is None:
                return f"`{code(stmt)}` is not one of its statements"
            facts[target] = kind
            continue
        if isinstance(small, cst.Expr):
            found = method_call(small.value, "scatter_")
            if found is not None and is_name(found[0]) and facts.get(found[0].value) == "zeros" and _scatters(found[1], ids):
                facts[found[0].value] = "filled"  # type: ignore[attr-defined]
                continue
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and code(small.value) in _ONE:
            target = small.targets[0].target
            if (
                isinstance(target, cst.Subscript)
                and is_name(target.value)
                and facts.get(target.value.value) == "zeros"  # type: ignore[attr-defined]
                and len(target.slice) == 2
                and all(isinstance(s.slice, cst.Index) for s in target.slice)
            ):
                rows, cols = (s.slice.value for s in target.slice)  # type: ignore[attr-defined]
                # both flattened or neither: `mask[rows, ids.flatten()]` broadcasts to [B, B] for K == 1
                flat = _flat_or_as_is(rows, facts, "row_index", None)
                if flat is not None and flat == _flat_or_as_is(cols, {}, None, ids):
                    facts[target.value.value] = "filled"  # type: ignore[attr-defined]
                    continue
        return f"`{code(stmt)}` is not one of its statements"
    return "it does not return the mask"


def _value_kind(value: cst.BaseExpression, ids: str, size: str, facts: Dict[str, str]) -> Optional[str]:
    if _batch(value, ids, facts):
        return "rows"
    # torch.arange(B, ...).unsqueeze(1).expand_as(ids), or [:, None]
    expand = method_call(value, "expand_as")
    if expand is not None and (positional(expand[1]) or [None])[0] is not None and is_name(positional(expand[1])[0], ids):  # type: ignore[index]
        column = expand[0]
        base = None
        unsqueeze = method_call(column, "unsqueeze")
        if unsqueeze is not None and [int_value(a) for a in positional(unsqueeze[1]) or []] == [1]:
            base = unsqueeze[0]
        elif isinstance(column, cst.Subscript) and code(column.slice[0]) == ":" and len(column.slice) == 2 and code(column.slice[1]) == "None":
            base = column.value
        if base is not None and _arange(base, ids, facts):
            return "row_index"
    # torch.zeros(B, n, ...) or torch.zeros((B, n), ...) / [B, n]
    if isinstance(value, cst.Call) and code(value.func) == "torch.zeros":
        args = [a for a in value.args if a.keyword is None]
        if any(a.star for a in value.args) or any(a.keyword.value not in ("device", "dtype") for a in value.args if a.keyword):
            return None
        dims = [a.value for a in args]
        if len(dims) == 1 and isinstance(dims[0], (cst.Tuple, cst.List)):
            dims = [e.value for e in dims[0].elements if not isinstance(e, cst.StarredElement)]
            if len(dims) != len(args[0].value.elements):  # type: ignore[attr-defined]
                return None
        if len(dims) == 2 and _batch(dims[0], ids, facts) and is_name(dims[1], size):
            return "zeros"
    return None


def _batch(value: cst.BaseExpression, ids: str, facts: Dict[str, str]) -> bool:
    """``ids.size(0)``, ``ids.shape[0]``, or a name bound to one."""
    if is_name(value):
        return facts.get(value.value) == "rows"  # type: ignore[attr-defined]
    return code(value).replace(" ", "") in (f"{ids}.size(0)", f"{ids}.shape[0]")


def _arange(value: cst.BaseExpression, ids: str, facts: Dict[str, str]) -> bool:
    if not (isinstance(value, cst.Call) and code(value.func) == "torch.arange"):
        return False
    args = [a for a in value.args if a.keyword is None]
    others = [a for a in value.args if a.keyword is not None]
    return (
        len(args) == 1
        and not args[0].star
        and _batch(args[0].value, ids, facts)
        and all(a.keyword.value == "device" for a in others)  # type: ignore[union-attr]
    )


def _flat_or_as_is(value: cst.BaseExpression, facts: Dict[str, str], kind: Optional[str], ids: Optional[str]) -> Optional[bool]:
    """Whether ``value`` is ``name.flatten()`` (True) or ``name`` (False), for the row index
    (kind) or the indices (ids); None if it is neither."""
    flat = method_call(value, "flatten")
    flattened = flat is not None and not flat[1].args
    if flattened:
        value = flat[0]
    if not is_name(value):
        return None
    ok = value.value == ids if ids is not None else facts.get(value.value) == kind  # type: ignore[attr-defined]
    return flattened if ok else None


def _scatters(call: cst.Call, ids: str) -> bool:
    """(1, ids, 1) positionally: ones at each row's indices."""
    args = positional(call)
    return args is not None and len(args) == 3 and int_value(args[0]) == 1 and is_name(args[1], ids) and code(args[2]) in _ONE
