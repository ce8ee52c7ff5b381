#!/usr/bin/env python3
"""How many of Hiera's max-pool windows hold bit-identical maxima in a MAE training step.

HR002's caveat (``hiera-rewrite --explain HR002``): ``.max(dim).values`` and
``.amax(dim)`` give the same values, but where two inputs of a pooling window are
bit-identical maxima, ``.max`` sends the window's whole gradient to one of them and
``.amax`` splits it evenly between them.  This script counts how often that happens
in the two pools HR002/HR001 rewrite: ``do_pool`` (the stage transitions) and the
q-pool of ``MaskUnitAttention.forward``.

It runs FAIR's code as installed (``hiera-transformer``, untouched): weights and input
in bf16 by default (``model.to(dtype)``, no autocast), random init unless
``--checkpoint`` (a local file: the GPU machine has no network), random images
(``torch.randn``), mask ratio 0.6, the mask drawn by the model.  A step is forward +
loss + backward (+ an AdamW step with ``--lr``, so later steps see moved weights).  A
``TorchFunctionMode`` sees every ``Tensor.max(dim)`` call during the forward; for
each window (every output element) it counts the inputs equal to the window's max.
A call is attributed to the function and line of hiera's source that made it.

    python3 benchmarks/ties.py                                  # GPU: Hiera-Base MAE, B=128, bf16
    python3 benchmarks/ties.py --steps 5 --lr 1e-4 --out out/   # + JSON
    python3 benchmarks/ties.py --device cpu --tiny              # CPU smoke run (tiny config)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from typing import Dict, List

import torch
from torch.overrides import TorchFunctionMode

# A 4-block MAE small enough for a CPU run (the shapes of bench.py --tiny).
TINY = dict(
    embed_dim=16, num_heads=1, stages=(1, 1, 1, 1), q_pool=2, decoder_embed_dim=32, decoder_depth=1,
    decoder_num_heads=1, input_size=(64, 64),
)


def _site() -> str:
    """``function@file:line`` of the hiera source line that called Tensor.max."""
    frame = sys._getframe(2)
    while frame is not None:
        name = os.path.basename(frame.f_code.co_filename)
        if name in ("hiera.py", "hiera_utils.py", "hiera_mae.py"):
            return f"{frame.f_code.co_name}@{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "elsewhere"


class CountTies(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.enabled = True
        # "site shape dim" -> [calls, windows, windows with >= 2 maxima, inputs equal to
        # the max in those windows]
        self.counts: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0, 0])

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.enabled and func in (torch.Tensor.max, torch.max) and args and ("dim" in kwargs or len(args) > 1):
            x = args[0]
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if isinstance(dim, int) and torch.is_tensor(x) and x.is_floating_point():
                self.enabled = False  # the counting's own ops are not counted
                try:
                    with torch.no_grad():
                        values = out[0] if isinstance(out, tuple) else out.values
                        maxima = (x == values.unsqueeze(dim)).sum(dim)
                        tied = maxima >= 2
                        # one row per call site and input shape (each stage apart)
                        key = f"{_site()} {tuple(x.shape)} dim={dim}"
                        row = self.counts[key]
                        row[0] += 1
                        row[1] += values.numel()
                        row[2] += int(tied.sum())
                        row[3] += int(maxima[tied].sum())
                finally:
                    self.enabled = True
        return out


def build(args):
    import hiera

    if args.tiny:
        model = hiera.MaskedAutoencoderHiera(**TINY)
        size = TINY["input_size"]
    else:
        model = getattr(hiera, args.model)()
        size = (224, 224)
    if args.checkpoint:
        state = torch.load(args.checkpoint, map_location="cpu")
        model.load_state_dict(state.get("model_state", state), strict=False)
    return model, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", help="bfloat16 (default), float16, float32")
    parser.add_argument("--model", default="mae_hiera_base_224", help="a hiera.mae_hiera_* factory")
    parser.add_argument("--tiny", action="store_true", help="tiny 4-block config, 64x64 (CPU smoke run)")
    parser.add_argument("--batch", type=int, default=None, help="default 128 (--tiny: 2)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.0, help="AdamW step after each backward (0: none)")
    parser.add_argument("--mask-ratio", type=float, default=0.6)
    parser.add_argument("--checkpoint", default=None, help="local state_dict file (model_state or plain)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="folder for ties.json")
    args = parser.parse_args()
    batch = args.batch or (2 if args.tiny else 128)
    dtype = getattr(torch, args.dtype)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA not available (use --device cpu --tiny)")

    torch.manual_seed(args.seed)
    model, size = build(args)
    model = model.to(args.device, dtype).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr) if args.lr > 0 else None
    x = torch.randn(batch, 3, *size, device=args.device, dtype=dtype)
    import hiera

    print(
        f"torch {torch.__version__}, hiera-transformer at {os.path.dirname(hiera.__file__)}, {args.device}, {args.dtype}, "
        f"{'tiny ' + str(TINY) if args.tiny else args.model}, B={batch}, mask ratio {args.mask_ratio}, "
        f"{args.steps} steps, lr {args.lr}"
    )
    per_step = []
    total = CountTies()
    t0 = time.time()
    for step in range(args.steps):
        counter = CountTies()
        with counter:
            out = model(x, mask_ratio=args.mask_ratio)
        out[0].backward()
        if optimizer is not None:
            optimizer.step()
        model.zero_grad(set_to_none=True)
        per_step.append({site: list(row) for site, row in counter.counts.items()})
        for site, row in counter.counts.items():
            acc = total.counts[site]
            for i, v in enumerate(row):
                acc[i] += v
        tied, windows = (sum(r[i] for r in counter.counts.values()) for i in (2, 1))
        print(f"step {step}: loss {float(out[0].detach()):.4f}, {tied} of {windows} pooling windows tied")
    if args.device == "cuda":
        torch.cuda.synchronize()

    print(f"\n{'site, input shape, pooled dim':70s} {'calls':>6s} {'windows':>13s} {'tied windows':>13s} {'fraction':>10s} {'maxima/tied':>11s}")
    for site, (calls, windows, tied, maxima) in sorted(total.counts.items()):
        frac = tied / windows if windows else 0.0
        mean = maxima / tied if tied else 0.0
        print(f"{site:70s} {calls:6d} {windows:13d} {tied:13d} {frac:10.3e} {mean:11.2f}")
    calls, windows, tied, maxima = (sum(r[i] for r in total.counts.values()) for i in range(4))
    print(f"{'all':70s} {calls:6d} {windows:13d} {tied:13d} {tied / max(windows, 1):10.3e} {maxima / max(tied, 1):11.2f}")
    print(f"({time.time() - t0:.1f} s; 'maxima/tied': inputs equal to the max, per tied window)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "ties.json"), "w") as f:
            json.dump(
                {
                    "args": vars(args),
                    "batch": batch,
                    "torch": torch.__version__,
                    "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                    "sites": {s: dict(zip(["calls", "windows", "tied_windows", "maxima_in_tied"], r)) for s, r in total.counts.items()},
                    "per_step": per_step,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
