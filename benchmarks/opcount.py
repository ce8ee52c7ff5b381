#!/usr/bin/env python3
"""What one Hiera MAE training step issues, per contender (issue 15, item 3).

Eager training is launch-bound: the step's time is the host's time to issue its
ops, so fewer ops is speed.  For one step (forward with the mask drawn inside the
model, loss, backward) of each contender of benchmarks/bench.py this counts

* **aten ops** dispatched (``TorchDispatchMode``): what reaches the kernels, after
  autograd and composite decompositions, forward and backward apart; view ops
  (no kernel on any device) and copies (``copy_``, ``clone``, ``_to_copy``) apart;
* **Python-level torch calls** (``TorchFunctionMode``): ``torch.*``, ``F.*`` and
  ``Tensor`` methods the model's Python code calls, attribute reads
  (``x.shape``...) apart; forward only (backward has no Python code);
* **CUDA kernels** launched, when ``--device cuda``: ``torch.profiler`` GPU
  activities of one step after a warm-up, forward and backward apart.

Each count is attributed to the model function that issued it (``file:function``,
the innermost frame of the model's own code), so the rewritten step can be
compared with FAIR's and hiera-optim's site by site.  Counts hardly depend on the
device or the batch (the model's structure sets them), so the default is the
headline architecture (Hiera-Base MAE 224, q_pool 2, mask 0.6) at batch 2, fp32, on
the CPU.

    python benchmarks/opcount.py                        # base, B=2, CPU: a few seconds
    python benchmarks/opcount.py --cell tiny --json out.json
    python benchmarks/opcount.py --device cuda --dtype bf16 --batch 128   # + kernels
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (cells, the rewritten package, hiera-optim's shim)

COPY_OPS = {"copy_", "clone", "_to_copy", "contiguous"}


def model_site(frame, roots: List[str], line: bool = False) -> str:
    """``file:function`` (``:line`` with ``line``) of the innermost frame in the model's own code."""
    while frame is not None:
        name = frame.f_code.co_filename
        if any(name.startswith(r) for r in roots):
            where = f"{Path(name).name}:{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"
            return f"{where}:{frame.f_lineno}" if line else where
        frame = frame.f_back
    return "(outside the model)"


def count_step(torch, model, x, ratio: float, roots: List[str], cuda: bool) -> Dict[str, Any]:
    from torch.overrides import TorchFunctionMode, resolve_name
    from torch.utils._python_dispatch import TorchDispatchMode

    phase = {"now": "forward"}
    aten: Dict[str, collections.Counter] = {"forward": collections.Counter(), "backward": collections.Counter()}
    aten_sites: collections.Counter = collections.Counter()
    kinds: Dict[str, collections.Counter] = {"forward": collections.Counter(), "backward": collections.Counter()}
    calls: collections.Counter = collections.Counter()
    call_sites: collections.Counter = collections.Counter()
    getters: collections.Counter = collections.Counter()

    class Aten(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            p = phase["now"]
            aten[p][name] += 1
            kind = "view" if func.is_view else ("copy" if name in COPY_OPS else "compute")
            kinds[p][kind] += 1
            if p == "forward":
                aten_sites[(model_site(sys._getframe(1), roots), name, kind)] += 1
            return func(*args, **(kwargs or {}))

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = resolve_name(func) or getattr(func, "__qualname__", None) or str(func)
            if name.endswith(".__get__"):
                getters[name] += 1
            else:
                calls[name] += 1
                call_sites[(model_site(sys._getframe(1), roots), name)] += 1
            return func(*args, **(kwargs or {}))

    with Calls(), Aten():
        out = model(x, mask_ratio=ratio)
        loss = out[0]
        phase["now"] = "backward"
        loss.backward()
    model.zero_grad(set_to_none=True)

    res: Dict[str, Any] = dict(
        aten={p: dict(total=sum(aten[p].values()), **dict(kinds[p])) for p in aten},
        aten_ops={p: dict(aten[p].most_common()) for p in aten},
        aten_sites=[[s, n, k, c] for (s, n, k), c in aten_sites.most_common()],
        calls=sum(calls.values()),
        getters=sum(getters.values()),
        call_names=dict(calls.most_common()),
        call_sites=[[s, n, c] for (s, n), c in call_sites.most_common()],
    )
    if cuda:
        try:
            res["kernels"] = count_kernels(torch, model, x, ratio)
        except Exception as exc:  # a profiler that does not work there must not cost the counts
            empty = dict(gpu_activities=0, runtime_launch_calls=0, gpu_busy_ms=0.0, wall_ms_profiled=0.0,
                         top_by_time={}, error=f"{type(exc).__name__}: {exc}"[:300])
            res["kernels"] = dict(forward=empty, backward=empty)
            print(f"kernel count failed: {empty['error']}")
    return res


def count_kernels(torch, model, x, ratio: float) -> Dict[str, Any]:
    """GPU activities of one step (after a warm-up step), forward and backward."""
    from torch.profiler import ProfilerActivity, profile

    import time

    def one(fn):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t = time.perf_counter()
            r = fn()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t) * 1e3
        kernels: collections.Counter = collections.Counter()
        busy: collections.Counter = collections.Counter()
        launches = 0
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                kernels[e.name[:90]] += 1
                busy[e.name[:90]] += e.time_range.elapsed_us()
            elif e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                            "cudaMemcpyAsync", "cudaMemsetAsync"):
                launches += 1
        # gpu_busy_ms near wall_ms: the GPU is the bottleneck; far below: the host (launches)
        return r, dict(gpu_activities=sum(kernels.values()), runtime_launch_calls=launches,
                       gpu_busy_ms=round(sum(busy.values()) / 1e3, 3), wall_ms_profiled=round(wall, 3),
                       top_by_time={n: [kernels[n], round(us / 1e3, 3)] for n, us in busy.most_common(15)})

    out = model(x, mask_ratio=ratio)  # warm-up: cuBLAS/cuDNN handles, autotune
    out[0].backward()
    model.zero_grad(set_to_none=True)
    out, fwd = one(lambda: model(x, mask_ratio=ratio))
    _, bwd = one(lambda: out[0].backward())
    model.zero_grad(set_to_none=True)
    return dict(forward=fwd, backward=bwd)


class Contenders:
    """The contenders of bench.py built on one cell with the same weights and batch:
    ``fair`` (installed hiera-transformer), ``rewritten`` (its files through
    hiera-rewrite), ``optim`` (hiera-optim on a FAIR model, eager path)."""

    def __init__(self, cell: str, batch: int, device: str, dtype: str, contenders: str,
                 rewritten_src: Optional[Path] = None, graph_safe: bool = False, variant: Optional[str] = None):
        import torch

        import hiera

        self.torch, self.hiera, self.graph_safe = torch, hiera, graph_safe
        if device == "cpu":
            torch.set_num_threads(1)
        tmp = Path(tempfile.mkdtemp(prefix="hiera_counts_"))
        self.rewritten, _ = bench.make_rewritten_package(tmp, pregenerated=rewritten_src)
        self.names = [k.strip() for k in contenders.split(",") if k.strip()]
        self.variant = None
        if variant:  # benchmarks/variants.py's edits on today's rewritten files
            import variants

            src = variants.write(variant, Path(self.rewritten.__file__).parent, tmp / "variant_src")
            self.variant, _ = bench.make_rewritten_package(tmp, name="hiera_variant", pregenerated=src)
            if "variant" not in self.names:
                self.names.append("variant")
        self.optim = None
        if "optim" in self.names:
            self.optim, note = bench.setup_hiera_optim(tmp)
            if self.optim is None:
                print(note)
                self.names.remove("optim")
        self.cell = {**bench.CELLS, **bench.TINY_CELLS}[bench.ALIASES.get(cell, cell)]
        self.dtype = dict(fp32=torch.float32, bf16=torch.bfloat16)[dtype]
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        torch.manual_seed(0)
        with torch.device(self.device):
            ref = hiera.MaskedAutoencoderHiera(**self.cell.config)
        self.state = {k: v.to(self.dtype) for k, v in ref.state_dict().items()}
        del ref
        self.batch = batch
        self.x = torch.randn((batch, *self.cell.input_shape[1:]), device=self.device).to(self.dtype)
        self.roots = [str(Path(hiera.__file__).parent), str(Path(self.rewritten.__file__).parent)]
        if self.variant is not None:
            self.roots.append(str(Path(self.variant.__file__).parent))
        if self.optim is not None:
            self.roots.append(str(Path(self.optim.__file__).parent))

    def build(self, k: str):
        torch = self.torch
        pkg = {"rewritten": self.rewritten, "variant": self.variant}.get(k, self.hiera)
        with torch.device(self.device):
            model = pkg.MaskedAutoencoderHiera(**self.cell.config)
        model.to(self.dtype).load_state_dict(self.state)
        model.train()
        if k == "optim":
            model._grad_checkpointing = False
            self.optim.optimize(model, graph_safe=self.graph_safe, verbose=False)
        return model

    def models(self):
        for k in self.names:
            yield k, self.build(k)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cell", default="base", help="a bench.py cell (%s) or micro2d/micro3d" % ",".join(bench.MATRIX))
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--contenders", default="fair,rewritten,optim")
    p.add_argument("--mask-ratio", type=float, default=0.6)
    p.add_argument("--rewritten-src", type=Path, default=None, help="folder with pre-rewritten files (see bench.py)")
    p.add_argument("--variant", default=None, help="add contender 'variant' (benchmarks/variants.py: unbind, "
                   "index_select, sortdesc, all)")
    p.add_argument("--json", type=Path, default=None, help="write every count here")
    p.add_argument("--sites", type=int, default=25, help="rows of the per-site comparison")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")

    import torch

    setup = Contenders(args.cell, args.batch, args.device, args.dtype, args.contenders, args.rewritten_src,
                       variant=args.variant)
    cell, cuda = setup.cell, setup.cuda
    results: Dict[str, Any] = {}
    for k, model in setup.models():
        torch.manual_seed(1)
        results[k] = count_step(torch, model, setup.x, args.mask_ratio, setup.roots, cuda)
        del model

    # ---- report -----------------------------------------------------------------
    print(f"\n## ops per MAE training step: {cell.name} ({cell.desc}), batch {args.batch}, {args.dtype}, "
          f"{args.device}, torch {torch.__version__}\n")
    head = "| contender | aten fwd (views, copies) | aten bwd (views, copies) | aten total | non-view aten | torch calls fwd | attribute reads |"
    if cuda:
        head += " CUDA kernels fwd | bwd | launch calls | GPU busy ms fwd+bwd | wall ms (profiled) |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for k, r in results.items():
        f, b = r["aten"]["forward"], r["aten"]["backward"]
        nonview = f["total"] - f.get("view", 0) + b["total"] - b.get("view", 0)
        row = (f"| {k} | {f['total']} ({f.get('view', 0)}, {f.get('copy', 0)}) | {b['total']} ({b.get('view', 0)}, "
               f"{b.get('copy', 0)}) | {f['total'] + b['total']} | {nonview} | {r['calls']} | {r['getters']} |")
        if cuda:
            kf, kb = r["kernels"]["forward"], r["kernels"]["backward"]
            row += (f" {kf['gpu_activities']} | {kb['gpu_activities']} | "
                    f"{kf['runtime_launch_calls'] + kb['runtime_launch_calls']} | "
                    f"{kf['gpu_busy_ms'] + kb['gpu_busy_ms']:.2f} | {kf['wall_ms_profiled'] + kb['wall_ms_profiled']:.2f} |")
        print(row)
    if cuda:
        for k, r in results.items():
            for ph in ("forward", "backward"):
                print(f"\n{k} {ph}: kernels by GPU time (count, ms)")
                for n, (c, ms) in r["kernels"][ph]["top_by_time"].items():
                    print(f"  {ms:8.3f} ms  x{c:<4} {n}")

    # per model function: forward aten ops (non-view) and torch calls
    print("\n### forward, per model function: non-view aten ops / torch calls\n")
    fns = collections.OrderedDict()
    for k, r in results.items():
        for s, n, kind, c in r["aten_sites"]:
            fn = s.split(":", 1)[-1]
            if kind != "view":
                fns.setdefault(fn, {}).setdefault(k, [0, 0])[0] += c
        for s, n, c in r["call_sites"]:
            fn = s.split(":", 1)[-1]
            fns.setdefault(fn, {}).setdefault(k, [0, 0])[1] += c
    print("| function | " + " | ".join(results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for fn, per in sorted(fns.items(), key=lambda kv: -max(v[1] for v in kv[1].values())):
        print(f"| {fn} | " + " | ".join(f"{per.get(k, [0, 0])[0]} / {per.get(k, [0, 0])[1]}" for k in results) + " |")

    # op names where contenders differ most (forward + backward, non-view)
    print("\n### aten ops per step (forward + backward) where the contenders differ\n")
    names = set()
    for r in results.values():
        for p_ in ("forward", "backward"):
            names.update(r["aten_ops"][p_])
    rows = []
    for n in names:
        v = [sum(r["aten_ops"][p_].get(n, 0) for p_ in ("forward", "backward")) for r in results.values()]
        if len(set(v)) > 1:
            rows.append((max(v) - min(v), n, v))
    print("| aten op | " + " | ".join(results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for _, n, v in sorted(rows, reverse=True)[: args.sites]:
        print(f"| {n} | " + " | ".join(str(c) for c in v) + " |")

    if "rewritten" in results:
        print("\n### rewritten forward: mask/index work by function (aten ops, views included)\n")
        idx_ops = {"argsort", "sort", "logical_not", "_to_copy", "gather", "scatter", "expand", "slice",
                   "unsqueeze", "view", "reshape", "rand", "cat", "zeros", "scatter_", "index", "nonzero",
                   "masked_select", "index_put_", "mul", "add", "bitwise_not", "where"}
        agg: collections.Counter = collections.Counter()
        for s, n, kind, c in results["rewritten"]["aten_sites"]:
            fn = s.split(":", 1)[-1]
            if fn.split(".")[0] in ("Hiera", "MaskedAutoencoderHiera") and n in idx_ops:
                agg[(fn, n)] += c
        for (fn, n), c in sorted(agg.items()):
            print(f"- {fn}: {n} x{c}")
    if args.json:
        args.json.write_text(json.dumps(dict(cell=cell.name, batch=args.batch, dtype=args.dtype,
                                             device=args.device, torch=torch.__version__, results=results), indent=1))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
