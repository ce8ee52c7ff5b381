"""The files a plan reads are parsed and named once for every code's plan of a file.

Every rewrite code plans the file in its own PlanContext, and all of them share the
facts they compute (PlanContext.fact).  A fact may hold a module another file's text
was parsed into (imported_modules' list, receiver_modules').  Before stop 49 each plan
parsed and named the siblings itself, so the next code's plan met a module the first
had named as a module of no name: its imports were not read, and a data attribute
stored by hiera.py (`self.q_stride`) was not found stored anywhere.  CI of stop 48:
planned beside the rewritten hiera.py, the upstream MAE lost its four HR005 sites
in-process, where the CLI (other facts first) kept them.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from hiera_rewrite.codemods import _calls
from hiera_rewrite.engine import rewrite_bytes
from hiera_rewrite.files import sibling_reader
from hiera_rewrite.index import ModuleIndex
from hiera_rewrite.rewrite import PlanContext
from tests.upstream import upstream_dir


def test_a_sibling_one_codes_plan_read_is_named_in_the_next(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("from . import c\nX = 1\n")
    (pkg / "c.py").write_text("Y = 2\n")
    path = pkg / "a.py"
    index = ModuleIndex(cst.parse_module(path.read_bytes()))
    shared: dict = {}
    first, then = (
        PlanContext(index, code, lambda s, i: None, ("HR003", "HR005"), sibling_reader(path), set(), shared) for code in ("HR003", "HR005")
    )
    b = first.sibling("b")
    assert b is not None and then.name_of(b) == "b"
    # the walk from b, asked in the second plan, reads b's own imports (c)
    found, why = _calls.imported_modules(then, [b])
    assert why is None and "c" in {name.lstrip(".") for name, _ in found}, (found, why)


def test_the_upstream_mae_beside_the_rewritten_hiera_keeps_every_site():
    folder = upstream_dir()

    def original(name: str):
        path = folder / f"{name}.py"
        return path.read_bytes() if path.is_file() else None

    hiera = rewrite_bytes(original("hiera"), siblings=original)
    assert hiera.changed

    def rewritten(name: str):
        return hiera.output if name == "hiera" else original(name)

    reports = rewrite_bytes(original("hiera_mae"), siblings=rewritten).reports
    refused = [r for r in reports if not r.applied]
    assert not refused and sum(r.code == "HR005" for r in reports) == 4, refused or reports
