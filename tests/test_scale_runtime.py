"""A scale that code outside the rewritten file turns into a tensor.

HR001's kept manual fallback multiplies q by ``self.scale``; HR006 passes it to SDPA's
``scale=``.  A fork's subclass in *another* file (or any code holding the module) may
replace it by a per-head learnable temperature.  A tensor broadcasts against the
original 5-D (B, heads, num_windows, T, head_dim) dims, which the 4-D layouts order
differently ((B, num_windows*heads, T, D) for HR001, (B*num_windows, heads, T, D) for
HR006), and SDPA's ``scale=`` takes a number only.  The rewritten code checks
``isinstance(self.scale, (int, float))`` at run time: these subclasses are defined here,
outside the golden files, and must compute exactly what the original computes, outputs
and every gradient (the temperature's too), float64.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from hiera_rewrite.engine import every_code, rewrite_bytes  # noqa: E402
from tests.parity_tools import assert_same_model_behaviour  # noqa: E402

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def _load(source: bytes, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def _sides(case: str):
    """(original module, rewritten module) of golden ``case``; the rewrite is checked
    to be the golden output, so these tests exercise the committed code."""
    source = (GOLDEN / f"{case}.in.py").read_bytes()
    output = rewrite_bytes(source, codes=every_code()).output  # as the goldens are made
    assert output == (GOLDEN / f"{case}.out.py").read_bytes()
    return _load(source, "before"), _load(output, "after")


def _per_head(heads, head_dim, *lead):
    return nn.Parameter(torch.linspace(0.5, 2.0, heads).view(*lead, heads, 1, 1, 1) * head_dim**-0.5)


# -- what a subclass in another file does: each takes the rewritten file's base class --


def _per_head_parameter(base):
    class PerHead(base):
        def __init__(self, dim, heads, **kwargs):
            super().__init__(dim, heads, **kwargs)
            self.scale = _per_head(heads, self.head_dim)

    return PerHead


def _leading_one(base):
    """(1, heads, 1, 1, 1): every 5-D dim named, broadcasts to the same shape."""

    class LeadingOne(base):
        def __init__(self, dim, heads, **kwargs):
            super().__init__(dim, heads, **kwargs)
            self.scale = _per_head(heads, self.head_dim, 1)

    return LeadingOne


def _window_shaped(base):
    """(heads, 1, 1) against (num_windows, T, D): per window, where heads == num_windows."""

    class WindowShaped(base):
        def __init__(self, dim, heads, **kwargs):
            super().__init__(dim, heads, **kwargs)
            self.scale = nn.Parameter(torch.linspace(0.5, 1.5, heads).view(heads, 1, 1))

    return WindowShaped


def _property(base):
    class Temperature(base):
        def __init__(self, dim, heads, **kwargs):
            super().__init__(dim, heads, **kwargs)
            self.log_t = nn.Parameter(torch.linspace(-0.5, 0.5, heads).view(heads, 1, 1, 1))

        @property
        def scale(self):
            return self.log_t.exp()

        @scale.setter
        def scale(self, value):
            pass

    return Temperature


def _int_scale(base):
    """A Python int is a number: the 4-D path, SDPA gets scale=1."""

    class IntScale(base):
        def __init__(self, dim, heads, **kwargs):
            super().__init__(dim, heads, **kwargs)
            self.scale = 1

    return IntScale


def _set_after_construction(base):
    """No subclass at all: the caller stores a tensor on the instance."""

    def build(dim, heads, **kwargs):
        model = base(dim, heads, **kwargs)
        model.scale = _per_head(heads, model.head_dim)
        return model

    return build


VARIANTS = {
    "per_head_parameter": _per_head_parameter,
    "leading_one": _leading_one,
    "property": _property,
    "int_scale": _int_scale,
    "set_after_construction": _set_after_construction,
    "window_shaped": _window_shaped,
}

# (golden case, class, constructor kwargs); window_size 8 on 16 tokens: 2 windows == 2 heads
MODELS = {
    "explicit": ("explicit_attention/scale_subclasses", "WindowAttention", dict(q_stride=2, window_size=4)),
    "explicit_window_shaped": ("explicit_attention/scale_subclasses", "WindowAttention", dict(window_size=8)),
    "manual": ("attention/scale_subclasses", "FusedOrManual", dict(q_stride=2, fused=False)),
    "manual_window_shaped": ("attention/scale_subclasses", "FusedOrManual", dict(window_size=8, fused=False)),
    "manual_fused": ("attention/scale_subclasses", "FusedOrManual", dict(q_stride=2)),
    "windowed": ("attention/scale_subclasses", "WindowedOrGlobal", dict(q_stride=2, fused=False)),
    "global": ("attention/scale_subclasses", "WindowedOrGlobal", dict(windowed=False, fused=False)),
}
CASES = [
    (model, variant)
    for model in MODELS
    for variant in VARIANTS
    if model.endswith("window_shaped") == (variant == "window_shaped")
]


@pytest.mark.parametrize("model,variant", CASES)
def test_outside_subclass_scale(model, variant):
    case, cls, kwargs = MODELS[model]
    before, after = _sides(case)

    def builder(module):
        def build():
            make = VARIANTS[variant](getattr(module, cls))
            return make(8, 2, **kwargs).double(), (torch.randn(2, 16, 8, dtype=torch.float64),)

        return build

    assert_same_model_behaviour(builder(before), builder(after), torch)


@pytest.mark.parametrize("variant,sdpa_calls", [("int_scale", 1), ("per_head_parameter", 0), ("property", 0)])
def test_explicit_path_taken_by_scale_type(monkeypatch, variant, sdpa_calls):
    """A number takes the 4-D SDPA path; a tensor the explicit 5-D one (the check is
    not always false, nor always true)."""
    _, after = _sides("explicit_attention/scale_subclasses")
    model = VARIANTS[variant](after.WindowAttention)(8, 2, q_stride=2).double()
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def probe(*args, **kwargs):
        calls.append(kwargs.get("scale"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", probe)
    model(torch.randn(2, 16, 8, dtype=torch.float64))
    assert len(calls) == sdpa_calls
    assert all(isinstance(s, (int, float)) for s in calls)


def test_timm_manual_fallback_with_outside_temperature():
    """timm's MaskUnitAttention, rewritten, subclassed with a per-head temperature and
    run on its manual fallback (fused_attn off), windowed with q-pool and global."""
    pytest.importorskip("timm")
    import timm.models.hiera as original

    source = Path(original.__file__).read_bytes()
    result = rewrite_bytes(source)
    assert any(r.code == "HR001" and r.applied and "isinstance(self.scale, (int, float))" in r.message for r in result.reports)
    # only the attention class is needed: run the rewritten class body against timm's globals
    rewritten_cls = _class_from(result.output, "MaskUnitAttention", original)

    def builder(base, **kwargs):
        def build():
            class Temperature(base):
                def __init__(self, *args, **kw):
                    super().__init__(*args, **kw)
                    self.fused_attn = False
                    self.scale = _per_head(self.heads, self.head_dim)

            model = Temperature(16, 16, 2, **kwargs).double()
            tokens = 32 if kwargs.get("use_mask_unit_attn") else 16
            return model, (torch.randn(2, tokens, 16, dtype=torch.float64),)

        return build

    for kwargs in (dict(q_stride=2, window_size=4, use_mask_unit_attn=True), dict(q_stride=1, use_mask_unit_attn=False)):
        assert_same_model_behaviour(builder(original.MaskUnitAttention, **kwargs), builder(rewritten_cls, **kwargs), torch)


def _class_from(output: bytes, name: str, module) -> type:
    """The class ``name`` of rewritten source ``output``, executed in a copy of the
    original module's globals (so nothing of timm is re-registered)."""
    import libcst as cst

    tree = cst.parse_module(output)
    body = [s for s in tree.body if isinstance(s, cst.ClassDef) and s.name.value == name]
    assert len(body) == 1
    namespace = dict(vars(module))
    exec(compile(tree.code_for_node(body[0]), f"<rewritten {name}>", "exec"), namespace)
    return namespace[name]
