"""`hiera-rewrite --verify` on a corpus of real public repositories that vendor and edit Hiera.

The corpus is listed in ``benchmarks/fork_corpus.json``: one entry per repository,
``{repo, commit, hiera_files, verdict, seconds, cause, flag}``. The third-party code
itself is never committed: it is laid out, on demand, from local git mirrors into
``/work/corpus/<owner>+<name>/<name>/`` (outside this repository; the folder has the
name a ``git clone`` gives it), each repository at its clone's paths: its ``.py`` files and its configs and scripts (``.json .yaml .yml .toml
.cfg .txt .sh .ini``), files over 1 MiB left out (data, weights), and a stand-in ``.git``
folder (verify finds a repo's root by its VCS folder).

Mirrors are the bare git directories under ``/work/.mirror/<owner>+<name>/`` that the
session tooling's ``fetch`` (source ``github:<owner>/<name>``) leaves; this script calls
nothing online itself: where a mirror is missing it prints the ``fetch`` source to run.

Subcommands (stdlib only)::

    python benchmarks/fork_corpus.py layout             # mirrors -> /work/corpus/<owner>+<name>/<name>/
    python benchmarks/fork_corpus.py deps               # each repo's own pins (``deps``) into /work/corpus/.deps/<owner>+<name>/
    python benchmarks/fork_corpus.py discover           # hiera_files: `hiera-rewrite --check` on each repo folder
    python benchmarks/fork_corpus.py run                # verify every repo, update the JSON, write the table
    python benchmarks/fork_corpus.py run --only BehaveMAE   # one repo (owner/name, name, or a part of it)
    python benchmarks/fork_corpus.py reparse            # verdicts, causes, flags again from the saved logs
    python benchmarks/fork_corpus.py table              # rewrite the markdown table from the JSON
    python benchmarks/fork_corpus.py carry NAME...      # copy repos for a device call (benchmarks/corpus_cuda.sh)

``run`` executes, from the repository folder's root as a user would,
``hiera-rewrite --verify --check <hiera_files>`` with a 180 s timeout (``--timeout``), and
records the verdict (PASSED / FAILED / NOT PROVEN, or ``timeout`` / ``exit N`` for any other
ending), the wall seconds, the first line of the cause (the first ``not proven:``,
``FAILED:`` or ``not built:`` line) and the flag verify suggests, if any (``--kwargs '...'``,
``--factory ...``, ``--package-root ...``). The table goes to
``benchmarks/results/issue31/corpus.md`` with the summary counts and the hiera-rewrite
commit that produced it; each run's full output to ``/work/corpus/.logs/<owner>+<name>.log``.

The hiera-rewrite that runs is the committed tree at ``--rev`` (default ``HEAD`` of this
checkout), exported with ``git archive`` into ``/work/corpus/.hiera-rewrite/<sha>/`` and put
first on ``PYTHONPATH``, so uncommitted edits in the working tree never leak into a table;
``--rev worktree`` runs the working tree as it is. The interpreter is ``--python`` (default
``.venv-corpus/bin/python`` where present, else ``.venv/bin/python``): a venv that sees the
test venv's packages through a ``.pth`` file and adds the corpus repos' small pure-python
dependencies (einops, omegaconf, hydra-core, ...), which must not go into the test venv.
Verify's worker runs with the interpreter that runs ``hiera-rewrite``, so it sees them too.

A repo whose code needs versions that conflict with that shared venv lists them in its entry as
``deps`` (pip specs, with ``deps_env`` for the build and ``deps_why`` saying where the pins come
from: the repo's own requirements, or the install verify's message names). ``deps`` installs them
with ``pip install --no-deps --no-build-isolation --target /work/corpus/.deps/<owner>+<name>``,
and ``run`` puts that folder on ``PYTHONPATH`` after the hiera-rewrite tree, for that repo only;
the table names them.
It is started with ``-P``, as the ``hiera-rewrite`` console script is: the repo folder is
not put on ``sys.path`` by the interpreter itself, only by verify's own import rules.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import io
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LIST = HERE / "fork_corpus.json"
TABLE = HERE / "results" / "issue31" / "corpus.md"
CORPUS = Path(os.environ.get("HIERA_CORPUS", "/work/corpus"))
MIRRORS = Path(os.environ.get("HIERA_MIRRORS", "/work/.mirror"))
KEEP_EXT = {".py", ".json", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".sh", ".ini"}
MAX_BYTES = 1 << 20
VERDICTS = ("PASSED", "FAILED", "NOT PROVEN")


# ---------------------------------------------------------------- the list


def load() -> List[Dict]:
    return json.loads(LIST.read_text())


def save(entries: List[Dict]) -> None:
    LIST.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")


def folder(entry: Dict) -> Path:
    """The clone: ``/work/corpus/<owner>+<name>/<name>``, so the repo folder has the name a
    ``git clone`` gives it (verify takes a package's name from its folder: a repo whose root
    holds an ``__init__.py`` is imported under it)."""
    owner, name = entry["repo"].split("/")
    return CORPUS / f"{owner}+{name}" / name


def select(entries: List[Dict], only: Optional[str]) -> List[Dict]:
    if not only:
        return entries
    exact = [e for e in entries if only in (e["repo"], e["repo"].split("/")[1])]
    picked = exact or [e for e in entries if only.lower() in e["repo"].lower()]
    if not picked:
        sys.exit(f"no repo matches {only!r}")
    return picked


# ---------------------------------------------------------------- layout


def git_dir(entry: Dict) -> Optional[Path]:
    base = MIRRORS / entry["repo"].replace("/", "+")
    for cand in (base / "repo" / ".git", base / "repo", base):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    return None


def git(gd: Path, *args: str, data: bool = False):
    out = subprocess.run(["git", f"--git-dir={gd}", *args], capture_output=True, check=True)
    return out.stdout if data else out.stdout.decode()


def layout(entry: Dict) -> Optional[str]:
    """Lay the repo out at its commit; return a problem or None."""
    gd = git_dir(entry)
    if gd is None:
        return f"no mirror: fetch github:{entry['repo']}"
    commit = entry.get("commit") or git(gd, "rev-parse", "HEAD").strip()
    entry["commit"] = git(gd, "rev-parse", commit).strip()
    wanted = []
    for line in git(gd, "ls-tree", "-r", "-l", "-z", entry["commit"]).split("\0"):
        if not line:
            continue
        meta, path = line.split("\t", 1)
        mode, kind, obj, size = meta.split()
        if kind != "blob" or mode == "120000" or not size.isdigit() or int(size) > MAX_BYTES:
            continue  # a link, a submodule, a blob the snapshot lacks (``BAD``), or too large
        if Path(path).suffix.lower() in KEEP_EXT:
            wanted.append((path, obj))
    dest = folder(entry)
    if dest.parent.exists():
        shutil.rmtree(dest.parent)
    dest.mkdir(parents=True)
    # one `git cat-file --batch` for every blob
    proc = subprocess.run(
        ["git", f"--git-dir={gd}", "cat-file", "--batch"],
        input="".join(f"{obj}\n" for _, obj in wanted).encode(),
        capture_output=True,
        check=True,
    )
    stream = io.BytesIO(proc.stdout)
    for path, obj in wanted:
        header = stream.readline().split()
        if len(header) < 3:  # "<obj> missing"
            continue
        size = int(header[2])
        body = stream.read(size)
        stream.read(1)  # the newline after each object
        target = dest / path
        if ".." in Path(path).parts:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    # a clone has a .git folder, and verify takes the repo's root from it (the VCS root):
    # a stand-in with the commit as a detached HEAD (no objects: nothing here runs git)
    (dest / ".git" / "refs").mkdir(parents=True)
    (dest / ".git" / "objects").mkdir()
    (dest / ".git" / "HEAD").write_text(entry["commit"] + "\n")
    return None


# ---------------------------------------------------------------- the tool


def tool_tree(rev: str) -> (Optional[Path], str):
    """The hiera_rewrite tree to run and its commit."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    if rev == "worktree":
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "hiera_rewrite", "codemods"], capture_output=True, text=True).stdout.strip()
        # a fresh copy: the installed package holds codemods/ as hiera_rewrite.codemods
        tree = CORPUS / ".hiera-rewrite" / "worktree"
        shutil.rmtree(tree, ignore_errors=True)
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(ROOT / "hiera_rewrite", tree / "hiera_rewrite", ignore=ignore)
        shutil.copytree(ROOT / "codemods", tree / "hiera_rewrite" / "codemods", ignore=ignore)
        return tree, head + (" (+ uncommitted changes)" if dirty else "")
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True, check=True).stdout.strip()
    tree = CORPUS / ".hiera-rewrite" / sha
    if not (tree / "hiera_rewrite" / "__init__.py").is_file():
        tmp = tree.with_name(sha + ".part")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        blob = subprocess.run(["git", "-C", str(ROOT), "archive", sha], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            members = [m for m in tar.getmembers() if m.name.split("/")[0] in ("hiera_rewrite", "codemods")]
            tar.extractall(tmp, members=members)
        # the installed package holds codemods/ as hiera_rewrite.codemods (package-dir in pyproject)
        if (tmp / "codemods").is_dir() and not (tmp / "hiera_rewrite" / "codemods").exists():
            (tmp / "codemods").rename(tmp / "hiera_rewrite" / "codemods")
        shutil.rmtree(tree, ignore_errors=True)
        tmp.rename(tree)
    return tree, sha


def default_python() -> str:
    for cand in (ROOT / ".venv-corpus" / "bin" / "python", ROOT / ".venv" / "bin" / "python"):
        if cand.exists():
            return str(cand)
    return sys.executable


def tool_cmd(python: str) -> List[str]:
    return [python, "-P", "-m", "hiera_rewrite"]


def deps_dir(entry: Dict) -> Path:
    return CORPUS / ".deps" / entry["repo"].replace("/", "+")


def install_deps(entry: Dict, python: str) -> str:
    """The repo's own pins, apart from the shared venv (``deps``); return what happened."""
    specs = entry.get("deps") or []
    if not specs:
        return "no deps"
    dest = deps_dir(entry)
    shutil.rmtree(dest, ignore_errors=True)
    env = dict(os.environ, **(entry.get("deps_env") or {}))
    out = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(dest), *specs],
        env=env, capture_output=True, text=True,
    )
    if out.returncode:
        return f"pip exit {out.returncode}: {(out.stderr or out.stdout).strip().splitlines()[-1:]}"
    return "installed " + " ".join(specs)


def tool_env(tree: Path, entry: Optional[Dict] = None) -> Dict[str, str]:
    env = dict(os.environ)
    paths = [str(tree)]
    if entry is not None and entry.get("deps"):
        if not deps_dir(entry).is_dir():
            sys.exit(f"{entry['repo']}: its deps are not installed (run `deps --only {entry['repo']}` first)")
        paths.append(str(deps_dir(entry)))
    env["PYTHONPATH"] = os.pathsep.join(paths) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONHOME", None)
    return env


def discover(entry: Dict, python: str, tree: Path) -> str:
    out = subprocess.run(
        tool_cmd(python) + ["--check", "--output-format", "json", "."],
        cwd=folder(entry),
        env=tool_env(tree, entry),
        capture_output=True,
        text=True,
    )
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        return f"exit {out.returncode}: {(out.stderr or out.stdout).strip().splitlines()[-1:]}"
    files = sorted(f["path"].removeprefix("./") for f in doc["files"] if f.get("changed"))
    entry["hiera_files"] = files
    errors = [f["path"] for f in doc["files"] if f.get("error")]
    return f"exit {out.returncode}: {len(files)} would change" + (f", {len(errors)} errors" if errors else "")


CAUSE = re.compile(r"^\s*(not proven: .*|FAILED: .*|not built: .*|verify: NOT PROVEN: .*|verify: FAILED: .*)$")
FLAG = re.compile(r"(--kwargs '[^']*'|--factory [^\s',;]+(?:'[^']*')?|--package-root \S+|--input-shape [\d,]+|--verify-budget \S+)")


def parse(text: str, rc: Optional[int]) -> Dict[str, str]:
    verdict = None
    m = re.search(r"verification (PASSED|FAILED|NOT PROVEN)", text)
    if m:
        verdict = m.group(1)
    elif re.search(r"^hiera-rewrite: .* verified\.", text, re.M):
        verdict = "PASSED"
    if rc is None:
        verdict = "timeout"
    elif verdict is None:
        verdict = f"exit {rc}"
    lines = text.splitlines()
    cause = ""
    # the most telling line first: an unproven site's hint, a failure, a model not built
    for pattern in (r"^(not proven: .*)", r"^\s*(FAILED: .*)", r"^(verify: (?:NOT PROVEN|FAILED): .*)", r"^(not built: .*)",
                    r"^\s*(\S+\s+\S+\s+.*FAIL: .*)"):
        hit = next((re.match(pattern, l) for l in lines if re.match(pattern, l)), None)
        if hit:
            cause = hit.group(1).strip()
            break
    if not cause and verdict not in VERDICTS:
        tail = [l for l in lines if l.strip()]
        cause = tail[-1].strip() if tail else ""
    flag = ""
    m = FLAG.search(cause) or (FLAG.search(text) if verdict != "PASSED" else None)
    if m:
        flag = m.group(1)
    return {"verdict": verdict, "cause": cause, "flag": flag}


def run_one(entry: Dict, python: str, tree: Path, timeout: int) -> None:
    logs = CORPUS / ".logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / (entry["repo"].replace("/", "+") + ".log")
    if not entry.get("hiera_files"):
        entry.update(verdict="no files", seconds=0.0, cause="hiera-rewrite --check changes no file here", flag="")
        return
    cmd = tool_cmd(python) + ["--verify", "--check"] + entry["hiera_files"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=folder(entry), env=tool_env(tree, entry), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=timeout)
        rc: Optional[int] = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # the verify worker too
        text, _ = proc.communicate()
        rc = None
    seconds = time.monotonic() - t0
    log.write_text(f"$ cd {folder(entry)} && {' '.join(cmd)}\n# exit {rc}, {seconds:.1f}s\n{text}")
    entry.update(parse(text, rc), seconds=round(seconds, 1))


# ---------------------------------------------------------------- the table


def md_cell(text: str, limit: int = 260) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cause_of(entry: Dict) -> str:
    """The cause column: what stopped the proof; on a PASSED repo, a model verify could not
    build is only a note (its sites were proven through the other models)."""
    cause = entry.get("cause") or ""
    return f"(note) {cause}" if cause and entry.get("verdict") == "PASSED" else cause


def write_table(entries: List[Dict], rev_line: str, python: str) -> None:
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    counts: Dict[str, int] = {}
    for e in entries:
        v = e.get("verdict") or "not run"
        counts[v] = counts.get(v, 0) + 1
    order = [v for v in (*VERDICTS, "timeout") if v in counts] + sorted(v for v in counts if v not in (*VERDICTS, "timeout"))
    rows = [
        "# `hiera-rewrite --verify --check` on real Hiera forks (issue 31)",
        "",
        f"hiera-rewrite commit: `{rev_line}`; interpreter `{python}`; "
        f"each repo verified from its folder's root, {len(entries)} repos, timeout per repo "
        f"{entries[0].get('timeout', 180) if entries else 180} s.",
        "",
        "Summary: " + ", ".join(f"{v} {counts[v]}" for v in order) + ".",
        "",
        "A repo's own pins (column `deps`) were installed for it alone (`fork_corpus.py deps`); "
        "the others ran in the shared venv.",
        "",
        "| repo | commit | files | deps | verdict | seconds | cause |",
        "| --- | --- | --- | --- | --- | ---: | --- |",
    ]
    for e in entries:
        files = "<br>".join(e.get("hiera_files") or []) or "-"
        rows.append(
            f"| {e['repo']} | {(e.get('commit') or '')[:10]} | {files} | {md_cell(' '.join(e.get('deps') or []) or '-')} | "
            f"{e.get('verdict') or 'not run'} | "
            f"{e.get('seconds', '')} | {md_cell(cause_of(e))} |"
        )
    rows.append("")
    TABLE.write_text("\n".join(rows))


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("layout", "deps", "discover", "run", "reparse", "table", "carry"))
    parser.add_argument("names", nargs="*", help="carry: the repos to copy (owner/name, name, or a part of it)")
    parser.add_argument("--only", help="one repo: owner/name, name, or a part of it")
    parser.add_argument("--python", default=default_python(), help="interpreter that runs hiera-rewrite (default %(default)s)")
    parser.add_argument("--rev", default="HEAD", help="hiera-rewrite commit to run, or 'worktree' (default HEAD)")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per repo (default 180)")
    args = parser.parse_args()
    entries = load()
    picked = select(entries, args.only)

    if args.command == "layout":
        for e in picked:
            problem = layout(e)
            print(f"{e['repo']}: {problem or 'laid out at ' + e['commit'][:10]}", flush=True)
        save(entries)
        return 0
    if args.command == "carry":  # the laid-out repos, for a device call (benchmarks/corpus_cuda.sh)
        dest = TABLE.parent / "export"  # git-ignored (benchmarks/results/*/export/): third-party code
        shutil.rmtree(dest, ignore_errors=True)
        for name in args.names:
            for e in select(entries, name):
                shutil.copytree(folder(e).parent, dest / folder(e).parent.name, ignore=shutil.ignore_patterns("__pycache__"))
                print(f"{e['repo']}: copied to {dest / folder(e).parent.name}")
        return 0
    if args.command == "deps":
        for e in picked:
            print(f"{e['repo']}: {install_deps(e, args.python)}", flush=True)
        return 0
    if args.command == "reparse":  # verdict, cause and flag again from the saved logs, nothing run
        for e in picked:
            log = CORPUS / ".logs" / (e["repo"].replace("/", "+") + ".log")
            if log.is_file():
                head, _, text = log.read_text().partition("\n")
                code = re.match(r"# exit (-?\d+|None),", text)
                rc = None if not code or code.group(1) == "None" else int(code.group(1))
                e.update(parse(text.partition("\n")[2], rc))
        save(entries)
        args.command = "table"
    if args.command == "table":
        meta = json.loads((TABLE.parent / "run.json").read_text()) if (TABLE.parent / "run.json").is_file() else {}
        write_table(entries, meta.get("rev", "?"), meta.get("python", args.python))
        return 0

    tree, rev_line = tool_tree(args.rev)
    missing = [e["repo"] for e in picked if not folder(e).is_dir()]
    if missing:
        sys.exit("not laid out (run `layout` first): " + ", ".join(missing))
    if args.command == "discover":
        for e in picked:
            print(f"{e['repo']}: {discover(e, args.python, tree)}: {e.get('hiera_files')}", flush=True)
        save(entries)
        return 0

    for e in picked:
        print(f"{e['repo']}: verifying {len(e.get('hiera_files') or [])} files ...", flush=True)
        run_one(e, args.python, tree, args.timeout)
        e["timeout"] = args.timeout
        e["hiera_rewrite"] = rev_line
        print(f"  {e['verdict']}  {e['seconds']}s  {e['cause'][:200]}", flush=True)
        save(entries)  # partial results survive an interrupted run
    (TABLE.parent).mkdir(parents=True, exist_ok=True)
    revs = sorted({e.get("hiera_rewrite") for e in entries if e.get("hiera_rewrite")})
    (TABLE.parent / "run.json").write_text(json.dumps({"rev": ", ".join(revs), "python": args.python}) + "\n")
    write_table(entries, ", ".join(revs), args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
