"""Mask rewrites (HR003-HR005) outside the golden files (whose reports, look-alikes'
reasons included, are golden/mask/*.reports.txt, checked by tests/test_golden.py): the
merged MAE fixture traced by torch._dynamo with fullgraph before and after rewriting."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from hiera_rewrite.engine import rewrite_bytes

MASK = Path(__file__).resolve().parent.parent / "golden" / "mask"


def test_forward_with_kwargs_keeps_kwargs_last():
    source = (
        b"import torch\n\n\nclass E:\n"
        + (MASK / "token_drop_split.in.py").read_bytes().split(b"    def get_random_mask")[1].split(b"\n\n")[0].join(
            [b"    def get_random_mask", b"\n\n"]
        )
        + b"    def forward(self, x, mask=None, **kwargs):\n"
        b"        x = x[mask[..., None].tile(1, 2, x.shape[2])].view(x.shape[0], -1, x.shape[-1])\n"
        b"        return x\n"
    )
    result = rewrite_bytes(source)
    assert b"def forward(self, x, mask=None, random_mask_ratio=None, **kwargs):" in result.output, result.reports


def test_a_count_through_math_keeps_the_static_drop():
    """`len_keep = math.floor(...)`: `math.*` is pure; the count is still read (before:
    the attribute's name `floor` was taken for a read of something else and refused)."""
    source = (MASK / "token_drop_split.in.py").read_text().replace(
        "len_keep = int(self.num_windows * (1 - mask_ratio))", "len_keep = math.floor(self.num_windows * (1 - mask_ratio))"
    )
    result = rewrite_bytes(("import math\n" + source).encode())
    assert b"num_kept = math.floor(mask.shape[1] * (1 - random_mask_ratio))" in result.output, result.reports
    attribute = source.replace("self.num_windows * (1 - mask_ratio))", "self.num_windows * (1 - self.min_ratio))")
    skips = [r.message for r in rewrite_bytes(("import math\n" + attribute).encode()).reports if not r.applied]
    assert any("reads self.min_ratio" in m for m in skips), skips


# -- the one in-place rule (hiera_rewrite.flow), shared by HR002 and HR003-HR005 ---------

# PyTorch's naming: a trailing `_` is in place (private names too: `Tensor._coalesced_`,
# `torch._foreach_add_`); a dunder only when it stores or is an in-place operator.
IN_PLACE_NAMES = {
    "add_": True, "index_fill_": True, "_coalesced_": True, "__private_": True, "__iadd__": True, "__ior__": True,
    "__setitem__": True, "__delitem__": True, "__setattr__": True,
    "add": False, "_foo": False, "__add__": False, "__getitem__": False, "__init__": False, "__": False,
}
IN_PLACE_FUNCTIONS = {
    "operator.setitem": True, "operator.__setitem__": True, "operator.iadd": True, "operator.delitem": True,
    "torch.relu_": True, "torch.Tensor.logical_or_": True, "torch.nn.init.zeros_": True, "torch._foreach_add_": True,
    "operator.add": False, "operator.getitem": False, "operator.setitem_x": False, "torch.relu": False,
    "torch.Tensor.__getitem__": False, "numpy.fill_": False,
}


@pytest.mark.parametrize("name", sorted(IN_PLACE_NAMES))
def test_in_place_method_rule(name):
    from hiera_rewrite.flow import is_inplace_method

    assert is_inplace_method(name) is IN_PLACE_NAMES[name]


@pytest.mark.parametrize("qualified", sorted(IN_PLACE_FUNCTIONS))
def test_in_place_function_rule(qualified):
    from hiera_rewrite.flow import is_inplace_function

    assert is_inplace_function(qualified) is IN_PLACE_FUNCTIONS[qualified]


# -- torch._dynamo fullgraph on the merged MAE -------------------------------------------


def _load(source: bytes, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def _graph_breaks(module, torch, dims: int) -> int:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = module.tiny_mae(dims).double()
    shapes = {1: (2, 2, 24), 2: (3, 2, 8, 4), 3: (2, 2, 4, 4, 4)}
    x = torch.randn(*shapes[dims], dtype=torch.float64)

    def step(x):
        loss, pred, label, mask = model(x, 0.5)
        loss.backward()
        return loss, pred, label, mask

    return torch._dynamo.explain(step)(x).graph_break_count


@pytest.mark.parametrize("dims", [2, pytest.param(1, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_merged_mae_traces_without_graph_breaks_after_rewrite(dims):
    torch = pytest.importorskip("torch")
    source = (MASK / "mae_merged.in.py").read_bytes()
    rewritten = rewrite_bytes(source).output
    assert _graph_breaks(_load(source, "mae_before"), torch, dims) > 0
    assert _graph_breaks(_load(rewritten, "mae_after"), torch, dims) == 0


def test_merged_mae_fullgraph_compile_matches_eager():
    torch = pytest.importorskip("torch")
    after = _load(rewrite_bytes((MASK / "mae_merged.in.py").read_bytes()).output, "mae_after")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = after.tiny_mae(2).double()
    x = torch.randn(3, 2, 8, 4, dtype=torch.float64)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    torch.manual_seed(5)
    eager = model(x, 0.5)
    torch.manual_seed(5)
    traced = compiled(x, 0.5)
    for a, b in zip(eager, traced):
        assert torch.equal(a, b) if not a.is_floating_point() else torch.allclose(a, b, rtol=1e-12, atol=0)


# -- which parameter a call's argument binds (hiera_rewrite.flow.bound_parameter) --------

# `def m(self, a, /, b, *args, c, **kw)` called as a function (HR002 follows module
# functions) and as `self.m(...)` (HR005 follows the class's methods): the argument x
# binds the named parameter, or None where that is not plain.
BOUND = {
    "m(x)": ("self", "a"),
    "m(s, x)": ("a", "b"),
    "m(s, t, x)": ("b", None),
    "m(s, t, u, x)": (None, None),  # into *args
    "m(s, b=x)": ("b", "b"),
    "m(s, c=x)": ("c", "c"),
    "m(s, a=x)": (None, None),  # positional-only: into **kw
    "m(s, kw=x)": (None, None),
    "m(s, args=x)": (None, None),
    "m(s, self=x)": (None, None),  # positional-only too
    "m(*s, x)": (None, None),
    "m(x, **s)": (None, None),
}


@pytest.mark.parametrize("call", sorted(BOUND))
def test_bound_parameter(call):
    import libcst as cst

    from hiera_rewrite.flow import bound_parameter

    func = cst.parse_statement("def m(self, a, /, b, *args, c, **kw):\n    pass\n")
    parsed = cst.parse_expression(call)
    (arg,) = [a for a in parsed.args if cst.ensure_type(a.value, cst.Name).value == "x"]
    assert (bound_parameter(func, parsed, arg), bound_parameter(func, parsed, arg, bound_self=True)) == BOUND[call]


def test_loss_selection_refused_where_an_unknown_call_may_write_the_mask_given_conditionally():
    """`log_units(mask if self.training else None)` hands the mask on (either branch may
    be it): a call the file does not define may write it, so the loss selection's count
    is not proven (before, only a name or view chain counted as given: the conditional
    slipped through and the selection kept its count)."""
    source = (Path(__file__).resolve().parent.parent / "golden" / "mask" / "mae_merged.in.py").read_text()
    anchor = "        pred = pred[mask]\n"
    edited = source.replace(anchor, "        log_units(mask if self.training else None)\n" + anchor, 1)
    edited = edited.replace("import torch\n", "import torch\nfrom mylogging import log_units\n", 1)
    assert edited != source
    reports = [r for r in rewrite_bytes(edited.encode()).reports if r.code == "HR005"]
    line = edited[: edited.index(anchor)].count("\n") + 1
    at = [r for r in reports if r.line == line]
    assert at and not at[0].applied and "log_units" in at[0].message, [(r.line, r.applied, r.message) for r in reports]
