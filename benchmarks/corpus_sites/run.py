#!/usr/bin/env python3
"""Run one revision of hiera-rewrite over the fork corpus and record every reported site.

    python3 benchmarks/corpus_sites/run.py REV OUTDIR [--jobs N] [--only TEXT]

REV is a git revision of this checkout (the repo this file is in, below: /work/main; d6c1e9f, HEAD, a branch, ...) or ``worktree`` (the
working tree as it is, uncommitted edits included).  Nothing under /work/main or
/work/corpus is written.

1. The tool goes to OUTDIR/tool: ``git -C /work/main archive REV | tar -x -C OUTDIR/tool``
   (worktree: a copy of /work/main without .git, .venv*, benchmarks/results, caches), then
   ``ln -s ../codemods OUTDIR/tool/hiera_rewrite/codemods`` (the package maps
   hiera_rewrite.codemods to the top-level codemods folder).
2. For each entry of /work/main/benchmarks/fork_corpus.json, the laid-out repo folder
   /work/corpus/<owner>+<name>/<name>/ is copied to a temp dir (same folder name, so sibling
   imports and package names resolve as in a clone), and from that copy's root runs
       PYTHONPATH=OUTDIR/tool /work/main/.venv/bin/python -P -m hiera_rewrite --diff FILES
       PYTHONPATH=OUTDIR/tool /work/main/.venv/bin/python -P -m hiera_rewrite --check --output-format json FILES
   FILES = the entry's hiera_files, all in one call (the tool plans sibling files together).
   --mode files: copy only the hiera_files (relative paths kept) instead of the whole repo folder.
   --mode renamed: the whole repo folder copied under the name 'repo' (for comparison only:
   imports of the repo by its own clone name then fail to resolve, as in a careless copy).
   -P as the hiera-rewrite console script: the copy's root is not put on sys.path.
3. Per repo, OUTDIR/repos/<owner>+<name>/: cmd.txt, diff.txt (stdout of --diff: the diff),
   report.txt (stderr of --diff: one `path:line:col: CODE ...` line per site + summary),
   report.json (the --check json document), sites.json (the parsed sites).
   OUTDIR/sites.json: {"rev", "sha", "python", "repos": [per-repo summary], "sites": [...]}
   where each site is {repo, file, line, col, code, status: applied|skipped, message, reason,
   scope (enclosing class/def qualname in the original file), src (the stripped source line)}.
   The json document is the source of the sites; the text report is parsed too and any
   disagreement between the two is recorded as a problem.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MAIN = Path(__file__).resolve().parents[2]  # this checkout
LIST = MAIN / "benchmarks" / "fork_corpus.json"
CORPUS = Path(os.environ.get("HIERA_CORPUS", "/work/corpus"))
PYTHON = os.environ.get("HIERA_PYTHON", str(MAIN / ".venv" / "bin" / "python"))
TIMEOUT = 600
REPORT_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<code>HR\d{3}) (?P<msg>.*)$")
WORKTREE_SKIP = {".git", "__pycache__", ".hypothesis", ".pytest_cache", "build", "dist", ".whl", ".gen", ".ci-libcst"}


def export_tool(rev: str, outdir: Path) -> tuple:
    tool = outdir / "tool"
    if tool.exists() or tool.is_symlink():
        shutil.rmtree(tool)
    if rev == "worktree":
        head = subprocess.run(["git", "-C", str(MAIN), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(MAIN), "status", "--porcelain", "--", "hiera_rewrite", "codemods"],
                               capture_output=True, text=True).stdout.strip()

        def ignore(folder, names):
            skip = {n for n in names if n.startswith(".venv") or n in WORKTREE_SKIP or n.endswith(".egg-info")}
            if Path(folder).name == "benchmarks" and Path(folder).parent.resolve() == MAIN.resolve():
                skip.add("results")
            return skip

        shutil.copytree(MAIN, tool, ignore=ignore, symlinks=True)
        sha = head + ("+worktree(dirty)" if dirty else "+worktree(clean)")
    else:
        sha = subprocess.run(["git", "-C", str(MAIN), "rev-parse", "--verify", rev + "^{commit}"],
                             capture_output=True, text=True, check=True).stdout.strip()
        tool.mkdir(parents=True)
        archive = subprocess.Popen(["git", "-C", str(MAIN), "archive", sha], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(tool)], stdin=archive.stdout, check=True)
        archive.stdout.close()
        if archive.wait():
            sys.exit(f"git archive {sha} failed")
    link = tool / "hiera_rewrite" / "codemods"
    if not link.exists():
        os.symlink("../codemods", link)
    return tool, sha


def clone_folder(entry: dict) -> Path:
    owner, name = entry["repo"].split("/")
    return CORPUS / f"{owner}+{name}" / name


def scopes_of(path: Path) -> tuple:
    """(lines of the file, [(start, end, qualname)]) for every class/def, innermost last by start."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return [], []
    lines = text.splitlines()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return lines, []
    spans = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = f"{prefix}.{child.name}" if prefix else child.name
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                spans.append((start, child.end_lineno or child.lineno, q))
                walk(child, q)
            else:
                walk(child, prefix)

    walk(tree, "")
    return lines, spans


def enclosing(spans, line: int) -> str:
    best = None
    for start, end, q in spans:
        if start <= line <= end and (best is None or start >= best[0]):
            best = (start, q)
    return best[1] if best else "<module>"


def run_cmd(cmd, cwd, env):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, errors="replace", timeout=TIMEOUT)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return None, out, err + f"\n[run.py: timeout after {TIMEOUT}s]\n", time.monotonic() - t0


def run_repo(entry: dict, tool: Path, outdir: Path, mode: str = "repo") -> dict:
    repo = entry["repo"]
    key = repo.replace("/", "+")
    rdir = outdir / "repos" / key
    if rdir.exists():
        shutil.rmtree(rdir)
    rdir.mkdir(parents=True)
    src = clone_folder(entry)
    files = list(entry.get("hiera_files") or [])
    summary = {"repo": repo, "commit": entry.get("commit"), "files": files, "mode": mode, "problems": []}
    if not src.is_dir():
        summary["problems"].append(f"not laid out: {src} missing (run `cd /work/main && python3 benchmarks/fork_corpus.py layout`)")
        return {"summary": summary, "sites": []}
    missing = [f for f in files if not (src / f).is_file()]
    if missing:
        summary["problems"].append(f"hiera_files missing from the laid-out repo: {missing}")
    laid_head = (src / ".git" / "HEAD").read_text().strip() if (src / ".git" / "HEAD").is_file() else None
    summary["laid_out_commit"] = laid_head
    if laid_head and entry.get("commit") and laid_head != entry["commit"]:
        summary["problems"].append(f"laid out at {laid_head}, JSON says {entry['commit']}")
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["PYTHONPATH"] = str(tool.resolve())
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    base = [PYTHON, "-P", "-m", "hiera_rewrite"]
    with tempfile.TemporaryDirectory(prefix="corpus_cmp_") as tmp:
        # --mode renamed: the whole repo under another folder name ("repo"): a repo importing
        # itself by its clone's name (`from <name>.models ... import`) no longer resolves
        work = Path(tmp) / (src.name if mode != "renamed" else "repo")
        if mode in ("repo", "renamed"):  # the whole laid-out repo: sibling modules and packages resolve
            shutil.copytree(src, work, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:  # --mode files: the hiera_files alone, at their relative paths
            for f in files:
                if (src / f).is_file():
                    (work / f).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src / f, work / f)
        present = [f for f in files if (work / f).is_file()]
        cmd_diff = base + ["--diff"] + present
        cmd_json = base + ["--check", "--output-format", "json"] + present
        (rdir / "cmd.txt").write_text(
            f"# copy of {src} at {work}\ncd {work} && PYTHONPATH={tool.resolve()} {' '.join(cmd_diff)}\n"
            f"cd {work} && PYTHONPATH={tool.resolve()} {' '.join(cmd_json)}\n")
        if not present:
            summary["problems"].append("no hiera_files to run")
            return {"summary": summary, "sites": []}
        rc_d, out_d, err_d, sec_d = run_cmd(cmd_diff, work, env)
        rc_j, out_j, err_j, sec_j = run_cmd(cmd_json, work, env)
        # the original files' context (the copy is untouched: --diff/--check write nothing)
        ctx = {f: scopes_of(work / f) for f in present}
    (rdir / "diff.txt").write_text(out_d)
    (rdir / "report.txt").write_text(err_d)
    (rdir / "report.json").write_text(out_j + (("\n# stderr:\n" + err_j) if err_j.strip() else ""))
    summary.update(rc_diff=rc_d, rc_check=rc_j, seconds=round(sec_d + sec_j, 2),
                   diff_lines=len(out_d.splitlines()),
                   summary_line=next((l for l in reversed(err_d.splitlines()) if l.startswith("hiera-rewrite:")), ""))

    # text report lines (from the --diff run)
    text_sites = []
    for l in err_d.splitlines():
        m = REPORT_LINE.match(l)
        if m:
            msg = m.group("msg")
            text_sites.append((m.group("file").removeprefix("./"), int(m.group("line")), int(m.group("col")), m.group("code"),
                               "skipped" if msg.startswith("skipped:") else "applied", msg))
    # json document (from the --check run)
    sites = []
    try:
        doc = json.loads(out_j)
    except ValueError:
        doc = None
        summary["problems"].append(f"--check json did not parse (exit {rc_j}); sites taken from the text report")
    errors = []
    if doc is not None:
        for f in doc.get("files", []):
            path = f["path"].removeprefix("./")
            if f.get("error"):
                errors.append({"file": path, **f["error"]})
            for r in f.get("reports", []):
                sites.append({"file": path, "line": r["line"], "col": r["column"], "code": r["code"],
                              "status": "applied" if r.get("applied") else "skipped",
                              "message": r["message"], "reason": r.get("reason")})
        summary["tool_summary"] = doc.get("summary", {}).get("text")
    else:
        for path, line, col, code, status, msg in text_sites:
            sites.append({"file": path, "line": line, "col": col, "code": code, "status": status, "message": msg,
                          "reason": msg[len("skipped: "):] if status == "skipped" else None})
    if errors:
        summary["problems"].append(f"tool errors: {errors}")
    summary["errors"] = errors
    as_text = sorted(text_sites)
    as_json = sorted((s["file"], s["line"], s["col"], s["code"], s["status"], s["message"]) for s in sites)
    if as_text != as_json:
        summary["problems"].append(f"text report ({len(as_text)} sites) and json ({len(as_json)} sites) disagree")
    for s in sites:
        lines, spans = ctx.get(s["file"], ([], []))
        s["repo"] = repo
        s["scope"] = enclosing(spans, s["line"])
        s["src"] = lines[s["line"] - 1].strip() if 0 < s["line"] <= len(lines) else ""
    order = ["repo", "file", "line", "col", "code", "status", "message", "reason", "scope", "src"]
    sites = [{k: s[k] for k in order} for s in sites]
    summary["applied"] = sum(s["status"] == "applied" for s in sites)
    summary["skipped"] = sum(s["status"] == "skipped" for s in sites)
    (rdir / "sites.json").write_text(json.dumps(sites, indent=1) + "\n")
    return {"summary": summary, "sites": sites}


def main() -> int:
    ap = argparse.ArgumentParser(description="hiera-rewrite REV over the fork corpus: every reported site")
    ap.add_argument("rev", help="git revision of /work/main, or 'worktree'")
    ap.add_argument("outdir")
    ap.add_argument("--jobs", type=int, default=1, help="repos run at once (default 1; the machine is small)")
    ap.add_argument("--only", help="repos whose owner/name contains this text")
    ap.add_argument("--mode", choices=("repo", "files", "renamed"), default="repo",
                    help="repo (default): run on a copy of the whole laid-out repo folder; "
                         "files: on copies of the hiera_files alone (relative paths kept, no sibling modules); "
                         "renamed: the whole repo copied under the folder name 'repo' (self-imports by the clone's name break)")
    args = ap.parse_args()
    outdir = Path(args.outdir).resolve()
    if outdir == MAIN.resolve() or MAIN.resolve() in outdir.parents:
        sys.exit("OUTDIR must be outside /work/main")
    outdir.mkdir(parents=True, exist_ok=True)
    tool, sha = export_tool(args.rev, outdir)
    version = subprocess.run([PYTHON, "-P", "-m", "hiera_rewrite", "--version"], env=dict(os.environ, PYTHONPATH=str(tool)),
                             capture_output=True, text=True).stdout.strip()
    entries = json.loads(LIST.read_text())
    if args.only:
        entries = [e for e in entries if args.only.lower() in e["repo"].lower()]
    t0 = time.monotonic()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda e: run_repo(e, tool, outdir, args.mode), entries))
    sites = [s for r in results for s in r["sites"]]
    repos = [r["summary"] for r in results]
    doc = {"rev": args.rev, "sha": sha, "mode": args.mode, "version": version, "python": PYTHON, "corpus": str(CORPUS),
           "list": str(LIST), "seconds": round(time.monotonic() - t0, 1),
           "applied": sum(s["status"] == "applied" for s in sites),
           "skipped": sum(s["status"] == "skipped" for s in sites),
           "repos": repos, "sites": sites}
    (outdir / "sites.json").write_text(json.dumps(doc, indent=1) + "\n")
    for r in repos:
        flag = "  PROBLEM: " + "; ".join(r["problems"]) if r["problems"] else ""
        print(f"{r['repo']:45s} applied {r.get('applied', 0):3d}  skipped {r.get('skipped', 0):3d}  "
              f"exit {r.get('rc_diff')}/{r.get('rc_check')}{flag}")
    print(f"\n{args.rev} ({sha}) mode={args.mode}: {doc['applied']} applied / {doc['skipped']} skipped, {len(sites)} sites, "
          f"{len(repos)} repos, {doc['seconds']}s -> {outdir / 'sites.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
