"""The decoder fill (HR004) in its two emitted forms, alone, forward + backward on the GPU:
`x_dec = x_dec.flatten(0, 1).index_copy(0, kept, x.flatten(0, 1)).view_as(x_dec)` (stop 42)
and `x_dec.flatten(0, 1).index_copy_(0, kept, x.flatten(0, 1))` (stop 43, in place as the
original), with the mask-token blend that follows, at the headline's shapes (Hiera-Base MAE
224, B=128, mask 0.6: 64 units, 1x1 final units, decoder dim 512, bf16).  CUDA events,
interleaved rounds, eager and torch.compile.  Usage: python3 benchmarks/fill_forms.py"""
import statistics

import torch


def out_of_place(x_dec, kept, x, mask, tokens):
    x_dec = x_dec.flatten(0, 1).index_copy(0, kept, x.flatten(0, 1)).view_as(x_dec)
    return ~mask * tokens + mask * x_dec


def in_place(x_dec, kept, x, mask, tokens):
    x_dec.flatten(0, 1).index_copy_(0, kept, x.flatten(0, 1))
    return ~mask * tokens + mask * x_dec


def step(form, B, N, K, C, dev, dt):
    mask = torch.zeros(B, N, dtype=torch.bool, device=dev)
    mask[:, :K] = True
    mask = mask[:, torch.randperm(N, device=dev)]
    kept = mask.flatten().logical_not().byte().argsort(stable=True)[: B * K]
    x = torch.randn(B, K, 1, 1, C, device=dev, dtype=dt, requires_grad=True)
    tokens = torch.randn(1, 1, 1, 1, C, device=dev, dtype=dt, requires_grad=True)
    m = mask.reshape(B, N, 1, 1, 1).expand(-1, -1, 1, 1, C)

    def run():
        x_dec = torch.zeros(B, N, 1, 1, C, device=dev, dtype=dt)
        out = form(x_dec, kept, x, m, tokens)
        out.float().square().mean().backward()

    return run


def main():
    dev, dt = "cuda", torch.bfloat16
    B, N, C = 128, 64, 512
    K = int(N * (1 - 0.6))
    for mode in ("eager", "compile"):
        forms = {"index_copy (stop 42)": out_of_place, "index_copy_ (stop 43)": in_place}
        if mode == "compile":
            forms = {k: torch.compile(f) for k, f in forms.items()}
        runs = {k: step(f, B, N, K, C, dev, dt) for k, f in forms.items()}
        for r in runs.values():
            for _ in range(20):
                r()
        times = {k: [] for k in runs}
        for _ in range(30):
            for k, r in runs.items():
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                s.record()
                for _ in range(20):
                    r()
                e.record()
                torch.cuda.synchronize()
                times[k].append(s.elapsed_time(e) / 20 * 1000)
        a, b = (statistics.median(v) for v in times.values())
        print(f"{mode}: " + ", ".join(f"{k} {statistics.median(v):.1f} us" for k, v in times.items()) + f"; in place / out of place {b / a:.3f}")


if __name__ == "__main__":
    main()
