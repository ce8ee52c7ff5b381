"""``--verify`` builds a component directly where no model reaches its site.

A fork-like repo made here from the installed upstream's ``MaskUnitAttention`` and
``HieraBlock`` (copied at test time) and a top-level ``Encoder`` of our own that cannot
be built (it loads a checkpoint the repo does not ship).  The attention is built as the
files construct it: ``HieraBlock.__init__`` passes only its own names (defaults and
small values from the names: global attention), ``Encoder.__init__`` passes literal
``q_stride=4, window_size=4, use_mask_unit_attn=True`` (the q-pool and the windows).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict

import pytest

from hiera_rewrite import cli, files
from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_layouts import site_rows, sub, upstream_files, verify, write

pytest.importorskip("torch")
pytest.importorskip("timm")

ENCODER = '''

class Encoder(nn.Module):
    """Needs a checkpoint this repo does not ship: it cannot be built here."""

    def __init__(self, checkpoint: str, dim: int = 96, heads: int = 1):
        super().__init__()
        self.block = HieraBlock(dim, dim, heads)
        self.pool_attn = MaskUnitAttention(dim, 2 * dim, heads, q_stride=4, window_size=4, use_mask_unit_attn=True)
        self.load_state_dict(torch.load(checkpoint))

    def forward(self, x):
        return self.pool_attn(self.block(x))
'''


def encoder_fork(edits=()) -> Dict[str, str]:
    """blocks.py: upstream's MaskUnitAttention and HieraBlock, then our Encoder."""
    sources = upstream_files()
    hiera = sources["hiera.py"]
    blocks = hiera[hiera.index("class MaskUnitAttention(nn.Module):"):hiera.index("class Head(nn.Module):")]
    for old, new in edits:
        blocks = sub(blocks, old, new)
    head = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom timm.models.layers import DropPath, Mlp\n\nfrom .hiera_utils import do_pool\n\n\n"
    return {"__init__.py": "", "blocks.py": head + blocks + ENCODER, "hiera_utils.py": sources["hiera_utils.py"]}


def hr001_row(out: str) -> str:
    rows = site_rows(out)
    assert len(rows) == 1 and next(iter(rows)).endswith("HR001"), out
    row = next(iter(rows.values()))
    assert "MaskUnitAttention.forward" in row, row
    return row


def test_attention_proven_as_a_component_when_its_model_cannot_be_built(tmp_path: Path, capsys):
    folder = write(tmp_path / "x" / "enc", encoder_fork())
    code, out, err = verify(folder, capsys)
    print(out)
    assert code == cli.EXIT_CHANGED, out + err
    assert "not built: enc.blocks:Encoder (class): needs checkpoint" in out
    row = hr001_row(out)
    assert row.rstrip().endswith("pass") and " component MaskUnitAttention(" in row, row
    # the literal arguments of the Encoder's call are the ones built (the q-pool branch)
    assert ("model component MaskUnitAttention(dim=8, dim_out=8, heads=1, q_stride=4, window_size=4, use_mask_unit_attn=True)"
            "  input (2, 32, 8)") in out, out
    assert re.search(r"built from the call in Encoder\.__init__ \(blocks\.py:\d+\)", out), out
    assert "verify: PASSED (1/1 sites exercised, every comparison equal)" in out


def test_branches_the_defaults_switch_off_are_switched_on(tmp_path: Path, capsys):
    """Only HieraBlock.__init__ constructs the attention (with its own names: the defaults
    q_stride=1, window_size=0, global attention): the q-pool runs only with the branches on."""
    sources = encoder_fork()
    sources["blocks.py"] = sub(sources["blocks.py"], "        self.pool_attn = MaskUnitAttention(dim, 2 * dim, heads, q_stride=4, window_size=4, use_mask_unit_attn=True)\n", "")
    sources["blocks.py"] = sub(sources["blocks.py"], "return self.pool_attn(self.block(x))", "return self.block(x)")
    folder = write(tmp_path / "x" / "enc", sources)
    code, out, err = verify(folder, capsys)
    assert code == cli.EXIT_CHANGED, out + err
    assert "model component MaskUnitAttention(dim=8, dim_out=8, heads=1)  input (2, 2, 8)" in out, out
    assert ("model component MaskUnitAttention(dim=8, dim_out=8, heads=1, q_stride=2, window_size=2, use_mask_unit_attn=True)"
            "  input (2, 8, 8)") in out, out
    assert re.search(r"built from the call in HieraBlock\.__init__ \(blocks\.py:\d+\), branches on: q_stride=2, window_size=2, use_mask_unit_attn=True", out), out
    assert hr001_row(out).rstrip().endswith("pass")
    assert "verify: PASSED (1/1 sites exercised, every comparison equal)" in out


def test_sabotaged_component_fails_naming_the_site(tmp_path: Path, capsys, monkeypatch):
    """The output restore loses its transpose: equal with one window and one head (the
    HieraBlock call's defaults), wrong with the Encoder's two windows."""
    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        swapped, n = re.subn(r"x\.transpose\(1, 2\)\.reshape\(B, -1, self\.dim_out\)", "x.reshape(B, -1, self.dim_out)", result.output.decode())
        assert n == 1
        result.output = swapped.encode()
        return result

    folder = write(tmp_path / "x" / "enc", encoder_fork())
    monkeypatch.setattr(files, "rewrite_bytes", wrong)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    row = hr001_row(out)
    assert "FAIL" in row and " component MaskUnitAttention(" in row, row
    assert "verify: FAILED" in out


def test_component_that_cannot_be_built_is_not_proven_naming_it(tmp_path: Path, capsys):
    """The attention also needs a value nothing gives (a rotary table): not proven, the
    message says which constructions were tried and the --kwargs to give."""
    edits = [
        ("        heads: int,\n        q_stride: int = 1,\n", "        heads: int,\n        rotary,\n        q_stride: int = 1,\n"),
        ("            dim, dim_out, heads, q_stride, window_size, use_mask_unit_attn\n",
         '            dim, dim_out, heads, torch.load("rotary.pt"), q_stride, window_size, use_mask_unit_attn\n'),
    ]
    sources = encoder_fork(edits)
    sources["blocks.py"] = sub(sources["blocks.py"], "MaskUnitAttention(dim, 2 * dim, heads, q_stride=4", 'MaskUnitAttention(dim, 2 * dim, heads, torch.load("rotary.pt"), q_stride=4')
    folder = write(tmp_path / "x" / "enc", sources)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    row = hr001_row(out)
    assert "NOT PROVEN" in row, row
    message = [line for line in out.splitlines() if line.startswith("not proven:")]
    assert len(message) == 1 and "MaskUnitAttention.forward" in message[0], out
    # every construction tried is named, the component's own failure first
    tried = message[0].split(" in MaskUnitAttention.forward: ")[1]
    assert tried.startswith("component MaskUnitAttention: MaskUnitAttention(dim=8, dim_out=8, heads=1): needs rotary"), out
    assert "; MaskUnitAttention(dim=8, dim_out=8, heads=1, q_stride=4, window_size=4, use_mask_unit_attn=True): needs rotary" in tried, out
    assert """give the missing argument: --kwargs '{"rotary": "..."}'""" in tried, out
    assert "verify: NOT PROVEN (0/1 sites exercised; 1 never ran in a compared case)" in out


def test_component_that_cannot_be_fed_is_not_proven_listing_the_inputs(tmp_path: Path, capsys):
    """The attention accepts only a token count no candidate input has: not proven, the
    message lists each input tried with the original's error."""
    edits = [('        """ Input should be of shape [batch, tokens, channels]. """\n',
              '        """ Input should be of shape [batch, tokens, channels]. """\n        assert x.shape[1] == 1000, "a 1000-token sequence"\n')]
    folder = write(tmp_path / "x" / "enc", encoder_fork(edits))
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "NOT PROVEN" in hr001_row(out)
    message = [line for line in out.splitlines() if line.startswith("not proven:")]
    assert len(message) == 1, out
    assert ("component MaskUnitAttention: MaskUnitAttention(dim=8, dim_out=8, heads=1): the original model raised (the call in "
            "HieraBlock.__init__") in message[0], out
    assert "the original raised with every input tried: (2, 2, 8): AssertionError: a 1000-token sequence; (2, 1, 8): AssertionError" in message[0], out
    assert "verify: NOT PROVEN (0/1 sites exercised; 1 never ran in a compared case)" in out
