"""ModuleIndex answers what libcst's metadata providers and visitors answer.

The engine replaced libcst's PositionProvider, ParentNodeProvider, QualifiedNameProvider
and module-wide visitors with one recording codegen (hiera_rewrite/index.py) for speed.
These tests compare it with libcst itself on every golden input and on fixtures
written for the name resolution rules.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import List, Tuple

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from hiera_rewrite import index as index_module
from hiera_rewrite.index import ModuleIndex

GOLDEN = sorted((Path(__file__).resolve().parent.parent / "golden").rglob("*.in.py"))


def _module(path: Path) -> cst.Module:
    return cst.parse_module(path.read_bytes())


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_spans_and_parents_match_libcst(path: Path) -> None:
    module = _module(path)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    index = ModuleIndex(module)
    assert positions, "libcst found no nodes"
    for node, expected in positions.items():
        if type(node) in index_module._UNRECORDED:
            assert index.parent(node) is None
            continue
        span = index.span(node)
        assert (span.start.line, span.start.column, span.end.line, span.end.column) == (
            expected.start.line, expected.start.column, expected.end.line, expected.end.column,
        ), f"{type(node).__name__} at {expected.start}"
        assert index.parent(node) is parents.get(node), type(node).__name__


class _Recorder(cst.CSTVisitor):
    """Records its calls; refuses to enter `if` statements (pruning)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[Tuple[str, int]] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(("visit Call", id(node)))

    def leave_Call(self, original_node: cst.Call) -> None:
        self.calls.append(("leave Call", id(original_node)))

    def visit_If(self, node: cst.If) -> bool:
        self.calls.append(("visit If", id(node)))
        return False

    def leave_If(self, original_node: cst.If) -> None:
        self.calls.append(("leave If", id(original_node)))

    def visit_Name(self, node: cst.Name) -> None:
        self.calls.append(("visit Name", id(node)))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.calls.append(("visit FunctionDef", id(node)))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.calls.append(("leave FunctionDef", id(original_node)))


@pytest.mark.parametrize("scan", [0, 10**9], ids=["by-type", "node-by-node"])
@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_visit_replays_libcst_order(path: Path, scan: int, monkeypatch) -> None:
    # ModuleIndex.visit finds nodes by type in large trees and walks small ones node
    # by node; both must replay libcst's calls exactly.
    monkeypatch.setattr(index_module, "_SCAN", scan)
    module = _module(path)
    index = ModuleIndex(module)
    expected, replayed = _Recorder(), _Recorder()
    module.visit(expected)
    index.visit(replayed)
    assert expected.calls and replayed.calls == expected.calls
    # subtrees: every function and class, and every top-level statement
    roots = [*module.body, *index.nodes(cst.FunctionDef), *index.nodes(cst.ClassDef)]
    for root in roots:
        expected, replayed = _Recorder(), _Recorder()
        root.visit(expected)
        index.visit(replayed, root)
        assert replayed.calls == expected.calls


class _WhitespaceRecorder(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.calls: List[Tuple[str, int]] = []

    def visit_Newline(self, node: cst.Newline) -> None:
        self.calls.append(("visit Newline", id(node)))

    def leave_SimpleWhitespace(self, original_node: cst.SimpleWhitespace) -> None:
        self.calls.append(("leave SimpleWhitespace", id(original_node)))


def test_visitors_of_unrecorded_leaves_are_run_by_libcst() -> None:
    module = _module(GOLDEN[0])
    index = ModuleIndex(module)
    expected, replayed = _WhitespaceRecorder(), _WhitespaceRecorder()
    module.visit(expected)
    index.visit(replayed)
    assert expected.calls and replayed.calls == expected.calls
    func = index.nodes(cst.FunctionDef)[0]
    expected, replayed = _WhitespaceRecorder(), _WhitespaceRecorder()
    func.visit(expected)
    index.visit(replayed, func)
    assert expected.calls and replayed.calls == expected.calls
    with pytest.raises(ValueError):
        index.nodes(cst.SimpleWhitespace)


def _resolve(source: str, callee_line: str) -> set:
    """Qualified names of the callee of the call on the line containing ``callee_line``."""
    module = cst.parse_module(textwrap.dedent(source))
    index = ModuleIndex(module)
    for call in index.nodes(cst.Call):
        if index.position(call).line == _line_of(module, callee_line):
            return index.qualified_names(call.func)
    raise AssertionError(f"no call on {callee_line!r}")


def _line_of(module: cst.Module, text: str) -> int:
    return next(i for i, line in enumerate(module.code.splitlines(), 1) if text in line)


SDPA = "torch.nn.functional.scaled_dot_product_attention"


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch.nn.functional as F", "F.scaled_dot_product_attention(q, k, v)"),
        ("import torch", "torch.nn.functional.scaled_dot_product_attention(q, k, v)"),
        ("import torch.nn.functional", "torch.nn.functional.scaled_dot_product_attention(q, k, v)"),
        ("from torch.nn import functional as F", "F.scaled_dot_product_attention(q, k, v)"),
        ("from torch.nn import functional", "functional.scaled_dot_product_attention(q, k, v)"),
        ("from torch.nn.functional import scaled_dot_product_attention as sdpa", "sdpa(q, k, v)"),
        ("from torch.nn.functional import scaled_dot_product_attention", "scaled_dot_product_attention(q, k, v)"),
    ],
)
def test_import_spellings_resolve(imports: str, call: str) -> None:
    source = f"{imports}\n\ndef f(q, k, v):\n    return {call}\n"
    assert _resolve(source, call) == {SDPA}


@pytest.mark.parametrize(
    "source",
    [
        # a parameter named like the module
        "import torch.nn.functional as F\ndef f(F, q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        # reassigned anywhere in the file
        "import torch.nn.functional as F\nF = object()\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        "try:\n    import torch.nn.functional as F\nexcept ImportError:\n    F = None\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        # a loop target, a with target, del, global
        "import torch.nn.functional as F\nfor F in []:\n    pass\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        "import torch.nn.functional as F\ndef g():\n    with open('x') as F:\n        pass\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        "import torch.nn.functional as F\ndef g():\n    global F\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        "import torch.nn.functional as F\ndel F\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        "import torch.nn.functional as F\ndef g(*F):\n    pass\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        "import torch.nn.functional as F\nx = [F for F in range(3)]\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        # imported in another function only: not visible here
        "def g():\n    import torch.nn.functional as F\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        # imported in a class body: not visible in its methods
        "class A:\n    import torch.nn.functional as F\n    def f(self, q):\n        return F.scaled_dot_product_attention(q, q, q)\n",
        # not imported at all
        "def f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        # a relative import of a local module of that name
        "from . import functional as F\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
        # a method of some object
        "def f(self, q):\n    return self.scaled_dot_product_attention(q, q, q)\n",
    ],
)
def test_shadowed_or_unimported_names_do_not_resolve(source: str) -> None:
    assert SDPA not in _resolve(source, "return ")


def test_import_inside_the_calling_function_resolves() -> None:
    source = "def f(q):\n    import torch.nn.functional as F\n    return F.scaled_dot_product_attention(q, q, q)\n"
    assert _resolve(source, "return ") == {SDPA}


def test_reads_do_not_block_resolution() -> None:
    source = (
        "import torch.nn.functional as F\n"
        "assert hasattr(F, 'scaled_dot_product_attention')\n"
        "G = F if F else None\n"
        "def f(q, fn=F.softmax):\n"
        "    print(F, F.relu, [F.gelu], F[0] if F else -F)\n"
        "    return F.scaled_dot_product_attention(q, q, q)\n"
    )
    assert _resolve(source, "return ") == {SDPA}
