"""Property tests.

* Random valid Python (hypothesmith, and a strategy of our own built from near-miss
  idioms) is never changed and never crashes the tool.
* Mutations of the golden attention case that keep its meaning (consistent renaming
  of locals, reformatting with black at other line lengths) are still rewritten, to
  code that computes the same outputs and gradients.
"""

from __future__ import annotations

import keyword
import types
import warnings
from pathlib import Path

import black
import libcst as cst
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hiera_rewrite.engine import rewrite_bytes

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_IN = (ROOT / "golden/attention/windowed_basic.in.py").read_text("utf-8")

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)


def _compiles(data: bytes) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, "<random>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _assert_untouched(data: bytes) -> None:
    result = rewrite_bytes(data)  # InputError or InternalError would fail the test
    assert result.output == data
    assert result.changes == [], result.changes


# -- random valid Python ---------------------------------------------------------

hypothesmith = pytest.importorskip("hypothesmith")


@settings(max_examples=30, **SETTINGS)
@given(hypothesmith.from_grammar())
def test_random_grammar_programs_are_untouched(source):
    data = source.encode("utf-8", "surrogatepass")
    assume(_compiles(data))
    _assert_untouched(data)


@settings(max_examples=8, **SETTINGS)
@given(hypothesmith.from_node())
def test_random_cst_programs_are_untouched(source):
    data = source.encode("utf-8", "surrogatepass")
    assume(_compiles(data))
    _assert_untouched(data)


# -- near misses of the idioms ----------------------------------------------------------

PARAMS = ["x", "y", "z", "w", "mask"]  # never assigned: receivers and SDPA arguments
OUTS = ["a", "b", "c", "qkv", "q", "k", "v", "out"]  # assigned by the statements

param = st.sampled_from(PARAMS)
out = st.sampled_from(OUTS)
small = st.integers(-3, 6).map(str)
name_or_int = st.one_of(small, param)

NEAR_MISSES = [
    # 5-D qkv permute, q/k/v unpacked, but no SDPA call consumes them
    st.builds("{} = {}.reshape(B, -1, {}, 3, {}, {}).permute(3, 0, 4, 2, 1, 5)".format, out, param, name_or_int, small, small),
    st.builds("{0}, {1}, {2} = {3}[0], {3}[1], {3}[2]".format, out, out, out, out),
    st.builds("{0}, {1}, {2} = {3}.unbind(0)".format, out, out, out, out),
    # SDPA on tensors that do not come from a 5-D permute
    st.builds("{} = F.scaled_dot_product_attention({}, {}, {})".format, out, param, param, param),
    st.builds("{} = torch.nn.functional.scaled_dot_product_attention({}, {}, {}, is_causal=True)".format, out, param, param, param),
    st.builds("{} = {}.transpose(1, 3).reshape(B, -1, {})".format, out, param, name_or_int),
    # max without .values, or not over a view/reshape, or not a plain dim
    st.builds("{} = {}.max(dim={})".format, out, param, small),
    st.builds("{} = {}.max(dim={}).values".format, out, param, small),
    st.builds("{} = {}.max({})[1]".format, out, param, small),
    st.builds("{} = {}.view({}, -1).max(dim={}, keepdim=True).values".format, out, param, small, small),
    st.builds("{} = {}.view({}, -1).max({}, True)[0]".format, out, param, small, small),
    st.builds("{} = {}.view({}, -1).min(dim={}).values".format, out, param, small, small),
    st.builds("{} = {}.view({}, -1).max(dim={}).indices".format, out, param, small, small),
    st.builds("{} = {}.reshape({}, -1).max({}).values".format, out, param, small, param),
    st.builds("{} = torch.max({}.view({}, -1), dim={}).values".format, out, param, small, small),
    st.builds("{} = {}.view({}, -1).max(dim={})[0:1]".format, out, param, small, small),
    st.builds("{} = {}.view({}, -1).max(*{}).values".format, out, param, small, param),
    # token-drop / decoder look-alikes without the rest of the idiom
    st.builds("{} = {}[{}[..., None].tile(1, {}, {})]".format, out, param, param, small, small),
    st.builds("{} = {}[{}]".format, out, param, param),
    st.builds("{} = {}.sum(dim={})".format, out, param, small),
    st.just('use_sdpa = hasattr(F, "scaled_dot_product_attention")'),
    st.just("pass"),
]

statement = st.one_of(*NEAR_MISSES)


@st.composite
def near_miss_programs(draw):
    body = draw(st.lists(statement, min_size=1, max_size=8))
    indent = draw(st.sampled_from(["    ", "\t", "  "]))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    in_class = draw(st.booleans())
    lines = ["import torch", "import torch.nn.functional as F", "", ""]
    pad = ""
    if in_class:
        lines += ["class M(torch.nn.Module):"]
        pad = indent
    lines += [f"{pad}def forward(self, {', '.join(PARAMS)}, B=2):"]
    lines += [f"{pad}{indent}{s}" for s in body]
    lines += [f"{pad}{indent}return {draw(out) if draw(st.booleans()) else draw(param)}"]
    text = newline.join(lines)
    if draw(st.booleans()):
        text += newline
    return text.encode("utf-8")


@settings(max_examples=40, **SETTINGS)
@given(near_miss_programs())
def test_near_miss_programs_are_untouched(data):
    assert _compiles(data), data
    _assert_untouched(data)


# -- meaning-preserving mutations of the golden attention case ------------------------

FORWARD_LOCALS = ["x", "B", "N", "num_windows", "qkv", "q", "k", "v"]
TAKEN = {"self", "torch", "nn", "F", "super", "int", "len", "range", "hasattr", "_"}

identifier = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_]{0,7}\Z", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s) and s not in TAKEN and not s.startswith("__")
)


class _Rename(cst.CSTTransformer):
    """Rename local names inside ``forward`` (never attributes or keywords)."""

    def __init__(self, mapping):
        super().__init__()
        self.mapping = mapping
        self.depth = 0

    def visit_FunctionDef(self, node):
        if node.name.value == "forward":
            self.depth += 1

    def leave_FunctionDef(self, original, updated):
        if original.name.value == "forward":
            self.depth -= 1
        return updated

    def visit_Attribute(self, node):
        updated = node.value.visit(self)
        self._attr_values[node] = updated
        return False

    def leave_Attribute(self, original, updated):
        return updated.with_changes(value=self._attr_values.pop(original))

    def visit_Arg(self, node):
        return True

    def leave_Arg(self, original, updated):
        return updated.with_changes(keyword=original.keyword)  # keyword names stay

    def leave_Name(self, original, updated):
        if self.depth and original.value in self.mapping:
            return updated.with_changes(value=self.mapping[original.value])
        return updated

    _attr_values: dict


def _rename(source: str, mapping) -> str:
    renamer = _Rename(mapping)
    renamer._attr_values = {}
    return cst.parse_module(source).visit(renamer).code


def _load(source: bytes, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def _check_rewritten_equivalent(source: str) -> None:
    torch = pytest.importorskip("torch")
    from tests.parity_tools import assert_same_model_behaviour

    data = source.encode("utf-8")
    result = rewrite_bytes(data)
    assert any(r.code == "HR001" for r in result.changes), [(r.code, r.message) for r in result.reports]
    assert "scaled_dot_product_attention" in result.output.decode()
    assert rewrite_bytes(result.output).output == result.output
    before = _load(data, "mutated_before")
    after = _load(result.output, "mutated_after")
    assert_same_model_behaviour(before.golden_example, after.golden_example, torch)


@settings(max_examples=6, **SETTINGS)
@given(st.lists(identifier, min_size=len(FORWARD_LOCALS), max_size=len(FORWARD_LOCALS), unique=True))
def test_renamed_locals_still_rewritten_and_equivalent(names):
    mapping = dict(zip(FORWARD_LOCALS, names))
    source = _rename(GOLDEN_IN, mapping)
    assert source != GOLDEN_IN or all(k == v for k, v in mapping.items())
    _check_rewritten_equivalent(source)


@settings(max_examples=6, **SETTINGS)
@given(
    st.integers(min_value=30, max_value=160),
    st.booleans(),
    st.lists(identifier, min_size=len(FORWARD_LOCALS), max_size=len(FORWARD_LOCALS), unique=True) | st.none(),
)
def test_reformatted_still_rewritten_and_equivalent(line_length, magic_comma, names):
    source = GOLDEN_IN
    if names is not None:
        source = _rename(source, dict(zip(FORWARD_LOCALS, names)))
    mode = black.Mode(line_length=line_length, magic_trailing_comma=magic_comma)
    source = black.format_str(source, mode=mode)
    _check_rewritten_equivalent(source)


def test_rename_helper_renames_only_locals():
    renamed = _rename(GOLDEN_IN, {"qkv": "QKV", "x": "inp", "q": "query"})
    assert "self.qkv(inp)" in renamed  # the attribute keeps its name
    assert "self.q_stride" in renamed
    assert "dim=3" in renamed
    assert "def forward(self, inp):" in renamed
    assert "def golden_example():" in renamed and "WindowAttention(8, 16, 2, q_stride=4" in renamed


def test_token_drop_lookalike_without_view_is_untouched():
    # Found by test_near_miss_programs_are_untouched.  Without `.view(B, -1, C)` after
    # it, `x[mask[..., None].tile(1, MU, C)]` is valid for masks that keep a different
    # number of units per row; a gather sized by mask[0].sum() would silently differ.
    data = (
        b"import torch\n\n\n"
        b"def forward(self, x, mask):\n"
        b"    a = x[mask[..., None].tile(1, 4, 8)]\n"
        b"    return a\n"
    )
    _assert_untouched(data)
