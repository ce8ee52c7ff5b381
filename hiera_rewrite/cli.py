"""Command line: ``hiera-rewrite PATH...`` (in place), --check, --diff, ``-``, --export."""

from __future__ import annotations

import argparse
import gc
import os
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from . import __version__
from .engine import FileResult, InputError, InternalError, line_length_for, rewrite_bytes, selected_codes
from .files import FileError, expand_paths, process_file, replan_with_siblings, sibling_reader, stdin_reader, unified_diff, write_in_order
from .output import FORMATS, make_output
from .exit_codes import EXIT_CHANGED, EXIT_CLEAN, EXIT_ERROR
from .rewrite import REGISTRY

EPILOG = """\
exit codes:
  0  nothing to rewrite (or --list/--explain/--export succeeded)
  1  files were rewritten, or with --check/--diff would be rewritten
  2  usage or input error: a path is missing or unreadable, a file cannot be
     decoded or parsed (message: path:line:col: reason), or an internal error;
     other files are still processed
  3  --verify: verification failed or could not run (a mismatch, no model could
     be built, torch missing) or a rewritten site was not proven (no compared
     case ran it); nothing was written

Each change prints `path:line:col: CODE message`; spots that look like an idiom
but are left alone print `path:line:col: CODE skipped: reason`.  A class or
function marked `# hiera-rewrite: skip` is left alone.

--output-format json prints one document:
  {"version": ..., "files": [{"path", "changed", "error": null or {"line",
   "column", "message"}, "reports": [{"code", "line", "column", "message",
   "applied", "reason"}]}], "summary": {"changed", "unchanged", "errors",
   "exit_code", "text"}}
--output-format github prints workflow commands, e.g.
  ::notice file=models/hiera.py,line=100,col=17,title=HR001::mask-unit attention: ...
  ::warning file=models/hiera.py,line=30,col=13,title=HR001::skipped: SDPA gets ...
  ::error file=bad.py,line=3,col=5,title=hiera-rewrite::cannot parse: ...
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hiera-rewrite",
        description="Rewrite vendored FAIR Hiera source into fused-attention, static-shape PyTorch, in place.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or directories (their *.py); '-' reads stdin, writes stdout")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file would change")
    mode.add_argument("--diff", action="store_true", help="print a unified diff, write nothing; exit 1 if non-empty")
    parser.add_argument("--select", metavar="CODES", help="comma-separated rewrite codes to run (default: all)")
    parser.add_argument("--ignore", metavar="CODES", help="comma-separated rewrite codes not to run")
    parser.add_argument("--list", action="store_true", help="list the rewrites and exit")
    parser.add_argument("--explain", metavar="CODE", help="explain one rewrite: what it changes and why it is faster")
    parser.add_argument(
        "--export",
        metavar="DIR",
        help="write rewritten copies of the installed hiera-transformer package into DIR (new or empty)",
    )
    verify = parser.add_argument_group("verify (needs torch: pip install 'hiera-rewrite[verify]')")
    verify.add_argument("--verify", action="store_true", help="build models from the original and the rewritten files (same weights), compare outputs and gradients in float64; write only if they match")
    verify.add_argument("--factory", action="append", metavar="MODULE:FUNC", help="with --verify: build this factory or class instead of the discovered ones (repeatable; MODULE is dotted or a file path; optional :JSON keyword arguments for this one)")
    verify.add_argument("--kwargs", metavar="JSON", help="with --verify: keyword arguments for every factory, e.g. '{\"q_pool\": 2}'")
    verify.add_argument("--input-shape", metavar="B,C,...", help="with --verify: input shape (default: derived from the model, shrunk)")
    verify.add_argument("--package-root", metavar="DIR", help="with --verify: the top-level package folder of the files (default: walk up while __init__.py exists)")
    verify.add_argument("--verify-cuda", action="store_true", help="with --verify: also compare on CUDA in float64, float32 and bfloat16 (or --verify-dtype), then time a training step (forward, loss, backward) of the original and the rewritten model in bfloat16 at the model's own size, interleaved rounds, and print both and the ratio")
    verify.add_argument("--verify-dtype", metavar="DTYPES", help="with --verify: a comma list of bfloat16, float16, float32 (bf16, fp16, fp32): also run every case in these dtypes, on CPU, or with --verify-cuda on CUDA (there float32 always runs; default bfloat16), each side judged by its error against the original's float64 result on that device (rewritten <= 2 x original + 8 eps of the dtype), and again with the math attention kernel alone on both sides ('bfloat16 cuda math'); a row failing only with the fused kernels passes as the fused kernel's precision when each attention call is within 8 eps of float64 on its inputs, else fails naming the call; print a parity table; an original that cannot run in a dtype on the device is reported 'not run'")
    verify.add_argument("--no-graph-report", action="store_true", help="with --verify: skip the torch.compile(fullgraph=True) report after parity (a few seconds a model; not part of the verdict)")
    verify.add_argument("--verify-budget", metavar="GIB,SECONDS", help="with --verify: the memory (GiB) the verification worker may use and the seconds one case may take; a case over budget stops and is reported 'too large to verify here' (default: half the machine's memory, at most 8 GiB, and 60 s)")
    verify.add_argument("--bench-size", metavar="H,W", help="with --verify-cuda: the input size to time at (default: the model's own input_size)")
    verify.add_argument("--bench-batch", metavar="N", type=int, help="with --verify-cuda: the batch size to time at (default 16)")
    verify.add_argument("--bench-modes", metavar="MODES", help="with --verify-cuda: a comma list of eager, compile, ro (torch.compile(mode='reduce-overhead'), CUDA graphs): time the step in each mode, compiled and warmed up before the timed rounds (compile time reported apart); a side that cannot run a mode (raises, or CUDA graphs skipped) is timed in its next mode that runs, and the report says which and why (default: eager)")
    parser.add_argument(
        "--stdin-filename",
        metavar="PATH",
        help="with '-': the path of the file read from stdin (its package's modules are read from there; it is"
        " named so in reports). Without it, a claim about the modules that import the file (HR003, HR005:"
        " none of them patches its classes) is not proven, and those sites keep the original",
    )
    parser.add_argument("--line-length", type=int, metavar="N", help="line length for inserted code (default: black's from pyproject.toml, else 88)")
    parser.add_argument("-j", "--jobs", type=int, default=0, metavar="N", help="processes working on files in parallel; 0 (default): one per available core when there are at least 8 files, else 1")
    parser.add_argument(
        "--output-format",
        choices=FORMATS,
        default="text",
        help="text (default): path:line:col: CODE message lines and a summary on stderr; "
        "json: one JSON document (every file, its reports and errors, the summary) and nothing else; "
        "github: GitHub Actions ::notice (applied), ::warning (skipped) and ::error lines, "
        "then the summary on stderr.  json and github go to stdout, or to stderr when stdout "
        "carries data (--diff, or '-' without --check); not with --verify or --export",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only errors and the summary (json: no effect)")
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of internal errors")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _codes(text: Optional[str]) -> Optional[List[str]]:
    if text is None:
        return None
    return [c.strip().upper() for c in text.split(",") if c.strip()]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        codes = selected_codes(_codes(args.select), _codes(args.ignore))
    except ValueError as exc:
        parser.error(str(exc))  # exits 2

    if args.jobs < 0:
        parser.error("--jobs must be 0 (automatic) or a number of processes")
    if args.list:
        for code in REGISTRY:
            rewrite = REGISTRY[code]
            opt_in = "" if rewrite.default else f"  (opt-in: --select {code})"
            print(f"{code}  {rewrite.name:<28} {rewrite.message}{opt_in}")
        return EXIT_CLEAN
    if args.explain:
        code = args.explain.strip().upper()
        if code not in REGISTRY:
            parser.error(f"unknown rewrite code: {args.explain}")
        rewrite = REGISTRY[code]
        print(f"{code} {rewrite.name}: {rewrite.message}\n")
        print(textwrap.dedent(rewrite.explanation).strip())
        return EXIT_CLEAN
    if args.output_format != "text" and (args.verify or args.export):
        parser.error(f"--output-format {args.output_format} is not supported with {'--verify' if args.verify else '--export'} (only text)")
    if args.export:
        ignored = [f for f, v in (("--verify", args.verify), ("--check", args.check), ("--diff", args.diff)) if v]
        if args.paths or ignored:
            parser.error(
                f"--export writes the installed upstream's rewrite; it takes no {'PATH' if args.paths else ignored[0]}"
                " (to check or verify a copy of your own, give its path without --export)"
            )
        from .export import export_upstream

        return export_upstream(Path(args.export), codes, quiet=args.quiet)
    if not args.paths:
        parser.error("no PATH given (use '-' for stdin)")
    if args.stdin_filename is not None and "-" not in args.paths:
        parser.error("--stdin-filename only makes sense with '-' (stdin)")

    verify_only = [f for f, v in (("--factory", args.factory), ("--kwargs", args.kwargs), ("--input-shape", args.input_shape), ("--package-root", args.package_root), ("--verify-cuda", args.verify_cuda), ("--verify-dtype", args.verify_dtype is not None), ("--verify-budget", args.verify_budget), ("--no-graph-report", args.no_graph_report)) if v]
    if verify_only and not args.verify:
        parser.error(f"{', '.join(verify_only)} only make sense with --verify")
    timing_only = [f for f, v in (("--bench-size", args.bench_size), ("--bench-batch", args.bench_batch is not None)) if v]
    if timing_only and not (args.verify and args.verify_cuda):
        parser.error(f"{', '.join(timing_only)} only make{'s' if len(timing_only) == 1 else ''} sense with --verify --verify-cuda (they set the timed step)")
    if args.bench_modes is not None:
        from .verify.cuda import parse_bench_modes  # torch-free

        try:
            args.bench_modes = parse_bench_modes(args.bench_modes)
        except ValueError as exc:
            parser.error(f"--bench-modes: {exc}")
        if not (args.verify and args.verify_cuda):
            parser.error("--bench-modes only makes sense with --verify --verify-cuda")
    if args.verify_dtype is not None:
        from .verify.runner import parse_verify_dtypes  # torch-free

        try:
            args.verify_dtype = parse_verify_dtypes(args.verify_dtype)
        except ValueError as exc:
            parser.error(f"--verify-dtype: {exc}")
    if args.verify:
        from .verify.command import run_cli as run_verify

        return run_verify(args, codes)
    runner = _Runner(args, codes)
    return runner.run(args.paths)


class _Runner:
    def __init__(self, args: argparse.Namespace, codes: List[str]) -> None:
        self.args = args
        self.codes = codes
        self.exit = EXIT_CLEAN
        self.changed = 0
        self.unchanged = 0
        self.errors = 0
        # stdout carries data with --diff, and with '-' unless --check
        data_on_stdout = bool(args.diff or ("-" in args.paths and not args.check))
        self.out = make_output(args.output_format, args.quiet, data_on_stdout)

    def error(self, error: FileError, traceback: Optional[str] = None) -> None:
        self.out.error(error, traceback)
        self.errors += 1
        self.exit = EXIT_ERROR

    def run(self, paths: Sequence[str]) -> int:
        if "-" in paths:
            self.run_stdin()
        files, missing = expand_paths([p for p in paths if p != "-"])
        for error in missing:
            self.error(error)
        jobs = [(f, self.codes, self.args.line_length, self.args.traceback) for f in files]
        workers = _workers(self.args.jobs, len(jobs))
        if workers > 1:
            # Imported here, not at start-up (a few files run in this process; the
            # engine imports black only when it formats inserted code): once, before
            # the workers fork, not in each.
            import black  # noqa: F401
            from concurrent.futures import ProcessPoolExecutor
        # Everything imported so far lives as long as the process: keep the cyclic
        # collector from walking it again after every few parses (about a tenth of
        # the time), and let forked workers share it untouched.
        gc.freeze()
        if workers > 1:
            # Largest files first, one at a time: no worker is left with a long tail.
            order = sorted(range(len(jobs)), key=lambda i: -_size(jobs[i][0]))
            with ProcessPoolExecutor(max_workers=workers) as pool:
                done = list(pool.map(process_file, [jobs[i] for i in order]))
            outcomes = [outcome for _, outcome in sorted(zip(order, done), key=lambda pair: pair[0])]
        else:
            outcomes = [process_file(job) for job in jobs]
        outcomes = replan_with_siblings(jobs, outcomes)
        problems: Dict[str, FileError] = {}
        if not (self.args.diff or self.args.check):
            outcomes, problems = write_in_order(jobs, outcomes)
        for name, result, error, tb in outcomes:
            if error is not None:
                self.error(error, tb)
                continue
            assert result is not None
            self.finish_file(name, result, problems.get(name))
        self.summary()
        return self.exit

    def finish_file(self, name: str, result: FileResult, problem: Optional[FileError] = None) -> None:
        """Report one file (written already, or ``problem`` writing it)."""
        self.out.file(name, result)
        if not result.changed:
            self.unchanged += 1
            return
        self.changed += 1
        if self.exit == EXIT_CLEAN:
            self.exit = EXIT_CHANGED
        if self.args.diff:
            sys.stdout.flush()
            sys.stdout.buffer.write(unified_diff(name, result))
            sys.stdout.flush()
        elif problem is not None:
            self.changed -= 1
            self.error(problem)

    def run_stdin(self) -> None:
        data = sys.stdin.buffer.read()
        given = self.args.stdin_filename
        name = given if given is not None else "<stdin>"
        # where the file lies, its package's modules are read from there (as for a path);
        # unknown, no claim about them is proven (stdin_reader)
        place = Path(given) if given is not None and Path(given).absolute().parent.is_dir() else None
        try:
            result = rewrite_bytes(
                data,
                codes=self.codes,
                line_length=self.args.line_length or line_length_for(place if place is not None else Path.cwd() / "stdin.py"),
                siblings=sibling_reader(place) if place is not None else stdin_reader(),
            )
        except (InputError, InternalError) as exc:
            if not (self.args.check or self.args.diff):
                sys.stdout.buffer.write(data)  # a filter passes what it cannot rewrite through
                sys.stdout.flush()
            if isinstance(exc, InputError):
                self.error(FileError(name, exc.line, exc.col, exc.message))
            else:
                self.error(FileError(name, 1, 1, f"internal error, nothing written: {exc}"))
            return
        self.out.file(name, result)
        if self.args.diff:
            if result.changed:
                sys.stdout.buffer.write(unified_diff(name, result))
        elif not self.args.check:
            sys.stdout.buffer.write(result.output)
        sys.stdout.flush()
        if result.changed:
            self.changed += 1
            if self.exit == EXIT_CLEAN:
                self.exit = EXIT_CHANGED
        else:
            self.unchanged += 1

    def summary(self) -> None:
        verb = "would be rewritten" if (self.args.check or self.args.diff) else "rewritten"
        parts = [f"{self.changed} file{'s' if self.changed != 1 else ''} {verb}", f"{self.unchanged} unchanged"]
        if self.errors:
            parts.append(f"{self.errors} error{'s' if self.errors != 1 else ''}")
        counts = {"changed": self.changed, "unchanged": self.unchanged, "errors": self.errors}
        self.out.summary("hiera-rewrite: " + ", ".join(parts) + ".", counts, self.exit)


def _workers(requested: int, files: int) -> int:
    """Worker processes for ``files`` files: ``-j N`` as given; by default one per
    available core, for runs long enough to repay starting them (a pre-commit hook
    passing a few files runs in this process)."""
    if requested > 0:
        return min(requested, files)
    if files < 8:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))  # type: ignore[attr-defined]
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, files // 4))


def _size(name: str) -> int:
    try:
        return os.path.getsize(name)
    except OSError:
        return 0
