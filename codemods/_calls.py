"""What the files say a name or a call is: classes and methods followed through the
file and the modules beside it, and whether a call given a tensor may write it.

A count proven for a mask (how many units get_random_mask keeps in each row) holds
only while nothing writes the mask.  ``passed_to_a_writer`` proves that of every call
a function makes with the mask: torch's own functions, and the file's own methods,
submodules and functions, followed into their bodies (in this file or a module beside
it, `from .hiera_utils import do_masked_conv`); any other call given the mask, or
anything that may hold it, is taken to write it.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import METADATA_ATTRIBUTES, METADATA_METHODS, bound_parameter, in_place_write, statement_names
from hiera_rewrite.index import Pos
from hiera_rewrite.rewrite import PlanContext

from ._match import code, is_name, may_setattr

Found = Tuple[cst.Module, cst.ClassDef]


def resolve_class(ctx: PlanContext, module: cst.Module, name: str, depth: int = 0) -> Optional[Found]:
    """The class ``name`` refers to at the top level of ``module``: defined there, or
    imported from a module beside the file (`from .hiera import Hiera`,
    `from models.hiera import Hiera`); None when not known or bound again otherwise."""
    found = _top_level(ctx, module, name, cst.ClassDef, depth)
    return found  # type: ignore[return-value]


def function_of(ctx: PlanContext, module: cst.Module, name: str) -> Optional[Tuple[cst.Module, cst.FunctionDef]]:
    """The module-level function ``name`` refers to in ``module``, as :func:`resolve_class`."""
    return _top_level(ctx, module, name, cst.FunctionDef, 0)  # type: ignore[return-value]


def _top_level(ctx: PlanContext, module: cst.Module, name: str, kind: type, depth: int):
    """Imports are read as the file imports them (``PlanContext.sibling``); those of a
    module found elsewhere (a dotted or ``..`` import) are not followed further."""
    if depth > 3:
        return None
    here = ctx.context_of(module)
    if _rebinds_globals(module, name):
        return None
    found = None
    for stmt in module.body:
        if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
            if stmt.name.value == name:
                found = (module, stmt) if isinstance(stmt, kind) else None
            continue
        imported = [
            (small, alias) for small in (stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ())
            if isinstance(small, cst.ImportFrom)
            and small.module is not None and not isinstance(small.names, cst.ImportStar)
            for alias in small.names  # type: ignore[union-attr]
            if (alias.asname.name.value if alias.asname else code(alias.name)) == name  # type: ignore[union-attr]
        ]
        if imported:
            small, alias = imported[-1]
            dots, dotted = len(small.relative), code(small.module)  # type: ignore[arg-type]
            # in the file's folder (`from .m import`, `from m import`): the module's plain
            # name; elsewhere (`from ..m`, `from pkg.sub.m`) its dotted one, found as the
            # file imports it (hiera_rewrite.files.sibling_path)
            near = dots <= 1 and "." not in dotted
            if dots == 0 and near and here.sibling("__init__") is not None:
                # `from m import f` in a package: an absolute import, found on sys.path
                # (a top-level m.py), not beside the file: which one is not known
                sibling = None
            else:
                sibling = here.sibling(dotted if near else "." * dots + dotted)
            found = _top_level(ctx, sibling, code(alias.name), kind, depth + 1) if sibling is not None else None
            if any(_binds(s, name) for s in stmt.body if not isinstance(s, cst.ImportFrom)):  # type: ignore[union-attr]
                found = None  # `from m import f; f = wrap(f)`: bound again on the same line
        elif {name, "*"} & statement_names(here, stmt)[0]:
            found = None  # bound again by other code: not followed
    return found


def _binds(root: cst.CSTNode, name: str) -> bool:
    """Code under ``root`` may bind ``name``: an assignment, walrus, `del`, loop or with
    target, an import, a def or class, `global`/`nonlocal` (nested scopes included: an
    over-approximation, never a miss)."""
    for node in walk(root):
        if isinstance(node, (cst.Global, cst.Nonlocal)) and any(i.name.value == name for i in node.names):
            return True
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node.name.value == name:
            return True
        if isinstance(node, cst.ImportAlias):
            bound = node.asname.name if node.asname is not None else node.name
            if code(bound).split(".")[0] == name:
                return True
            continue
        target: Optional[cst.CSTNode] = None
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.For, cst.CompFor, cst.Del)):
            target = node.target
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            target = node.asname.name
        if target is not None and any(is_name(n, name) for n in walk(target)):
            return True
    return False


def _rebinds_globals(module: cst.Module, name: str) -> bool:
    """Code of ``module`` that may bind the global ``name`` where the module-level
    statements do not show it: `global name` in a function, or `globals()` (a store
    through it)."""
    for node in walk(module):
        if isinstance(node, cst.Global) and any(item.name.value == name for item in node.names):
            return True
        if isinstance(node, cst.Call) and is_name(node.func, "globals"):
            return True
    return False


def method_of(ctx: PlanContext, module: cst.Module, cls: cst.ClassDef, method: str, depth: int = 0):
    """(module, class, function) defining ``method`` for ``cls``, following single bases
    (a class with several bases that does not define it: None, not resolved)."""
    for stmt in cls.body.body:  # type: ignore[union-attr]
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == method:
            return module, cls, stmt
        if not isinstance(stmt, cst.FunctionDef) and method in _names_bound(stmt):
            return None
    if depth > 8 or len(cls.bases) != 1 or not is_name(cls.bases[0].value) or cls.keywords:
        return None
    base = resolve_class(ctx, module, cls.bases[0].value.value)  # type: ignore[attr-defined]
    return method_of(ctx, base[0], base[1], method, depth + 1) if base is not None else None


def replaced(ctx: PlanContext, module: cst.Module, cls: cst.ClassDef, method: str) -> Optional[str]:
    """Why ``cls.<method>`` may not run the def the file shows, else None: the def is
    decorated, the class body binds the name again (``m = wrap(m)``), or the module
    assigns it on the class (``Cls.m = ...``, ``setattr(Cls, "m", ...)``).  A count
    read from that def, or a mask it returns, then holds for the def only."""
    where = f"{cls.name.value}.{method}"
    defs = [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == method]  # type: ignore[union-attr]
    for stmt in cls.body.body:  # type: ignore[union-attr]
        if not isinstance(stmt, cst.FunctionDef) and method in _names_bound(stmt):
            return f"`{code(stmt).strip().splitlines()[0]}` binds {where} again in the class body"
    if defs and defs[-1].decorators:
        return f"{where} is decorated (`@{code(defs[-1].decorators[0].decorator)}`): the decorator may change what it gets or returns"
    for node in walk(module):
        target = node.target if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)) else None
        if isinstance(target, cst.Attribute) and target.attr.value == method:
            # `Cls.m = ...`, or `self.m = ...` in an __init__ (an instance attribute hides
            # the class's method from every call `self.m(...)`)
            return f"`{code(target)} = ...`{_at(ctx, module, node)} replaces {where}"
        if may_setattr(node, method):
            return f"`{code(node)}`{_at(ctx, module, node)} may replace {where}"
    return None


def _at(ctx: PlanContext, module: cst.Module, node: cst.CSTNode) -> str:
    try:
        return f" at line {ctx.position(node).line}" if module is ctx.module else ""
    except KeyError:  # pragma: no cover -- a node without a position
        return ""


def _names_bound(stmt: cst.CSTNode) -> Set[str]:
    """Names a class-body statement binds (attributes of the class)."""
    found: Set[str] = set()
    if isinstance(stmt, cst.ClassDef):
        found.add(stmt.name.value)
    for node in walk(stmt):
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)):
            target = node.target
            if isinstance(target, cst.Name):
                found.add(target.value)
    return found


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from walk(child)


# -- may a call write the tensor it is given ---------------------------------------------

# parents through which an expression's value may be the tensor a name holds, or a
# view of it, or a container holding it (a call may return what it is given)
# Tensor methods whose result is a new tensor or value, never the tensor itself or a view
# of it (`m.float()` may be m itself, `m.detach()`, `m.contiguous()` may share it).
FRESH_METHODS = frozenset({
    "clone", "sum", "mean", "prod", "any", "all", "count_nonzero", "item", "tolist", "nonzero",
    "argwhere", "argsort", "cumsum", "logical_not", "logical_and", "logical_or", "logical_xor",
})


def _hands_on(ctx: PlanContext, expr: cst.CSTNode, holders: Dict[str, Pos]) -> bool:
    """Whether ``expr``'s value may be (or hold, or view) a tensor a name in ``holders``
    holds: `m`, `m.view(...)[0]`, `m if c else None`, `[m]`, `f(m)`, `a or m`; not
    `m.shape[1]`, `m.sum() > 0`, `m.clone()` (a new value), `x * m.bool()`, `x[m]`.  A name holds it
    from where it may be bound to it on (``holders``: name -> that position)."""
    for node in walk(expr):
        if not (isinstance(node, cst.Name) and node.value in holders and ctx.position(node) >= holders[node.value]):
            continue
        child: cst.CSTNode = node
        while child is not expr:
            parent = ctx.parent(child)
            if parent is None:
                break
            if isinstance(parent, cst.Attribute):
                ok = parent.value is child and parent.attr.value not in METADATA_ATTRIBUTES
            elif isinstance(parent, cst.Subscript):
                ok = parent.value is child
            elif isinstance(parent, cst.Call):
                # a method of it (not its metadata), or any call given it: may return it
                ok = not (
                    parent.func is child
                    and isinstance(child, cst.Attribute)
                    and child.attr.value in METADATA_METHODS | FRESH_METHODS
                )
            elif isinstance(parent, cst.IfExp):
                ok = parent.test is not child
            elif isinstance(parent, cst.Comparison):
                ok = False
            elif isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.SubscriptElement, cst.Index, cst.Slice)):
                ok = False
            else:  # BooleanOperation (returns an operand), containers, Arg, Element, parentheses...
                ok = True
            if not ok:
                break
            child = parent
        else:
            return True
    return False


def hands_on(ctx: PlanContext, expr: cst.CSTNode, names: Set[str]) -> bool:
    """:func:`_hands_on` for names that hold the tensor everywhere."""
    return _hands_on(ctx, expr, {name: Pos(0, 0) for name in names})


def _holders(ctx: PlanContext, func: cst.FunctionDef, name: str) -> Dict[str, Pos]:
    """``name`` (from the start) and every name of ``func`` bound to what may hold it
    (:func:`_hands_on`), transitively, each from the end of that binding on (from the
    start of the outermost loop holding it): assignments, `for` targets over it,
    `with ... as`, `:=`."""
    bindings: List[Tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode]] = []  # (value, target, binding)
    for node in walk(func.body):
        if isinstance(node, cst.Assign):
            bindings.extend((node.value, t.target, node) for t in node.targets)
        elif isinstance(node, (cst.AnnAssign,)) and node.value is not None:
            bindings.append((node.value, node.target, node))
        elif isinstance(node, cst.NamedExpr):
            bindings.append((node.value, node.target, node))
        elif isinstance(node, (cst.For, cst.CompFor)):
            bindings.append((node.iter, node.target, node.iter))
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            bindings.append((node.item, node.asname.name, node))
    holders: Dict[str, Pos] = {name: Pos(0, 0)}
    changed = True
    while changed:
        changed = False
        for value, target, binding in bindings:
            if not _hands_on(ctx, value, holders):
                continue
            loops = [a for a in ctx.ancestors(binding) if isinstance(a, (cst.For, cst.While, cst.CompFor))]
            since = ctx.position(loops[-1]) if loops else ctx.span(binding).end
            for bound in walk(target):
                if isinstance(bound, cst.Name) and since < holders.get(bound.value, Pos(1 << 30, 0)):
                    holders[bound.value] = since
                    changed = True
    return holders


def passed_to_a_writer(
    ctx: PlanContext,
    cls: Optional[cst.ClassDef],
    func: cst.FunctionDef,
    name: str,
    before: Optional[cst.CSTNode] = None,
    _seen: Tuple[Tuple[int, str], ...] = (),
) -> Optional[str]:
    """Why ``func`` may write the tensor ``name`` holds (in place, itself or through a
    call given it), else None.  ``before``: only what runs before that node counts (the
    statement using the count; not inside a loop).  ``cls``: the class ``func`` is a
    method of, for `self.<method>(...)` and `self.<submodule>(...)` calls.

    Proven not to write: torch's functions (no trailing ``_``; ``out=`` is a write), the
    builtins, and the file's own methods, submodules (`self.patch_embed = PatchEmbed(...)`,
    assigned once in the module; its ``forward``) and module functions, followed into
    their bodies, here or in a module beside the file.  A subclass in the user's code
    that overrides one of them, or replaces a submodule, is not seen."""
    holders = _holders(ctx, func, name)
    for held, since in sorted(holders.items()):
        node = in_place_write(ctx, func, held)
        if node is not None and ctx.position(node) >= since and (before is None or _runs_before(ctx, node, before)):
            return f"{name} is written in place by `{code(node).splitlines()[0]}` at line {ctx.position(node).line}"
    if len(_seen) > 8:
        return f"{name} is passed through more than 8 calls from {func.name.value}: not followed"
    calls = [n for n in walk(func.body) if isinstance(n, cst.Call)]
    for call in calls:
        if before is not None and not _runs_before(ctx, call, before):
            continue
        given = [a for a in call.args if _hands_on(ctx, a.value, holders)]
        if not given:
            continue
        where = f"`{code(call).splitlines()[0]}` at line {ctx.position(call).line}"
        targets = _callees(ctx, cls, call)
        if targets is None:
            return f"{name} is passed to {where}, which may write it in place"
        for callee_ctx, callee_cls, callee, bound_self in targets:
            for arg in given:
                param = bound_parameter(callee, call, arg, bound_self=bound_self)
                if param is None:
                    return f"{name} is passed to {where}, whose parameter for it is not plain"
                key = (id(callee), param)
                if key in _seen:
                    continue
                why = passed_to_a_writer(callee_ctx, callee_cls, callee, param, None, (*_seen, key))
                if why is not None:
                    return f"{why} in {callee.name.value}, called by {where}"
    return None


def _runs_before(ctx: PlanContext, node: cst.CSTNode, before: cst.CSTNode) -> bool:
    if any(isinstance(a, (cst.For, cst.While)) for a in ctx.ancestors(before)):
        return True  # a loop runs what follows before the next use
    return ctx.position(node).line < ctx.position(before).line


# builtins that write no tensor they are given
_PURE_BUILTINS = frozenset({
    "isinstance", "len", "int", "float", "bool", "str", "repr", "print", "tuple", "list", "dict", "set", "min", "max",
    "sum", "abs", "range", "zip", "enumerate", "sorted", "reversed", "any", "all", "type", "id", "hash", "getattr", "hasattr",
})


def _callees(ctx: PlanContext, cls: Optional[cst.ClassDef], call: cst.Call):
    """The functions ``call`` may run, each as (context, class, function, bound_self), to
    follow; [] for torch's functions and the builtins (not in place: in_place_write sees
    those) and for a submodule built by code not in the files (out of contract: README,
    "What the rewrite assumes"); None when not known."""
    qualified = ctx.qualified_names(call.func)
    if qualified and all(
        (q.startswith("torch.") or q.startswith("builtins.")) and not q.endswith("_") and q not in ("builtins.exec", "builtins.eval")
        for q in qualified
    ):
        return []
    func = call.func
    if isinstance(func, cst.Attribute) and is_name(func.value, "self") and cls is not None:
        found = method_of(ctx, ctx.module, cls, func.attr.value)
        if found is not None:
            owner_module, owner, method = found
            if method.decorators or not method.params.params:
                return None
            return [(ctx.context_of(owner_module), owner, method, True)]
        built = _submodules(ctx, func.attr.value)
        if not built:
            return None
        targets = []
        for value in built:
            made = resolve_class(ctx, ctx.module, value.func.value) if isinstance(value, cst.Call) and is_name(value.func) else None
            if made is None:
                continue  # a submodule from a factory or another package: not read
            forward = method_of(ctx, made[0], made[1], "forward")
            if forward is None or forward[2].decorators or not forward[2].params.params:
                return None
            targets.append((ctx.context_of(forward[0]), forward[1], forward[2], True))
        return targets
    if isinstance(func, cst.Name):
        if _bound_locally(ctx, call, func.value):
            return None  # `f = wrap(f)` in the calling function: not the module's f
        found_fn = function_of(ctx, ctx.module, func.value)
        if found_fn is None and func.value in _PURE_BUILTINS and not ctx.qualified_names(func) - {f"builtins.{func.value}"}:
            return []
        if found_fn is None or found_fn[1].decorators:
            return None
        return [(ctx.context_of(found_fn[0]), None, found_fn[1], False)]
    return None


def _bound_locally(ctx: PlanContext, call: cst.Call, name: str) -> bool:
    """``name`` is bound in a function (or lambda) around ``call``: a parameter, an
    assignment, a loop or with target, an import, `global`/`nonlocal` -- any of them
    makes the bare name another object than the module's def."""
    for scope in ctx.ancestors(call):
        if not isinstance(scope, (cst.FunctionDef, cst.Lambda)):
            continue
        params = scope.params
        every = [*params.params, *params.kwonly_params, *params.posonly_params]
        every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
        if any(p.name.value == name for p in every) or _binds(scope.body, name):
            return True
    return False


def _submodules(ctx: PlanContext, attr: str) -> List[cst.BaseExpression]:
    """The values this module assigns to ``<obj>.<attr>`` (`self.patch_embed = C(...)`);
    [] when it assigns none or sets it otherwise too (`setattr`, a tuple target)."""
    assigned: List[cst.BaseExpression] = []
    for node in walk(ctx.module):
        if isinstance(node, cst.Call) and is_name(node.func, "setattr"):
            return []
        if isinstance(node, cst.Assign):
            pairs = [(t.target, node.value) for t in node.targets]
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, cst.Attribute) and target.attr.value == attr:
                assigned.append(value)
            elif not isinstance(target, (cst.Name, cst.Attribute, cst.Subscript)):
                if any(isinstance(n, cst.Attribute) and n.attr.value == attr for n in walk(target)):
                    return []
    return assigned
