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


TWO_LAYOUTS = '''    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, N, _ = x.shape
        if self.use_mask_unit_attn:
            num_windows = N // (self.q_stride * self.window_size)
            qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
            q, k, v = qkv.unbind(0)
            if self.q_stride > 1:
                q = q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim).amax(dim=3)
        else:
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            if self.q_stride > 1:
                q = q.view(B, self.heads, self.q_stride, -1, self.head_dim).amax(dim=2)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        if self.use_mask_unit_attn:
            x = x.transpose(1, 3).reshape(B, -1, self.dim_out)
        else:
            x = x.transpose(1, 2).reshape(B, -1, self.dim_out)
        return self.proj(x)
'''


def test_a_two_layout_fork_with_an_attn_mask_still_scripts(tmp_path: Path, monkeypatch):
    """Hunt 20b F1: timm's two-layout forward binds num_windows under `if
    self.use_mask_unit_attn:` only; the mask's 4-D conversion read it after that `if`, which
    TorchScript refuses to compile ("num_windows is not defined in the false branch")."""
    pytest.importorskip("hiera")
    from tests.upstream import upstream_dir

    dest = tmp_path / "two_layout_fork"
    shutil.copytree(upstream_dir(), dest, ignore=shutil.ignore_patterns("__pycache__"))
    text = (dest / "hiera.py").read_text()
    start = text.index(SIGNATURE.splitlines()[0])
    end = text.index("\n\n\n", start)
    text = text[:start] + TWO_LAYOUTS + text[end + 1:]
    (dest / "hiera.py").write_text(text)
    cli.main(["-q", str(dest / "hiera.py")])
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("two_layout_fork.hiera")
    try:
        attention = module.MaskUnitAttention(8, 8, 2, 4, 4, True).double()
        scripted = torch.jit.script(attention)  # the original scripts (hunt 20b's control)
        keep = torch.ones(2, 64, dtype=torch.bool)
        keep[0, -12:] = False
        out = scripted(torch.randn(2, 64, 8, dtype=torch.float64), keep.reshape(2, -1, 4).permute(0, 2, 1)[:, None, :, None, :])
        assert out.shape == (2, 16, 8)
    finally:
        sys.modules.pop("two_layout_fork.hiera", None)
