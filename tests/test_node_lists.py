"""The proofs' fast node lists answer as the plain walks they replace (stop 51): a kind
tested by exact type (`_match.exact_types`) is isinstance, `nodes_of` is the source-order
filter of every node, and `walk` of a block (kept, or a slice of its module's list) is
libcst's own preorder.  Read on the installed upstream files and on the goldens' forks."""

from __future__ import annotations

from pathlib import Path
from typing import List

import libcst as cst
import pytest

from hiera_rewrite.codemods import _calls
from hiera_rewrite.codemods._match import exact_types
from hiera_rewrite.flow import subtree
from tests.upstream import upstream_dir

GOLDEN = Path(__file__).resolve().parent.parent / "golden"

# leaf kinds, abstract kinds, and tuples of both, as the codemods ask them
KINDS = [
    cst.Name, cst.Call, cst.Attribute, cst.Assign, cst.AssignTarget, cst.ClassDef, cst.FunctionDef, cst.ImportFrom,
    cst.BaseExpression, cst.BaseSmallStatement, cst.BaseCompoundStatement, cst.BaseSuite,
    (cst.Import, cst.ImportFrom), (cst.Call, cst.AssignTarget, cst.AugAssign), (cst.BaseExpression, cst.Param),
    _calls._STORES_AND_CALLS,
]


def _sources() -> List[Path]:
    try:
        upstream = sorted(upstream_dir().glob("*.py"))
    except ModuleNotFoundError:
        upstream = []
    return upstream + sorted(GOLDEN.glob("**/fork_*.py"))[:12]


@pytest.fixture(scope="module", params=_sources(), ids=lambda p: str(p.relative_to(GOLDEN)) if GOLDEN in p.parents else p.name)
def module(request):
    return cst.parse_module(request.param.read_bytes())


def test_a_kind_tested_by_exact_type_is_isinstance(module):
    nodes = list(subtree(module))
    for kind in KINDS:
        kinds = exact_types(*(kind if isinstance(kind, tuple) else (kind,)))
        assert [type(n) in kinds for n in nodes] == [isinstance(n, kind) for n in nodes], kind


def test_nodes_of_is_the_source_order_filter_of_every_node(module):
    nodes = list(subtree(module))
    for kind in KINDS:
        assert [id(n) for n in _calls.nodes_of(module, kind)] == [id(n) for n in nodes if isinstance(n, kind)], kind


def test_a_blocks_walk_is_libcsts_preorder_kept_or_sliced(module):
    blocks = [n for n in subtree(module) if isinstance(n, (cst.ClassDef, cst.FunctionDef, cst.IndentedBlock))]
    if not blocks:
        pytest.skip("no class, function or block")
    for block in blocks:
        expected = [id(n) for n in subtree(block)]
        assert [id(n) for n in _calls.walk(block)] == expected  # the kept list (no spans yet) ...
        assert [id(n) for n in _calls.walk(block)] == expected  # ... asked again
        assert [id(n) for n in _calls.walk_in(module, block)] == expected  # a slice of the module's list


def test_binds_finds_each_binding_form():
    module = cst.parse_module(
        "global g\n"
        "def f(p):\n"
        "    a = b = 1\n"
        "    c.d = 2\n"
        "    (e, [h, *i]) = x\n"
        "    j += 1\n"
        "    k: int = 3\n"
        "    if (m := 4): pass\n"
        "    for n in x: pass\n"
        "    with x as o, y: pass\n"
        "    del q\n"
        "    import r.s as t, u.v\n"
        "    try: pass\n"
        "    except E as w: pass\n"
        "    [z for y2 in x]\n"
        "    class C: pass\n"
        "    match x:\n"
        "        case [aa, *bb]: pass\n"
        "        case {**cc}: pass\n"
        "    nonlocal dd\n"
    )
    # (`c.d = 2` binds both names: the walk of a target over-approximates)
    bound = {"g", "f", "a", "b", "c", "d", "e", "h", "i", "j", "k", "m", "n", "o", "q", "t", "u", "w", "y2", "C", "aa", "bb", "cc", "dd"}
    for name in bound:
        assert _calls._binds(module, name), name
    for name in ("p", "x", "y", "z", "r", "s", "v", "E", "int", "ee"):  # read, a parameter, an import's other parts
        assert not _calls._binds(module, name), name
