#!/usr/bin/env python3
"""GPU parity suite (issue 30, item 1): the rewritten code is as accurate as the original,
in the dtypes people train in, on every SDPA backend.

For each model, dtype (bf16, fp16, fp32) and SDPA backend (the default, and each of MATH,
FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION forced with
``torch.nn.attention.sdpa_kernel``; forced backends on CUDA only), the original and the
rewritten model, with the same weights and inputs rounded to that dtype, run forward and
backward; each is compared with a float64 run of the ORIGINAL on the same (rounded)
weights, inputs and mask values, on the same device:

- every floating output (the MAE: loss, pred, label; its bool mask must be equal),
- the scalar that is backpropagated (the MAE's own loss; else a fixed random projection
  of the outputs, computed in float64),
- every parameter gradient.

A tensor passes when  err_rewritten <= 2 * err_original + 4 * eps(dtype) * max|reference|
(err = max |t - reference|; NaN where the reference is finite is an infinite error). A
cell passes when every tensor does; its ratio is the largest err_rewritten / bound.
A backend that refuses the rewritten's inputs is 'n/a'. Where the original alone is
refused (its 5-D SDPA call reaches only the math kernel), the rewritten is held to the
original's error under the default backend ('orig@default' in the JSON). Where both raise
in the default backend (e.g. a float32 mask added to bf16 logits in a manual fallback),
the cell is 'n/a (both raise)'; where only one raises, it FAILS.

Models:
- upstream: Hiera-Tiny 224 classifier and MAE-Tiny 224 (mask ratio 0.6, the mask drawn
  inside the model with the same seed) from the installed hiera-transformer; the
  rewritten copy is `hiera-rewrite --export`'s (--rewritten-src: hiera.py, hiera_mae.py,
  hiera_utils.py; default benchmarks/results/issue29/export, git-ignored: make it with
  `hiera-rewrite --export DIR` and carry it to the device, or --export to make one now);
- goldens under golden/attention/ whose original SDPA call passes extras (attn_mask,
  scale=, dropout_p=): attn_mask_5d's blocks with a padding mask as bool, float32 and q's
  dtype (-inf where padded, finite values not exact in bf16; partly and fully masked
  rows) at the golden's head_dim 4 (which the fused kernels refuse) and at head_dim 64,
  its manual fallback, every other such golden's golden_example() and sdpa_scale_kwarg's
  Attention at head_dim 64;
  --all-goldens adds every golden/attention golden with a golden_example().

    python benchmarks/gpu_parity.py --device cuda --out benchmarks/results/issue30
    python benchmarks/gpu_parity.py --device cpu --dtypes fp32,bf16 --out /tmp/p   # smoke
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "golden" / "attention"
DEFAULT_EXPORT = ROOT / "benchmarks" / "results" / "issue29" / "export"
REWRITTEN_FILES = ("hiera.py", "hiera_mae.py", "hiera_utils.py")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BACKENDS = ["default", "math", "flash", "efficient", "cudnn"]
ULPS = 4
SDPA_CALL = re.compile(r"scaled_dot_product_attention\(([^)]*)\)", re.S)
EXTRA_KEYWORDS = re.compile(r"\b(attn_mask|scale|dropout_p)\s*=")


# --------------------------------------------------------------------------------------
# building the models
# --------------------------------------------------------------------------------------

def _exec_module(path: Path, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


def upstream_packages(rewritten_src: Path, tmp: Path):
    """(original hiera package, rewritten copy): the installed package copied with the
    three rewritten files replaced."""
    import hiera  # noqa: F401

    src = Path(list(importlib.util.find_spec("hiera").submodule_search_locations)[0])
    dst = tmp / "hiera_parity_rewritten"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in REWRITTEN_FILES:
        shutil.copyfile(rewritten_src / f, dst / f)
    sys.path.insert(0, str(tmp))
    importlib.invalidate_caches()
    return importlib.import_module("hiera"), importlib.import_module("hiera_parity_rewritten")


class Case:
    """build(module) -> (model float32, inputs builder: dtype -> tuple); kind 'mae' uses the
    model's own loss."""

    def __init__(self, name, before, after, build, make_inputs, kind="generic", extras=""):
        self.name, self.before, self.after = name, before, after
        self.build, self.make_inputs, self.kind, self.extras = build, make_inputs, kind, extras


def upstream_cases(orig, rew, device):
    B = 2

    def x_of(dtype):
        g = torch.Generator().manual_seed(1)
        return (torch.randn(B, 3, 224, 224, generator=g).to(device=device, dtype=dtype),)

    return [
        Case("upstream hiera_tiny_224 (classifier)", orig, rew,
             lambda m: m.hiera_tiny_224(pretrained=False), x_of, extras="no mask; 4-D SDPA"),
        Case("upstream mae_hiera_tiny_224 (MAE, mask 0.6)", orig, rew,
             lambda m: m.mae_hiera_tiny_224(pretrained=False), x_of, kind="mae",
             extras="mask drawn inside (same seed)"),
    ]


# attn_mask_5d: the blocks of its golden_example, fed masks of each kind
def _mask_blocks(m, fallback, d=8):
    """The golden's blocks (d=8: head_dim 4, which the fused kernels refuse; d=128: head_dim
    64, which flash, memory-efficient and cuDNN accept)."""
    if fallback:
        return [m.FusedFlagMaskAttention(d, d, 2, window_size=2, use_mask_unit_attn=True, fused=False),
                m.FusedFlagMaskAttention(d, d, 2, use_mask_unit_attn=False, fused=False)]
    return [
        m.PaddedMaskUnitAttention(d, d, 2, q_stride=2, window_size=4, use_mask_unit_attn=True),
        m.PaddedMaskUnitAttention(d, d, 2, use_mask_unit_attn=False),
        m.EveryBlockMaskAttention(d, d, 2, q_stride=2, window_size=4, use_mask_unit_attn=True),
        m.EveryBlockMaskAttention(d, d, 2, window_size=2, use_mask_unit_attn=True),
        m.EveryBlockMaskAttention(d, d, 2, use_mask_unit_attn=False),
        m.FusedFlagMaskAttention(d, d, 2, window_size=2, use_mask_unit_attn=True),
        m.FusedFlagMaskAttention(d, d, 2, use_mask_unit_attn=False),
    ]


class Blocks(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x, mask):
        return [block(x, mask) for block in self.blocks]


def attn_mask_cases(device, dtypes):
    path = GOLDEN / "attn_mask_5d"
    before = _exec_module(path.with_suffix(".in.py"), "parity_attn_mask_5d_in")
    after = _exec_module(path.with_suffix(".out.py"), "parity_attn_mask_5d_out")
    B, N = 2, 64
    cases = []
    for fallback, d in ((False, 8), (False, 128), (True, 8)):
        # fused blocks: clip 0 partly padded, clip 1 with whole windows padded (fully
        # masked rows); the manual fallback gives NaN there (before and after): partly only
        keep = before._keep(B, N, 4, 40 if fallback else 20, not fallback)
        for kind in ("bool", "float32", "q"):
            def make_inputs(dtype, kind=kind, keep=keep, d=d):
                g = torch.Generator().manual_seed(2)
                x = torch.randn(B, N, d, generator=g).to(device=device, dtype=dtype)
                if kind == "bool":
                    mask = keep.to(device)
                else:
                    bias = torch.where(keep, -0.3 * (torch.arange(N, dtype=torch.float64) % 3), float("-inf"))
                    mask = bias.to(device=device, dtype=torch.float32 if kind == "float32" else dtype)
                return (x, mask)

            what = "manual fallback" if fallback else f"7 SDPA blocks, head_dim {d // 2}"
            extras = {"bool": "bool mask", "float32": "float32 mask, -inf", "q": "mask in q's dtype, -inf"}[kind]
            cases.append(Case(f"golden attn_mask_5d {what} [{kind} mask]", before, after,
                              lambda m, fallback=fallback, d=d: Blocks(_mask_blocks(m, fallback, d)), make_inputs,
                              extras=extras + ("" if fallback else "; fully masked rows")))
    return cases


def scale_kwarg_wide_case(device):
    """sdpa_scale_kwarg's Attention at head_dim 64 (its golden_example has head_dim 4, which
    the fused kernels refuse)."""
    path = GOLDEN / "sdpa_scale_kwarg"
    before = _exec_module(path.with_suffix(".in.py"), "parity_scale_wide_in")
    after = _exec_module(path.with_suffix(".out.py"), "parity_scale_wide_out")

    def make_inputs(dtype):
        g = torch.Generator().manual_seed(3)
        return (torch.randn(2, 32, 128, generator=g).to(device=device, dtype=dtype),)

    return Case("golden sdpa_scale_kwarg, head_dim 64", before, after,
                lambda m: nn.Sequential(m.Attention(128, 2, q_stride=2, window_size=4), m.Attention(128, 2, window_size=4)),
                make_inputs, extras="attn_mask=None, dropout_p=0.0, scale=")


def golden_example_cases(device, all_goldens):
    cases = [scale_kwarg_wide_case(device)]
    for path in sorted(GOLDEN.glob("*.in.py")):
        stem = path.name[: -len(".in.py")]
        out = path.with_name(stem + ".out.py")
        if stem == "attn_mask_5d" or not out.exists():
            continue
        src = path.read_text(encoding="latin-1")
        if "def golden_example" not in src:
            continue
        extras = sorted({k for call in SDPA_CALL.findall(src) for k in EXTRA_KEYWORDS.findall(call)})
        if not extras and not all_goldens:
            continue
        before = _exec_module(path, f"parity_{stem}_in")
        after = _exec_module(out, f"parity_{stem}_out")
        holder = {}

        def build(m, holder=holder):
            model, inputs = m.golden_example()
            holder["inputs"] = inputs
            return model.float()

        def make_inputs(dtype, holder=holder):
            return tuple(t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)
                         for t in holder["inputs"])

        cases.append(Case(f"golden {stem}", before, after, build, make_inputs,
                          extras=", ".join(f"{e}=" for e in extras) or "plain SDPA"))
    return cases


# --------------------------------------------------------------------------------------
# running and comparing
# --------------------------------------------------------------------------------------

def _flatten(value):
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flatten(item)]
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _flatten(value[key])]
    return [value]


def _backend_ctx(backend):
    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    return sdpa_kernel([kind])


LOSS_SCALE = None  # None: as torch.amp.GradScaler trains fp16 (see loss_scales), 1 for other dtypes
GRAD_SCALER_INIT = 2.0 ** 16  # torch.amp.GradScaler's init_scale


def loss_scales(model):
    """The loss scales to try in turn: ``--loss-scale S`` gives [S]; by default an fp16 model
    is trained as a GradScaler trains it (from its initial 2**16, halved while a gradient is
    inf/NaN, as the scaler halves and skips that step), any other dtype unscaled."""
    if LOSS_SCALE is not None:
        return [LOSS_SCALE]
    if any(p.dtype == torch.float16 for p in model.parameters()):
        return [GRAD_SCALER_INIT / 2 ** k for k in range(17)]
    return [1.0]


def run_model(model, inputs, case, backend, seed):
    """Forward + backward; returns {name: tensor} (kept on the device) with outputs, the
    backpropagated scalar and parameter gradients (unscaled: divided by the loss scale)."""
    scales = loss_scales(model)
    for scale in scales:
        result = _forward_backward(model, inputs, case, backend, seed, scale)
        grads = [t for k, t in result.items() if k.startswith("grad ") and t is not None]
        if scale == scales[-1] or all(bool(torch.isfinite(g).all()) for g in grads):
            result["loss scale"] = scale
            return result
    raise AssertionError("unreachable")


def _forward_backward(model, inputs, case, backend, seed, scale):
    model.zero_grad(set_to_none=True)
    with _backend_ctx(backend):
        torch.manual_seed(seed)
        out = model(*inputs)
        leaves = [t for t in _flatten(out) if isinstance(t, torch.Tensor)]
        if case.kind == "mae":
            scalar = out[0]
        else:
            total = 0
            for i, t in enumerate(leaves):
                if t.is_floating_point():
                    g = torch.Generator().manual_seed(100 + i)
                    w = torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.device)
                    total = total + (t.double() * w).sum()
            scalar = total
        (scalar.float() * scale if scale != 1.0 else scalar).backward()
    result = {}
    for i, t in enumerate(leaves):
        result[f"out[{i}]"] = t.detach()
    result["loss"] = scalar.detach().reshape(())
    for n, p in model.named_parameters():
        result[f"grad {n}"] = None if p.grad is None else p.grad.detach().double() / scale
    return result


def _err(t, ref):
    """max |t - ref| in float64; NaN/inf where the reference has neither is an infinite
    error, NaN where both have NaN (and the same inf) counts as equal."""
    t, ref = t.double(), ref.double()
    if t.shape != ref.shape:
        return math.inf
    if not t.numel():
        return 0.0
    same = (torch.isnan(t) & torch.isnan(ref)) | ((t == ref) & torch.isinf(ref))
    d = (t - ref).abs()
    d = torch.where(same, torch.zeros_like(d), d)
    d = torch.where(torch.isnan(d), torch.full_like(d, math.inf), d)
    return d.max().item()


def _maxabs(ref):
    ref = ref.double()
    finite = ref[torch.isfinite(ref)]
    return finite.abs().max().item() if finite.numel() else 0.0


def compare(orig, rew, ref, eps):
    """Per tensor: (name, err_orig, err_rew, bound, ratio, ok); plus problems (strings)."""
    rows, problems = [], []
    for name, r in ref.items():
        a, b = orig.get(name), rew.get(name)
        if r is None:
            if a is not None or b is not None:
                if b is not None and a is None:
                    pass
                problems.append(f"{name}: gradient None in the reference, not in a run")
            continue
        if a is None or b is None:
            problems.append(f"{name}: missing in the {'original' if a is None else 'rewritten'} run")
            continue
        if not r.is_floating_point():
            if not torch.equal(r.cpu(), b.cpu()):
                problems.append(f"{name}: {r.dtype} output differs from the reference (e.g. the MAE mask)")
            continue
        ea, eb = _err(a, r), _err(b, r)
        bound = 2 * ea + ULPS * eps * _maxabs(r)
        ratio = eb / bound if bound > 0 else (0.0 if eb == 0 else math.inf)
        rows.append((name, ea, eb, bound, ratio, eb <= bound))
    if set(rew) != set(ref):
        problems.append(f"rewritten tensors differ: {sorted(set(rew) ^ set(ref))[:4]}")
    return rows, problems


def _short(exc):
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return msg[:240]


def run_case(case, dtype_name, backends, device, seed, log):
    dtype = DTYPES[dtype_name]
    eps = torch.finfo(dtype).eps
    torch.manual_seed(0)
    model_a = case.build(case.before).to(device=device, dtype=dtype)
    torch.manual_seed(0)
    model_b = case.build(case.after).to(device=device, dtype=dtype)
    missing, unexpected = model_b.load_state_dict(model_a.state_dict(), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    model_ref = copy.deepcopy(model_a).double()
    inputs = case.make_inputs(dtype)
    ref_inputs = tuple(t.double() if t.is_floating_point() else t for t in inputs)
    cells = {}
    try:
        ref = run_model(model_ref, ref_inputs, case, "default", seed)
        ref.pop("loss scale")
    except Exception as exc:  # the float64 original itself fails: nothing to compare
        for b in backends:
            cells[b] = {"status": "n/a", "note": f"float64 reference raises: {_short(exc)}"}
        return cells
    default_orig = None
    for backend in backends:
        cell = {"status": None}
        try:
            o = run_model(model_a, inputs, case, backend, seed)
            orig_note = None
        except Exception as exc:
            o, orig_note = None, _short(exc)
        try:
            r = run_model(model_b, inputs, case, backend, seed)
            rew_note = None
        except Exception as exc:
            r, rew_note = None, _short(exc)
        scales = {side: res.pop("loss scale") for side, res in (("original", o), ("rewritten", r)) if res is not None}
        if any(v != 1.0 for v in scales.values()):
            cell["loss_scale"] = scales
        if backend == "default":
            default_orig = o
        if r is None:
            if backend == "default" and o is not None:
                cell.update(status="FAIL", note=f"rewritten raises, original does not: {rew_note}")
            elif backend == "default":
                cell.update(status="n/a", note=f"both raise: {rew_note}")
            else:
                cell.update(status="n/a", note=f"backend refuses the rewritten's inputs: {rew_note}")
            cells[backend] = cell
            continue
        baseline = "same backend"
        if o is None:
            if backend == "default":
                cell.update(status="FAIL", note=f"original raises, rewritten does not: {orig_note}")
                cells[backend] = cell
                continue
            if default_orig is None:
                cell.update(status="n/a", note=f"original raises here and in the default backend: {orig_note}")
                cells[backend] = cell
                continue
            o, baseline = default_orig, "orig@default"
        rows, problems = compare(o, r, ref, eps)
        worst = max(rows, key=lambda t: t[4]) if rows else None
        failing = [t for t in rows if not t[5]]
        cell.update(
            status="FAIL" if failing or problems else "PASS",
            baseline=baseline,
            original_note=orig_note,
            tensors=len(rows),
            worst_ratio=worst[4] if worst else 0.0,
            worst_tensor=worst[0] if worst else None,
            worst_err_original=worst[1] if worst else None,
            worst_err_rewritten=worst[2] if worst else None,
            worst_bound=worst[3] if worst else None,
            failing=[dict(tensor=t[0], err_original=t[1], err_rewritten=t[2], bound=t[3], ratio=t[4])
                     for t in failing[:12]],
            problems=problems,
        )
        if cell["status"] == "FAIL":
            log(f"  FAIL {case.name} {dtype_name} {backend}: {problems[:3]} "
                f"{[(f['tensor'], f['err_original'], f['err_rewritten'], f['bound']) for f in cell['failing'][:3]]}")
        cells[backend] = cell
    return cells


# --------------------------------------------------------------------------------------

def fmt_cell(c):
    if c["status"] == "n/a":
        return "n/a"
    if c["status"] == "PASS":
        return f"{c['worst_ratio']:.2f}" + ("°" if c.get("baseline") == "orig@default" else "")
    r = c.get("worst_ratio")
    return f"**FAIL** {r:.2f}" if r is not None else "**FAIL**"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtypes", default="bf16,fp16,fp32")
    p.add_argument("--backends", default=None, help="comma list of default,math,flash,efficient,cudnn "
                   "(default: all on CUDA, default only on CPU)")
    p.add_argument("--rewritten-src", type=Path, default=None,
                   help=f"folder with the exported hiera.py/hiera_mae.py/hiera_utils.py (default {DEFAULT_EXPORT.relative_to(ROOT)})")
    p.add_argument("--export", action="store_true", help="make the rewritten copy now with `hiera-rewrite --export`")
    p.add_argument("--all-goldens", action="store_true", help="every golden/attention golden with golden_example()")
    p.add_argument("--no-upstream", action="store_true")
    p.add_argument("--only", default=None, help="regex on case names")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--tag", default="", help="suffix of the output files' names (gpu_parity{tag}.md)")
    p.add_argument("--loss-scale", type=float, default=None,
                   help="backpropagate loss x S and compare grads / S (the reference too); default: fp16 as "
                        "torch.amp.GradScaler trains it (2**16, halved while a gradient is inf/NaN), other "
                        "dtypes 1; --loss-scale 1 is fp16 without a scaler")
    p.add_argument("--math-reduction", action="store_true",
                   help="diagnostic: torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True): the math "
                        "kernel (the original's 5-D call) computes in fp16/bf16 instead of upcasting to fp32")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    backends = args.backends.split(",") if args.backends else (BACKENDS if cuda else ["default"])
    if not cuda and backends != ["default"]:
        raise SystemExit("forced SDPA backends are for CUDA only")
    dtypes = args.dtypes.split(",")
    global LOSS_SCALE
    LOSS_SCALE = args.loss_scale
    if args.math_reduction:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    t0 = time.time()
    log_lines = []

    def log(msg):
        line = f"[gpu_parity {time.time() - t0:6.1f}s] {msg}"
        print(line, flush=True)
        log_lines.append(line)

    tmp = Path(tempfile.mkdtemp(prefix="gpu_parity_"))
    src = args.rewritten_src or DEFAULT_EXPORT
    if args.export:
        src = tmp / "export"
        subprocess.run([shutil.which("hiera-rewrite") or "hiera-rewrite", "--export", str(src), "-q"], check=True)
    cases = []
    if not args.no_upstream:
        orig, rew = upstream_packages(src, tmp)
        cases += upstream_cases(orig, rew, device)
    cases += attn_mask_cases(device, dtypes)
    cases += golden_example_cases(device, args.all_goldens)
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    env = dict(torch=torch.__version__, python=platform.python_version(), device=str(device),
               gpu=torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine(),
               cudnn=torch.backends.cudnn.version() if cuda else None, rewritten_src=str(src),
               loss_scale=args.loss_scale, math_reduction=args.math_reduction,
               rule=f"err_rew <= 2*err_orig + {ULPS}*eps(dtype)*max|ref|; err = max|t - ref|, ref = float64 original")
    log(f"{len(cases)} cases x {len(dtypes)} dtypes x {len(backends)} backends on {env['gpu']}, torch {torch.__version__}")
    results = []
    for case in cases:
        for dt in dtypes:
            t1 = time.time()
            try:
                cells = run_case(case, dt, backends, device, args.seed, log)
            except Exception as exc:
                traceback.print_exc()
                cells = {b: {"status": "FAIL", "note": f"harness error: {_short(exc)}"} for b in backends}
            results.append(dict(case=case.name, extras=case.extras, dtype=dt, cells=cells))
            log(f"{case.name} {dt}: " + " ".join(f"{b}={fmt_cell(c)}" for b, c in cells.items())
                + f" ({time.time() - t1:.1f}s)")

    counts = {"PASS": 0, "FAIL": 0, "n/a": 0}
    for r in results:
        for c in r["cells"].values():
            counts[c["status"]] += 1
    passed = [(c["worst_ratio"], r["case"], r["dtype"], b, c["worst_tensor"])
              for r in results for b, c in r["cells"].items() if c["status"] == "PASS"]
    worst = sorted(passed, reverse=True)[:5]

    md = ["## GPU parity: original vs rewritten vs a float64 reference of the original", "",
          f"{env['gpu']}, torch {env['torch']}, cuDNN {env['cudnn']}; rewritten: `{src}`; "
          f"loss scale {'fp16 as GradScaler trains it (2**16, halved while a gradient is inf/NaN), others 1' if args.loss_scale is None else format(args.loss_scale, 'g')}; math fp16/bf16 reduction {'allowed (diagnostic)' if args.math_reduction else 'off (default: fp32 upcast)'}.", "",
          "`" + " ".join(["python", "benchmarks/gpu_parity.py"] + sys.argv[1:]) + "`", "",
          f"Each cell: the largest err_rewritten / (2 x err_original + {ULPS} eps x max|ref|) over the outputs, "
          "the backpropagated loss and every parameter gradient (<= 1 passes); err = max |t - ref|, the reference "
          "is the original in float64 on the same rounded weights, inputs and mask values. n/a: the backend refuses "
          "the rewritten's inputs (or both raise). °: the original is refused by this backend (its 5-D call reaches "
          "math only); the rewritten is held to the original's default-backend error.", "",
          "| model | SDPA extras | dtype | " + " | ".join(backends) + " |",
          "|---|---|---|" + "---|" * len(backends)]
    for r in results:
        md.append(f"| {r['case']} | {r['extras']} | {r['dtype']} | "
                  + " | ".join(fmt_cell(r["cells"][b]) for b in backends) + " |")
    md += ["", f"cells: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['n/a']} n/a; "
           f"wall {time.time() - t0:.0f} s", "", "worst passing ratios: "
           + "; ".join(f"{w[0]:.2f} ({w[1]}, {w[2]}, {w[3]}, {w[4]})" for w in worst)]
    fails = [(r, b, c) for r in results for b, c in r["cells"].items() if c["status"] == "FAIL"]
    if fails:
        md += ["", "### failing cells", ""]
        for r, b, c in fails:
            md.append(f"- {r['case']} {r['dtype']} {b}: {c.get('note') or ''} {c.get('problems') or ''} "
                      + "; ".join(f"{f['tensor']}: err {f['err_rewritten']:.3g} vs orig {f['err_original']:.3g}, "
                                  f"bound {f['bound']:.3g}" for f in c.get("failing", [])[:6]))
    na = sorted({(b, c.get("note", "")[:160]) for r in results for b, c in r["cells"].items() if c["status"] == "n/a"})
    if na:
        md += ["", "### n/a reasons (distinct)", ""] + [f"- {b}: {n}" for b, n in na[:30]]
    text = "\n".join(md) + "\n"
    print()
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"gpu_parity{args.tag}.md").write_text(text)
        (args.out / f"gpu_parity{args.tag}.json").write_text(json.dumps(
            dict(env=env, argv=sys.argv, counts=counts, results=results), indent=1, default=str))
        (args.out / f"gpu_parity{args.tag}.log").write_text("\n".join(log_lines) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
