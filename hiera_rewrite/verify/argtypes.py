"""argparse ``type=`` functions of a repo, applied to its scripts' words (worker side).

A repo's training script parses its command line with its own functions
(``type=parse_tuples`` turning ``"5,1,1;1,3,1"`` into ``[(5, 1, 1), (1, 3, 1)]``,
``type=str2bool``, a ``lambda``); the values ``--verify`` reads from the repo's shell
scripts and configs are worth what that script would get.  :func:`converter` gives, for an
``add_argument(..., type=...)`` node, a callable doing what the repo's own function does:
``int``/``float``/``str``/``bool``, ``ast.literal_eval``/``json.loads``, or the repo's
function -- defined in the script or imported from another file of the repo -- compiled
from its source alone where it is a pure function of the string: its body uses only its
parameters, its own local names, a few builtins (``int``, ``tuple``, ``map``...), methods
of its values (no ``_`` attributes), other such functions of its module and
``argparse.ArgumentTypeError``; no imports, ``while``, ``global``, ``with``, ``yield``.
Anything else (a function opening a file, reading a global table) gives None: the word is
then read as before (an int, a float, True/False, else the string).
"""

from __future__ import annotations

import ast
import builtins
import json
import os
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

_SAFE_BUILTINS = (
    "int", "float", "str", "bool", "tuple", "list", "dict", "set", "frozenset", "map", "filter", "zip", "len",
    "range", "enumerate", "sorted", "reversed", "min", "max", "abs", "round", "sum", "any", "all", "isinstance",
    "type", "ValueError", "TypeError", "KeyError", "IndexError", "Exception", "AssertionError", "print",
)

_ALLOWED = (
    ast.Module, ast.FunctionDef, ast.Lambda, ast.arguments, ast.arg, ast.Return, ast.If, ast.Try, ast.ExceptHandler,
    ast.Raise, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Name, ast.Attribute, ast.Call, ast.keyword,
    ast.Constant, ast.Compare, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.ListComp, ast.SetComp, ast.DictComp,
    ast.GeneratorExp, ast.comprehension, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Subscript, ast.Slice,
    ast.IfExp, ast.For, ast.Break, ast.Continue, ast.Pass, ast.JoinedStr, ast.FormattedValue, ast.Starred,
    ast.Assert, ast.expr_context, ast.operator, ast.boolop, ast.cmpop, ast.unaryop,
)

_STDLIB = {("ast", "literal_eval"): ast.literal_eval, ("json", "loads"): json.loads}
_BUILTIN_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


class _ArgumentTypeError(ValueError):
    pass


class _Argparse:
    """What a type function may use of argparse: its error."""

    ArgumentTypeError = _ArgumentTypeError


def _pure(func: ast.AST, module_funcs: Dict[str, ast.FunctionDef], seen: Set[str]) -> bool:
    """``func`` (a def or lambda) uses only its parameters and locals, safe builtins,
    ``argparse.ArgumentTypeError`` and other pure functions of its module (added to ``seen``)."""
    args = func.args
    local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a is not None}
    if any(d is not None and not isinstance(d, ast.Constant) for d in [*args.defaults, *args.kw_defaults]):
        return False
    body = func.body if isinstance(func.body, list) else [func.body]
    for node in body:
        for sub in ast.walk(node):
            if not isinstance(sub, _ALLOWED) or (isinstance(sub, ast.FunctionDef) and sub is not func):
                return False
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                local.add(sub.id)
            elif isinstance(sub, ast.ExceptHandler) and sub.name:
                local.add(sub.name)
            elif isinstance(sub, ast.Lambda):
                local |= {a.arg for a in sub.args.args}
    for node in body:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute):
                if sub.attr.startswith("_"):
                    return False
                if isinstance(sub.value, ast.Name) and sub.value.id == "argparse" and sub.attr != "ArgumentTypeError":
                    return False
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in local:
                if sub.id in _SAFE_BUILTINS or sub.id in ("argparse", "True", "False", "None"):
                    continue
                helper = module_funcs.get(sub.id)
                if helper is None or len(seen) > 8:
                    return False
                if sub.id not in seen:
                    seen.add(sub.id)
                    if not _pure(helper, module_funcs, seen):
                        return False
    return True


def _compile(func: ast.AST, name: str, module_funcs: Dict[str, ast.FunctionDef], helpers: Set[str]) -> Optional[Callable[[str], Any]]:
    safe = {k: getattr(builtins, k) for k in _SAFE_BUILTINS}
    safe["print"] = lambda *a, **k: None
    env: Dict[str, Any] = {"__builtins__": safe, "argparse": _Argparse}
    defs: List[ast.stmt] = [module_funcs[h] for h in sorted(helpers) if h in module_funcs and h != name]
    if isinstance(func, ast.Lambda):
        defs.append(ast.Assign(targets=[ast.Name(id="__type__", ctx=ast.Store())], value=func, lineno=1, col_offset=0))
        target = "__type__"
    else:
        defs.append(func)
        target = func.name
    try:
        module = ast.fix_missing_locations(ast.Module(body=defs, type_ignores=[]))
        exec(compile(module, f"<argparse type {name}>", "exec"), env)  # noqa: S102 -- checked pure above
    except Exception:  # noqa: BLE001
        return None
    fn = env.get(target)
    return fn if callable(fn) else None


class Sources:
    """The repo's Python files, parsed once, and the module-level functions they define."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._trees: Dict[str, Optional[ast.Module]] = {}

    def tree(self, path: str) -> Optional[ast.Module]:
        if path not in self._trees:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    self._trees[path] = ast.parse(f.read())
            except (OSError, SyntaxError, ValueError):
                self._trees[path] = None
        return self._trees[path]

    def add(self, path: str, tree: ast.Module) -> None:
        self._trees[path] = tree

    @staticmethod
    def funcs(tree: Optional[ast.Module]) -> Dict[str, ast.FunctionDef]:
        return {n.name: n for n in (tree.body if tree is not None else []) if isinstance(n, ast.FunctionDef)}

    def module_file(self, module: str, level: int, here: str) -> Optional[str]:
        """The file of the repo a script imports ``module`` from (relative imports from the
        script's folder; absolute ones from the repo root or the script's folder)."""
        parts = module.split(".") if module else []
        bases = []
        if level:
            base = os.path.dirname(here)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            bases.append(base)
        else:
            bases += [self.root, os.path.dirname(here)]
        for base in bases:
            stem = os.path.join(base, *parts)
            for cand in (stem + ".py", os.path.join(stem, "__init__.py")):
                if os.path.isfile(cand) and os.path.realpath(cand).startswith(os.path.realpath(self.root)):
                    return cand
        return None

    def find(self, name: str, attr: Optional[str], path: str, depth: int = 0) -> Optional[Tuple[ast.FunctionDef, Dict[str, ast.FunctionDef]]]:
        """(def, its module's functions) of ``name`` (``attr`` of the module ``name``) as
        the file ``path`` sees it: defined there or imported from the repo."""
        tree = self.tree(path)
        if tree is None or depth > 3:
            return None
        funcs = self.funcs(tree)
        if attr is None and name in funcs:
            return funcs[name], funcs
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) != name:
                        continue
                    source = self.module_file(node.module or "", node.level, path)
                    if source is not None:  # from util.misc import parse_tuples
                        found = self.find(alias.name, attr, source, depth + 1) if attr is None else None
                        if found is not None:
                            return found
                    if attr is not None:  # from util import misc; misc.parse_tuples
                        sub = self.module_file(".".join(filter(None, [node.module or "", alias.name])), node.level, path)
                        if sub is not None:
                            return self.find(attr, None, sub, depth + 1)
            elif isinstance(node, ast.Import) and attr is not None:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        sub = self.module_file(alias.name, 0, path)
                        if sub is not None:
                            return self.find(attr, None, sub, depth + 1)
        return None


def converter(node: Optional[ast.AST], path: str, sources: Sources) -> Optional[Callable[[str], Any]]:
    """What ``type=node`` in ``add_argument`` of the file ``path`` does to a word (see the
    module's docstring), or None where it is not known to be safe to run here."""
    if node is None:
        return None
    if isinstance(node, ast.Name) and node.id in _BUILTIN_TYPES:
        return _BUILTIN_TYPES[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (node.value.id, node.attr) in _STDLIB:
        return _STDLIB[(node.value.id, node.attr)]
    if isinstance(node, ast.Name) and node.id == "literal_eval":
        return ast.literal_eval
    if isinstance(node, ast.Lambda):
        funcs = Sources.funcs(sources.tree(path))
        helpers: Set[str] = set()
        return _compile(node, "lambda", funcs, helpers) if _pure(node, funcs, helpers) else None
    if isinstance(node, ast.Name):
        found = sources.find(node.id, None, path)
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        found = sources.find(node.value.id, node.attr, path)
    else:
        return None
    if found is None:
        return None
    func, funcs = found
    helpers = set()
    if len([*func.args.posonlyargs, *func.args.args]) < 1 or not _pure(func, funcs, helpers):
        return None
    return _compile(func, func.name, funcs, helpers)
