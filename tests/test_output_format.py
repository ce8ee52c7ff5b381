"""``--output-format json|github`` through the real console script (a subprocess).

The expected reports come from the engine (``rewrite_bytes``) and from a text-mode run
of the same command, so these tests check that the machine formats carry exactly what
the text lines say, with the same exit codes, wherever the files and the data go.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from hiera_rewrite.engine import rewrite_bytes
from hiera_rewrite.output import escape_data, escape_property, workflow_command

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "hiera-rewrite"
CHANGES = (ROOT / "golden/attention/windowed_basic.in.py").read_bytes()
SKIPS = (ROOT / "golden/attention/lookalike_attn_mask_dropout.in.py").read_bytes()
BROKEN = b"import torch\n\ndef f(x:\n    return x\n"
TEXT_LINE = re.compile(r"^(?P<path>.+):(?P<line>\d+):(?P<col>\d+): (?P<rest>.*)$")


def run(*args: str, cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([str(SCRIPT), *args], cwd=cwd, input=stdin, capture_output=True, env=env, timeout=120)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def _tree(tmp_path: Path) -> Path:
    """A changing file, a file with skipped spots whose name has a comma and a colon,
    and a file that does not parse."""
    (tmp_path / "a.py").write_bytes(CHANGES)
    (tmp_path / "b,c:d.py").write_bytes(SKIPS)
    (tmp_path / "bad.py").write_bytes(BROKEN)
    return tmp_path


def _engine_reports(data: bytes) -> List[Dict[str, Any]]:
    out = []
    for r in rewrite_bytes(data).reports:
        reason = None if r.applied else r.message[len("skipped: "):]
        out.append({"code": r.code, "line": r.line, "column": r.col, "message": r.message, "applied": r.applied, "reason": reason})
    return out


def _as_text(document: Dict[str, Any]) -> List[str]:
    """The text lines a JSON document stands for (without the summary)."""
    lines = []
    for f in document["files"]:
        for r in f["reports"]:
            lines.append(f"{f['path']}:{r['line']}:{r['column']}: {r['code']} {r['message']}")
        if f["error"]:
            e = f["error"]
            lines.append(f"{f['path']}:{e['line']}:{e['column']}: {e['message']}")
    return lines


def test_json_check_lists_every_report_error_and_the_summary(tmp_path):
    _tree(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    args = ("--check", "a.py", "b,c:d.py", "bad.py", "missing.py")
    proc = run("--output-format", "json", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == b""  # the document is the only output
    document = json.loads(proc.stdout)

    by_path = {f["path"]: f for f in document["files"]}
    assert list(by_path) == ["missing.py", "a.py", "b,c:d.py", "bad.py"]
    assert by_path["a.py"]["changed"] is True and by_path["a.py"]["error"] is None
    assert by_path["a.py"]["reports"] == _engine_reports(CHANGES) and any(r["applied"] for r in by_path["a.py"]["reports"])
    skipped = by_path["b,c:d.py"]["reports"]
    assert by_path["b,c:d.py"]["changed"] is False
    assert skipped == _engine_reports(SKIPS) and skipped and all(not r["applied"] and r["reason"] for r in skipped)
    for name in ("missing.py", "bad.py"):
        assert by_path[name]["changed"] is None and by_path[name]["reports"] == []
    assert by_path["missing.py"]["error"] == {"line": 1, "column": 1, "message": "no such file or directory"}
    assert by_path["bad.py"]["error"]["line"] == 3 and by_path["bad.py"]["error"]["message"].startswith("cannot parse: ")

    # the same facts as the text format, the same exit code, nothing written
    text = run(*args, cwd=tmp_path)
    assert text.returncode == 2
    text_lines = text.stderr.decode().splitlines()
    assert _as_text(document) == text_lines[:-1]
    assert document["summary"] == {"changed": 1, "unchanged": 1, "errors": 2, "exit_code": 2, "text": text_lines[-1]}
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before

    # -j 2: the same document
    parallel = run("--output-format", "json", "-j", "2", *args, cwd=tmp_path)
    assert parallel.returncode == 2 and json.loads(parallel.stdout) == document


def test_json_in_place_with_a_read_only_file(tmp_path):
    (tmp_path / "a.py").write_bytes(CHANGES)
    (tmp_path / "ro.py").write_bytes(CHANGES)
    (tmp_path / "ro.py").chmod(stat.S_IRUSR)  # refused by its mode, even for root
    proc = run("--output-format", "json", "a.py", "ro.py", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == b"", proc.stderr
    document = json.loads(proc.stdout)
    assert (tmp_path / "a.py").read_bytes() == rewrite_bytes(CHANGES).output
    assert (tmp_path / "ro.py").read_bytes() == CHANGES
    (a, ro) = document["files"]
    assert a["path"] == "a.py" and a["changed"] is True and a["error"] is None
    # the write failure belongs to the file's entry, with its reports
    assert ro["path"] == "ro.py" and ro["changed"] is True and ro["reports"] == a["reports"]
    assert ro["error"] == {"line": 1, "column": 1, "message": "file is read-only, not rewritten"}
    assert document["summary"]["changed"] == 1 and document["summary"]["errors"] == 1


def test_json_goes_to_stderr_when_stdout_carries_data(tmp_path):
    (tmp_path / "a.py").write_bytes(CHANGES)
    diff = run("--diff", "--output-format", "json", "a.py", cwd=tmp_path)
    assert diff.returncode == 1
    assert diff.stdout.startswith(b"--- a/a.py\n+++ b/a.py\n")
    assert json.loads(diff.stderr)["files"][0]["reports"] == _engine_reports(CHANGES)

    piped = run("--output-format", "json", "-", cwd=tmp_path, stdin=CHANGES)
    assert piped.returncode == 1 and piped.stdout == rewrite_bytes(CHANGES).output
    (entry,) = json.loads(piped.stderr)["files"]
    assert entry["path"] == "<stdin>" and entry["reports"] == _engine_reports(CHANGES)

    # with --check, stdin's verdict is on stdout, and a broken input is not echoed
    checked = run("--check", "--output-format", "json", "-", cwd=tmp_path, stdin=BROKEN)
    assert checked.returncode == 2 and checked.stderr == b""
    (entry,) = json.loads(checked.stdout)["files"]
    assert entry["error"]["line"] == 3 and entry["error"]["message"].startswith("cannot parse: ")
    # without --check a broken input is still passed through (a filter loses no code)
    echoed = run("--output-format", "json", "-", cwd=tmp_path, stdin=BROKEN)
    assert echoed.returncode == 2 and echoed.stdout == BROKEN
    assert json.loads(echoed.stderr)["summary"]["errors"] == 1


def _expected_github(files: Dict[str, bytes]) -> List[str]:
    lines = []
    for name, data in files.items():
        for r in rewrite_bytes(data).reports:
            kind = "notice" if r.applied else "warning"
            props = f"file={name.replace(',', '%2C').replace(':', '%3A')},line={r.line},col={r.col},title={r.code}"
            lines.append(f"::{kind} {props}::{r.message}")
    return lines


def test_github_annotations(tmp_path):
    _tree(tmp_path)
    proc = run("--check", "--output-format", "github", "a.py", "b,c:d.py", "bad.py", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stdout.decode().splitlines()
    expected = _expected_github({"a.py": CHANGES, "b,c:d.py": SKIPS})
    assert lines[:-1] == expected
    assert any(line.startswith("::notice file=a.py,") for line in expected)
    assert any(line.startswith("::warning file=b%2Cc%3Ad.py,line=") for line in expected)
    assert re.match(r"^::error file=bad\.py,line=3,col=\d+,title=hiera-rewrite::cannot parse: ", lines[-1]), lines[-1]
    # the text summary stays on stderr, and nothing else
    assert proc.stderr.decode().splitlines() == ["hiera-rewrite: 1 file would be rewritten, 1 unchanged, 1 error."]

    # -q: only the errors
    quiet = run("--check", "-q", "--output-format", "github", "a.py", "b,c:d.py", "bad.py", cwd=tmp_path)
    assert quiet.returncode == 2 and quiet.stdout.decode().splitlines() == lines[-1:]

    # --diff: the diff on stdout, the annotations on stderr before the summary
    diff = run("--diff", "--output-format", "github", "a.py", cwd=tmp_path)
    assert diff.returncode == 1 and diff.stdout.startswith(b"--- a/a.py\n")
    assert diff.stderr.decode().splitlines()[:-1] == _expected_github({"a.py": CHANGES})


def test_workflow_command_escaping():
    """GitHub's rules (actions/toolkit command.ts): data escapes %, CR, LF; properties
    also : and ,.  Escaping % first keeps an escaped sequence from being read back."""
    assert escape_data("50% done\r\nnext: a,b") == "50%25 done%0D%0Anext: a,b"
    assert escape_property("C:\\x,y%0A\n") == "C%3A\\x%2Cy%250A%0A"
    assert workflow_command("warning", "a\nb", file="d,e:f.py", line=3, col=4, title="HR001") == (
        "::warning file=d%2Ce%3Af.py,line=3,col=4,title=HR001::a%0Ab"
    )


@pytest.mark.parametrize("fmt", ["json", "github"])
@pytest.mark.parametrize("mode", ["--verify", "--export"])
def test_machine_formats_refused_where_unsupported(tmp_path, fmt, mode):
    (tmp_path / "a.py").write_bytes(CHANGES)
    args = ["--verify", "a.py"] if mode == "--verify" else ["--export", str(tmp_path / "out")]
    proc = run("--output-format", fmt, *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"--output-format {fmt} is not supported with {mode}" in proc.stderr.decode()
    assert not (tmp_path / "out").exists() and (tmp_path / "a.py").read_bytes() == CHANGES


def test_help_documents_the_formats(tmp_path):
    out = run("--help", cwd=tmp_path).stdout.decode()
    assert "--output-format {text,json,github}" in out
    assert "::notice file=" in out and '"reports": [{"code", "line", "column", "message"' in out
