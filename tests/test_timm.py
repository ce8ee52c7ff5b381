"""timm's Hiera (``timm/models/hiera.py``), rewritten, computes what timm computes.

timm's MaskUnitAttention keeps the 5-D windowed path under ``if
self.use_mask_unit_attn:`` next to a 4-D global path, picks SDPA or a manual
attention with ``if self.fused_attn:``, and restores the output under a second
``if self.use_mask_unit_attn:``.  The installed file is read at test time (never
copied into this repo), rewritten, and loaded as ``timm.models._hiera_rewritten``
so its relative imports (``from ._builder import ...``) resolve inside timm.
"""

from __future__ import annotations

import copy
import re
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

from tests.parity_tools import assert_same_model_behaviour, exec_rewritten  # noqa: E402

MODULE = "timm.models._hiera_rewritten"

# Small images, narrow stages and 10 classes keep it fast (the builders' own
# heads/depth ratios/window settings are kept where the override does not touch them).
SMALL = dict(img_size=(64, 64), embed_dim=16, num_classes=10)
CONFIGS = {
    "tiny": ("hiera_tiny_224", dict(SMALL, stages=(1, 2, 3, 1))),
    "base_plus_2_heads": ("hiera_base_plus_224", dict(SMALL, stages=(1, 1, 2, 1))),
    "small_abswin": ("hiera_small_abswin_256", dict(SMALL, stages=(1, 1, 2, 1))),
    "q_pool_1_one_windowed_stage": (
        "hiera_tiny_224",
        dict(SMALL, stages=(1, 2, 2, 1), q_pool=1, mask_unit_attn=(True, False, False, False)),
    ),
    "all_stages_windowed_4_heads": (
        "hiera_huge_224",
        dict(SMALL, stages=(1, 1, 1, 1), mask_unit_attn=(True, True, True, True)),
    ),
}


def _timm_hiera_path() -> Path:
    import timm.models.hiera as original

    return Path(original.__file__)


@pytest.fixture(scope="module")
def rewritten():
    """(original module, rewritten module, rewrite result) for timm's hiera.py."""
    import timm.models._registry as registry
    import timm.models.hiera as original

    # Registering the rewritten entry points again would replace timm's own:
    # keep the registry as it was.
    saved = {name: copy.copy(value) for name, value in vars(registry).items() if name.startswith("_model") or name.startswith("_module") or name == "_deprecated_models"}
    saved = {k: v for k, v in saved.items() if isinstance(v, (dict, set, list))}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Overwriting hiera_* in registry"
            module, result = exec_rewritten(MODULE, _timm_hiera_path())
    finally:
        for name, value in saved.items():
            live = getattr(registry, name)
            live.clear()
            live.update(value) if not isinstance(live, list) else live.extend(value)
    return original, module, result


def test_timm_sites(rewritten, capsys):
    """The windowed attention is rewritten; the global 4-D path is not touched."""
    _, _, result = rewritten
    lines = {}
    for report in result.reports:
        state = "rewritten" if report.applied else report.message
        print(f"timm hiera.py:{report.line}:{report.col}: {report.code} {state}")
        lines.setdefault(report.code, []).append(report)
    attention = [r for r in lines.get("HR001", []) if r.applied]
    assert len(attention) == 1, [r.message for r in lines.get("HR001", [])]
    source = result.source.decode()
    output = result.output.decode()
    # the windowed path now builds 4-D q/k/v; the global path is byte-identical
    global_path = re.search(r"            # Global attention.*?q, k, v = q.contiguous\(\).*?\n", source, re.S)
    assert global_path is not None and global_path.group(0) in output
    assert "x = x.transpose(1, 2).reshape(B, -1, self.dim_out)" in output
    assert ".permute(3, 0, 4, 2, 1, 5)" not in output
    assert ".permute(3, 0, 2, 4, 1, 5)" in output and ".flatten(2, 3)" in output
    assert "attn = (q * self.scale) @ k.transpose(-1, -2)" in output  # manual fallback kept


def _builder(module, name, kwargs, fused=True, mask=None):
    def build():
        model = getattr(module, name)(pretrained=False, **kwargs).double()
        if not fused:
            for sub in model.modules():
                if hasattr(sub, "fused_attn"):
                    sub.fused_attn = False
        size = kwargs.get("img_size", (224, 224))
        x = torch.randn(2, 3, *size, dtype=torch.float64)
        return model, (x,) if mask is None else (x, mask(model, x))

    return build


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_timm_parity(rewritten, config):
    original, module, _ = rewritten
    name, kwargs = CONFIGS[config]
    assert_same_model_behaviour(_builder(original, name, kwargs), _builder(module, name, kwargs), torch)


def test_timm_parity_manual_attention(rewritten):
    """With fused_attn off, the kept manual branch runs on the 4-D q/k/v."""
    original, module, _ = rewritten
    name, kwargs = CONFIGS["base_plus_2_heads"]
    assert_same_model_behaviour(
        _builder(original, name, kwargs, fused=False), _builder(module, name, kwargs, fused=False), torch
    )


def test_timm_parity_masked_features(rewritten):
    """forward(x, mask): the encoder with dropped mask units (MAE-style features)."""
    original, module, _ = rewritten
    name, kwargs = CONFIGS["tiny"]

    def mask(model, x):
        torch.manual_seed(3)
        return model.get_random_mask(x, mask_ratio=0.5)

    assert_same_model_behaviour(
        _builder(original, name, kwargs, mask=mask), _builder(module, name, kwargs, mask=mask), torch
    )
