#!/usr/bin/env python3
"""Hiera MAE training-step benchmark: FAIR vs. hiera-rewrite output vs. hiera-optim.

One process, one device, the same weights and the same input batch for every
contender of a cell:

* ``fair``      -- the installed ``hiera-transformer`` package, untouched;
* ``rewritten`` -- the same package folder copied to a temp dir, its ``hiera.py``,
  ``hiera_mae.py`` and ``hiera_utils.py`` rewritten by ``hiera_rewrite.engine.
  rewrite_bytes`` (default rewrites), imported as the package ``hiera_rewritten``;
* ``optim``     -- hiera-optim 0.2.1 applied to the FAIR model, when importable
  (the script builds the ``models/hiera.py`` + ``utils/hiera_utils.py`` import
  shim it needs and sets ``_grad_checkpointing``; both are printed).

A step is forward + loss + backward + ``zero_grad(set_to_none=True)``; no optimizer
unless ``--optimizer adamw``.  Weights are cast with ``model.to(dtype)`` (bf16 by
default; no autocast).  By default each step draws its own random mask, as a
training loop does (``--mask draw``); every contender's loss is checked against
the FAIR eager loss on the mask that step returned.  See benchmarks/NOTES.md.

Timing (issue 15): for each (cell, mode) every contender is built, compiled and
warmed, and all stay alive side by side; then ``--steps`` rounds each run one step
of every contender in turn (A, B, C, A, B, C, ...), the RNG reseeded per round, so
a drift of the machine hits all alike.  Reported per contender: median, IQR and min
over rounds; per pair, the median of the per-round ratios.  Where the contenders
cannot all stay alive (CUDA out of memory, or less free memory than the step of the
one warmed before), the group falls back to one contender at a time and says so;
``--sequential`` forces that.  GPU clock and temperature are read (pynvml or
nvidia-smi) at the start and end of the program and of every group.

Examples (repo root as working dir)::

    python3 benchmarks/bench.py --cells headline --out out/          # eager, compile, ro
    python3 benchmarks/bench.py --matrix --modes eager --out out/
    python3 benchmarks/bench.py --device cpu --tiny --out /tmp/smoke  # CPU smoke test
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import importlib.util
import json
import math
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
T0 = time.perf_counter()

# --------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------

_IMAGE = dict(in_chans=3, input_size=(224, 224))
_VIDEO = dict(
    in_chans=3,
    input_size=(16, 224, 224),
    q_stride=(1, 2, 2),
    mask_unit_size=(1, 8, 8),
    patch_kernel=(3, 7, 7),
    patch_stride=(2, 4, 4),
    patch_padding=(1, 3, 3),
    sep_pos_embed=True,
)
_TINY = dict(embed_dim=96, num_heads=1, stages=(1, 2, 7, 2))
_SMALL = dict(embed_dim=96, num_heads=1, stages=(1, 2, 11, 2))
_BASE = dict(embed_dim=96, num_heads=1, stages=(2, 3, 16, 3))
_LARGE = dict(embed_dim=144, num_heads=2, stages=(2, 6, 36, 4))


@dataclasses.dataclass
class Cell:
    name: str
    desc: str
    config: Dict[str, Any]  # MaskedAutoencoderHiera(**config)
    batch: int

    @property
    def input_shape(self) -> Tuple[int, ...]:
        return (self.batch, self.config["in_chans"], *self.config["input_size"])


CELLS: Dict[str, Cell] = {
    c.name: c
    for c in [
        # the headline: mae_hiera_base_224's exact configuration
        Cell("base", "Hiera-Base MAE 224 q_pool=2 (headline)", dict(**_BASE, q_pool=2, **_IMAGE), 128),
        Cell("tiny", "Hiera-Tiny MAE 224 q_pool=2", dict(**_TINY, q_pool=2, **_IMAGE), 128),
        Cell("small", "Hiera-Small MAE 224 q_pool=2", dict(**_SMALL, q_pool=2, **_IMAGE), 128),
        Cell("large", "Hiera-Large MAE 224 q_pool=2", dict(**_LARGE, q_pool=2, **_IMAGE), 128),
        Cell("base_q1", "Hiera-Base MAE 224 q_pool=1", dict(**_BASE, q_pool=1, **_IMAGE), 128),
        Cell("base_q3", "Hiera-Base MAE 224 q_pool=3", dict(**_BASE, q_pool=3, **_IMAGE), 128),
        Cell("video", "Hiera-Base MAE 16x224 video (mae_hiera_base_16x224)", dict(**_BASE, q_pool=2, **_VIDEO), 16),
    ]
}
MATRIX = ["tiny", "small", "base", "large", "base_q1", "base_q3", "video"]
ALIASES = {"headline": "base"}

# --tiny: shapes small enough for a CPU smoke run (a 4-block Hiera, 1 decoder block)
_MICRO = dict(embed_dim=16, num_heads=1, stages=(1, 1, 1, 1), decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=1)
TINY_CELLS: Dict[str, Cell] = {
    c.name: c
    for c in [
        Cell("micro2d", "smoke: 4-block Hiera MAE 64x64 q_pool=2", dict(**_MICRO, q_pool=2, in_chans=3, input_size=(64, 64)), 2),
        Cell(
            "micro3d",
            "smoke: 4-block Hiera MAE 4x64x64 video",
            dict(**_MICRO, q_pool=2, **{**_VIDEO, "input_size": (4, 64, 64)}),
            2,
        ),
    ]
}

CONTENDERS = ["fair", "rewritten", "optim", "variant"]  # variant: --variant NAME (benchmarks/variants.py)
MODES = ["eager", "compile", "ro"]
MODE_LABEL = {"eager": "eager", "compile": "compile", "ro": "reduce-overhead"}
# issue 15 / DESIGN.md section 5: rewritten/hiera-optim per mode, in the same run
RATIO_TARGETS = {"eager": 0.95, "compile": 0.85, "ro": 0.85}
TARGET_PEAK_GIB = 8.0


def log(msg: str) -> None:
    print(f"[bench {time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


# --------------------------------------------------------------------------------------
# The tool (hiera_rewrite) from a plain checkout
# --------------------------------------------------------------------------------------


def _package_dir_map() -> Dict[str, str]:
    """``[tool.setuptools.package-dir]`` of the repo's pyproject (e.g. codemods/)."""
    text = (REPO / "pyproject.toml").read_text()
    try:
        import tomllib  # python >= 3.11

        return dict(tomllib.loads(text).get("tool", {}).get("setuptools", {}).get("package-dir", {}))
    except ImportError:
        return {"hiera_rewrite.codemods": "codemods"}


def import_rewrite_engine():
    """Import ``hiera_rewrite.engine`` from an install or from this checkout.

    setuptools maps ``hiera_rewrite.codemods`` to the top-level ``codemods/`` folder,
    so with only the checkout on PYTHONPATH that subpackage is not found.  Register
    every mapped subpackage from its folder before the engine asks for it.
    """
    try:
        import hiera_rewrite  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(REPO))
        import hiera_rewrite  # noqa: F401
    for pkg, rel in _package_dir_map().items():
        if not pkg or "." not in pkg or pkg in sys.modules:
            continue
        try:
            importlib.import_module(pkg)
            continue
        except ModuleNotFoundError as exc:
            if exc.name != pkg:
                raise
        folder = (REPO / rel).resolve()
        spec = importlib.util.spec_from_file_location(
            pkg, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[pkg] = module
        parent, _, leaf = pkg.rpartition(".")
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[pkg]
            raise
        setattr(sys.modules[parent], leaf, module)
        log(f"registered {pkg} from {folder} (plain checkout on PYTHONPATH)")
    from hiera_rewrite import engine

    engine.selected_codes()  # loads the rewrites now: fail early, not mid-run
    return engine


def upstream_dir() -> Path:
    spec = importlib.util.find_spec("hiera")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("hiera-transformer is not installed (pip install --no-deps hiera-transformer==0.1.4)")
    return Path(list(spec.submodule_search_locations)[0])


REWRITTEN_FILES = ("hiera.py", "hiera_mae.py", "hiera_utils.py")


def make_rewritten_package(tmp: Path, name: str = "hiera_rewritten", pregenerated: Optional[Path] = None):
    """Copy the installed FAIR package to ``tmp/name``, rewrite its files, import it.

    Returns (module, {file: [codes applied]}).  With ``pregenerated``, that folder's
    files replace the rewritten ones (for machines without libcst/black).
    """
    src = upstream_dir()
    dst = tmp / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    applied: Dict[str, List[str]] = {}
    if pregenerated is not None:
        for f in REWRITTEN_FILES:
            shutil.copyfile(pregenerated / f, dst / f)
            applied[f] = ["pregenerated"]
    else:
        engine = import_rewrite_engine()
        for f in REWRITTEN_FILES:
            result = engine.rewrite_bytes((src / f).read_bytes())
            (dst / f).write_bytes(result.output)
            applied[f] = [f"{r.code}@{r.line}" for r in result.changes]
            for r in result.reports:
                if not r.applied:
                    log(f"  {f}:{r.line}:{r.col}: {r.code} {r.message}")
    if str(tmp) not in sys.path:
        sys.path.insert(0, str(tmp))
    importlib.invalidate_caches()
    module = importlib.import_module(name)
    return module, applied


# --------------------------------------------------------------------------------------
# hiera-optim: import shim
# --------------------------------------------------------------------------------------

_SHIM_MODELS = """\
# bench.py shim: hiera-optim 0.2.1 resolves FAIR's classes from an in-tree
# models/hiera.py; re-export the installed hiera-transformer's.
from hiera.hiera import *  # noqa: F401,F403
from hiera.hiera import Hiera, HieraBlock, MaskUnitAttention, do_pool  # noqa: F401
from hiera.hiera_mae import MaskedAutoencoderHiera, apply_fusion_head  # noqa: F401
"""
_SHIM_UTILS = """\
# bench.py shim for hiera-optim 0.2.1 (see models/hiera.py)
from hiera.hiera_utils import *  # noqa: F401,F403
from hiera.hiera_utils import undo_windowing  # noqa: F401
"""


def setup_hiera_optim(tmp: Path):
    """Import hiera-optim with the layout shim it needs. Returns (module | None, note)."""
    if importlib.util.find_spec("hiera_optim") is None:
        return None, "hiera-optim not installed: contender skipped"
    import hiera
    import hiera.hiera_mae
    import hiera.hiera_utils

    shim = tmp / "hiera_optim_shim"
    (shim / "models").mkdir(parents=True)
    (shim / "utils").mkdir(parents=True)
    (shim / "models" / "__init__.py").write_text("")
    (shim / "models" / "hiera.py").write_text(_SHIM_MODELS)
    (shim / "utils" / "__init__.py").write_text("")
    (shim / "utils" / "hiera_utils.py").write_text(_SHIM_UTILS)
    clash = [n for n in ("models", "utils") if n in sys.modules]
    sys.path.insert(0, str(shim))
    importlib.invalidate_caches()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import hiera_optim
            from hiera_optim.adapters import hiera as adapter
    except Exception as exc:  # triton missing, ...
        return None, f"hiera-optim not importable ({type(exc).__name__}: {exc}): contender skipped"
    finally:
        sys.path.remove(str(shim))
    note = (
        f"hiera-optim {getattr(hiera_optim, '__version__', '?')}: import shim {shim}/models/hiera.py + "
        "utils/hiera_utils.py re-exporting the installed hiera-transformer (hiera-optim only resolves "
        "FAIR classes from that in-tree layout: 'hiera.hiera' lacks MaskedAutoencoderHiera and "
        "'hiera' lacks apply_fusion_head); model._grad_checkpointing = False set on each model "
        "(its patched forward reads it, FAIR's model has none)"
    )
    syms = adapter._SYMS
    if syms is None or syms.Hiera is not hiera.Hiera:
        adapter._SYMS = adapter._HieraSymbols(
            Hiera=hiera.Hiera,
            MaskedAutoencoderHiera=hiera.MaskedAutoencoderHiera,
            HieraBlock=hiera.HieraBlock,
            MaskUnitAttention=hiera.MaskUnitAttention,
            apply_fusion_head=hiera.hiera_mae.apply_fusion_head,
            undo_windowing=hiera.hiera_utils.undo_windowing,
        )
        adapter._DEFAULT_ADAPTER = None
        note += f"; shim not picked up (modules already imported: {clash}), adapter symbols patched directly"
    return hiera_optim, note


# --------------------------------------------------------------------------------------
# Statistics of interleaved rounds (pure python: tests/test_bench_stats.py)
# --------------------------------------------------------------------------------------


def quantile(values: List[float], p: float) -> float:
    """Linear-interpolation quantile (numpy's default), ``0 <= p <= 1``."""
    if not values:
        raise ValueError("quantile of no values")
    s = sorted(values)
    pos = (len(s) - 1) * p
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(values: List[float]) -> Dict[str, float]:
    """median, quartiles, IQR, min, max of a list of times (or ratios)."""
    q1, q3 = quantile(values, 0.25), quantile(values, 0.75)
    return dict(median=statistics.median(values), q1=q1, q3=q3, iqr=q3 - q1,
                min=min(values), max=max(values), n=len(values))


def round_schedule(contenders: List[str], rounds: int) -> List[Tuple[int, str]]:
    """The timed order: round 0 runs A, B, C, round 1 again A, B, C, ..."""
    return [(r, k) for r in range(rounds) for k in contenders]


# (numerator, denominator) pairs reported per round; < 1 means the numerator is faster
RATIO_PAIRS = [("rewritten", "optim"), ("rewritten", "fair"), ("optim", "fair"),
               ("variant", "rewritten"), ("variant", "optim")]


def round_ratios(times: Dict[str, List[float]]) -> Dict[str, Dict[str, float]]:
    """Per-round ratios ``a[r] / b[r]`` of every pair present, summarized.

    Round r of every contender ran back to back, so a drift of the machine moves
    both times of a round alike and cancels in their ratio; the median over rounds
    is the reported ratio (not the ratio of the two medians).
    """
    out = {}
    for a, b in RATIO_PAIRS:
        ta, tb = times.get(a), times.get(b)
        if not ta or not tb:
            continue
        if len(ta) != len(tb):
            raise ValueError(f"{a} has {len(ta)} rounds, {b} {len(tb)}: not paired")
        out[f"{a}/{b}"] = summarize([x / y for x, y in zip(ta, tb)])
    return out


def gpu_state(index: int = 0) -> Dict[str, Any]:
    """SM/memory clock, temperature, power and throttle reasons of one GPU, read by
    pynvml (nvidia-ml-py) or nvidia-smi; ``{"error": ...}`` where neither works."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            state = dict(
                sm_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                mem_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                temp_c=pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                power_w=round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0, 1),
                throttle=hex(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
                src="pynvml",
            )
        finally:
            pynvml.nvmlShutdown()
        return state
    except Exception as exc:  # no pynvml, no driver, ...
        first = f"pynvml: {type(exc).__name__}: {exc}"[:160]
    try:
        import subprocess

        q = "clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active"
        res = subprocess.run(["nvidia-smi", f"--id={index}", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        vals = [v.strip() for v in res.stdout.strip().split(",")]
        if res.returncode == 0 and len(vals) == 5:
            num = lambda v: float(v) if v.replace(".", "", 1).isdigit() else v  # noqa: E731
            return dict(sm_mhz=num(vals[0]), mem_mhz=num(vals[1]), temp_c=num(vals[2]), power_w=num(vals[3]),
                        throttle=vals[4], src="nvidia-smi")
        return dict(error=f"{first}; nvidia-smi rc {res.returncode}: {res.stderr.strip()[:120]}")
    except Exception as exc:
        return dict(error=f"{first}; nvidia-smi: {type(exc).__name__}: {exc}"[:300])


def _gpu_short(state: Optional[Dict[str, Any]]) -> str:
    if not state or "error" in state:
        return "—"
    return f"{state.get('sm_mhz')} MHz {state.get('temp_c')} C"


# --------------------------------------------------------------------------------------
# Running one (cell, mode): every contender warmed, then interleaved rounds
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    cell: str
    contender: str
    mode: str
    status: str = "ok"  # ok | error | skipped
    ms: Optional[float] = None  # median ms/step
    ms_min: Optional[float] = None
    ms_max: Optional[float] = None
    ms_q1: Optional[float] = None
    ms_q3: Optional[float] = None
    ms_all: Optional[List[float]] = None  # per round (interleaved) or per step (alone), in order
    samples_s: Optional[float] = None
    peak_gib: Optional[float] = None
    loss: Optional[float] = None
    ref_loss: Optional[float] = None  # FAIR eager on the same mask
    loss_rel: Optional[float] = None
    warmup_s: Optional[float] = None  # wall time of the warm-up steps (compile included)
    graph_breaks: Optional[int] = None
    graphs: Optional[int] = None
    cudagraph_skips: Optional[int] = None
    mask: str = ""  # where the step's mask comes from
    timing: str = ""  # "interleaved with a,b,c" | "alone (...)"
    notes: List[str] = dataclasses.field(default_factory=list)
    error: Optional[str] = None
    profile: Optional[Dict[str, Any]] = None  # --profile: GPU time of one step by kernel kind


# kernel kinds of a profiled step, first match wins (names as CUPTI reports them)
KERNEL_KINDS = [
    ("attention", ("flash", "fmha", "sdpa", "attention", "attn")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "splitk")),
    ("sort", ("sort", "radix")),
    ("triton", ("triton",)),
    ("memcpy/memset", ("memcpy", "memset")),
    ("aten elementwise/reduce", ("elementwise", "reduce", "vectorized", "unrolled", "index", "scatter",
                                 "gather", "cat", "layer_norm", "softmax", "gelu", "fill")),
]


def kernel_kind(name: str) -> str:
    low = name.lower()
    for kind, keys in KERNEL_KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


@dataclasses.dataclass
class Group:
    """One (cell, mode): the contenders timed together and their per-round ratios."""

    cell: str
    mode: str
    contenders: List[str]
    timing: str = "interleaved"  # interleaved | sequential
    rounds: int = 0
    note: str = ""
    gpu_start: Optional[Dict[str, Any]] = None
    gpu_end: Optional[Dict[str, Any]] = None
    ratios: Dict[str, Dict[str, float]] = dataclasses.field(default_factory=dict)


class NeedSequential(Exception):
    """The contenders of a group cannot all stay alive: time them one after another."""


@dataclasses.dataclass
class Live:
    """A built, compiled and warmed contender, ready for timed steps."""

    run: Run
    step: Callable[..., Optional[tuple]]
    objs: Dict[str, Any]  # model, compiled model, optimizer: dropped on release
    base: int  # bytes allocated before the model was built
    resident: int  # bytes it holds between steps (weights, CUDA-graph pools, buffers)
    warm_peak: int  # peak bytes above base during build + warm-up
    first: Optional[tuple] = None
    last: Optional[tuple] = None
    step_peak: int = 0  # peak bytes above base in a timed step


def _is_oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"


class Bench:
    def __init__(self, args, torch, fair, rewritten, optim):
        self.args = args
        self.torch = torch
        self.fair = fair
        self.rewritten = rewritten
        self.optim = optim
        self.variant = None  # the --variant package, set by main
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
        self.runs: List[Run] = []
        self.groups: List[Group] = []
        self.warm_seen: Dict[str, float] = {}
        self.cuda_broken = False

    # ---- helpers ---------------------------------------------------------------
    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def cleanup(self, reset_dynamo: bool = True):
        """Free what is unreferenced; ``reset_dynamo`` also drops every compiled graph
        (only between groups: inside one, the other contenders' graphs stay alive)."""
        torch = self.torch
        if reset_dynamo:
            try:
                torch._dynamo.reset()
            except Exception:
                pass
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def allocated(self) -> int:
        return self.torch.cuda.memory_allocated() if self.cuda else 0

    def build(self, pkg, cell: Cell, state_dict):
        torch = self.torch
        with torch.device(self.device):
            model = pkg.MaskedAutoencoderHiera(**cell.config)
        model.to(self.dtype)
        model.load_state_dict(state_dict, strict=True)
        model.train()
        return model

    def compile_kwargs(self, mode: str) -> Dict[str, Any]:
        if self.args.compile_backend != "inductor":
            return dict(backend=self.args.compile_backend, dynamic=False)
        return dict(mode="reduce-overhead" if mode == "ro" else None, dynamic=False)

    # ---- one contender: build, compile, warm up ------------------------------------
    def skip_reason(self, contender: str, mode: str) -> Optional[str]:
        args = self.args
        if contender == "fair" and mode == "ro" and not args.fair_ro:
            return "FAIR has no graph-safe path (boolean indexing); --fair-ro to try"
        if contender == "optim" and self.optim is None:
            return "hiera-optim not available"
        if contender == "variant" and self.variant is None:
            return "no --variant given"
        if contender == "variant" and mode not in args.variant_modes.split(","):
            return f"--variant-modes {args.variant_modes}"
        if self.cuda_broken:
            return "CUDA context broken by an earlier error"
        if mode == "ro" and not self.cuda and args.compile_backend == "inductor":
            return "reduce-overhead (CUDA graphs) needs CUDA"
        est = self.warm_seen.get(mode)
        if est is None and mode == "ro" and "compile" in self.warm_seen:
            est = 3 * self.warm_seen["compile"]  # same graphs: a cold compile, or caches hit for both
        if est is None:
            est = (2.0 if args.tiny else 10.0) if mode == "eager" else (
                10.0 if args.tiny else (args.expect_warm_s or 120.0))
        if time.perf_counter() - T0 + est > args.budget_s:
            return f"--budget-s {args.budget_s:.0f} would be exceeded (estimate {est:.0f}s)"
        return None

    def prepare(self, cell: Cell, contender: str, mode: str, x, state_dict, ref_model, alive: int = 0):
        """Build, compile and warm one contender.  Returns a :class:`Live`, or the
        :class:`Run` of a skip or an error.  With ``alive`` other contenders holding
        memory, an out-of-memory raises :class:`NeedSequential` instead."""
        args, torch = self.args, self.torch
        run = Run(cell.name, contender, mode)
        ratio = args.mask_ratio
        why = self.skip_reason(contender, mode)
        if why:
            run.status, run.error = "skipped", why
            return run

        log(f"{cell.name} {contender} {MODE_LABEL[mode]}: build")
        self.cleanup(reset_dynamo=False)
        base = self.allocated()
        objs: Dict[str, Any] = {}
        try:
            pkg = {"rewritten": self.rewritten, "variant": self.variant}.get(contender, self.fair)
            model = objs["model"] = self.build(pkg, cell, state_dict)
            graph_safe = contender == "optim" and mode == "ro"
            if contender == "optim":
                model._grad_checkpointing = False
                self.optim.optimize(model, graph_safe=graph_safe, verbose=True)
            opt = None
            if args.optimizer == "adamw":
                opt = objs["opt"] = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=self.cuda)
                run.notes.append("AdamW(fused) step in the timed step")
            xc = x.clone()
            if self.cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()

            from torch._dynamo.utils import counters

            if mode == "eager":
                cmodel = model
            else:
                counters.clear()
                cmodel = torch.compile(model, **self.compile_kwargs(mode))
                if args.compile_backend != "inductor":
                    run.notes.append(f"torch.compile backend={args.compile_backend} (smoke; not inductor)")
            objs["cmodel"] = cmodel

            mark_step = None
            if mode == "ro":
                mark_step = getattr(torch.compiler, "cudagraph_mark_step_begin", None)

            # ---- the step, by mask policy ----------------------------------------
            fixed = args.mask == "fixed"
            st = dict(mask_buf=None, keep_buf=None, inputs=None, draw_outside=False, cmodel=cmodel)
            if fixed:
                torch.manual_seed(args.seed + 7)
                st["mask_buf"] = ref_model.get_random_mask(xc, ratio)
            if contender == "optim" and (mode == "ro" or fixed):
                from hiera_optim.ops.mask_gather import keep_idx_from_bool_mask

                if fixed:
                    st["keep_buf"] = keep_idx_from_bool_mask(st["mask_buf"])
                    run.mask = "fixed mask + keep_idx passed in"
                else:
                    inputs = st["inputs"] = objs["inputs"] = self.optim.MAEStepInputs(
                        model, batch_size=cell.batch, in_chans=cell.config["in_chans"],
                        input_size=tuple(cell.config["input_size"]), mask_ratio=ratio,
                        device=self.device, dtype=self.dtype,
                    )
                    inputs.x.copy_(xc)
                    xc = inputs.x
                    run.mask = "MAEStepInputs.refresh_mask() each step, outside the graph (its documented loop)"
            elif fixed:
                run.mask = "fixed mask passed in"
            else:
                run.mask = "drawn inside the model each step"

            def forward():
                cm = st["cmodel"]
                inputs, mask_buf, keep_buf = st["inputs"], st["mask_buf"], st["keep_buf"]
                if inputs is not None:
                    inputs.refresh_mask()
                    return cm(xc, mask_ratio=ratio, mask=inputs.mask, keep_idx=inputs.keep_idx)
                if keep_buf is not None:
                    return cm(xc, mask_ratio=ratio, mask=mask_buf, keep_idx=keep_buf)
                if mask_buf is not None:
                    if st["draw_outside"]:
                        mask_buf.copy_(model.get_random_mask(xc, ratio))
                    return cm(xc, mask_ratio=ratio, mask=mask_buf)
                return cm(xc, mask_ratio=ratio)

            def step(keep: bool = False):
                if mark_step is not None:
                    mark_step()
                out = forward()
                loss = out[0]
                loss.backward()
                if opt is not None:
                    opt.step()
                model.zero_grad(set_to_none=True)
                if keep:
                    m = out[-1]
                    return loss.detach().float().clone(), (m.clone() if torch.is_tensor(m) else None)
                return None

            warm = args.warmup if args.warmup is not None else (2 if mode == "eager" else (6 if mode == "ro" else 3))
            torch.manual_seed(args.seed + 1)
            t_w = time.perf_counter()
            first = None
            try:
                for i in range(warm):
                    r = step(keep=(i == 0))
                    if i == 0:
                        first = r
                self.sync()
            except Exception as exc:
                if _is_oom(exc) or not (contender == "rewritten" and mode == "ro" and not fixed and not st["draw_outside"]):
                    raise
                msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                log(f"  mask inside the captured model failed ({msg}); retrying with the mask drawn outside")
                run.notes.append(f"mask-inside capture failed ({msg}); mask drawn outside (eager get_random_mask) and passed in")
                self.cleanup(reset_dynamo=False)
                counters.clear()
                st["cmodel"] = objs["cmodel"] = torch.compile(model, **self.compile_kwargs(mode))
                st["draw_outside"] = True
                st["mask_buf"] = model.get_random_mask(xc, ratio)
                run.mask = "drawn outside the model each step (eager), static buffer passed in"
                if self.cuda:
                    torch.cuda.reset_peak_memory_stats()
                t_w = time.perf_counter()
                for i in range(warm):
                    r = step(keep=(i == 0))
                    if i == 0:
                        first = r
                self.sync()
            run.warmup_s = time.perf_counter() - t_w
            self.warm_seen[mode] = max(self.warm_seen.get(mode, 0.0), run.warmup_s)
            log(f"  warm-up {warm} steps: {run.warmup_s:.1f}s")

            if mode != "eager":
                hits = {k: int(v) for k, v in {**counters["inductor"], **counters["aot_autograd"]}.items()
                        if "cache_hit" in k or "cache_miss" in k}
                if hits:  # a process after a --warm-only one should hit (device_call.sh)
                    run.notes.append("caches: " + ", ".join(f"{k} {v}" for k, v in sorted(hits.items())))
                run.graph_breaks = int(sum(counters["graph_break"].values()))
                run.graphs = int(counters["stats"].get("unique_graphs", 0))
                run.cudagraph_skips = int(counters["inductor"].get("cudagraph_skips", 0))
                if run.graph_breaks:
                    top = sorted(counters["graph_break"].items(), key=lambda kv: -kv[1])[:3]
                    run.notes.append("graph breaks: " + "; ".join(f"{n}x {r.strip().splitlines()[0][:120]}" for r, n in top))
            warm_peak = (torch.cuda.max_memory_allocated() - base) if self.cuda else 0
            gc.collect()
            resident = self.allocated() - base
            return Live(run=run, step=step, objs=objs, base=base, resident=resident, warm_peak=warm_peak, first=first)
        except Exception as exc:
            objs.clear()
            if alive and self.cuda and _is_oom(exc):
                raise NeedSequential(
                    f"CUDA out of memory warming {contender} with {alive} other contender(s) alive") from exc
            self._record_error(run, exc)
            return run

    def _record_error(self, run: Run, exc: BaseException) -> None:
        run.status = "error"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        run.error = f"{type(exc).__name__}: {first_line}"[:400]
        log(f"  ERROR {run.contender}: {run.error}")
        traceback.print_exc(limit=6)
        text = str(exc)
        if self.cuda and ("illegal memory access" in text or "CUDA error" in text or "device-side assert" in text):
            self.cuda_broken = True

    # ---- timed rounds ------------------------------------------------------------------
    def time_rounds(self, lives: List[Live], rounds: int, mode: str) -> None:
        """Round r runs one step of every contender, in the given order (A, B, C, A, B,
        C, ...), so a drift of the machine lands on all of them alike.  Eager and
        compile rounds reseed the RNG, so contenders with the same RNG use draw the
        same mask in a round."""
        torch = self.torch
        order = round_schedule(list(range(len(lives))), rounds)
        events = {}
        host = {}
        if self.cuda:
            events = {(r, i): (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for r, i in order}
        if mode == "ro":
            torch.manual_seed(self.args.seed + 3)
        for r, i in order:
            live = lives[i]
            keep = r == rounds - 1
            if mode != "ro":
                torch.manual_seed(self.args.seed + 1000 + r)
            if self.cuda:
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                a, b = events[(r, i)]
                a.record()
                res = live.step(keep=keep)
                b.record()
                live.step_peak = max(live.step_peak,
                                     torch.cuda.max_memory_allocated() - before + live.resident)
            else:
                t = time.perf_counter()
                res = live.step(keep=keep)
                host[(r, i)] = (time.perf_counter() - t) * 1e3
            if res is not None:
                live.last = res
        if self.cuda:
            torch.cuda.synchronize()
        for i, live in enumerate(lives):
            times = [events[(r, i)][0].elapsed_time(events[(r, i)][1]) if self.cuda else host[(r, i)]
                     for r in range(rounds)]
            run = live.run
            run.ms_all = [round(t, 4) for t in times]
            s = summarize(times)
            run.ms, run.ms_min, run.ms_max, run.ms_q1, run.ms_q3 = s["median"], s["min"], s["max"], s["q1"], s["q3"]
            if self.cuda:
                run.peak_gib = max(live.warm_peak, live.step_peak) / 2**30
        if self.args.profile and self.cuda:
            for live in lives:  # after the timed rounds: the profiler costs nothing above
                self.profile_step(live)

    def profile_step(self, live: Live) -> None:
        """GPU time of one more step by kernel kind (``--profile``): what is the same
        math in every contender (GEMMs, attention) and what the code around it costs."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        try:
            torch.manual_seed(self.args.seed + 5000)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                t = time.perf_counter()
                live.step()
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t) * 1e3
            kinds: Dict[str, List[float]] = {}
            top: Dict[str, List[float]] = {}
            sorts: Dict[str, List[float]] = {}
            for e in prof.events():
                if e.device_type != torch.autograd.DeviceType.CUDA:
                    continue
                us = e.time_range.elapsed_us()
                k = kinds.setdefault(kernel_kind(e.name), [0, 0.0])
                k[0] += 1
                k[1] += us / 1e3
                t_ = top.setdefault(e.name[:80], [0, 0.0])
                t_[0] += 1
                t_[1] += us / 1e3
                if kernel_kind(e.name) == "sort":  # full names: "sort" can sit past the 80th character
                    s_ = sorts.setdefault(e.name, [0, 0.0])
                    s_[0] += 1
                    s_[1] += us / 1e3
            busy = sum(v[1] for v in kinds.values())
            live.run.profile = dict(
                wall_ms=round(wall, 3), gpu_busy_ms=round(busy, 3), kernels=int(sum(v[0] for v in kinds.values())),
                by_kind={k: [int(v[0]), round(v[1], 3)] for k, v in sorted(kinds.items(), key=lambda kv: -kv[1][1])},
                top=[[n, int(v[0]), round(v[1], 3)] for n, v in sorted(top.items(), key=lambda kv: -kv[1][1])[:12]],
                sort_kernels=[[n, int(v[0]), round(v[1], 3)] for n, v in sorts.items()])
            log(f"  profile {live.run.contender} {MODE_LABEL[live.run.mode]}: wall {wall:.2f} ms, GPU busy "
                f"{busy:.2f} ms, {live.run.profile['kernels']} kernels; "
                + ", ".join(f"{k} {v[1]:.2f} ms/{v[0]}" for k, v in live.run.profile["by_kind"].items()))
        except Exception as exc:  # the profiler must not cost the timings
            live.run.notes.append(f"--profile failed: {type(exc).__name__}: {exc}"[:200])

    def finish(self, live: Live, cell: Cell, x, ref_model) -> Run:
        """Loss check of the last timed step against FAIR eager on the mask it used."""
        torch, run = self.torch, live.run
        run.samples_s = cell.batch / (run.ms / 1e3)
        check = live.first if self.args.optimizer == "adamw" else live.last
        if self.args.optimizer == "adamw":
            run.notes.append("loss checked on the first step (weights move with an optimizer)")
        loss, used_mask = check
        run.loss = float(loss)
        num_mu = math.prod(ref_model.mask_spatial_shape)
        if used_mask is not None and used_mask.dtype == torch.bool and tuple(used_mask.shape) == (cell.batch, num_mu):
            with torch.no_grad():
                run.ref_loss = float(ref_model(x, mask_ratio=self.args.mask_ratio, mask=used_mask)[0].float())
            run.loss_rel = abs(run.loss - run.ref_loss) / max(abs(run.ref_loss), 1e-12)
        else:
            run.notes.append("last output is not a (B, #MUs) bool mask: loss not checked")
        log(
            f"  {run.contender} {MODE_LABEL[run.mode]}: {run.ms:.2f} ms/step (IQR {run.ms_q1:.2f}-{run.ms_q3:.2f}, "
            f"min {run.ms_min:.2f}), peak {run.peak_gib if run.peak_gib is not None else float('nan'):.2f} GiB, "
            f"loss {run.loss:.5f} vs FAIR-eager {run.ref_loss if run.ref_loss is not None else float('nan'):.5f}"
        )
        return run

    def release(self, lives: List[Live]) -> None:
        for live in lives:
            live.objs.clear()
            live.step = None  # the closure holds the model
        lives.clear()

    # ---- one group -------------------------------------------------------------------
    def run_group(self, cell: Cell, mode: str, contenders: List[str], x, state_dict, ref_model) -> List[Run]:
        torch = self.torch
        args = self.args
        self.cleanup()
        group = Group(cell.name, mode, list(contenders), rounds=args.steps)
        group.gpu_start = gpu_state() if self.cuda else None
        runs: Dict[str, Run] = {}
        lives: List[Live] = []
        sequential = args.sequential
        if args.warm_only:
            # fill the compile caches for a later timing process (benchmarks/device_call.sh)
            for k in contenders:
                res = self.prepare(cell, k, mode, x, state_dict, ref_model)
                if isinstance(res, Live):
                    res.run.status, res.run.error = "skipped", f"--warm-only: warmed in {res.run.warmup_s:.0f}s"
                    self.release([res])
                    res = res.run
                runs[k] = res
                self.cleanup()
            self.groups.append(group)
            return [runs[k] for k in contenders]
        if sequential:
            group.note = "--sequential: contenders timed one after another"
        else:
            try:
                for k in contenders:
                    if self.cuda and lives:
                        free, _total = torch.cuda.mem_get_info()
                        need = max(l.warm_peak - l.resident for l in lives) * 1.1
                        if free < need:
                            raise NeedSequential(
                                f"{free / 2**30:.1f} GiB free before {k} < {need / 2**30:.1f} GiB, the step memory "
                                f"of the contender warmed before it")
                    res = self.prepare(cell, k, mode, x, state_dict, ref_model, alive=len(lives))
                    if isinstance(res, Run):
                        runs[k] = res
                        continue
                    shared = [l.run.contender for l in lives if {l.run.contender, k} == {"fair", "optim"}]
                    if mode != "eager" and shared:
                        # hiera-optim keeps FAIR's classes and some of its methods (forward_loss,
                        # the blocks): their frames compiled for the model warmed first are reused
                        res.run.notes.append(
                            f"graph counts: frames of FAIR's code already compiled for {shared[0]} in this "
                            "process are reused, so this count can be lower than alone")
                    lives.append(res)
                if lives:
                    log(f"  {len(lives)} contender(s) warm; {args.steps} interleaved rounds: "
                        + ", ".join(l.run.contender for l in lives))
                    self.time_rounds(lives, args.steps, mode)
                    names = ", ".join(l.run.contender for l in lives)
                    for live in lives:
                        live.run.timing = f"interleaved with {names}"
                        runs[live.run.contender] = self.finish(live, cell, x, ref_model)
            except NeedSequential as exc:
                sequential = True
                group.note = f"not interleaved: {exc}; contenders timed one after another"
                log(f"  {group.note}")
                runs.clear()
            except Exception as exc:
                # an out-of-memory, or a failure of the contenders side by side (e.g. two
                # CUDA-graph trees): time them one after another rather than lose the group
                sequential = True
                what = ("CUDA out of memory" if self.cuda and _is_oom(exc)
                        else f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:200])
                group.note = (f"not interleaved: {what} in the rounds with {len(lives)} contenders alive; "
                              "contenders timed one after another")
                log(f"  {group.note}")
                traceback.print_exc(limit=6)
                text = str(exc)
                if self.cuda and ("illegal memory access" in text or "device-side assert" in text):
                    self.cuda_broken = True
                runs.clear()
            finally:
                self.release(lives)
                self.cleanup(reset_dynamo=sequential)
        if sequential:
            group.timing = "sequential"
            for k in contenders:
                self.cleanup()
                res = self.prepare(cell, k, mode, x, state_dict, ref_model)
                if isinstance(res, Run):
                    runs[k] = res
                    continue
                try:
                    self.time_rounds([res], args.steps, mode)
                    res.run.timing = "alone" + (f" ({group.note})" if group.note else "")
                    runs[k] = self.finish(res, cell, x, ref_model)
                except Exception as exc:
                    self._record_error(res.run, exc)
                    runs[k] = res.run
                finally:
                    self.release([res])
        self.cleanup()
        group.gpu_end = gpu_state() if self.cuda else None
        times = {k: r.ms_all for k, r in runs.items() if r.status == "ok" and r.ms_all}
        group.ratios = round_ratios(times) if not sequential else {}
        if sequential and times:
            group.note += " (ratios below are of medians, not per round)"
        self.groups.append(group)
        out = [runs[k] for k in contenders if k in runs]
        for k, s in group.ratios.items():
            log(f"  {cell.name} {MODE_LABEL[mode]} {k}: median per-round ratio {s['median']:.3f} "
                f"(IQR {s['q1']:.3f}-{s['q3']:.3f})")
        return out

    def run_cell(self, cell: Cell, contenders: List[str], modes: List[str]) -> List[Run]:
        torch = self.torch
        log(f"=== cell {cell.name}: {cell.desc}, input {cell.input_shape}, {self.args.dtype}")
        self.cleanup()
        torch.manual_seed(self.args.seed)
        ref_model = self.build(self.fair, cell, self._init_state(cell))
        state_dict = {k: v.detach() for k, v in ref_model.state_dict().items()}
        g = torch.Generator(device=self.device).manual_seed(self.args.seed + 2)
        x = torch.randn(cell.input_shape, generator=g, device=self.device, dtype=torch.float32).to(self.dtype)
        out = []
        for mode in modes:
            rs = self.run_group(cell, mode, contenders, x, state_dict, ref_model)
            self.runs.extend(rs)
            out.extend(rs)
            self.write_json()
        del ref_model, state_dict, x
        self.cleanup()
        return out

    def _init_state(self, cell: Cell):
        torch = self.torch
        with torch.device(self.device):
            m = self.fair.MaskedAutoencoderHiera(**cell.config)
        return {k: v.to(self.dtype) for k, v in m.state_dict().items()}

    # ---- output ---------------------------------------------------------------------
    def write_json(self):
        if not self.args.out:
            return
        out = Path(self.args.out)
        out.mkdir(parents=True, exist_ok=True)
        data = dict(env=self.env, runs=[dataclasses.asdict(r) for r in self.runs],
                    groups=[dataclasses.asdict(g) for g in self.groups])
        tmp = out / "bench.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(out / "bench.json")

    env: Dict[str, Any] = {}


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def _f(v, fmt):
    return "—" if v is None else format(v, fmt)


def group_ratios(runs: List[Run], groups: List[Dict[str, Any]]) -> Dict[Tuple[str, str], Tuple[str, Dict[str, Any]]]:
    """(cell, mode) -> (timing, {pair: summary}): per-round ratios where the group was
    interleaved; else (older JSON, sequential fallback) the ratio of the two medians."""
    out: Dict[Tuple[str, str], Tuple[str, Dict[str, Any]]] = {}
    for g in groups:
        if g.get("timing") == "interleaved" and g.get("ratios"):
            out[(g["cell"], g["mode"])] = ("interleaved", g["ratios"])
    by = {(r.cell, r.contender, r.mode): r for r in runs if r.status == "ok" and r.ms}
    for (c, k, m) in list(by):
        if (c, m) in out:
            continue
        ratios = {}
        for a, b in RATIO_PAIRS:
            ra, rb = by.get((c, a, m)), by.get((c, b, m))
            if ra and rb:
                ratios[f"{a}/{b}"] = dict(median=ra.ms / rb.ms)
        timing = next((g.get("timing", "sequential") for g in groups if g["cell"] == c and g["mode"] == m), "sequential")
        out[(c, m)] = (f"{timing} (ratio of medians)", ratios)
    return out


def markdown(runs: List[Run], env: Dict[str, Any], cells: Dict[str, Cell],
             groups: Optional[List[Dict[str, Any]]] = None) -> str:
    groups = groups or []
    lines: List[str] = []
    by = {(r.cell, r.contender, r.mode): r for r in runs}
    cell_names = list(dict.fromkeys(r.cell for r in runs))
    lines.append(
        f"## Hiera MAE step (fwd+loss+bwd+zero_grad{', AdamW' if env.get('optimizer') == 'adamw' else ''}), "
        f"{env.get('dtype')} weights, mask ratio {env.get('mask_ratio')}, {env.get('device_name')}, "
        f"torch {env.get('torch')}"
    )
    lines.append("")
    lines.append(f"{env.get('steps')} timed rounds after every contender's warm-up; a round runs one step of each "
                 "contender of the (cell, mode), in the listed order, same weights and batch; ms = median over "
                 "rounds, IQR = 25th-75th percentile; ratios = median over rounds of the per-round ratio. peak = max "
                 "allocated in warm-up (compile included) or a timed step, above what was held before the model was "
                 "built (other contenders' resident memory excluded); loss rel = |loss - FAIR eager loss on the same "
                 "mask| / FAIR. GPU state at program start "
                 f"{_gpu_short(env.get('gpu_start'))}, end {_gpu_short(env.get('gpu_end'))}.")
    for c in cell_names:
        cell = cells[c]
        lines.append("")
        lines.append(f"### {c}: {cell.desc}, input {tuple(cell.input_shape)}")
        lines.append("")
        lines.append("| contender | mode | ms/step | IQR | min | samples/s | peak GiB | loss | loss rel | vs FAIR eager | warm-up s | graph breaks | timing / mask / notes |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        fe = by.get((c, "fair", "eager"))
        for r in runs:
            if r.cell != c:
                continue
            if r.status != "ok":
                err = (r.error or "").replace("|", "/").replace("\n", " ")
                lines.append(f"| {r.contender} | {MODE_LABEL[r.mode]} | {r.status} | | | | | | | | | | {err} |")
                continue
            vse = f"{fe.ms / r.ms:.2f}x" if fe and fe.ms and fe.status == "ok" else ""
            gb = "" if r.graph_breaks is None else f"{r.graph_breaks} ({r.graphs} graphs{', cg skips %d' % r.cudagraph_skips if r.cudagraph_skips else ''})"
            iqr = f"{r.ms_q1:.2f}-{r.ms_q3:.2f}" if r.ms_q1 is not None else "—"
            notes = "; ".join([x for x in [r.timing, r.mask] if x] + r.notes).replace("|", "/").replace("\n", " ")
            lines.append(
                f"| {r.contender} | {MODE_LABEL[r.mode]} | {r.ms:.2f} | {iqr} | {_f(r.ms_min, '.2f')} | {r.samples_s:.0f} | "
                f"{_f(r.peak_gib, '.2f')} | {_f(r.loss, '.5f')} | {_f(r.loss_rel, '.1e')} | {vse} | {_f(r.warmup_s, '.0f')} | "
                f"{gb} | {notes} |"
            )
    # ratios per (cell, mode)
    ratios = group_ratios(runs, groups)
    gstate = {(g["cell"], g["mode"]): g for g in groups}
    modes = [m for m in MODES if any(r.mode == m for r in runs)]
    pairs = [f"{a}/{b}" for a, b in RATIO_PAIRS if any(f"{a}/{b}" in rs for _t, rs in ratios.values())]
    label = {"fair": "FAIR", "optim": "hiera-optim", "rewritten": "rewritten", "variant": "variant"}

    def cell_txt(s: Optional[Dict[str, Any]]) -> str:
        if not s:
            return "—"
        if "q1" in s:
            return f"{s['median']:.3f} [{s['q1']:.3f}-{s['q3']:.3f}]"
        return f"{s['median']:.3f}"

    if ratios:
        lines.append("")
        lines.append("### ratios per cell and mode (< 1: the first is faster; per-round median [IQR])")
        lines.append("")
        lines.append("| cell | mode | timing | " + " | ".join("/".join(label[n] for n in pr.split("/")) for pr in pairs)
                     + " | GPU start | GPU end |")
        lines.append("|---|---|---|" + "---|" * len(pairs) + "---|---|")
    for c in cell_names:
        for m in modes:
            if (c, m) not in ratios:
                continue
            timing, rs = ratios[(c, m)]
            g = gstate.get((c, m), {})
            lines.append(f"| {c} | {MODE_LABEL[m]} | {timing} | " + " | ".join(cell_txt(rs.get(pr)) for pr in pairs)
                         + f" | {_gpu_short(g.get('gpu_start'))} | {_gpu_short(g.get('gpu_end'))} |")
    notes = [f"- {g['cell']} {MODE_LABEL[g['mode']]}: {g['note']}" for g in groups if g.get("note")]
    if notes:
        lines.append("")
        lines.extend(notes)
    # targets (issue 15 / DESIGN.md section 5): ratios in the same run
    if env.get("device") == "cuda" and ratios:
        lines.append("")
        lines.append("### targets (same run): rewritten/hiera-optim <= %s; rewritten never slower than FAIR"
                     % ", ".join(f"{t} {MODE_LABEL[m]}" for m, t in RATIO_TARGETS.items()))
        lines.append("")
        for (c, m), (timing, rs) in ratios.items():
            parts = []
            ro = rs.get("rewritten/optim")
            if ro:
                t = RATIO_TARGETS[m]
                parts.append(f"vs hiera-optim {ro['median']:.3f} <= {t}: {'MET' if ro['median'] <= t else 'MISSED'}")
            rf = rs.get("rewritten/fair")
            if rf:
                parts.append(f"vs FAIR {rf['median']:.3f} <= 1: {'MET' if rf['median'] <= 1 else 'MISSED'}")
            if parts:
                lines.append(f"- {c} {MODE_LABEL[m]} ({timing}): " + "; ".join(parts))
        if env.get("full_size"):
            pk = [r.peak_gib for r in runs if r.cell == "base" and r.contender == "rewritten" and r.mode == "eager"
                  and r.peak_gib is not None]
            if pk:
                lines.append(f"- base eager peak {pk[0]:.2f} GiB vs <= {TARGET_PEAK_GIB:.1f} GiB: "
                             f"{'MET' if pk[0] <= TARGET_PEAK_GIB else 'MISSED'}")
    prof = [r for r in runs if r.profile]
    if prof:
        kinds = [k for k, _ in KERNEL_KINDS] + ["other"]
        lines.append("")
        lines.append("### one profiled step (--profile, after the timed rounds): GPU ms by kernel kind (kernels)")
        lines.append("")
        lines.append("| cell | mode | contender | wall ms | GPU busy ms | kernels | " + " | ".join(kinds) + " |")
        lines.append("|---|---|---|---|---|---|" + "---|" * len(kinds))
        for r in prof:
            p_ = r.profile
            bk = p_.get("by_kind", {})
            lines.append(f"| {r.cell} | {MODE_LABEL[r.mode]} | {r.contender} | {p_['wall_ms']:.2f} | {p_['gpu_busy_ms']:.2f} | "
                         f"{p_['kernels']} | " + " | ".join(f"{bk[k][1]:.2f} ({bk[k][0]})" if k in bk else "—" for k in kinds)
                         + " |")
    bad = [r for r in runs if r.loss_rel is not None and r.loss_rel > env.get("loss_tol", 2e-2)]
    lines.append("")
    lines.append(
        f"loss check (rel tol {env.get('loss_tol')}): "
        + ("all checked runs agree with FAIR eager on the same mask" if not bad else
           "DISAGREE: " + ", ".join(f"{r.cell}/{r.contender}/{r.mode} {r.loss_rel:.2e}" for r in bad))
    )
    return "\n".join(lines)


def plot(runs: List[Run], path: Path) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"no plot (matplotlib: {exc})"
    by = {(r.cell, r.contender, r.mode): r for r in runs if r.status == "ok"}
    cells = list(dict.fromkeys(r.cell for r in runs))
    series = []
    for k in ("rewritten", "optim"):
        for m in MODES:
            vals = []
            for c in cells:
                f, r = by.get((c, "fair", m)), by.get((c, k, m))
                if m == "ro" and f is None:
                    f = by.get((c, "fair", "eager"))  # FAIR has no ro: show speedup over FAIR eager
                vals.append(f.ms / r.ms if f and r else 0.0)
            if any(vals):
                label = f"{k} {MODE_LABEL[m]}" + (" (vs FAIR eager)" if m == "ro" and not any(by.get((c, 'fair', 'ro')) for c in cells) else " (vs FAIR same mode)")
                series.append((label, vals))
    if not series:
        return "no plot (no comparable runs)"
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(cells) + 2), 4.5))
    w = 0.8 / len(series)
    for i, (label, vals) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * w for j in range(len(cells))]
        bars = ax.bar(xs, vals, w, label=label)
        for b, v in zip(bars, vals):
            if v:
                ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels(cells)
    ax.set_ylabel("speedup over FAIR (FAIR ms / contender ms)")
    ax.set_title("Hiera MAE training step")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default="headline",
                   help="comma list of cells (%s; 'headline' = base) ; default headline" % ",".join(MATRIX))
    p.add_argument("--matrix", action="store_true", help="all cells: " + ",".join(MATRIX))
    p.add_argument("--modes", default="eager,compile,ro", help="comma list of eager,compile,ro (ro = reduce-overhead)")
    p.add_argument("--contenders", default="fair,rewritten,optim", help="comma list of fair,rewritten,optim")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="smoke shapes (tiny model, B=2); CPU-friendly")
    p.add_argument("--batch", type=int, default=None, help="override every cell's batch")
    p.add_argument("--video-batch", type=int, default=None, help="override the video cell's batch (default 16)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed rounds, one step of each contender per round (default 25; --tiny 3)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default eager 2, compile 3, ro 6)")
    p.add_argument("--dtype", default=None, choices=["bf16", "fp16", "fp32"],
                   help="weight/input dtype (default bf16; --tiny on cpu: fp32, CPU bf16 is very slow)")
    p.add_argument("--mask-ratio", type=float, default=0.6)
    p.add_argument("--mask", default="draw", choices=["draw", "fixed"],
                   help="draw: every step draws a fresh mask (inside the model; hiera-optim ro: its "
                        "MAEStepInputs.refresh_mask); fixed: one mask passed in by every contender")
    p.add_argument("--optimizer", default="none", choices=["none", "adamw"])
    p.add_argument("--fair-ro", action="store_true", help="also try FAIR under reduce-overhead")
    p.add_argument("--variant", default=None,
                   help="add the contender 'variant': today's rewritten files with benchmarks/variants.py's "
                        "edits NAME (unbind, index_select, sortdesc, all) applied, timed interleaved with the rest")
    p.add_argument("--variant-modes", default="eager,compile,ro", help="modes in which the variant contender runs")
    p.add_argument("--warm-only", action="store_true",
                   help="build, compile and warm every contender, time nothing: fills inductor's on-disk caches "
                        "(FX graph, AOTAutograd) so a later process compiles the same graphs in seconds")
    p.add_argument("--expect-warm-s", type=float, default=None,
                   help="--budget-s's estimate of a compiled group's warm-up before this process has seen one "
                        "(default 120 s; device_call.sh gives 40 after its --warm-only processes filled the caches)")
    p.add_argument("--profile", action="store_true",
                   help="after the timed rounds, profile one more step of each contender (CUDA): GPU time by "
                        "kernel kind (GEMM, attention, Triton, sort, ...) in the JSON and the log")
    p.add_argument("--sequential", action="store_true",
                   help="time each contender alone, one after another (the pre-issue-15 order), instead of "
                        "interleaved rounds with every contender's compiled graphs alive side by side")
    p.add_argument("--compile-backend", default=None, help="torch.compile backend (default inductor; --tiny on cpu: aot_eager)")
    p.add_argument("--budget-s", type=float, default=540.0, help="start no run past this wall time (default 540)")
    p.add_argument("--loss-tol", type=float, default=2e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads for --device cpu (default 1)")
    p.add_argument("--rewritten-src", type=Path, default=None,
                   help="folder with pre-rewritten hiera.py/hiera_mae.py/hiera_utils.py (no libcst/black needed)")
    p.add_argument("--out", default=None, help="folder for bench.json, bench.md and speedup.png")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="BENCH_JSON",
                   help="no run: combine the bench.json of earlier runs (only --modes) into --out; each "
                        "cell's rows come from the last file that has that cell, so ratios stay same-run")
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = 3 if args.tiny else 25
    if args.dtype is None:
        args.dtype = "fp32" if (args.tiny and args.device == "cpu") else "bf16"
    if args.compile_backend is None:
        args.compile_backend = "aot_eager" if (args.tiny and args.device == "cpu") else "inductor"
    return args


def merge(files: List[Path], modes: List[str], out: Optional[str]) -> int:
    """Tables, JSON and plot from several runs (cells and modes split over device calls).

    Each (cell, mode) group's rows come from the last file holding that group, so the
    contenders of a group always share one process (their ratios stay same-run)."""
    by_group: Dict[Tuple[str, str], List[Run]] = {}
    groups_by: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    source: Dict[Tuple[str, str], str] = {}
    last_env: Dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(Run)}
    for f in files:
        data = json.loads(f.read_text())
        last_env = data["env"]
        runs = [Run(**{k: v for k, v in r.items() if k in fields}) for r in data["runs"] if r["mode"] in modes]
        for key in dict.fromkeys((r.cell, r.mode) for r in runs):
            by_group[key] = [r for r in runs if (r.cell, r.mode) == key]
            groups_by[key] = [g for g in data.get("groups", []) if (g["cell"], g["mode"]) == key]
            source[key] = f"{data['env'].get('command')} ({data['env'].get('date')})"
    cells = list(dict.fromkeys(c for c, _m in by_group))
    order = [(c, m) for c in MATRIX + [c for c in cells if c not in MATRIX] for m in MODES if (c, m) in by_group]
    runs = [r for key in order for r in by_group[key]]
    groups = [g for key in order for g in groups_by[key]]
    commands = [f"{c} {MODE_LABEL[m]}: {source[(c, m)]}" for c, m in order]
    env = dict(last_env, command="; ".join(commands), merged_from=[str(f) for f in files])
    md = markdown(runs, env, {**CELLS, **TINY_CELLS}, groups) + "\n\nrows per cell and mode from: " + "; ".join(commands)
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "bench.json").write_text(json.dumps(
            dict(env=env, runs=[dataclasses.asdict(r) for r in runs], groups=groups), indent=1))
        (folder / "bench.md").write_text(md + "\n")
        log(plot(runs, folder / "speedup.png") or "")
    print(md)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.merge:
        return merge(args.merge, [m.strip() for m in args.modes.split(",") if m.strip()], args.out)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*TF32.*")
    tmp = Path(tempfile.mkdtemp(prefix="hiera_bench_"))

    # the rewrite needs no torch: do it first so a broken tool fails in a second
    rewritten_note = None
    try:
        import torch
    except ImportError:
        raise SystemExit("torch is required")
    import hiera  # installed FAIR package

    rewritten, applied = make_rewritten_package(tmp, pregenerated=args.rewritten_src)
    rewritten_note = ", ".join(f"{f}: {' '.join(c) or 'unchanged'}" for f, c in applied.items())
    log(f"rewritten package {rewritten.__name__} at {Path(rewritten.__file__).parent}: {rewritten_note}")
    optim, optim_note = setup_hiera_optim(tmp) if "optim" in args.contenders else (None, "not requested")
    log(optim_note)

    cell_table = TINY_CELLS if args.tiny else CELLS
    if args.tiny:
        names = list(TINY_CELLS) if args.cells == "headline" else [n.strip() for n in args.cells.split(",")]
    elif args.matrix:
        names = list(MATRIX)
    else:
        names = [ALIASES.get(n.strip(), n.strip()) for n in args.cells.split(",") if n.strip()]
    for n in names:
        if n not in cell_table:
            raise SystemExit(f"unknown cell {n!r}; choose from {', '.join(cell_table)} or headline")
    cells = []
    for n in names:
        c = dataclasses.replace(cell_table[n], config=dict(cell_table[n].config))
        if args.batch:
            c.batch = args.batch
        if n == "video" and args.video_batch:
            c.batch = args.video_batch
        cells.append(c)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    contenders = [k.strip() for k in args.contenders.split(",") if k.strip()]
    if args.variant and "variant" not in contenders:
        contenders.append("variant")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r}")
    for k in contenders:
        if k not in CONTENDERS:
            raise SystemExit(f"unknown contender {k!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("CUDA not available (use --device cpu --tiny for the smoke run)")

    if not args.device.startswith("cuda"):
        # one thread: on a shared CPU, OpenMP threads spin against other processes
        # (seen here: a 4-block model's step 1 s with 2 threads, 0.2 s with 1)
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    bench = Bench(args, torch, hiera, rewritten, optim)
    if args.variant:
        import variants

        src = variants.write(args.variant, Path(rewritten.__file__).parent, tmp / "variant_src")
        bench.variant, _ = make_rewritten_package(tmp, name="hiera_variant", pregenerated=src)
        log(f"variant {args.variant}: {Path(bench.variant.__file__).parent} (benchmarks/variants.py)")
    dev_name = torch.cuda.get_device_name() if bench.cuda else platform.processor() or platform.machine()
    try:
        import hiera_optim as _ho

        ho_version = getattr(_ho, "__version__", None) if optim else None
    except Exception:
        ho_version = None
    bench.env = dict(
        command=" ".join([Path(sys.executable).name] + sys.argv),
        device=bench.device.type,
        device_name=dev_name,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        python=platform.python_version(),
        hiera_transformer=_dist_version("hiera-transformer"),
        hiera_optim=ho_version,
        rewrites=applied,
        optim_note=optim_note,
        dtype=args.dtype,
        mask_ratio=args.mask_ratio,
        mask_policy=args.mask,
        optimizer=args.optimizer,
        steps=args.steps,
        compile_backend=args.compile_backend,
        full_size=not args.tiny and not args.batch,
        loss_tol=args.loss_tol,
        date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        timing="sequential" if args.sequential else "interleaved",
        gpu_start=gpu_state() if bench.cuda else None,
    )
    log(f"GPU state at start: {bench.env['gpu_start']}")
    log(f"device {dev_name}, torch {torch.__version__}, cells {names}, modes {modes}, contenders {contenders}")

    def finish(*_sig):
        if bench.cuda and "gpu_end" not in bench.env:
            bench.env["gpu_end"] = gpu_state()
        md = markdown(bench.runs, bench.env, {c.name: c for c in cells}, [dataclasses.asdict(g) for g in bench.groups])
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            bench.write_json()
            (out / "bench.md").write_text(md + "\n")
            log(plot(bench.runs, out / "speedup.png") or "")
        print()
        print(md, flush=True)
        if _sig:
            os._exit(3)

    signal.signal(signal.SIGTERM, finish)
    try:
        for cell in cells:
            bench.run_cell(cell, contenders, modes)
    finally:
        finish()
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if any(r.status == "error" for r in bench.runs) else 0


def _dist_version(name: str) -> Optional[str]:
    try:
        import importlib.metadata

        return importlib.metadata.version(name)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
