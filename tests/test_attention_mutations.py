"""Fork edits of the installed upstream Hiera's attention: rewritten exactly, or refused.

A handful of the edits a mutation harness found to matter (see the cases' comments):
each is applied, at test time, to a copy of the installed ``hiera.py`` (third-party
source never enters this repository), the copy is rewritten with the default
rewrites, and the original and rewritten copies are built with the same weights and
compared in float64: every output and every parameter gradient (tests/parity_tools).
The model has two mask-unit stages and two global ones (num_windows 1), q_pool 2.

Beside them, the q-pool of an explicit attention (HR006) on tokens whose pooled
queries tie exactly: the rewrite must keep the reduction the code wrote."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("timm")

from hiera_rewrite.engine import rewrite_bytes  # noqa: E402
from tests.parity_tools import assert_same_model_behaviour  # noqa: E402
from tests.upstream import upstream_dir  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

SDPA = "            x = F.scaled_dot_product_attention(q, k, v)\n"
RESTORE = "        x = x.transpose(1, 3).reshape(B, -1, self.dim_out)\n"
INIT = "        self.use_mask_unit_attn = use_mask_unit_attn\n"
GUARD = '        if hasattr(F, "scaled_dot_product_attention"):\n'
GUARDED = """        if hasattr(F, "scaled_dot_product_attention"):
            # Note: the original paper did *not* use SDPA, it's a free boost!
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q * self.scale) @ k.transpose(-1, -2)
            attn = attn.softmax(dim=-1)
            x = (attn @ v)
"""
EXPLICIT = """        attn = (q * self.scale) @ k.transpose(-1, -2)
        attn = attn.softmax(dim=-1)
        x = attn @ v
"""

# id: (edits of hiera.py as (old, new), expected report of the attention site)
MUTATIONS = {
    # The 4-D restore is a view of SDPA's output (CPU's flash kernel saves it for
    # backward): an in-place op after it made backward raise until the restore got
    # `.clone()` (fa33e05).
    "inplace_after_restore": (
        [(RESTORE, RESTORE + "        x.add_(self.out_bias)\n"), (INIT, INIT + "        self.out_bias = nn.Parameter(torch.linspace(-1, 1, dim_out))\n")],
        "HR001 applied: the restored output gets .clone(): `x.add_(...)`",
    ),
    # The same for HR006's restore in the global stages (94233e7).
    "explicit_inplace_after_restore": (
        [(GUARDED, EXPLICIT), (RESTORE, RESTORE + "        x *= 2.0\n")],
        "HR006 applied: the restored output gets .clone(): `x *= ...`",
    ),
    "is_causal": ([(SDPA, "            x = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n")], "HR001 applied"),
    # a manual fallback that runs (use_sdpa False) on the 4-D layout
    "fallback_runs": (
        [('        if hasattr(F, "scaled_dot_product_attention"):\n', "        if self.use_sdpa:\n"), (INIT, INIT + "        self.use_sdpa = False\n")],
        "HR001 applied",
    ),
    # hunt 13 R1: `attn_mask=m if C else None` where m is bound, or a tensor, only when C
    # holds: the float-mask test read m whatever C was (UnboundLocalError, AttributeError
    # on ed2ab72); C is now tested first, once, and m read only under it
    "mask_bound_only_under_its_flag": (
        [(INIT, INIT + "        self.mask_last_key = False\n"),
         (GUARD, "        if self.mask_last_key:\n"
                "            keep = torch.arange(N // num_windows, device=x.device) < N // num_windows - 1\n" + GUARD),
         (SDPA, SDPA.replace("(q, k, v)", "(q, k, v, attn_mask=keep if self.mask_last_key else None)"))],
        "HR001 applied",
    ),
    "mask_under_its_flag_on": (
        [(INIT, INIT + "        self.mask_last_key = True\n"),
         (GUARD, "        if self.mask_last_key:\n"
                "            keep = torch.arange(N // num_windows, device=x.device) < N // num_windows - 1\n" + GUARD),
         (SDPA, SDPA.replace("(q, k, v)", "(q, k, v, attn_mask=None if not self.mask_last_key else keep)"))],
        "HR001 applied",
    ),
    "float_mask_under_its_flag_on": (
        [(INIT, INIT + "        self.mask_last_key = True\n"),
         (GUARD, "        if self.mask_last_key:\n"
                "            keep = torch.zeros(N // num_windows, device=x.device, dtype=x.dtype)\n"
                "            keep[-1] = -1e4\n" + GUARD),
         (SDPA, SDPA.replace("(q, k, v)", "(q, k, v, attn_mask=keep if self.mask_last_key else None)"))],
        "HR001 applied",
    ),
    "bias_not_a_tensor_when_off": (
        [(INIT, INIT + "        self.attn_bias = 0.0  # a subclass sets a learned bias tensor\n"),
         (GUARD, "        bias = self.attn_bias\n" + GUARD),
         (SDPA, SDPA.replace("(q, k, v)", "(q, k, v, attn_mask=bias if torch.is_tensor(bias) else None)"))],
        "HR001 applied",
    ),
    "mask_condition_after_a_call_argument": (
        [(INIT, INIT + "        self.mask_last_key = False\n"),
         (GUARD, "        keep = None\n" + GUARD),
         (SDPA, SDPA.replace("(q, k, v)", "(q, k, v, scale=self.head_dim ** -0.5, attn_mask=keep if self.mask_last_key else None)"))],
        "HR001 skipped: SDPA's `self.head_dim ** -0.5` is evaluated before its attn_mask's condition",
    ),
    # hunt 14b: what may return the restored output itself, or a view of it, was taken
    # for a new tensor (no .clone(): backward raised, or with unsafe_split, other gradients)
    "as_tensor_then_in_place": (
        [(RESTORE, RESTORE + "        x = torch.as_tensor(x, dtype=self.proj.weight.dtype)\n        x.clamp_(-1e4, 1e4)\n")],
        "HR001 applied: the restored output gets .clone()",
    ),
    "ravel_then_in_place": (
        [(RESTORE, RESTORE + "        flat = x.ravel()\n        flat.mul_(0.5)\n")],
        "HR001 applied: the restored output gets .clone()",
    ),
    "unsafe_split_then_in_place": (
        [(RESTORE, RESTORE + "        head, tail = x.unsafe_split(x.shape[-1] // 2, dim=-1)\n        tail.mul_(0.5)\n")],
        "HR001 applied: the restored output gets .clone()",
    ),
    "proj_registered_with_an_in_place_activation": (
        [("        self.proj = nn.Linear(dim_out, dim_out)\n",
          "        self.proj = nn.Linear(dim_out, dim_out)\n"
          "        self.register_module(\"proj\", nn.Sequential(nn.ReLU(inplace=True), self.proj))\n")],
        "HR001 applied: the restored output gets .clone()",
    ),
    "k_modified_in_place": (
        [("        q, k, v = qkv[0], qkv[1], qkv[2]\n", "        q, k, v = qkv[0], qkv[1], qkv[2]\n        k.mul_(2.0)\n")],
        "HR001 skipped: k is read at line",
    ),
}


def _package(root, name: str, hiera_py: bytes):
    dest = root / name
    dest.mkdir()
    for path in upstream_dir().glob("*.py"):
        (dest / path.name).write_bytes(hiera_py if path.name == "hiera.py" else path.read_bytes())
    importlib.invalidate_caches()
    return importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_fork_edit(name, tmp_path, monkeypatch):
    edits, expected = MUTATIONS[name]
    source = (upstream_dir() / "hiera.py").read_text()
    for old, new in edits:
        assert old in source, f"the installed hiera.py no longer has {old!r}"
        source = source.replace(old, new, 1)
    result = rewrite_bytes(source.encode())
    attention = [r for r in result.reports if r.code in ("HR001", "HR006")]
    assert len(attention) == 1, attention
    report = attention[0]
    verdict = f"{report.code} {'applied: ' if report.applied else ''}{report.message}"
    if report.applied:
        # "HR001 applied: <detail>" matches a message ending in that detail
        head, _, detail = expected.partition(": ")
        assert verdict.startswith(head) and detail in report.message, verdict
    else:
        assert verdict.startswith(expected), verdict
    monkeypatch.syspath_prepend(str(tmp_path))
    tag = f"mutation_{name}"
    before = _package(tmp_path, f"{tag}_a", source.encode())
    after = _package(tmp_path, f"{tag}_b", result.output)

    def builder(pkg):
        def build():
            model = pkg.Hiera(input_size=(64, 64), embed_dim=16, num_heads=2, stages=(1, 1, 1, 1), q_pool=2, num_classes=10)
            return model.double(), (torch.randn(2, 3, 64, 64, dtype=torch.float64),)

        return build

    try:
        assert_same_model_behaviour(builder(before), builder(after), torch)
    finally:
        for module in [m for m in sys.modules if m.startswith(tag)]:
            del sys.modules[module]


TIED = '''import torch
import torch.nn as nn


class PooledExplicit(nn.Module):
    def __init__(self, dim, heads, q_stride=2, window_size=2):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        num_windows = N // (self.q_stride * self.window_size)
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        if self.q_stride > 1:
            q = q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim){reduce}
        attn = (q * self.scale) @ k.transpose(-1, -2)
        attn = attn.softmax(dim=-1)
        x = attn @ v
        x = x.transpose(1, 3).reshape(B, -1, C)
        return self.proj(x)


class TiedTokens(nn.Module):
    """Tokens n and n + 8 (the two stride positions of each pooled query) agree on
    channels 0-3, the only ones the queries read: their queries tie exactly, their
    keys and values differ.  The tokens are a parameter, so their gradient is compared."""

    def __init__(self):
        super().__init__()
        self.attn = PooledExplicit(8, 2)
        tokens = torch.randn(2, 16, 8)
        tokens[:, 8:, :4] = tokens[:, :8, :4]
        self.tokens = nn.Parameter(tokens)
        with torch.no_grad():
            self.attn.qkv.weight[:8, 4:] = 0.0

    def forward(self, x):
        return self.attn(self.tokens + x)


def example():
    return TiedTokens().double(), (torch.zeros(2, 16, 8, dtype=torch.float64),)
'''


@pytest.mark.parametrize("reduce", [".max(dim=3).values", ".amax(dim=3)"])
def test_explicit_qpool_keeps_its_reduction_on_tied_maxima(reduce):
    """`.amax` splits the gradient of exactly tied maxima, `.max(...).values` gives it to
    one: HR006 emitted `.amax` for both until it kept the user's reduction."""
    source = TIED.replace("{reduce}", reduce).encode()
    result = rewrite_bytes(source)
    assert [r.code for r in result.reports if r.applied] == ["HR006"]
    emitted = ".amax(dim=2)" if "amax" in reduce else ".max(dim=2).values"
    assert f"q.unflatten(2, (self.q_stride, -1)){emitted}".encode() in result.output

    def load(data: bytes, name: str):
        module = types.ModuleType(name)
        exec(compile(data, name, "exec"), module.__dict__)
        return module

    before, after = load(source, "tied_before"), load(result.output, "tied_after")
    assert_same_model_behaviour(before.example, after.example, torch)
