"""The emitted attention runs under TorchScript where the original does (hunt 16b).

Upstream's MaskUnitAttention cannot be scripted (its `hasattr(F, ...)` guard), but a fork
for torch >= 2.0 that drops the guard and takes a key-padding `attn_mask` scripts and runs.
HR001 brought a bool mask to the 4-D layout with `m[(None,) * (5 - m.dim())]`, which
TorchScript compiles and then fails on at run time ("Input must be of ints, floats, or
bools, got NoneType"); the emitted `m.reshape([1] * (5 - m.dim()) + list(m.shape))` runs."""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

import pytest

from hiera_rewrite import cli
from tests.test_attention_mutations import GUARDED

torch = pytest.importorskip("torch")

SIGNATURE = "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        \"\"\" Input should be of shape [batch, tokens, channels]. \"\"\"\n"


def test_a_bool_attn_mask_runs_scripted(tmp_path: Path, monkeypatch, capsys):
    pytest.importorskip("hiera")
    from tests.upstream import upstream_dir

    names = {}
    for side in ("original", "rewritten"):
        name = f"scripted_fork_{side}"
        dest = tmp_path / name
        shutil.copytree(upstream_dir(), dest, ignore=shutil.ignore_patterns("__pycache__"))
        text = (dest / "hiera.py").read_text()
        for old, new in [
            (GUARDED, "        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)\n"),
            (SIGNATURE, SIGNATURE.replace("x: torch.Tensor)", "x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None)")),
        ]:
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        (dest / "hiera.py").write_text(text)
        names[side] = name
    assert cli.main(["-q", str(tmp_path / names["rewritten"] / "hiera.py")]) == cli.EXIT_CHANGED
    monkeypatch.syspath_prepend(str(tmp_path))

    B, N, C, heads, q_stride, window = 2, 32, 8, 2, 4, 2
    windows = N // (q_stride * window)
    x = torch.randn(B, N, C, dtype=torch.float64)
    keep = torch.ones(B, N, dtype=torch.bool)
    keep[0, -8:] = False  # the first clip is padded at its end
    mask = keep.reshape(B, -1, windows).permute(0, 2, 1)[:, None, :, None, :]  # (B, 1, windows, 1, T)
    results = []
    state = None
    for side in ("original", "rewritten"):
        module = importlib.import_module(f"{names[side]}.hiera")
        torch.manual_seed(0)
        attention = module.MaskUnitAttention(C, 16, heads, q_stride, window, True).double()
        if state is not None:
            attention.load_state_dict(state)
        state = attention.state_dict()
        scripted = torch.jit.script(attention)
        given = x.clone().requires_grad_(True)
        out = scripted(given, mask)
        out.sum().backward()
        results.append((out.detach(), given.grad))
        sys.modules.pop(f"{names[side]}.hiera", None)
    assert torch.allclose(results[0][0], results[1][0], rtol=1e-10, atol=1e-12)
    assert torch.allclose(results[0][1], results[1][1], rtol=1e-10, atol=1e-12)
