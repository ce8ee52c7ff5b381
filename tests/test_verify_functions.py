"""``--verify`` calls a module-level function holding a rewritten site directly where no
model reaches it.

A fork's attention helper ``mask_unit_attention(qkv, heads, q_stride=1, window_size=0,
use_mask_unit_attn=False)`` (our own, written here), called only by an ``Encoder`` that
cannot be built (it loads a checkpoint the repo does not ship): the helper is called with
the literal arguments of the Encoder's call (the q-pool and two windows) and a qkv
tensor of the first token shape with which the original runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hiera_rewrite import cli, files
from hiera_rewrite.verify import EXIT_VERIFY_FAILED

pytest.importorskip("torch")

from tests.test_verify_layouts import site_rows, verify, write  # noqa: E402

BLOCKS = '''import torch
import torch.nn as nn
import torch.nn.functional as F


def mask_unit_attention(qkv: torch.Tensor, heads: int, q_stride: int = 1, window_size: int = 0, use_mask_unit_attn: bool = False) -> torch.Tensor:
    """qkv: (B, N, 3 * dim_out), a qkv projection's output; returns (B, N // q_stride, dim_out)."""
    B, N, C = qkv.shape
    dim_out = C // 3
    head_dim = dim_out // heads
    num_windows = (N // (q_stride * window_size)) if use_mask_unit_attn else 1
    qkv = qkv.reshape(B, -1, num_windows, 3, heads, head_dim).permute(3, 0, 4, 2, 1, 5)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if q_stride > 1:
        q = q.view(B, heads, num_windows, q_stride, -1, head_dim).max(dim=3).values
    x = F.scaled_dot_product_attention(q, k, v)
    return x.transpose(1, 3).reshape(B, -1, dim_out)


class Encoder(nn.Module):
    """Needs a checkpoint this repo does not ship: it cannot be built here."""

    def __init__(self, checkpoint: str, dim: int = 96, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.load_state_dict(torch.load(checkpoint))

    def forward(self, x):
        return mask_unit_attention(self.qkv(x), self.heads, q_stride=4, window_size=4, use_mask_unit_attn=True)
'''

CALL = "function mask_unit_attention(heads=1, q_stride=4, window_size=4, use_mask_unit_attn=True)"


def helper_fork(tmp_path: Path, text: str = BLOCKS) -> Path:
    return write(tmp_path / "x" / "attnpkg", {"__init__.py": "", "blocks.py": text})


def attention_row(out: str) -> str:
    rows = site_rows(out)
    assert len(rows) == 1 and next(iter(rows)).endswith("HR001"), out
    row = next(iter(rows.values()))
    assert " mask_unit_attention " in row, row
    return row


def test_function_no_model_reaches_is_called_directly(tmp_path: Path, capsys):
    """Before: NOT PROVEN (no model built here calls mask_unit_attention)."""
    code, out, err = verify(helper_fork(tmp_path), capsys)
    assert code == cli.EXIT_CHANGED, out + err
    assert "not built: attnpkg.blocks:Encoder (class): needs checkpoint" in out
    assert f"model {CALL}  input (2, 32, 24)" in out, out
    assert re.search(r"built from the call in Encoder\.forward \(blocks\.py:\d+\)", out), out
    assert re.search(r"float64 cpu  forward\(x\)  input grads \(x\) +worst: x .* pass", out), out
    row = attention_row(out)
    assert f" {CALL} forward(x)" in row and row.rstrip().endswith("pass"), row
    assert "verify: PASSED (1/1 sites exercised, every comparison equal)" in out


def test_sabotaged_function_fails_naming_the_site(tmp_path: Path, capsys, monkeypatch):
    """The output restore loses its transpose: wrong with two windows."""
    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        text, n = re.subn(r"x\.transpose\(1, 2\)\.reshape\(B, -1, dim_out\)", "x.reshape(B, -1, dim_out)", result.output.decode())
        assert n == 1, text
        result.output = text.encode()
        return result

    folder = helper_fork(tmp_path)
    monkeypatch.setattr(files, "rewrite_bytes", wrong)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    row = attention_row(out)
    assert "FAIL" in row and f" {CALL} " in row, row
    assert "verify: FAILED" in out


def test_function_that_needs_a_module_argument_is_not_proven_naming_it(tmp_path: Path, capsys):
    """A helper taking the projection itself (``proj: nn.Linear``): nothing gives it, so
    the site stays not proven, the message naming the function, its calls and the
    --kwargs to give."""
    text = BLOCKS.replace("def mask_unit_attention(qkv: torch.Tensor, heads: int,", "def mask_unit_attention(x: torch.Tensor, proj: nn.Linear, heads: int,")
    text = text.replace("    B, N, C = qkv.shape\n", "    qkv = proj(x)\n    B, N, C = qkv.shape\n")
    text = text.replace("mask_unit_attention(self.qkv(x), self.heads,", "mask_unit_attention(x, self.qkv, self.heads,")
    code, out, err = verify(helper_fork(tmp_path, text), capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "NOT PROVEN" in attention_row(out)
    message = [line for line in out.splitlines() if line.startswith("not proven:")]
    assert len(message) == 1 and " in mask_unit_attention: function mask_unit_attention: " in message[0], out
    assert "needs proj (no default, no guess from its name)" in message[0], out
    assert """give the missing argument: --kwargs '{"proj": "..."}'""" in message[0], out
    assert "verify: NOT PROVEN (0/1 sites exercised; 1 never ran in a compared case)" in out
