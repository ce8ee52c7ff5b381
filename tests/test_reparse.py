"""The self-check parses only the changed top-level statements again (engine._reparse).

Its splice of re-parsed and unchanged statements must be exactly the module a parse
of the whole output gives (the tree a fresh run of the tool would plan on), or it must
decline (None) so the engine parses the whole output.  Checked on every golden input
and on fixtures written for the places where libcst's parse depends on context:
comments above a statement (a file's header), block footers, trailing blank lines,
newline and indentation styles.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from typing import List, Optional

import libcst as cst
import pytest

from hiera_rewrite import engine
from hiera_rewrite.index import ModuleIndex

GOLDEN = sorted((Path(__file__).resolve().parent.parent / "golden").rglob("*.in.py"))


def _assert_splice_is_a_parse(old: cst.Module, new: cst.Module) -> bool:
    """True when the splice was used (and is right); False when it declined."""
    old_index = ModuleIndex(old)
    old_index.code  # recorded before the splice, as in the engine
    output, index = engine._reparse(old_index, new)
    assert output == new.bytes
    full = engine._parse(output).module  # a fresh run's parse (libcst's, and a final \r kept)
    assert index.module.deep_equals(full)
    assert index.code == full.code
    _assert_same_index(index, ModuleIndex(index.module))
    return engine._splice_reparsed(old, new) is not None


def _assert_same_index(reused: ModuleIndex, fresh: ModuleIndex) -> None:
    """An index that copied the unchanged statements' records from the old module's
    index holds what recording the whole module gives."""
    a, b = reused._recorded(), fresh._recorded()
    assert len(a.order) == len(b.order) and all(x is y for x, y in zip(a.order, b.order))
    assert a.index_of == b.index_of
    assert (a.parent_of, a.end, a.starts, a.stops) == (b.parent_of, b.end, b.starts, b.stops)
    assert a.names.keys() == b.names.keys()
    assert all(all(x is y for x, y in zip(a.names[k], b.names[k])) and len(a.names[k]) == len(b.names[k]) for k in a.names)
    assert len(a.imports) == len(b.imports) and all(x is y for x, y in zip(a.imports, b.imports))
    assert a.tokens == b.tokens and a.top == b.top and a.dropped_final_newline == b.dropped_final_newline
    assert reused.code == fresh.code == fresh.module.code


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_splice_equals_full_parse(path: Path) -> None:
    index = engine._parse(path.read_bytes())
    _, new = engine._rewrite_module(index, engine.selected_codes(), engine.DEFAULT_LINE_LENGTH)
    if new is None:
        pytest.skip("nothing rewritten")
    _assert_splice_is_a_parse(index.module, new)
    _assert_same_index(index, ModuleIndex(index.module))


def test_splice_is_used_on_upstream_files() -> None:
    """Guard against a splice that always declines (the tests above would still pass)."""
    spec = importlib.util.find_spec("hiera")
    assert spec is not None and spec.origin is not None
    used = []
    for name in ("hiera.py", "hiera_mae.py", "hiera_utils.py"):
        index = engine._parse((Path(spec.origin).parent / name).read_bytes())
        _, new = engine._rewrite_module(index, engine.every_code(), engine.DEFAULT_LINE_LENGTH)
        assert new is not None, name
        used.append(_assert_splice_is_a_parse(index.module, new))
    assert all(used)


class _Bump(cst.CSTTransformer):
    def leave_Integer(self, original_node: cst.Integer, updated_node: cst.Integer) -> cst.Integer:
        return updated_node.with_changes(value=str(int(updated_node.value) + 1))


def _changed(source: str, marker: str = "CHANGE", insert: Optional[str] = None) -> "tuple[cst.Module, cst.Module]":
    """The module, and a copy whose top-level statements holding ``marker`` have their
    integers bumped (and ``insert`` parsed and put before each of them)."""
    old = cst.parse_module(source)
    body: List[cst.BaseStatement] = []
    for stmt in old.body:
        if marker in old.code_for_node(stmt):
            if insert is not None:
                body.append(cst.parse_statement(insert))
            body.append(stmt.visit(_Bump()))  # type: ignore[arg-type]
        else:
            body.append(stmt)
    return old, old.with_changes(body=body)


CASES = {
    "middle": """
        import os

        x = 1  # CHANGE

        y = 2
    """,
    "comments_above_changed": """
        import os
        # a comment block
        # right above

        # CHANGE below
        def f():
            return 1
        z = 3
    """,
    "previous_block_footer": """
        import os
        def f():
            return 1
            # indented: f's footer
        # dedented: g's leading lines
        def g():  # CHANGE
            return 2
    """,
    "changed_block_footer_then_dedented": """
        import os
        def f():  # CHANGE
            return 1
            # indented footer of the changed def

        # dedented comment before h

        def h():
            return 3
    """,
    "last_statement_with_footer": """
        import os
        def f():  # CHANGE
            return 1
            # indented footer at the end of the file
    """,
    "last_statement_blank_lines": "import os\ndef f():  # CHANGE\n    return 1\n\n\n",
    "last_statement_trailing_comment": "import os\ndef f():  # CHANGE\n    return 1\n# a dedented comment at the end\n",
    "no_final_newline": "import os\nx = 1  # CHANGE",
    "crlf": "import os\r\n\r\ndef f():  # CHANGE\r\n    return 1\r\n\r\ny = 2\r\n",
    "tabs": "import os\n\ndef f():  # CHANGE\n\treturn 1\n\nclass A:\n\tz = 2\n",
    "tabs_simple_changed": "import os\n\nx = 1  # CHANGE\n\nclass A:\n\tz = 2\n",
    "two_space": "import os\n\ndef f():  # CHANGE\n  if x:\n    return 1\n  return 2\n",
    "mixed_indent_blocks": "import os\n\ndef f():  # CHANGE\n  return 1\n\ndef g():\n    return 2\n",
    "first_statement_changed": "# header\nx = 1  # CHANGE\ny = 2\n",
    "adjacent_runs": "import os\na = 1  # CHANGE\nb = 2  # CHANGE\nc = 3\nd = 4  # CHANGE\n",
    "backslash_and_semicolons": "import os\nx = 1 + \\\n    2  # CHANGE\ny = 3; z = 4  # CHANGE\n",
    "decorated_with_comments": """
        import os

        # above the decorator
        @decorate(1)  # CHANGE
        # between decorator and def
        def f():
            return 2
    """,
    "form_feed": "import os\n\x0c\nx = 1  # CHANGE\n",
    "nested_footer_levels": """
        import os
        class A:  # CHANGE
            def f(self):
                return 1
                # deepest
            # class level
        # module level
        y = 2
    """,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_splice_equals_full_parse(name: str) -> None:
    source = CASES[name]
    if source.startswith("\n"):
        source = textwrap.dedent(source).lstrip("\n")
    old, new = _changed(source)
    assert new.code != old.code, "fixture changes nothing"
    _assert_splice_is_a_parse(old, new)


@pytest.mark.parametrize("name", ["middle", "comments_above_changed", "previous_block_footer", "crlf"])
def test_splice_with_inserted_statement(name: str) -> None:
    source = textwrap.dedent(CASES[name]).lstrip("\n")
    old, new = _changed(source, insert="def helper():\n    return 0\n")
    assert len(new.body) > len(old.body)
    assert _assert_splice_is_a_parse(old, new)


def _indented_comment(text: str) -> cst.EmptyLine:
    return cst.EmptyLine(whitespace=cst.SimpleWhitespace("    "), comment=cst.Comment(text))


@pytest.mark.parametrize("case", ["kept_after", "module_footer", "run_start", "blank_block_footer", "removed_between"])
def test_splice_declines_where_a_block_could_take_the_comments(case: str) -> None:
    """An indented comment line after a block belongs to that block: a statement that
    becomes a block (or follows one) moves such lines in a whole-output parse."""
    new_def = cst.parse_statement("def x():\n    return 1\n")
    if case == "kept_after":  # `x = 1` becomes a def; y's indented comment is now the def's
        old = cst.parse_module("import os\nx = 1\n    # indented\ny = 2\n")
        new = old.with_changes(body=[old.body[0], new_def, old.body[2]])
    elif case == "module_footer":
        old = cst.parse_module("import os\nx = 1\n    # indented, at the end\n")
        new = old.with_changes(body=[old.body[0], new_def])
    elif case == "blank_block_footer":  # a built def whose block ends in a blank line:
        # alone, libcst gives that line to the module's footer; in the file, to y
        old = cst.parse_module("import os\nx = 1\ny = 2\n")
        built = new_def.with_changes(body=new_def.body.with_changes(footer=[cst.EmptyLine(indent=False)]))
        new = old.with_changes(body=[old.body[0], built, old.body[2]])
    elif case == "removed_between":  # `x = 1` removed: y's indented comment now follows f
        old = cst.parse_module("import os\ndef f():\n    return 1\nx = 1\n    # indented\ny = 2\n")
        new = old.with_changes(body=[old.body[0], old.body[1], old.body[3]])
    else:  # a changed statement with an indented comment above it, after a def
        old = cst.parse_module("import os\ndef f():\n    return 1\nx = 1\n")
        changed = old.body[2].with_changes(leading_lines=[_indented_comment("# deeper")])
        new = old.with_changes(body=[old.body[0], old.body[1], changed])
    assert engine._splice_reparsed(old, new) is None
    assert not _assert_splice_is_a_parse(old, new)  # the whole-output parse is right


def test_splice_declines_when_the_first_statement_changes() -> None:
    old, new = _changed(CASES["first_statement_changed"])
    assert engine._splice_reparsed(old, new) is None
    _assert_splice_is_a_parse(old, new)


def test_splice_used_for_a_plain_change() -> None:
    old, new = _changed(textwrap.dedent(CASES["middle"]).lstrip("\n"))
    assert _assert_splice_is_a_parse(old, new)


# -- random programs ------------------------------------------------------------------

hypothesmith = pytest.importorskip("hypothesmith")
from hypothesis import HealthCheck, Phase, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


class _Copy(cst.CSTTransformer):
    """Rebuild every node: the same code, all new objects (a "changed" statement)."""

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        return updated_node.deep_clone()


# no shrinking: a failing random program is reported as drawn (shrinking one took minutes)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(hypothesmith.from_grammar(), st.data())
def test_random_program_splice_equals_full_parse(source, data) -> None:
    """Any top-level statements of a random program counted as changed (new objects,
    same code): the splice re-parses them in isolation, and that must be what a parse
    of the whole program gives (or the splice declines)."""
    try:
        # an unchanged first statement: the splice declines when the first one changes
        old = cst.parse_module("import os\n" + source)
        compile(old.code, "<random>", "exec", dont_inherit=True)
    except Exception:  # hypothesmith's grammar admits a few programs Python rejects
        assume(False)
    # comment and blank lines above some statements (the first one's go to the header)
    above = data.draw(st.lists(st.sampled_from(["", "#", "\n", "# c\n\n", "\n# c\n"]), min_size=len(old.body), max_size=len(old.body)))
    lines = [[cst.EmptyLine(comment=cst.Comment(t.strip())) if t.strip() else cst.EmptyLine() for t in text.splitlines() or ([text] if text else [])] for text in above]
    decorated = old.with_changes(body=[s.with_changes(leading_lines=[*extra, *s.leading_lines]) for s, extra in zip(old.body, lines)])
    old = cst.parse_module(decorated.code)
    changed = [False, *data.draw(st.lists(st.booleans(), min_size=len(old.body) - 1, max_size=len(old.body) - 1))]
    body = [stmt.visit(_Copy()) if flag else stmt for stmt, flag in zip(old.body, changed)]
    _assert_splice_is_a_parse(old, old.with_changes(body=body))
