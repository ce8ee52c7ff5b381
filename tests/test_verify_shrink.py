"""Issue 22, class 4: a shrunk configuration the fork cannot take.

A fork's MAE hard-codes the stage ends of its own configuration (Hiera-Tiny's blocks
0, 2, 9, 11) where upstream reads ``self.stage_ends``: its fusion heads take the stage
outputs by position.  With one block per stage (the small build) the original raises;
verify then shrinks less (the same stages and blocks, small widths) and every site is
proven with no flags.  A sabotaged rewrite still FAILS, naming the site.

A second fork (factories deleted: the class defaults are the configuration) sizes its
decoder's position table for 224-pixel images (7 x 7 tokens; video as upstream).  Every build at the small
input raises (before: NOT PROVEN, no factory left to try); the same small widths at the
model's own input size run, and every site is proven.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_layouts import _cut_factories, assert_all_proven, sabotage, site_rows, sub, upstream_files, verify, write

pytest.importorskip("torch")
pytest.importorskip("timm")


@pytest.fixture(scope="module")
def fork(tmp_path_factory) -> Path:
    sources = upstream_files()
    sources["hiera_mae.py"] = sub(
        sources["hiera_mae.py"],
        "        for i in self.stage_ends[: self.q_pool]:",
        "        for i in [0, 2, 9, 11][: self.q_pool]:  # Hiera-Tiny's stage ends",
    )
    return write(tmp_path_factory.mktemp("shrink") / "x" / "hiera", sources)


def test_the_small_build_raises_so_verify_shrinks_less(fork: Path, capsys, monkeypatch):
    monkeypatch.chdir(fork.parent)
    out = assert_all_proven(Path("hiera"), capsys)
    head = out.index("model hiera.hiera_mae:mae_hiera_tiny_224")
    block = out[head:out.index("\nmodel ", head + 1)]
    assert "built from small widths: embed_dim=8, decoder_embed_dim=128, num_classes=10" in block, block
    assert "the original model raised (small: embed_dim=8, stages=(1, 1, 1, 1)" in out, out


def test_a_sabotaged_rewrite_still_fails(fork: Path, capsys, monkeypatch):
    # the decoder fill puts the kept units' tokens one unit off
    sabotage(monkeypatch, r"index_copy_\(0, (\w+), ", r"index_copy_(0, \1.roll(1), ")
    monkeypatch.chdir(fork.parent)
    code, out, err = verify(Path("hiera"), capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    hr004 = [row for key, row in site_rows(out).items() if key.endswith("HR004")]
    assert hr004 and "FAIL" in hr004[0], out
    assert "verify: FAILED" in out


def test_a_table_sized_for_the_models_own_input(tmp_path: Path, capsys, monkeypatch):
    sources = upstream_files()
    mae = _cut_factories(sources["hiera_mae.py"])
    sources["hiera_mae.py"] = sub(mae, "                1, math.prod(self.tokens_spatial_shape_final), decoder_embed_dim", (
        "                1, 49 if len(self.q_stride) == 2 else math.prod(self.tokens_spatial_shape_final), decoder_embed_dim  # 7 x 7 at 224 px"
    ))
    sources["__init__.py"] = "from .hiera import Hiera, hiera_tiny_224\nfrom .hiera_mae import MaskedAutoencoderHiera\n"
    write(tmp_path / "x" / "hiera", sources)
    monkeypatch.chdir(tmp_path / "x")
    out = assert_all_proven(Path("hiera"), capsys)
    head = out.index("model hiera.hiera_mae:MaskedAutoencoderHiera (class)")
    assert "input (2, 3, 224, 224)" in out[head:].splitlines()[0], out[head:]
    assert "built from small widths: embed_dim=8, decoder_embed_dim=128, num_classes=10, at its own input size" in out[head:], out[head:]


def test_every_blocks_per_stage_knob_shrinks():
    """Issue 31: a U-Net MAE whose decoder has its own ``decoder_stages`` (blocks per decoder
    stage, paired with the encoder's skips) was built small with the encoder at one block per
    stage and the decoder at full depth, which that fork cannot take.  Every blocks-per-stage
    tuple shrinks as ``stages`` does, and every decoder depth as ``decoder_depth``; "small
    widths" keeps them all."""
    from hiera_rewrite.verify.arguments import Building, NO_DEFAULT, is_depth_knob

    params = {
        "stages": (2, 3, 16, 3), "decoder_stages": (2, 2, 2, 2), "depths": [2, 2, 6], "num_stages": 4,
        "pixel_decoder_depth": 3, "mask_unit_size": (8, 8), "embed_dim": 96, "use_stages": (True, False), "extra": NO_DEFAULT,
    }
    small = Building.shrink(params, {}, {})
    assert small["stages"] == (1, 1, 1, 1) and small["decoder_stages"] == (1, 1, 1, 1) and small["depths"] == [1, 1, 1]
    assert small["pixel_decoder_depth"] == 1 and small["embed_dim"] == 8
    assert "num_stages" not in small and "mask_unit_size" not in small and "use_stages" not in small
    assert Building.shrink(params, {}, {"decoder_stages": (2, 2, 2, 2)}).get("decoder_stages") is None  # the user's value
    assert all(is_depth_knob(k) for k in ("stages", "decoder_stages", "depths", "pixel_decoder_depth"))
    assert not any(is_depth_knob(k) for k in ("embed_dim", "decoder_embed_dim", "num_stages"))
