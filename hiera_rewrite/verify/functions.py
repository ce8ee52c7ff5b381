"""Module-level functions holding a rewritten site, called directly (worker side).

A fork's helper (``def mask_unit_attention(qkv, heads, q_stride=1, ...)``) that no model
built here calls is verified like a component: its tensor arguments (annotated
``torch.Tensor``, or with no default and a tensor's name: ``x``, ``qkv``, ``q``...) are
the input (one tensor: ``(2, N, C)``; several: stacked, ``(n, 2, N, C)``, so the input's
gradient covers each), its other arguments come as a component's do (the calls of the
files with literal arguments, defaults, values from the names; then the branches the
defaults switch off switched on), and the first of a few token shapes with which the
original runs is the input.  :class:`FunctionCall` wraps the call as an ``nn.Module``
without parameters, so it is built, run, traced and compared as any component.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

_TENSOR_NAMES = {"x", "q", "k", "v", "qkv", "query", "key", "value", "tokens", "hidden", "hidden_states", "feat", "feats", "features", "inputs", "input", "attn", "scores"}
_CHANNELS = (24, 48, 8)  # 24: a qkv of 3 x 8, or 8 channels of 3 heads
_MAX_TOKENS = 4096


def tensor_params(function) -> List[str]:
    """The parameters of ``function`` that take tensors (the input), in order."""
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return []
    out = []
    for p in params:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY):
            continue
        if p.annotation is not p.empty:  # annotated: a tensor only if it says so (qkv: nn.Linear is not)
            annotation = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
            if annotation.rsplit(".", 1)[-1] == "Tensor":
                out.append(p.name)
        elif p.default is p.empty and p.name.lower() in _TENSOR_NAMES:
            out.append(p.name)
    return out


def _missing(function, given: Sequence[str]) -> List[str]:
    params = inspect.signature(function).parameters.values()
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in given]


@functools.lru_cache(maxsize=None)
def _function_call_class(torch):
    class FunctionCall(torch.nn.Module):
        """``function(**tensors, **fixed)`` as a module: ``forward(x)`` with ``x`` the one
        tensor argument, or the tensor arguments stacked on a new first dim."""

        def __init__(self, function, tensors: Tuple[str, ...], **fixed):
            super().__init__()
            missing = _missing(function, list(tensors) + list(fixed))
            if missing:  # as a class would say it: the builder fills them and tries again
                raise TypeError(f"{function.__name__}() missing {len(missing)} required positional arguments: " + ", ".join(repr(m) for m in missing))
            self.function, self.tensors, self.fixed = function, tuple(tensors), dict(fixed)

        def forward(self, x):
            values = [x] if len(self.tensors) == 1 else list(x.unbind(0))
            return self.function(**dict(zip(self.tensors, values)), **self.fixed)

        def verify_input_shapes(self) -> List[List[int]]:
            """Token shapes to try: ``N`` a few multiples of the product of the stride,
            window and unit sizes among the fixed arguments, ``C`` a few channel counts."""
            unit = 1
            for name, value in self.fixed.items():
                values = list(value) if isinstance(value, (tuple, list)) else [value]
                if any(w in name.lower() for w in ("stride", "window", "unit")) and values and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
                    unit *= math.prod(values)
            counts = [n for n in (2 * unit, unit, 4 * unit) if n <= _MAX_TOKENS] + [16, 64]
            lead = [len(self.tensors)] if len(self.tensors) > 1 else []
            return [[*lead, 2, n, c] for c in _CHANNELS for n in dict.fromkeys(counts)]

    return FunctionCall


def function_call(torch, function, tensors: Sequence[str]):
    """A constructor of the module calling ``function`` (keyword arguments: the fixed ones)."""
    return functools.partial(_function_call_class(torch), function, tuple(tensors))


def function_modes(function, recipes: List[Tuple[str, Dict[str, Any]]], user: Dict[str, Any], fill, knobs: Sequence[str]) -> List[Dict[str, Any]]:
    """The ways to call a function, each its own case: as each place of the files calls it
    (its tensors left to the input), then the first of those with the branches its
    defaults switch off switched on (a bool negated, a stride/window/unit size of 0 or 1
    made 2)."""
    tensors = tensor_params(function)
    if not tensors:
        return []
    params = inspect.signature(function).parameters
    direct = {"module": function.__module__, "attr": function.__qualname__, "tensors": tensors}
    out: List[Dict[str, Any]] = []
    for where, recipe in recipes or [("", {})]:
        kwargs = {k: v for k, v in dict(recipe, **{k: v for k, v in user.items() if k in params}).items() if k not in tensors}
        filled: Dict[str, Any] = {}
        for name in _missing(function, list(tensors) + list(kwargs)):
            try:
                value = fill(name, filled)
            except Exception:  # noqa: BLE001 -- MissingArgs: the build asks again and reports it
                continue
            if params[name].annotation in (int, "int") and isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
                value = math.prod(value)  # a flattened stride/size
            kwargs[name] = filled[name] = value
        out.append(dict(direct, kwargs=kwargs, filled=filled, how=f"the call in {where}" if where else "its defaults"))
    on: Dict[str, Any] = {}
    for name, p in params.items():
        if name in out[0]["kwargs"] or name in tensors or p.default is p.empty:
            continue
        if isinstance(p.default, bool):
            on[name] = not p.default
        elif isinstance(p.default, int) and p.default in (0, 1) and any(w in name.lower() for w in knobs):
            on[name] = 2
    if on:
        out.append(dict(out[0], kwargs=dict(out[0]["kwargs"], **on), how=out[0]["how"] + ", branches on: " + ", ".join(f"{k}={v!r}" for k, v in on.items())))
    order = list(params)
    for mode in out:
        mode["required"] = []
        shown = ", ".join(f"{k}={getattr(v, '__name__', None) or repr(v)}" for k, v in sorted(mode["kwargs"].items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
        mode["label"] = f"function {function.__name__}({shown})"
    return out


def function_owner(site: Dict[str, Any]) -> Optional[str]:
    """The module-level function holding a site (None: a method, a nested function)."""
    owner = site.get("owner") or ""
    if site.get("owner_class") or not owner or "." in owner or owner == "<module>":
        return None
    return owner
