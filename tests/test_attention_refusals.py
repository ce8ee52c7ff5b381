"""Refusals of the attention rewrites (HR001, HR006) outside the golden files.

The look-alikes of the 5-D attention (golden/attention/lookalike_*) stay unchanged and
every SDPA call in them gets a ``skipped:`` reason that names what differs: their exact
report lines are golden/attention/lookalike_*.reports.txt, checked by
tests/test_golden.py.  Here: the CLI prints them with the path, and cases made from
one source in several variants."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hiera_rewrite.engine import rewrite_bytes

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "attention"


def test_cli_prints_skipped_reason(tmp_path):
    target = tmp_path / "attention.py"
    target.write_bytes((GOLDEN / "lookalike_attn_mask_dropout.in.py").read_bytes())
    run = subprocess.run(
        [sys.executable, "-m", "hiera_rewrite", "--check", str(target)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert f"{target}:20:13: HR001 skipped: SDPA's attn_mask is `bias[:, None]`" in run.stderr
    assert f"{target}:31:13: HR001 skipped: SDPA gets a dropout_p" in run.stderr


SCALED_EXPLICIT = '''import torch
import torch.nn as nn
{prelude}

class A(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, N // 4, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        x = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        return x.transpose(1, 3).reshape(B, -1, C)
'''


@pytest.mark.parametrize("prelude,name", [("float = torch.float32", "float"), ("from builtins import int", "int")])
def test_scale_check_refused_where_the_file_binds_its_builtins(prelude, name):
    """The run-time `isinstance(self.scale, (int, float))` must mean the builtins."""
    data = SCALED_EXPLICIT.format(prelude=prelude).encode()
    result = rewrite_bytes(data)
    assert result.output == data
    (report,) = [r for r in result.reports if r.code == "HR006"]
    assert f"needs a run-time isinstance check but the file binds {name}" in report.message


def test_scale_check_emitted_with_the_builtins_free():
    result = rewrite_bytes(SCALED_EXPLICIT.format(prelude="").encode())
    assert b"if not isinstance(self.scale, (int, float)):" in result.output
    assert rewrite_bytes(result.output).reports == []


MANUAL_UNREADABLE_SPLIT = b'''import torch.nn as nn
import torch.nn.functional as F


class A(nn.Module):
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, -1, x.shape[1] // 4, 3, self.cfg["heads"], C // self.cfg["heads"]).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            x = ((q * self.scale) @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        return x.transpose(1, 3).reshape(B, -1, C)

    def __init__(self):
        super().__init__()
        self.scale = 0.5
'''


def test_manual_tensor_scale_path_needs_heads_or_windows():
    """The 5-D views of the fallback split num_windows*heads again: refused where
    neither can be read again without calls or subscripts."""
    result = rewrite_bytes(MANUAL_UNREADABLE_SPLIT)
    assert result.output == MANUAL_UNREADABLE_SPLIT
    (report,) = [r for r in result.reports if r.code == "HR001"]
    assert "neither the heads nor the num_windows of the qkv reshape can be read again" in report.message


def _module_of(source: str, name: str):
    namespace: dict = {"__name__": name}
    exec(compile(source, name, "exec"), namespace)
    return namespace


@pytest.mark.parametrize("cls", ["InplaceQ", "UserFunctionQ"])
def test_unbind_unpack_would_raise_where_q_is_modified_in_place(cls):
    """The in-place guard of HR001's unbind unpack is needed: in the look-alike the
    select unpack runs, `qkv.unbind(0)` raises; the tool leaves the select form."""
    torch = pytest.importorskip("torch")
    source = (GOLDEN / "lookalike_unbind_inplace.in.py").read_text()
    assert rewrite_bytes(source.encode()).output == source.encode()
    unpack = "q, k, v = qkv[0], qkv[1], qkv[2]"
    assert source.count(unpack) == 3
    original = _module_of(source, "select_form")
    unbound = _module_of(source.replace(unpack, "q, k, v = qkv.unbind(0)"), "unbind_form")
    x = torch.randn(2, 16, 8, dtype=torch.float64)
    torch.manual_seed(0)
    original[cls](8, 2).double()(x).sum().backward()
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match=r"Output 0 of Unbind\w* is a view and is being modified inplace"):
        unbound[cls](8, 2).double()(x).sum().backward()


def test_base_modified_in_place_is_refused():
    """`y.mul_` after `qkv = y.permute(...)` changes q, k, v of the original; the 4-D
    qkv is a copy that would not see it (a wrong rewrite before this refusal)."""
    torch = pytest.importorskip("torch")
    source = (GOLDEN / "lookalike_unbind_inplace.in.py").read_text()
    result = rewrite_bytes(source.encode())
    assert result.output == source.encode()
    # what the refused rewrite would emit differs from the original
    naive = source.replace(
        "qkv = y.permute(3, 0, 4, 2, 1, 5)", "qkv = y.permute(3, 0, 2, 4, 1, 5).flatten(2, 3)"
    ).replace("x.transpose(1, 3).reshape(B, -1, C)\n\n\nclass", "x.transpose(1, 3).reshape(B, -1, C)\n\n\nclass")
    head, tail = naive.split("class BaseModified", 1)
    naive = head + "class BaseModified" + tail.replace("x.transpose(1, 3)", "x.transpose(1, 2)")
    a, b = _module_of(source, "orig"), _module_of(naive, "naive")
    torch.manual_seed(0)
    m1 = a["BaseModified"](8, 2).double()
    m2 = b["BaseModified"](8, 2).double()
    m2.load_state_dict(m1.state_dict())
    x = torch.randn(2, 16, 8, dtype=torch.float64)
    assert not torch.allclose(m1(x), m2(x))
