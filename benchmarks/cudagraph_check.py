"""GPU check for issue 3: the rewritten MAE step under torch.compile(mode="reduce-overhead").

Runs N training steps (forward + loss + backward + SGD update) of the rewritten
Hiera MAE with the mask generated *inside* the model, a fresh mask every step,
compiled with ``fullgraph=True, mode="reduce-overhead"`` (CUDA graphs; backward and the SGD update
run outside the compiled forward), and the same steps in eager mode from the same weights and seeds.  With
``torch._inductor.config.fallback_random = True`` the compiled graph draws the same
random numbers as eager, so the masks are the same and the losses must agree
within bf16 noise.  Prints one line per step and a verdict.

Usage (the package folder is a rewritten copy, e.g. from ``hiera-rewrite --export``):

    python benchmarks/cudagraph_check.py --package .gen/hiera_fast --steps 20
"""

from __future__ import annotations

import argparse
import copy
import importlib
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", required=True, help="folder of a rewritten hiera package")
    parser.add_argument("--factory", default="mae_hiera_base_224")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--mask-ratio", type=float, default=0.6)
    parser.add_argument("--tolerance", type=float, default=2e-2, help="max relative loss difference (bf16)")
    args = parser.parse_args()

    import torch
    import torch._inductor.config as inductor_config

    inductor_config.fallback_random = True  # compiled RNG == eager RNG: same masks
    folder = Path(args.package).resolve()
    sys.path.insert(0, str(folder.parent))
    pkg = importlib.import_module(folder.name)
    device = "cuda"

    torch.manual_seed(0)
    eager = getattr(pkg, args.factory)().to(device=device, dtype=torch.bfloat16)
    compiled_model = copy.deepcopy(eager)
    opt_e = torch.optim.SGD(eager.parameters(), lr=1e-3)
    opt_c = torch.optim.SGD(compiled_model.parameters(), lr=1e-3)

    def step(model, opt, images):
        loss, pred, label, mask = model(images, mask_ratio=args.mask_ratio)
        loss.backward()  # AOTAutograd compiled the backward graph too
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss.detach(), mask

    # The whole forward + loss (mask generated inside) is one graph with no break;
    # its forward and backward graphs are captured as CUDA graphs.
    compiled_forward = torch.compile(compiled_model, fullgraph=True, mode="reduce-overhead")
    images = torch.randn(args.batch, 3, 224, 224, device=device, dtype=torch.bfloat16)
    worst = 0.0
    masks_equal = True
    masks_fresh = True
    previous = None
    for i in range(args.steps):
        torch.manual_seed(1000 + i)
        loss_e, mask_e = step(eager, opt_e, images)
        torch.manual_seed(1000 + i)
        torch.compiler.cudagraph_mark_step_begin()
        loss_c, mask_c = step(compiled_forward, opt_c, images)
        loss_c, mask_c = loss_c.clone(), mask_c.clone()
        rel = abs(loss_c.item() - loss_e.item()) / max(abs(loss_e.item()), 1e-12)
        worst = max(worst, rel)
        masks_equal &= bool(torch.equal(mask_e, mask_c))
        if previous is not None:
            masks_fresh &= not bool(torch.equal(previous, mask_c))
        previous = mask_c
        print(f"step {i:2d}: eager loss {loss_e.item():.6f}  compiled loss {loss_c.item():.6f}  rel diff {rel:.2e}")
    ok = worst <= args.tolerance and masks_equal and masks_fresh
    print(
        f"RESULT {'PASS' if ok else 'FAIL'}: {args.steps} steps of {args.factory} (batch {args.batch}, bf16) under "
        f"torch.compile(fullgraph=True, mode='reduce-overhead'); worst relative loss difference {worst:.2e} "
        f"(tolerance {args.tolerance}); masks equal to eager: {masks_equal}; a fresh mask every step: {masks_fresh}; "
        f"torch {torch.__version__} on {torch.cuda.get_device_name()}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
