"""The rewritten MAE under torch.distributed, as users train it (issue 23): two CPU
processes over gloo, the model wrapped in DDP, sharded with FSDP2's ``fully_shard`` (the
blocks, patch_embed, then the model), or with ``checkpoint_wrapper`` around patch_embed
under DDP.  On each rank the loss and every gradient equal the original's (float64),
and no boolean-mask indexing runs in the rewritten forward and backward: the wrappers
keep the fast path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

REPO = Path(__file__).resolve().parent.parent
WORLD = 2

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


def _wrap(model, mode: str):
    from torch.nn.parallel import DistributedDataParallel as DDP

    if mode == "ddp":
        return DDP(model)
    if mode == "checkpoint_wrapper":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        model.patch_embed = checkpoint_wrapper(model.patch_embed)
        return DDP(model)
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model.patch_embed)
    return fully_shard(model)


def _grads(model):
    out = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            g = p.grad
            out[name.replace("_checkpoint_wrapped_module.", "").replace("module.", "", 1)] = (
                g.full_tensor() if hasattr(g, "full_tensor") else g
            )
    return out


def _worker(rank: int, init: str, roots, names, out: str, mode: str) -> None:
    sys.path[:0] = [str(REPO), *roots]
    import importlib

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=WORLD)
    try:
        from tests.parity_tools import max_rel_error, randomize_, share_weights
        from tests.test_contract import BooleanIndexing
        from tests.test_mask_exactness import _mae

        orig, new = (importlib.import_module(n) for n in names)
        model_a = _mae(orig)
        randomize_(model_a, torch, seed=0)
        model_b = _mae(new)
        share_weights(model_a, model_b)
        model_a, model_b = _wrap(model_a, mode), _wrap(model_b, mode)
        gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
        x = torch.randn(2, 3, 128, 128, generator=gen, dtype=torch.float64)
        torch.manual_seed(7 + rank)
        loss_a = model_a(x, mask_ratio=0.6)[0]
        loss_a.backward()
        torch.manual_seed(7 + rank)
        with BooleanIndexing() as probe:
            loss_b = model_b(x, mask_ratio=0.6)[0]
            loss_b.backward()
        grads_a, grads_b = _grads(model_a), _grads(model_b)
        result = {
            "loss": max_rel_error(loss_a.detach(), loss_b.detach(), torch),
            "grads": max(max_rel_error(grads_a[k], grads_b[k], torch) for k in grads_a),
            "same_params": sorted(grads_a) == sorted(grads_b),
            "n_grads": len(grads_a),
            "boolean_indexing": probe.ops,
        }
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "fully_shard", "checkpoint_wrapper"])
def test_distributed_training_step_is_exact_and_fast(hiera_orig, hiera_new, tmp_path, mode):
    import torch.multiprocessing as mp

    from tests.parity_tools import REL_TOL

    roots = sorted({str(Path(m.__file__).resolve().parent.parent) for m in (hiera_orig, hiera_new)})
    names = (hiera_orig.__name__, hiera_new.__name__)
    mp.spawn(_worker, args=(str(tmp_path / "init"), roots, names, str(tmp_path), mode), nprocs=WORLD, join=True)
    for rank in range(WORLD):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["same_params"] and result["n_grads"] > 20, result
        assert result["loss"] <= REL_TOL and result["grads"] <= REL_TOL, result
        assert result["boolean_indexing"] == [], result
