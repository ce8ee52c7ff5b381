"""Pieces shared by the mask rewrites (HR003-HR005): module facts and emitted code.

Every mask rewrite turns a boolean selection into an index_select or index_copy over
the indices of the True entries of a mask, taken in ascending order, with a count
known as a Python int.  The emitted code calls small helpers the rewrites put above
the first class that uses them (``HELPERS``): ``kept_tokens`` (hiera.py's token
drop), ``true_rows`` and ``masked_rows`` (the selection) and ``not_overridden`` (a
method is the calling class's own).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import FunctionFlow, bound_parameter, in_place_write, loaded_names, root_name, statement_names, tensor_aliases
from hiera_rewrite.index import import_names
from hiera_rewrite.rewrite import PlanContext

from ._calls import hands_on, kept_by_a_call, replaced, runs_before, statement_of, stored_to_a_holder, torch_or_builtin, walk
from ._match import code, is_name, single_assign


# The helpers the mask rewrites put into the file they rewrite (one each, above the
# first class that uses it; a second run finds them by name and adds nothing).
KEPT_TOKENS = "kept_tokens"
TRUE_ROWS = "true_rows"
MASKED_ROWS = "masked_rows"
RUNS_OWN = "not_overridden"
HELPER_NAMES = (KEPT_TOKENS, TRUE_ROWS, MASKED_ROWS, RUNS_OWN)

HELPERS = {
    KEPT_TOKENS: '''
def kept_tokens(x, mask, mu_size, num_kept=None):
    """x[mask[..., None].tile(1, mu_size, x.shape[2])]; given each row's kept count, in static shapes."""
    if num_kept is None or x.dim() != 3 or mask.dim() != 2 or x.shape[:2] != (len(mask), mu_size * mask.shape[1]):
        return x[mask[..., None].tile(1, mu_size, x.shape[2])]  # (which raises for the latter shapes)
    B, N = mask.shape
    # token n is unit n % N at position n // N: (b, t, j) is row (b * mu_size + t) * N + j
    kept = mask.logical_not().byte().argsort(dim=1, stable=True)[:, :num_kept]
    torch._assert_async((mask.sum(1) == kept.shape[1]).all())  # a count not every row's raises
    rows = torch.arange(0, B * mu_size * N, N, device=x.device).view(B, mu_size, 1) + kept[:, None]
    return x.unflatten(1, (mu_size, N)).flatten(0, 2).index_select(0, rows.flatten())
''',
    TRUE_ROWS: '''
def true_rows(mask, count):
    """Indices of mask.flatten()'s count True entries, ascending (static shapes)."""
    return mask.flatten().logical_not().byte().argsort(stable=True)[:count]
''',
    MASKED_ROWS: '''
def masked_rows(t, mask, count=None):
    """t[mask]; given mask's True count (mask over t's first dims), in static shapes."""
    if count is None or t.shape[: mask.dim()] != mask.shape:  # (t[mask] raises for the latter)
        return t[mask]
    torch._assert_async(mask.sum() == count)  # a count that is not mask's raises
    return t.flatten(0, mask.dim() - 1).index_select(0, true_rows(mask, count))
''',
    RUNS_OWN: '''
def not_overridden(model, cls, *methods):
    """Whether type(model) runs cls's own `methods` (cls: the caller's __class__)."""
    return all(getattr(type(model), name) is getattr(cls, name) for name in methods)
''',
}


def add_helper(ctx, user: cst.CSTNode, *names: str) -> Tuple[cst.Module, Callable[[cst.Module], cst.Module]]:
    """An edit of the module putting the helpers ``names`` (``HELPERS``) above the
    top-level statement holding ``user``, each unless the module defines it already (a
    second site, a second run).  Several sites may ask for one: the engine composes
    their edits."""
    top = next(a for a in [user, *ctx.ancestors(user)] if ctx.parent(a) is ctx.module)
    where = list(ctx.module.body).index(top)
    named = getattr(getattr(top, "name", None), "value", None)

    def edit(updated: cst.Module) -> cst.Module:
        body = list(updated.body)
        for name in names:
            if any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in body):
                continue
            at = next((i for i, s in enumerate(body) if named and getattr(getattr(s, "name", None), "value", None) == named), where)
            helper = cst.parse_module(HELPERS[name].lstrip("\n")).body[0]
            following = body[at]
            body[at:at + 1] = [
                helper.with_changes(leading_lines=following.leading_lines),
                following.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2),
            ]
        return updated.with_changes(body=body)

    return ctx.module, edit


def line_with(ctx, line: cst.SimpleStatementLine, swaps: Dict[cst.CSTNode, cst.CSTNode]) -> cst.BaseStatement:
    """``line`` with each node of ``swaps`` (a node of the line -> its replacement)
    replaced, formatted as one statement."""

    class _Swap(cst.CSTTransformer):
        def on_leave(self, original_node, updated_node):  # type: ignore[override]
            return swaps.get(original_node, updated_node)

    swapped = line.visit(_Swap())
    return ctx.statement("; ".join(code(small) for small in swapped.body) + "\n", like=line)  # type: ignore[attr-defined]


def with_argument(node: cst.Call, argument: str) -> cst.Call:
    """``node`` with one more argument (``argument``, source code) at the end."""
    args = list(node.args)
    last = args[-1]
    if last.comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    extra = cst.parse_expression(f"f({argument})").args[0]  # type: ignore[attr-defined]
    args.append(extra.with_changes(comma=last.comma if last.comma is not cst.MaybeSentinel.DEFAULT else cst.MaybeSentinel.DEFAULT))
    return node.with_changes(args=args)


def name_taken(ctx, *names: str, func: Optional[cst.FunctionDef] = None, modules: Tuple[str, ...] = ()) -> Optional[str]:
    """The first of ``names`` (builtins the emitted code calls, helpers it adds) that the
    module binds itself, not counting a helper of ours a first run put
    there; or that ``func``, where the code is emitted, or a function around it binds (a
    local `kept_tokens = ...` makes the name local to the whole function); ``modules``
    (`math`, which the module imports) only there."""
    if func is not None:
        local = local_bindings(ctx, func)
        hit = next((n for n in (*names, *modules) if n in local), None)
        if hit is not None:
            return hit
    return next((n for n in shadowed(ctx, *names) if n not in HELPER_NAMES or not defines_helper(ctx, n)), None)


def local_bindings(ctx, func: cst.FunctionDef) -> Set[str]:
    """Names ``func`` or a function around it binds: parameters, assignments, imports,
    nested defs and classes (a `global` name among them is the module's)."""
    bound: Set[str] = set()
    for owner in [func, *(a for a in ctx.ancestors(func) if isinstance(a, cst.FunctionDef))]:
        flow = ctx.flow(owner)
        bound |= set(flow.params)
        for stmt in flow.stmts:
            bound |= stmt.assigned
    return bound


def defines_helper(ctx, name: str) -> bool:
    """The module defines the helper ``name`` as this tool emits it (a second run); a
    function of the user's by that name is not it."""
    want = cst.parse_module(HELPERS[name].lstrip("\n")).body[0]
    return any(
        isinstance(s, cst.FunctionDef) and s.name.value == name and s.deep_equals(want.with_changes(leading_lines=s.leading_lines))
        for s in ctx.module.body
    )


# Appended to HR003-HR005's explanations (`--explain`); README's "What the rewrite
# assumes" says the same.
MASK_CONTRACT = """

    What the mask rewrites assume.  Exact (outputs, shapes, order, gradients,
    state_dicts loading both ways, RNG consumption) for: every input the original
    accepts, a mask a caller passes included; every subclass, in any module, that
    overrides a method with upstream's signature (the override gets the original
    call); every edit inside the rewritten files (they are read, and a count crosses
    only a path proven there).  Out of contract: code elsewhere that reassigns the
    rewritten classes' functions or an instance's attributes at run time
    (`Cls.forward_loss = f`, `model.forward_decoder = f`), a submodule whose forward
    writes in place the mask tensor it is given, and a class in another module whose
    multiple inheritance puts a forward override between the MAE and Hiera (it fails
    loudly: `forward() got an unexpected keyword argument 'random_mask_ratio'`).
    `hiera-rewrite --verify` on your repo is the check for those.  The emitted code
    checks at run time only that a method given a count is not overridden
    (`type(self).m is __class__.m`, `__class__` being the class defining the caller,
    whatever the module's name for it is bound to later), and, on the device, that
    each count is the mask's (`torch._assert_async` in `kept_tokens`, `masked_rows` and
    the decoder fill: a wrong count raises in eager mode; torch.compile drops the check).
"""


def is_bool_cast(line: cst.CSTNode, name: str) -> bool:
    """``line`` is `name = name.bool()` (or `name.to(torch.bool)`, `.to(dtype=torch.bool)`):
    the mask cast where it is used.  Non-zero is True, so every row keeps the count it had."""
    assign = single_assign(line) if isinstance(line, cst.SimpleStatementLine) else None
    if assign is None or not is_name(assign[0], name):
        return False
    value = assign[1]
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and is_name(value.func.value, name)):
        return False
    method, args = value.func.attr.value, value.args
    if method == "bool":
        return not args
    return (
        method == "to"
        and len(args) == 1
        and (args[0].keyword is None or args[0].keyword.value == "dtype")
        and code(args[0].value) == "torch.bool"
    )


def module_binds(module: cst.Module, name: str) -> Optional[cst.CSTNode]:
    """The top-level statement that binds ``name`` by an import, if any."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and any(
                local == name for local, _ in import_names(small)
            ):
                return stmt
    return None


def imports_module(module: cst.Module, name: str) -> bool:
    """True if the module does a top-level ``import name`` (bound to that module)."""
    stmt = module_binds(module, name)
    if stmt is None:
        return False
    for small in stmt.body:  # type: ignore[attr-defined]
        if isinstance(small, cst.Import):
            for alias in small.names:
                if alias.asname is None and code(alias.name) == name:
                    return True
                if alias.asname is not None and is_name(alias.asname.name, name) and code(alias.name) == name:
                    return True
    return False


def shadowed(ctx: PlanContext, *names: str) -> List[str]:
    """Those of ``names`` (builtins the inserted code calls) that a top-level statement
    of the module binds to something else."""
    bound: Set[str] = set()
    for stmt in ctx.module.body:
        bound |= statement_names(ctx, stmt)[0]
    return [n for n in names if n in bound or "*" in bound]


def written_in_place(ctx: PlanContext, func: cst.FunctionDef, name: str) -> Optional[str]:
    """``"<name> is written in place by `<statement>` at line N"`` when ``func`` may
    write into the tensor ``name`` holds (or a view of it, hiera_rewrite.flow's
    ``in_place_write``), else None.  A count proven for a mask (get_random_mask's, the
    decoder's) no longer holds once the mask is changed in place (`mask[:, 0] = True`)."""
    node = in_place_write(ctx, func, name)
    if node is None:
        return None
    return f"{name} is written in place by `{statement_of(ctx, node)}` at line {ctx.position(node).line}"


def written_by_a_call(
    ctx, cls: Optional[cst.ClassDef], func: cst.FunctionDef, name: str, ordered: bool = False, _seen=()
) -> Optional[str]:
    """Why a call in ``func`` given the tensor ``name`` (or a view of it) may write it in
    place, else None.  ``self.<m>(...)``, <m> a plain method of ``cls``, is followed: it
    writes when it writes the parameter bound to the tensor (``written_in_place``), or
    passes it on to such a call.  ``torch.<f>(...)`` (no trailing ``_``; ``out=`` is
    ``in_place_write``'s) writes nothing; any other call given it may write it -- but
    with ``ordered``, not where it runs after ``func`` last uses the tensor's count (its
    top-level statement comes after every one selecting with an alias, `t[mask]`, or
    passing one to a method of ``cls``).  A subclass overriding <m> is not seen here."""
    aliases = tensor_aliases(ctx, func, name)
    defined = cls.body.body if cls is not None else ()  # type: ignore[union-attr]
    methods = {s.name.value: s for s in defined if isinstance(s, cst.FunctionDef)}
    calls: List[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            calls.append(node)

    ctx.visit(_Calls(), func.body)

    def given(arg: cst.Arg) -> bool:
        if hands_on(ctx, arg.value, aliases):  # a view chain, a conditional, a call result...
            return True
        if arg.star or isinstance(arg.value, (cst.List, cst.Tuple, cst.Set, cst.Dict)):
            found: List[str] = []

            class _Names(cst.CSTVisitor):
                def visit_Name(self, node: cst.Name) -> None:
                    if node.value in aliases:
                        found.append(node.value)

            ctx.visit(_Names(), arg.value)
            return bool(found)
        return False

    body = list(func.body.body)  # type: ignore[union-attr]

    def top(node: cst.CSTNode) -> int:
        """The index in ``func``'s body of the statement holding ``node``."""
        while node not in body:
            node = ctx.parent(node)
        return next(i for i, s in enumerate(body) if s is node)

    class _Selections(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.found: List[cst.CSTNode] = []

        def visit_Subscript(self, node: cst.Subscript) -> None:
            if any(isinstance(e.slice, cst.Index) and root_name(e.slice.value) in aliases for e in node.slice):
                self.found.append(node)

    selections = _Selections()
    ctx.visit(selections, func.body)
    own = [
        c for c in calls
        if isinstance(c.func, cst.Attribute) and is_name(c.func.value, "self") and c.func.attr.value in methods
        and any(given(a) for a in c.args)
    ]
    last_use = max((top(n) for n in (*selections.found, *own)), default=-1)
    for call in sorted(calls, key=lambda n: (ctx.position(n).line, ctx.position(n).column)):
        args = [a for a in call.args if given(a)]
        if not args:
            continue
        where = f"`{code(call)}` at line {ctx.position(call).line}"
        callee = call.func
        if isinstance(callee, cst.Attribute) and is_name(callee.value, "self") and callee.attr.value in methods:
            method = methods[callee.attr.value]
            again = replaced(ctx, ctx.module, cls, method.name.value) if cls is not None else None
            if method.decorators or not method.params.params or again is not None:
                return f"{name} is passed to {where}, which may write it in place" + (f" ({again})" if again else "")
            for arg in args:
                param = bound_parameter(method, call, arg, bound_self=True)
                if param is None:
                    return f"{name} is passed to {where}, which may write it in place"
                if (method.name.value, param) in _seen:
                    continue
                why = written_in_place(ctx, method, param) or stored_or_packed(ctx, method, param) or written_by_a_call(
                    ctx, cls, method, param, False, (*_seen, (func.name.value, name))
                )
                if why is not None:
                    return f"{why} in {method.name.value}, called by {where}"
            continue
        if torch_or_builtin(ctx, call):
            continue
        if ordered and top(call) > last_use:
            continue  # runs after the count's last use here
        return f"{name} is passed to {where}, which may write it in place"
    return None


def methods_given(
    ctx, cls: cst.ClassDef, func: cst.FunctionDef, name: str, counted: Set[str], ordered: bool = True, _seen=()
) -> List[Tuple[cst.Call, List[str]]]:
    """The ``self.<m>(...)`` calls of ``func`` given the tensor ``name`` (or a view of it),
    <m> a method of ``cls``, whose top-level statement is not after the last one using
    the tensor's count (a selection `t[mask]`, or a call to one of ``counted``, the
    methods passed the count), each with the methods of ``cls`` that may then run with
    the tensor: <m>, and those <m> passes it on to, transitively (there in any order:
    the caller uses the count after <m> returns; ``ordered=False``).

    ``written_by_a_call`` proves the file's own versions of them leave the tensor alone;
    a subclass in the user's code overriding one of them (or a function set on the
    class or the instance) may write it, and the count is then not known: the emitted
    code keeps it only while each of them is the file's own (``own_method``)."""
    aliases = tensor_aliases(ctx, func, name)
    defined = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}  # type: ignore[union-attr]
    body = list(func.body.body)  # type: ignore[union-attr]

    def top(node: cst.CSTNode) -> int:
        while node not in body:
            node = ctx.parent(node)
        return next(i for i, s in enumerate(body) if s is node)

    calls: List[Tuple[cst.Call, List[cst.Arg]]] = []
    uses: List[int] = []

    class _Uses(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            given = [a for a in node.args if not a.star and hands_on(ctx, a.value, aliases)]
            callee = node.func
            if given and isinstance(callee, cst.Attribute) and is_name(callee.value, "self") and callee.attr.value in defined:
                calls.append((node, given))
                if callee.attr.value in counted:
                    uses.append(top(node))

        def visit_Subscript(self, node: cst.Subscript) -> None:
            if any(isinstance(e.slice, cst.Index) and root_name(e.slice.value) in aliases for e in node.slice):
                uses.append(top(node))

    ctx.visit(_Uses(), func.body)
    last_use = max(uses, default=-1)
    found: List[Tuple[cst.Call, List[str]]] = []
    for call, given in calls:
        if ordered and top(call) > last_use:
            continue
        method = defined[call.func.attr.value]  # type: ignore[attr-defined]
        reached = [method.name.value]
        for arg in given:
            param = bound_parameter(method, call, arg, bound_self=True)
            if param is None or (method.name.value, param) in _seen:
                continue
            for _, inner in methods_given(ctx, cls, method, param, counted, False, (*_seen, (func.name.value, name))):
                reached += [m for m in inner if m not in reached]
        found.append((call, reached))
    return found


def class_reference(ctx, cls: cst.ClassDef) -> Optional[str]:
    """The name that refers to ``cls`` from its methods at run time: a top-level class
    whose name no other top-level statement binds; None otherwise."""
    if ctx.parent(cls) is not ctx.module:
        return None
    name = cls.name.value
    binders = [s for s in ctx.module.body if name in statement_names(ctx, s)[0] or "*" in statement_names(ctx, s)[0]]
    return name if binders == [cls] else None


def imports_typing_optional(module: cst.Module) -> bool:
    stmt = module_binds(module, "Optional")
    if stmt is None:
        return False
    return any(
        isinstance(small, cst.ImportFrom) and small.module is not None and code(small.module) == "typing"
        for small in stmt.body  # type: ignore[attr-defined]
    )


def free_names(flow: FunctionFlow, *names: str) -> List[str]:
    """Those of ``names`` already used in the function (they would clash), a def, lambda
    or comprehension nested in it included (a global it reads would become the new local)."""
    nodes = list(walk(flow.func.body))  # every name bound or read, nested scopes included
    not_variables = {
        id(n) for node in nodes for n in (
            (node.attr,) if isinstance(node, cst.Attribute) else (node.keyword,) if isinstance(node, cst.Arg) and node.keyword else ()
        )
    }
    used = set(flow.params) | {n.value for n in nodes if isinstance(n, cst.Name) and id(n) not in not_variables}
    return [n for n in names if n in used]


def with_keyword_param(ctx, func: cst.FunctionDef, name: str, annotation: Optional[str]):
    """An edit of ``func`` (a function of the updated node) adding ``name=None``.

    The new parameter goes last (keyword-only when there is a ``*``); the signature
    is re-formatted by black, the body and decorators are untouched.
    """
    params = func.params
    star = isinstance(params.star_arg, (cst.Param, cst.ParamStar)) or params.kwonly_params
    # ``**kwargs`` must stay last: the new parameter goes before it.
    kwargs = params.star_kwarg
    without = params.with_changes(star_kwarg=None) if kwargs is not None else params
    listed = _EMPTY.code_for_node(without).strip().rstrip(",")
    new = f"{name}: {annotation} = None" if annotation else f"{name}=None"
    if not listed:
        joined = new
    elif star and not isinstance(params.star_arg, (cst.Param, cst.ParamStar)):
        joined = f"{listed}, *, {new}"
    else:
        joined = f"{listed}, {new}"
    if kwargs is not None:
        joined = f"{joined}, {code(kwargs.with_changes(comma=cst.MaybeSentinel.DEFAULT)).rstrip(',')}"
    returns = f" -> {code(func.returns.annotation)}" if func.returns is not None else ""
    header = ctx.statement(f"def {func.name.value}({joined}){returns}:\n    pass\n", like=func, replaces=False)

    def edit(updated: cst.FunctionDef) -> cst.FunctionDef:
        return updated.with_changes(
            params=header.params,
            whitespace_before_params=header.whitespace_before_params,
            returns=header.returns,
        )

    return edit


_EMPTY = cst.Module(body=[])


def is_docstring(stmt: cst.CSTNode) -> bool:
    """A statement that is only a string literal (a docstring)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def stored_or_packed(
    ctx: PlanContext,
    func: cst.FunctionDef,
    mask: str,
    proven: Optional[cst.CSTNode] = None,
    before: Optional[cst.CSTNode] = None,
    calls: bool = True,
) -> Optional[str]:
    """Where ``func`` stores its mask argument, or anything that may hold or view it, on
    an attribute, an item or a global (`self.m = mask`, `self.m: Tensor = mask.detach()`,
    `extras = dict(m=mask); self.extras = extras`, `global G; G = mask`, `for self.m in
    ...`), or packs it into a tuple, list, set or dict (`(m,) = (mask,)`): a holder other
    code may write through, which the name-by-name tracking does not follow; else None.
    What may hold it is :func:`codemods._calls._hands_on`'s: a call's result, unless every
    function it runs is the files' own and returns nothing that may hold it; and a call
    of the files storing it, transitively (:func:`codemods._calls.kept_by_a_call`; but
    not the calls of ``proven``, a statement proven otherwise).  ``before``: only what
    runs before that node counts (the statement using the mask's count; in a loop, all);
    ``calls``: False, the function's own stores and packs only."""
    block = ctx.parent(func)
    cls = ctx.parent(block) if block is not None else None
    cls = cls if isinstance(cls, cst.ClassDef) else None
    stored, holders = stored_to_a_holder(ctx, func, mask, cls, before)
    if stored is not None:
        held = sorted({n.value for n in walk(stored[1]) if isinstance(n, cst.Name) and n.value in holders} - {mask})
        through = f" (through `{held[0]}`, which may hold it)" if held and not any(
            isinstance(n, cst.Name) and n.value == mask for n in walk(stored[1])
        ) else ""
        return f"{mask} is stored by `{code(stored[0])} = ...` at line {ctx.position(stored[1]).line}{through}"
    for node in loaded_names(ctx, func.body):
        if node.value not in holders or returned_as_is(ctx, node):
            continue
        if before is not None and not runs_before(ctx, node, before):
            continue
        for parent in ctx.ancestors(node):
            if isinstance(parent, (cst.Element, cst.StarredElement, cst.DictElement, cst.StarredDictElement)) and not any(
                isinstance(a, cst.AssignTarget) for a in ctx.ancestors(parent)
            ):
                through = f" (through `{node.value}`, which may hold it)" if node.value != mask else ""
                return f"{mask} is packed into `{code(ctx.parent(parent))}` at line {ctx.position(node).line}{through}"
            if isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.Call, cst.Subscript)):
                break
    return kept_by_a_call(ctx, cls, func, mask, proven, before) if calls else None


def returned_as_is(ctx: PlanContext, name: cst.Name) -> bool:
    """``name`` is returned as it is (`return x, mask`): that path leaves the function,
    and nothing after it runs with the tensor."""
    node: cst.CSTNode = name
    while True:
        parent = ctx.parent(node)
        if isinstance(parent, cst.Return):
            return True
        if not isinstance(parent, (cst.Element, cst.Tuple)):
            return False
        node = parent
