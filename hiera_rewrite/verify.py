"""``--verify``: prove a rewrite on the user's own files before anything is written.

The original files and their rewritten text are imported as two separate module
trees, models are built from each with the same weights, and every output and every
parameter gradient is compared (float64 on CPU; optionally CUDA float32/bfloat16).

How the two trees are imported
-------------------------------
A verification *group* is every target file under one package root: by default the
top-most folder reached by walking up while ``__init__.py`` exists (``--package-root``
names it instead); a file with no ``__init__.py`` beside it is a flat module whose
folder is the root.  For each group:

1. The root folder is copied twice into a fresh temp dir, under its **original
   name**: ``TMP/orig/<pkg>/...`` and ``TMP/new/<pkg>/...`` (``__pycache__``, VCS
   folders and files over 8 MB -- checkpoints -- are not copied).  The rewritten
   bytes of the changed targets are written into the ``new`` copy only.  The user's
   files are only read.
2. Both sides are imported in **one fresh Python subprocess** (the worker, below),
   never in the CLI process: whatever the CLI process or its caller has imported
   (an installed upstream ``hiera``, the user's own package) cannot leak in.
3. The worker puts ``TMP/orig`` first on ``sys.path`` (then the folder holding each
   target, so flat ``from hiera_utils import ...`` resolves as when that folder is on
   the path, then the folder that holds the user's package root, so sibling packages
   of the user's repo resolve read-only).  Because the copy keeps its original name,
   relative imports, flat imports and package-absolute imports
   (``from mypkg.hiera_utils import ...``) all resolve inside the copy, exactly as
   they do in the user's repo.  Renaming the copies (``_hr_verify_orig_1``) would
   break the last kind: ``import mypkg`` inside the copy would find the user's real
   package, or nothing.
4. After the original side is built and run, the worker removes from ``sys.modules``
   every module it imported from the temp dir or from the user's project folder
   (installed libraries such as torch and timm stay: they are the same for both
   sides), swaps ``TMP/orig`` for ``TMP/new`` on ``sys.path``, clears the import
   caches and imports the rewritten side under the same names.  Objects of the
   original side stay alive through their own globals.  The one thing this cannot
   undo is a module-level registration into a third-party registry (e.g. timm's
   ``register_model``) -- it simply runs twice, which those registries tolerate.
   Both sides in one process keep it fast (torch is imported once) and let the
   comparison happen in memory, with no weights or gradients written to disk.
5. Bytecode writing is disabled in the worker and the temp dir is removed, so
   nothing is left in the user's tree.

What is built
-------------
Model classes are ``nn.Module`` subclasses whose ``__init__`` takes ``input_size``,
``in_chans`` or ``img_size`` (a Hiera-like encoder, an MAE), defined in the target
files or in files of the same folder that import a changed file.  Each is built
through the file's own factory functions (``hiera_tiny_224``...: the smallest by
name, preferring ones that do not pin ``input_size``), else the class itself, and
the model-like base classes of each (the MAE's encoder, ``Hiera``) are added too.
``--factory module:function`` (repeatable) replaces the discovery; ``--kwargs`` adds
keyword arguments to every build.  ``input_size`` is shrunk to the smallest valid
size with a few mask units (from the model's ``patch_stride``, ``mask_unit_size``,
``q_stride`` and stage count) unless given.

The torch-free CLI imports this module; torch is imported only in the worker.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

EXIT_VERIFY_FAILED = 3
INSTALL_HINT = "pip install 'hiera-rewrite[verify]'"
TORCH_MISSING = f"--verify needs torch, which is not installed here: {INSTALL_HINT}"

# (device, dtype, tolerance).  float64 CPU: max|a-b| / max|a| <= 1e-9 between the two
# sides.  Lower precisions on CUDA run different kernels on each side (that is the
# point of the rewrite), so their difference is rounding noise, not a verdict; there
# the rewritten model must be about as accurate as the original, both measured
# against the original's float64 CPU result: err_new <= 2 * err_orig + tolerance.
CPU_CONFIG = ("cpu", "float64", 1e-9)
CUDA_CONFIGS = [("cuda", "float32", 1e-5), ("cuda", "bfloat16", 1e-2)]

_SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".tox", ".venv", "venv", "node_modules"}
_MAX_COPY_BYTES = 8 * 1024 * 1024


# ----------------------------------------------------------------------------------
# CLI side (no torch)
# ----------------------------------------------------------------------------------


class UsageError(ValueError):
    """A bad --factory/--package-root: exit 2."""


def find_root(path: Path) -> Tuple[Path, bool]:
    """(root folder, is_package): walk up while ``__init__.py`` exists."""
    folder = path.resolve().parent
    if not (folder / "__init__.py").is_file():
        return folder, False
    while (folder.parent / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder, True


def module_name(root: Path, is_package: bool, path: Path) -> str:
    rel = path.resolve().relative_to(root)
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if is_package:
        parts = [root.name, *parts]
    return ".".join(parts)


class Group:
    """Target files under one package root, with the rewritten bytes of the changed ones."""

    def __init__(self, root: Path, is_package: bool) -> None:
        self.root = root
        self.is_package = is_package
        self.targets: List[Path] = []
        self.new_bytes: Dict[Path, bytes] = {}

    @property
    def label(self) -> str:
        return f"package `{self.root.name}` ({self.root})" if self.is_package else f"flat modules in {self.root}"


def group_files(files: Sequence[Tuple[Path, Optional[bytes]]], package_root: Optional[Path]) -> List[Group]:
    """Group (path, rewritten bytes or None if unchanged) by package root."""
    groups: Dict[Path, Group] = {}
    for path, new in files:
        path = path.resolve()
        if package_root is not None:
            root, is_package = package_root.resolve(), True
            try:
                path.relative_to(root)
            except ValueError:
                raise ValueError(f"{path} is not inside --package-root {root}") from None
        else:
            root, is_package = find_root(path)
        group = groups.setdefault(root, Group(root, is_package))
        group.targets.append(path)
        if new is not None:
            group.new_bytes[path] = new
    return list(groups.values())


def _copy_tree(src: Path, dst: Path, recursive_only_packages: bool) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        if entry.is_symlink() and not entry.exists():
            continue
        if entry.is_dir():
            if entry.name in _SKIP_DIRS or entry.name.startswith("."):
                continue
            if recursive_only_packages and not (entry / "__init__.py").is_file():
                continue
            _copy_tree(entry, dst / entry.name, False)
        elif entry.is_file():
            if recursive_only_packages and entry.suffix != ".py":
                continue
            if entry.suffix in (".pyc", ".pyo") or entry.stat().st_size > _MAX_COPY_BYTES:
                continue
            shutil.copyfile(entry, dst / entry.name)


def _dependents(root: Path, is_package: bool, changed: List[Path]) -> List[Path]:
    """Python files beside a changed file whose imports name that file's module."""
    stems = {p.stem for p in changed}
    found: List[Path] = []
    folders = sorted({p.parent for p in changed})
    for folder in folders:
        for candidate in sorted(folder.glob("*.py")):
            if candidate in changed or candidate.name == "__init__.py":
                continue
            try:
                tree = ast.parse(candidate.read_bytes())
            except (SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                names: List[str] = []
                if isinstance(node, ast.ImportFrom):
                    names = (node.module or "").split(".") + [a.name for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [part for a in node.names for part in a.name.split(".")]
                if stems & set(names):
                    found.append(candidate)
                    break
    return found


def torch_available() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def verify_group(
    group: Group,
    *,
    factories: Sequence[str] = (),
    kwargs: Optional[Dict[str, Any]] = None,
    input_shape: Optional[Sequence[int]] = None,
    cuda: bool = False,
    quiet: bool = False,
    out=None,
) -> bool:
    """Verify one group; print its report to ``out``.  True if everything passed."""
    out = out if out is not None else sys.stdout
    err = sys.stderr
    changed = sorted(group.new_bytes)
    print(f"verify: {group.label}: rewritten {', '.join(p.name for p in changed) or 'nothing'}", file=out)
    if not torch_available():
        print(f"verify: FAILED: {TORCH_MISSING}", file=out)
        return False
    tmp = Path(tempfile.mkdtemp(prefix="hiera-rewrite-verify-"))
    try:
        sides = {}
        for side in ("orig", "new"):
            base = tmp / side
            dest = base / group.root.name if group.is_package else base
            _copy_tree(group.root, dest, recursive_only_packages=not group.is_package)
            sides[side] = str(base)
            if side == "new":
                for path, data in group.new_bytes.items():
                    (dest / path.relative_to(group.root)).write_bytes(data)

        def copy_of(path: Path, side: str) -> Path:
            rel = path.relative_to(group.root)
            return Path(sides[side]) / (group.root.name if group.is_package else "") / rel

        scan = list(group.targets) + [p for p in _dependents(group.root, group.is_package, changed) if p not in group.targets]
        modules = [
            {"name": module_name(group.root, group.is_package, p), "file": p.name, "primary": p in group.targets}
            for p in scan
        ]
        flat_dirs = sorted({str(p.parent.relative_to(group.root)) for p in group.targets})
        user_factories = []
        for spec in factories:
            mod, _, rest = spec.partition(":")
            func, _, extra = rest.partition(":")
            if not mod or not func:
                raise UsageError(f"--factory {spec!r}: expected MODULE:FUNC or MODULE:FUNC:JSON")
            try:
                own_kwargs = json.loads(extra) if extra else {}
                if not isinstance(own_kwargs, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                raise UsageError(f"--factory {spec!r}: keyword arguments after the second ':' must be a JSON object ({exc})") from None
            if mod.endswith(".py") or os.sep in mod or "/" in mod:
                path = Path(mod).resolve()
                try:
                    mod = module_name(group.root, group.is_package, path)
                except ValueError:
                    raise UsageError(f"--factory {spec!r}: {path} is not inside {group.root}") from None
            user_factories.append({"module": mod, "attr": func, "kwargs": own_kwargs})
        spec = {
            "sides": sides,
            "package": group.root.name if group.is_package else None,
            "flat_dirs": flat_dirs,
            "project_dir": str(group.root.parent if group.is_package else group.root),
            "modules": modules,
            "factories": user_factories,
            "kwargs": kwargs or {},
            "input_shape": list(input_shape) if input_shape else None,
            "configs": [list(CPU_CONFIG)] + ([list(c) for c in CUDA_CONFIGS] if cuda else []),
            "quiet": quiet,
            "report": str(tmp / "report.json"),
        }
        (tmp / "spec.json").write_text(json.dumps(spec))
        boot = (
            "import runpy, sys\n"
            "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
            "sys.dont_write_bytecode = True\n"
            f"runpy.run_path({str(Path(__file__).resolve())!r}, run_name='_hiera_rewrite_verify_worker')\n"
        )
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        # The worker's stdout and stderr (progress, warnings) are relayed line by line to
        # our stderr, so they stream live and also reach a redirected/captured sys.stderr.
        proc = subprocess.Popen(
            [sys.executable, "-c", boot, str(tmp / "spec.json")],
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            err.write(line)
            err.flush()
        proc.wait()
        report_path = tmp / "report.json"
        if not report_path.is_file():
            print(f"verify: FAILED: the verification worker died (exit {proc.returncode}) before reporting", file=out)
            return False
        report = json.loads(report_path.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return print_report(report, out)


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2e}"


def print_report(report: Dict[str, Any], out) -> bool:
    ok = True
    for problem in report.get("errors", []):
        print(f"  FAILED: {problem}", file=out)
        ok = False
    for model in report.get("models", []):
        head = f"model {model['label']}"
        if model.get("input"):
            head += f"  input {tuple(model['input'])}"
        print(head, file=out)
        if model.get("error"):
            print(f"  FAILED: {model['error']}", file=out)
            ok = False
            continue
        rows = [("config", "case", "compared", "shape", "max abs err", "max rel err", "result")]
        for row in model["rows"]:
            rows.append(
                (
                    row["config"],
                    row["case"],
                    row["what"],
                    row["shape"],
                    _fmt(row.get("abs")),
                    _fmt(row.get("rel")),
                    "pass" if row["ok"] else "FAIL" + (f": {row['note']}" if row.get("note") else ""),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        for r in rows:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6], file=out)
        model_ok = all(row["ok"] for row in model["rows"]) and bool(model["rows"])
        ok = ok and model_ok
        print(f"  => {'PASS' if model_ok else 'FAIL'}  ({model.get('seconds', 0):.1f}s)", file=out)
    for note in report.get("notes", []):
        print(f"  note: {note}", file=out)
    if not report.get("models") and not report.get("errors"):
        print("  FAILED: no model found to build; name one with --factory module:function", file=out)
        ok = False
    print(f"verify: {'PASSED' if ok else 'FAILED'}", file=out)
    return ok


def _walk(folder: Path) -> List[str]:
    """The *.py files under a folder, as the plain CLI walks it."""
    from . import cli

    if hasattr(cli, "_python_files"):
        return list(cli._python_files(folder))
    return [str(p) for p in sorted(folder.rglob("*.py")) if p.is_file() and not set(p.parts) & _SKIP_DIRS]


def run_cli(args, codes: List[str]) -> int:
    """``hiera-rewrite --verify PATH...``: rewrite in memory, verify, then write (or just report)."""
    from .cli import EXIT_CHANGED, EXIT_CLEAN, EXIT_ERROR, _process_file, _unified_diff
    from .engine import write_atomic

    exit_code = EXIT_CLEAN
    errors = 0
    try:
        kwargs = json.loads(args.kwargs) if args.kwargs else {}
        if not isinstance(kwargs, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        print(f"hiera-rewrite: --kwargs: {exc}", file=sys.stderr)
        return EXIT_ERROR
    input_shape = None
    if args.input_shape:
        try:
            input_shape = [int(v) for v in args.input_shape.replace("x", ",").split(",") if v.strip()]
        except ValueError:
            print(f"hiera-rewrite: --input-shape {args.input_shape!r}: expected e.g. 2,3,64,64", file=sys.stderr)
            return EXIT_ERROR

    files: List[str] = []
    for name in args.paths:
        path = Path(name)
        if name == "-":
            print("hiera-rewrite: --verify needs files (it imports them with their package), not stdin", file=sys.stderr)
            return EXIT_ERROR
        if path.is_dir():
            files.extend(_walk(path))
        elif path.exists():
            files.append(name)
        else:
            print(f"{name}:1:1: no such file or directory", file=sys.stderr)
            errors += 1
    seen: set = set()
    files = [f for f in files if not (os.path.realpath(f) in seen or seen.add(os.path.realpath(f)))]
    results = []
    for job in [(f, codes, args.line_length, args.traceback) for f in files]:
        name, result, message, tb = _process_file(job)
        if message is not None:
            if tb:
                print(tb, file=sys.stderr, end="")
            print(message, file=sys.stderr)
            errors += 1
            continue
        if not args.quiet:
            for r in result.reports:
                print(f"{name}:{r.line}:{r.col}: {r.code} {r.message}", file=sys.stderr)
        if args.diff and result.changed:
            diff = _unified_diff(name, result)
            if isinstance(diff, bytes):
                sys.stdout.flush()
                sys.stdout.buffer.write(diff)
            else:
                sys.stdout.write(diff)
            sys.stdout.flush()
        results.append((name, result))
    if errors:
        exit_code = EXIT_ERROR

    try:
        groups = group_files(
            [(Path(n), r.output if r.changed else None) for n, r in results],
            Path(args.package_root) if args.package_root else None,
        )
    except ValueError as exc:
        print(f"hiera-rewrite: {exc}", file=sys.stderr)
        return EXIT_ERROR
    report_out = sys.stderr if args.diff else sys.stdout
    passed: set = set()
    failed = False
    for group in groups:
        if not group.new_bytes:
            continue
        try:
            ok = verify_group(
                group,
                factories=args.factory or (),
                kwargs=kwargs,
                input_shape=input_shape,
                cuda=args.verify_cuda,
                quiet=args.quiet,
                out=report_out,
            )
        except UsageError as exc:
            print(f"hiera-rewrite: {exc}", file=sys.stderr)
            return EXIT_ERROR
        if ok:
            passed.update(group.new_bytes)
        else:
            failed = True
    if not any(g.new_bytes for g in groups):
        print("verify: nothing to verify (no file would change)", file=report_out)

    changed = unchanged = 0
    for name, result in results:
        if not result.changed:
            unchanged += 1
            continue
        path = Path(name)
        if args.check or args.diff:
            changed += 1
            continue
        if path.resolve() not in passed:
            print(f"{name}:1:1: not rewritten: verification failed", file=sys.stderr)
            continue
        if not path.stat().st_mode & 0o200:
            print(f"{name}:1:1: file is read-only, not rewritten", file=sys.stderr)
            errors += 1
            exit_code = EXIT_ERROR
            continue
        try:
            write_atomic(path, result.output)
            changed += 1
        except OSError as exc:
            print(f"{name}:1:1: cannot write: {exc.strerror or exc}", file=sys.stderr)
            errors += 1
            exit_code = EXIT_ERROR
    if changed and exit_code == EXIT_CLEAN:
        exit_code = EXIT_CHANGED
    if failed:
        exit_code = EXIT_VERIFY_FAILED
    verb = "would be rewritten" if (args.check or args.diff) else "rewritten"
    parts = [f"{changed} file{'s' if changed != 1 else ''} {verb}", f"{unchanged} unchanged"]
    if failed:
        parts.append("verification FAILED")
    elif passed:
        parts.append("verified")
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''}")
    print("hiera-rewrite: " + ", ".join(parts) + ".", file=sys.stderr)
    return exit_code


# ----------------------------------------------------------------------------------
# Worker side (a fresh subprocess; torch is imported here only)
# ----------------------------------------------------------------------------------

_MODEL_ARGS = {"input_size", "in_chans", "img_size"}


def _init_params(cls) -> set:
    """Parameter names of ``cls.__init__``, also through undecorated wrappers
    (upstream's ``@has_config`` hides the signature behind ``*args, **kwargs``)."""
    import inspect
    import textwrap

    names: set = set()
    try:
        names.update(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        pass
    if "__init__" in vars(cls):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):
            return names
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__init__":
                args = node.args
                names.update(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])
                break
    return names


_SIZE_WORDS = ["nano", "pico", "tiny", "small", "base", "plus", "large", "huge", "giant"]


def _size_rank(name: str) -> int:
    words = name.lower().replace("-", "_").split("_")
    ranks = [_SIZE_WORDS.index(w) for w in words if w in _SIZE_WORDS]
    return max(ranks) if ranks else _SIZE_WORDS.index("base")


class _Worker:
    def __init__(self, spec: Dict[str, Any]) -> None:
        self.spec = spec
        self.report: Dict[str, Any] = {"models": [], "errors": [], "notes": []}
        self.t0 = time.time()

    def progress(self, message: str) -> None:
        if not self.spec["quiet"]:
            print(f"verify: [{time.time() - self.t0:5.1f}s] {message}", file=sys.stderr, flush=True)

    # -- import machinery ----------------------------------------------------------

    def enter(self, side: str) -> None:
        base = self.spec["sides"][side]
        pkg = self.spec["package"]
        entries = [base]
        for rel in self.spec["flat_dirs"]:
            entry = os.path.normpath(os.path.join(base, pkg or "", rel))
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
            locations = [getattr(mod, "__file__", None)] + list(getattr(mod, "__path__", []) or [])
            for loc in locations:
                if isinstance(loc, str):
                    real = os.path.realpath(loc)
                    if any(real == r or real.startswith(r + os.sep) for r in roots):
                        return True
            return False

        for name in list(sys.modules):
            if name in self.before:
                continue
            mod = sys.modules.get(name)
            if mod is None or inside(mod):
                del sys.modules[name]
        for entry in self.path_entries:
            while entry in sys.path:
                sys.path.remove(entry)
        importlib.invalidate_caches()

    # -- discovery (original side) ---------------------------------------------------

    def discover(self, torch) -> List[Dict[str, Any]]:
        nn = torch.nn
        if self.spec["factories"]:
            return [
                {"module": f["module"], "attr": f["attr"], "label": f"{f['module']}:{f['attr']}", "pins_size": False, "kwargs": f["kwargs"]}
                for f in self.spec["factories"]
            ]

        def model_like(obj) -> bool:
            if not (isinstance(obj, type) and issubclass(obj, nn.Module)) or obj is nn.Module:
                return False
            return bool(_MODEL_ARGS & _init_params(obj))

        factories: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
        classes: List[Tuple[Any, str, bool]] = []  # (class, module name, primary)
        scanned: set = set()

        def scan(mod_name: str, primary: bool) -> None:
            if mod_name in scanned:
                return
            scanned.add(mod_name)
            try:
                module = importlib.import_module(mod_name)
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                self.report["errors"].append(f"cannot import {mod_name}: {type(exc).__name__}: {exc}")
                return
            source_file = getattr(module, "__file__", None)
            if not source_file:
                return
            tree = ast.parse(Path(source_file).read_bytes())
            funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

            def built(fn_name: str, depth: int = 0) -> Tuple[Any, bool]:
                node = funcs.get(fn_name)
                if node is None or depth > 5:
                    return None, False
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Call):
                        call = sub.value
                        pins = any(k.arg == "input_size" for k in call.keywords)
                        target = call.func
                        dotted = []
                        while isinstance(target, ast.Attribute):
                            dotted.insert(0, target.attr)
                            target = target.value
                        if not isinstance(target, ast.Name):
                            continue
                        obj = module.__dict__.get(target.id)
                        for attr in dotted:
                            obj = getattr(obj, attr, None)
                        if isinstance(obj, type) and model_like(obj):
                            return obj, pins
                        if not dotted and target.id in funcs:
                            cls, deeper = built(target.id, depth + 1)
                            if cls is not None:
                                return cls, pins or deeper
                return None, False

            for order, name in enumerate(funcs):
                if name.startswith("_"):
                    continue
                cls, pins = built(name)
                if cls is not None:
                    key = (cls.__module__, cls.__qualname__)
                    factories.setdefault(key, []).append(
                        {"module": mod_name, "attr": name, "label": f"{mod_name}:{name}", "pins_size": pins, "order": order, "class": cls.__name__}
                    )
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    obj = module.__dict__.get(node.name)
                    if model_like(obj) and obj.__module__ == module.__name__:
                        classes.append((obj, mod_name, primary))

        for mod in self.spec["modules"]:
            scan(mod["name"], True)
        # model-like base classes (an MAE's encoder) are verified too: scan their modules
        for cls, _, _ in list(classes):
            for base in cls.__mro__[1:]:
                if model_like(base) and base.__module__ in sys.modules and base.__module__ not in scanned:
                    mod = sys.modules[base.__module__]
                    if self._in_tree(mod):
                        scan(base.__module__, False)
        chosen: List[Dict[str, Any]] = []
        seen: set = set()
        wanted: List[Any] = []
        for cls, _, _ in classes:
            for c in [cls, *cls.__mro__[1:]]:
                if model_like(c) and c not in wanted and self._in_tree(sys.modules.get(c.__module__)):
                    wanted.append(c)
        for cls in wanted:
            key = (cls.__module__, cls.__qualname__)
            if key in seen:
                continue
            seen.add(key)
            options = factories.get(key, [])
            if options:
                best = min(options, key=lambda f: (f["pins_size"], _size_rank(f["attr"]), f["order"]))
                best = dict(best)
                best["label"] = f"{best['label']} -> {cls.__name__}"
                chosen.append(best)
            else:
                chosen.append({"module": cls.__module__, "attr": cls.__qualname__, "label": f"{cls.__module__}:{cls.__qualname__} (class, default arguments)", "pins_size": False})
        return chosen

    def _in_tree(self, module) -> bool:
        loc = getattr(module, "__file__", None) if module is not None else None
        if not isinstance(loc, str):
            return False
        real = os.path.realpath(loc)
        return any(real.startswith(os.path.realpath(p) + os.sep) for p in self.path_entries[:-1])

    # -- building ------------------------------------------------------------------------

    @staticmethod
    def _resolve(item: Dict[str, Any]):
        module = importlib.import_module(item["module"])
        obj: Any = module
        for part in item["attr"].split("."):
            obj = getattr(obj, part)
        return obj

    @staticmethod
    def _small_input_size(model) -> Optional[List[int]]:
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
    def _in_chans(model, torch) -> int:
        for mod in model.modules():
            if isinstance(mod, torch.nn.modules.conv._ConvNd):
                return int(mod.in_channels)
        return 3

    def build(self, item: Dict[str, Any], torch, kwargs: Dict[str, Any]):
        ctor = self._resolve(item)
        torch.manual_seed(0)
        return ctor(**kwargs)

    def plan_model(self, item: Dict[str, Any], torch) -> Dict[str, Any]:
        """Original side: choose kwargs and inputs, build, keep the float32 weights."""
        kwargs = dict(self.spec["kwargs"], **item.get("kwargs", {}))
        self.progress(f"building {item['label']} (original)")
        model = self.build(item, torch, kwargs)
        if "input_size" not in kwargs and not self.spec["input_shape"]:
            small = self._small_input_size(model)
            current = None
            if small is not None:
                current = [int(t) * int(p) for t, p in zip(model.tokens_spatial_shape, model.patch_stride)]
            if small is not None and small != current:
                try:
                    model = self.build(item, torch, dict(kwargs, input_size=tuple(small)))
                    kwargs["input_size"] = tuple(small)
                except TypeError as exc:
                    self.report["notes"].append(f"{item['label']}: cannot shrink input_size ({exc}); verifying at full size (slow)")
                    model = self.build(item, torch, kwargs)
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
            shape = [2, self._in_chans(model, torch), *[int(s) for s in size]]
        return {"item": item, "kwargs": kwargs, "shape": shape, "model": model}

    @staticmethod
    def cases(model, x, torch) -> List[Tuple[str, Dict[str, Any]]]:
        import inspect

        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):
            params = {}
        cases: List[Tuple[str, Dict[str, Any]]] = [("forward(x)", {})]
        if "mask" in params and hasattr(model, "get_random_mask") and "mask_ratio" not in params:
            # (a model that takes mask_ratio draws its own mask in forward(x): covered above)
            gen_state = torch.random.get_rng_state()
            torch.manual_seed(2)
            try:
                mask = model.get_random_mask(x, 0.5)
            except Exception:  # noqa: BLE001
                mask = None
            torch.random.set_rng_state(gen_state)
            if mask is not None:
                kw: Dict[str, Any] = {"mask": mask}
                label = "forward(x, mask"
                if "return_intermediates" in params:
                    kw["return_intermediates"] = True
                    label += ", return_intermediates=True"
                cases.append((label + ")", kw))
        elif "return_intermediates" in params:
            cases.append(("forward(x, return_intermediates=True)", {"return_intermediates": True}))
        return cases

    # -- running -------------------------------------------------------------------------

    @staticmethod
    def _flatten(value, prefix="out"):
        if isinstance(value, (tuple, list)):
            out = []
            for i, v in enumerate(value):
                out.extend(_Worker._flatten(v, f"{prefix}[{i}]"))
            return out
        if isinstance(value, dict):
            out = []
            for k in sorted(value, key=str):
                out.extend(_Worker._flatten(value[k], f"{prefix}[{k!r}]"))
            return out
        return [(prefix, value)]

    def run_case(self, model, x, kw, torch):
        model.zero_grad(set_to_none=True)
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

    # -- main ----------------------------------------------------------------------------

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

        # original side: discover, build, run
        self.enter("orig")
        plans = []
        try:
            items = self.discover(torch)
            for item in items:
                t0 = time.time()
                try:
                    plan = self.plan_model(item, torch)
                except Exception as exc:  # noqa: BLE001
                    self.report["models"].append({"label": item["label"], "error": f"cannot build the original: {type(exc).__name__}: {exc}"})
                    continue
                model = plan.pop("model")
                plan["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
                plan["runs"] = {}
                plan["seconds"] = time.time() - t0
                gen = torch.Generator().manual_seed(3)
                x_cpu = torch.randn(*plan["shape"], generator=gen, dtype=torch.float64)
                plan["x"] = x_cpu
                try:
                    for device, dtype, tol, cname in configs:
                        model.to(device=device, dtype=dtype)
                        x = x_cpu.to(device=device, dtype=dtype)
                        case_list = self.cases(model, x, torch)
                        for label, kw in case_list:
                            self.progress(f"running {item['label']} {label} [{cname}] (original)")
                            plan["runs"][(cname, label)] = (kw, self.run_case(model, x, kw, torch))
                except Exception as exc:  # noqa: BLE001
                    self.report["models"].append({"label": item["label"], "error": f"the original model raised: {type(exc).__name__}: {exc}"})
                    continue
                finally:
                    del model
                plans.append(plan)
        finally:
            self.leave()

        # rewritten side: same names, fresh modules
        ref_name = configs[0][3] if configs else None
        self.enter("new")
        try:
            for plan in plans:
                item = plan["item"]
                entry = {"label": item["label"], "input": plan["shape"], "rows": []}
                t0 = time.time()
                self.report["models"].append(entry)
                try:
                    self.progress(f"building {item['label']} (rewritten)")
                    model = self.build(item, torch, plan["kwargs"])
                    new_state = model.state_dict()
                    keys_a, keys_b = list(plan["state"]), list(new_state)
                    same = keys_a == keys_b and all(plan["state"][k].shape == new_state[k].shape for k in keys_a)
                    note = "" if same else f"missing {sorted(set(keys_a) - set(keys_b))[:3]}, unexpected {sorted(set(keys_b) - set(keys_a))[:3]}"
                    if same and keys_a != keys_b:
                        note = "different order"
                    entry["rows"].append({"config": "-", "case": "state_dict", "what": f"{len(keys_a)} tensors", "shape": "same names, shapes" if same else "differs", "ok": same, "note": note})
                    if not same:
                        continue
                    for device, dtype, tol, cname in configs:
                        model.load_state_dict(plan["state"])
                        model.to(device=device, dtype=dtype)
                        x = plan["x"].to(device=device, dtype=dtype)
                        for (cfg, label), (kw, (outs_a, grads_a)) in plan["runs"].items():
                            if cfg != cname:
                                continue
                            self.progress(f"running {item['label']} {label} [{cname}] (rewritten)")
                            kw_b = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in kw.items()}
                            try:
                                outs_b, grads_b = self.run_case(model, x, kw_b, torch)
                            except Exception as exc:  # noqa: BLE001
                                entry["rows"].append({"config": cname, "case": label, "what": "forward/backward", "shape": "-", "ok": False, "note": f"the rewritten model raised {type(exc).__name__}: {exc}"})
                                continue
                            ref = None
                            if cname != ref_name:  # lower precision: judged by accuracy vs float64
                                ref = plan["runs"].get((ref_name, label), (None, None))[1]
                            entry["rows"].extend(self.compare(cname, label, outs_a, grads_a, outs_b, grads_b, tol, torch, ref=ref))
                    del model
                except Exception as exc:  # noqa: BLE001
                    entry["error"] = f"cannot build the rewritten model: {type(exc).__name__}: {exc}"
                finally:
                    entry["seconds"] = plan["seconds"] + time.time() - t0
                    plan.clear()
        finally:
            self.leave()


def _worker_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    worker = _Worker(spec)
    try:
        worker.run()
    except Exception as exc:  # noqa: BLE001 -- report, never hide
        import traceback

        worker.report["errors"].append(f"verification crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    Path(spec["report"]).write_text(json.dumps(worker.report))


if __name__ == "_hiera_rewrite_verify_worker":
    _worker_main(sys.argv[1])
