#!/usr/bin/env python3
"""What a Hiera MAE training step keeps alive, per contender (issue 15, item 4).

* **Saved tensors** (any device): every tensor autograd saves for the backward
  during the forward (``torch.autograd.graph.saved_tensors_hooks``), counted once per
  storage (a view or a tensor saved by two nodes costs its storage once), parameters
  apart (they live anyway).  Grouped by dtype, by the model function that made it
  and by shape, for FAIR, the rewritten source and hiera-optim; on the CPU at a small
  batch, scaled linearly to ``--scale-batch`` (activations grow with the batch).
* **GPU** (``--device cuda``): peak allocated over one step after a warm-up step,
  allocated at the end of the forward, and the live blocks at the peak from the
  caching allocator's trace (``torch.cuda.memory._record_memory_history``), grouped
  by the model function whose frame allocated them ("backward" for the autograd
  engine's own allocations).

    python benchmarks/memory.py                                   # base, B=2 -> 128, CPU
    python benchmarks/memory.py --device cuda --dtype bf16 --batch 128 --json $OUT/memory.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opcount import Contenders, model_site  # noqa: E402

GiB = 2**30


def saved_tensors(torch, model, x, ratio: float, roots: List[str]) -> Dict[str, Any]:
    """Census of what autograd saves in one forward (then runs the backward)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: Dict[int, Tuple[int, str, str, Tuple[int, ...]]] = {}
    saves = 0

    def pack(t):
        nonlocal saves
        saves += 1
        try:
            st = t.untyped_storage()
            ptr, nbytes = st.data_ptr(), st.nbytes()
        except Exception:  # a tensor without storage (e.g. a subclass): count its elements
            ptr, nbytes = id(t), t.numel() * t.element_size()
        if ptr not in params and ptr not in seen:
            seen[ptr] = (nbytes, str(t.dtype).replace("torch.", ""), model_site(sys._getframe(1), roots, line=True), tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x, mask_ratio=ratio)
    out[0].backward()
    model.zero_grad(set_to_none=True)
    by_dtype: collections.Counter = collections.Counter()
    by_site: collections.Counter = collections.Counter()
    by_fn: collections.Counter = collections.Counter()
    by_shape: collections.Counter = collections.Counter()
    for nbytes, dtype, site, shape in seen.values():
        by_dtype[dtype] += nbytes
        by_site[(site, dtype)] += nbytes
        by_fn[site.rsplit(":", 1)[0]] += nbytes
        by_shape[(site, dtype, shape)] += nbytes
    return dict(saves=saves, storages=len(seen), bytes=sum(v[0] for v in seen.values()),
                by_dtype=dict(by_dtype), by_fn=dict(by_fn),
                by_site=[[s, d, b] for (s, d), b in by_site.most_common()],
                by_shape=[[s, d, list(sh), b] for (s, d, sh), b in by_shape.most_common(40)])


def gpu_peak(torch, model, x, ratio: float, roots: List[str]) -> Dict[str, Any]:
    """Peak of one step after a warm-up, and the live blocks at that peak by site."""
    out = model(x, mask_ratio=ratio)
    out[0].backward()
    model.zero_grad(set_to_none=True)
    del out
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    res: Dict[str, Any] = dict(resident_gib=base / GiB)
    recording = False
    try:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
        recording = True
    except Exception as exc:
        res["history_error"] = f"{type(exc).__name__}: {exc}"[:200]
    out = model(x, mask_ratio=ratio)
    torch.cuda.synchronize()
    res["end_of_forward_gib"] = (torch.cuda.memory_allocated() - base) / GiB
    out[0].backward()
    model.zero_grad(set_to_none=True)
    del out
    torch.cuda.synchronize()
    res["peak_above_resident_gib"] = (torch.cuda.max_memory_allocated() - base) / GiB
    if recording:
        try:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            res["at_peak"] = live_at_peak(snap, roots)
        except Exception as exc:
            res["history_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return res


def live_at_peak(snap: Dict[str, Any], roots: List[str]) -> Dict[str, Any]:
    """Replay the allocator trace: the blocks allocated in the step that are live when
    the step's allocated bytes peak, by the innermost model frame that made them."""
    trace = [e for dev in snap.get("device_traces", []) for e in dev]
    live: Dict[int, Tuple[int, str]] = {}
    cur = peak = 0
    at_peak: Dict[int, Tuple[int, str]] = {}
    for e in trace:
        act = e.get("action")
        if act == "alloc":
            site = "backward (autograd engine)"
            for f in e.get("frames", []):
                if any(str(f.get("filename", "")).startswith(r) for r in roots):
                    site = f"{Path(f['filename']).name}:{f.get('name')}:{f.get('line')}"
                    break
            live[e["addr"]] = (e["size"], site)
            cur += e["size"]
            if cur > peak:
                peak, at_peak = cur, dict(live)
        elif act == "free_requested" and e["addr"] in live:
            cur -= live.pop(e["addr"])[0]
    sites: collections.Counter = collections.Counter()
    for size, site in at_peak.values():
        sites[site] += size
    return dict(peak_in_trace_gib=peak / GiB, blocks=len(at_peak),
                by_site=[[s, b / GiB] for s, b in sites.most_common(25)])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cell", default="base")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--scale-batch", type=int, default=None, help="scale byte counts to this batch (default: the cell's)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"],
                   help="bf16 as on the GPU (saved bytes depend on it); default bf16")
    p.add_argument("--contenders", default="fair,rewritten,optim")
    p.add_argument("--mask-ratio", type=float, default=0.6)
    p.add_argument("--rewritten-src", type=Path, default=None)
    p.add_argument("--rows", type=int, default=12)
    p.add_argument("--variant", default=None, help="add contender 'variant' (benchmarks/variants.py)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    setup = Contenders(args.cell, args.batch, args.device, args.dtype, args.contenders, args.rewritten_src,
                       variant=args.variant)
    torch = setup.torch
    scale_to = args.scale_batch or setup.cell.batch
    f = scale_to / args.batch
    results: Dict[str, Any] = {}
    for k, model in setup.models():
        torch.manual_seed(1)
        r = dict(saved=saved_tensors(torch, model, setup.x, args.mask_ratio, setup.roots))
        if setup.cuda:
            torch.manual_seed(1)
            r["gpu"] = gpu_peak(torch, model, setup.x, args.mask_ratio, setup.roots)
        results[k] = r
        del model
        if setup.cuda:
            torch.cuda.empty_cache()

    print(f"\n## saved for backward, one MAE step: {setup.cell.name} ({setup.cell.desc}), {args.dtype}, "
          f"{args.device}, batch {args.batch}" + (f", bytes scaled x{f:g} to batch {scale_to}" if f != 1 else "") + "\n")
    dtypes = sorted({d for r in results.values() for d in r["saved"]["by_dtype"]})
    print("| contender | saves | storages | saved GiB | " + " | ".join(dtypes) + " |")
    print("|---" * (4 + len(dtypes)) + "|")
    for k, r in results.items():
        s = r["saved"]
        print(f"| {k} | {s['saves']} | {s['storages']} | {s['bytes'] * f / GiB:.3f} | "
              + " | ".join(f"{s['by_dtype'].get(d, 0) * f / GiB:.3f}" for d in dtypes) + " |")
    print("\n### saved GiB by model function\n")
    fns = sorted({fn for r in results.values() for fn in r["saved"]["by_fn"]},
                 key=lambda fn: -max(r["saved"]["by_fn"].get(fn, 0) for r in results.values()))
    print("| function | " + " | ".join(results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for fn in fns[: args.rows * 2]:
        print(f"| {fn} | " + " | ".join(f"{r['saved']['by_fn'].get(fn, 0) * f / GiB:.4f}" for r in results.values()) + " |")
    for k, r in results.items():
        print(f"\n{k}: largest saved storages by site, dtype, shape (GiB at batch {scale_to})")
        for site, dtype, shape, b in r["saved"]["by_shape"][: args.rows]:
            print(f"  {b * f / GiB:8.4f}  {dtype:8} {str(tuple(shape)):24} {site}")
        nonfloat = [(s, d, b) for s, d, b in r["saved"]["by_site"] if d in ("int64", "int32", "bool", "uint8")]
        if nonfloat:
            print(f"  index/mask tensors saved: " + "; ".join(f"{s} {d} {b * f / 2**20:.2f} MiB" for s, d, b in nonfloat))
    if setup.cuda:
        print("\n## GPU: one step after a warm-up (measured at this batch, not scaled)\n")
        print("| contender | resident GiB | end of forward GiB | peak above resident GiB | peak in trace GiB |")
        print("|---|---|---|---|---|")
        for k, r in results.items():
            g = r["gpu"]
            ap = g.get("at_peak", {})
            print(f"| {k} | {g['resident_gib']:.3f} | {g['end_of_forward_gib']:.3f} | {g['peak_above_resident_gib']:.3f} | "
                  f"{ap.get('peak_in_trace_gib', float('nan')):.3f} |")
        for k, r in results.items():
            g = r["gpu"]
            if "history_error" in g:
                print(f"{k}: no allocator trace ({g['history_error']})")
            for site, gib in g.get("at_peak", {}).get("by_site", [])[: args.rows]:
                print(f"  {k}: {gib:8.4f} GiB live at peak from {site}")
    if args.json:
        args.json.write_text(json.dumps(dict(cell=setup.cell.name, batch=args.batch, scale_to=scale_to, dtype=args.dtype,
                                             device=args.device, results=results), indent=1, default=str))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
