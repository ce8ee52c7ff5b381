"""Compare two model builds numerically: outputs and every parameter gradient."""

from __future__ import annotations

from typing import Any, Callable, Tuple

REL_TOL = 1e-10


def _flatten(value: Any) -> list:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flatten(item)]
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _flatten(value[key])]
    return [value]


def max_rel_error(a, b, torch) -> float:
    a, b = a.detach().double(), b.detach().double()
    scale = a.abs().max().clamp_min(1e-30)
    return ((a - b).abs().max() / scale).item() if a.numel() else 0.0


def assert_same_model_behaviour(
    build_before: Callable[[], Tuple[Any, tuple]],
    build_after: Callable[[], Tuple[Any, tuple]],
    torch,
    rel_tol: float = REL_TOL,
) -> None:
    """Build both (same seed), copy weights, run forward+backward, compare everything."""
    torch.manual_seed(0)
    model_a, inputs_a = build_before()
    torch.manual_seed(0)
    model_b, inputs_b = build_after()
    model_b.load_state_dict(model_a.state_dict())
    model_a.load_state_dict(model_b.state_dict())

    torch.manual_seed(1)
    out_a = _flatten(model_a(*inputs_a))
    torch.manual_seed(1)
    out_b = _flatten(model_b(*inputs_b))
    assert len(out_a) == len(out_b)
    loss_a = 0.0
    loss_b = 0.0
    for i, (a, b) in enumerate(zip(out_a, out_b)):
        if not torch.is_tensor(a):
            assert a == b, f"output {i}: {a!r} != {b!r}"
            continue
        assert a.shape == b.shape and a.dtype == b.dtype, f"output {i}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
        if a.is_floating_point():
            err = max_rel_error(a, b, torch)
            assert err <= rel_tol, f"output {i}: relative error {err:.3e}"
            weights = torch.linspace(0.5, 1.5, a.numel(), dtype=a.dtype).view(a.shape)
            loss_a = loss_a + (a * weights).sum()
            loss_b = loss_b + (b * weights).sum()
        else:
            assert torch.equal(a, b), f"output {i} differs"
    assert torch.is_tensor(loss_a), "no floating-point output to differentiate"
    loss_a.backward()
    loss_b.backward()
    for (name, pa), (_, pb) in zip(model_a.named_parameters(), model_b.named_parameters()):
        if pa.grad is None:
            assert pb.grad is None, f"{name}: gradient only after the rewrite"
            continue
        assert pb.grad is not None, f"{name}: gradient lost by the rewrite"
        err = max_rel_error(pa.grad, pb.grad, torch)
        assert err <= rel_tol, f"{name}: gradient relative error {err:.3e}"
