#!/usr/bin/env python3
"""Forward+backward time of the Unroll max-pool in the forms HR002 could emit.

Forms (``v`` is ``x.view(B, stride, -1, C)``, the pooled tensor of do_pool):

* ``max_values``  -- ``v.max(dim=1).values`` (upstream; backward saves int64 indices)
* ``amax``        -- ``v.amax(dim=1)`` (HR002; backward saves input and output, so an
  in-place op on either before backward raises)
* ``amax_clone``  -- ``v.amax(dim=1).clone()`` (the output may be modified in place;
  the input still may not)

Shapes are Hiera-Base MAE's at 224 px, mask ratio 0.6 (19 of 49 mask units kept),
B=128 by default: do_pool at the two stage transitions, and the q-pool in the first
block of stages 2 and 3.  Eager and ``torch.compile``; bf16.  Two numbers per cell:
the time per step with ``--iters`` steps queued back to back between two CUDA events
(launch overhead included where the GPU outruns the host), and the GPU kernel time per
step from the profiler.

    python3 benchmarks/pool_forms.py               # GPU
    python3 benchmarks/pool_forms.py --device cpu --batch 2 --iters 3 --no-compile
"""

from __future__ import annotations

import argparse

import torch


def max_values(v, dim):
    return v.max(dim=dim).values


def amax(v, dim):
    return v.amax(dim=dim)


def amax_clone(v, dim):
    return v.amax(dim=dim).clone()


FORMS = {"max_values": max_values, "amax": amax, "amax_clone": amax_clone}


def shapes(batch):
    # (name, input shape, view shape, pooled dim)
    return [
        ("do_pool s1->s2", (batch, 1216, 192), (batch, 4, 304, 192), 1),
        ("do_pool s2->s3", (batch, 304, 384), (batch, 4, 76, 384), 1),
        ("q-pool s2", (batch, 2, 19, 64, 96), (batch, 2, 19, 4, 16, 96), 3),
        ("q-pool s3", (batch, 4, 1, 304, 96), (batch, 4, 1, 4, 76, 96), 3),
    ]


def step_fn(form, view_shape, dim):
    def step(x, g):
        y = form(x.view(view_shape), dim)
        y.backward(g)
        return y

    return step


def timed(fn, x, g, iters, device):
    """(us per step with the steps queued back to back, us of GPU kernels per step)."""
    for _ in range(3):
        fn(x, g)
        x.grad = None
    if device != "cuda":
        import time

        t0 = time.perf_counter()
        for _ in range(iters):
            fn(x, g)
            x.grad = None
        return (time.perf_counter() - t0) * 1e6 / iters, float("nan")
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn(x, g)
        x.grad = None
    end.record()
    torch.cuda.synchronize()
    queued = start.elapsed_time(end) * 1e3 / iters
    from torch.profiler import ProfilerActivity, profile

    steps = 20
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn(x, g)
            x.grad = None
        torch.cuda.synchronize()
    kernel_us = sum(e.device_time for e in prof.events() if e.device_type.name == "CUDA") / steps
    return queued, kernel_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    modes = ["eager"] + ([] if args.no_compile else ["compile"])
    print(f"torch {torch.__version__}, {args.device}, {args.dtype}, B={args.batch}")
    print("us per fwd+bwd: steps queued back to back / GPU kernel time (profiler)")
    print(f"{'case':16s} {'mode':8s} " + " ".join(f"{n:>17s}" for n in FORMS))
    for name, in_shape, view_shape, dim in shapes(args.batch):
        x = torch.randn(in_shape, device=args.device, dtype=dtype, requires_grad=True)
        out_shape = list(view_shape)
        del out_shape[dim]
        g = torch.randn(out_shape, device=args.device, dtype=dtype)
        for mode in modes:
            row = []
            for form in FORMS.values():
                fn = step_fn(form, view_shape, dim)
                if mode == "compile":
                    torch._dynamo.reset()
                    fn = torch.compile(fn, dynamic=False)
                row.append(timed(fn, x, g, args.iters, args.device))
            print(f"{name:16s} {mode:8s} " + " ".join(f"{q:8.1f}/{k:8.1f}" for q, k in row))


if __name__ == "__main__":
    main()
