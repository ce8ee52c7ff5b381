"""Compare an export of the rewritten Hiera with the installed original, on the torch at hand.

    python tests/old_torch_parity.py [--without-sdpa] EXPORT_DIR

EXPORT_DIR is what `hiera-rewrite --export EXPORT_DIR` wrote (the rewritten copy of the
installed `hiera` package).  CI produces it with the main venv and runs this script with a
second venv that has an old torch (see .ci/run), so this file needs only torch, timm and
the installed hiera-transformer: no pytest, no hiera_rewrite; of tests/ only
parity_tools.py (stdlib imports only; run as a script, tests/ is on sys.path).

Each case builds the original model and the exported one in float64 with the same
weights, runs forward (the MAE makes its own random mask; both runs get the same seed),
backpropagates the MAE's loss plus a fixed weighted sum of every floating output, and
compares every output and every parameter and input gradient (relative error <= 1e-10).
--without-sdpa deletes `torch.nn.functional.scaled_dot_product_attention` first, as torch
< 2.0 has none: both sides then run the manual attention of upstream's
`hasattr(F, "scaled_dot_product_attention")` fallback (the main suite runs it so,
tests/test_without_sdpa.py).  One line per case; exit status 1 on any mismatch or error in a case, 2 when the export
does not import.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import traceback
from pathlib import Path

from parity_tools import flatten_outputs as flatten, max_rel_error, randomize_

REL_TOL = 1e-10
EXPORT_PACKAGE = "hiera_export"

# MAE micro config (tests/test_mask_exactness.py's MICRO): 128x128 images are 16 mask units.
MICRO = dict(embed_dim=32, num_heads=2, stages=(1, 2, 3, 1), decoder_depth=1, decoder_embed_dim=64, decoder_num_heads=2)
VIDEO = dict(
    q_stride=(1, 2, 2), mask_unit_size=(1, 8, 8), patch_kernel=(3, 7, 7), patch_stride=(2, 4, 4),
    patch_padding=(1, 3, 3), sep_pos_embed=True,
)


def build(torch, cls, kwargs):
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        return cls(**kwargs).train()
    finally:
        torch.set_default_dtype(before)


def run(torch, model, call, inputs):
    """Forward with seed 1, backward; returns (outputs, {param: grad}, [input grads])."""
    leaves = [x.detach().clone().requires_grad_(True) if x.is_floating_point() else x for x in inputs]
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    outputs = flatten(call(model, *leaves))
    loss = 0
    for out in outputs:
        if torch.is_tensor(out) and out.is_floating_point() and out.requires_grad:
            weights = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).view(out.shape)
            loss = loss + (out * weights).sum()
    if not torch.is_tensor(loss):
        raise AssertionError("no differentiable output")
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return [o.detach() if torch.is_tensor(o) else o for o in outputs], grads, [x.grad for x in leaves if x.is_floating_point()]


def compare(torch, run_a, run_b) -> tuple:
    """Raise AssertionError on the first difference; return (worst output, worst grad)."""
    (out_a, grads_a, in_a), (out_b, grads_b, in_b) = run_a, run_b
    worst_out = worst_grad = 0.0
    assert len(out_a) == len(out_b), f"{len(out_a)} outputs vs {len(out_b)}"
    for i, (a, b) in enumerate(zip(out_a, out_b)):
        if not torch.is_tensor(a):
            assert not torch.is_tensor(b) and a == b, f"output {i}: {a!r} vs {b!r}"
            continue
        assert torch.is_tensor(b), f"output {i}: tensor vs {type(b).__name__}"
        assert a.shape == b.shape and a.dtype == b.dtype, f"output {i}: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
        if a.is_floating_point():
            err = max_rel_error(a, b, torch)
            assert err <= REL_TOL, f"output {i}: relative error {err:.3e}"
            worst_out = max(worst_out, err)
        else:
            assert torch.equal(a, b), f"output {i} ({a.dtype}) differs"
    assert list(grads_a) == list(grads_b), "parameter names differ"
    pairs = [*grads_a.items(), *((f"input {i}", g) for i, g in enumerate(in_a))]
    others = [*grads_b.values(), *in_b]
    for (name, ga), gb in zip(pairs, others):
        assert (ga is None) == (gb is None), f"{name}: gradient on one side only"
        if ga is not None:
            err = max_rel_error(ga, gb, torch)
            assert err <= REL_TOL, f"{name}: gradient relative error {err:.3e}"
            worst_grad = max(worst_grad, err)
    return worst_out, worst_grad, len(pairs)


def cases(torch):
    """(name, class name, constructor kwargs, input shape, call)."""
    mae = lambda model, x: model(x)  # noqa: E731  (the MAE draws its own mask)
    mae_ratio = lambda model, x: model(x, mask_ratio=0.5)  # noqa: E731

    def mae_given_mask(model, x):  # a caller's mask: the original statements run
        gen = torch.Generator().manual_seed(5)
        units = model.mask_spatial_shape
        n = 1
        for s in units:
            n *= s
        keep = torch.rand(x.shape[0], n, generator=gen).argsort(dim=1) < n // 4
        return model(x, mask=keep)

    def classify_masked(model, x):  # Hiera.forward with a mask (from get_random_mask)
        torch.manual_seed(7)
        mask = model.get_random_mask(x, 0.5)
        return model(x, mask=mask, return_intermediates=True)

    classify = lambda model, x: model(x, return_intermediates=True)  # noqa: E731

    def classify_head_scales(model, x):  # a per-head temperature (heads, 1, 1, 1) as the scale
        for block in model.blocks:
            heads = block.attn.heads
            block.attn.scale = torch.linspace(0.5, 1.5, heads, dtype=x.dtype).view(heads, 1, 1, 1)
        return model(x)
    img, vid = (2, 3, 128, 128), (2, 3, 4, 64, 64)
    head = dict(embed_dim=32, num_heads=2, stages=(1, 2, 3, 1), num_classes=10)
    return [
        ("mae-2d q_pool=3", "MaskedAutoencoderHiera", dict(input_size=(128, 128), **MICRO), img, mae),
        ("mae-2d q_pool=2 ratio=.5", "MaskedAutoencoderHiera", dict(input_size=(128, 128), q_pool=2, **MICRO), img, mae_ratio),
        ("mae-2d q_pool=1 mu_attn", "MaskedAutoencoderHiera",
         dict(input_size=(128, 128), q_pool=1, mask_unit_attn=(True, True, True, False), **MICRO), img, mae),
        ("mae-2d given mask", "MaskedAutoencoderHiera", dict(input_size=(128, 128), q_pool=2, **MICRO), img, mae_given_mask),
        ("mae-3d q_pool=2", "MaskedAutoencoderHiera", dict(input_size=(4, 64, 64), q_pool=2, **MICRO, **VIDEO), vid, mae),
        ("hiera-2d classifier", "Hiera", dict(input_size=(128, 128), **head), img, classify),
        ("hiera-2d masked q_pool=2", "Hiera", dict(input_size=(128, 128), q_pool=2, **head), img, classify_masked),
        ("hiera-3d classifier", "Hiera", dict(input_size=(4, 64, 64), q_pool=2, **head, **VIDEO), vid, classify),
        ("hiera-2d per-head scales", "Hiera", dict(input_size=(128, 128), q_pool=2, **head), img, classify_head_scales),
    ]


def import_export(export_dir: Path, workdir: Path):
    """Import EXPORT_DIR as package `hiera_export` (its modules import each other relatively)."""
    import importlib

    shutil.copytree(export_dir, workdir / EXPORT_PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(workdir))
    return importlib.import_module(EXPORT_PACKAGE)


def main(argv) -> int:
    without_sdpa = "--without-sdpa" in argv[1:]
    argv = [a for a in argv if a != "--without-sdpa"]
    if len(argv) != 2 or not Path(argv[1]).is_dir():
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # timm.models.layers
    import torch

    import hiera as original

    versions = f"torch {torch.__version__}"
    if without_sdpa and hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        del torch.nn.functional.scaled_dot_product_attention
        versions += " without SDPA"
    try:
        import timm

        versions += f", timm {timm.__version__}"
    except ImportError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        try:
            export = import_export(Path(argv[1]), Path(tmp))
        except Exception:
            traceback.print_exc()
            print(f"FAIL import of the export ({versions}): see the traceback above")
            return 2
        failed = 0
        all_cases = cases(torch)
        for name, cls_name, kwargs, shape, call in all_cases:
            try:
                a = build(torch, getattr(original, cls_name), kwargs)
                randomize_(a, torch)
                b = build(torch, getattr(export, cls_name), kwargs)
                b.load_state_dict(a.state_dict(), strict=True)
                x = torch.randn(*shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
                worst_out, worst_grad, n = compare(torch, run(torch, a, call, (x,)), run(torch, b, call, (x,)))
                print(f"ok   {name:28} outputs {worst_out:.1e}, {n} gradients {worst_grad:.1e}")
            except Exception as exc:  # noqa: BLE001  (a crash in the export is a failure too)
                failed += 1
                where = traceback.extract_tb(exc.__traceback__)[-1]
                print(f"FAIL {name:28} {type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})")
        print(f"{len(all_cases) - failed}/{len(all_cases)} cases equal the original ({versions}, rel. tol {REL_TOL:g})")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
