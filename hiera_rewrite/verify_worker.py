"""The ``--verify`` worker: a fresh subprocess that imports both sides and compares them.

Run by ``verify.verify_group`` through ``runpy.run_path`` (it imports only the
standard library and torch, never hiera_rewrite), with a JSON spec: the two copies,
the modules to scan, the files to trace and the sites to reach.

1. Original side: import the modules, find the *top-level models* -- ``nn.Module``
   classes of the files that no other class of the files instantiates as a part
   (``Unroll``, ``HieraBlock`` are parts; ``Hiera`` and the MAE are not) -- and their
   factories (functions returning one, also through other factories).  Factories
   with the same non-size configuration are one *variant* (2-D, video...).  Each
   candidate is built small: the class called with the variant's configuration and
   small dims (``embed_dim``, ``stages``, decoder, classes), then at a small valid
   ``input_size``; if that fails, the factory itself; required arguments and keys a
   factory reads from ``**kwargs`` are filled from their names.  Every case (forward,
   with a mask, with intermediates) runs under a line tracer limited to the
   rewritten files.  The first variant of each top-level class is built; further
   variants, then the classes holding a site, only while a site is still unreached.
2. Rewritten side: the modules are dropped from ``sys.modules``, the path swapped to
   the rewritten copy, and each plan built again under the same names with the same
   weights and inputs, traced the same way, and compared.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import json
import math
import os
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

INSTALL_HINT = "pip install 'hiera-rewrite[verify]'"
_MODEL_ARGS = {"input_size", "in_chans", "img_size"}
_SIZE_WORDS = ["nano", "pico", "tiny", "small", "base", "plus", "large", "huge", "giant"]
# configuration that changes sizes, not code paths: not part of a variant
_SIZE_KNOBS = {
    "embed_dim", "num_heads", "stages", "depth", "num_classes", "decoder_embed_dim", "decoder_depth",
    "decoder_num_heads", "drop_path_rate", "mlp_ratio", "head_dropout", "head_init_scale",
}
_MAX_CANDIDATES = 12
_NO_DEFAULT = object()
# a 2-D Hiera configuration made 3-D (video) as upstream's 16x224 models do: (time value, key)
_VIDEO = {"input_size": 16, "q_stride": 1, "mask_unit_size": 1, "patch_kernel": 3, "patch_stride": 2, "patch_padding": 1}


class _Opaque:
    """A factory's keyword value that only its code knows (``kwargs["x"]``, a call)."""

    def __repr__(self) -> str:
        return "<computed>"


_OPAQUE = _Opaque()
_MASK_RATIO = 0.5
_MAX_ARG_TRIES = 12
_SCAN_SKIP = {"__pycache__", "node_modules", "site-packages", "venv", "build", "dist", "wandb", "outputs", "checkpoints", "data"}


class _Made:
    """A ``forward`` argument each side makes from its own model inside the traced case
    (``"random_mask"``: ``get_random_mask(x, 0.5)``; ``"num_kept"``: its stated count)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


def _size_rank(name: str) -> int:
    words = name.lower().replace("-", "_").split("_")
    ranks = [_SIZE_WORDS.index(w) for w in words if w in _SIZE_WORDS]
    return max(ranks) if ranks else _SIZE_WORDS.index("base")


def guess(name: str) -> Any:
    """A small Hiera-consistent value for a required argument, from its name (None: no idea)."""
    n = name.lower()
    exact = {
        "in_chans": 3, "in_channels": 3, "input_channels": 3, "num_channels": 3, "num_classes": 10,
        "num_heads": 1, "heads": 1, "stages": (1, 1, 1, 1), "depths": (1, 1, 1, 1), "depth": 2,
        "input_size": (224, 224), "img_size": 224, "image_size": 224, "patch_size": 4, "mlp_ratio": 4.0,
        "q_pool": 2, "mask_ratio": 0.6, "dim": 8, "dim_out": 8, "embed_dim": 8,
        # upstream Hiera's 2-D grid (consistent with input_size above) and its other knobs
        "q_stride": (2, 2), "mask_unit_size": (8, 8), "mask_unit_attn": (True, True, False, False),
        "patch_kernel": (7, 7), "patch_stride": (4, 4), "patch_padding": (3, 3), "dim_mul": 2.0,
        "head_mul": 2.0, "norm_layer": "LayerNorm", "sep_pos_embed": False, "head_init_scale": 0.001,
    }
    if n in exact:
        return exact[n]
    if "stage" in n:
        return (1, 1, 1, 1)
    if n.startswith(("in_", "input_")) and ("chan" in n or "channel" in n):
        return 3
    if "head" in n:
        return 1
    if "class" in n:
        return 10
    if "chan" in n or "channel" in n or n.endswith("dim") or n.endswith("_dims") or "width" in n:
        return 8
    if "depth" in n or "layers" in n or n.endswith("blocks"):
        return 2
    if "drop" in n or n.endswith("_rate"):
        return 0.0
    if "ratio" in n:
        return 0.5
    if "size" in n:
        return 224
    if "stride" in n:
        return 4
    if n.startswith(("use_", "is_", "with_", "enable_")):
        return False
    return None


def is_size(name: str) -> bool:
    """A width/depth/count knob: a small value from its name beats the repo's own."""
    n = name.lower()
    if n.startswith(("in_", "input_")) or "ratio" in n or "drop" in n or "rate" in n:
        return False
    return n in _SIZE_KNOBS or "stage" in n or n.endswith(("dim", "dims", "heads", "depth", "depths", "layers", "blocks", "classes"))


class ConfigSpec:
    """A constructor argument used as a configuration object (``cfg.embed_dim``,
    ``config["x"]``, ``args.get("x")``): the values it handed out, replayed on the
    rewritten side."""

    def __init__(self, values: Optional[Dict[str, Any]] = None) -> None:
        self.values: Dict[str, Any] = dict(values or {})

    def __repr__(self) -> str:
        return "<config " + ", ".join(f"{k}={v!r}" for k, v in self.values.items()) + ">"


class Config:
    """What the user's code gets for a :class:`ConfigSpec`: attribute and item access,
    ``get``, ``in``; an unknown key is filled like a missing argument."""

    def __init__(self, values: Dict[str, Any], fill: Callable[[str], Any]) -> None:
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_fill", fill)

    def _wrap(self, value):
        return Config(value, self._fill) if isinstance(value, dict) else value

    def __getitem__(self, key):
        if key not in self._values:
            if not isinstance(key, str):
                raise KeyError(key)
            self._values[key] = self._fill(key)
        return self._wrap(self._values[key])

    def __getattr__(self, key):
        if key.startswith("__"):
            raise AttributeError(key)
        return self[key]

    def __setattr__(self, key, value):
        self._values[key] = value

    __setitem__ = __setattr__

    def get(self, key, default=None):
        return self._wrap(self._values[key]) if key in self._values else default

    def __contains__(self, key) -> bool:
        return key in self._values

    def keys(self):
        return self._values.keys()

    def items(self):
        return [(k, self._wrap(v)) for k, v in self._values.items()]

    def __iter__(self):
        return iter(self._values)


_CONFIG_FILES = (".json", ".yaml", ".yml")
_MAX_SCAN_FILES = 400
_MAX_SCAN_BYTES = 1024 * 1024


def repo_values(root: str, skip: Set[str]) -> Dict[str, Tuple[Any, str]]:
    """{name: (value, where)}: the values the repo itself uses -- argparse
    ``add_argument("--x", default=...)`` in its scripts, keys of its JSON configs (YAML
    too where a YAML parser is importable here).  First found wins; smaller model names
    ("tiny") and shallower files first."""
    try:
        import yaml  # noqa: PLC0415 -- the user's environment may lack it
    except Exception:  # noqa: BLE001
        yaml = None
    found: List[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        found.extend(Path(folder, n) for n in names if n.endswith((".py",) + _CONFIG_FILES))
        if len(found) > _MAX_SCAN_FILES:
            break
    found.sort(key=lambda f: (f.suffix == ".py", _size_rank(f.stem), len(f.parts), str(f)))
    values: Dict[str, Tuple[Any, str]] = {}

    def take(data, where: str) -> None:
        if isinstance(data, dict):
            for key, value in data.items():
                if isinstance(key, str):
                    values.setdefault(key, (value, where))
                    take(value, where)

    for path in found[:_MAX_SCAN_FILES]:
        try:
            if path.stat().st_size > _MAX_SCAN_BYTES:
                continue
            text = path.read_text(errors="replace")
            where = os.path.relpath(path, root)
            if path.suffix == ".json":
                take(json.loads(text), where)
            elif path.suffix in (".yaml", ".yml"):
                if yaml is not None:
                    take(yaml.safe_load(text), where)
            else:
                for node in ast.walk(ast.parse(text)):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                        opts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                        kw = {k.arg: k.value for k in node.keywords if k.arg}
                        longs = [o for o in opts if o.startswith("--")] or [o for o in opts if not o.startswith("-")]
                        dest = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else (longs[0].lstrip("-").replace("-", "_") if longs else None)
                        if dest and "default" in kw:
                            try:
                                values.setdefault(dest, (ast.literal_eval(kw["default"]), f"{where} --{dest}"))
                            except (ValueError, SyntaxError, TypeError):
                                pass
        except Exception:  # noqa: BLE001 -- an unreadable or odd file only gives no values
            continue
    return values


def config_params(ctor) -> List[str]:
    """Parameters of ``ctor`` (a class: its ``__init__``; a function) that its body
    uses as a configuration object: ``p.x``, ``p["x"]``, ``p.get("x")``."""
    target = ctor.__init__ if isinstance(ctor, type) else ctor
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(target))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return []
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    args = node.args
    positional = [*args.posonlyargs, *args.args][1 if isinstance(ctor, type) else 0:]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    # only arguments a caller must give (or that default to None): a sized default is data
    names = {a.arg for a, d in pairs if d is None or (isinstance(d, ast.Constant) and d.value is None)}
    used: List[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and not sub.attr.startswith("_") and sub.attr not in ("index", "count", "shape", "dtype"):
            base = sub.value
        elif isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) and isinstance(sub.slice.value, str):
            base = sub.value
        else:
            continue
        if isinstance(base, ast.Name) and base.id in names and base.id not in used:
            used.append(base.id)
    return used


# -- tracing -------------------------------------------------------------------------------


class Tracer:
    """Line events of function frames of the traced files, into the current bucket."""

    def __init__(self, files: Dict[str, str]) -> None:
        self.files = {os.path.realpath(p): key for p, key in files.items()}
        self.keys: Dict[str, Optional[str]] = {}
        self.bucket: Optional[Dict[str, Set[int]]] = None

    def _call(self, frame, event, arg):
        name = frame.f_code.co_filename
        key = self.keys.get(name, "")
        if key == "":
            key = self.keys[name] = self.files.get(os.path.realpath(name))
        if key is None or self.bucket is None:
            return None
        lines = self.bucket.setdefault(key, set())

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local

    def __call__(self, bucket: Dict[str, Set[int]]):
        tracer = self

        class _On:
            def __enter__(self):
                tracer.bucket = bucket
                sys.settrace(tracer._call)

            def __exit__(self, *exc):
                sys.settrace(None)
                tracer.bucket = None
                return False

        return _On()


# -- signatures and factories ----------------------------------------------------------------


def _init_node(cls) -> Optional[ast.FunctionDef]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return node
    return None


def init_params(cls) -> Tuple[Dict[str, Any], Set[str]]:
    """({name: default or _NO_DEFAULT}, required names) accepted by ``cls(...)``, following
    ``**kwargs`` into the base classes' ``__init__``, and through undecorated wrappers
    (upstream's ``@has_config`` hides the signature behind ``*args, **kwargs``)."""
    params: Dict[str, Any] = {}
    required: Set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass.__module__.startswith("torch."):
            continue
        node = _init_node(klass)
        module = sys.modules.get(klass.__module__)
        env = dict(vars(module)) if module else {}
        var_kw = True
        if node is not None:
            args = node.args
            positional = [*args.posonlyargs, *args.args][1:]
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
            pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
            for arg, default in pairs:
                if arg.arg in params:
                    continue
                if default is None:
                    params[arg.arg] = _NO_DEFAULT
                    required.add(arg.arg)
                    continue
                try:
                    params[arg.arg] = eval(compile(ast.Expression(default), "<default>", "eval"), env)  # noqa: S307 -- the user's own code
                except Exception:  # noqa: BLE001
                    params[arg.arg] = _NO_DEFAULT
            var_kw = args.kwarg is not None
        else:
            try:
                sig = inspect.signature(klass.__init__)
            except (TypeError, ValueError):
                break
            var_kw = False
            for p in list(sig.parameters.values())[1:]:
                if p.kind == p.VAR_KEYWORD:
                    var_kw = True
                elif p.kind != p.VAR_POSITIONAL and p.name not in params:
                    params[p.name] = p.default if p.default is not p.empty else _NO_DEFAULT
                    if p.default is p.empty:
                        required.add(p.name)
        if not var_kw:
            break
    return params, required


def _literal(node: ast.AST, env: Dict[str, Any]) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        pass
    return eval(compile(ast.Expression(node), "<factory>", "eval"), env)  # noqa: S307 -- the user's own code


def _callee(node: ast.AST, module) -> Tuple[Any, Optional[str]]:
    """(object, name of a module-level function) that a call's func names."""
    dotted: List[str] = []
    while isinstance(node, ast.Attribute):
        dotted.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None, None
    obj = vars(module).get(node.id)
    for attr in dotted:
        obj = getattr(obj, attr, None)
    return obj, (node.id if not dotted else None)


# -- the worker ------------------------------------------------------------------------------


class Worker:
    def __init__(self, spec: Dict[str, Any]) -> None:
        self.spec = spec
        self.report: Dict[str, Any] = {"models": [], "errors": [], "notes": [], "failures": [], "coverage": [], "imports": []}
        self.t0 = time.time()
        traced: Dict[str, str] = {}
        for side_files in spec["traced"].values():
            traced.update(side_files)
        self.trace = Tracer(traced)
        self.coverage: Dict[Tuple[str, str], Dict[str, Dict[str, Set[int]]]] = {}
        self._repo: Optional[Dict[str, Tuple[Any, str]]] = None
        self.origin: Dict[str, Optional[str]] = {}  # filled name -> where its value came from

    def progress(self, message: str) -> None:
        if not self.spec["quiet"]:
            print(f"verify: [{time.time() - self.t0:5.1f}s] {message}", file=sys.stderr, flush=True)

    def bucket(self, side: str, label: str, case: str) -> Dict[str, Set[int]]:
        return self.coverage.setdefault((label, case), {"orig": {}, "new": {}})[side]

    # -- import machinery ------------------------------------------------------------------

    def enter(self, side: str) -> None:
        base = self.spec["sides"][side]
        entries = [base]
        for rel in self.spec["flat_dirs"]:
            entry = os.path.normpath(os.path.join(base, rel))
            if entry not in entries:
                entries.append(entry)
        entries.append(self.spec["project_dir"])
        self.path_entries = entries
        sys.path[:0] = entries
        importlib.invalidate_caches()
        self.before = set(sys.modules)

    def leave(self) -> None:
        roots = [os.path.realpath(p) for p in self.path_entries]

        def inside(mod) -> bool:
            try:  # a namespace package's __path__ is recomputed from its parent's
                locations = [getattr(mod, "__file__", None)] + list(getattr(mod, "__path__", []) or [])
            except Exception:  # noqa: BLE001
                return True
            for loc in locations:
                if isinstance(loc, str):
                    real = os.path.realpath(loc)
                    if any(real == r or real.startswith(r + os.sep) for r in roots):
                        return True
            return False

        # decide for all first: deleting a parent first breaks its children's __path__
        doomed = [name for name in list(sys.modules) if name not in self.before and (sys.modules[name] is None or inside(sys.modules[name]))]
        for name in doomed:
            sys.modules.pop(name, None)
        for entry in self.path_entries:
            while entry in sys.path:
                sys.path.remove(entry)
        importlib.invalidate_caches()

    def in_tree(self, module) -> bool:
        loc = getattr(module, "__file__", None) if module is not None else None
        if not isinstance(loc, str):
            return False
        real = os.path.realpath(loc)
        return any(real.startswith(os.path.realpath(p) + os.sep) for p in self.path_entries[:-1])

    # -- discovery (original side) ---------------------------------------------------------

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
            return isinstance(obj, type) and issubclass(obj, nn.Module) and obj is not nn.Module

        def scan(mod_name: str, primary: bool) -> None:
            if mod_name in scanned:
                return
            scanned.add(mod_name)
            try:
                module = importlib.import_module(mod_name)
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
                why = f"cannot import {missing} (not installed)" if missing and not missing.startswith(mod_name.split(".")[0]) else f"{type(exc).__name__}: {exc}"
                self.report["notes"].append(f"cannot import {mod_name}: {why}")
                self.report["imports"].append({"module": mod_name, "error": why, "missing": why.endswith("(not installed)")})
                return
            source_file = getattr(module, "__file__", None)
            if not source_file:
                return
            tree = ast.parse(Path(source_file).read_bytes())
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
                    obj, _ = _callee(call.func, module)
                    if is_module_class(obj) and obj is not cls:
                        parts.add(obj)
                        direct.setdefault(cls.__name__, set()).add(obj.__name__)
        # which classes each one builds, through its parts (for the not-proven hints)
        contains = {name: set(held) for name, held in direct.items()}
        for _ in range(len(contains)):
            for name, held in contains.items():
                held |= {n for h in list(held) for n in contains.get(h, ())}
        self.report["contains"] = {name: sorted(held) for name, held in contains.items()}
        tops = [c for c in classes if c[0] not in parts]
        tops.sort(key=lambda c: (not (_MODEL_ARGS & set(init_params(c[0])[0])), not c[3]))
        self.parts = [c[0] for c in classes if c[0] in parts]

        first: List[Dict[str, Any]] = []
        later: List[Dict[str, Any]] = []
        for cls, module, _, _ in tops:
            own = [f for f in factories if f["cls"] is cls]
            variants: Dict[Any, List[Dict[str, Any]]] = {}
            for f in own:
                key = "opaque" if f["opaque"] else repr(sorted((k, repr(v)) for k, v in f["recipe"].items() if k not in _SIZE_KNOBS))
                variants.setdefault(key, []).append(f)
            ordered = sorted(
                variants.values(),
                key=lambda fs: (fs[0]["opaque"], sum(v is _OPAQUE for v in fs[0]["recipe"].values()), len(fs[0]["recipe"]) - len(set(fs[0]["recipe"]) & _SIZE_KNOBS), fs[0]["order"]),
            )
            cands = []
            for fs in ordered:
                best = min(fs, key=lambda f: (_size_rank(f["attr"]), f["order"]))
                cands.append({"module": best["module"], "attr": best["attr"], "label": f"{best['module']}:{best['attr']} -> {cls.__name__}", "factory": True, "cls": cls, "recipe": best["recipe"], "opaque": best["opaque"], "kwargs": {}})
            cands.append({"module": cls.__module__, "attr": cls.__qualname__, "label": f"{cls.__module__}:{cls.__qualname__} (class)", "factory": False, "cls": cls, "recipe": {}, "opaque": False, "kwargs": {}})
            video = self._video(cls, [f["recipe"] for f in own])
            if video is not None:
                cands.append(dict(cands[-1], label=f"{cls.__module__}:{cls.__qualname__} (class, 3-D)", recipe=video))
            first.append(dict(cands[0], later=False))
            later.extend(dict(c, later=True) for c in cands[1:])
        return first + later

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

        if _callee(call.func, module)[0] is not functools.partial:
            return None
        cls = _callee(call.args[0], module)[0]
        if not (is_module_class(cls) and self.in_tree(sys.modules.get(cls.__module__))):
            return None
        kw: Dict[str, Any] = {}
        for k in call.keywords:
            if k.arg is not None:
                try:
                    kw[k.arg] = _literal(k.value, dict(vars(module)))
                except Exception:  # noqa: BLE001
                    kw[k.arg] = _OPAQUE
        return name, cls, kw, len(call.args) > 1

    def _recipe(self, module, funcs, name, is_module_class, depth: int = 0):
        """(class, keyword arguments, opaque) a factory returns, or None: values its code
        computes are ``_OPAQUE``; ``opaque`` when it passes positional arguments."""
        node = funcs.get(name)
        if node is None or depth > 5:
            return None
        env = dict(vars(module))
        defaults = node.args.defaults
        for arg, default in zip(node.args.args[len(node.args.args) - len(defaults):], defaults):
            try:
                env[arg.arg] = _literal(default, dict(vars(module)))
            except Exception:  # noqa: BLE001
                pass
        for sub in ast.walk(node):
            if not (isinstance(sub, ast.Return) and isinstance(sub.value, ast.Call)):
                continue
            call = sub.value
            obj, fname = _callee(call.func, module)
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
                    kw[k.arg] = _literal(k.value, env)
                except Exception:  # noqa: BLE001 -- kwargs["x"], a call...: only the factory knows
                    kw[k.arg] = _OPAQUE
            return inner[0], kw, opaque
        return None

    # -- building -------------------------------------------------------------------------

    @staticmethod
    def resolve(module_name: str, attr: str):
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj

    def repo(self) -> Dict[str, Tuple[Any, str]]:
        if self._repo is None:
            self._repo = repo_values(self.spec["project_dir"], _SCAN_SKIP)
        return self._repo

    def fill(self, name: str, filled: Dict[str, Any]) -> Any:
        """A value for an argument or configuration key nobody gave: the user's
        ``--kwargs``; for a size (dims, heads, stages) a small one from its name; else
        the repo's own (argparse default, config file); else one from its name."""
        if name in self.spec["kwargs"]:
            filled[name] = value = self.spec["kwargs"][name]
            self.origin[name] = "--kwargs"
            return value
        small = guess(name)
        repo = self.repo().get(name)
        if repo is not None and is_size(name) and isinstance(repo[0], (tuple, list)) and repo[0] and all(isinstance(v, int) for v in repo[0]):
            small = type(repo[0])(1 for _ in repo[0])  # as many stages as the repo's, one block each
        if repo is not None and (small is None or not is_size(name)):
            value, self.origin[name] = repo
        elif small is not None:
            value, self.origin[name] = small, None
        else:
            raise MissingKey(name)
        filled[name] = value
        return value

    @staticmethod
    def _accepts(ctor) -> Tuple[Set[str], bool]:
        try:
            params = inspect.signature(ctor).parameters.values()
        except (TypeError, ValueError):
            return set(), True
        return {p.name for p in params}, any(p.kind == p.VAR_KEYWORD for p in params)

    def construct(self, ctor: Callable, kwargs: Dict[str, Any], torch, filled: Dict[str, Any]):
        """ctor(**kwargs), filling missing required arguments, ``kwargs[...]`` keys and
        the keys a configuration object is asked for (:meth:`fill`, recorded in
        ``filled``).  ``kwargs`` is updated to what rebuilds the same model."""
        for name in config_params(ctor):
            if not isinstance(kwargs.get(name), ConfigSpec):
                given = kwargs.get(name)
                kwargs[name] = ConfigSpec(given if isinstance(given, dict) else {})
        specs = [v for v in kwargs.values() if isinstance(v, ConfigSpec)]
        accepted, var_kw = self._accepts(ctor)
        if not var_kw:
            for key in [k for k in kwargs if k not in accepted]:
                if specs:  # keys the constructor does not take belong to its configuration object
                    specs[0].values[key] = kwargs.pop(key)
                elif key in self.spec["kwargs"]:  # --kwargs go to the builds that take them
                    kwargs.pop(key)
        for _ in range(12):
            torch.manual_seed(0)
            call = {k: (Config(v.values, lambda key: self.fill(key, filled)) if isinstance(v, ConfigSpec) else v) for k, v in kwargs.items()}
            try:
                return ctor(**call)
            except MissingArgs:
                raise
            except TypeError as exc:
                m = re.search(r"missing \d+ required (?:positional|keyword-only) arguments?: (.*)", str(exc))
                if not m:
                    raise
                names = re.findall(r"'([^']+)'", m.group(1))
            except KeyError as exc:
                key = exc.args[0] if exc.args else None
                if not isinstance(key, str) or key in kwargs:
                    raise
                names = [key]
            for n in names:
                kwargs[n] = self.fill(n, filled)
        raise RuntimeError("could not fill the required arguments")

    @staticmethod
    def small_input_size(model) -> Optional[List[int]]:
        """Smallest input with 2 mask units per dim that Unroll/Reroll accept, or None."""
        try:
            patch = list(model.patch_stride)
            mu = list(model.mask_unit_size)
            qs = list(model.q_stride)
            stages = len(model.stage_ends)
            tokens = list(model.tokens_spatial_shape)
        except (AttributeError, TypeError):
            return None
        if not (len(patch) == len(mu) == len(qs) == len(tokens)):
            return None
        size = []
        for p, m, q, t in zip(patch, mu, qs, tokens):
            unit = math.lcm(int(m), int(q) ** max(stages - 1, 0))
            size.append(min(unit * 2, t) * int(p) if t >= unit else t * int(p))
        return size

    @staticmethod
    def in_chans(model, torch) -> int:
        for mod in model.modules():
            if isinstance(mod, torch.nn.modules.conv._ConvNd):
                return int(mod.in_channels)
        return 3

    @staticmethod
    def shrink(params: Dict[str, Any], given: Dict[str, Any], user: Dict[str, Any]) -> Dict[str, Any]:
        """Small dims for a Hiera-like configuration (the same code paths, fewer FLOPs);
        what the user gave is kept."""
        eff = {k: v for k, v in params.items() if v is not _NO_DEFAULT}
        eff.update(given)
        out: Dict[str, Any] = {}

        def num(key) -> Optional[int]:
            v = eff.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        heads = num("num_heads") or 1
        if num("embed_dim") is not None and num("embed_dim") > 8 * heads:
            out["embed_dim"] = 8 * heads
        stages = eff.get("stages")
        if isinstance(stages, (tuple, list)) and stages and all(isinstance(s, int) for s in stages) and max(stages) > 1:
            out["stages"] = type(stages)(1 for _ in stages)
        if (num("decoder_depth") or 0) > 1:
            out["decoder_depth"] = 1
        dheads = num("decoder_num_heads") or 1
        if num("decoder_embed_dim") is not None and num("decoder_embed_dim") > 8 * dheads:
            out["decoder_embed_dim"] = 8 * dheads
        if (num("num_classes") or 0) > 10:
            out["num_classes"] = 10
        if (num("depth") or 0) > 2:
            out["depth"] = 2
        return {k: v for k, v in out.items() if k in params and k not in user}

    def modes(self, cand: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The ways to build a candidate, smallest first."""
        user = dict(self.spec["kwargs"], **cand.get("kwargs", {}))
        if cand["cls"] is None:  # --factory: as given
            return [{"module": cand["module"], "attr": cand["attr"], "kwargs": user, "how": "as given"}]
        params, required = init_params(cand["cls"])
        direct = {"module": cand["cls"].__module__, "attr": cand["cls"].__qualname__}
        out = []
        given = dict(cand["recipe"], **user)
        computed: Dict[str, Any] = {}
        for key, value in list(given.items()):
            if value is _OPAQUE:  # the factory computes it: as if missing (fill), else the default
                try:
                    value = self.fill(key, {})
                except MissingArgs:
                    value = params[key] if params.get(key, _NO_DEFAULT) is not _NO_DEFAULT else None
                if value is not None:
                    given[key] = computed[key] = value
        if not cand["opaque"] and not any(v is _OPAQUE for v in given.values()):
            small = self.shrink(params, given, user)
            if small:
                out.append(dict(direct, kwargs=dict(given, **small), filled=computed, how="small: " + ", ".join(f"{k}={v}" for k, v in small.items())))
            out.append(dict(direct, kwargs=given, filled=computed, how="its configuration"))
        if cand["factory"]:
            out.append({"module": cand["module"], "attr": cand["attr"], "kwargs": dict(user), "how": "the factory"})
        for mode in out:
            mode["required"] = sorted(required - set(mode["kwargs"])) if mode["attr"] == direct["attr"] else []
        return out

    def build(self, mode: Dict[str, Any], torch, filled: Dict[str, Any]):
        kwargs = dict(mode["kwargs"])
        filled.update(mode.get("filled", {}))
        ctor = self.resolve(mode["module"], mode["attr"])
        configs = set(config_params(ctor))
        for name in mode.get("required", []):
            if name not in configs:
                kwargs[name] = self.fill(name, filled)
        return self.construct(ctor, kwargs, torch, filled), kwargs

    def plan_mode(self, cand: Dict[str, Any], mode: Dict[str, Any], torch) -> Dict[str, Any]:
        """Original side: build, shrink the input, choose inputs."""
        filled: Dict[str, Any] = {}
        model, kwargs = self.build(mode, torch, filled)
        user_sized = "input_size" in self.spec["kwargs"] or "input_size" in cand.get("kwargs", {})
        if not user_sized and not self.spec["input_shape"]:
            small = self.small_input_size(model)
            current = None
            if small is not None:
                current = [int(t) * int(p) for t, p in zip(model.tokens_spatial_shape, model.patch_stride)]
            if small is not None and small != current:
                try:
                    model = self.construct(self.resolve(mode["module"], mode["attr"]), dict(kwargs, input_size=tuple(small)), torch, filled)
                    kwargs["input_size"] = tuple(small)
                except TypeError as exc:
                    self.report["notes"].append(f"{cand['label']}: cannot shrink input_size ({exc}); verifying at full size (slow)")
        if self.spec["input_shape"]:
            shape = list(self.spec["input_shape"])
        else:
            if hasattr(model, "tokens_spatial_shape") and hasattr(model, "patch_stride"):
                size = [int(t) * int(p) for t, p in zip(model.tokens_spatial_shape, model.patch_stride)]
            else:
                size = kwargs.get("input_size") or getattr(model, "input_size", None) or getattr(model, "img_size", None)
                if isinstance(size, int):
                    size = [size, size]
            if not size:
                raise ValueError("cannot tell the model's input size; give --input-shape or --kwargs '{\"input_size\": ...}'")
            shape = [2, self.in_chans(model, torch), *[int(s) for s in size]]
        notes = [f"built from {mode['how']}"]
        named = {k: v for k, v in filled.items() if self.origin.get(k) is None}
        if named:
            notes.append(f"filled from names: {', '.join(f'{k}={v!r}' for k, v in named.items())}")
        found = {k: v for k, v in filled.items() if self.origin.get(k) is not None}
        if found:
            notes.append(f"filled from the repo: {', '.join(f'{k}={v!r} ({self.origin[k]})' for k, v in found.items())}")
        return {"module": mode["module"], "attr": mode["attr"], "kwargs": kwargs, "shape": shape, "model": model, "notes": notes}

    # -- inputs ----------------------------------------------------------------------------

    @staticmethod
    def _forward_params(model) -> Dict[str, Any]:
        try:
            return dict(inspect.signature(model.forward).parameters)
        except (TypeError, ValueError):
            return {}

    @staticmethod
    def _grid(model, attr: str) -> Optional[int]:
        shape = getattr(model, attr, None)
        try:
            return int(math.prod(int(s) for s in shape)) if shape is not None and len(shape) else None
        except (TypeError, ValueError):
            return None

    def _arg_candidates(self, name: str, model, x, torch) -> List[Tuple[str, Any]]:
        """(description, value) to try for a required ``forward`` argument, likeliest first."""
        n = name.lower()
        batch = x.shape[0]
        tokens, units = self._grid(model, "tokens_spatial_shape"), self._grid(model, "mask_spatial_shape")
        out: List[Tuple[str, Any]] = []
        if "mask" in n and "ratio" not in n:
            random_first = hasattr(model, "get_random_mask") and not any(w in n for w in ("pad", "attn", "attention", "key", "valid"))
            if random_first:
                out.append((f"get_random_mask(x, {_MASK_RATIO}) (bool, mask units)", _Made("random_mask")))
            if tokens:
                out.append((f"all-True bool ({batch}, {tokens}) (tokens)", torch.ones(batch, tokens, dtype=torch.bool)))
                out.append((f"ones ({batch}, {tokens}) (tokens)", torch.ones(batch, tokens, dtype=x.dtype)))
            if units:
                out.append((f"all-True bool ({batch}, {units}) (mask units)", torch.ones(batch, units, dtype=torch.bool)))
            if hasattr(model, "get_random_mask") and not random_first:
                out.append((f"get_random_mask(x, {_MASK_RATIO}) (bool, mask units)", _Made("random_mask")))
            if tokens:
                out.append((f"all-True bool ({batch}, 1, {tokens})", torch.ones(batch, 1, tokens, dtype=torch.bool)))
        elif any(w in n for w in ("length", "lens")) and tokens:
            out.append((f"full lengths ({batch},)", torch.full((batch,), tokens, dtype=torch.long)))
        value = guess(name)
        if value is not None:
            out.append((repr(value), value))
        for literal in (None, False, 0):
            if all(v is not literal for _, v in out):
                out.append((repr(literal), literal))
        return out

    def forward_args(self, model, x, torch) -> Tuple[Dict[str, Any], List[str]]:
        """Values for ``forward``'s required arguments after the input: the first
        combination of candidates with which the original runs (notes say which)."""
        params = list(self._forward_params(model).values())
        required = [p.name for p in params[1:] if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not required:
            return {}, []
        options = [self._arg_candidates(name, model, x, torch) for name in required]
        tried: List[str] = []
        for combo in itertools.islice(itertools.product(*options), _MAX_ARG_TRIES):
            kw = dict(zip(required, (value for _, value in combo)))
            what = ", ".join(f"{name}={desc}" for name, (desc, _) in zip(required, combo))
            try:
                with torch.no_grad():
                    torch.manual_seed(1)
                    model(x.clone(), **self._made(model, x, kw, torch))
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                tried.append(f"{what}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            return kw, [f"forward's required {', '.join(required)}: {what}"]
        raise ValueError(f"forward needs {', '.join(required)}; the original raised with every candidate tried: " + "; ".join(tried))

    def cases(self, model, x, torch, base: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
        params = self._forward_params(model)
        named = "".join(f", {k}" for k in base)
        cases: List[Tuple[str, Dict[str, Any]]] = [(f"forward(x{named})", dict(base))]
        if "mask" in params and hasattr(model, "get_random_mask") and "mask_ratio" not in params:
            # (a model that takes mask_ratio draws its own mask in forward(x): covered above)
            kw = dict(base, mask=_Made("random_mask"))
            label = f"forward(x{named.replace(', mask', '')}, mask"
            if "return_intermediates" in params and "return_intermediates" not in base:
                kw["return_intermediates"] = True
                label += ", return_intermediates=True"
            if not isinstance(base.get("mask"), _Made):
                cases.append((label + ")", kw))
            # the rewrite's static-count path: the rewritten forward gets the count that
            # get_random_mask states (HR003), as a caller of the rewritten file would pass
            cases.append((label + ", num_kept)", dict(kw, num_kept=_Made("num_kept"))))
        elif "return_intermediates" in params and "return_intermediates" not in base:
            cases.append((f"forward(x{named}, return_intermediates=True)", dict(base, return_intermediates=True)))
        return cases

    @staticmethod
    def _made(model, x, kw: Dict[str, Any], torch) -> Dict[str, Any]:
        """``kw`` with the arguments each side makes from its own model (in the traced
        case): the random mask (same seed, drawn on CPU) and the rewrite's kept count."""
        out = {}
        for key, value in kw.items():
            if isinstance(value, _Made) and value.kind == "random_mask":
                state = torch.random.get_rng_state()
                torch.manual_seed(2)
                try:
                    value = model.get_random_mask(x.detach().cpu(), _MASK_RATIO).to(x.device)
                finally:
                    torch.random.set_rng_state(state)
            elif torch.is_tensor(value):
                value = value.to(device=x.device, dtype=x.dtype if value.is_floating_point() else value.dtype)
            out[key] = value
        made = out.get("num_kept")
        if isinstance(made, _Made):
            count = getattr(getattr(model, "get_random_mask", None), "num_kept", None)
            if callable(count) and "num_kept" in Worker._forward_params(model):
                out["num_kept"] = count(model, x, _MASK_RATIO)
            else:
                del out["num_kept"]
        return out

    # -- running ---------------------------------------------------------------------------

    @staticmethod
    def _flatten(value, prefix="out"):
        if isinstance(value, (tuple, list)):
            out = []
            for i, v in enumerate(value):
                out.extend(Worker._flatten(v, f"{prefix}[{i}]"))
            return out
        if isinstance(value, dict):
            out = []
            for k in sorted(value, key=str):
                out.extend(Worker._flatten(value[k], f"{prefix}[{k!r}]"))
            return out
        return [(prefix, value)]

    def run_case(self, model, x, kw, torch):
        model.zero_grad(set_to_none=True)
        kw = self._made(model, x, kw, torch)
        torch.manual_seed(1)
        leaves = self._flatten(model(x.clone(), **kw))
        loss = None
        for _, leaf in leaves:
            if torch.is_tensor(leaf) and leaf.is_floating_point() and leaf.requires_grad:
                w = torch.linspace(0.5, 1.5, leaf.numel(), dtype=leaf.dtype, device=leaf.device).view(leaf.shape)
                term = (leaf * w).sum()
                loss = term if loss is None else loss + term
        if loss is not None:
            loss.backward()
        outs = [(name, leaf.detach().clone() if torch.is_tensor(leaf) else leaf) for name, leaf in leaves]
        grads = {name: (p.grad.detach().clone() if p.grad is not None else None) for name, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        return outs, grads

    @staticmethod
    def _errs(a, b, torch) -> Tuple[float, float]:
        a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
        if a64.numel() == 0:
            return 0.0, 0.0
        diff = (a64 - b64).abs()
        if torch.isnan(a64).any() or torch.isnan(b64).any():
            same_nan = torch.equal(torch.isnan(a64), torch.isnan(b64))
            diff = torch.where(torch.isnan(a64) & torch.isnan(b64), torch.zeros_like(diff), diff)
            if not same_nan:
                return float("inf"), float("inf")
        abs_err = float(diff.max())
        scale = float(a64.abs().nan_to_num(0.0).max())
        return abs_err, abs_err / max(scale, 1e-30)

    def compare(self, config, label, outs_a, grads_a, outs_b, grads_b, tol, torch, ref=None) -> List[Dict[str, Any]]:
        """Rows for one case.  ``ref``: the original's float64 (outputs, grads) for an
        accuracy comparison (lower precisions) instead of a direct one."""
        rows = []
        ref_outs = dict(ref[0]) if ref else {}
        ref_grads = ref[1] if ref else {}

        def judge(name, a, b, rel, reference) -> Tuple[bool, str]:
            if reference is None or not torch.is_tensor(reference):
                return rel <= tol, f"rel err {rel:.2e}"
            e_orig = self._errs(reference, a, torch)[1]
            e_new = self._errs(reference, b, torch)[1]
            ok = e_new <= 2 * e_orig + tol
            return ok, f"error vs float64 {e_new:.2e}, original's {e_orig:.2e}"

        if len(outs_a) != len(outs_b):
            rows.append({"config": config, "case": label, "what": "outputs", "shape": f"{len(outs_a)} vs {len(outs_b)}", "ok": False, "note": "different number of outputs"})
            return rows
        for (name, a), (_, b) in zip(outs_a, outs_b):
            row = {"config": config, "case": label, "what": name, "ok": True}
            if torch.is_tensor(a) and torch.is_tensor(b):
                row["shape"] = str(tuple(a.shape)).replace(" ", "")
                if a.shape != b.shape or a.dtype != b.dtype:
                    row.update(ok=False, note=f"{tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
                elif a.is_floating_point() or a.is_complex():
                    row["abs"], row["rel"] = self._errs(a, b, torch)
                    row["ok"], why = judge(name, a, b, row["rel"], ref_outs.get(name) if ref else None)
                    if not row["ok"]:
                        row["note"] = why
                else:
                    row["abs"] = float((a.long() - b.long()).abs().max()) if a.numel() else 0.0
                    row["rel"] = None
                    row["ok"] = bool(torch.equal(a, b))
                    if not row["ok"]:
                        row["note"] = "values differ"
            else:
                row["shape"] = type(a).__name__
                row["ok"] = bool(a == b) if not (torch.is_tensor(a) or torch.is_tensor(b)) else False
                if not row["ok"]:
                    row["note"] = f"{a!r} vs {b!r}"[:80]
            rows.append(row)
        worst = (0.0, 0.0, "")
        bad: List[str] = []
        count = 0
        for name, ga in grads_a.items():
            gb = grads_b.get(name)
            if ga is None or gb is None:
                if (ga is None) != (gb is None):
                    bad.append(f"{name}: gradient {'only after' if ga is None else 'lost by'} the rewrite")
                continue
            count += 1
            if ga.shape != gb.shape:
                bad.append(f"{name}: shape {tuple(ga.shape)} vs {tuple(gb.shape)}")
                continue
            abs_err, rel = self._errs(ga, gb, torch)
            ok, why = judge(name, ga, gb, rel, ref_grads.get(name) if ref else None)
            if not ok:
                bad.append(f"{name}: {why}")
            if rel >= worst[1]:
                worst = (abs_err, rel, name)
        rows.append(
            {
                "config": config,
                "case": label,
                "what": f"grads ({count} params)",
                "shape": f"worst: {worst[2]}" if worst[2] else "-",
                "abs": worst[0] if count else None,
                "rel": worst[1] if count else None,
                "ok": not bad,
                "note": "; ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""),
            }
        )
        return rows

    # -- coverage on the original side (what is still unreached) ----------------------------

    def unreached(self) -> List[Dict[str, Any]]:
        """Sites some region of which (with original statements) no case ran yet."""
        out = []
        for site in self.spec["sites"]:
            regions = [r for r in site["regions"] if r["orig_stmts"]]
            for region in regions:
                hit = False
                for (_, _), sides in self.coverage.items():
                    lines = sides["orig"].get(site["path"], set())
                    if any(line in lines for lo, hi in region["orig_stmts"] for line in range(lo, hi + 1)):
                        hit = True
                        break
                if not hit:
                    out.append(site)
                    break
        return out

    # -- main ------------------------------------------------------------------------------

    def forget(self, label: str) -> None:
        """Drop the coverage of a build that failed: no comparison will use it."""
        for key in [k for k in self.coverage if k[0] == label]:
            del self.coverage[key]

    def attempt(self, cand: Dict[str, Any], torch, configs, label: str) -> Optional[Dict[str, Any]]:
        """Build and run one candidate on the original side; its plan, or None."""
        errors = []
        for mode in self.modes(cand):
            t0 = time.time()
            self.progress(f"building {label} ({mode['how']}, original)")
            bucket = self.bucket("orig", label, "build")
            try:
                with self.trace(bucket):
                    plan = self.plan_mode(cand, mode, torch)
            except MissingArgs as exc:
                errors.append({"error": f"needs {', '.join(exc.names)} (no default, no guess from its name)", "missing": exc.names})
                self.forget(label)
                continue
            except Exception as exc:  # noqa: BLE001
                errors.append({"error": f"cannot build ({mode['how']}): {type(exc).__name__}: {exc}"})
                self.forget(label)
                continue
            model = plan.pop("model")
            plan["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            plan["runs"] = {}
            plan["label"] = label
            gen = torch.Generator().manual_seed(3)
            plan["x"] = torch.randn(*plan["shape"], generator=gen, dtype=torch.float64)
            try:
                base: Dict[str, Any] = {}
                for i, (device, dtype, tol, cname) in enumerate(configs):
                    model.to(device=device, dtype=dtype)
                    x = plan["x"].to(device=device, dtype=dtype)
                    if i == 0:
                        base, arg_notes = self.forward_args(model, x, torch)
                        plan["notes"].extend(arg_notes)
                    for case, kw in self.cases(model, x, torch, base):
                        self.progress(f"running {label} {case} [{cname}] (original)")
                        if i == 0:
                            with self.trace(self.bucket("orig", label, case)):
                                plan["runs"][(cname, case)] = (kw, self.run_case(model, x, kw, torch))
                        else:
                            plan["runs"][(cname, case)] = (kw, self.run_case(model, x, kw, torch))
            except Exception as exc:  # noqa: BLE001
                errors.append({"error": f"the original model raised ({mode['how']}): {type(exc).__name__}: {exc}"})
                self.forget(label)
                continue
            finally:
                del model
            plan["seconds"] = time.time() - t0
            # --verify-cuda times the model at its own size: the first mode that is not shrunk
            plan["bench_mode"] = next((m for m in self.modes(cand) if not m["how"].startswith("small")), mode)
            return plan
        for err in errors[-1:] if errors else []:
            self.report["failures"].append(dict(err, label=cand["label"], **{"class": cand["cls"].__name__ if cand["cls"] else None}))
        if len(errors) > 1:
            self.report["notes"].append(f"{cand['label']}: " + "; ".join(e["error"] for e in errors[:-1]))
        return None

    def run(self) -> None:
        try:
            import torch
        except Exception as exc:  # noqa: BLE001
            self.report["errors"].append(f"cannot import torch ({type(exc).__name__}: {exc}): {INSTALL_HINT}")
            return
        torch.set_grad_enabled(True)
        configs = []
        for device, dtype, tol in self.spec["configs"]:
            if device == "cuda" and not torch.cuda.is_available():
                self.report["notes"].append(f"CUDA not available: {dtype} on cuda skipped")
                continue
            configs.append((device, getattr(torch, dtype), tol, f"{dtype} {device}"))

        self.enter("orig")
        plans = []
        try:
            cands = self.discover(torch)
            tried = 0
            labels: Set[str] = set()
            for cand in cands:
                if cand["later"]:
                    missing = self.unreached()
                    if not missing and plans:
                        break
                    owners = {s.get("owner_class") for s in missing}
                    cls = cand["cls"]
                    relevant = cls is not None and any(
                        o and any(k.__name__ == o for k in cls.__mro__) for o in owners
                    ) or not any(o and o not in {p.__name__ for p in self.parts} for o in owners)
                    if plans and not relevant:
                        continue
                if tried >= _MAX_CANDIDATES:
                    self.report["notes"].append(f"stopped after {tried} candidate models")
                    break
                tried += 1
                label = cand["label"]
                while label in labels:
                    label += "'"
                labels.add(label)
                plan = self.attempt(cand, torch, configs, label)
                if plan is not None:
                    plans.append(plan)
        finally:
            self.leave()

        ref_name = configs[0][3] if configs else None
        benches = [(plan["label"], plan["bench_mode"], plan["shape"]) for plan in plans]
        self.enter("new")
        try:
            for plan in plans:
                self.run_new(plan, configs, ref_name, torch)
        finally:
            self.leave()
        if self.spec.get("bench"):
            self.time_steps(benches, torch)
        for (label, case), sides in self.coverage.items():
            self.report["coverage"].append(
                {"model": label, "case": case, **{side: {k: sorted(v) for k, v in sides[side].items()} for side in ("orig", "new")}}
            )

    def run_new(self, plan, configs, ref_name, torch) -> None:
        label = plan["label"]
        entry = {"label": label, "input": plan["shape"], "rows": [], "notes": plan["notes"]}
        t0 = time.time()
        self.report["models"].append(entry)
        try:
            self.progress(f"building {label} (rewritten)")
            with self.trace(self.bucket("new", label, "build")):
                model = self.construct(self.resolve(plan["module"], plan["attr"]), dict(plan["kwargs"]), torch, {})
            new_state = model.state_dict()
            keys_a, keys_b = list(plan["state"]), list(new_state)
            same = keys_a == keys_b and all(plan["state"][k].shape == new_state[k].shape for k in keys_a)
            note = "" if same else f"missing {sorted(set(keys_a) - set(keys_b))[:3]}, unexpected {sorted(set(keys_b) - set(keys_a))[:3]}"
            if same and keys_a != keys_b:
                note = "different order"
            entry["rows"].append({"config": "-", "case": "state_dict", "what": f"{len(keys_a)} tensors", "shape": "same names, shapes" if same else "differs", "ok": same, "note": note})
            if not same:
                return
            for i, (device, dtype, tol, cname) in enumerate(configs):
                model.load_state_dict(plan["state"])
                model.to(device=device, dtype=dtype)
                x = plan["x"].to(device=device, dtype=dtype)
                for (cfg, case), (kw, (outs_a, grads_a)) in plan["runs"].items():
                    if cfg != cname:
                        continue
                    self.progress(f"running {label} {case} [{cname}] (rewritten)")
                    kw_b = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in kw.items()}
                    try:
                        if i == 0:
                            with self.trace(self.bucket("new", label, case)):
                                outs_b, grads_b = self.run_case(model, x, kw_b, torch)
                        else:
                            outs_b, grads_b = self.run_case(model, x, kw_b, torch)
                    except Exception as exc:  # noqa: BLE001
                        entry["rows"].append({"config": cname, "case": case, "what": "forward/backward", "shape": "-", "ok": False, "note": f"the rewritten model raised {type(exc).__name__}: {exc}"})
                        continue
                    ref = None
                    if cname != ref_name:  # lower precision: judged by accuracy vs float64
                        ref = plan["runs"].get((ref_name, case), (None, None))[1]
                    entry["rows"].extend(self.compare(cname, case, outs_a, grads_a, outs_b, grads_b, tol, torch, ref=ref))
            del model
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"cannot build the rewritten model: {type(exc).__name__}: {exc}"
        finally:
            entry["seconds"] = plan["seconds"] + time.time() - t0
            plan.clear()


    def time_steps(self, benches, torch) -> None:
        """--verify-cuda: a training step of each passing model, original vs rewritten, at the
        model's own size in bfloat16 on CUDA, interleaved rounds (verify_cuda.py)."""
        timing = self.report.setdefault("timing", [])
        if not torch.cuda.is_available():
            timing.append({"label": "-", "lines": ["timing skipped: CUDA not available"]})
            return
        import importlib.util  # noqa: PLC0415 -- beside this file, not through hiera_rewrite

        spec = importlib.util.spec_from_file_location("_hiera_rewrite_verify_cuda", Path(__file__).with_name("verify_cuda.py"))
        timer = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(timer)
        bench = self.spec["bench"]
        passed = {m["label"] for m in self.report["models"] if not m.get("error") and m["rows"] and all(r["ok"] for r in m["rows"])}
        for label, mode, verified_shape in benches[: bench.get("models", 2)]:
            if label not in passed:
                continue
            models = {}
            try:
                for side in ("orig", "new"):
                    self.enter(side)
                    try:
                        self.progress(f"building {label} at its own size for timing ({side})")
                        models[side] = self.build(mode, torch, {})[0]
                    finally:
                        self.leave()
                models["new"].load_state_dict(models["orig"].state_dict())
                for model in models.values():
                    model.to(device="cuda", dtype=torch.bfloat16)
                model = models["orig"]
                if bench.get("size"):
                    size = list(bench["size"])
                elif hasattr(model, "tokens_spatial_shape") and hasattr(model, "patch_stride"):
                    size = [int(t) * int(p) for t, p in zip(model.tokens_spatial_shape, model.patch_stride)]
                else:  # its own size is unknown: the verified one
                    size = list(verified_shape[2:])
                shape = [int(bench.get("batch", 16)), *verified_shape[1:2], *size]
                self.progress(f"timing {label} {tuple(shape)} on {torch.cuda.get_device_name()}")
                result = timer.time_training_steps(
                    {"original": models["orig"], "rewritten": models["new"]},
                    lambda: torch.randn(*shape, device="cuda", dtype=torch.bfloat16),
                    baseline="original",
                    rounds=int(bench.get("rounds", 8)),
                    steps=int(bench.get("steps", 5)),
                    torch=torch,
                )
                timing.append({"label": label, "lines": timer.format_timing(label, result, "bfloat16", shape), "result": {k: v for k, v in result.items() if k != "ratios"} | {"ratio": result["ratios"]["rewritten"]["median"]}})
            except Exception as exc:  # noqa: BLE001 -- timing is extra: say why, keep the verdict
                hint = "; try a smaller --bench-batch" if "out of memory" in str(exc) else ""
                timing.append({"label": label, "lines": [f"timing of {label} skipped: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{hint}"]})
            finally:
                models.clear()
                torch.cuda.empty_cache()


class MissingArgs(Exception):
    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(", ".join(names))
        self.names = list(names)


class MissingKey(MissingArgs, AttributeError, KeyError):
    """No value for a key: also an AttributeError/KeyError, so that the user's
    ``getattr(cfg, "x", default)`` / ``hasattr`` / ``try: ... except KeyError`` keep working."""

    def __init__(self, name: str) -> None:
        super().__init__([name])

    def __str__(self) -> str:
        return self.names[0]


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    worker = Worker(spec)
    try:
        worker.run()
    except Exception as exc:  # noqa: BLE001 -- report, never hide
        import traceback

        worker.report["errors"].append(f"verification crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    Path(spec["report"]).write_text(json.dumps(worker.report))


if __name__ == "_hiera_rewrite_verify_worker":
    main(sys.argv[1])
