"""What ``--verify`` feeds a model (worker side).

The input follows the model: ``(B, in_chans, *input_size)`` at the smallest size its
mask units accept (1-D, 2-D, 3-D grids alike); a module with no stated size (a
component: an attention, a block) gets the first of a few token sequences
``(B, N, C)`` with which the original runs.  ``forward``'s other required arguments
get values built from the model (token and mask-unit masks, values from their names),
the first with which the original runs.  The cases: ``forward(x)``; with a mask from
``get_random_mask`` (and intermediates) where ``forward`` takes one; that case with the
count ``get_random_mask`` states given to the rewritten ``forward`` (``num_kept``).
"""

from __future__ import annotations

import inspect
import itertools
import math
from typing import Any, Dict, List, Optional, Tuple

from .arguments import guess


_MASK_RATIO = 0.5
_SEEDS = 8  # seeds tried for a random mask whose rows differ


_MAX_ARG_TRIES = 12
_MAX_TOKENS = 4096
# where models state their input size, by convention
_SIZE_NAMES = ("input_size", "img_size", "image_size", "input_shape", "image_shape", "seq_len", "sequence_length", "num_samples", "resolution")


class _Made:
    """A ``forward`` argument each side makes from its own model inside the traced case
    (``"random_mask"``: ``get_random_mask(x, 0.5)``; ``"num_kept"``: its stated count)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


class Inputs:
    """Inputs and cases of a built model (a mixin of the worker)."""

    @staticmethod
    def small_input_size(model) -> Optional[List[int]]:
        """Smallest input with 2 mask units per dim that Unroll/Reroll accept, or None."""
        try:
            patch = list(model.patch_stride)
            mu = list(model.mask_unit_size)
            qs = list(model.q_stride)
            stages = len(model.stage_ends)
            tokens = list(model.tokens_spatial_shape)
        except (AttributeError, TypeError):
            return None
        if not (len(patch) == len(mu) == len(qs) == len(tokens)):
            return None
        size = []
        for p, m, q, t in zip(patch, mu, qs, tokens):
            unit = math.lcm(int(m), int(q) ** max(stages - 1, 0))
            size.append(min(unit * 2, t) * int(p) if t >= unit else t * int(p))
        return size

    def own_size(self, model, kwargs: Dict[str, Any], torch) -> Optional[List[int]]:
        """The input size a model is built for: a Hiera-like model's token grid times its
        patch stride, else the size it states (:meth:`stated_size`); None if it states none."""
        if hasattr(model, "tokens_spatial_shape") and hasattr(model, "patch_stride"):
            return [int(t) * int(p) for t, p in zip(model.tokens_spatial_shape, model.patch_stride)]
        return self.stated_size(model, kwargs, torch)

    def bench_shape(self, model, kwargs: Dict[str, Any], bench: Dict[str, Any], verified: List[int], torch) -> List[int]:
        """--verify-cuda's input: ``--bench-batch`` inputs at ``--bench-size``, else at the
        model's own size (:meth:`own_size`), with the verified input's channels; a model
        that states no size is timed at the verified input's size."""
        batch = int(bench.get("batch", 16))
        size = bench.get("size") or self.own_size(model, kwargs, torch)
        return [batch, *verified[1:2], *[int(s) for s in size]] if size else [batch, *verified[1:]]

    @staticmethod
    def stated_size(model, kwargs: Dict[str, Any], torch) -> Optional[List[int]]:
        """The input size a model states in one of the usual names (its keyword arguments,
        its attributes, a timm-style ``patch_embed.img_size``); an int is one size per
        spatial dim of its first convolution (a Conv1d: 1-D)."""
        holders = [kwargs, getattr(model, "__dict__", {}), getattr(getattr(model, "patch_embed", None), "__dict__", {})]
        size = None
        for name in _SIZE_NAMES:
            for holder in holders:
                value = holder.get(name) if isinstance(holder, dict) else None
                if isinstance(value, int) and not isinstance(value, bool) or isinstance(value, (tuple, list)) and value and all(isinstance(v, int) for v in value):
                    size = value
                    break
            if size is not None:
                break
        if isinstance(size, int):
            dims = next((len(m.kernel_size) for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)), 2)
            size = [size] * dims
        return list(size) if size else None

    @staticmethod
    def token_shapes(model, torch) -> List[List[int]]:
        """Inputs to try for a module with no stated size: ``(2, N, C)`` with ``C`` the
        features of its first ``Linear``/``LayerNorm`` and ``N`` a few multiples of its
        windows (per module, the product of its stride, window and unit sizes; their least
        common multiple); ``(2, C, S, ...)`` where a convolution comes first."""
        nn = torch.nn
        first = next((m for m in model.modules() if isinstance(m, (nn.Linear, nn.LayerNorm, nn.modules.conv._ConvNd))), None)
        if first is None:
            return []
        if isinstance(first, nn.modules.conv._ConvNd):
            return [[2, int(first.in_channels), *[s] * len(first.kernel_size)] for s in (16, 32, 64)]
        features = int(first.in_features) if isinstance(first, nn.Linear) else int(first.normalized_shape[-1])
        unit = 1
        for module in model.modules():
            size = 1
            for name, value in vars(module).items():
                if name.startswith("_") or not any(w in name.lower() for w in ("stride", "window", "unit")):
                    continue
                values = list(value) if isinstance(value, (tuple, list)) else [value]
                if values and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
                    size *= math.prod(values)
            unit = math.lcm(unit, size)
        counts = [n for n in (2 * unit, unit, 4 * unit) if n <= _MAX_TOKENS] + [16, 64]
        return [[2, n, features] for n in dict.fromkeys(counts)]

    def choose_input(self, model, shapes: List[List[int]], torch) -> Tuple[Any, Dict[str, Any], List[str]]:
        """The input (float64, CPU), ``forward``'s required arguments and notes: the first
        of ``shapes`` with which the original runs; a single shape is taken as it is."""
        tried: List[str] = []
        for shape in shapes:
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
            try:
                base, notes = self.forward_args(model, x, torch)
                if len(shapes) > 1 and not base:  # forward_args ran it only for required arguments
                    with torch.no_grad():
                        torch.manual_seed(1)
                        model(x.clone())
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                if len(shapes) == 1:
                    raise
                tried.append(f"{tuple(shape)}: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            if tried:
                notes = notes + [f"input {tuple(shape)}: the original raised with " + "; ".join(tried)]
            return x, base, notes
        raise ValueError("the original raised with every input tried: " + "; ".join(tried))

    @staticmethod
    def in_chans(model, torch) -> int:
        for mod in model.modules():
            if isinstance(mod, torch.nn.modules.conv._ConvNd):
                return int(mod.in_channels)
        return 3

    @staticmethod
    def _forward_params(model) -> Dict[str, Any]:
        try:
            return dict(inspect.signature(model.forward).parameters)
        except (TypeError, ValueError):
            return {}

    @staticmethod
    def _grid(model, attr: str) -> Optional[int]:
        shape = getattr(model, attr, None)
        try:
            return int(math.prod(int(s) for s in shape)) if shape is not None and len(shape) else None
        except (TypeError, ValueError):
            return None

    def _arg_candidates(self, name: str, model, x, torch) -> List[Tuple[str, Any]]:
        """(description, value) to try for a required ``forward`` argument, likeliest first."""
        n = name.lower()
        batch = x.shape[0]
        tokens, units = self._grid(model, "tokens_spatial_shape"), self._grid(model, "mask_spatial_shape")
        out: List[Tuple[str, Any]] = []
        if "mask" in n and "ratio" not in n:
            random_first = hasattr(model, "get_random_mask") and not any(w in n for w in ("pad", "attn", "attention", "key", "valid"))
            if random_first:
                out.append((f"get_random_mask(x, {_MASK_RATIO}) (bool, mask units)", _Made("random_mask")))
            if tokens:
                out.append((f"all-True bool ({batch}, {tokens}) (tokens)", torch.ones(batch, tokens, dtype=torch.bool)))
                out.append((f"ones ({batch}, {tokens}) (tokens)", torch.ones(batch, tokens, dtype=x.dtype)))
            if units:
                out.append((f"all-True bool ({batch}, {units}) (mask units)", torch.ones(batch, units, dtype=torch.bool)))
            if hasattr(model, "get_random_mask") and not random_first:
                out.append((f"get_random_mask(x, {_MASK_RATIO}) (bool, mask units)", _Made("random_mask")))
            if tokens:
                out.append((f"all-True bool ({batch}, 1, {tokens})", torch.ones(batch, 1, tokens, dtype=torch.bool)))
        elif any(w in n for w in ("length", "lens")) and tokens:
            out.append((f"full lengths ({batch},)", torch.full((batch,), tokens, dtype=torch.long)))
        value = guess(name)
        if value is not None:
            out.append((repr(value), value))
        for literal in (None, False, 0):
            if all(v is not literal for _, v in out):
                out.append((repr(literal), literal))
        return out

    def forward_args(self, model, x, torch) -> Tuple[Dict[str, Any], List[str]]:
        """Values for ``forward``'s required arguments after the input: the first
        combination of candidates with which the original runs (notes say which)."""
        params = list(self._forward_params(model).values())
        required = [p.name for p in params[1:] if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not required:
            return {}, []
        options = [self._arg_candidates(name, model, x, torch) for name in required]
        tried: List[str] = []
        for combo in itertools.islice(itertools.product(*options), _MAX_ARG_TRIES):
            kw = dict(zip(required, (value for _, value in combo)))
            what = ", ".join(f"{name}={desc}" for name, (desc, _) in zip(required, combo))
            try:
                with torch.no_grad():
                    torch.manual_seed(1)
                    model(x.clone(), **self._made(model, x, kw, torch))
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                tried.append(f"{what}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            return kw, [f"forward's required {', '.join(required)}: {what}"]
        raise ValueError(f"forward needs {', '.join(required)}; the original raised with every candidate tried: " + "; ".join(tried))

    def cases(self, model, x, torch, base: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
        params = self._forward_params(model)
        named = "".join(f", {k}" for k in base)
        cases: List[Tuple[str, Dict[str, Any]]] = [(f"forward(x{named})", dict(base))]
        if "mask" in params and hasattr(model, "get_random_mask") and "mask_ratio" not in params:
            # (a model that takes mask_ratio draws its own mask in forward(x): covered above)
            kw = dict(base, mask=_Made("random_mask"))
            label = f"forward(x{named.replace(', mask', '')}, mask"
            if "return_intermediates" in params and "return_intermediates" not in base:
                kw["return_intermediates"] = True
                label += ", return_intermediates=True"
            if not isinstance(base.get("mask"), _Made):
                cases.append((label + ")", kw))
            # the rewrite's static-count path: the rewritten forward gets the count that
            # get_random_mask states (HR003), as a caller of the rewritten file would pass
            cases.append((label + ", num_kept)", dict(kw, num_kept=_Made("num_kept"))))
        elif "return_intermediates" in params and "return_intermediates" not in base:
            cases.append((f"forward(x{named}, return_intermediates=True)", dict(base, return_intermediates=True)))
        return cases

    @staticmethod
    def _rows_differ(mask, torch) -> bool:
        rows = mask.reshape(mask.shape[0], -1) if torch.is_tensor(mask) and mask.dim() else None
        return rows is None or rows.shape[0] < 2 or bool((rows != rows[:1]).any())

    @staticmethod
    def _made(model, x, kw: Dict[str, Any], torch) -> Dict[str, Any]:
        """``kw`` with the arguments each side makes from its own model (in the traced
        case): the random mask (same seed, drawn on CPU) and the rewrite's kept count."""
        out = {}
        for key, value in kw.items():
            if isinstance(value, _Made) and value.kind == "random_mask":
                state = torch.random.get_rng_state()
                try:
                    # the first of a few seeds whose mask differs between rows: with rows
                    # alike, a rewrite mixing up the rows' masks (row 0's for all) passed
                    for seed in range(2, 2 + _SEEDS):
                        torch.manual_seed(seed)
                        drawn = model.get_random_mask(x.detach().cpu(), _MASK_RATIO)
                        value = drawn if seed == 2 else value
                        if Inputs._rows_differ(drawn, torch):
                            value = drawn
                            break
                    value = value.to(x.device)
                finally:
                    torch.random.set_rng_state(state)
            elif torch.is_tensor(value):
                # a copy per run: a forward writing into its argument (mask.logical_not_())
                # changed the value the next run and the other side were given
                value = value.to(device=x.device, dtype=x.dtype if value.is_floating_point() else value.dtype).clone()
            out[key] = value
        made = out.get("num_kept")
        if isinstance(made, _Made):
            count = getattr(model, "kept_mask_units", None)  # HR003's, beside get_random_mask
            if callable(count) and "num_kept" in Inputs._forward_params(model):
                out["num_kept"] = count(x, _MASK_RATIO)
            else:
                del out["num_kept"]
        return out
