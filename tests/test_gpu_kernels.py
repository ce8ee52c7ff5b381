"""On a CUDA GPU: the rewritten attention runs a fused SDPA kernel in every stage.

Each attention module of a bf16 Hiera-Base (and of the MAE's encoder and decoder) is
run on the input it gets in a real forward, alone, under ``torch.profiler``.  The
rewritten source must dispatch to flash / memory-efficient / cuDNN attention (ATen op
and CUDA kernel names) and never to ``_scaled_dot_product_attention_math``; FAIR's
original, which feeds SDPA 5-D tensors, must hit the math path (so the check can fail).

Skipped without CUDA (CI has none): run it on the lent GPU machine.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hiera")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

FUSED_OPS = (
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
)
MATH_OP = "aten::_scaled_dot_product_attention_math"
# CUDA kernel names of the fused backends (flash: flash_fwd_kernel; mem-efficient:
# fmha_cutlassF_*; cuDNN: cudnn_generated_*_sdpa_* / *fmha*)
FUSED_KERNEL = re.compile(r"flash|fmha|cutlassF|sdpa|cudnn.*attn|attention", re.IGNORECASE)

REPO = Path(__file__).resolve().parent.parent


def _load_bench():
    spec = importlib.util.spec_from_file_location("hiera_bench", REPO / "benchmarks" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["hiera_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def packages():
    import hiera

    bench = _load_bench()
    tmp = Path(tempfile.mkdtemp(prefix="hiera_gpu_test_"))
    rewritten, _ = bench.make_rewritten_package(tmp, name="hiera_rewritten_gputest")
    return {"fair": hiera, "rewritten": rewritten}


def _attention_calls(model, x, **kwargs):
    """(label, attn module, its input) for every attention module, from one real forward."""
    calls = []
    hooks = []
    stage_of = {}
    ends = list(model.stage_ends)
    for i, blk in enumerate(model.blocks):
        stage_of[blk.attn] = f"stage{sum(1 for e in ends if e < i)}/block{i}"
    for i, blk in enumerate(getattr(model, "decoder_blocks", [])):
        stage_of[blk.attn] = f"decoder/block{i}"
    for module, label in stage_of.items():
        hooks.append(
            module.register_forward_pre_hook(
                lambda mod, args, label=label: calls.append((label, mod, args[0].detach().clone()))
            )
        )
    try:
        with torch.no_grad():
            model(x, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    return calls


def _profile(module, inp):
    inp = inp.requires_grad_(True)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        out = module(inp)
        out.float().sum().backward()
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages()]
    ops = {n for n in names if n.startswith("aten::")}
    kernels = {n for n in names if not n.startswith("aten::") and FUSED_KERNEL.search(n)}
    return ops, kernels


def _per_stage(pkg, builder, x, **kwargs):
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = getattr(pkg, builder)()
    model = model.to(torch.bfloat16).train()
    result = {}
    for label, module, inp in _attention_calls(model, x, **kwargs):
        stage = label.split("/")[0]
        ops, kernels = _profile(module, inp)
        entry = result.setdefault(stage, {"fused_ops": set(), "math": False, "kernels": set(), "blocks": 0})
        entry["fused_ops"] |= ops & set(FUSED_OPS)
        entry["math"] |= MATH_OP in ops
        entry["kernels"] |= kernels
        entry["blocks"] += 1
    return result


CASES = [
    ("hiera_base_224", {}),
    ("mae_hiera_base_224", {"mask_ratio": 0.6}),
]


def _input():
    g = torch.Generator(device="cuda").manual_seed(0)
    return torch.randn(8, 3, 224, 224, generator=g, device="cuda").to(torch.bfloat16)


@pytest.mark.parametrize("builder,kwargs", CASES, ids=[c[0] for c in CASES])
def test_rewritten_attention_is_fused_in_every_stage(packages, builder, kwargs):
    stages = _per_stage(packages["rewritten"], builder, _input(), **kwargs)
    expected = {"stage0", "stage1", "stage2", "stage3"} | ({"decoder"} if builder.startswith("mae") else set())
    assert set(stages) == expected, stages.keys()
    for stage, e in sorted(stages.items()):
        assert not e["math"], f"{builder} {stage}: SDPA took the math path"
        assert e["fused_ops"], f"{builder} {stage}: no fused SDPA op ({e})"
        assert e["kernels"], f"{builder} {stage}: no flash/efficient/cuDNN kernel name seen ({e})"


@pytest.mark.parametrize("builder,kwargs", CASES, ids=[c[0] for c in CASES])
def test_original_attention_hits_the_math_path(packages, builder, kwargs):
    stages = _per_stage(packages["fair"], builder, _input(), **kwargs)
    # FAIR feeds SDPA 5-D q/k/v (B, heads, windows, T, d): no fused kernel takes them
    assert stages["stage0"]["math"] and stages["stage1"]["math"], {k: v["math"] for k, v in stages.items()}
