"""Run one ``--verify`` group: copy both trees, start the worker, read its report.

How the two trees are imported
-------------------------------
The files are grouped by *import root* (:mod:`.layout`: regular packages, namespace
packages, repo-root absolute imports, installed-package layouts).  For each group the
folders of the root holding the targets are copied twice into a fresh temp dir
(``TMP/orig/...``, ``TMP/new/...``, same names; ``__pycache__``, VCS folders and files
over 8 MB are not copied) and the rewritten bytes go into the ``new`` copy.  Both sides
are imported in one fresh subprocess (:mod:`.worker`), one after the other under the
same module names, with bytecode writing off; the user's own import root comes last on
``sys.path`` for the rest of the repo (read only).  The user's files are only read; the
temp dir is removed.

Torch-free: torch is imported only in the worker.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .layout import Group, relative_imports
from .report import FAILED, NOT_PROVEN, print_report
from .sites import sites_of

INSTALL_HINT = "pip install 'hiera-rewrite[verify]'"
TORCH_MISSING = f"--verify needs torch, which is not installed here: {INSTALL_HINT}"

# (device, dtype, tolerance).  float64: max|a-b| / max|a| <= 1e-9 between the two
# sides.  Lower precisions (--verify-dtype, --verify-cuda) run different kernels on each
# side (that is the point of the rewrite; SDPA dispatches by dtype and device), so their
# difference is rounding noise, not a verdict; there the rewritten model must be about
# as accurate as the original, both measured against the original's float64 result on
# the same device (the same random draws: a MAE's mask drawn on CUDA is not CPU's), errors
# relative to the reference's largest magnitude:
#     err_new <= 2 * err_orig + ULPS * eps(dtype)
# ULPS = 8: each tensor's error is an extreme value (the largest over the tensor), so two
# equally accurate computations differ by a few eps where the original happens to be
# lucky on a small tensor.  Measured on upstream's models, a correct rewrite needed (error
# over twice the original's) up to 5.5 eps in float32 and 4.2 eps in bfloat16 on a
# device machine's CPU (torch 2.11: blocks.0.norm1.weight's gradient 1.5e-6 vs the
# original's 4.3e-7; blocks.1.attn.qkv.weight's 6.0e-2 vs 1.4e-2), 2.2 and 2.0 eps on
# an H200 (torch 2.11), 0.5 and 0.9 eps on this project's CPU (torch 2.14).  The floor
# is 9.5e-7 in float32 (1e-5 before), 7.8e-3 in float16 and 6.3e-2 in bfloat16 (1e-2
# before, which a correct rewrite overran on the H200 and on that CPU); the failures it
# is there to catch (a misread mask, a wrong layout) are of order 0.1-1, or NaN.
CPU_CONFIG = ("cpu", "float64", 1e-9)
# torch.finfo(dtype).eps, torch-free (tests check them against torch)
EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}
ULPS = 8
LOW_DTYPES = ("bfloat16", "float16", "float32")
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


def parse_verify_dtypes(text: str) -> List[str]:
    """``--verify-dtype``'s comma list (bf16, fp16/half, fp32 taken for the full names),
    in the order given, each once; a ValueError naming the valid dtypes for anything else."""
    valid = ", ".join(LOW_DTYPES)
    dtypes: List[str] = []
    for part in text.split(","):
        name = part.strip().lower().removeprefix("torch.")
        name = _DTYPE_ALIASES.get(name, name)
        if not name:
            continue
        if name == "float64":
            raise ValueError(f"float64 is the reference and always runs (on CPU): expected a comma list of {valid}")
        if name not in LOW_DTYPES:
            raise ValueError(f"unknown dtype {part.strip()!r}: expected a comma list of {valid}")
        if name not in dtypes:
            dtypes.append(name)
    if not dtypes:
        raise ValueError(f"no dtype given: expected a comma list of {valid}")
    return dtypes


def verify_configs(cuda: bool = False, dtypes: Optional[Sequence[str]] = None) -> List[Tuple[str, str, float]]:
    """The configurations one verification runs, the reference first: float64 on CPU;
    with ``cuda``, float64 (the reference of the CUDA rows), float32 and ``dtypes``
    (default bfloat16) on CUDA; without, ``dtypes`` on CPU (none by default).  The same
    cases, compared the same way, on either device."""
    if cuda:
        lower = ["float32"] + [d for d in (dtypes or ["bfloat16"]) if d != "float32"]
        return [CPU_CONFIG, ("cuda", "float64", CPU_CONFIG[2])] + [("cuda", d, ULPS * EPS[d]) for d in lower]
    return [CPU_CONFIG] + [("cpu", d, ULPS * EPS[d]) for d in dtypes or []]

_SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".tox", ".venv", "venv", "node_modules", "site-packages"}
_MAX_COPY_BYTES = 8 * 1024 * 1024
_SOURCE_SUFFIXES = {".py", ".json", ".yaml", ".yml", ".txt", ".cfg", ".toml"}
_PACKAGE = Path(__file__).resolve().parent.parent  # hiera_rewrite/, loaded in the worker by path


class UsageError(ValueError):
    """A bad --factory/--package-root: exit 2."""


def _copy_tree(src: Path, dst: Path, only_py_and_packages: bool, sources_only: bool = False) -> None:
    """Copy a folder (``only_py_and_packages``: its .py files and regular packages;
    ``sources_only``: .py and small config files at any depth, for a whole repo)."""
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        if entry.is_symlink() and not entry.exists():
            continue
        if entry.is_dir():
            if entry.name in _SKIP_DIRS or entry.name.startswith("."):
                continue
            if only_py_and_packages and not (entry / "__init__.py").is_file():
                continue
            _copy_tree(entry, dst / entry.name, False, sources_only)
        elif entry.is_file():
            if only_py_and_packages and entry.suffix != ".py":
                continue
            if sources_only and entry.suffix not in _SOURCE_SUFFIXES:
                continue
            if entry.suffix in (".pyc", ".pyo") or entry.stat().st_size > _MAX_COPY_BYTES:
                continue
            shutil.copyfile(entry, dst / entry.name)


def _dependents(changed: List[Path]) -> List[Path]:
    """Python files beside a changed file whose imports name that file's module."""
    stems = {p.stem for p in changed}
    found: List[Path] = []
    for folder in sorted({p.parent for p in changed}):
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
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def _user_factories(group: Group, factories: Sequence[str]) -> List[Dict[str, Any]]:
    out = []
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
                mod = group.module(path)
            except ValueError:
                raise UsageError(f"--factory {spec!r}: {path} is not inside the import root {group.root}") from None
        out.append({"module": mod, "attr": func, "kwargs": own_kwargs})
    return out


def verify_group(
    group: Group,
    *,
    factories: Sequence[str] = (),
    kwargs: Optional[Dict[str, Any]] = None,
    input_shape: Optional[Sequence[int]] = None,
    cuda: bool = False,
    dtypes: Optional[Sequence[str]] = None,
    bench: Optional[Dict[str, Any]] = None,
    quiet: bool = False,
    budget: Optional[Dict[str, float]] = None,
    graph_report: bool = True,
    out=None,
) -> str:
    """Verify one group; print its report to ``out``.  Its verdict (verify.report's
    PASSED, NOT_PROVEN, FAILED)."""
    out = out if out is not None else sys.stdout
    changed = sorted(group.results)
    print(f"verify: {group.label}: rewritten {', '.join(p.name for p in changed) or 'nothing'}", file=out)
    if not torch_available():
        print(f"verify: FAILED: {TORCH_MISSING}", file=out)
        return FAILED
    user_factories = _user_factories(group, factories)
    sites = []
    for path in changed:
        result = group.results[path]
        for site in sites_of(group.names[path], result.source, result.output, result.reports):
            sites.append(dict(site.to_json(), module=group.module(path)))
    tmp = Path(tempfile.mkdtemp(prefix="hiera-rewrite-verify-"))
    try:
        sides: Dict[str, str] = {}
        for side in ("orig", "new"):
            base = tmp / side
            for folder, name, only_py in group.copies():
                _copy_tree(folder, base / name, only_py_and_packages=only_py, sources_only=bool(group.layout.alias))
            sides[side] = str(base)
            if side == "new":
                for path, result in group.results.items():
                    (base / group.rel(path)).write_bytes(result.output)

        def copy_of(path: Path, side: str) -> str:
            return str(Path(sides[side]) / group.rel(path))

        scan = list(group.targets) + [p for p in _dependents(changed) if p not in group.targets]
        spec = {
            "sides": sides,
            # a folder of plain files goes on the path too (their bare `import hiera_utils`),
            # a package's own folder never: Python imports from the root, and a repo module
            # named like a library (a `transformers.py` beside the model) must not shadow it
            # (a folder whose files import each other relatively is a namespace package: not it
            # either, or `hiera.py` in it would also be a top-level `hiera`)
            "flat_dirs": sorted({str(group.rel(p).parent) for p in group.targets if not (p.parent / "__init__.py").is_file() and not relative_imports(p.parent)}),
            "project_dir": str(group.root),
            "targets": [str(p) for p in group.targets],
            "modules": [{"name": group.module(p), "primary": p in group.targets} for p in scan],
            "traced": {side: {copy_of(p, side): group.names[p] for p in changed} for side in sides},
            "sites": sites,
            "factories": user_factories,
            "kwargs": kwargs or {},
            "input_shape": list(input_shape) if input_shape else None,
            "configs": [list(c) for c in verify_configs(cuda, dtypes)],
            "quiet": quiet,
            "bench": bench if cuda else None,
            "budget": budget or {},
            "graph_report": graph_report,
            "report": str(tmp / "report.json"),
        }
        (tmp / "spec.json").write_text(json.dumps(spec))
        # The worker is this package's own copy, loaded by path: nothing is added to
        # sys.path (a user's module must not be shadowed by ours, nor ours by theirs).
        boot = (
            "import importlib.util, runpy, sys\n"
            "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
            "sys.dont_write_bytecode = True\n"
            f"spec = importlib.util.spec_from_file_location('hiera_rewrite', {str(_PACKAGE / '__init__.py')!r}, submodule_search_locations=[{str(_PACKAGE)!r}])\n"
            "package = importlib.util.module_from_spec(spec)\n"
            "sys.modules['hiera_rewrite'] = package\n"
            "spec.loader.exec_module(package)\n"
            "runpy.run_module('hiera_rewrite.verify.worker', run_name='__main__', alter_sys=True)\n"
        )
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        # The worker's output (progress, warnings) is relayed line by line to our
        # stderr, so it streams live and also reaches a redirected sys.stderr.
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
            sys.stderr.write(line)
            sys.stderr.flush()
        proc.wait()
        report_path = tmp / "report.json"
        if not report_path.is_file():
            killed = " (killed by the OS: most likely out of memory)" if proc.returncode == -9 else ""
            print(
                f"verify: {NOT_PROVEN}: the verification worker died (exit {proc.returncode}{killed}) before reporting; "
                "build the models smaller with --factory MODULE:FUNC:JSON / --kwargs JSON, or lower --verify-budget",
                file=out,
            )
            return NOT_PROVEN
        report = json.loads(report_path.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return print_report(report, sites, out)
