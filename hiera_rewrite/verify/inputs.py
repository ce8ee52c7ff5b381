"""What ``--verify`` feeds a model (worker side).

The input follows the model: ``(B, in_chans, *input_size)`` at the smallest size its
mask units accept (1-D, 2-D, 3-D grids alike); a module with no stated size (a
component: an attention, a block) gets the first of a few token sequences
``(B, N, C)`` with which the original runs.  ``forward``'s other required arguments
get values built from the model (token and mask-unit masks, values from their names),
the first with which the original runs.  The cases: ``forward(x)``; with a mask from
``get_random_mask`` (and intermediates) where ``forward`` takes one; that case with the
ratio the mask was drawn with given to the rewritten ``forward`` (``random_mask_ratio``),
as the rewritten MAE encoder passes it.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import math
import numbers
import textwrap
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
    (``"random_mask"``: ``get_random_mask(x, 0.5)``; ``"random_mask_ratio"``: that 0.5)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


@functools.lru_cache(maxsize=None)
def input_key(cls) -> Optional[str]:
    """The key under which ``cls.forward`` takes its input when it takes a dict (a batch:
    ``x = batch["video"]`` or ``batch.get("video")``): its first argument read with that one
    string key and in no other way than passed on; else None (a tensor, as upstream's)."""
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(cls.forward))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = [*node.args.posonlyargs, *node.args.args]
    if len(params) < 2:
        return None
    name, keys, gets = params[1].arg, set(), set()
    for sub in ast.walk(node):  # batch.get("video"): the call, then its batch.get
        func = sub.func if isinstance(sub, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr == "get" and isinstance(func.value, ast.Name) and func.value.id == name:
            if not (sub.args and isinstance(sub.args[0], ast.Constant) and isinstance(sub.args[0].value, str)):
                return None
            keys.add(sub.args[0].value)
            gets.add(id(func))
        elif isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id == name:
            if not (isinstance(sub.slice, ast.Constant) and isinstance(sub.slice.value, str)):
                return None  # x[..., 0]: a tensor
            keys.add(sub.slice.value)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == name and id(sub) not in gets:
            return None  # x.shape: a tensor
    return next(iter(keys)) if len(keys) == 1 else None


def fed(model, x) -> Any:
    """What ``model``'s forward is given for the input ``x``: ``{key: x}`` where it takes a
    dict (:func:`input_key`), else ``x``."""
    key = input_key(type(model))
    return x if key is None else {key: x}


class Inputs:
    """Inputs and cases of a built model (a mixin of the worker)."""

    @staticmethod
    def _ints(value, dims: Optional[int] = None) -> Optional[List[int]]:
        """``value`` as one positive int per dim (an int: per dim where it is one dim's,
        or its exact root over ``dims``: a flattened 2x2 stride of 4), else None; numpy's
        integers count (``tuple(np.prod(q_strides, axis=0))``)."""
        if isinstance(value, (tuple, list)) and value and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in value):
            return [int(v) for v in value] if dims is None or len(value) == dims else None
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0 and dims:
            value = int(value)
            root = round(value ** (1 / dims))
            return [root] * dims if root ** dims == value else None
        return None

    def input_grid(self, model, kwargs: Dict[str, Any], torch, defaults: Optional[Dict[str, Any]] = None):
        """(patch stride, unit, token grid or None) per dim of a Hiera-like model, from what
        it has: ``patch_stride``, else its first convolution's stride; ``mask_unit_size``
        and ``q_stride`` from its attributes, else the build's keyword arguments, else its
        class's defaults (``defaults``); the unit of a dim is the least common multiple of
        its mask unit and ``q_stride ** pools`` (upstream's unroll pools once per stage
        after the first: ``len(stage_ends)`` or ``len(stages)``, at least ``q_pool``); the
        token grid is ``tokens_spatial_shape``, else the size the model states over the
        patch stride.  None where it has neither a mask unit nor a q stride (not Hiera-like)."""
        known = dict(defaults or {}, **kwargs)

        def knob(name):
            value = getattr(model, name, None)
            return value if value is not None and not callable(value) else known.get(name)

        patch = self._ints(getattr(model, "patch_stride", None))
        if patch is None:
            conv = next((m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)), None)
            if conv is None:
                return None
            patch = [int(s) for s in conv.stride]
        dims = len(patch)
        mu, qs = self._ints(knob("mask_unit_size"), dims), self._ints(knob("q_stride"), dims)
        if mu is None and qs is None and not isinstance(knob("q_strides"), (tuple, list)):
            return None
        mu, qs = mu or [1] * dims, qs or [1] * dims
        pools = 0
        ends, stages, q_pool = getattr(model, "stage_ends", None), knob("stages"), knob("q_pool")
        if isinstance(ends, (tuple, list)) and ends:
            pools = len(ends) - 1
        elif isinstance(stages, (tuple, list)) and stages:
            pools = len(stages) - 1
        if isinstance(q_pool, int) and not isinstance(q_pool, bool):
            pools = max(pools, q_pool)
        unit = [math.lcm(m, q ** pools) for m, q in zip(mu, qs)]
        # a stride per pooling stage (q_strides=[(5, 1, 1), (1, 3, 1)]): the product of those
        # the pools apply, per dim
        per_stage = knob("q_strides")
        if isinstance(per_stage, (tuple, list)) and per_stage:
            strides = [self._ints(s, dims) for s in per_stage]
            if all(s is not None for s in strides):
                count = min(len(strides), max(pools, 1)) if pools else len(strides)
                unit = [math.lcm(u, math.prod(s[d] for s in strides[:count])) for d, u in enumerate(unit)]
        tokens: Optional[List[Optional[int]]] = self._ints(getattr(model, "tokens_spatial_shape", None))
        if tokens is None:
            size = self.stated_size(model, kwargs, torch, defaults)
            tokens = [int(s) // p for s, p in zip(size[-dims:], patch[-len(size):])] if size and len(size) <= dims else None
        if tokens is not None and len(tokens) < dims:
            # a grid of the trailing dims only (a model taking any number of frames keeps
            # the spatial grid): the leading ones are free
            tokens = [None] * (dims - len(tokens)) + list(tokens)
        elif tokens is not None and len(tokens) > dims:
            tokens = None
        return patch, unit, tokens

    def small_input_size(self, model, kwargs: Dict[str, Any], torch, defaults: Optional[Dict[str, Any]] = None) -> Optional[List[int]]:
        """Smallest input with 2 units per dim that Unroll/Reroll and the mask units accept
        (1 where the model's own grid is one unit; more along the first dim where a forward
        masking its own input with its default ``mask_ratio`` would keep none), or None
        (:meth:`input_grid`)."""
        grid = self.input_grid(model, kwargs, torch, defaults)
        if grid is None:
            return None
        patch, unit, tokens = grid
        # a grid of exactly one unit stays one; one that holds no whole number of units
        # (fewer tokens than a unit: 32-px patches at 224) cannot be the one it runs at
        counts = [1 if tokens and tokens[i] is not None and tokens[i] == u else 2 for i, u in enumerate(unit)]
        # a forward that masks its own input (mask_ratio=0.6 by default) keeps
        # int(units * (1 - ratio)) of them: at least one kept (a grid growing in one dim only
        # had 2 units, none kept), more units along the first dim that may grow
        ratio = self._forward_params(model).get("mask_ratio")
        ratio = getattr(ratio, "default", None)
        free = [i for i, c in enumerate(counts) if c == 2]
        if isinstance(ratio, float) and 0 < ratio < 1 and free:
            while int(math.prod(counts) * (1 - ratio)) < 1 and math.prod(counts) < 64:
                counts[free[0]] += 1
        return [c * u * p for c, p, u in zip(counts, patch, unit)]

    def own_size(self, model, kwargs: Dict[str, Any], torch, defaults: Optional[Dict[str, Any]] = None) -> Optional[List[int]]:
        """The input size a model is built for: a Hiera-like model's token grid times its
        patch stride (its first convolution's stride where it keeps none), else the size it
        states (:meth:`stated_size`), where that names fewer dims than its first
        convolution has (a model taking any number of frames states only its spatial grid)
        with the leading dims the smallest its patches and mask units accept; None if it
        states none."""
        tokens = self._ints(getattr(model, "tokens_spatial_shape", None))
        if tokens is not None:
            patch = self._ints(getattr(model, "patch_stride", None), len(tokens))
            if patch is None:
                conv = next((m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)), None)
                patch = [int(s) for s in conv.stride] if conv is not None and len(conv.stride) == len(tokens) else None
            if patch is not None:
                return [t * p for t, p in zip(tokens, patch)]
        size = self.stated_size(model, kwargs, torch, defaults)
        conv = next((m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)), None)
        if size and conv is not None and len(size) < len(conv.kernel_size):
            # a size of the trailing dims only (input_size=(1, 54) for (frames, 1, 54), the
            # frames free): the leading dims the smallest its patches and units accept
            grid = self.input_grid(model, kwargs, torch, defaults)
            lead = len(conv.kernel_size) - len(size)
            if grid is not None and len(grid[0]) == len(conv.kernel_size):
                size = [2 * u * p for p, u in zip(grid[0][:lead], grid[1][:lead])] + list(size)
            else:
                size = [2 * int(s) for s in conv.stride[:lead]] + list(size)
        return size

    def bench_shape(self, model, kwargs: Dict[str, Any], bench: Dict[str, Any], verified: List[int], torch, layout: str = "channels_first") -> List[int]:
        """--verify-cuda's input: ``--bench-batch`` inputs at ``--bench-size``, else at the
        model's own size (:meth:`own_size`), with the verified input's channels, in the
        layout the verified input had (:meth:`input_layout`: ``(B, C, *size)``, channels last
        ``(B, *size, C)``, or none ``(B, *size)``); a model that states no size is timed at
        the verified input's size."""
        batch = int(bench.get("batch", 16))
        size = bench.get("size") or self.own_size(model, kwargs, torch)
        if not size:
            return [batch, *verified[1:]]
        size = [int(s) for s in size]
        if layout == "channels_last":
            return [batch, *size, *verified[-1:]]
        if layout == "no_channels":
            return [batch, *size]
        return [batch, *verified[1:2], *size]

    @staticmethod
    def input_layout(shape: List[int], shapes: List[List[int]], fallbacks: Optional[List[List[int]]] = None) -> str:
        """The layout of the input :meth:`choose_input` took: ``channels_first`` (one of
        ``shapes``), else the :meth:`other_ranks` fallback it is, ``channels_last`` (the rank
        of ``shapes``) or ``no_channels`` (one less)."""
        shape = list(shape)
        if shape in [list(s) for s in shapes] or shape not in [list(s) for s in fallbacks or []]:
            return "channels_first"
        return "channels_last" if shapes and len(shape) == len(shapes[0]) else "no_channels"

    @staticmethod
    def stated_size(model, kwargs: Dict[str, Any], torch, defaults: Optional[Dict[str, Any]] = None) -> Optional[List[int]]:
        """The input size a model states in one of the usual names (its keyword arguments,
        its attributes, a timm-style ``patch_embed.img_size``, then the defaults of the
        class that built it); an int is one size per spatial dim of its first convolution
        (a Conv1d: 1-D)."""
        holders = [kwargs, getattr(model, "__dict__", {}), getattr(getattr(model, "patch_embed", None), "__dict__", {}), defaults or {}]
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
    def token_shapes(model, torch, small: Optional[List[int]] = None) -> List[List[int]]:
        """Inputs to try for a module with no stated size: ``(2, N, C)`` with ``C`` the
        features of its first ``Linear``/``LayerNorm`` and ``N`` a few multiples of its
        windows (per module, the product of its stride, window and unit sizes; their least
        common multiple); ``(2, C, S, ...)`` where a convolution comes first: ``small``
        (the smallest its patches and units accept, :meth:`small_input_size`), then 16, 32,
        64 and 2 and 4 times the convolution's stride per dim."""
        nn = torch.nn
        first = next((m for m in model.modules() if isinstance(m, (nn.Linear, nn.LayerNorm, nn.modules.conv._ConvNd))), None)
        if first is None:
            return []
        if isinstance(first, nn.modules.conv._ConvNd):
            dims = len(first.kernel_size)
            sizes = [list(small)] if small and len(small) == dims else []
            sizes += [[s] * dims for s in (16, 32, 64)] + [[int(p) * k for p in first.stride] for k in (2, 4)]
            unique = list(dict.fromkeys(tuple(s) for s in sizes))
            return [[2, int(first.in_channels), *s] for s in unique]
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

    @staticmethod
    def other_ranks(shapes: List[List[int]]) -> List[List[int]]:
        """``(B, C, *size)`` inputs in the layouts a fork's ``forward`` may take instead:
        channels last ``(B, *size, C)`` (a ``(B, T, C)`` sequence it transposes itself),
        then, with one channel, none ``(B, *size)`` (a grid it unsqueezes itself)."""
        last = [[s[0], *s[2:], s[1]] for s in shapes if len(s) > 2]
        bare = [[s[0], *s[2:]] for s in shapes if len(s) > 2 and s[1] == 1]
        return [s for s in last + bare if s not in shapes]

    def choose_input(self, model, shapes: List[List[int]], torch, fallbacks: Optional[List[List[int]]] = None) -> Tuple[Any, Dict[str, Any], List[str]]:
        """The input (float64, CPU), ``forward``'s required arguments and notes: the first
        of ``shapes`` with which the original runs; a single shape is taken as it is,
        unless there are ``fallbacks`` (other layouts, :meth:`other_ranks`): then, when
        every shape fails, the first fallback with which the original runs, and when none
        does, the first shape's error as it is."""
        tried: List[str] = []
        first: Optional[Exception] = None
        probe = len(shapes) > 1 or bool(fallbacks)
        for n, shape in enumerate([*shapes, *(fallbacks or [])]):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
            try:
                base, notes = self.forward_args(model, x, torch)
                if probe and not base:  # forward_args ran it only for required arguments
                    with torch.no_grad():
                        torch.manual_seed(1)
                        model(fed(model, x.clone()))
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                if not probe:
                    raise
                first = first or exc
                tried.append(f"{tuple(shape)}: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            if tried:
                notes = notes + [f"input {tuple(shape)}: the original raised with " + "; ".join(tried)]
            return x, base, notes
        if fallbacks and len(shapes) == 1 and first is not None:
            raise first
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
                    model(fed(model, x.clone()), **self._made(model, x, kw, torch))
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
            # the rewrite's static-count path: the rewritten forward gets the ratio the
            # mask was drawn with (HR003), as the rewritten MAE encoder passes it
            cases.append((label + ", random_mask_ratio)", dict(kw, random_mask_ratio=_Made("random_mask_ratio"))))
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
        if isinstance(out.get("random_mask_ratio"), _Made):
            if "random_mask_ratio" in Inputs._forward_params(model):  # the rewritten side
                out["random_mask_ratio"] = _MASK_RATIO
            else:
                del out["random_mask_ratio"]
        return out
