"""Which SDPA kernel ran, for ``--verify-cuda`` in a lower precision (worker side).

The original's 5-D attention runs PyTorch's math kernel, which computes bfloat16 and
float16 attention in float32; the rewritten 4-D call runs a fused kernel (flash,
memory-efficient, cuDNN) in the dtype itself. So in bfloat16 or float16 the rewritten
model can be further from float64 than the original with an exact rewrite: that is the
fused kernel's precision, the trade the rewrite exists to make. It can also be a fused
kernel that misreads its inputs (a float mask in another dtype than q: errors of order
one, NaN in float16), which is a wrong result. Two checks tell them apart:

- every lower-precision CUDA configuration has a *math twin* (``"bfloat16 cuda math"``):
  both sides run with every fused kernel off. The twin compares the rewrite alone.
- a failing row whose twin passes is run once more under :class:`FusedCalls`, which
  evaluates each ``scaled_dot_product_attention`` call again in float64 on the same
  inputs. Only when every call's output is within :data:`CALL_ULPS` eps of its dtype of
  that result is the row the kernel's precision (reported, not failed).
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Optional

from .runner import EPS

MATH_SUFFIX = " math"
# a fused kernel's output error on one call, against float64 on the same inputs, in eps
# of the call's dtype (over max|reference|): rounding the probabilities and the output
# to the dtype gives a few eps; a misread mask gives errors of order one
CALL_ULPS = 8
_EPS = {"float64": 2.0**-52, **EPS}


def math_twin(cname: str) -> str:
    return cname + MATH_SUFFIX


def is_math_twin(cname: str) -> bool:
    return cname.endswith(MATH_SUFFIX)


def kernel_scope(cname: str, torch):
    """The context a configuration's cases run in: the math kernel alone for a twin."""
    if not is_math_twin(cname):
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415 -- torch >= 2.3

        return sdpa_kernel([SDPBackend.MATH])
    except ImportError:  # torch 2.0-2.2
        return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False)


def fused_calls(torch):
    """A TorchFunctionMode recording each SDPA call's error against float64 (a new
    instance per run; ``.calls``: one dict per call)."""
    from torch.overrides import TorchFunctionMode  # noqa: PLC0415

    sdpa = torch.nn.functional.scaled_dot_product_attention

    class FusedCalls(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: List[Dict[str, Any]] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func is sdpa and torch.is_tensor(out):
                self.calls.append(self._judge(args, kwargs, out))
            return out

        def _judge(self, args, kwargs, out) -> Dict[str, Any]:
            names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
            given = dict(zip(names, args), **kwargs)
            q = given["query"]
            mask = given.get("attn_mask")
            call = {
                "q": f"{tuple(q.shape)} {str(q.dtype).replace('torch.', '')}",
                "mask": None if mask is None else f"{tuple(mask.shape)} {str(mask.dtype).replace('torch.', '')}",
            }
            if given.get("dropout_p"):  # random: nothing to compare it with
                call["error"] = None
                return call
            ref = {k: (v.detach().double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in given.items()}
            with torch.no_grad(), kernel_scope(math_twin(""), torch):
                expected = sdpa(**ref)
            scale = float(expected.abs().max()) if expected.numel() else 0.0
            diff = (out.detach().double() - expected).abs()
            diff = diff.masked_fill(out.detach().isnan() & expected.isnan(), 0.0)  # a row all masked: NaN on both
            err = float(diff.nan_to_num(nan=float("inf")).max()) if expected.numel() else 0.0
            call["error"] = err / max(scale, 1e-30)
            call["bound"] = CALL_ULPS * _EPS.get(str(q.dtype).replace("torch.", ""), 0.0)
            return call

    return FusedCalls()


def worst_call(calls: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The call furthest over its bound, else None (every call within it)."""
    over = [c for c in calls if c.get("error") is not None and not c["error"] <= c["bound"]]
    return max(over, key=lambda c: c["error"] / max(c["bound"], 1e-30)) if over else None
