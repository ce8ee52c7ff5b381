"""``hiera-rewrite --verify PATH...``: rewrite in memory, verify each group, then write
(or only report with ``--check``/``--diff``).  The file layer (walk, diff, checked
atomic write) is :mod:`hiera_rewrite.files`, shared with the CLI."""

from __future__ import annotations

import hashlib
import os
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional

from ..exit_codes import EXIT_CHANGED, EXIT_CLEAN, EXIT_ERROR, EXIT_VERIFY_FAILED
from ..files import expand_paths, process_file, replan_with_siblings, unified_diff, write_checked, write_order
from .layout import group_files, repo_root
from .report import FAILED, NOT_PROVEN, PASSED
from .runner import UsageError, verify_group

_MAX_COPY_FILES = 2000


def copy_fingerprint(group) -> Optional[str]:
    """What a group's verification reads of its own, hashed: the repo it lies in (whose
    scripts and configs give values), and each folder copied for it -- its Python files'
    paths below the folder and bytes -- and the rewritten outputs; None where the copy is
    the import root's own files (a layout without a package folder) or too large to hash."""
    h = hashlib.sha256(str(repo_root(group.root / "_")).encode())
    count = 0
    for folder, name, only_py in group.copies():
        if only_py or not folder.is_dir():
            return None
        h.update(f"\0{name}".encode())
        for path in sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts):
            count += 1
            if count > _MAX_COPY_FILES:
                return None
            h.update(f"\0{path.relative_to(folder)}\0".encode() + path.read_bytes())
    for path in sorted(group.results):
        h.update(f"\0{group.rel(path)}\0".encode() + group.results[path].output)
    return h.hexdigest()


def run_cli(args, codes: List[str]) -> int:
    """``hiera-rewrite --verify PATH...``: rewrite in memory, verify, then write (or just report)."""
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
    bench = {"batch": 16 if args.bench_batch is None else args.bench_batch}
    if getattr(args, "bench_modes", None):  # parsed by the CLI (verify.cuda.parse_bench_modes)
        bench["modes"] = list(args.bench_modes)
    if args.bench_size:
        try:
            bench["size"] = [int(v) for v in args.bench_size.replace("x", ",").split(",") if v.strip()]
        except ValueError:
            print(f"hiera-rewrite: --bench-size {args.bench_size!r}: expected e.g. 224,224 or 16,224,224", file=sys.stderr)
            return EXIT_ERROR
    from .budget import DEFAULT_SECONDS, default_memory_gib  # noqa: PLC0415 -- torch-free

    budget = {"memory_gib": default_memory_gib(), "seconds": DEFAULT_SECONDS}
    if args.verify_budget:
        try:
            memory, _, seconds = args.verify_budget.partition(",")
            budget = {"memory_gib": float(memory) if memory.strip() else budget["memory_gib"], "seconds": float(seconds) if seconds.strip() else budget["seconds"]}
            if min(budget.values()) <= 0:
                raise ValueError
        except ValueError:
            print(f"hiera-rewrite: --verify-budget {args.verify_budget!r}: expected GIB,SECONDS, e.g. 8,60", file=sys.stderr)
            return EXIT_ERROR
    if "-" in args.paths:
        print("hiera-rewrite: --verify needs files (it imports them with their package), not stdin", file=sys.stderr)
        return EXIT_ERROR

    files, missing = expand_paths(args.paths)
    errors = len(missing)
    for message in missing:
        print(message, file=sys.stderr)
    results = []
    jobs = [(f, codes, args.line_length, args.traceback) for f in files]
    for name, result, message, tb in replan_with_siblings(jobs, [process_file(job) for job in jobs]):
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
    verdicts: Dict[Path, str] = {}  # each rewritten file's group verdict
    done: Dict[str, tuple] = {}  # fingerprint -> (label, verdict) of a group verified above
    for group in groups:
        if not group.results:
            continue
        # a byte-for-byte copy of a package verified above, in the same repo (a fork's
        # old_stuff/models_old/ beside old_and_failed_stuff/models_old/): its verdict
        fingerprint = copy_fingerprint(group)
        if fingerprint is not None and fingerprint in done:
            label, verdict = done[fingerprint]
            print(f"verify: {group.label}: the same files as {label} (each Python file byte for byte, "
                  f"rewritten alike, in the same repo): {verdict}, as verified above", file=report_out)
            verdicts.update(dict.fromkeys(group.results, verdict))
            continue
        try:
            verdict = verify_group(
                group,
                factories=args.factory or (),
                kwargs=kwargs,
                input_shape=input_shape,
                cuda=args.verify_cuda,
                dtypes=getattr(args, "verify_dtype", None),  # parsed by the CLI (runner.parse_verify_dtypes)
                bench=bench,
                quiet=args.quiet,
                budget=budget,
                graph_report=not args.no_graph_report,
                out=report_out,
            )
        except UsageError as exc:
            print(f"hiera-rewrite: {exc}", file=sys.stderr)
            return EXIT_ERROR
        verdicts.update(dict.fromkeys(group.results, verdict))
        if fingerprint is not None:
            done[fingerprint] = (group.label, verdict)
    if not any(g.results for g in groups):
        print("verify: nothing to verify (no file would change)", file=report_out)

    changed = unchanged = 0
    order = write_order(results)  # a file whose plan read another's rewrite after that one
    # The files to write: each PASSED, and each rewrite its plan read written too (hiera.py
    # and hiera_mae.py read each other's: a cycle, verified together, written together).
    passed = {
        os.path.realpath(results[i][0]) for i, _ in order if verdicts.get(Path(results[i][0]).resolve(), FAILED) == PASSED
    }
    writable = set(passed)
    while True:
        blocked = {os.path.realpath(results[i][0]) for i, deps in order if deps - writable} & writable
        if not blocked:
            break
        writable -= blocked
    unwritten: set = set()  # writes that failed
    for i, deps in order:
        name, result = results[i]
        verdict = verdicts.get(Path(name).resolve(), FAILED)
        missing = (deps - writable) | (deps & unwritten)
        if args.check or args.diff:
            changed += 1
        elif verdict != PASSED:
            print(f"{name}:1:1: not rewritten: verification {verdict.lower()}", file=sys.stderr)
        elif missing:
            print(f"{name}:1:1: not rewritten: it is planned against the rewrite of {sorted(missing)[0]}, which was not written", file=sys.stderr)
        else:
            problem = write_checked(name, result.output, result.source)
            if problem is None:
                changed += 1
            else:
                print(problem, file=sys.stderr)
                unwritten.add(os.path.realpath(name))
                errors += 1
    unchanged = sum(1 for _, result in results if not result.changed)
    exit_code = EXIT_ERROR if errors else (EXIT_CHANGED if changed else EXIT_CLEAN)
    # one word for one verdict: a mismatch anywhere is FAILED, else a site unproven is NOT PROVEN
    worst = FAILED if FAILED in verdicts.values() else NOT_PROVEN if NOT_PROVEN in verdicts.values() else None
    if worst is not None:
        exit_code = EXIT_VERIFY_FAILED
    verb = "would be rewritten" if (args.check or args.diff) else "rewritten"
    parts = [f"{changed} file{'s' if changed != 1 else ''} {verb}", f"{unchanged} unchanged"]
    if worst is not None:
        parts.append(f"verification {worst}")
    elif PASSED in verdicts.values():
        parts.append("verified")
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''}")
    print("hiera-rewrite: " + ", ".join(parts) + ".", file=sys.stderr)
    return exit_code
