"""``--verify``: prove a rewrite on the user's own files before anything is written.

The verdict is *site coverage*: every rewritten site (each applied ``path:line CODE``
report) must be run, on both sides, by at least one compared case, and every
compared output and gradient must be equal (float64 on CPU).  A site no case ran is
"not proven" (exit 3, with the class/function holding it and the flag that would
reach it); a build or import failure is only a note unless it leaves a site unproven.

How the two trees are imported
-------------------------------
The files are grouped by *import root* (``verify_layout``: regular packages,
namespace packages, repo-root absolute imports).  For each group the top-level
folders of the root holding the targets are copied twice into a fresh temp dir
(``TMP/orig/...``, ``TMP/new/...``, same names; ``__pycache__``, VCS folders and
files over 8 MB are not copied) and the rewritten bytes go into the ``new`` copy.
Both sides are imported in one fresh subprocess (``verify_worker``), one after the
other under the same module names, with bytecode writing off; the user's own import
root comes last on ``sys.path`` for the rest of the repo (read only).  The user's
files are only read; the temp dir is removed.

The torch-free CLI imports this module; torch is imported only in the worker.
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
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from .files import expand_paths, process_file, unified_diff, write_checked
from .verify_layout import Group, group_files
from .verify_sites import regions_run, sites_of

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

_SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".tox", ".venv", "venv", "node_modules", "site-packages"}
_MAX_COPY_BYTES = 8 * 1024 * 1024
_SOURCE_SUFFIXES = {".py", ".json", ".yaml", ".yml", ".txt", ".cfg", ".toml"}
_WORKER = Path(__file__).with_name("verify_worker.py")


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
    bench: Optional[Dict[str, Any]] = None,
    quiet: bool = False,
    out=None,
) -> bool:
    """Verify one group; print its report to ``out``.  True if every site is proven."""
    out = out if out is not None else sys.stdout
    changed = sorted(group.results)
    print(f"verify: {group.label}: rewritten {', '.join(p.name for p in changed) or 'nothing'}", file=out)
    if not torch_available():
        print(f"verify: FAILED: {TORCH_MISSING}", file=out)
        return False
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
            "flat_dirs": sorted({str(group.rel(p).parent) for p in group.targets}),
            "project_dir": str(group.root),
            "modules": [{"name": group.module(p), "primary": p in group.targets} for p in scan],
            "traced": {side: {copy_of(p, side): group.names[p] for p in changed} for side in sides},
            "sites": sites,
            "factories": user_factories,
            "kwargs": kwargs or {},
            "input_shape": list(input_shape) if input_shape else None,
            "configs": [list(CPU_CONFIG)] + ([list(c) for c in CUDA_CONFIGS] if cuda else []),
            "quiet": quiet,
            "bench": bench if cuda else None,
            "report": str(tmp / "report.json"),
        }
        (tmp / "spec.json").write_text(json.dumps(spec))
        boot = (
            "import runpy, sys\n"
            "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
            "sys.dont_write_bytecode = True\n"
            f"runpy.run_path({str(_WORKER.resolve())!r}, run_name='_hiera_rewrite_verify_worker')\n"
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
            print(f"verify: FAILED: the verification worker died (exit {proc.returncode}) before reporting", file=out)
            return False
        report = json.loads(report_path.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return print_report(report, sites, out)


# -- report ------------------------------------------------------------------------------


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2e}"


def _table(rows: List[Tuple[str, ...]], out, indent: str = "  ") -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1], file=out)


def site_verdicts(report: Dict[str, Any], sites: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per site: the cases that ran it on both sides, whether all its regions ran,
    and whether those cases' comparisons passed."""
    case_ok: Dict[Tuple[str, str], bool] = {}
    for model in report.get("models", []):
        for row in model.get("rows", []):
            key = (model["label"], "build" if row["case"] == "state_dict" else row["case"])
            case_ok[key] = case_ok.get(key, True) and row["ok"]
    verdicts = []
    for site in sites:
        required = [r for r in site["regions"] if r["orig_stmts"] or r["new_stmts"]]
        seen = [False] * len(required)
        cases: List[Tuple[str, str]] = []
        new_lines: Set[int] = set()
        for cov in report.get("coverage", []):
            key = (cov["model"], cov["case"])
            if key not in case_ok:  # not compared (the rewritten side failed to build)
                continue
            orig = set(cov["orig"].get(site["path"], ()))
            new = set(cov["new"].get(site["path"], ()))
            hits = regions_run(site, orig, new)
            if any(hits):
                cases.append(key)
                seen = [a or b for a, b in zip(seen, hits)]
                new_lines |= new
        stmts = sorted({s for r in required for s in r["new_stmts"]})
        run_stmts = sum(1 for lo, hi in stmts if any(line in new_lines for line in range(lo, hi + 1)))
        verdicts.append(
            {
                "site": site,
                "cases": cases,
                "exercised": bool(required) and all(seen),
                "definition_only": not required,
                "ok": all(case_ok[c] for c in cases),
                "stmts": (run_stmts, len(stmts)),
            }
        )
    return verdicts


def _hint(site: Dict[str, Any], report: Dict[str, Any]) -> str:
    """Why no case reached the site, and the flag that would."""
    owner_class = site.get("owner_class")
    module = site.get("module") or "MODULE"
    if not owner_class:
        return f"no model built here calls {site['owner']}; name one that does with --factory MODULE:FUNC[:JSON]"
    unimported = [i for i in report.get("imports", []) if i["module"] == site.get("module")]
    if unimported:
        return f"cannot import {unimported[0]['module']}: {unimported[0]['error']}"
    contains = report.get("contains", {})
    # the class's own builds and those of the models that would hold it
    why = [f for f in report.get("failures", []) if f.get("class") == owner_class or owner_class in contains.get(f.get("class"), ())]
    reason = "; ".join(f"{f['label']}: {f['error']}" for f in why[:2])
    missing = [f.get("missing") for f in why if f.get("missing")]
    if missing:
        text = f"give the missing argument: --kwargs '{json.dumps({m: '...' for m in missing[0]})}' (given to every build that takes it)"
    else:
        text = f"reach it with --factory {module}:{owner_class}:'{{...}}' (or a factory of a model holding it), --kwargs JSON or --input-shape B,C,..."
    return (f"{reason}; " if reason else "") + text


def print_report(report: Dict[str, Any], sites: List[Dict[str, Any]], out) -> bool:
    ok = True
    for problem in report.get("errors", []):
        print(f"  FAILED: {problem}", file=out)
        ok = False
    for model in report.get("models", []):
        head = f"model {model['label']}"
        if model.get("input"):
            head += f"  input {tuple(model['input'])}"
        print(head, file=out)
        for note in model.get("notes", []):
            print(f"  {note}", file=out)
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
        _table(rows, out)
        model_ok = all(row["ok"] for row in model["rows"]) and bool(model["rows"])
        ok = ok and model_ok
        print(f"  => {'PASS' if model_ok else 'FAIL'}  ({model.get('seconds', 0):.1f}s)", file=out)
    for timing in report.get("timing", []):
        for line in timing["lines"]:
            print(line, file=out)
    for failure in report.get("failures", []):
        print(f"not built: {failure['label']}: {failure['error']}", file=out)
    for note in report.get("notes", []):
        print(f"  note: {note}", file=out)

    verdicts = site_verdicts(report, sites)
    unproven = [v for v in verdicts if not v["exercised"] and not v["definition_only"]]
    if verdicts:
        print("sites", file=out)
        rows = [("site", "code", "in", "exercised by", "lines run", "result")]
        for v in verdicts:
            s = v["site"]
            cases = [f"{m.split(' ')[0]} {c}" for m, c in v["cases"]]
            by = cases[0] + (f" (+{len(cases) - 1})" if len(cases) > 1 else "") if cases else "-"
            if v["definition_only"]:
                result = "pass (definition only)" if v["ok"] else "FAIL"
            elif not v["exercised"]:
                result = "NOT PROVEN: " + ("only part of it ran" if cases else "no compared case ran it")
            else:
                result = "pass" if v["ok"] else "FAIL: a comparison of a case that ran it differs"
            ran, total = v["stmts"]
            rows.append((f"{s['path']}:{s['line']}", s["code"], s["owner"], by, f"{ran}/{total}", result))
        _table(rows, out)
        for v in unproven:
            s = v["site"]
            print(f"not proven: {s['path']}:{s['line']}:{s['col']} {s['code']} in {s['owner']}: {_hint(s, report)}", file=out)
    failed_sites = [v for v in verdicts if v["exercised"] and not v["ok"]]
    if failed_sites:
        ok = False
    missing = sorted({i["error"] for i in report.get("imports", []) if i["missing"]})
    if not report.get("models") and not report.get("errors") and not missing:
        print("  FAILED: no model could be built; name one with --factory module:function", file=out)
        ok = False
    proven = sum(1 for v in verdicts if v["exercised"] or v["definition_only"])
    tally = f"{proven}/{len(verdicts)} sites exercised"
    if ok and not unproven:
        print(f"verify: PASSED ({tally}, every comparison equal)", file=out)
        return True
    if ok and missing:  # not a mismatch: install what the files import, then verify again
        print(f"verify: NOT PROVEN ({tally}; {'; '.join(missing)})", file=out)
    elif ok:
        print(f"verify: NOT PROVEN ({tally}; {len(unproven)} never ran in a compared case)", file=out)
    else:
        print(f"verify: FAILED ({tally})", file=out)
    return False


# -- CLI -----------------------------------------------------------------------------------


def run_cli(args, codes: List[str]) -> int:
    """``hiera-rewrite --verify PATH...``: rewrite in memory, verify, then write (or just report)."""
    from .cli import EXIT_CHANGED, EXIT_CLEAN, EXIT_ERROR

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
    bench = {"batch": args.bench_batch}
    if args.bench_size:
        try:
            bench["size"] = [int(v) for v in args.bench_size.replace("x", ",").split(",") if v.strip()]
        except ValueError:
            print(f"hiera-rewrite: --bench-size {args.bench_size!r}: expected e.g. 224,224 or 16,224,224", file=sys.stderr)
            return EXIT_ERROR
    if "-" in args.paths:
        print("hiera-rewrite: --verify needs files (it imports them with their package), not stdin", file=sys.stderr)
        return EXIT_ERROR

    files, missing = expand_paths(args.paths)
    errors = len(missing)
    for message in missing:
        print(message, file=sys.stderr)
    results = []
    for f in files:
        name, result, message, tb = process_file((f, codes, args.line_length, args.traceback))
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
            sys.stdout.flush()
            sys.stdout.buffer.write(unified_diff(name, result))
            sys.stdout.flush()
        results.append((name, result))

    try:
        groups = group_files(
            [(n, r if r.changed else None) for n, r in results],
            Path(args.package_root) if args.package_root else None,
        )
    except ValueError as exc:
        print(f"hiera-rewrite: {exc}", file=sys.stderr)
        return EXIT_ERROR
    report_out = sys.stderr if args.diff else sys.stdout
    passed: set = set()
    failed = False
    for group in groups:
        if not group.results:
            continue
        try:
            ok = verify_group(
                group,
                factories=args.factory or (),
                kwargs=kwargs,
                input_shape=input_shape,
                cuda=args.verify_cuda,
                bench=bench,
                quiet=args.quiet,
                out=report_out,
            )
        except UsageError as exc:
            print(f"hiera-rewrite: {exc}", file=sys.stderr)
            return EXIT_ERROR
        if ok:
            passed.update(group.results)
        else:
            failed = True
    if not any(g.results for g in groups):
        print("verify: nothing to verify (no file would change)", file=report_out)

    changed = unchanged = 0
    for name, result in results:
        if not result.changed:
            unchanged += 1
            continue
        if args.check or args.diff:
            changed += 1
        elif Path(name).resolve() not in passed:
            print(f"{name}:1:1: not rewritten: verification failed", file=sys.stderr)
        else:
            problem = write_checked(name, result.output)
            if problem is None:
                changed += 1
            else:
                print(problem, file=sys.stderr)
                errors += 1
    exit_code = EXIT_ERROR if errors else (EXIT_CHANGED if changed else EXIT_CLEAN)
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
