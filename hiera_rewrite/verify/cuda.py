"""``--verify-cuda``: time a training step of the original and the rewritten model.

After parity, the user sees the speedup on their own fork: one training step (forward, the
model's loss when its output starts with a scalar, else a sum of its outputs; backward) of
each side, in bf16 on CUDA, both models alive side by side in one process. The sides are
timed in interleaved rounds (A B, B A, A B, ...) with the same seeds, so that a drift of the
GPU during the run lands on both alike; each round's ratio is the ratio of the two sides'
median step in that round, and the verdict is the median of those ratios.

Imports torch only when called (the tool stays torch-free at install time).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple


def quartiles(values: Sequence[float]) -> Tuple[float, float, float]:
    """(first quartile, median, third quartile), linear interpolation between order statistics."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)

    def at(q: float) -> float:
        pos = q * (len(ordered) - 1)
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return at(0.25), at(0.5), at(0.75)


def round_order(names: Sequence[str], rounds: int) -> List[List[str]]:
    """The order the sides run in each round: forward, then reversed, alternately."""
    return [list(names) if r % 2 == 0 else list(reversed(names)) for r in range(rounds)]


def summarize(step_ms: Dict[str, List[List[float]]], baseline: str) -> Dict[str, Any]:
    """Per side: median, IQR and min over every timed step; per round: each side's median step
    over the baseline's; the ratio is the median of the per-round ratios."""
    sides: Dict[str, Any] = {}
    for name, rounds in step_ms.items():
        flat = [t for r in rounds for t in r]
        q1, med, q3 = quartiles(flat)
        sides[name] = {"median_ms": med, "iqr_ms": q3 - q1, "min_ms": min(flat), "steps": len(flat)}
    ratios: Dict[str, Any] = {}
    for name, rounds in step_ms.items():
        if name == baseline:
            continue
        per_round = [
            statistics.median(mine) / statistics.median(base) for mine, base in zip(rounds, step_ms[baseline])
        ]
        q1, med, q3 = quartiles(per_round)
        ratios[name] = {"median": med, "q1": q1, "q3": q3, "per_round": per_round}
    return {"sides": sides, "ratios": ratios, "baseline": baseline}


def _loss(out: Any, torch) -> Any:
    leaves: List[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, (tuple, list)):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for k in sorted(value, key=str):
                walk(value[k])
        elif torch.is_tensor(value) and value.is_floating_point() and value.requires_grad:
            leaves.append(value)

    walk(out)
    if not leaves:
        return None
    if leaves[0].dim() == 0:  # the model's own loss (MAE's forward returns it first)
        return leaves[0]
    return sum(leaf.float().sum() for leaf in leaves)


def time_training_steps(
    models: Dict[str, Any],
    make_input: Callable[[], Any],
    *,
    baseline: str,
    forward_kwargs: Dict[str, Any] | None = None,
    rounds: int = 8,
    steps: int = 5,
    warmup: int = 3,
    torch=None,
) -> Dict[str, Any]:
    """Time forward + loss + backward of each model in ``models`` (already on their device and
    dtype) on the same input, interleaved; returns :func:`summarize`'s dict plus the device."""
    if torch is None:
        import torch  # noqa: PLC0415 -- only when verifying
    forward_kwargs = forward_kwargs or {}
    first = next(iter(models.values()))
    device = next(first.parameters()).device
    cuda = device.type == "cuda"
    x = make_input()

    def step(model, seed: int) -> float:
        torch.manual_seed(seed)  # the same random masks on both sides
        model.zero_grad(set_to_none=True)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        loss = _loss(model(x, **forward_kwargs), torch)
        if loss is not None:
            loss.backward()
        if cuda:
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        return (time.perf_counter() - t0) * 1000.0

    for name, model in models.items():
        model.train()
        for i in range(warmup):
            step(model, 10_000 + i)
    times: Dict[str, List[List[float]]] = {name: [] for name in models}
    for r, order in enumerate(round_order(list(models), rounds)):
        for name in order:
            times[name].append([step(models[name], 1000 * r + s) for s in range(steps)])
    result = summarize(times, baseline)
    result["device"] = torch.cuda.get_device_name(device) if cuda else str(device)
    result["rounds"], result["steps_per_round"] = rounds, steps
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return result


def format_timing(label: str, result: Dict[str, Any], dtype: str, shape: Sequence[int]) -> List[str]:
    base = result["baseline"]
    lines = [f"training step of {label}, {dtype} on {result['device']}, input {tuple(shape)}, "
             f"{result['rounds']} interleaved rounds x {result['steps_per_round']} steps:"]
    for name, s in result["sides"].items():
        lines.append(f"  {name:<10} median {s['median_ms']:8.2f} ms  IQR {s['iqr_ms']:6.2f} ms  min {s['min_ms']:8.2f} ms")
    for name, r in result["ratios"].items():
        lines.append(
            f"  {name}/{base}: {r['median']:.3f}x (per-round ratios {r['q1']:.3f}-{r['q3']:.3f} IQR), "
            f"{1.0 / r['median']:.2f}x faster" if r["median"] < 1 else
            f"  {name}/{base}: {r['median']:.3f}x (per-round ratios {r['q1']:.3f}-{r['q3']:.3f} IQR), not faster"
        )
    return lines
