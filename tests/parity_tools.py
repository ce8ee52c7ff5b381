"""Compare two model builds numerically: outputs and every parameter gradient."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Tuple

REL_TOL = 1e-10


def flatten_outputs(value: Any) -> list:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flatten_outputs(item)]
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in flatten_outputs(value[key])]
    return [value]


def max_rel_error(a, b, torch) -> float:
    """Largest |a - b| relative to the largest |a|; 0 for empty tensors (a selection of
    nothing: `.max()` of an empty tensor raises)."""
    if not a.numel():
        return 0.0
    a, b = a.detach().double(), b.detach().double()
    scale = a.abs().max().clamp_min(1e-30)
    return ((a - b).abs().max() / scale).item()


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
    out_a = flatten_outputs(model_a(*inputs_a))
    torch.manual_seed(1)
    out_b = flatten_outputs(model_b(*inputs_b))
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


# -- two live models, one set of weights ---------------------------------------------
#
# The upstream parity suite (tests/test_parity.py) builds the two models itself, so it
# can pick the dtype, the mode and the inputs, and compares several outputs of
# different kinds (the MAE returns a loss, predictions, labels and a boolean mask).


def default_dtype(torch, dtype):
    """Context manager: build modules directly in ``dtype`` (no float32 copy first)."""
    import contextlib

    @contextlib.contextmanager
    def _ctx():
        before = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(before)

    return _ctx()


def share_weights(model_a, model_b) -> None:
    """Give ``model_b`` the very tensors of ``model_a`` (strict: same names and shapes).

    ``assign=True`` makes ``model_b``'s parameters new ``Parameter`` objects over
    ``model_a``'s storage, so each model still accumulates its own ``.grad`` while
    the weights exist once (the large/huge cells need that to fit in memory).
    """
    sa, sb = model_a.state_dict(), model_b.state_dict()
    assert list(sa) == list(sb), "state_dict keys differ: " + repr(sorted(set(sa) ^ set(sb)))
    for key in sa:
        assert sa[key].shape == sb[key].shape and sa[key].dtype == sb[key].dtype, key
    del sb
    model_b.load_state_dict(sa, strict=True, assign=True)


def run_with_grads(model, call, inputs, torch, seed: int = 1, input_grad: bool = True):
    """Seed, run ``call(model, *inputs)``, backprop a fixed weighted sum of every
    floating output.  Returns (flat outputs, {param name: grad}, [input grads])."""
    leaves = []
    args = []
    for value in inputs:
        if input_grad and torch.is_tensor(value) and value.is_floating_point():
            value = value.detach().clone().requires_grad_(True)
            leaves.append(value)
        args.append(value)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    outputs = flatten_outputs(call(model, *args))
    loss = None
    for out in outputs:
        if torch.is_tensor(out) and out.is_floating_point() and out.requires_grad:
            weights = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).view(out.shape)
            term = (out * weights).sum()
            loss = term if loss is None else loss + term
    assert loss is not None, "no differentiable output"
    loss.backward()
    outputs = [o.detach() if torch.is_tensor(o) else o for o in outputs]
    grads = {name: (None if p.grad is None else p.grad.detach()) for name, p in model.named_parameters()}
    in_grads = [leaf.grad for leaf in leaves]
    model.zero_grad(set_to_none=True)
    return outputs, grads, in_grads


def compare_runs(run_a, run_b, torch, rel_tol: float = REL_TOL) -> dict:
    """Assert two ``run_with_grads`` results agree; return the largest errors seen."""
    out_a, grads_a, in_a = run_a
    out_b, grads_b, in_b = run_b
    worst = {"output": 0.0, "grad": 0.0, "input_grad": 0.0}
    assert len(out_a) == len(out_b), f"{len(out_a)} outputs vs {len(out_b)}"
    for i, (a, b) in enumerate(zip(out_a, out_b)):
        if not torch.is_tensor(a):
            assert not torch.is_tensor(b) and a == b, f"output {i}: {a!r} != {b!r}"
            continue
        assert torch.is_tensor(b), f"output {i}: tensor vs {type(b).__name__}"
        assert a.shape == b.shape, f"output {i}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} vs {b.dtype}"
        if a.is_floating_point():
            err = max_rel_error(a, b, torch)
            assert err <= rel_tol, f"output {i}: relative error {err:.3e} > {rel_tol:.0e}"
            worst["output"] = max(worst["output"], err)
        else:
            assert torch.equal(a, b), f"output {i} ({a.dtype}) differs"
    assert list(grads_a) == list(grads_b), "parameter names differ"
    for name, ga in grads_a.items():
        gb = grads_b[name]
        if ga is None:
            assert gb is None, f"{name}: gradient only after the rewrite"
            continue
        assert gb is not None, f"{name}: gradient lost by the rewrite"
        err = max_rel_error(ga, gb, torch)
        assert err <= rel_tol, f"{name}: gradient relative error {err:.3e} > {rel_tol:.0e}"
        worst["grad"] = max(worst["grad"], err)
    assert len(in_a) == len(in_b)
    for i, (ga, gb) in enumerate(zip(in_a, in_b)):
        assert (ga is None) == (gb is None), f"input {i}: gradient present on one side only"
        if ga is not None:
            err = max_rel_error(ga, gb, torch)
            assert err <= rel_tol, f"input {i}: gradient relative error {err:.3e} > {rel_tol:.0e}"
            worst["input_grad"] = max(worst["input_grad"], err)
    return worst


_INIT_FUNCTIONS = (
    "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
)


def skip_init(torch):
    """Context manager: ``torch.nn.init.*_`` do nothing (weights stay uninitialised).

    Building a model is dominated by its initialisers; the parity suite overwrites
    every parameter anyway (``randomize_``), so it skips them.
    """
    import contextlib

    @contextlib.contextmanager
    def _ctx():
        init = torch.nn.init
        saved = {name: getattr(init, name) for name in _INIT_FUNCTIONS if hasattr(init, name)}
        for name in saved:
            setattr(init, name, lambda tensor, *args, **kwargs: tensor)
        try:
            yield
        finally:
            for name, fn in saved.items():
                setattr(init, name, fn)

    return _ctx()


def randomize_(model, torch, seed: int = 0) -> None:
    """Fill every parameter and floating buffer with seeded random values.

    Matrices get N(0, 1/fan_in) (activations keep their scale through deep stacks);
    vectors (biases, norm weights, embeddings' last axis...) get N(0, 0.5), shifted
    by 1 for norm weights.  Generic non-zero biases and norm parameters exercise more
    of the computation than the upstream init (zero biases, unit norms).
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if not tensor.is_floating_point():
                continue
            noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float64)
            if tensor.dim() >= 2:
                fan_in = tensor[0].numel() if tensor.shape[0] > 1 else tensor.shape[-1]
                noise = noise / max(fan_in, 1) ** 0.5
            else:
                noise = noise * 0.5
                if "norm" in name and name.endswith("weight"):
                    noise = noise + 1.0
            tensor.copy_(noise.to(tensor.dtype))


def assert_parity_shared(model_a, model_b, call, inputs, torch, rel_tol: float = REL_TOL, seed: int = 1) -> dict:
    """``run_with_grads`` on ``model_a``, then the same on ``model_b`` comparing each
    parameter gradient the moment backward accumulates it, and freeing both.

    Peak memory is weights + one set of gradients (plus activations), not weights +
    two sets: it lets the float64 huge cell run in ~5 GB.  Returns the worst errors.
    """
    out_a, grads_a, in_a = run_with_grads(model_a, call, inputs, torch, seed=seed)
    expected = {name for name, g in grads_a.items() if g is not None}
    errors: dict = {}
    handles = []

    def make_hook(name):
        def hook(param):
            ga = grads_a.get(name)
            errors[name] = None if ga is None else max_rel_error(ga, param.grad, torch)
            grads_a[name] = None  # free as we go
            param.grad = None

        return hook

    for name, param in model_b.named_parameters():
        if param.requires_grad:
            handles.append(param.register_post_accumulate_grad_hook(make_hook(name)))
    try:
        out_b, grads_b, in_b = run_with_grads(model_b, call, inputs, torch, seed=seed)
    finally:
        for handle in handles:
            handle.remove()
    assert [n for n, _ in model_a.named_parameters()] == [n for n, _ in model_b.named_parameters()], "parameter names differ"
    # outputs and input gradients (parameter gradients were all consumed by the hooks)
    worst = compare_runs((out_a, {}, in_a), (out_b, {}, in_b), torch, rel_tol)
    only_after = sorted(set(errors) - expected)
    assert not only_after, f"gradient only after the rewrite: {only_after[:5]}"
    lost = sorted(expected - set(errors))
    assert not lost, f"gradient lost by the rewrite: {lost[:5]}"
    for name, err in errors.items():
        assert err <= rel_tol, f"{name}: gradient relative error {err:.3e} > {rel_tol:.0e}"
        worst["grad"] = max(worst["grad"], err)
    return worst


def exec_rewritten(name: str, path: Path, file: Optional[str] = None):
    """Rewrite the installed file ``path`` with the tool and run the output as module
    ``name`` (a sibling of the original, so its relative imports resolve).  The module
    is in ``sys.modules`` only while it executes.  Returns (module, rewrite result)."""
    from hiera_rewrite.engine import rewrite_bytes

    result = rewrite_bytes(path.read_bytes())
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = file or f"<rewritten {path}>"
    sys.modules[name] = module
    try:
        exec(compile(result.output, f"<rewritten {path}>", "exec"), module.__dict__)
    finally:
        sys.modules.pop(name, None)
    return module, result
