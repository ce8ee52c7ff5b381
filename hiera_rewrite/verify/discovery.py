"""Which models ``--verify`` builds (worker side).

The *top-level models*: ``nn.Module`` classes of the files that no other class of the
files instantiates as a part (``Unroll``, ``HieraBlock`` are parts; ``Hiera`` and the
MAE are not), and their factories (functions returning one, also through other
factories, and ``functools.partial(Class, ...)``).  Factories with the same non-size
configuration are one *variant* (2-D, video...); the first variant of each class is
built, the others and the 3-D form of a 2-D class only while a site is unreached.

*Components*, for the sites no model reached: the innermost ``nn.Module`` class holding
each, with the arguments of the places in the files that construct it
(``MaskUnitAttention(dim, dim_out, heads, q_stride, ...)`` in ``HieraBlock.__init__``:
the literal and module-level values; the rest from its defaults and their names).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from .arguments import CONFIG_LOADERS, MAX_SCAN_BYTES, MAX_SCAN_FILES, OPAQUE, SCAN_SKIP, SIZE_KNOBS, CallRef, ModuleArg, ObjectArg, callee, code_values, guess, init_params, literal, size_rank, variant_key


_MODEL_ARGS = {"input_size", "in_chans", "img_size"}


# a 2-D Hiera configuration made 3-D (video) as upstream's 16x224 models do: (time value, key)
_VIDEO = {"input_size": 16, "q_stride": 1, "mask_unit_size": 1, "patch_kernel": 3, "patch_stride": 2, "patch_padding": 1}


def _is_module_class(obj, nn) -> bool:
    return isinstance(obj, type) and issubclass(obj, nn.Module) and obj is not nn.Module


def _local_names(func: ast.AST) -> Set[str]:
    """Names a function binds (its parameters and assignments): they have no value here."""
    names: Set[str] = set()
    args = getattr(func, "args", None)
    if args is not None:
        names |= {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a is not None}
    names |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def _own_nodes(scope: ast.AST):
    """The nodes of a module, function or class body, not those of the functions and
    classes defined in it (their own scopes)."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _call_name(call: ast.Call) -> Optional[str]:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _literal(expr: ast.AST) -> Any:
    try:
        return ast.literal_eval(expr)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return OPAQUE


def _imports(tree: ast.Module) -> Dict[str, Tuple[str, str]]:
    """{local name: (module, attribute or "")} of a script's absolute imports
    (``from mylib.config import HieraConfig as C`` -> C: ("mylib.config", "HieraConfig"))."""
    out: Dict[str, Tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = (a.name, "")
                else:
                    out[a.name.split(".")[0]] = (a.name.split(".")[0], "")
    return out


def _qual(func: ast.AST, imports: Optional[Dict[str, Tuple[str, str]]]) -> Optional[Tuple[str, str]]:
    """(module, dotted attribute) a call's func names through the script's imports, or None."""
    dotted: List[str] = []
    while isinstance(func, ast.Attribute):
        dotted.insert(0, func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or not imports or func.id not in imports:
        return None
    module, attr = imports[func.id]
    parts = ([attr] if attr else []) + dotted
    if not attr:  # import mylib.config [as m]: m.HieraConfig -> the longest module prefix is unknown here
        return (module, ".".join(parts)) if parts else None
    return module, ".".join(parts)


def _site_value(expr: ast.AST, names: Dict[str, ast.expr], depth: int = 0, imports: Optional[Dict[str, Tuple[str, str]]] = None) -> Any:
    """A call site's argument: a literal (or a name bound to one in ``names``: ``cfg =
    {...}``), a ``dict(key=literal, ...)`` as a dict (its keys of other values left out), a
    :class:`CallRef` (a call, or a name bound to one; ``imports``: the script's, to tell
    what it calls), else OPAQUE."""
    value = _literal(expr)
    if value is not OPAQUE:
        return value
    if isinstance(expr, ast.Name) and expr.id in names and depth < 3:
        expr = names[expr.id]
        value = _literal(expr)
        if value is not OPAQUE:
            return value
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict" and not expr.args and all(k.arg for k in expr.keywords):
        items = {k.arg: _literal(k.value) for k in expr.keywords}
        return {k: v for k, v in items.items() if v is not OPAQUE}
    if isinstance(expr, ast.Call) and depth < 3:
        name = _call_name(expr)
        if name and not any(isinstance(a, ast.Starred) for a in expr.args) and all(k.arg for k in expr.keywords):
            return CallRef(name, [_site_value(a, names, depth + 1, imports) for a in expr.args],
                           {k.arg: _site_value(k.value, names, depth + 1, imports) for k in expr.keywords}, _qual(expr.func, imports))
    return OPAQUE


def _fixtures(tree: ast.Module) -> Dict[str, ast.expr]:
    """{name: the call it returns} of the file's pytest fixtures (``@pytest.fixture def
    config(): return HieraConfig(...)``, also through a name it binds to the call)."""
    out: Dict[str, ast.expr] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        marks = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
        if not any((isinstance(m, ast.Attribute) and m.attr == "fixture") or (isinstance(m, ast.Name) and m.id == "fixture") for m in marks):
            continue
        local = {n.targets[0].id: n.value for n in ast.walk(node) if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call)}
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Return, ast.Yield)) and sub.value is not None:
                value = local.get(sub.value.id) if isinstance(sub.value, ast.Name) else sub.value
                if isinstance(value, ast.Call):
                    out[node.name] = value
                    break
    return out


def _distribution(top: str) -> Tuple[str, str]:
    """(distribution name, version) of an installed top-level module, as well as known."""
    import importlib.metadata as metadata  # noqa: PLC0415

    try:
        names = metadata.packages_distributions().get(top) or [top]
    except Exception:  # noqa: BLE001
        names = [top]
    for name in names:
        try:
            return name, metadata.version(name)
        except Exception:  # noqa: BLE001
            continue
    return top, "(version unknown)"


def _known_incompatibility(dist: str, error: BaseException, frames) -> Optional[str]:
    """The cause and the way out of a library incompatibility verify knows, else None.

    huggingface_hub >= 0.30 takes a dataclass default of ``__init__`` for a configuration and
    encodes it with ``asdict()`` when a ``ModelHubMixin`` class is *defined*; a default that
    is the dataclass class itself (``settings=HieraSettings``) makes that raise "asdict()
    should be called on dataclass instances".  Before 0.30 such defaults were skipped."""
    import dataclasses  # noqa: PLC0415

    if dist.replace("-", "_").lower() != "huggingface_hub" or "asdict() should be called on dataclass instances" not in str(error):
        return None
    culprits: List[str] = []
    for frame, _ in frames:
        cls = frame.f_locals.get("cls")
        if isinstance(cls, type) and "__init__" in vars(cls):
            try:
                params = inspect.signature(cls.__init__).parameters.values()
            except (TypeError, ValueError):
                continue
            culprits += [f"{cls.__name__}.__init__({p.name}={p.default.__name__})" for p in params
                         if isinstance(p.default, type) and dataclasses.is_dataclass(p.default)]
            if culprits:
                break
    which = culprits[0] if culprits else "a default of __init__"
    return (f"{which} is a dataclass class, not an instance, and huggingface_hub >= 0.30 passes dataclass defaults to asdict() "
            f"when a PyTorchModelHubMixin class is defined (earlier versions skip them): install 'huggingface_hub<0.30', "
            f"or make the default an instance")


class Discovery:
    """Finds the candidates on the original side (a mixin of the worker)."""

    _model_classes: Dict[str, Any] = {}  # name -> nn.Module class of the files (set by discover)
    _factories: Dict[str, Dict[str, Any]] = {}  # name -> factory of the files
    _first_cands: Dict[Any, Dict[str, Any]] = {}  # top-level class -> its first candidate

    def discover(self, torch) -> List[Dict[str, Any]]:
        """Candidates, in order: the first variant of each top-level model class, then
        (``"later": True``) the other variants and the classes holding sites."""
        nn = torch.nn
        if self.spec["factories"]:
            return [
                {"module": f["module"], "attr": f["attr"], "label": f"{f['module']}:{f['attr']}", "factory": True, "kwargs": f["kwargs"], "cls": None, "later": False}
                for f in self.spec["factories"]
            ]
        classes: List[Tuple[Any, Any, ast.ClassDef, bool]] = []  # (class, module, node, primary)
        factories: List[Dict[str, Any]] = []
        scanned: Set[str] = set()

        def is_module_class(obj) -> bool:
            return _is_module_class(obj, nn)

        def scan(mod_name: str, primary: bool) -> None:
            if mod_name in scanned:
                return
            scanned.add(mod_name)
            self.scan_order.append(mod_name)
            try:
                module = importlib.import_module(mod_name)
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
                why = f"cannot import {missing} (not installed)" if missing and not missing.startswith(mod_name.split(".")[0]) else f"{type(exc).__name__}: {exc}"
                environment = None if why.endswith("(not installed)") else self.environment_error(exc)
                if environment is not None:  # an installed library rejects the repo's code: name it
                    why = environment
                self.report["notes"].append(f"cannot import {mod_name}: {why}")
                self.report["imports"].append({"module": mod_name, "error": why, "missing": why.endswith("(not installed)") or environment is not None})
                return
            source_file = getattr(module, "__file__", None)
            if not source_file:
                return
            tree = ast.parse(Path(source_file).read_bytes())
            self.trees.append((module, tree))
            funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    obj = vars(module).get(node.name)
                    if is_module_class(obj) and obj.__module__ == module.__name__:
                        classes.append((obj, module, node, primary))
            for order, name in enumerate(funcs):
                if name.startswith("_"):
                    continue
                recipe = self._recipe(module, funcs, name, is_module_class)
                if recipe is not None:
                    cls, kw, opaque = recipe
                    factories.append({"module": mod_name, "attr": name, "cls": cls, "recipe": kw, "opaque": opaque, "order": order})
            for order, node in enumerate(tree.body, start=len(funcs)):  # hiera_tiny = partial(Hiera, ...)
                recipe = self._partial_recipe(module, node, is_module_class)
                if recipe is not None:
                    name, cls, kw, opaque = recipe
                    factories.append({"module": mod_name, "attr": name, "cls": cls, "recipe": kw, "opaque": opaque, "order": order})

        for mod in self.spec["modules"]:
            scan(mod["name"], mod["primary"])
        for cls, _, _, _ in list(classes):  # base classes defined in other files of the tree
            for base in cls.__mro__[1:]:
                if is_module_class(base) and self.in_tree(sys.modules.get(base.__module__)):
                    scan(base.__module__, False)

        parts: Set[Any] = set()
        direct: Dict[str, Set[str]] = {}
        for cls, module, node, _ in classes:
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    obj, _ = callee(call.func, module)
                    if is_module_class(obj) and obj is not cls:
                        parts.add(obj)
                        direct.setdefault(cls.__name__, set()).add(obj.__name__)
        # which classes each one builds, through its parts (for the not-proven hints)
        contains = {name: set(held) for name, held in direct.items()}
        for _ in range(len(contains)):
            for name, held in contains.items():
                held |= {n for h in list(held) for n in contains.get(h, ())}
        self.report["contains"] = {name: sorted(held) for name, held in contains.items()}
        self._model_classes = {c[0].__name__: c[0] for c in classes}
        self._factories = {f["attr"]: f for f in factories}
        self._first_cands = {}
        tops = [c for c in classes if c[0] not in parts]
        tops.sort(key=lambda c: (not (_MODEL_ARGS & set(init_params(c[0])[0])), not c[3]))
        self.parts = [c[0] for c in classes if c[0] in parts]

        first: List[Dict[str, Any]] = []
        later: List[Dict[str, Any]] = []
        for cls, module, _, _ in tops:
            own = [f for f in factories if f["cls"] is cls]
            variants: Dict[Any, List[Dict[str, Any]]] = {}
            for f in own:
                key = "opaque" if f["opaque"] else repr(sorted((k, repr(v)) for k, v in f["recipe"].items() if k not in SIZE_KNOBS))
                variants.setdefault(key, []).append(f)
            ordered = sorted(
                variants.values(),
                key=lambda fs: (fs[0]["opaque"], sum(v is OPAQUE for v in fs[0]["recipe"].values()), len(fs[0]["recipe"]) - len(set(fs[0]["recipe"]) & SIZE_KNOBS), fs[0]["order"]),
            )
            cands = []
            for fs in ordered:
                best = min(fs, key=lambda f: (size_rank(f["attr"]), f["order"]))
                cands.append({"module": best["module"], "attr": best["attr"], "label": f"{best['module']}:{best['attr']} -> {cls.__name__}", "factory": True, "cls": cls, "recipe": best["recipe"], "opaque": best["opaque"], "kwargs": {}})
            # where the repo's scripts build it with literal keywords (a training script's
            # Hiera(input_size=(64, 4, 32), in_chans=1, ...)): its configuration, built small
            for where, recipe in self.site_recipes(cls)[:2]:
                if not any(c["recipe"] == recipe for c in cands):
                    cands.append({"module": cls.__module__, "attr": cls.__qualname__, "label": f"{cls.__module__}:{cls.__qualname__} (as at {where})", "factory": False, "cls": cls, "recipe": recipe, "opaque": False, "kwargs": {}})
            cands.append({"module": cls.__module__, "attr": cls.__qualname__, "label": f"{cls.__module__}:{cls.__qualname__} (class)", "factory": False, "cls": cls, "recipe": {}, "opaque": False, "kwargs": {}})
            video = self._video(cls, [f["recipe"] for f in own] + [c["recipe"] for c in cands])
            if video is not None:
                cands.append(dict(cands[-1], label=f"{cls.__module__}:{cls.__qualname__} (class, 3-D)", recipe=video))
            cands.extend(self._named_variants(cands[0]))
            first.append(dict(cands[0], later=False))
            self._first_cands[cls] = first[-1]
            later.extend(dict(c, later=True) for c in cands[1:])
        return first + later

    def _user_file(self, filename: str) -> Optional[str]:
        """The user's name for a file of a side's copy (``hiera/hiera.py``), else None."""
        real = os.path.realpath(filename)
        for side, base in self.spec["sides"].items():
            base = os.path.realpath(base)
            if real.startswith(base + os.sep):
                names = {os.path.realpath(c): u for c, u in self.spec["traced"].get(side, {}).items()}
                return names.get(real) or os.path.relpath(real, base)
        return None

    def environment_error(self, exc: BaseException) -> Optional[str]:
        """Where importing the user's files raised inside an installed library (the error, or
        one it was raised while handling: a fallback's ``NameError`` after a library's
        ``TypeError``), the error said as what it is: that library and its version, the
        statement of the user's files that ran into it, and that it is the environment
        (this library's version) and not the rewrite; else None."""
        import linecache  # noqa: PLC0415
        import traceback  # noqa: PLC0415

        chain: List[BaseException] = []
        seen: Set[int] = set()
        current: Optional[BaseException] = exc
        while current is not None and id(current) not in seen:
            chain.append(current)
            seen.add(id(current))
            current = current.__cause__ or current.__context__
        for error in reversed(chain):  # the first error raised, then what handling it raised
            frames = list(traceback.walk_tb(error.__traceback__))
            mine = [i for i, (f, _) in enumerate(frames) if self._user_file(f.f_code.co_filename) is not None]
            if not mine:
                continue
            # the first frame of an installed library the user's last statement called into
            # (hub_mixin's __init_subclass__, not the stdlib's asdict it ends in)
            library = None
            for f, _ in frames[mine[-1] + 1:]:
                top = str(f.f_globals.get("__name__", "")).split(".")[0]
                if top and top not in sys.stdlib_module_names and top not in ("builtins", "hiera_rewrite", "__main__"):
                    library = (f, top)
                    break
            if library is None:
                continue  # the user's own code, or the standard library, raised it
            entry, top = library
            dist, version = _distribution(top)
            frame, line = frames[mine[-1]]
            text = linecache.getline(frame.f_code.co_filename, line).strip()
            what = f"{type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"
            said = (f"{what}, raised in {dist} {version} ({os.path.basename(entry.f_code.co_filename)} {entry.f_code.co_name}) "
                    f"by {self._user_file(frame.f_code.co_filename)}:{line} `{text[:80]}`")
            if error is not exc:
                said += f" (then, handling it: {type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''})"
            hint = _known_incompatibility(dist, error, frames) or f"verify where the repo's code imports, with the {dist} version it was written for"
            return f"{said}: an incompatibility of this environment ({dist} {version} with the repo's code or the libraries beside it), not of the rewrite; {hint}"
        return None

    def components(self, sites: List[Dict[str, Any]], torch, tried: Set[Any]) -> List[Dict[str, Any]]:
        """A candidate per class holding one of ``sites`` (the innermost ``nn.Module``
        class) that was not ``tried`` as a model, with the arguments of up to two places
        of the files that construct it."""
        out: List[Dict[str, Any]] = []
        for site in sites:
            name, module = site.get("owner_class"), sys.modules.get(site["module"])
            cls = vars(module).get(name) if module is not None and name else None
            if not _is_module_class(cls, torch.nn) or cls in tried or any(c["cls"] is cls for c in out):
                continue
            recipes: List[Tuple[str, Dict[str, Any]]] = []
            for where, recipe in self.constructions(cls):
                if all(recipe != r for _, r in recipes):
                    recipes.append((where, recipe))
            out.append({"module": cls.__module__, "attr": cls.__qualname__, "label": f"component {cls.__name__}", "cls": cls,
                        "recipes": recipes[:2], "component": True})
        return out

    def constructions(self, cls) -> List[Tuple[str, Dict[str, Any]]]:
        """(where, keyword arguments) of each call of ``cls`` in the scanned modules: the
        arguments that are literals or module-level values (none of the calling
        function's own names, no call); the others are left to the class's defaults."""
        try:
            params = list(inspect.signature(cls).parameters.values())
        except (TypeError, ValueError):
            return []
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        found: List[Tuple[str, Dict[str, Any]]] = []
        for module, tree in self.trees:
            env = dict(vars(module))
            scopes: List[Tuple[ast.AST, str]] = [(tree, "<module>")]
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    scopes.extend((f, f"{node.name}.{f.name}") for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node in tree.body:
                    scopes.append((node, node.name))
            for scope, qual in scopes:
                local = _local_names(scope) if scope is not tree else set()
                calls = [n for n in ast.walk(scope) if isinstance(n, ast.Call)] if scope is not tree else [
                    n for stmt in tree.body if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in ast.walk(stmt) if isinstance(n, ast.Call)]
                for call in calls:
                    if callee(call.func, module)[0] is not cls or any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(positional):
                        continue
                    bound = list(zip(positional, call.args)) + [(k.arg, k.value) for k in call.keywords if k.arg is not None]
                    recipe: Dict[str, Any] = {}
                    for name, expr in bound:
                        value = self._value_here(expr, env, local)
                        if value is not OPAQUE:
                            recipe[name] = value
                    found.append((f"{qual} ({Path(module.__file__).name}:{call.lineno})", recipe))
        return found

    def _value_here(self, expr: ast.AST, env: Dict[str, Any], local: Set[str]) -> Any:
        """An argument's value where it is a literal or a module-level value that is the
        same on both sides (not a class or function of the user's files), else OPAQUE."""
        if any(isinstance(n, (ast.Call, ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield)) for n in ast.walk(expr)):
            return OPAQUE
        if any(isinstance(n, ast.Name) and n.id in local for n in ast.walk(expr)):
            return OPAQUE
        try:
            value = literal(expr, env)
        except Exception:  # noqa: BLE001
            return OPAQUE
        leaves = list(value) if isinstance(value, (tuple, list)) else [value]
        for leaf in leaves:
            owner = getattr(leaf, "__module__", None) if not isinstance(leaf, (int, float, str, bytes, type(None))) else None
            if owner and self.in_tree(sys.modules.get(owner)):
                return OPAQUE
        return value

    def call_sites(self) -> Dict[str, List[Tuple[str, List[Any], Dict[str, Any]]]]:
        """{callee name: [(path:line, positional, keywords)]}: the calls in the repo's
        other Python files (those calling a model or factory of the files).  Each argument
        is a literal, a :class:`CallRef` (a call, or a name the same function bound to one
        earlier: ``enc = hiera_tiny_224()``), else OPAQUE (``args.classes``: only the
        script knows)."""
        if getattr(self, "_call_sites", None) is None:
            found: Dict[str, List[Tuple[str, List[Any], Dict[str, Any]]]] = {}
            root = self.scan_root()
            skip = {os.path.realpath(t) for t in self.spec.get("targets", [])}
            paths: List[str] = []
            for folder, dirs, names in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d not in SCAN_SKIP and not d.startswith("."))
                paths.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(".py"))
                if len(paths) > MAX_SCAN_FILES:
                    break
            # only the models' and factories' calls are looked up: a file calling none of
            # them is not parsed (a repo of hundreds of scripts took seconds a worker)
            names = [*getattr(self, "_model_classes", {}), *getattr(self, "_factories", {})]
            wanted = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")\s*\(") if names else None
            for path in paths[:MAX_SCAN_FILES]:
                if os.path.realpath(path) in skip:
                    continue
                try:
                    if os.path.getsize(path) > MAX_SCAN_BYTES:
                        continue
                    data = Path(path).read_bytes()
                    if wanted is not None and not wanted.search(data):
                        continue
                    tree = ast.parse(data)
                except (OSError, SyntaxError, ValueError):
                    continue
                rel = os.path.relpath(path, root)
                imports = _imports(tree)
                fixtures = _fixtures(tree)
                for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]:
                    own = sorted(_own_nodes(scope), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
                    bound = [(n.lineno, n.targets[0].id, n.value) for n in own
                             if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, (ast.Call, ast.Dict))]
                    # a test's arguments named after a pytest fixture of the file: what it returns
                    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        bound = [(0, a.arg, fixtures[a.arg]) for a in scope.args.args if a.arg in fixtures and fixtures[a.arg] is not scope] + bound
                    for node in own:
                        if not isinstance(node, ast.Call) or not (node.args or node.keywords):
                            continue
                        name = _call_name(node)
                        if name is None or any(isinstance(a, ast.Starred) for a in node.args):
                            continue
                        names = {b[1]: b[2] for b in bound if b[0] < node.lineno}
                        args = [_site_value(a, names, 0, imports) for a in node.args]
                        kwargs: Dict[str, Any] = {}
                        for k in node.keywords:
                            if k.arg is not None:
                                kwargs[k.arg] = _site_value(k.value, names, 0, imports)
                                continue
                            # **cfg: a dict the same scope bound (cfg = {...} or dict(...)) gives
                            # its literal keys; any other ** hides which keys it passes
                            value = _site_value(k.value, names, 0, imports) if isinstance(k.value, (ast.Name, ast.Dict, ast.Call)) else OPAQUE
                            if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
                                kwargs = None
                                break
                            kwargs.update(value)
                        if kwargs is None:
                            continue
                        found.setdefault(name, []).append((f"{rel}:{node.lineno}", args, kwargs))
            self._call_sites = found
        return self._call_sites

    def bind_site(self, target, args: List[Any], kwargs: Dict[str, Any], depth: int = 0) -> Dict[str, Any]:
        """A call site's arguments of ``target`` (a class or a function of the files) by
        name; OPAQUE ones dropped (the class's defaults or :meth:`fill` give them), a
        :class:`CallRef` of a model of the files made a :class:`ModuleArg`."""
        try:
            sig = inspect.signature(target)
            positional = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            if not positional and isinstance(target, type) and any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
                positional = list(init_params(target)[0])  # hidden behind a wrapper's *args (@has_config)
        except (TypeError, ValueError):
            positional = []
        out: Dict[str, Any] = {}
        for name, value in [*zip(positional, args), *kwargs.items()]:
            if isinstance(value, CallRef):
                value = self.module_arg(value, depth + 1)
            if value is not OPAQUE:
                out[name] = value
        return out

    def module_arg(self, ref: CallRef, depth: int = 1) -> Any:
        """The :class:`ModuleArg` building what a call site passes (``Hiera(input_size=...)``,
        ``hiera_tiny_224()``): a model class of the files with the call's arguments, or a
        factory's class with its configuration and the call's keywords; else OPAQUE."""
        if depth > 3:
            return OPAQUE
        cls = self._model_classes.get(ref.name)
        if cls is not None:
            cand = {"module": cls.__module__, "attr": cls.__qualname__, "cls": cls, "factory": False, "opaque": False, "kwargs": {},
                    "recipe": self.bind_site(cls, ref.args, ref.kwargs, depth)}
            return ModuleArg(cand)
        f = self._factories.get(ref.name)
        if f is None:
            return self.object_arg(ref, depth)
        params = init_params(f["cls"])[0]
        extra = {k: v for k, v in self.bind_site(f["cls"], [], ref.kwargs, depth).items() if k in params}
        cand = {"module": f["module"], "attr": f["attr"], "cls": f["cls"], "factory": True, "opaque": f["opaque"] or bool(ref.args), "kwargs": {},
                "recipe": dict(f["recipe"], **extra)}
        return ModuleArg(cand)

    def object_arg(self, ref: CallRef, depth: int = 1) -> Any:
        """The :class:`ObjectArg` calling what a call site passes, where the script imports
        it from the repo's own code (a config class, its ``from_yaml``, a loader of the repo)
        or from a configuration library (``OmegaConf.load``), and every argument it gives is
        a literal or such a call; else OPAQUE."""
        if ref.qual is None or depth > 3:
            return OPAQUE
        module, attr = ref.qual
        if module.split(".")[0] not in CONFIG_LOADERS:
            try:
                spec = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                spec = None
            origin = getattr(spec, "origin", None) if spec is not None else None
            places = [os.path.realpath(p) for p in [*self.path_entries[:-1], self.scan_root()]]
            if not origin or not any(os.path.realpath(origin).startswith(p + os.sep) for p in places):
                return OPAQUE  # not the repo's own code: torch.device(...), a dataset
        values: List[Any] = []
        for value in [*ref.args, *ref.kwargs.values()]:
            if isinstance(value, CallRef):
                value = self.object_arg(value, depth + 1)
            if value is OPAQUE:
                return OPAQUE
            values.append(value)
        args, kwargs = values[:len(ref.args)], dict(zip(ref.kwargs, values[len(ref.args):]))
        obj = ObjectArg(module, attr, args, kwargs, self.scan_root())
        try:
            obj.target()
        except Exception:  # noqa: BLE001 -- a module that does not import here: not given
            return OPAQUE
        return obj

    def site_recipes(self, cls) -> List[Tuple[str, Dict[str, Any]]]:
        """(where, arguments) of each call of ``cls`` in the repo's scripts that gives some."""
        out = []
        for where, args, kwargs in self.call_sites().get(cls.__name__, []):
            recipe = self.bind_site(cls, args, kwargs)
            if recipe:
                out.append((where, recipe))
        return out

    def call_values(self, every: Optional[Dict[str, List[Tuple[Any, str]]]] = None) -> Dict[str, Tuple[Any, str]]:
        """{argument: (literal, path:line)} that the repo's scripts pass to the models and
        factories of the files (``Hiera(model_name="hiera_tiny_224", ...)``, a factory's own
        arguments: ``build_model(model_name="hiera_tiny")``): first found wins; ``every``,
        if given, gets every value found for each argument, in order."""
        every = every if every is not None else {}
        values: Dict[str, Tuple[Any, str]] = {}
        targets = {**{n: f["cls"] for n, f in self._factories.items()}, **self._model_classes}
        for name, target in targets.items():
            factory = None
            if target is not self._model_classes.get(name):
                f = self._factories[name]
                factory = getattr(sys.modules.get(f["module"]), f["attr"], None)
            for where, args, kwargs in self.call_sites().get(name, []):
                bound: Dict[str, Any] = {}
                if factory is not None:  # a factory: its own arguments, then its class's keywords
                    try:
                        own = set(inspect.signature(factory).parameters)
                    except (TypeError, ValueError):
                        own = set()
                    bound = {k: v for k, v in self.bind_site(factory, args, kwargs).items() if k in own}
                    args = []
                params = init_params(target)[0] if isinstance(target, type) else {}
                bound.update({k: v for k, v in self.bind_site(target, args, kwargs).items() if k in params and k not in bound})
                for key, value in bound.items():
                    if not isinstance(value, ModuleArg):
                        values.setdefault(key, (value, where))
                        every.setdefault(key, []).append((value, where))
        return values

    def _named_variants(self, cand: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The candidate again for each other kind of model the repo names for an argument it
        needs as a string (``model_name``: ``mae_hiera_base_16x224`` beside
        ``mae_hiera_tiny_224``, :meth:`choices`): the smallest of each kind (the name without
        its size words), given as ``--kwargs`` would be.  Built only while a site is
        unreached, as the other variants are."""
        ctor = cand["cls"]
        if cand["factory"]:
            try:
                ctor = self.resolve(cand["module"], cand["attr"])
            except Exception:  # noqa: BLE001
                return []
        names = {k for k, v in cand["recipe"].items() if v is OPAQUE}
        names |= {n for n in init_params(cand["cls"])[1] if n not in cand["recipe"]}
        if cand["factory"]:
            try:
                names |= {p.name for p in inspect.signature(ctor).parameters.values() if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
            except (TypeError, ValueError):
                pass
        out: List[Dict[str, Any]] = []
        for name in sorted(n for n in names if (guess(n) is None or code_values(ctor, n)) and n not in self.spec["kwargs"]):
            values = self.choices(name, ctor)
            seen = {variant_key(values[0][0])} if values else set()
            for value, where in values[1:]:
                if variant_key(value) in seen or len(out) >= 3:
                    continue
                seen.add(variant_key(value))
                out.append(dict(cand, kwargs={name: value}, label=f"{cand['label']} ({name}={value!r}: {where})"))
        return out

    @staticmethod
    def _video(cls, recipes: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        """A 3-D configuration of a 2-D Hiera-like class, unless a factory has one."""
        params, _ = init_params(cls)
        if not all(isinstance(params.get(k), (tuple, list)) and len(params[k]) == 2 for k in _VIDEO):
            return None
        if any(isinstance(r.get("input_size"), (tuple, list)) and len(r["input_size"]) == 3 for r in recipes):
            return None
        return {k: (t, *params[k]) for k, t in _VIDEO.items()}

    def _partial_recipe(self, module, node: ast.stmt, is_module_class):
        """(name, class, keyword arguments, opaque) of a module-level
        ``name = functools.partial(Class, ...)``, or None."""
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            return None
        call, name = node.value, node.targets[0].id
        if name.startswith("_") or not isinstance(call, ast.Call) or not call.args:
            return None
        import functools  # noqa: PLC0415

        if callee(call.func, module)[0] is not functools.partial:
            return None
        cls = callee(call.args[0], module)[0]
        if not (is_module_class(cls) and self.in_tree(sys.modules.get(cls.__module__))):
            return None
        kw: Dict[str, Any] = {}
        for k in call.keywords:
            if k.arg is not None:
                try:
                    kw[k.arg] = literal(k.value, dict(vars(module)))
                except Exception:  # noqa: BLE001
                    kw[k.arg] = OPAQUE
        return name, cls, kw, len(call.args) > 1

    def _recipe(self, module, funcs, name, is_module_class, depth: int = 0):
        """(class, keyword arguments, opaque) a factory returns, or None: values its code
        computes are ``OPAQUE``; ``opaque`` when it passes positional arguments."""
        node = funcs.get(name)
        if node is None or depth > 5:
            return None
        env = dict(vars(module))
        defaults = node.args.defaults
        for arg, default in zip(node.args.args[len(node.args.args) - len(defaults):], defaults):
            try:
                env[arg.arg] = literal(default, dict(vars(module)))
            except Exception:  # noqa: BLE001
                pass
        # model = Hiera(...) ... return model: the call bound to the name returned (the first)
        bound = {}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name) and isinstance(sub.value, ast.Call):
                bound.setdefault(sub.targets[0].id, sub.value)
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Return):
                continue
            call = bound.get(sub.value.id) if isinstance(sub.value, ast.Name) else sub.value
            if not isinstance(call, ast.Call):
                continue
            obj, fname = callee(call.func, module)
            inner = None
            if is_module_class(obj) and getattr(obj, "__module__", None) and self.in_tree(sys.modules.get(obj.__module__)):
                inner = (obj, {}, False)
            elif fname in funcs and fname != name:
                inner = self._recipe(module, funcs, fname, is_module_class, depth + 1)
            if inner is None:
                continue
            kw = dict(inner[1])
            opaque = inner[2] or bool(call.args)
            for k in call.keywords:
                if k.arg is None:
                    continue
                try:
                    kw[k.arg] = literal(k.value, env)
                except Exception:  # noqa: BLE001 -- kwargs["x"], a call...: only the factory knows
                    kw[k.arg] = OPAQUE
            return inner[0], kw, opaque
        return None
