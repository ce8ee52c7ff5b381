"""How the CLI prints what it did: ``--output-format text|json|github``.

``text``: one ``path:line:col: CODE message`` line per report and per error, then a
summary line, all on stderr (stdout is for data: a diff, or the file rewritten from
stdin).  ``json``: one JSON document, every file with every report and error, and
the summary; nothing else is printed.  ``github``: GitHub Actions workflow commands,
``::notice`` for an applied rewrite, ``::warning`` for a skipped one, ``::error`` for
a file that could not be processed, then the text summary on stderr.

The machine formats go to stdout, unless stdout carries data (``--diff``, or ``-``
without ``--check``): then to stderr.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any, Dict, List, Optional

from . import __version__
from .engine import FileResult, Report
from .files import FileError

FORMATS = ("text", "json", "github")
SKIPPED = "skipped: "


def reason(report: Report) -> Optional[str]:
    """Why a rewrite was not applied (None for an applied one)."""
    if report.applied:
        return None
    return report.message[len(SKIPPED):] if report.message.startswith(SKIPPED) else report.message


class Output:
    """The ``text`` format, and the interface of the others."""

    def __init__(self, quiet: bool = False, stream: Optional[IO[str]] = None) -> None:
        self.quiet = quiet
        self._stream = stream

    @property
    def stream(self) -> IO[str]:
        return self._stream if self._stream is not None else sys.stderr

    def file(self, name: str, result: FileResult) -> None:
        """The reports of one processed file (called before any error about it)."""
        if self.quiet:
            return
        for r in result.reports:
            print(f"{name}:{r.line}:{r.col}: {r.code} {r.message}", file=sys.stderr)

    def error(self, error: FileError, traceback: Optional[str] = None) -> None:
        if traceback:
            print(traceback, file=sys.stderr, end="")
        print(error, file=sys.stderr)

    def summary(self, line: str, counts: Dict[str, int], exit_code: int) -> None:
        print(line, file=sys.stderr)


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (command.ts)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (file=, title=...): also ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(kind: str, message: str, **properties: Any) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    return f"::{kind} {props}::{escape_data(message)}"


class GithubOutput(Output):
    """Annotations on the diff of a pull request: notices, warnings, errors."""

    def file(self, name: str, result: FileResult) -> None:
        if self.quiet:
            return
        for r in result.reports:
            kind = "notice" if r.applied else "warning"
            print(workflow_command(kind, r.message, file=name, line=r.line, col=r.col, title=r.code), file=self.stream)

    def error(self, error: FileError, traceback: Optional[str] = None) -> None:
        if traceback:
            print(traceback, file=sys.stderr, end="")
        print(
            workflow_command("error", error.reason, file=error.path, line=error.line, col=error.col, title="hiera-rewrite"),
            file=self.stream,
        )
        self.stream.flush()


class JsonOutput(Output):
    """One document at the end: ``{"version", "files": [...], "summary": {...}}``."""

    def __init__(self, quiet: bool = False, stream: Optional[IO[str]] = None) -> None:
        super().__init__(quiet, stream)
        self.files: List[Dict[str, Any]] = []
        self._last: Dict[str, Dict[str, Any]] = {}

    def _entry(self, name: str) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"path": name, "changed": None, "error": None, "reports": []}
        self.files.append(entry)
        self._last[name] = entry
        return entry

    def file(self, name: str, result: FileResult) -> None:
        entry = self._entry(name)
        entry["changed"] = result.changed
        entry["reports"] = [
            {
                "code": r.code,
                "line": r.line,
                "column": r.col,
                "message": r.message,
                "applied": r.applied,
                "reason": reason(r),
            }
            for r in result.reports
        ]

    def error(self, error: FileError, traceback: Optional[str] = None) -> None:
        # an error after the rewrite (a read-only file) belongs to that file's entry
        entry = self._last.get(error.path)
        if entry is None or entry["error"] is not None:
            entry = self._entry(error.path)
        entry["error"] = {"line": error.line, "column": error.col, "message": error.reason}
        if traceback:
            entry["error"]["traceback"] = traceback

    def summary(self, line: str, counts: Dict[str, int], exit_code: int) -> None:
        document = {
            "version": __version__,
            "files": self.files,
            "summary": {**counts, "exit_code": exit_code, "text": line},
        }
        json.dump(document, self.stream, indent=2)
        self.stream.write("\n")
        self.stream.flush()


def make_output(fmt: str, quiet: bool, data_on_stdout: bool) -> Output:
    if fmt == "text":
        return Output(quiet)
    stream = sys.stderr if data_on_stdout else sys.stdout
    return {"json": JsonOutput, "github": GithubOutput}[fmt](quiet, stream)
