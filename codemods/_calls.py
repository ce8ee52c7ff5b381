"""What the files say a name or a call is: classes and methods followed through the
file and the modules beside it, and whether a call given a tensor may write it.

A count proven for a mask (how many units get_random_mask keeps in each row) holds
only while nothing writes the mask.  ``passed_to_a_writer`` proves that of every call
a function makes with the mask: torch's own functions, and the file's own submodules
and functions, followed into their bodies (in this file or a module beside it, `from
.hiera_utils import do_masked_conv`), and its methods only where the emitted code checks
at run time that they are the ones read (``run_time_checked``); any other call given
the mask, or anything that may hold it, is taken to write it.
"""

from __future__ import annotations

import builtins

import contextlib
from collections import OrderedDict
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import METADATA_ATTRIBUTES, METADATA_METHODS, bound_parameter, enclosing_line, in_place_write, root_name, statement_names, subtree
from hiera_rewrite.index import Pos
from hiera_rewrite.rewrite import PlanContext

from ._match import code, exact_types, flatten_targets, is_name, may_setattr, method_call

Found = Tuple[cst.Module, cst.ClassDef]


def resolve_class(
    ctx: PlanContext, module: cst.Module, name: str, depth: int = 0, at: Optional[cst.ClassDef] = None,
    through: Optional[List[cst.Module]] = None,
) -> Optional[Found]:
    """The class ``name`` refers to at the top level of ``module``: defined there, or
    imported from a module beside the file (`from .hiera import Hiera`,
    `from models.hiera import Hiera`); None when not known or bound again otherwise.
    ``at``: a class of ``module`` whose base ``name`` is: the binding in effect where its
    `class` statement runs (a later `from .other import Hiera` rebinds the name for code
    that runs afterwards, not for that base).  A class nested in a statement (a def, a
    `try:`, an `if`, another class) is resolved only where that statement binds ``name``
    nowhere and no function around it takes a parameter of that name (a local `from
    .hiera_video import Hiera` before it in the block would be its base): else None; a
    class a function holds is made when the function runs, after the module's last binding.
    ``through``: gets each module the name is imported through (a re-export module may
    patch the class on import: `Hiera.get_random_mask = f`)."""
    upto = None
    if at is not None:
        upto = next((i for i, s in enumerate(module.body) if s is at or any(n is at for n in walk(s))), None)
        if upto is not None and module.body[upto] is not at:
            scopes = [a for a in ctx.context_of(module).ancestors(at) if isinstance(a, (cst.FunctionDef, cst.Lambda))]
            if _binds(module.body[upto], name) or any(_takes(scope, name) for scope in scopes):
                return None  # bound in the statement holding the class (before it, maybe)
            if scopes:
                upto = None  # a class made when the function runs: after the module's last binding
    found = _top_level(ctx, module, name, cst.ClassDef, depth, upto, through)
    return found  # type: ignore[return-value]


def _takes(scope: "cst.FunctionDef | cst.Lambda", name: str) -> bool:
    """The function (or lambda) takes a parameter ``name``."""
    params = scope.params
    every = [*params.params, *params.kwonly_params, *params.posonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return any(p.name.value == name for p in every)


def base_class(
    ctx: PlanContext, module: cst.Module, cls: cst.ClassDef, through: Optional[List[cst.Module]] = None
) -> Optional[Found]:
    """The class ``cls``'s one plain base (`class C(B)`) names, in ``module``."""
    return resolve_class(ctx, module, cls.bases[0].value.value, at=cls, through=through)  # type: ignore[attr-defined]


def function_of(ctx: PlanContext, module: cst.Module, name: str) -> Optional[Tuple[cst.Module, cst.FunctionDef]]:
    """The module-level function ``name`` refers to in ``module``, as :func:`resolve_class`."""
    return _top_level(ctx, module, name, cst.FunctionDef, 0)  # type: ignore[return-value]


def _a_module(ctx: PlanContext, module: cst.Module, expr: cst.BaseExpression) -> bool:
    """``expr`` is a name ``module`` binds to a module of the files by an import (`from .
    import hiera as _hiera`, `import pkg.hiera as _hiera` where the files hold it; `import
    torch.nn.functional as F` is not one)."""
    return isinstance(expr, cst.Name) and expr.value in ctx.fact(("module names", id(module)), lambda: _module_names(ctx, module), module)


def _module_names(ctx: PlanContext, module: cst.Module) -> Set[str]:
    """The names ``module`` binds to modules of the files by an import (a relative `from`
    import's names are all taken for modules: `from .pkg import m` may be one)."""
    found: Set[str] = set()
    for node in nodes_of(module, (cst.Import, cst.ImportFrom)):
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:  # type: ignore[union-attr]
                bound = alias.asname.name if alias.asname is not None else alias.name
                name = code(bound).split(".")[0]
                if isinstance(node, cst.ImportFrom):
                    if node.relative:
                        found.add(name)
                        continue
                    dotted = f"{code(node.module)}.{code(alias.name)}" if node.module is not None else code(alias.name)
                elif alias.asname is not None:
                    dotted = code(alias.name)
                else:
                    dotted = name
                if ctx.module_named(dotted) is not None:
                    found.add(name)
    return found


def followed_function(ctx: PlanContext, module: cst.Module, name: str) -> Optional[Tuple[cst.Module, cst.FunctionDef]]:
    """:func:`function_of`, where a call of ``name`` runs that def: None also where a
    module read may replace it on its module (:func:`function_patched`)."""
    found = function_of(ctx, module, name)
    if found is None or function_patched(ctx, found[0], {name, found[1].name.value}) is not None:
        return None
    return found


def function_patched(ctx: PlanContext, module: cst.Module, names: Set[str]) -> Optional[str]:
    """The first statement of a module read (``ctx``'s, ``module``, what they import, those
    beside naming it) that may replace the module-level function of one of ``names`` from
    outside its module: a store to `<x>.<name>` (`_hiera.do_masked_conv = f` in
    hiera_mae.py: hunt 23b F4), a `setattr` naming it; else None.  (A computed name on
    another object is out of contract: README.)"""
    def find() -> Optional[str]:
        read = [m for _, m in imported_modules(ctx, [ctx.module, ctx.planned().module, module])[0]]
        beside = ctx.modules_beside([n.encode() for n in sorted(names)]) or []
        for m in dict.fromkeys([ctx.module, module, *read, *beside]):
            for node in nodes_of(m, _STORES_AND_CALLS):  # the only nodes the tests below read
                stored = node.target if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.Del)) else None
                if stored is not None and any(isinstance(t, cst.Attribute) and t.attr.value in names for t in flatten_targets(stored)):
                    return _first_line(node if not isinstance(node, cst.AssignTarget) else ctx.context_of(m).parent(node))
                if isinstance(node, cst.Call) and any(
                    may_setattr(node, n) and any(isinstance(a.value, cst.SimpleString) for a in node.args) for n in names
                ):
                    return _first_line(node)
                # `vars(_hiera)["f"] = g`, `_hiera.__dict__.update(f=g)` (hunt 24b F3), and
                # `f.__code__ = g.__code__` (24b F5)
                if _writes_a_namespace(node) or stored is not None and any(
                    isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value in names for t in flatten_targets(stored)
                ):
                    return _first_line(node if not isinstance(node, cst.AssignTarget) else ctx.context_of(m).parent(node))
                if isinstance(node, cst.Call) and not (is_name(node.func) and node.func.value in _CLASS_READERS) \
                        and any(a.value for a in node.args if _a_module(ctx.context_of(m), m, a.value)):  # type: ignore[attr-defined]
                    return _first_line(node)  # `keep_register_unit(_hiera)`: a module of the files handed to a call
        return None

    return ctx.fact(("function patched", id(ctx.module), id(module), tuple(sorted(names))), find, ctx.module, module)


def _top_level(
    ctx: PlanContext, module: cst.Module, name: str, kind: type, depth: int, upto: Optional[int] = None,
    through: Optional[List[cst.Module]] = None,
):
    """:func:`_find_top_level`, once for the file's plans (asked again and again for the same
    classes); ``through`` gets the modules it went through, as that gives them."""
    def find():
        passed: List[cst.Module] = []
        return _find_top_level(ctx, module, name, kind, depth, upto, passed), passed

    found, passed = ctx.fact(("top level", id(module), name, kind, depth, upto), find, module)
    if through is not None:
        through.extend(passed)
    return found


def _find_top_level(
    ctx: PlanContext, module: cst.Module, name: str, kind: type, depth: int, upto: Optional[int] = None,
    through: Optional[List[cst.Module]] = None,
):
    """Imports are read as the file imports them (``PlanContext.sibling``); a module found
    elsewhere (a dotted or ``..`` import) has its relative and dotted imports read from
    its own folder (:func:`_import_name`), its plain ones (`from m import f`: found on
    sys.path, whose folders are not known) not followed.  ``upto``: only the module's
    statements before that index."""
    if depth > 3:
        return None
    here = ctx.context_of(module)
    here_name = ctx.name_of(module)
    if _rebinds_globals(module, name):
        return None
    found = None
    for stmt in module.body[:upto]:
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
            place = _place(here_name) if here_name is not None else None
            beside = place == ("rel", 0, ())  # the file's folder: read as the file reads it
            if dots == 0 and "." not in dotted and (not beside or here.sibling("__init__") is not None):
                # `from m import f` in a package or in a module elsewhere: an absolute
                # import, found on sys.path (a top-level m.py): which one is not known
                sibling = None
            elif beside:
                sibling = here.sibling(dotted if dots <= 1 and "." not in dotted else "." * dots + dotted)
            else:
                target = _import_name(place, "." * dots + dotted) if place is not None else None
                sibling = ctx.module_named(target) if target is not None else None
            if sibling is not None and through is not None:
                through.append(sibling)
            found = _top_level(ctx, sibling, code(alias.name), kind, depth + 1, None, through) if sibling is not None else None
            if any(_binds(s, name) for s in stmt.body if not isinstance(s, cst.ImportFrom)):  # type: ignore[union-attr]
                found = None  # `from m import f; f = wrap(f)`: bound again on the same line
        elif {name, "*"} & statement_names(here, stmt)[0]:
            found = None  # bound again by other code: not followed
    return found


def _binds(root: cst.CSTNode, name: str) -> bool:
    """Code under ``root`` may bind ``name``: an assignment, walrus, `del`, loop or with
    target, an import, a def or class, `global`/`nonlocal`, a `match` capture, `except ...
    as` (nested scopes included: an over-approximation, never a miss)."""
    return name in _per_module(_BOUND, root, id(root), lambda: _bound_under(root), 8192)


_BOUND: Dict[int, Tuple[cst.CSTNode, FrozenSet[str]]] = {}
# the node kinds _bound_under reads
_BINDING_TYPES = exact_types(
    cst.Global, cst.Nonlocal, cst.MatchAs, cst.MatchStar, cst.MatchMapping, cst.ExceptHandler, cst.FunctionDef,
    cst.ClassDef, cst.ImportAlias, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.For,
    cst.CompFor, cst.Del, cst.WithItem,
)


def _bound_under(root: cst.CSTNode) -> FrozenSet[str]:
    """Every name :func:`_binds` finds bound under ``root``, read in one walk."""
    names: Set[str] = set()
    for node in walk(root):
        kind = type(node)
        if kind not in _BINDING_TYPES:
            continue
        if kind is cst.Global or kind is cst.Nonlocal:
            names.update(i.name.value for i in node.names)  # type: ignore[attr-defined]
        elif kind is cst.MatchAs or kind is cst.MatchStar or kind is cst.MatchMapping:
            captured = node.rest if kind is cst.MatchMapping else node.name  # type: ignore[attr-defined]
            if isinstance(captured, cst.Name):
                names.add(captured.value)
        elif kind is cst.ExceptHandler:
            if node.name is not None and isinstance(node.name.name, cst.Name):  # type: ignore[attr-defined]
                names.add(node.name.name.value)  # type: ignore[attr-defined]
        elif kind is cst.FunctionDef or kind is cst.ClassDef:
            names.add(node.name.value)  # type: ignore[attr-defined]
        elif kind is cst.ImportAlias:
            bound = node.asname.name if node.asname is not None else node.name  # type: ignore[attr-defined]
            names.add(code(bound).split(".")[0])
        else:
            target = node.target if kind is not cst.WithItem else node.asname.name if node.asname is not None else None  # type: ignore[attr-defined]
            if target is not None:
                names.update(n.value for n in walk(target) if isinstance(n, cst.Name))
    return frozenset(names)


def _rebinds_globals(module: cst.Module, name: str) -> bool:
    """Code of ``module`` that may bind the global ``name`` where the module-level
    statements do not show it: `global name` in a function, or `globals()` (a store
    through it)."""
    def find() -> Tuple[Set[str], bool]:
        declared: Set[str] = set()
        dynamic = False
        for node in walk(module):
            if isinstance(node, cst.Global):
                declared.update(item.name.value for item in node.names)
            elif isinstance(node, cst.Call) and is_name(node.func, "globals"):
                dynamic = True
        return declared, dynamic

    declared, dynamic = _per_module(_GLOBALS, module, id(module), find, 256)
    return dynamic or name in declared


# per module: the names its `global` statements declare, and whether it calls `globals()`
_GLOBALS: Dict[int, Tuple[cst.Module, Tuple[Set[str], bool]]] = {}


def _per_module(cache: Dict[Any, Tuple[cst.Module, Any]], module: cst.Module, key: Any, compute, limit: int) -> Any:
    """``compute()``, once per ``key`` (naming ``module`` by its id) in ``cache``, which
    keeps the module alive with the answer (an id is not reused meanwhile) and is emptied
    past ``limit`` entries."""
    cached = cache.get(key)
    if cached is None or cached[0] is not module:
        if len(cache) > limit:
            cache.clear()
        cached = cache[key] = (module, compute())
    return cached[1]


def method_of(
    ctx: PlanContext, module: cst.Module, cls: cst.ClassDef, method: str, depth: int = 0,
    through: Optional[List[cst.Module]] = None,
):
    """(module, class, function) defining ``method`` for ``cls``, following single bases
    (a class with several bases that does not define it: None, not resolved).  A class
    whose body binds the name other than by one `def` at its top level (a second def, a
    def under `if` or `try`, an import, a tuple assignment, `locals()[...] = ...`), or
    that is decorated (a class decorator may replace any method), resolves to None.
    ``through``: gets each module the bases are imported through (:func:`resolve_class`)."""
    if cls.decorators:
        return None
    bound = class_bindings(cls)
    if ANY_NAME in bound:
        return None
    if method in bound:
        found = sole_def(cls, bound[method])
        return (module, cls, found) if found is not None else None
    if depth > 8 or len(cls.bases) != 1 or not is_name(cls.bases[0].value) or cls.keywords:
        return None
    base = base_class(ctx, module, cls, through)
    return method_of(ctx, base[0], base[1], method, depth + 1, through) if base is not None else None


def sole_def(cls: cst.ClassDef, bindings: List[cst.CSTNode]) -> Optional[cst.FunctionDef]:
    """The def, when a name's only binding in the class body is one def at its top level."""
    if len(bindings) == 1 and isinstance(bindings[0], cst.FunctionDef) and bindings[0] in cls.body.body:  # type: ignore[operator]
        return bindings[0]
    return None


def replaced(ctx: PlanContext, module: cst.Module, cls: cst.ClassDef, method: str, static: bool = False) -> Optional[str]:
    """:func:`_replaced`, once for the file's plans.  ``static``: a def whose one decorator is
    `@staticmethod` is the function it shows (a caller that binds no `self`)."""
    key = ("replaced", id(ctx.module), id(module), id(cls), method, static)
    return ctx.fact(key, lambda: _replaced(ctx, module, cls, method, static), ctx.module, module, cls)


def _replaced(ctx: PlanContext, module: cst.Module, cls: cst.ClassDef, method: str, static: bool = False) -> Optional[str]:
    """Why ``cls.<method>`` may not run the def the file shows, else None: the class is
    decorated, the def is decorated, the class body binds the name again or otherwise
    (a second def, one under `if`/`try`, `m = wrap(m)`, an import, a tuple target), or the
    module assigns it on the class (``Cls.m = ...``, ``Cls.m, Cls.n = ...``,
    ``setattr(Cls, "m", ...)``) or hands the class to a call that may (``patch(Cls)``).
    A count read from that def, or a mask it returns, then holds for the def only."""
    where = f"{cls.name.value}.{method}"
    if cls.decorators:
        return f"{cls.name.value} is decorated (`@{code(cls.decorators[0].decorator)}`): the decorator may replace {where}"
    hook = class_hooks(ctx, module, cls)
    if hook is not None:
        return f"{hook}: it may replace {where}"
    bound = class_bindings(cls)
    if ANY_NAME in bound:
        return f"`{_first_line(bound[ANY_NAME][0])}` in the class body of {cls.name.value} may bind {where}"
    bindings = bound.get(method, [])
    if bindings and sole_def(cls, bindings) is None:
        other = next((b for b in bindings if not (isinstance(b, cst.FunctionDef) and b in cls.body.body)), bindings[-1])  # type: ignore[operator]
        return f"`{_first_line(other)}`{_at(ctx, module, other)} binds {where} again in the class body"
    defs = [b for b in bindings if isinstance(b, cst.FunctionDef)]
    if defs and defs[-1].decorators and not (static and [code(d.decorator) for d in defs[-1].decorators] == ["staticmethod"]):
        return f"{where} is decorated (`@{code(defs[-1].decorators[0].decorator)}`): the decorator may change what it gets or returns"
    for node in nodes_of(module, _STORES_AND_CALLS):  # the only nodes the tests below read
        stored = node.target if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.Del)) else None
        for target in flatten_targets(stored) if stored is not None else ():
            if isinstance(target, cst.Attribute) and target.attr.value == method:
                # `Cls.m = ...`, or `self.m = ...` in an __init__ (an instance attribute hides
                # the class's method from every call `self.m(...)`)
                return f"`{code(target)} = ...`{_at(ctx, module, node)} replaces {where}"
        if may_setattr(node, method):
            return f"`{code(node)}`{_at(ctx, module, node)} may replace {where}"
        if isinstance(node, cst.Call) and _hands_over_a_class(node, cls.name.value):
            return f"`{code(node)}`{_at(ctx, module, node)} is given the class {cls.name.value} (or an instance): it may replace {where}"
        if _writes_a_namespace(node):
            return f"`{code(node)}`{_at(ctx, module, node)} writes an object's namespace: it may replace {where}"
    modules, incomplete = imported_modules(ctx, [module, ctx.module])
    owners = _kin(cls.name.value, [module, ctx.module, *(m for _, m in modules)])
    for name, other in modules:
        why = _patches(other, cls.name.value, method, owners)
        if why is not None:
            return f"`{why}` in `{name}`, a module the files import, may replace {where}"
    if incomplete is not None:
        return f"{incomplete} (any may replace {where})"
    return None


# how many modules imported_modules reads before it gives up (and the proof with it)
MODULE_LIMIT = 128

# where a module lies, as the file planned imports it: ("rel", ups, folders) for the
# folder `<file's folder>/..^ups/<folders>` (what `.m`, `..pkg.m` and plain names find),
# ("abs", package) for a module found by an absolute dotted name (`pkg.sub.m`: ("pkg", "sub"))
Place = Tuple[str, int, Tuple[str, ...]]


def _place(name: str) -> Optional[Place]:
    """The folder of the module the file found as ``name`` (:meth:`PlanContext.name_of`;
    "" for the file itself)."""
    if name == "":
        return ("rel", 0, ())
    dots = len(name) - len(name.lstrip("."))
    parts = tuple(name.lstrip(".").split("."))
    if not all(parts):
        return None
    if dots == 0 and len(parts) > 1:
        return ("abs", 0, parts[:-1])
    return ("rel", max(dots - 1, 0), parts[:-1])


def _import_name(place: Place, written: str, package: bool = False) -> Optional[str]:
    """The name (for :meth:`PlanContext.module_named`) of the module ``written`` (`.m`,
    `..pkg.m`, `pkg.m`, `m`) that a module at ``place`` imports; ``package``: of the
    `__init__` of the package so named.  None where it leaves the top package."""
    dots = len(written) - len(written.lstrip("."))
    rest = written.lstrip(".")
    parts = tuple(rest.split(".")) if rest else ()
    if not all(parts):
        return None
    if package:
        parts += ("__init__",)
    if not parts:
        return None
    kind, ups, folders = place
    if dots == 0 and (len(parts) > 1 and not (package and len(parts) == 2) or kind == "abs"):
        return ".".join(parts)  # absolute: found from the file's path (files.sibling_path)
    up = max(dots - 1, 0)
    if kind == "abs":
        if up >= len(folders):
            return None  # beyond the top package: ImportError when it runs
        return ".".join(folders[:len(folders) - up] + parts)
    if up <= len(folders):
        folders = folders[:len(folders) - up]
    else:
        ups, folders = ups + up - len(folders), ()
    full = folders + parts
    if ups == 0 and len(full) == 1:
        return full[0]  # beside the file: its plain name, as the rest of this module asks it
    return "." * (ups + 1) + ".".join(full)


def imported_modules(ctx: PlanContext, roots: List[cst.Module], limit: int = MODULE_LIMIT) -> Tuple[List[Tuple[str, cst.Module]], Optional[str]]:
    """(modules, why not all): the modules that run when ``roots`` are imported, which may
    patch their classes (`Hiera.get_random_mask = f` in a module `hiera_mae.py` imports
    for that): every module they import from their package (`from . import m`, `from .m
    import f`, `import pkg.m`, `from pkg import m`, a package's `__init__`), transitively,
    each module's relative imports read from its own folder; the `__init__` of each one's
    folder; and, where the files are read from disk, the `__init__.py` of every package
    enclosing those, up to the top package (Python runs each of them first; each module
    read once, by its real path).  A module not found there (torch's) is not read.
    ``why not all``: set when a module's folder is not known or more than ``limit``
    modules are found (the walk stops: a module not read may patch them)."""
    key = ("imported", id(ctx.module), tuple(id(m) for m in roots), limit)
    return ctx.fact(key, lambda: _imported_modules(ctx, roots, limit), ctx.module, *roots)


def _imported_modules(ctx: PlanContext, roots: List[cst.Module], limit: int) -> Tuple[List[Tuple[str, cst.Module]], Optional[str]]:
    if not ctx.placed():
        return [], (
            "the file is read from stdin: the modules of its package, which run when it is imported and"
            " may patch its classes, are not read (give its path with --stdin-filename)"
        )

    def key(name: Optional[str], module: cst.Module) -> object:
        path = ctx.path_of(name) if name is not None else None
        return path if path is not None else id(module)

    names = [ctx.name_of(m) for m in roots]
    seen = {key(n, m) for n, m in zip(names, roots)} | {id(m) for m in roots}
    found: List[Tuple[str, cst.Module]] = []
    pending: List[Tuple[cst.Module, Optional[str]]] = list(zip(roots, names))
    incomplete: Optional[str] = None

    def add(name: Optional[str], shown: Optional[str] = None) -> bool:
        nonlocal incomplete
        module = ctx.module_named(name) if name is not None else None
        if module is None:
            return False
        k = key(name, module)
        if k not in seen and id(module) not in seen:
            if len(found) >= limit:
                incomplete = f"more than {limit} modules run when the files are imported: not all are read"
                return True
            seen.update((k, id(module)))
            found.append((shown or name, module))  # type: ignore[arg-type]
            pending.append((module, name))
        return True

    while pending and incomplete is None:
        here, name = pending.pop(0)
        place = _place(name) if name is not None else None
        if place is None:
            incomplete = "a module the files import is not placed: the modules it imports are not read"
            break
        if name == "__init__" or name.endswith(".__init__"):  # type: ignore[union-attr]
            # the package enclosing this one runs first (the walk stops at a folder without
            # one); only where files are read from disk: a reader of names alone has no top
            if ctx.path_of(name) is not None:  # type: ignore[arg-type]
                add(_import_name(place, "..__init__"))
        else:
            add(_import_name(place, ".__init__"))  # the package the module is in
        dynamic = next((n for n in nodes_of(here, (cst.Call, cst.ImportFrom)) if isinstance(n, cst.Call) and _imports_by_name(n) or _imports_a_loader(n)), None)
        if dynamic is not None:
            shown = f"{code(dynamic.func)}(...)" if isinstance(dynamic, cst.Call) else code(dynamic)
            incomplete = (
                f"`{shown}` in {'the file' if not name else f'`{name}`'} imports a module by name"
                " at run time: the modules that run on import are not all read"
            )
            break
        for node in nodes_of(here, (cst.Import, cst.ImportFrom)):
            if isinstance(node, cst.Import):  # `import pkg.masking` (found as the file imports it)
                written = [code(a.name) for a in node.names]
            elif isinstance(node, cst.ImportFrom):  # `from . import m`, `from pkg.m import f`
                dots = "." * len(node.relative)
                base = dots + code(node.module) if node.module is not None else dots
                written = [base] if node.module is not None else []
                if not isinstance(node.names, cst.ImportStar):
                    written += [(base + "." if node.module is not None else base) + code(a.name) for a in node.names]
            else:
                continue
            beside = place == ("rel", 0, ())  # (named as written there, as the file would)
            for each in written:
                if not add(_import_name(place, each), each if beside else None):
                    add(_import_name(place, each, package=True))  # a package: its `__init__`
            if isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar) and node.module is not None:
                # `from .plugins import *` imports the submodules the package's `__all__` names
                package = ctx.module_named(_import_name(place, written[0], package=True) or "")
                names = _all_names(package) if package is not None else []
                if names is None:
                    incomplete = (
                        f"`{code(node)}` imports what `__all__` of `{written[0]}` names, which is not a literal list:"
                        " the modules that run on import are not all read"
                    )
                    break
                for each in names:
                    if not add(_import_name(place, f"{written[0]}.{each}")):
                        add(_import_name(place, f"{written[0]}.{each}", package=True))
    return found, incomplete


def _all_names(module: cst.Module) -> Optional[List[str]]:
    """The names a module's top-level `__all__` lists (its `=`, `+=`, `.append`/`.extend`
    of string literals); None where one of its writes is not such a literal."""
    names: List[str] = []

    def literal(expr: Optional[cst.BaseExpression]) -> bool:
        if isinstance(expr, cst.SimpleString):
            names.append(str(expr.evaluated_value))
            return True
        if isinstance(expr, (cst.List, cst.Tuple)):
            return all(isinstance(e, cst.Element) and literal(e.value) for e in expr.elements)
        return False

    for node in walk(module):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            if any(is_name(t, "__all__") for t in targets) and not literal(node.value):
                return None
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and is_name(node.func.value, "__all__"):
            if not (len(node.args) == 1 and literal(node.args[0].value)):
                return None
    return names


# functions that import or run a module named at run time (a plugin registry's loop)
_DYNAMIC_IMPORTS = frozenset({"import_module", "__import__", "exec_module", "load_module", "run_module", "run_path", "reload"})


def _imports_a_loader(node: cst.CSTNode) -> bool:
    """`from importlib import import_module as load` (the loader under another name)."""
    return isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar) and any(
        code(a.name).rpartition(".")[2] in _DYNAMIC_IMPORTS for a in node.names
    )


def _imports_by_name(call: cst.Call) -> bool:
    func = call.func
    name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
    return name in _DYNAMIC_IMPORTS


def _kin(name: str, modules: Iterable[cst.Module]) -> Set[str]:
    """The names of the classes whose methods' `self` may be an instance of the class
    ``name``: it, the classes of ``modules`` deriving from it (by name), and the bases of
    any of those, transitively upward (a base's `__init__`, a mixin's, runs on that
    instance too; a class merely sharing a base, another nn.Module, does not)."""
    modules = list(modules)
    classes = [node for module in modules for node in nodes_of(module, cst.ClassDef)]
    kin = {name} | {c.name.value for c in subclasses_in(modules, name)}
    grew = True
    while grew:
        grew = False
        for c in classes:
            if c.name.value in kin:
                bases = {n for n in (_base_name(b.value) for b in c.bases) if n is not None}
                if not bases <= kin:
                    kin |= bases
                    grew = True
    return kin


def _on_self(node: cst.CSTNode) -> bool:
    """``node`` sets an attribute of `self`: `self.m = ...`, `setattr(self, ...)`,
    `self.__setattr__(...)`, `self.__dict__[...] = ...`, `vars(self)[...]`."""
    def is_self(expr: Optional[cst.BaseExpression]) -> bool:
        if expr is None:
            return False
        if is_name(expr, "self"):
            return True
        if isinstance(expr, cst.Attribute) and expr.attr.value == "__dict__":
            return is_name(expr.value, "self")
        return isinstance(expr, cst.Call) and is_name(expr.func, "vars") and bool(expr.args) and is_name(expr.args[0].value, "self")

    if isinstance(node, cst.Attribute):
        return is_self(node.value)
    if isinstance(node, cst.Subscript):
        return is_self(node.value)
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and not is_name(func.value, "type") and not is_name(func.value, "object"):
            return is_self(func.value)  # `self.__setattr__(...)`, `self.__dict__.update(...)`
        return bool(node.args) and is_self(node.args[0].value)
    return False


def _patches(module: cst.Module, cls: str, method: str, owners: Optional[Set[str]] = None) -> Optional[str]:
    """:func:`_find_patches`, once per module and question (asked for each method of each
    class proven, in every module read)."""
    key = (id(module), cls, method, frozenset(owners) if owners is not None else None)
    return _per_module(_PATCHES, module, key, lambda: _find_patches(module, cls, method, owners), 4096)


# (id(module), class, method, owners) -> (the module, _find_patches's answer): _per_module
_PATCHES: Dict[Tuple[int, str, str, Optional[FrozenSet[str]]], Tuple[cst.Module, Optional[str]]] = {}


def _find_patches(module: cst.Module, cls: str, method: str, owners: Optional[Set[str]] = None) -> Optional[str]:
    """The first statement of ``module`` that may set ``<cls>.<method>`` on the class or
    on an instance: a store to `<anything>.<method>` (`Hiera.m = f`, `HieraBase.m = f`
    through an alias, `c.m = f` for a loop's or a parameter's class, `self.m = self.other`
    in a subclass's `__init__`: an instance attribute hides the method from `self.m(...)`
    while the emitted checks look at the type), an attribute set by name that may be it
    (:func:`_may_set_by_name`: `setattr(self, "m", f)`, `setattr(self, name, f)`,
    `self.__dict__["m"] = f`), or a call given the class anywhere in its arguments
    (`setattr(Hiera, ...)`, `patch(Hiera)`, `patch([Hiera])`), by its name or an alias
    the module imports it as.  (What code the files do not import sets on an instance
    at run time is out of contract: README, "What the rewrite assumes".)"""
    names = {cls} | {
        a.asname.name.value for node in nodes_of(module, cst.ImportFrom) if not isinstance(node.names, cst.ImportStar)
        for a in node.names if code(a.name) == cls and a.asname is not None and isinstance(a.asname.name, cst.Name)
    }
    # the class each node is in (the innermost): a store on `self` counts in a class whose
    # instances may be ``cls``'s (``owners``; outside any class, or owners not given: all)
    inside = _class_of_nodes(module)

    def counts(node: cst.CSTNode, target: cst.CSTNode) -> bool:
        return owners is None or not _on_self(target) or inside.get(id(node), "") in owners or id(node) not in inside

    for node in nodes_of(module, _STORES_AND_CALLS):  # the only nodes the tests below read
        stored = node.target if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.Del)) else None
        for t in flatten_targets(stored) if stored is not None else ():  # type: ignore[arg-type]
            if isinstance(t, cst.Attribute) and t.attr.value == method and counts(node, t):
                return code(t) + " = ..."
            if isinstance(t, cst.Subscript) and _may_set_by_name(node, method) and counts(node, t):
                return code(node).splitlines()[0] if not isinstance(node, cst.AssignTarget) else code(t) + " = ..."
        if isinstance(node, cst.Call) and _may_set_by_name(node, method) and counts(node, node):
            return code(node).splitlines()[0]
        if isinstance(node, cst.Call) and not (is_name(node.func) and node.func.value in _CLASS_READERS):  # type: ignore[attr-defined]
            if any(_names_the_class(a.value, names, module) for a in node.args):
                return code(node).splitlines()[0]
    return None


def _class_of_nodes(module: cst.Module) -> Dict[int, str]:
    """id(node) -> the name of the innermost class whose body holds it, for ``module``'s
    nodes in a class body; once per module."""
    def find() -> Dict[int, str]:
        inside: Dict[int, str] = {}
        for c in nodes_of(module, cst.ClassDef):  # outer classes first: an inner one's name wins
            for n in walk_in(module, c.body):
                inside[id(n)] = c.name.value
        return inside

    return _per_module(_CLASS_OF_NODES, module, id(module), find, 256)


_CLASS_OF_NODES: Dict[int, Tuple[cst.Module, Dict[int, str]]] = {}


def _may_set_by_name(node: cst.CSTNode, method: str) -> bool:
    """``node`` sets an attribute by name where it may be ``method``: a `setattr` /
    `__setattr__` or a store through `x.__dict__` / `vars(x)` naming it by a string literal
    (on any object), or by another expression on `self` (`setattr(self, name, f)`,
    `self.__dict__.update(d)`: a subclass setting its own attributes).  A computed name on
    another object (`setattr(model, name, block)`, a LoRA injector) is not taken for one:
    out of contract, README "What the rewrite assumes"."""
    if isinstance(node, cst.Call) and may_setattr(node, method):
        func = node.func
        # `obj.__setattr__(name, v)` is bound; `type.__setattr__(cls, name, v)` and
        # `nn.Module.__setattr__(self, name, v)` (any class's, three arguments) are not
        bound = isinstance(func, cst.Attribute) and len(node.args) < 3 and not is_name(func.value, "type") and not is_name(func.value, "object")
        owner = func.value if bound else (node.args[0].value if node.args else None)  # type: ignore[union-attr]
        names = node.args[0:1] if bound else node.args[1:2]
        literal = any(isinstance(a.value, cst.SimpleString) for a in names)
        return literal or owner is None or is_name(owner, "self")
    if not _writes_a_namespace(node):
        return False

    def on_self(expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Attribute):
            return is_name(expr.value, "self")
        return isinstance(expr, cst.Call) and bool(expr.args) and is_name(expr.args[0].value, "self")

    if isinstance(node, (cst.AssignTarget, cst.AugAssign)):
        for t in flatten_targets(node.target):
            if not isinstance(t, cst.Subscript):
                continue
            key = t.slice[0].slice.value if len(t.slice) == 1 and isinstance(t.slice[0].slice, cst.Index) else None
            if isinstance(key, cst.SimpleString):
                if key.evaluated_value == method:
                    return True
            elif on_self(t.value):
                return True
        return False
    return on_self(node.func.value)  # type: ignore[attr-defined]  # `self.__dict__.update(...)`


def _names_the_class(expr: cst.BaseExpression, names: Set[str], module: Optional[cst.Module] = None) -> bool:
    """``expr`` (of ``module``, where given) holds one of the class's ``names`` (`Hiera`,
    `mod.Hiera`, in a list, a tuple, a dict, starred), other than as a call it makes
    (`Hiera(...)`: an instance)."""
    nodes = [n for n in (walk_in(module, expr) if module is not None else walk(expr)) if type(n) in _CALL_NAME_ATTRIBUTE]
    called = {id(n.func) for n in nodes if isinstance(n, cst.Call)}
    return any(
        id(n) not in called and (isinstance(n, cst.Name) and n.value in names or isinstance(n, cst.Attribute) and n.attr.value in names)
        for n in nodes
    )


_CALL_NAME_ATTRIBUTE = exact_types(cst.Call, cst.Name, cst.Attribute)


# class-body names through which a class, its metaclass or a base changes what an
# attribute lookup on it (or on its subclasses) finds
_CLASS_HOOKS = ("__init_subclass__", "__getattribute__", "__getattr__", "__set_name__")


def class_hooks(ctx: PlanContext, module: cst.Module, cls: cst.ClassDef, depth: int = 0) -> Optional[str]:
    """Why a method of ``cls`` may be replaced when ``cls`` (or a subclass) is made or
    looked up: a metaclass (or any class keyword), or `__init_subclass__`,
    `__getattribute__`, `__getattr__` in it or in a base the files define (followed
    here or beside the file; a third-party base such as nn.Module is not read)."""
    if cls.keywords:
        return f"`class {cls.name.value}({code(cls.keywords[0])})`"
    bound = class_bindings(cls)
    hooked = next((name for name in _CLASS_HOOKS if name in bound), None)
    if hooked is not None:
        return f"{cls.name.value} defines {hooked}"
    if depth > 8:
        return f"the bases of {cls.name.value} are not followed"
    for base in cls.bases:
        name = _base_name(base.value)
        found = resolve_class(ctx, module, name, at=cls) if isinstance(base.value, cst.Name) and name else None
        if found is not None:
            why = class_hooks(ctx, found[0], found[1], depth + 1)
            if why is not None:
                return why
        elif not isinstance(base.value, cst.Name) and any(n is cls for n in walk(module)) \
                and not _outside_the_files(ctx.context_of(module), base.value):
            # `mixins.LossLogging` of a module of the files (hunt 18b F10): not read here
            return f"the base `{code(base.value)}` of {cls.name.value} is not read"
    return None


def _writes_a_namespace(node: cst.CSTNode) -> bool:
    """A store through `x.__dict__[...]` / `vars(x)[...]`, or their `.update(...)` /
    `.setdefault(...)` / `.__setitem__(...)`: a method set on an instance or class by name."""

    def namespace(expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Attribute) and expr.attr.value == "__dict__":
            return True
        return isinstance(expr, cst.Call) and is_name(expr.func, "vars") and len(expr.args) == 1

    if isinstance(node, (cst.AssignTarget, cst.AugAssign)):
        return any(isinstance(t, cst.Subscript) and namespace(t.value) for t in flatten_targets(node.target))
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.attr.value in ("update", "setdefault", "__setitem__") and namespace(node.func.value)
    return False


def self_attributes(func: cst.FunctionDef) -> Set[str]:
    """The names ``func`` reads as ``self.<name>`` (methods it calls, submodules, values)."""
    return {
        node.attr.value for node in walk(func.body)
        if isinstance(node, cst.Attribute) and is_name(node.value, "self")
    }


def overridden_between(ctx: PlanContext, cls: cst.ClassDef, owner: cst.ClassDef, names: Set[str]) -> Optional[str]:
    """Why ``self.<name>`` may be another for an instance of ``cls`` than for one of
    ``owner`` (a base ``cls`` reaches through single bases, in this file or beside it):
    ``cls`` or a class between them binds one of ``names``, or is decorated, or its
    chain is not followed.  None when each class on the way leaves them all alone."""
    module, here, depth = ctx.module, cls, 0
    while here is not owner:
        if here.decorators:
            return f"{here.name.value} is decorated (`@{code(here.decorators[0].decorator)}`)"
        hit = _binds_one_of(here, names)
        if hit is not None:
            return f"{here.name.value} binds `{hit}`"
        if depth > 8 or len(here.bases) != 1 or not is_name(here.bases[0].value) or here.keywords:
            return f"the bases of {here.name.value} are not followed"
        found = base_class(ctx, module, here)
        if found is None:
            return f"the base of {here.name.value} is not found"
        module, here, depth = found[0], found[1], depth + 1
    return None


def subclasses_in(modules: Iterable[cst.Module], name: str) -> List[cst.ClassDef]:
    """The classes of ``modules`` that derive from the class ``name`` (by name, through
    classes of these modules), in source order."""
    modules = list(modules)
    classes = [node for module in modules for node in nodes_of(module, cst.ClassDef)]
    # the names a module gives them too: `from .hiera_mae import MaskedAutoencoderHiera as MAE`, `Base = MAE`
    aliases = [
        (code(a.name).rpartition(".")[2], a.asname.name.value)  # type: ignore[union-attr]
        for module in modules for node in nodes_of(module, cst.ImportFrom)
        if not isinstance(node.names, cst.ImportStar)
        for a in node.names if a.asname is not None and isinstance(a.asname.name, cst.Name)  # type: ignore[union-attr]
    ] + [
        (node.value.value, t.target.value)  # type: ignore[attr-defined]
        for module in modules for node in nodes_of(module, cst.Assign)
        if isinstance(node.value, cst.Name)
        for t in node.targets if isinstance(t.target, cst.Name)
    ]
    family = {name}
    grew = True
    while grew:
        grew = False
        for original, alias in aliases:
            if original in family and alias not in family:
                family.add(alias)
                grew = True
        for c in classes:
            if c.name.value not in family and any(_base_name(b.value) in family for b in c.bases):
                family.add(c.name.value)
                grew = True
    return [c for c in classes if c.name.value != name and c.name.value in family]


def overridden_below(modules: Iterable[cst.Module], cls: cst.ClassDef, names: Set[str]) -> Optional[str]:
    """Why a subclass of ``cls`` in ``modules`` may see ``self.<name>`` or ``super()``
    otherwise than ``cls``: it binds one of ``names``, or mixes ``cls`` with other
    bases (its MRO may put another class between ``cls`` and its base)."""
    for sub in subclasses_in(modules, cls.name.value):
        if len(sub.bases) > 1:
            return f"`class {sub.name.value}` derives from {cls.name.value} and other classes: its super() may reach another class"
        hit = _binds_one_of(sub, names)
        if hit is not None:
            return f"its subclass {sub.name.value} binds `{hit}`"
    return None


def _torch_nn(func: cst.BaseExpression) -> bool:
    """`nn.X` or `torch.nn.X` (by how it is written)."""
    text = code(func)
    return isinstance(func, cst.Attribute) and (text.startswith("nn.") or text.startswith("torch.nn.")) and text.count(".") == text.startswith("torch.") + 1


def _binds_one_of(cls: cst.ClassDef, names: Set[str]) -> Optional[str]:
    """The first of ``names`` the class body binds (ANY_NAME where it may bind any), or
    its methods set on `self` (`self.patch_embed = KeepCentre(...)`, `setattr(self, n,
    v)`: an instance attribute hides the class's), else None."""
    bound = class_bindings(cls)
    hit = sorted(names & set(bound))
    return hit[0] if hit else ANY_NAME if ANY_NAME in bound else _set_on_self(cls, names)


def _set_on_self(cls: cst.ClassDef, names: Set[str]) -> Optional[str]:
    """The first of ``names`` a method of ``cls`` sets on `self` (an assignment to
    `self.<name>`, `setattr`/`add_module`/`register_module` naming it or a computed name,
    a store into `self._modules` or `self.__dict__`), else None."""
    torch_built = {  # `self.norm = nn.Identity()`: torch's module, out of contract as any other package's
        id(t) for node in walk(cls.body)
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)
        and _torch_nn(node.value.func) for t in [node.targets[0]]
    }
    for node in walk(cls.body):
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)):
            if id(node) in torch_built:
                continue
            for t in flatten_targets(node.target):  # type: ignore[arg-type]
                if isinstance(t, cst.Attribute) and is_name(t.value, "self") and t.attr.value in names:
                    return t.attr.value
                if isinstance(t, cst.Subscript) and isinstance(t.value, cst.Attribute) and is_name(t.value.value, "self") \
                        and t.value.attr.value in ("_modules", "__dict__", "_parameters", "_buffers"):
                    return f"self.{t.value.attr.value}[...]"
        if isinstance(node, cst.Call) and isinstance(node.func, (cst.Name, cst.Attribute)):
            called = node.func.value if isinstance(node.func, cst.Name) else node.func.attr.value
            args = list(node.args)
            if called in ("setattr", "__setattr__") and isinstance(node.func, cst.Name):
                args = args[1:] if args and is_name(args[0].value, "self") else []
            elif called in ("add_module", "register_module", "__setattr__") and isinstance(node.func, cst.Attribute) \
                    and is_name(node.func.value, "self"):
                pass
            elif called == "update" and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Attribute) \
                    and is_name(node.func.value.value, "self") and node.func.value.attr.value in ("_modules", "__dict__"):
                return f"self.{node.func.value.attr.value}.update(...)"
            else:
                continue
            if not args:
                continue
            key = args[0].value
            if not isinstance(key, cst.SimpleString) or key.evaluated_value in names:
                return key.evaluated_value if isinstance(key, cst.SimpleString) else ANY_NAME  # type: ignore[return-value]
    return None


def _base_name(value: cst.BaseExpression) -> Optional[str]:
    """`Name` or `module.Name` as a base class: its last name."""
    if isinstance(value, cst.Name):
        return value.value
    if isinstance(value, cst.Attribute):
        return value.attr.value
    return None


# calls that may be given a class without changing it
_CLASS_READERS = frozenset({
    "isinstance", "issubclass", "super", "type", "id", "repr", "str", "print", "getattr", "hasattr",
    "partial",  # a factory `partial(Hiera, embed_dim=96)` only stores it
})


def _hands_over_a_class(call: cst.Call, name: str) -> bool:
    """``call`` gets the class ``name`` (or ``type(x)``, ``x.__class__``) as an argument,
    and is not one of the builtins that only read it.  (A method's own ``__class__`` is
    what this rewrite's checks pass to `not_overridden`, which only reads it.)"""
    if is_name(call.func) and call.func.value in _CLASS_READERS:  # type: ignore[attr-defined]
        return False
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "partial" and is_name(call.func.value, "functools"):
        return False
    if is_name(call.func, "not_overridden"):
        return False  # this rewrite's own check: `not_overridden(self, __class__, "m")` reads them
    for arg in call.args:
        value = arg.value
        if is_name(value, "self") or _names_the_class(value, {name}):  # an instance, or the class (in a list...)
            return True
        if isinstance(value, cst.Attribute) and value.attr.value == "__class__":
            return True
        if isinstance(value, cst.Call) and is_name(value.func, "type") and len(value.args) == 1:
            return True
    return False


ANY_NAME = "*"  # a class body that may bind any name: locals()/vars()/exec/eval, global/nonlocal
_DYNAMIC = frozenset({"locals", "vars", "exec", "eval"})


def class_bindings(cls: cst.ClassDef) -> Dict[str, List[cst.CSTNode]]:
    """Every binding of a name in ``cls``'s own scope (its body, inside if/try/with/for
    too, not inside nested defs, classes, lambdas or comprehensions), in source order:
    name -> the binding nodes (a def, a class, an assignment, an import, ...).  ``ANY_NAME``
    maps to the statements that may bind any name."""
    found: Dict[str, List[cst.CSTNode]] = {}

    def add(name: str, node: cst.CSTNode) -> None:
        found.setdefault(name, []).append(node)

    def targets(node: cst.CSTNode, target: cst.BaseExpression) -> None:
        for each in flatten_targets(target):
            if isinstance(each, cst.Name):
                add(each.value, node)

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            add(node.name.value, node)
            for decorator in node.decorators:
                visit(decorator)
            return  # its body is its own scope
        if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.Del)):
            targets(node, node.target)
        elif isinstance(node, cst.NamedExpr):
            targets(node, node.target)
        elif isinstance(node, cst.AsName) and isinstance(node.name, (cst.Name, cst.Tuple, cst.List)):
            targets(node, node.name)  # with ... as m, except E as m, import x as m
        elif isinstance(node, cst.ImportAlias) and node.asname is None:
            root = node.name
            while isinstance(root, cst.Attribute):
                root = root.value
            if isinstance(root, cst.Name):
                add(root.value, node)
        elif isinstance(node, cst.ImportStar):
            add(ANY_NAME, node)
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            add(ANY_NAME, node)
        elif isinstance(node, cst.Call) and is_name(node.func) and node.func.value in _DYNAMIC:  # type: ignore[attr-defined]
            add(ANY_NAME, node)
        elif isinstance(node, (cst.MatchAs, cst.MatchStar)) and node.name is not None:
            add(node.name.value, node)
        elif isinstance(node, cst.MatchMapping) and node.rest is not None:
            add(node.rest.value, node)
        for child in node.children:
            visit(child)

    for stmt in cls.body.body:  # type: ignore[union-attr]
        visit(stmt)
    return found


def _first_line(node: cst.CSTNode) -> str:
    text = code(node).strip().splitlines()
    return text[0] if text else ""


def _at(ctx: PlanContext, module: cst.Module, node: cst.CSTNode) -> str:
    try:
        return f" at line {ctx.position(node).line}" if module is ctx.module else ""
    except KeyError:  # pragma: no cover -- a node without a position
        return ""


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it, in source order.  A whole module's list is kept
    (:func:`_flat`), and for the last modules walked where each node's own subtree lies in
    it: a node of a module walked is a slice of it."""
    if isinstance(node, cst.Module):
        cached = _WALKED.get(id(node))
        if cached is None or cached[0] is not node:
            nodes, ends = _flat(node)
            for start, each in enumerate(nodes):
                _SPANS[id(each)] = (each, nodes, start, ends[start])
            cached = _WALKED[id(node)] = (node, nodes)
            while len(_WALKED) > 64:
                _, (_, gone) = _WALKED.popitem(last=False)
                for each in gone:
                    found = _SPANS.get(id(each))
                    if found is not None and found[1] is gone:
                        del _SPANS[id(each)]
        else:
            _WALKED.move_to_end(id(node))
        return iter(cached[1])
    found = _SPANS.get(id(node))
    if found is not None and found[0] is node:
        return iter(found[1][found[2]:found[3]])
    if type(node) not in _BLOCKS:
        return subtree(node)
    # a block of a module whose spans are not kept: its list is (a class body, asked of
    # again for each method)
    kept = _SUBTREES.get(id(node))
    if kept is None or kept[0] is not node:
        kept = _SUBTREES[id(node)] = (node, list(subtree(node)))
        while len(_SUBTREES) > 256:
            _SUBTREES.popitem(last=False)
    else:
        _SUBTREES.move_to_end(id(node))
    return iter(kept[1])


def walk_in(module: cst.Module, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """:func:`walk` of ``node``, a node of ``module``, from the module's list (its spans
    made first, where they are not kept)."""
    walk(module)
    return walk(node)


_BLOCKS = exact_types(cst.IndentedBlock, cst.FunctionDef, cst.ClassDef)
_SUBTREES: "OrderedDict[int, Tuple[cst.CSTNode, List[cst.CSTNode]]]" = OrderedDict()


def nodes_of(module: cst.Module, kind: Any) -> List[Any]:
    """``module``'s nodes of ``kind`` (cst.ClassDef, cst.Call, a tuple of them), in
    source order: kept for many more modules than :func:`walk` keeps its spans for (a
    package's 128 modules, searched for subclasses again and again)."""
    key = (id(module), kind)
    found = _OF_KIND.get(key)
    if found is None or found[0] is not module:
        nodes = _flat(module)[0]
        places = _per_module(_PLACES, module, id(module), lambda: _places_by_type(nodes), 512)
        # isinstance(n, kind) is issubclass(type(n), kind): asked once per type present
        held = [places[t] for t in places if issubclass(t, kind)]
        found = _OF_KIND[key] = (module, [nodes[i] for i in (held[0] if len(held) == 1 else sorted(i for each in held for i in each))])
        while len(_OF_KIND) > 4096:
            _OF_KIND.popitem(last=False)
    return found[1]


def _places_by_type(nodes: List[cst.CSTNode]) -> Dict[type, List[int]]:
    """Where each type of node lies in ``nodes``, in order."""
    places: Dict[type, List[int]] = {}
    for i, node in enumerate(nodes):
        places.setdefault(type(node), []).append(i)
    return places


_PLACES: Dict[int, Tuple[cst.Module, Dict[type, List[int]]]] = {}


# the nodes that may store to a name, an attribute or an item, and calls
_STORES_AND_CALLS = (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.Del, cst.Call)
_OF_KIND: "OrderedDict[Tuple[int, Any], Tuple[cst.Module, List[Any]]]" = OrderedDict()


def _flat(module: cst.Module) -> Tuple[List[cst.CSTNode], List[int]]:
    """``module``'s nodes in source order, and where each one's subtree ends in that list;
    kept for the last 512 modules (libcst computes a node's children anew each time it is
    asked: the one walk of a module that may be slow)."""
    found = _FLAT.get(id(module))
    if found is None or found[0] is not module:
        nodes: List[cst.CSTNode] = []
        ends: List[int] = []

        def visit(node: cst.CSTNode) -> None:
            start = len(nodes)
            nodes.append(node)
            ends.append(0)
            for child in node.children:
                visit(child)
            ends[start] = len(nodes)

        visit(module)
        found = _FLAT[id(module)] = (module, nodes, ends)
        while len(_FLAT) > 512:
            _FLAT.popitem(last=False)
    else:
        _FLAT.move_to_end(id(module))
    return found[1], found[2]


_FLAT: "OrderedDict[int, Tuple[cst.Module, List[cst.CSTNode], List[int]]]" = OrderedDict()
_WALKED: "OrderedDict[int, Tuple[cst.Module, List[cst.CSTNode]]]" = OrderedDict()
# id(node) -> (node, the list of the module walked holding it, its subtree's slice)
_SPANS: Dict[int, Tuple[cst.CSTNode, List[cst.CSTNode], int, int]] = {}


# -- may a call write the tensor it is given ---------------------------------------------

# parents through which an expression's value may be the tensor a name holds, or a
# view of it, or a container holding it (a call may return what it is given)
# Tensor methods whose result is a new tensor or value, never the tensor itself or a view
# of it (`m.float()` may be m itself, `m.detach()`, `m.contiguous()` may share it).
FRESH_METHODS = frozenset({
    "clone", "sum", "mean", "prod", "any", "all", "count_nonzero", "item", "tolist", "nonzero",
    "argwhere", "argsort", "cumsum", "logical_not", "logical_and", "logical_or", "logical_xor",
})


Follow = Tuple[Optional[cst.ClassDef], int]  # (the class of the function, calls followed so far)


def _hands_on(ctx: PlanContext, expr: cst.CSTNode, holders: Dict[str, Pos], follow: Optional[Follow] = None) -> bool:
    """Whether ``expr``'s value may be (or hold, or view) a tensor a name in ``holders``
    holds: `m`, `m.view(...)[0]`, `m if c else None`, `[m]`, `f(m)`, `a or m`; not
    `m.shape[1]`, `m.sum() > 0`, `m.clone()` (a new value), `x * m.bool()`, `x[m]`.  A name holds it
    from where it may be bound to it on (``holders``: name -> that position).
    ``follow``: (the class of the function ``expr`` is in, depth): a call given it is
    followed (:func:`_may_return`) rather than taken to return it."""
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
                if ok and follow is not None and parent.func is not child:
                    ok = _may_return(ctx, follow, parent, holders)
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


def _may_return(ctx: PlanContext, follow: Follow, call: cst.Call, holders: Dict[str, Pos]) -> bool:
    """Whether ``call``, given what a name of ``holders`` holds, may return it (or a view of
    it): not where every function it may run is the files' own (a method, a submodule's
    forward, a module function: ``_callees``) and none returns or yields what may hold the
    parameter bound to it.  (What a callee keeps otherwise is :func:`kept_by_a_call`'s.)"""
    cls, depth = follow
    targets = _callees(ctx, cls, call) if depth < 6 else None
    if not targets:
        # not known, or torch's or a builtin (`torch.flatten(m)` is a view of m, `dict(m=m)`
        # holds it); only a submodule built by code not in the files (README: out of
        # contract, as for writing it) is taken to return a new tensor
        func = call.func
        return not (
            targets == [] and cls is not None and isinstance(func, cst.Attribute) and is_name(func.value, "self")
            and method_of(ctx, ctx.module, cls, func.attr.value) is None and bool(_submodules(ctx, func.attr.value))
            and not torch_or_builtin(ctx, call)
        )
    given = [a for a in call.args if _hands_on(ctx, a.value, holders)]
    for callee_ctx, callee_cls, callee, bound_self in targets:
        inside = (callee_cls, depth + 1)
        for arg in given:
            param = bound_parameter(callee, call, arg, bound_self=bound_self)
            if param is None:
                return True
            inner = _holders(callee_ctx, callee, param, inside)
            for node in walk(callee.body):
                if isinstance(node, (cst.Return, cst.Yield)) and node.value is not None and _hands_on(callee_ctx, node.value, inner, inside):
                    return True
    return False


def _stored(ctx: PlanContext, func: cst.FunctionDef, holders: Dict[str, Pos], follow: Follow, before: Optional[cst.CSTNode] = None):
    """(the target, its binding) where ``func`` binds what may hold the tensor (``holders``)
    to other than a local name: an attribute, an item, a `global`/`nonlocal` name; else None.
    ``before``: only bindings that run before that node (:func:`runs_before`)."""
    declared = {i.name.value for n in walk(func.body) if isinstance(n, (cst.Global, cst.Nonlocal)) for i in n.names}
    for value, target, binding in value_bindings(func):
        if before is not None and not runs_before(ctx, binding, before):
            continue
        if _hands_on(ctx, value, holders, follow):
            for bound in flatten_targets(target):  # type: ignore[arg-type]
                if not isinstance(bound, cst.Name) or bound.value in declared:
                    return bound, binding
    return None


def stored_to_a_holder(
    ctx: PlanContext, func: cst.FunctionDef, name: str, cls: Optional[cst.ClassDef], before: Optional[cst.CSTNode] = None
):
    """:func:`_stored` for the tensor ``name`` holds, calls of the files followed (``cls``:
    ``func``'s class); and its holders."""
    holders = _holders(ctx, func, name, (cls, 0))
    return _stored(ctx, func, holders, (cls, 0), before), holders


def kept_by_a_call(
    ctx: PlanContext,
    cls: Optional[cst.ClassDef],
    func: cst.FunctionDef,
    name: str,
    proven: Optional[cst.CSTNode] = None,
    before: Optional[cst.CSTNode] = None,
) -> Optional[str]:
    """Why a call in ``func`` given what may hold the tensor ``name`` holds may keep it
    beyond its local names (a callee of the files storing it on an attribute, an item or a
    global, transitively; a call not followed), else None.  ``cls``: ``func``'s class;
    ``proven``: a statement whose calls are proven otherwise (the indices' mask maker);
    ``before``: only calls that run before that node."""
    skip = {id(n) for n in walk(proven)} if proven is not None else set()
    if before is not None:
        skip |= {id(n) for n in walk(func.body) if isinstance(n, cst.Call) and not runs_before(ctx, n, before)}
    return _kept(ctx, (cls, 0), func, _holders(ctx, func, name, (cls, 0)), name, skip)


def _kept(
    ctx: PlanContext, follow: Follow, func: cst.FunctionDef, holders: Dict[str, Pos], name: str, skip: Set[int] = frozenset()  # type: ignore[assignment]
) -> Optional[str]:
    cls, depth = follow
    for call in walk(func.body):
        if not isinstance(call, cst.Call) or id(call) in skip:
            continue
        given = [a for a in call.args if _hands_on(ctx, a.value, holders, follow)]
        if not given:
            continue
        where = f"`{code(call).splitlines()[0]}` at line {ctx.position(call).line}"
        targets = _callees(ctx, cls, call) if depth < 6 else None
        if targets is None:
            return f"{name} is passed to {where}, which may keep it{_unproven_receiver(ctx, cls, call)}"
        for callee_ctx, callee_cls, callee, bound_self in targets:
            inside = (callee_cls, depth + 1)
            for arg in given:
                param = bound_parameter(callee, call, arg, bound_self=bound_self)
                if param is None:
                    return f"{name} is passed to {where}, whose parameter for it is not plain"
                inner = _holders(callee_ctx, callee, param, inside)
                stored = _stored(callee_ctx, callee, inner, inside)
                if stored is not None:
                    return f"{name} is kept by `{code(stored[0])} = ...` in {callee.name.value}, called by {where}"
                why = _kept(callee_ctx, inside, callee, inner, name)
                if why is not None:
                    return why
    return None


def hands_on(ctx: PlanContext, expr: cst.CSTNode, names: Set[str]) -> bool:
    """:func:`_hands_on` for names that hold the tensor everywhere."""
    return _hands_on(ctx, expr, {name: Pos(0, 0) for name in names})


def value_bindings(func: cst.FunctionDef) -> List[Tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode]]:
    """(value, target, binding) of every binding in ``func``'s body: assignments (plain,
    annotated and augmented), `:=`, `for` targets (the iterable as value), `with ... as`."""
    return list(_per_module(_VALUE_BINDINGS, func, id(func), lambda: _find_value_bindings(func), 4096))


_VALUE_BINDINGS: Dict[int, Tuple[cst.FunctionDef, List[Tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode]]]] = {}
_VALUE_BINDING_TYPES = exact_types(cst.Assign, cst.AnnAssign, cst.NamedExpr, cst.AugAssign, cst.For, cst.CompFor, cst.WithItem)


def _find_value_bindings(func: cst.FunctionDef) -> List[Tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode]]:
    bindings: List[Tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode]] = []
    for node in walk(func.body):
        if type(node) not in _VALUE_BINDING_TYPES:
            continue
        if isinstance(node, cst.Assign):
            bindings.extend((node.value, t.target, node) for t in node.targets)
        elif isinstance(node, (cst.AnnAssign,)) and node.value is not None:
            bindings.append((node.value, node.target, node))
        elif isinstance(node, cst.NamedExpr):
            bindings.append((node.value, node.target, node))
        elif isinstance(node, cst.AugAssign):  # `rows += mask.unbind(0)` (a list extended)
            bindings.append((node.value, node.target, node))
        elif isinstance(node, (cst.For, cst.CompFor)):
            bindings.append((node.iter, node.target, node.iter))
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            bindings.append((node.item, node.asname.name, node))
    return bindings


def _holders(ctx: PlanContext, func: cst.FunctionDef, name: str, follow: Optional[Follow] = None) -> Dict[str, Pos]:
    """``name`` (from the start) and every name of ``func`` bound to what may hold it
    (:func:`_hands_on`), transitively, each from the end of that binding on (from the
    start of the outermost loop holding it): assignments, `for` targets over it,
    `with ... as`, `:=`.  ``follow``: as :func:`_hands_on`'s."""
    bindings = value_bindings(func)
    holders: Dict[str, Pos] = {name: Pos(0, 0)}
    changed = True
    while changed:
        changed = False
        for value, target, binding in bindings:
            if not _hands_on(ctx, value, holders, follow):
                continue
            # a comprehension's element comes before its `for`: from the comprehension's start
            loops = [
                ctx.parent(a) if isinstance(a, cst.CompFor) else a
                for a in ctx.ancestors(binding) if isinstance(a, (cst.For, cst.While, cst.CompFor))
            ]
            since = min((ctx.position(a) for a in loops), default=ctx.span(binding).end)
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
    after: Optional[cst.CSTNode] = None,
) -> Optional[str]:
    """Why ``func`` may write the tensor ``name`` holds (in place, itself or through a
    call given it), else None.  ``before``: only what runs before that node counts (the
    statement using the count; not inside a loop).  ``cls``: the class ``func`` is a
    method of, for `self.<method>(...)` and `self.<submodule>(...)` calls.

    Proven not to write: torch's functions in torch, torch.nn.functional, linalg, fft,
    special and Tensor, and Python's math (no trailing ``_``; ``out=`` is a write; not those calling a
    function they are given: vmap, compile, cond -- torch.utils.checkpoint and the other
    namespaces are not known), the listed builtins, and the file's own submodules (`self.patch_embed = PatchEmbed(...)`,
    assigned once in the module; its ``forward``), module functions and the methods the
    emitted code checks at run time (:func:`run_time_checked`), followed into their
    bodies, here or in a module beside the file.  Any other method is not followed (a
    subclass anywhere may override it); a submodule replaced by code not read is not seen.  What may hold the
    tensor: :func:`_holders`, those calls followed (`x = self.patch_embed(x, mask=mask)`
    holds it only if that forward may return it)."""
    holders = _holders(ctx, func, name, (cls, 0))
    for held, since in sorted(holders.items()):
        node = in_place_write(ctx, func, held)
        if (
            node is not None and ctx.position(node) >= since and (before is None or runs_before(ctx, node, before))
            and (after is None or _runs_after(ctx, node, after))
        ):
            through = f" (through `{held}`, which may hold it)" if held != name else ""
            return f"{name} is written in place by `{statement_of(ctx, node)}` at line {ctx.position(node).line}{through}"
    if len(_seen) > 8:
        return f"{name} is passed through more than 8 calls from {func.name.value}: not followed"
    calls = [n for n in walk(func.body) if isinstance(n, cst.Call)]
    for call in calls:
        if before is not None and not runs_before(ctx, call, before):
            continue
        if after is not None and not _runs_after(ctx, call, after):
            continue
        given = [a for a in call.args if _hands_on(ctx, a.value, holders)]
        if not given:
            continue
        where = f"`{code(call).splitlines()[0]}` at line {ctx.position(call).line}"
        targets = _callees(ctx, cls, call)
        if targets is None:
            return f"{name} is passed to {where}, which may write it in place{_unproven_receiver(ctx, cls, call)}"
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
    return _handed_by_a_protocol(ctx, cls, func, name, holders, before, after)


def _handed_by_a_protocol(
    ctx: PlanContext, cls: Optional[cst.ClassDef], func: cst.FunctionDef, name: str, holders: Dict[str, Pos],
    before: Optional[cst.CSTNode], after: Optional[cst.CSTNode],
) -> Optional[str]:
    """Why an operator, a comparison, an item read or store, `+=` or a torch function may
    hand what ``holders`` hold to an object's own code (`mask * self.vis` runs the module's
    `__rmul__`, `self.vis[mask]` its `__getitem__`, `torch.logical_and(mask, vis)` its
    `__torch_function__`: hunt 25b), else None: each other part there must be typed a tensor
    or data (``masked_select._Reader``, a call's result taken for one, as this proof
    follows calls itself)."""
    from .masked_select import _Owner, _Reader  # (masked_select reads this module)

    reader = None
    for node in walk(func.body):
        if isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)):
            parts = [node.left, node.right]
        elif isinstance(node, cst.Comparison):
            parts = [node.left, *(c.comparator for c in node.comparisons)]
        elif isinstance(node, cst.Subscript):
            target = ctx.parent(node)
            fill = ctx.parent(target) if isinstance(target, cst.AssignTarget) else None
            if isinstance(fill, cst.Assign) and method_call(fill.value, "flatten") is not None:
                continue  # the decoder's fill `x_dec[mask] = x.flatten()`: its grid is HR004's and HR005's own proof
            parts = [node.value, *(e.slice.value for e in node.slice if isinstance(e.slice, cst.Index))]
        elif isinstance(node, cst.AugAssign):
            parts = [node.target, node.value]
        elif isinstance(node, cst.Call) and torch_or_builtin(ctx, node):
            parts = [a.value for a in node.args]
        else:
            continue
        if before is not None and not runs_before(ctx, node, before) or after is not None and not _runs_after(ctx, node, after):
            continue
        handed = [p for p in parts if _hands_on(ctx, p, holders)]
        if not handed:
            continue
        if reader is None:
            reader = _Reader(ctx, _Owner(ctx, cls, True) if cls is not None else None, func, 0, [], trust_calls=True)
        for part in parts:
            if any(part is h for h in handed):
                continue
            reader.blame = None
            if not reader.value(part):
                why = f" ({reader.blame})" if reader.blame else ""  # (what makes it untyped, maybe a later binding)
                return (
                    f"{name} is handed to `{_first_line(part)}` by `{statement_of(ctx, node)}` at line {ctx.position(node).line}:"
                    f" an object's operator, item or torch-function protocol may write it{why}"
                )
    return None


def statement_of(ctx: PlanContext, node: cst.CSTNode) -> str:
    """What a message quotes for a write ``node``: a call itself (`row[:1].fill_(True)`); for an
    assignment's target, the simple statements of its line (`k[:, 0] = True`, not `k[:, 0] =`)."""
    line = None if isinstance(node, cst.Call) else enclosing_line(ctx, node)
    return "; ".join(code(small) for small in line.body) if line is not None else code(node)


def _runs_after(ctx: PlanContext, node: cst.CSTNode, after: cst.CSTNode) -> bool:
    """``node`` may run after the statement ``after`` (it comes later, or a loop holds both)."""
    around = {id(a) for a in ctx.ancestors(after) if isinstance(a, (cst.For, cst.While))}
    if any(id(a) in around for a in ctx.ancestors(node)):
        return True
    return ctx.position(node).line > ctx.span(after).end.line


def runs_before(ctx: PlanContext, node: cst.CSTNode, before: cst.CSTNode) -> bool:
    if any(isinstance(a, (cst.For, cst.While)) for a in ctx.ancestors(before)):
        return True  # a loop runs what follows before the next use
    return ctx.position(node).line < ctx.position(before).line


# builtins that write no tensor they are given
_PURE_BUILTINS = frozenset({
    "isinstance", "len", "int", "float", "bool", "str", "repr", "print", "tuple", "list", "dict", "set", "min", "max",
    "sum", "abs", "range", "zip", "enumerate", "sorted", "reversed", "any", "all", "type", "id", "hash", "getattr", "hasattr",
})


# torch's top-level Python functions that call a function they are given (what it does
# with the tensor is not seen); the names under torch other than these namespaces (torch.
# utils.checkpoint, torch.func, torch.autograd, torch.distributed's in-place collectives...)
# are not taken to write nothing either
_CALLING_TORCH_FUNCTIONS = frozenset({"compile", "cond", "vmap", "while_loop", "_disable_dynamo", "_overload", "classproperty"})
_PURE_TORCH_NAMESPACES = frozenset({"torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "torch.Tensor", "math"})


def _pure_function(qualified: str) -> bool:
    if qualified.startswith("builtins."):
        return qualified[len("builtins."):] in _PURE_BUILTINS
    namespace, _, name = qualified.rpartition(".")
    return (
        namespace in _PURE_TORCH_NAMESPACES and not name.endswith("_")
        and not (namespace == "torch" and name in _CALLING_TORCH_FUNCTIONS)
    )


def torch_or_builtin(ctx: PlanContext, call: cst.Call) -> bool:
    """``call`` runs one of torch's functions that only compute (no in-place one, none
    given a function to call) or a builtin of :data:`_PURE_BUILTINS` without a `key=`."""
    qualified = ctx.qualified_names(call.func)
    return (
        bool(qualified) and all(_pure_function(q) for q in qualified)
        and not any(a.keyword is not None and a.keyword.value == "key" for a in call.args)
        # `F.threshold(m.view(torch.uint8), 0, 1, inplace=True)` writes (hunt 24b F6), and
        # given it by position (24a F6)
        and not any(a.keyword is not None and a.keyword.value == "inplace" and not is_name(a.value, "False") for a in call.args)
        and not any(
            (at := _INPLACE_AT.get(q.rpartition(".")[2])) is not None and q.startswith("torch.nn.functional.")
            and len([a for a in call.args if a.keyword is None]) > at
            for q in qualified
        )
    )


# torch.nn.functional's functions taking `inplace`, and its position
_INPLACE_AT = {
    "threshold": 3, "relu": 1, "relu6": 1, "hardtanh": 3, "elu": 2, "selu": 1, "celu": 2, "leaky_relu": 2, "rrelu": 4,
    "dropout": 3, "alpha_dropout": 3, "feature_alpha_dropout": 3, "dropout1d": 3, "dropout2d": 3, "dropout3d": 3,
    "hardsigmoid": 1, "hardswish": 1, "silu": 1, "mish": 1,
}



# (class, method) pairs whose `self.<method>(...)` calls the emitted code checks at run
# time to run the class's own method (``run_time_checked``); of the calls in the function
# being proven (_WITHIN), only those the emitted check guards (_GUARDED)
_CHECKED: Set[Tuple[int, str]] = set()
_WITHIN: Set[int] = set()
_GUARDED: Set[int] = set()


@contextlib.contextmanager
def run_time_checked(cls: cst.ClassDef, names: Iterable[str], func: cst.FunctionDef, guarded: Iterable[cst.Call]) -> Iterator[None]:
    """While proving inside this block, `self.<name>(...)` in a method of ``cls`` runs
    ``cls``'s own method for each of ``names``: the emitted code checks that at run time
    (`not_overridden(self, __class__, ...)`) before the calls ``guarded`` of ``func``, and
    takes the count only then.  Another call of ``func`` (`m(x, mask if c else m2)`, which
    the check does not guard, hunt 22b F6) and any other self method are not followed
    (:func:`_callees`)."""
    added = {(id(cls), n) for n in names} - _CHECKED
    within = {id(n) for n in walk(func.body) if isinstance(n, cst.Call)} - _WITHIN
    marked = {id(c) for c in guarded} - _GUARDED
    _CHECKED.update(added)
    _WITHIN.update(within)
    _GUARDED.update(marked)
    try:
        yield
    finally:
        _CHECKED.difference_update(added)
        _WITHIN.difference_update(within)
        _GUARDED.difference_update(marked)


def _unchecked_method(ctx: PlanContext, cls: Optional[cst.ClassDef], call: cst.Call) -> bool:
    """``call`` is `self.<m>(...)`, <m> a method (not a submodule) that the emitted code
    does not check at run time: which function it runs is the instance's class's choice,
    and a subclass anywhere (a training script, a factory, a mixin) may override it."""
    func = call.func
    return (
        cls is not None and isinstance(func, cst.Attribute) and is_name(func.value, "self")
        and ((id(cls), func.attr.value) not in _CHECKED or id(call) in _WITHIN and id(call) not in _GUARDED)
        and method_of(ctx, ctx.module, cls, func.attr.value) is not None
    )


def _callees(ctx: PlanContext, cls: Optional[cst.ClassDef], call: cst.Call):
    """The functions ``call`` may run, each as (context, class, function, bound_self), to
    follow; [] for torch's functions and the builtins (not in place: in_place_write sees
    those) and for a submodule built by code not in the files (out of contract: README,
    "What the rewrite assumes"); None when not known.  A self method is followed only
    where the emitted code checks at run time that it runs the one read
    (:func:`run_time_checked`); what else an override might do is not known."""
    if torch_or_builtin(ctx, call):
        return []
    func = call.func
    if isinstance(func, cst.Attribute) and is_name(func.value, "self") and cls is not None:
        if _unchecked_method(ctx, cls, call) or self_call_unproven(ctx, cls, func.attr.value) is not None:
            return None
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
        classes = _built_classes(ctx, ctx.module, built, 0)
        if classes is None:
            return None  # `layers.PatchEmbed(...)`, `(A if c else B)(...)`, a factory not read: not followed
        for made in classes:
            if module_class_unproven(ctx, made[0], made[1]) is not None:
                return None
            forward = method_of(ctx, made[0], made[1], "forward")
            targets.append((ctx.context_of(forward[0]), forward[1], forward[2], True))
        return targets
    if isinstance(func, cst.Name):
        if _bound_locally(ctx, call, func.value):
            return None  # `f = wrap(f)` in the calling function: not the module's f
        found_fn = function_of(ctx, ctx.module, func.value)
        if found_fn is None and func.value in _PURE_BUILTINS and not ctx.qualified_names(func) - {f"builtins.{func.value}"}:
            return []
        if found_fn is None or found_fn[1].decorators or followed_function(ctx, ctx.module, func.value) is None:
            return None
        return [(ctx.context_of(found_fn[0]), None, found_fn[1], False)]
    return None


def _unproven_receiver(ctx: PlanContext, cls: Optional[cst.ClassDef], call: cst.Call) -> str:
    """" (<why>)" where ``call`` is `self.<attr>(...)` whose receivers are not proven
    (:func:`self_call_unproven`), else ""."""
    func = call.func
    if cls is None or not (isinstance(func, cst.Attribute) and is_name(func.value, "self")):
        return ""
    if _unchecked_method(ctx, cls, call):
        return (
            f" (`self.{func.attr.value}` is a method: a subclass anywhere may override it, and the emitted"
            " code checks at run time only the methods it passes a count to)"
        )
    why = self_call_unproven(ctx, cls, func.attr.value)
    if why is None and method_of(ctx, ctx.module, cls, func.attr.value) is None:
        # a submodule: why its class's call is not the forward read
        classes = _built_classes(ctx, ctx.module, _submodules(ctx, func.attr.value), 0) or []
        why = next((w for made in classes if (w := module_class_unproven(ctx, made[0], made[1]))), None)
    return f" ({why})" if why else ""


def receiver_modules(ctx: PlanContext, cls: cst.ClassDef) -> Tuple[List[cst.Module], List[cst.Module]]:
    """(modules, kin modules): where a class whose instance a method of ``cls`` (in
    ``ctx.module``) may run on is defined: this module, the modules it imports, the
    modules beside it naming ``cls``; and those of them defining ``cls`` or a subclass."""
    def find() -> Tuple[List[cst.Module], List[cst.Module]]:
        # a module found far from the planned file (`..models.hiera`): the planned file's
        # own folder is the one listed (hunt 20a: the MAE planned in `mae/`)
        planned = ctx.planned()
        needle = [cls.name.value.encode()]
        imported = [m for _, m in imported_modules(ctx, list(dict.fromkeys([ctx.module, planned.module])))[0]]
        beside = ctx.modules_beside(needle) or planned.modules_beside(needle) or []
        modules = list(dict.fromkeys([ctx.module, planned.module, *imported, *beside]))
        subs = {id(c) for c in subclasses_in(modules, cls.name.value)} | {id(cls)}
        kin = [m for m in modules if any(id(n) in subs for n in nodes_of(m, cst.ClassDef))]
        return modules, kin

    return ctx.fact(("receivers", id(ctx.module), id(cls)), find, ctx.module, cls)


def self_call_unproven(ctx: PlanContext, cls: cst.ClassDef, attr: str) -> Optional[str]:
    """Why `self.<attr>(...)` in a method of ``cls`` (in ``ctx.module``) may run other
    code than what ``cls`` shows for it (hunt 19c): `self` may be an instance of a
    subclass (here, in a module this one imports, or beside it) binding or setting
    ``attr``; the method is replaced on its class or instance (:func:`replaced`); or,
    for a submodule, a module defining ``cls`` or a subclass registers a forward hook,
    which runs around the call given its arguments.  None when none of these holds."""
    def find() -> Optional[str]:
        if ctx.planned().beside_unread():
            return "the planned file's folder holds more than 128 modules: a subclass there is not read"
        modules, kin = receiver_modules(ctx, cls)
        family = {cls.name.value} | {c.name.value for c in subclasses_in(modules, cls.name.value)}
        why = overridden_below(modules, cls, {attr})
        for module in modules if why is None else ():
            for node in nodes_of(module, cst.Call):
                if is_name(node.func) and node.func.value in _CLASS_READERS and not (  # type: ignore[attr-defined]
                    is_name(node.func, "type") and len(node.args) == 3  # `type(name, bases, ns)` makes a class
                ):
                    continue
                # the class (or a subclass) handed to a call (a class factory, `type(...)`
                # with it among the bases), or `self.<attr>` handed to one (a helper
                # registering a hook on the submodule)
                handed = next((a for a in node.args if _names_the_class(a.value, family) or (
                    isinstance(a.value, cst.Attribute) and is_name(a.value.value, "self") and a.value.attr.value == attr)), None)
                if handed is not None:
                    why = f"`{_first_line(node)}` is given `{code(handed.value)}`: it may change what `self.{attr}` runs"
                    break
            if why is not None:
                break
        if why is None:
            found = method_of(ctx, ctx.module, cls, attr)
            if found is not None:
                why = replaced(ctx.context_of(found[0]), found[0], found[1], attr)
                # a patch of the method in a module of the receivers (the planned file
                # patching a class of a module found far from it: `Hiera.prepare_mask = f`)
                owners = _kin(found[1].name.value, modules) if why is None else set()
                patch = next((p for m in modules if why is None and (p := _patches(m, found[1].name.value, attr, owners))), None)
                if patch is not None:
                    why = f"`{patch}` may replace {found[1].name.value}.{attr}"
            else:
                # a submodule: another module of the receivers storing that attribute on
                # an instance (`model.patch_embed = Wrapper(model.patch_embed)` in a
                # factory of hiera_mae.py: hunt 21b F2); this module's stores are the
                # values `_submodules` follows, a subclass's `self.<attr> = ...`
                # overridden_below's (a class of the same name elsewhere is not it)
                # a base's or mixin's `self.<attr> = ...` counts (hunt 22b F2)
                patch = stored_elsewhere(ctx, cls, attr)
                if patch is not None:
                    why = f"`{patch}` may replace self.{attr}"
                elif any(registers_hooks(m) for m in kin):
                    why = "a module of the class or its subclasses registers a forward hook or pre-hook, which may be given it"
        return why

    return ctx.fact(("self call", id(ctx.module), id(cls), attr), find, ctx.module, cls)


def stored_elsewhere(ctx: PlanContext, cls: cst.ClassDef, attr: str) -> Optional[str]:
    """The first statement of another module of the receivers of ``cls`` (in ``ctx.module``)
    that may store the submodule ``attr`` on an instance: `model.patch_embed = W(...)` in a
    factory (hunt 21b F2), `m.decoder_blocks[-1].attn = Vis()` (hunt 23a F5), a base's or
    mixin's `self.<attr> = ...` (hunt 22b F2), a set by name.  (This module's stores are
    the values `_submodules` follows; a subclass's `self.<attr> = ...` overridden_below's.)"""
    modules, _ = receiver_modules(ctx, cls)
    owners = _kin(cls.name.value, modules) - {cls.name.value}
    return next((
        p for m in modules if m is not ctx.module
        and (p := _patches(m, cls.name.value, attr, owners) or sets_submodule_by_name(m, attr, owners))
    ), None)


# nn.Module's hook registrations: a forward (pre-)hook runs around a submodule's call,
# given its arguments (with_kwargs=True: its keyword arguments too)
FORWARD_HOOKS = frozenset({
    "register_forward_pre_hook", "register_forward_hook",
    "register_module_forward_pre_hook", "register_module_forward_hook",
})


def _built_classes(ctx: PlanContext, module: cst.Module, values: Iterable[cst.BaseExpression], depth: int):
    """The classes of the files whose instances ``values`` (of ``module``) may be: a
    class's call (`PatchEmbed(...)`), each branch of a conditional, a call of a function
    of the files (`make_patch_embed(...)`: what each of its returns builds); a class of
    another package's (`nn.Conv2d(...)`) adds none.  None when one is not known."""
    found: List[Tuple[cst.Module, cst.ClassDef]] = []
    for value in values:
        if isinstance(value, cst.IfExp):
            more = _built_classes(ctx, module, [value.body, value.orelse], depth)
        elif isinstance(value, cst.Call) and isinstance(value.func, cst.IfExp):  # `(A if c else B)(...)`
            more = _built_classes(ctx, module, [cst.Call(func=b) for b in (value.func.body, value.func.orelse)], depth)
        elif isinstance(value, cst.Call) and is_name(value.func):
            name = value.func.value  # type: ignore[attr-defined]
            made = resolve_class(ctx, module, name)
            if made is not None:
                more = [made]
            else:
                factory = followed_function(ctx, module, name) if depth < 3 else None
                if factory is not None and factory[1].decorators:
                    more = None  # a decorator may wrap what it returns (hunt 23b F3)
                elif factory is not None:
                    returns = [n.value for n in walk(factory[1].body) if isinstance(n, cst.Return)]
                    more = _built_classes(ctx, factory[0], returns, depth + 1) if returns and all(r is not None for r in returns) else None
                elif _outside_the_files(ctx.context_of(module), value.func) or _a_parameter(ctx, module, value, name):
                    more = _given_to_outside(ctx, module, value, depth)
                else:
                    more = None
        elif isinstance(value, cst.Call) and _outside_the_files(ctx.context_of(module), value.func):
            more = _given_to_outside(ctx, module, value, depth)
        elif isinstance(value, cst.Call) and isinstance(value.func, cst.Call) and _picks_outside(ctx, module, value.func):
            more = _given_to_outside(ctx, module, value, depth)  # `conv_nd(2)(dim_in, dim_out, ...)`
        else:
            more = None
        if more is None:
            return None
        found.extend(more)
    return found


_BUILTIN_NAMES = frozenset(dir(builtins))


def _given_to_outside(ctx: PlanContext, module: cst.Module, call: cst.Call, depth: int):
    """The classes of the files whose instances ``call``, of code the files do not hold,
    is given and may call (`torch.compile(KeepCorner(...))`, `nn.Sequential(*[Block(...)
    for ...])`: hunt 23b F5): what each call of the files in its arguments builds; None
    where an argument names a class or function of the files uncalled, or a local the
    enclosing function binds from a call of one (`stem = KeepCorner(...)`, then
    `torch.compile(stem)`).  [] for `nn.Conv2d(in_chans, dim, ...)`: out of contract."""
    here = ctx.context_of(module)
    scope = next((a for a in here.ancestors(call) if isinstance(a, cst.FunctionDef)), None)

    def of_the_files(name: str) -> bool:
        return resolve_class(ctx, module, name) is not None or function_of(ctx, module, name) is not None

    found: List[Tuple[cst.Module, cst.ClassDef]] = []
    for arg in call.args:
        called = {id(n.func) for n in walk(arg.value) if isinstance(n, cst.Call)}
        for node in walk(arg.value):
            if isinstance(node, cst.Call) and is_name(node.func) and of_the_files(node.func.value):  # type: ignore[attr-defined]
                more = _built_classes(ctx, module, [node], depth + 1)
                if more is None:
                    return None
                found.extend(more)
            elif isinstance(node, cst.Call) and not _outside_the_files(here, node.func) and not (
                is_name(node.func) and node.func.value in _BUILTIN_NAMES  # type: ignore[attr-defined]
                and not here.qualified_names(node.func) - {f"builtins.{node.func.value}"}  # type: ignore[attr-defined]
                and not _bound_locally(here, node, node.func.value) and not _binds(module, node.func.value)  # type: ignore[attr-defined]
            ):
                return None  # `self._decoder_block(i)`: what it builds is not read (hunt 23a F2)
            elif isinstance(node, cst.Name) and id(node) not in called:
                if of_the_files(node.value):
                    return None
                if scope is not None and _takes(scope, node.value) and injected(ctx, module, scope, node.value) is not None:
                    return None  # `torch.compile(stem)`, a caller handing a stem of the files (hunt 24b F4)
                if scope is not None and any(
                    is_name(n, node.value) and any(
                        isinstance(c, cst.Call) and is_name(c.func) and of_the_files(c.func.value)  # type: ignore[attr-defined]
                        for c in walk(value)
                    )
                    for target, value in _bindings(scope) for n in flatten_targets(target)  # type: ignore[arg-type]
                ):
                    return None
    return found


def _picks_outside(ctx: PlanContext, module: cst.Module, call: cst.Call) -> bool:
    """``call`` is of an undecorated function of the files each of whose returns picks one
    of a literal list of things the files do not hold (upstream's `conv_nd`: `return
    [nn.Identity, nn.Conv1d, nn.Conv2d, nn.Conv3d][n]`)."""
    found = followed_function(ctx, module, call.func.value) if is_name(call.func) else None  # type: ignore[attr-defined]
    if found is None or found[1].decorators:
        return False
    returns = [n.value for n in walk(found[1].body) if isinstance(n, cst.Return)]
    here = ctx.context_of(found[0])
    return bool(returns) and all(
        isinstance(r, cst.Subscript) and isinstance(r.value, (cst.List, cst.Tuple)) and bool(r.value.elements)
        and all(not isinstance(e, cst.StarredElement) and _outside_the_files(here, e.value) for e in r.value.elements)
        for r in returns
    )


def injected(ctx: PlanContext, module: cst.Module, scope: cst.FunctionDef, param: str) -> Optional[str]:
    """The first call of a module read (``ctx``'s, ``module``, what they import, the modules
    beside naming the function) that may hand ``param`` of ``scope`` (a module function, or
    a class's `__init__`: the class's or a subclass's call) a class or function of the files
    (hunt 24b F1, F4; 24a F10): given uncalled (`Hiera(stem_layer=KeepCorner)`,
    `partial(HieraBlock, norm_layer=VisNorm)`, `build_layer(A if c else B, ...)`), or an
    instance of one (`Hiera(stem=KeepCorner(...))`, or a local bound to one), by that
    keyword, `**`, or position; else None."""
    def find() -> Optional[str]:
        here_ = ctx.context_of(module)
        owner = next((a for a in here_.ancestors(scope) if isinstance(a, cst.ClassDef)), None)
        read = [m for _, m in imported_modules(ctx, [ctx.module, ctx.planned().module, module])[0]]
        if owner is not None and scope.name.value == "__init__":
            kin = [owner.name.value] + [c.name.value for c in subclasses_in([module, *read], owner.name.value)]
        elif owner is None:
            kin = [scope.name.value]
        else:
            return None  # a method's parameter: its callers are `self.m(...)` calls, not followed here
        beside = ctx.modules_beside([k.encode() for k in kin]) or []
        modules = list(dict.fromkeys([ctx.module, ctx.planned().module, module, *read, *beside]))
        classes, functions = _names_of_the_files(modules)

        def named(expr: cst.BaseExpression, names: Iterable[str]) -> bool:
            return isinstance(expr, cst.Name) and expr.value in names or isinstance(expr, cst.Attribute) and expr.attr.value in names

        for m in modules:
            here = ctx.context_of(m)
            for node in nodes_of(m, cst.Call):
                partial = (is_name(node.func, "partial") or isinstance(node.func, cst.Attribute) and node.func.attr.value == "partial") \
                    and bool(node.args) and named(node.args[0].value, kin)
                if not (partial or named(node.func, kin)):
                    continue
                scope_ = next((a for a in here.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
                made = {  # locals the caller binds to an instance (`stem = KeepCorner(...)`)
                    t.value for target, value in (_bindings(scope_) if scope_ is not None else ()) for t in flatten_targets(target)  # type: ignore[arg-type]
                    if isinstance(t, cst.Name) and any(isinstance(c, cst.Call) and named(c.func, classes) for c in walk(value))
                }
                for arg in node.args[1:] if partial else node.args:
                    if arg.keyword is not None and arg.keyword.value != param:
                        continue
                    funcs = {id(c.func) for c in walk(arg.value) if isinstance(c, cst.Call)}
                    for n in walk(arg.value):
                        if isinstance(n, (cst.Name, cst.Attribute)) and isinstance(here.parent(n), cst.Attribute) and here.parent(n).attr is n:  # type: ignore[union-attr]
                            continue  # the tail of `a.b`: read with `a.b` itself
                        if (
                            isinstance(n, cst.Call) and named(n.func, classes)
                            or isinstance(n, cst.Name) and n.value in made
                            or isinstance(n, (cst.Name, cst.Attribute)) and id(n) not in funcs and named(n, classes | functions)
                            and not _bound_locally(here, node, root_name(n) or "")
                        ):
                            return _first_line(node)
        return None

    return ctx.fact(("injected", id(ctx.module), id(module), id(scope), param), find, ctx.module, module, scope)


def _names_of_the_files(modules: Iterable[cst.Module]) -> Tuple[Set[str], Set[str]]:
    """The names of the top-level classes and functions of ``modules``."""
    modules = list(modules)
    return (
        {n.name.value for m in modules for n in m.body if isinstance(n, cst.ClassDef)},
        {n.name.value for m in modules for n in m.body if isinstance(n, cst.FunctionDef)},
    )


def _a_parameter(ctx: PlanContext, module: cst.Module, call: cst.Call, name: str) -> bool:
    """``name``, called by ``call``, is a parameter of the function around it (`norm_layer`
    in `__init__`) defaulting to nothing of the files (`partial(nn.LayerNorm, eps=1e-6)`):
    what a caller builds with it is out of contract (README), as code the files do not hold."""
    scope = next((a for a in ctx.context_of(module).ancestors(call) if isinstance(a, cst.FunctionDef)), None)
    if scope is None or not _takes(scope, name):
        return False

    read = [m for _, m in imported_modules(ctx, [ctx.module, ctx.planned().module, module])[0]]
    classes, functions = _names_of_the_files([ctx.module, module, *read])

    def of_the_files(expr: Optional[cst.CSTNode]) -> bool:  # (`hiera_utils.RegisterUnitPatchEmbed`: a tail too)
        return expr is not None and any(
            isinstance(n, cst.Name) and (
                n.value in classes | functions
                or resolve_class(ctx, module, n.value) is not None or function_of(ctx, module, n.value) is not None
            )
            for n in walk(expr)
        )

    params = scope.params
    param = next(p for p in [*params.params, *params.kwonly_params, *params.posonly_params, params.star_arg, params.star_kwarg]
                 if isinstance(p, cst.Param) and p.name.value == name)
    # bound again only by assignments naming nothing of the files (a fork's
    # `norm_layer = partial(getattr(nn, norm_layer), eps=1e-6)`)
    assigned = [value for target, value in _bindings(scope) if any(is_name(t, name) for t in flatten_targets(target))]  # type: ignore[arg-type]
    other = any(
        isinstance(n, (cst.ImportAlias, cst.AsName, cst.FunctionDef, cst.ClassDef, cst.Global, cst.Nonlocal, cst.Del, cst.MatchAs, cst.ExceptHandler))
        and _binds(n, name) for n in walk(scope.body)
    )
    if other or (_binds(scope.body, name) and not assigned):
        return False
    if injected(ctx, module, scope, name) is not None:
        return False
    return not of_the_files(param.default) and not any(of_the_files(v) for v in assigned)


def _bindings(scope: cst.FunctionDef) -> Iterator[Tuple[cst.CSTNode, cst.CSTNode]]:
    """(target, value) of each assignment, loop and walrus in ``scope``."""
    return iter(_per_module(_SCOPE_BINDINGS, scope, id(scope), lambda: list(_find_bindings(scope)), 4096))


_SCOPE_BINDINGS: Dict[int, Tuple[cst.FunctionDef, List[Tuple[cst.CSTNode, cst.CSTNode]]]] = {}
_BINDINGS_TYPES = exact_types(cst.Assign, cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.For, cst.CompFor)


def _find_bindings(scope: cst.FunctionDef) -> Iterator[Tuple[cst.CSTNode, cst.CSTNode]]:
    for node in walk(scope.body):
        if type(node) not in _BINDINGS_TYPES:
            continue
        if isinstance(node, cst.Assign):
            yield from ((t.target, node.value) for t in node.targets)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.NamedExpr)) and node.value is not None:
            yield node.target, node.value
        elif isinstance(node, (cst.For, cst.CompFor)):
            yield node.target, node.iter


# class-body names through which calling an instance may run other code than its class's
# forward (`__call__`, torch's `_call_impl`), or making one make another class's instance
# (`__new__`), or an attribute lookup on it find another function
_CALL_HOOKS = (
    "__call__", "_call_impl", "_wrapped_call_impl", "__new__", "__class__",
    "__getattr__", "__getattribute__", "__init_subclass__", "__setattr__",
)
_TORCH_MODULE = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


def module_class_unproven(ctx: PlanContext, module: cst.Module, cls: cst.ClassDef) -> Optional[str]:
    """Why calling an instance of ``cls`` (a class of the files, in ``module``) may run
    other code than its forward as the files show it, else None.  Proven only for a chain
    of one plain base each, classes of the files down to torch's `nn.Module`, none
    decorated or given a class keyword (a metaclass), none binding a name of
    ``_CALL_HOOKS`` (or any name, dynamically), no module of the chain registering a
    hook; the forward one undecorated def, not replaced (`PatchEmbed.forward = f`), no
    `__call__` set on the class (`PatchEmbed.__call__ = f`), and no module read storing
    an object's `__class__` (hunt 23b: a mixin's `__call__`, `__call__ = f` in the body,
    `__new__`, `self.patch_embed.__class__ = K`).  A list of ways around the forward
    fails open; this is what the follow proves instead."""
    def find() -> Optional[str]:
        here: Found = (module, cls)
        for _ in range(10):
            m, c = here
            name = c.name.value
            if c.decorators or c.keywords:
                return f"{name} is decorated or made by a metaclass"
            bound = class_bindings(c)
            hook = next((h for h in (ANY_NAME, *_CALL_HOOKS) if h in bound), None)
            if hook is not None:
                return f"`{_first_line(bound[hook][0])}` in {name} may change what calling it runs"
            if registers_hooks(m):
                return f"the module of {name} registers a forward hook or pre-hook"
            if len(c.bases) != 1 or c.bases[0].keyword is not None or c.bases[0].star:
                return f"{name} has not one plain base: its call is not read"
            base = c.bases[0].value
            qualified = ctx.context_of(m).qualified_names(base)
            if qualified and all(q in _TORCH_MODULE or q.startswith("torch.nn.") and q.count(".") == 2 for q in qualified):
                break  # torch's `nn.Module`, or a module class of torch.nn (`nn.Linear`): its call is Module's
            found = base_class(ctx, m, c) if is_name(base) else None
            if found is None:
                return f"the base `{code(base)}` of {name} is not read"
            here = found
        else:
            return f"the bases of {cls.name.value} are not followed"
        forward = method_of(ctx, module, cls, "forward")
        if forward is None or forward[2].decorators or not forward[2].params.params:
            return f"{cls.name.value}'s forward is not one undecorated def"
        why = replaced(ctx.context_of(forward[0]), forward[0], forward[1], "forward") or replaced(
            ctx.context_of(module), module, cls, "__call__"
        )
        if why is not None:
            return why
        read = [m for _, m in imported_modules(ctx, [ctx.module, ctx.planned().module, module])[0]]
        for m in dict.fromkeys([ctx.module, module, *read, *(ctx.modules_beside([n.encode() for n in _CLASS_SWAPS]) or [])]):
            swap = next((n for n in nodes_of(m, (cst.AssignTarget, cst.AugAssign, cst.Call)) if _stores_a_class(n)), None)
            if swap is not None:
                return f"`{_first_line(swap)}` may change the class of a module"
        # a hook registered in a module that runs when the files are imported (a global
        # one, or a helper of hiera_utils.py given each module by `self.apply(f)`: hunt 24b
        # F2); a module beside that nothing imports (a training script, another model's
        # file) is not: out of contract
        if any(registers_hooks(m) for m in dict.fromkeys([ctx.module, ctx.planned().module, *read])):
            return "a module read registers a forward hook, pre-hook or parametrization, which may run around the call"
        return None

    return ctx.fact(("module class", id(ctx.module), id(module), id(cls)), find, ctx.module, module, cls)


# what sets which class an object is, or which bases a class has
_CLASS_SWAPS = ("__class__", "__bases__")


def _stores_a_class(node: cst.CSTNode) -> bool:
    """``node`` sets some object's `__class__` (`m.__class__ = K`, `setattr(m, "__class__",
    K)`) or a class's `__bases__` (`PatchEmbed.__bases__ = (Traced,)`: hunt 24 noticed)."""
    if isinstance(node, (cst.AssignTarget, cst.AugAssign)):
        return any(isinstance(t, cst.Attribute) and t.attr.value in _CLASS_SWAPS for t in flatten_targets(node.target))
    if isinstance(node, cst.Call) and any(may_setattr(node, n) for n in _CLASS_SWAPS):
        return any(isinstance(a.value, cst.SimpleString) and a.value.evaluated_value in _CLASS_SWAPS for a in node.args)
    return False


def _outside_the_files(ctx: PlanContext, expr: cst.BaseExpression) -> bool:
    """``expr`` names something of a module the files do not hold (`nn.Conv2d`,
    `timm.layers.Mlp`): each of its qualified names is of an absolute module not found
    as the file imports it.  False for a local name, a relative module, one beside it."""
    qualified = ctx.qualified_names(expr)
    if not qualified:
        return False
    for name in qualified:
        module = name.rpartition(".")[0]
        if not module or module.startswith(".") or ctx.module_named(module) is not None:
            return False
    return True


# what else runs code around a module's call or its parameters' reads: a parametrization
# (`register_parametrization(self.decoder_pred, "weight", Vis())`: hunt 23a F12), the hook
# dicts themselves
_AROUND_A_CALL = FORWARD_HOOKS | {
    "register_parametrization", "_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
    # torch's global hook dicts, written directly (`module._global_forward_hooks[0] = f`: hunt 24 noticed)
    "_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_with_kwargs", "_global_forward_hooks_always_called",
}


def registers_hooks(module: cst.Module) -> bool:
    """``module`` names a forward hook or pre-hook registration (on a module, or global),
    a parametrization, or the hook dicts: called, aliased on import, or handed over
    (hunt 23a F9: `from torch.nn.modules.module import register_module_forward_hook as on_forward`)."""
    def find() -> bool:
        return any(
            isinstance(node, cst.Name) and node.value in _AROUND_A_CALL
            or isinstance(node, cst.Attribute) and node.attr.value in _AROUND_A_CALL
            # by name (`getattr(m, "register_forward_pre_hook")(f)`: hunt 24 noticed)
            or isinstance(node, cst.SimpleString) and _evaluated(node) in _AROUND_A_CALL
            for node in nodes_of(module, (cst.Name, cst.Attribute, cst.SimpleString))
        )

    return _per_module(_HOOKED, module, id(module), find, 512)


_HOOKED: Dict[int, Tuple[cst.Module, bool]] = {}


def _evaluated(node: cst.SimpleString) -> Optional[str]:
    try:
        value = node.evaluated_value
    except Exception:  # (a string libcst cannot evaluate)
        return None
    return value if isinstance(value, str) else None


def binds(root: cst.CSTNode, name: str) -> bool:
    """:func:`_binds`, for the rewrites."""
    return _binds(root, name)


def bound_locally(ctx: PlanContext, call: cst.Call, name: str) -> bool:
    """:func:`_bound_locally`, for the rewrites."""
    return _bound_locally(ctx, call, name)


def _bound_locally(ctx: PlanContext, call: cst.Call, name: str) -> bool:
    """``name`` is bound in a function (or lambda) around ``call``: a parameter, an
    assignment, a loop or with target, an import, `global`/`nonlocal` -- any of them
    makes the bare name another object than the module's def."""
    for scope in ctx.ancestors(call):
        if not isinstance(scope, (cst.FunctionDef, cst.Lambda)):
            continue
        if _takes(scope, name) or _binds(scope.body, name):
            return True
    return False


def sets_submodule_by_name(module: cst.Module, attr: str, owners: Optional[Set[str]] = None) -> Optional[str]:
    """The first statement of ``module`` that may set the submodule ``attr`` by name:
    `add_module`/`register_module`/`__setattr__`/`setattr` given that name or one not
    literal (on `self`: in a class of ``owners``, all when None), or a store into a
    `_modules` mapping (hunt 22b F1, F5)."""
    for kind, text, literals, on_self, cls in _setters_by_name(module):
        if kind == "modules":
            return text
        mine = owners is None or cls in owners or cls is None
        if attr in literals or not literals and on_self and mine:
            return text
    return None


def _setters_by_name(module: cst.Module) -> List[Tuple[str, str, List[str], bool, Optional[str]]]:
    """What :func:`sets_submodule_by_name` reads of ``module``, walked once (it is asked for
    every attribute of every module read): in document order, each call of a setter by
    name ("call", its first line, the literal names it is given, whether on `self`, the
    class around it) and each store into a `_modules` mapping ("modules", its first line)."""
    return _per_module(_SETTERS, module, id(module), lambda: _find_setters_by_name(module), 256)


def _find_setters_by_name(module: cst.Module) -> List[Tuple[str, str, List[str], bool, Optional[str]]]:
    inside = _class_of_nodes(module)
    found: List[Tuple[str, str, List[str], bool, Optional[str]]] = []
    for node in nodes_of(module, (cst.Call, cst.AssignTarget, cst.AugAssign)):  # the only nodes read below
        if isinstance(node, cst.Call):
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
            if name in ("add_module", "register_module", "__setattr__", "setattr"):
                literals = [a.value.evaluated_value for a in node.args if isinstance(a.value, cst.SimpleString)]
                # a computed name counts on `self` only (on another object it is out of
                # contract, as for methods: README)
                target = node.args[0].value if name == "setattr" and node.args else func.value if isinstance(func, cst.Attribute) else None
                on_self = target is not None and (root_name(target) == "self" or isinstance(target, cst.Call) and is_name(target.func, "super"))
                found.append(("call", code(node).splitlines()[0], literals, on_self, inside.get(id(node))))  # type: ignore[arg-type]
        if isinstance(node, (cst.AssignTarget, cst.AugAssign)) or isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in ("update", "setdefault", "__setitem__"):
            target = node.target if not isinstance(node, cst.Call) else node.func.value  # type: ignore[union-attr]
            if any(isinstance(n, cst.Attribute) and n.attr.value == "_modules" for n in walk(target)):
                found.append(("modules", code(node).splitlines()[0], [], False, None))
    return found


# per module: what sets_submodule_by_name reads of it (_per_module)
_SETTERS: Dict[int, Tuple[cst.Module, List[Tuple[str, str, List[str], bool, Optional[str]]]]] = {}


def _submodules(ctx: PlanContext, attr: str) -> List[cst.BaseExpression]:
    """The values this module assigns to ``<obj>.<attr>`` (`self.patch_embed = C(...)`);
    [] when it assigns none or sets it otherwise too (`setattr`, `add_module`, a
    `_modules` store, a tuple target)."""
    return ctx.fact(("submodules", id(ctx.module), attr), lambda: _find_submodules(ctx, attr), ctx.module)


def _find_submodules(ctx: PlanContext, attr: str) -> List[cst.BaseExpression]:
    assigned: List[cst.BaseExpression] = []
    if sets_submodule_by_name(ctx.module, attr) is not None:
        return []
    for node in nodes_of(ctx.module, (cst.Call, cst.Assign, cst.AnnAssign)):  # the only nodes the tests below read
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
