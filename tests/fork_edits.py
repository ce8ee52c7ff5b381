"""Edit operators a fork author makes to copies of the installed upstream Hiera, and a
builder of the edited packages, original and rewritten (issue 29's fork-edit fuzzer).

An :class:`Operator` is a small realistic edit: text replacements anchored on upstream
text (each anchor must occur exactly once when it is applied), code appended to a
file, a class put between ``Hiera`` and the MAE, or a module of the user's own (a
training script's subclass or rebinding) that imports the built package.  Operators
compose: they are applied in catalogue order, anchors are kept by the operators that
insert beside them, and intermediate classes chain (each derives from the MAE's base
so far).  Third-party source never enters this repository: the upstream files are read
from the installed package when a fork is built.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import itertools
import sys
import textwrap
import types
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

from hiera_rewrite.engine import Report, rewrite_bytes
from tests.parity_tools import default_dtype, skip_init
from tests.test_mask_exactness import IMG16, MICRO
from tests.upstream import REWRITABLE, upstream_dir

# The MAE every fork builds: MICRO with upstream MAE's q_pool=2, so a mask unit is 2x2
# tokens at the decoder (with q_pool=3 it is one token, and a count in units equals a
# count in tokens: several wrong counts would go unseen).
FORK_MAE = {**MICRO, "q_pool": 2}
MASK_RATIO = 0.7  # 16 units: int(16 * 0.3) = 4 kept, round(...) = 5, ceil(...) = 5

ENCODER_MASK = "  # [B, #MUs_all]\n"  # the end of forward_encoder's get_random_mask line
BEFORE_ENCODER_CALL = "        # Get multi-scale representations from encoder\n"


@dataclasses.dataclass(frozen=True)
class Edit:
    file: str
    old: str  # the anchor, replaced by ``new``; "" appends ``new`` to the file
    new: str


def insert_before(file: str, anchor: str, code: str) -> Edit:
    return Edit(file, anchor, code + anchor)


def insert_after(file: str, anchor: str, code: str) -> Edit:
    return Edit(file, anchor, anchor + code)


@dataclasses.dataclass(frozen=True)
class Operator:
    name: str
    klass: str  # issue 29's class (1a, 5c...); "-" for support operators
    doc: str
    edits: Tuple[Edit, ...] = ()
    # a class put between Hiera and the MAE: (file, class name, source with {base})
    intermediate: Optional[Tuple[str, str, str]] = None
    # a module of the user's own: source run after `from PKG import hiera, hiera_mae`
    # with `Base` bound to the MAE class so far; it sets MODEL_CLASS
    user: str = ""
    requires: Tuple[str, ...] = ()


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _indent(spaces: int, text: str) -> str:
    return textwrap.indent(_code(text), " " * spaces)


def _method(text: str) -> str:
    return _indent(4, text) + "\n"


# -- the catalogue -------------------------------------------------------------------

OPERATORS: List[Operator] = []


def _op(*args, **kwargs) -> Operator:
    op = Operator(*args, **kwargs)
    OPERATORS.append(op)
    return op


# 1a, 2a: intermediate classes in hiera.py (before those of hiera_mae.py: they chain)
_op(
    "rounded_hiera", "1a", "hiera.py: RoundedHiera(Hiera) keeps round(), not int(), units; the MAE derives from it",
    intermediate=("hiera.py", "RoundedHiera", '''
        class RoundedHiera({base}):
            """Keeps round(), not int(), of the kept fraction: 30% of 16 units keeps 5."""

            def get_random_mask(self, x, mask_ratio):
                B = x.shape[0]
                num_windows = math.prod(self.mask_spatial_shape)
                len_keep = round(num_windows * (1 - mask_ratio))
                noise = torch.rand(B, num_windows, device=x.device)
                ids_restore = torch.argsort(torch.argsort(noise, dim=1), dim=1)
                mask = torch.zeros([B, num_windows], device=x.device)
                mask[:, :len_keep] = 1
                return torch.gather(mask, dim=1, index=ids_restore).bool()
    '''),
)
_op(
    "feature_cache_hiera", "2a", "hiera.py: FeatureCacheHiera(Hiera) with upstream's forward signature caches its output",
    intermediate=("hiera.py", "FeatureCacheHiera", '''
        class FeatureCacheHiera({base}):
            """Keeps the last forward's features, for a linear probe watching pretraining."""

            def forward(self, x, mask=None, return_intermediates=False):
                out = super().forward(x, mask, return_intermediates)
                self.cached_features = (out[0] if return_intermediates else out).detach()
                return out
    '''),
)
# 9h (hunt 7) here: its intermediate class is in hiera.py, before those of hiera_mae.py
_op(
    "hook_overridden_below", "9h",
    "hiera.py: Hiera.forward hands the mask to a no-op `self.prepare_mask(mask)`; KeepCentreHiera(Hiera) overrides it"
    " to reveal the centre unit in place; the MAE derives from it",
    edits=(
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _method('''
            def prepare_mask(self, mask: torch.Tensor) -> None:
                """A hook for subclasses."""
        ''') + "\n"),
        insert_before("hiera.py", "        # Discard masked tokens\n", "        if mask is not None:\n            self.prepare_mask(mask)\n\n"),
    ),
    intermediate=("hiera.py", "KeepCentreHiera", '''
        class KeepCentreHiera({base}):
            """Always shows the centre unit to the encoder."""

            def prepare_mask(self, mask):
                mask[:, mask.shape[1] // 2] = True
    '''),
)
_op(
    "block_mask_hiera", "1b", "hiera_mae.py: BlockMaskHiera(Hiera) drops one rectangle of units, keeps >= 2",
    intermediate=("hiera_mae.py", "BlockMaskHiera", '''
        class BlockMaskHiera({base}):
            """Block masking (BEiT-style): one random rectangle of mask units is dropped
            per image, the same size for every image; at least 2 units are kept."""

            def get_random_mask(self, x, mask_ratio):
                B = x.shape[0]
                rows, cols = self.mask_spatial_shape[-2:]
                num_windows = math.prod(self.mask_spatial_shape)
                area = int(num_windows * mask_ratio)
                h = max(1, min(rows, int(math.sqrt(area))))
                w = max(1, min(cols, area // h))
                while num_windows - h * w < 2:
                    w -= 1
                top = torch.randint(0, rows - h + 1, (B, 1, 1), device=x.device)
                left = torch.randint(0, cols - w + 1, (B, 1, 1), device=x.device)
                r = torch.arange(rows, device=x.device)[None, :, None]
                c = torch.arange(cols, device=x.device)[None, None, :]
                block = (r >= top) & (r < top + h) & (c >= left) & (c < left + w)
                return block.logical_not().flatten(1)
    '''),
)

# 2b: timm-style split of Hiera.forward
_FORWARD_DOC_END = "        Note: 1 in mask is *keep*, 0 is *remove*; mask.sum(dim=-1) should be the same across the batch.\n        \"\"\"\n"
_op(
    "forward_features_split", "2b", "hiera.py: Hiera.forward's body moved to forward_features(x, mask, return_intermediates)",
    edits=(insert_after("hiera.py", _FORWARD_DOC_END, _indent(4, '''
        return self.forward_features(x, mask, return_intermediates)

    def forward_features(
        self,
        x: torch.Tensor,
        mask: torch.Tensor = None,
        return_intermediates: bool = False,
    ) -> torch.Tensor:
    ''')),),
)

# 3: the mask written in place after get_random_mask
_op(
    "curriculum_reveal", "3", "hiera_mae.py: MAE.reveal_one_unit_(mask) un-masks one unit per row, in place, after get_random_mask",
    edits=(
        insert_before("hiera_mae.py", "    def forward_encoder(", _method('''
            def reveal_one_unit_(self, mask: torch.Tensor) -> None:
                """Curriculum: un-mask the first masked unit of each row (in place)."""
                first_masked = mask.logical_not().byte().argmax(dim=1)
                mask[torch.arange(mask.shape[0], device=mask.device), first_masked] = True
        ''')),
        insert_after("hiera_mae.py", ENCODER_MASK, "            self.reveal_one_unit_(mask)\n"),
    ),
)
_op(
    "curriculum_in_hiera", "3", "hiera.py: Hiera.reveal_units_(mask) (scatter_ in place), called by the MAE after get_random_mask",
    edits=(
        insert_before("hiera.py", "    def get_pos_embed(self)", _method('''
            def reveal_units_(self, mask: torch.Tensor, count: int = 1) -> torch.Tensor:
                """Curriculum: keep `count` more units per row (the first masked ones), in place."""
                for _ in range(count):
                    first = mask.logical_not().byte().argmax(dim=1, keepdim=True)
                    mask.scatter_(1, first, True)
                return mask
        ''')),
        insert_after("hiera_mae.py", ENCODER_MASK, "            self.reveal_units_(mask)\n"),
    ),
)

_op(
    "patch_embed_reveals", "3", "hiera.py: PatchEmbed.forward un-masks each row's first masked unit in the mask view it is given (in place)",
    edits=(
        insert_before("hiera.py", "        x = do_masked_conv(x, self.proj, mask)\n", _indent(8, '''
            if mask is not None:  # curriculum: the first masked unit of each row is shown
                flat = mask.view(mask.shape[0], -1)
                first = flat.logical_not().byte().argmax(dim=1)
                flat[torch.arange(flat.shape[0], device=flat.device), first] = True
        ''')),
    ),
)

# 4: the ratio read from a property drawing from torch's RNG


def _rng_property(file: str, before: str, name: str, doc: str, value: str) -> Edit:
    return insert_before(file, before, f'    @property\n    def {name}(self) -> float:\n        """{doc}"""\n        return {value}\n\n')


_op(
    "jittered_ratio_property", "4a", "hiera_mae.py: forward_encoder calls get_random_mask(x, self.jittered_mask_ratio), a property drawing torch.rand",
    edits=(
        _rng_property("hiera_mae.py", "    def forward_encoder(", "jittered_mask_ratio", "This batch's mask ratio: 0.6 to 0.8, drawn anew each step.", "0.6 + 0.2 * torch.rand(()).item()"),
        Edit("hiera_mae.py", "self.get_random_mask(x, mask_ratio)", "self.get_random_mask(x, self.jittered_mask_ratio)"),
    ),
)
_op(
    "ratio_jitter_in_hiera", "4b", "hiera.py: get_random_mask's len_keep reads self.mask_ratio_jitter, a property drawing torch.rand",
    edits=(
        _rng_property("hiera.py", "    def get_random_mask(self, x: torch.Tensor", "mask_ratio_jitter", "Per-batch jitter added to the mask ratio, in [-0.1, 0.1).", "0.2 * torch.rand(()).item() - 0.1"),
        Edit(
            "hiera.py",
            "len_keep = int(num_windows * (1 - mask_ratio))",
            "len_keep = int(num_windows * (1 - (mask_ratio + self.mask_ratio_jitter)))",
        ),
    ),
)

# 5: names the rewrite may add, already taken
_op(
    "hiera_kept_mask_units", "5a", "hiera.py: Hiera.kept_mask_units(x, ratio) = kept units of the whole batch, logged by get_random_mask",
    edits=(
        insert_before("hiera.py", "    def get_pos_embed(self)", _method('''
            def kept_mask_units(self, x: torch.Tensor, mask_ratio: float) -> int:
                """Mask units kept in the whole batch (throughput logging)."""
                return x.shape[0] * int(math.prod(self.mask_spatial_shape) * (1 - mask_ratio))
        ''')),
        insert_before("hiera.py", "        return mask.bool()\n", "        self.kept_in_batch = self.kept_mask_units(x, mask_ratio)\n"),
    ),
)
_op(
    "mae_kept_mask_units", "5b", "hiera_mae.py: MAE.kept_mask_units(x, ratio) = kept tokens at the decoder's resolution, logged",
    edits=(
        insert_before("hiera_mae.py", "    def forward_encoder(", _method('''
            def kept_mask_units(self, x: torch.Tensor, mask_ratio: float) -> int:
                """Kept tokens per image at the decoder's resolution (logging)."""
                units = int(math.prod(self.mask_spatial_shape) * (1 - mask_ratio))
                return units * math.prod(self.mask_unit_spatial_shape_final)
        ''')),
        insert_before("hiera_mae.py", BEFORE_ENCODER_CALL, "        self.visible_tokens = self.kept_mask_units(x, mask_ratio)\n"),
    ),
)
_op(
    "user_subclass_names", "5c", "user module: MAE subclass with its own kept_mask_units, num_kept, num_masked, masked_rows, kept_tokens",
    user='''
        class TrackedMAE(Base):
            """Training-loop bookkeeping on the model, names of our own."""

            num_kept = 0
            num_masked = 0

            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.kept_tokens = []  # visible tokens per step, for the logger

            def kept_mask_units(self):
                """Units kept at the last step, whole batch."""
                return self.num_kept

            def masked_rows(self, mask):
                """Images with at least one masked unit."""
                return mask.logical_not().any(dim=1).nonzero()[:, 0]

            def forward(self, x, mask_ratio=0.6, mask=None):
                loss, pred, label, mask = super().forward(x, mask_ratio, mask=mask)
                self.num_kept = int(mask.sum())
                self.num_masked = mask.numel() - self.num_kept
                self.kept_tokens.append(self.kept_mask_units() * self.mu_size)
                self.rows_with_masked = self.masked_rows(mask)
                return loss, pred, label, mask


        MODEL_CLASS = TrackedMAE
    ''',
)
_MODULE_FUNCTIONS = {
    "masked_rows": ('''
        def masked_rows(mask: torch.Tensor) -> torch.Tensor:
            """Indices of the images with at least one masked unit."""
            return mask.logical_not().any(dim=1).nonzero()[:, 0]
    ''', "self.rows_masked = masked_rows(mask)"),
    "true_rows": ('''
        def true_rows(mask: torch.Tensor) -> int:
            """How many images keep at least one unit."""
            return int(mask.any(dim=-1).sum())
    ''', "self.rows_kept = true_rows(mask)"),
    "kept_tokens": ('''
        def kept_tokens(mask: torch.Tensor, tokens_per_unit: int) -> torch.Tensor:
            """Visible tokens of each image."""
            return mask.sum(dim=-1) * tokens_per_unit
    ''', "self.visible_per_image = kept_tokens(mask, self.mu_size)"),
}
for _name, (_function, _use) in _MODULE_FUNCTIONS.items():
    _op(
        f"module_{_name}", "5d", f"hiera_mae.py: a module function {_name} of another meaning, used in forward_encoder",
        edits=(
            insert_before("hiera_mae.py", "def apply_fusion_head(", _code(_function) + "\n\n"),
            insert_before("hiera_mae.py", BEFORE_ENCODER_CALL, f"        {_use}\n"),
        ),
    )
_op(
    "hiera_module_kept_tokens", "5d", "hiera.py: a module function kept_tokens(mask, tokens_per_unit), used in Hiera.forward",
    edits=(
        insert_before("hiera.py", "class MaskUnitAttention(", _code(_MODULE_FUNCTIONS["kept_tokens"][0]) + "\n\n"),
        insert_before(
            "hiera.py",
            "        # Discard masked tokens\n",
            "        self.tokens_kept = None if mask is None else kept_tokens(mask, self.mu_size)\n",
        ),
    ),
)

# 6: the module's class name rebound to a user subclass (built by the module's factory)
_op(
    "micro_factory", "-", "hiera_mae.py: a small-model factory mae_hiera_micro(**kwargs), like upstream's mae_hiera_*",
    edits=(Edit("hiera_mae.py", "", "\n\n" + _code(f'''
        def mae_hiera_micro(**kwargs):
            """A small MAE for quick experiments."""
            return MaskedAutoencoderHiera({", ".join(f"{k}={v!r}" for k, v in FORK_MAE.items())}, **kwargs)
    ''')),),
)
_REBIND = "\n\nhiera_mae.MaskedAutoencoderHiera = MODEL_CLASS = {}\n"
_USER_OVERRIDES = {
    "rebind_forward_loss": ("6a", "forward_loss (variance-weighted loss, reimplemented)", '''
        class WeightedLossMAE(Base):
            def forward_loss(self, x, pred, mask):
                label = self.get_pixel_label_2d(x, mask)
                pred = pred[mask]
                weight = 1.0 + label.var(dim=-1, keepdim=True)
                loss = weight * (pred - label) ** 2
                return loss.mean(), pred, label
    '''),
    "rebind_pixel_label": ("6b", "get_pixel_label_2d (raw pixels, via super)", '''
        class RawPixelMAE(Base):
            def get_pixel_label_2d(self, input_img, mask, norm=True):
                return super().get_pixel_label_2d(input_img, mask, norm=False)
    '''),
    "rebind_forward_decoder": ("6c", "forward_decoder (bounded predictions, via super)", '''
        class BoundedDecoderMAE(Base):
            def forward_decoder(self, x, mask):
                pred, pred_mask = super().forward_decoder(x, mask)
                return 3.0 * torch.tanh(pred / 3.0), pred_mask
    '''),
    "rebind_get_random_mask": ("6d", "get_random_mask (ceil of the kept fraction, reimplemented)", '''
        class CeilMaskMAE(Base):
            def get_random_mask(self, x, mask_ratio):
                B = x.shape[0]
                num_windows = math.prod(self.mask_spatial_shape)
                len_keep = math.ceil(num_windows * (1 - mask_ratio))
                noise = torch.rand(B, num_windows, device=x.device)
                ids_keep = torch.argsort(noise, dim=1)[:, :len_keep]
                mask = torch.zeros(B, num_windows, dtype=torch.bool, device=x.device)
                return mask.scatter(1, ids_keep, True)
    '''),
}
for _name, (_klass, _what, _source) in _USER_OVERRIDES.items():
    _class = _source.split("class ")[1].split("(")[0]
    _op(
        _name, _klass, f"user module: hiera_mae.MaskedAutoencoderHiera = a subclass overriding {_what}; built by the factory",
        user=_code(_source) + _REBIND.format(_class), requires=("micro_factory",),
    )
_op(
    "rebind_hiera", "6e", "user module: hiera.Hiera = hiera_mae.Hiera = MyHiera (get_random_mask keeps one more unit); MAE(Base, MyHiera)",
    user='''
        class MyHiera(hiera.Hiera):
            def get_random_mask(self, x, mask_ratio):
                mask = super().get_random_mask(x, mask_ratio)
                first_masked = mask.logical_not().byte().argmax(dim=1, keepdim=True)
                return mask.scatter(1, first_masked, True)


        hiera.Hiera = hiera_mae.Hiera = MyHiera  # everywhere the name is bound


        class MyMAE(Base, MyHiera):
            pass


        hiera_mae.MaskedAutoencoderHiera = MODEL_CLASS = MyMAE
    ''',
    requires=("micro_factory",),
)

# 7: the latent changes shape between the encoder and the decoder's fill
_op(
    "global_unit_token", "7a", "hiera_mae.py: the encoder appends a global unit (mean) after encoder_norm; the decoder slices it off",
    edits=(
        insert_after("hiera_mae.py", "        x = self.encoder_norm(x)\n", _indent(8, '''
            # One global unit after the kept ones (the contrastive head reads it)
            x = torch.cat([x, x.mean(dim=1, keepdim=True)], dim=1)
        ''')),
        insert_before("hiera_mae.py", "        # Embed tokens\n", "        x = x[:, :-1]  # drop the global unit\n"),
    ),
)
_op(
    "pooled_units", "7b", "hiera_mae.py: the encoder returns one pooled vector per unit; the decoder expands it back",
    edits=(
        insert_after(
            "hiera_mae.py",
            "        x = self.encoder_norm(x)\n",
            "        x = x.mean(dim=tuple(range(2, x.dim() - 1)))  # one vector per unit: [B, #MUs, C]\n",
        ),
        insert_after("hiera_mae.py", "        x = self.decoder_embed(x)\n", _indent(8, '''
            # Each unit's vector back to the unit's spatial shape
            unit = self.mask_unit_spatial_shape_final
            x = x.view(*x.shape[:2], *[1] * len(unit), x.shape[-1]).expand(*x.shape[:2], *unit, x.shape[-1])
        ''')),
    ),
)

# 8 (the issue's own class 8, not a hunt's): an attention mask in another dtype than q's.
# A fork's additive bias made in float32 whatever the model's dtype (float64 here): the
# original's 5-D call runs the math backend, which adds it in q's dtype; a 4-D call given
# it reaches the fused kernels, which misread it (CPU flash: errors of order 1)
_op(
    "float32_attention_bias", "8",
    "hiera.py: MaskUnitAttention adds a float32 bias (0, -0.3, -0.6 by key position) to SDPA, whatever the model's dtype",
    edits=(
        insert_before("hiera.py", '        if hasattr(F, "scaled_dot_product_attention"):\n', _indent(8, '''
            # a relative bias, made in float32 whatever the model's dtype
            bias = -0.3 * (torch.ones(B, N // num_windows, dtype=torch.float32, device=x.device).cumsum(-1) % 3)
            bias = bias[:, None, None, None, :]
        ''')),
        Edit("hiera.py", "            x = F.scaled_dot_product_attention(q, k, v)\n",
             "            x = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)\n"),
    ),
)

# 8: found by a second hunt (stop 35): the count path through wrappers, aliases and names
_op(
    "own_random_mask_ratio", "8a",
    "hiera.py: Hiera.forward has its own random_mask_ratio (features rescaled by 1/(1-ratio) when given)",
    edits=(
        insert_before("hiera.py", "    ) -> torch.Tensor:\n        \"\"\"\n        mask should be a boolean", "        random_mask_ratio: Optional[float] = None,\n"),
        insert_before("hiera.py", "        for i, blk in enumerate(self.blocks):\n", _indent(8, '''
            if random_mask_ratio is not None:  # a caller that dropped units at random says so
                x = x / (1.0 - random_mask_ratio)
        ''')),
    ),
)
_op(
    "forward_reveals_pred_mask", "8b",
    "hiera_mae.py: forward passes pred_mask to self.reveal_border_(m), which shows each row's first 8 tokens, in place",
    edits=(
        insert_before("hiera_mae.py", "    def forward_loss(", _method('''
            def reveal_border_(self, m: torch.Tensor) -> None:
                """The first tokens of every row are a border: shown, kept out of the loss (in place)."""
                m[:, :8] = True
        ''')),
        insert_after("hiera_mae.py", ")  # pred_mask is mask at resolution of *prediction*\n", "        self.reveal_border_(pred_mask)\n"),
    ),
)
_op(
    "loss_mask_attribute", "8c",
    "hiera_mae.py: forward_loss keeps its mask as self.loss_mask (for a logging hook) and un-masks 8 tokens through it",
    edits=(
        insert_before("hiera_mae.py", "        if len(self.q_stride) == 2:\n", _indent(8, '''
            self.loss_mask = mask  # read by a logging hook
            self.loss_mask[:, :8] = False
        ''')),
    ),
)
_op(
    "decorated_decoder", "8d",
    "hiera_mae.py: @visible_border on forward_decoder returns a pred_mask showing each row's first 8 tokens",
    edits=(
        insert_before("hiera_mae.py", "class MaskedAutoencoderHiera(", _code('''
            def visible_border(decode):
                """The first tokens of every row are shown (kept out of the loss)."""

                def wrapped(self, x, mask):
                    pred, pred_mask = decode(self, x, mask)
                    pred_mask = pred_mask.clone()
                    pred_mask[:, :8] = True
                    return pred, pred_mask

                return wrapped
        ''') + "\n\n"),
        insert_before("hiera_mae.py", "    def forward_decoder(", "    @visible_border\n"),
    ),
)
_op(
    "label_rebound_in_class", "8e",
    "hiera_mae.py: get_pixel_label_2d = drop_bottom(get_pixel_label_2d) in the class body; the wrapper un-masks the last 8 tokens",
    edits=(
        insert_before("hiera_mae.py", "class MaskedAutoencoderHiera(", _code('''
            def drop_bottom(label_fn):
                """The bottom tokens of every row are padding: not masked (in place)."""

                def wrapped(self, img, mask, norm=True, **kwargs):
                    mask[:, -8:] = False
                    return label_fn(self, img, mask, norm, **kwargs)

                return wrapped
        ''') + "\n\n"),
        insert_before("hiera_mae.py", "    def get_pixel_label_3d(", "    get_pixel_label_2d = drop_bottom(get_pixel_label_2d)\n\n"),
    ),
)

_op(
    "encoder_mask_on_self", "8f",
    "hiera.py: Hiera.forward keeps the mask as self.last_mask and hides each row's first kept unit through it",
    edits=(
        insert_before("hiera.py", "        # Discard masked tokens\n", _indent(8, '''
            if mask is not None:
                self.last_mask = mask  # read by a visualisation hook
                first = self.last_mask.byte().argmax(dim=1)
                self.last_mask[torch.arange(mask.shape[0], device=mask.device), first] = False
        ''')),
    ),
)

# 8g, 8h: found by a third hunt (stop 36): the decoder's tokens per unit change
_op(
    "unit_decoder_embed", "8g",
    "user module: a subclass's __init__ swaps decoder_embed for one pooling each unit's tokens to one (a per-unit decoder)",
    user='''
        class UnitEmbed(torch.nn.Module):
            """Each mask unit's tokens pooled to one, then projected: [B, K, 2, 2, C] -> [B, K, 1, 1, D]."""

            def __init__(self, cin, cout):
                super().__init__()
                self.lin = torch.nn.Linear(cin, cout)

            def forward(self, x):
                return self.lin(x.mean(dim=tuple(range(2, x.dim() - 1)), keepdim=True))


        class PerUnitDecoderMAE(Base):
            """A lighter decoder: one decoder token per mask unit, predicting the unit's pixels."""

            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                enc, dec = self.decoder_embed.in_features, self.decoder_embed.out_features
                self.decoder_embed = UnitEmbed(enc, dec)
                self.mask_unit_spatial_shape_final = [1] * len(self.mask_spatial_shape)
                self.tokens_spatial_shape_final = list(self.mask_spatial_shape)
                self.decoder_pos_embed = torch.nn.Parameter(torch.zeros(1, math.prod(self.mask_spatial_shape), dec))
                self.pred_stride = self.pred_stride * 2
                self.decoder_pred = torch.nn.Linear(dec, self.pred_stride ** 2 * 3)


        MODEL_CLASS = PerUnitDecoderMAE
    ''',
)

_op(
    "upsampled_undo_windowing", "8h",
    "hiera_utils.py: undo_windowing(..., scale=1) repeats each token scale times per dim; the decoder predicts at 2x (pos embed, pred_stride)",
    edits=(
        Edit("hiera_utils.py", "    x: torch.Tensor, shape: List[int], mu_shape: List[int]\n) -> torch.Tensor:\n    \"\"\"\n    Restore spatial",
             "    x: torch.Tensor, shape: List[int], mu_shape: List[int], scale: int = 1\n) -> torch.Tensor:\n    \"\"\"\n    Restore spatial"),
        Edit("hiera_utils.py", "    x = x.permute(permute).reshape(B, *shape, C)\n\n    return x\n",
             "    x = x.permute(permute).reshape(B, *shape, C)\n    for d in range(1, 1 + D):  # nearest upsampling: finer predictions\n"
             "        x = x.repeat_interleave(scale, dim=d)\n\n    return x\n"),
        Edit("hiera_mae.py", "                1, math.prod(self.tokens_spatial_shape_final), decoder_embed_dim\n",
             "                1, math.prod(self.tokens_spatial_shape_final) * 2 ** len(self.q_stride), decoder_embed_dim\n"),
        Edit("hiera_mae.py", "        )  # patch stride of prediction\n", "        ) // 2  # patch stride of prediction, at 2x\n"),
        Edit("hiera_mae.py", "        mask = undo_windowing(\n            mask[..., 0:1],\n            self.tokens_spatial_shape_final,\n            self.mask_unit_spatial_shape_final,\n        )\n",
             "        mask = undo_windowing(\n            mask[..., 0:1],\n            self.tokens_spatial_shape_final,\n            self.mask_unit_spatial_shape_final,\n            scale=2,\n        )\n"),
        Edit("hiera_mae.py", "        x = undo_windowing(\n            x_dec,\n            self.tokens_spatial_shape_final,\n            self.mask_unit_spatial_shape_final,\n        )\n",
             "        x = undo_windowing(\n            x_dec,\n            self.tokens_spatial_shape_final,\n            self.mask_unit_spatial_shape_final,\n            scale=2,\n        )\n"),
    ),
)

# 8i-8k: found by a fourth hunt (stop 36): methods bound on the instance, a subclass's
# encoder, a followed helper shadowed where it is called
_op(
    "instance_get_random_mask", "8i",
    "hiera.py: Hiera.__init__ picks its masking by `self.get_random_mask = self.get_round_mask` (round(), not int())",
    edits=(
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _method('''
            def get_round_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
                """Like get_random_mask, keeping round(N * (1 - r)) units."""
                B = x.shape[0]
                num_windows = math.prod(self.mask_spatial_shape)
                len_keep = round(num_windows * (1 - mask_ratio))
                noise = torch.rand(B, num_windows, device=x.device)
                ids = noise.argsort(dim=1)[:, :len_keep]
                return torch.zeros(B, num_windows, device=x.device).scatter(1, ids, 1.0).bool()
        ''')),
        insert_after("hiera.py", "        self.head.projection.bias.data.mul_(head_init_scale)\n",
                     "        self.get_random_mask = self.get_round_mask  # the masking strategy\n"),
    ),
)

_op(
    "encoder_global_unit_subclass", "-",
    "user module: a subclass's forward_encoder appends a pooled unit; its __init__ wraps decoder_embed to drop it"
    " (out of contract: submodules swapped by a subclass; the loss's count check raises, test_fork_edits)",
    user='''
        class DropGlobal(torch.nn.Module):
            def __init__(self, lin):
                super().__init__()
                self.lin = lin

            def forward(self, x):
                return self.lin(x[:, :-1])


        class GlobalUnitMAE(Base):
            """A pooled 'global' unit on the latent, for a probe reading forward_encoder."""

            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.decoder_embed = DropGlobal(self.decoder_embed)

            def forward_encoder(self, x, mask_ratio, mask=None):
                latent, mask = super().forward_encoder(x, mask_ratio, mask=mask)
                glob = latent.mean(dim=tuple(range(1, latent.dim() - 1)), keepdim=True)
                return torch.cat([latent, glob.expand(-1, 1, *latent.shape[2:-1], -1)], dim=1), mask


        MODEL_CLASS = GlobalUnitMAE
    ''',
)

_op(
    "shadowed_masked_conv", "8k",
    "hiera.py: PatchEmbed.forward binds do_masked_conv locally to a wrapper that shows each row's first unit, in place",
    edits=(
        insert_before("hiera.py", "class PatchEmbed(nn.Module):\n", _code('''
            def keep_first_unit(conv):
                """do_masked_conv with each row's first unit always shown (written into the mask)."""
                def run(x, layer, mask=None):
                    if mask is not None:
                        mask[:, :, 0, 0] = True
                    return conv(x, layer, mask)
                return run


            _masked_conv = do_masked_conv


        ''')),
        Edit("hiera.py", "        x = do_masked_conv(x, self.proj, mask)\n",
             "        do_masked_conv = keep_first_unit(_masked_conv)\n        x = do_masked_conv(x, self.proj, mask)\n"),
    ),
)

# nested scopes and patches from a sibling file (the fifth hunt)
_op(
    "closure_writes_encoder_mask", "8l",
    "hiera_mae.py: forward_encoder defines, before its mask is made, a closure that shows the centre unit"
    " (writes the mask it closes over), called before the encoder",
    edits=(
        Edit("hiera_mae.py", "    ) -> Tuple[torch.Tensor, torch.Tensor]:\n\n        if mask is None:\n",
             "    ) -> Tuple[torch.Tensor, torch.Tensor]:\n\n        def keep_centre_visible():\n"
             "            mask[:, mask.shape[1] // 2] = True\n\n        if mask is None:\n"),
        insert_before("hiera_mae.py", BEFORE_ENCODER_CALL, "        keep_centre_visible()\n"),
    ),
)

_op(
    "nonlocal_decoder_mask", "8m",
    "hiera_mae.py: forward_decoder rolls its mask through a nested function's `nonlocal mask` before the fill"
    " (the same count, other units)",
    edits=(
        insert_before("hiera_mae.py", "        # Embed tokens\n", _indent(8, '''
            def shift():
                nonlocal mask
                mask = mask.roll(1, 1)

        ''')),
        insert_before("hiera_mae.py", "        x_dec[mask] = x.flatten()\n", "        shift()\n"),
    ),
)

_op(
    "mae_patches_hiera_random_mask", "8n",
    "hiera_mae.py: `Hiera.get_random_mask = _keep_more` at module level (one unit more than upstream's)",
    edits=(
        insert_before("hiera_mae.py", "def apply_fusion_head(", _code('''
            def _keep_more(self, x, mask_ratio):
                """Keeps one unit more than upstream's random mask."""
                B = x.shape[0]
                num_windows = math.prod(self.mask_spatial_shape)
                len_keep = int(num_windows * (1 - mask_ratio)) + 1
                noise = torch.rand(B, num_windows, device=x.device)
                ids_restore = torch.argsort(torch.argsort(noise, dim=1), dim=1)
                mask = torch.zeros([B, num_windows], device=x.device)
                mask[:, :len_keep] = 1
                return torch.gather(mask, dim=1, index=ids_restore).bool()


            Hiera.get_random_mask = _keep_more


        ''')),
    ),
)

_op(
    "mae_wraps_hiera_forward", "8o",
    "hiera_mae.py: `Hiera.forward = _forward_with_log`, a wrapper with upstream's signature",
    edits=(
        insert_before("hiera_mae.py", "def apply_fusion_head(", _code('''
            _hiera_forward = Hiera.forward


            def _forward_with_log(self, x, mask=None, return_intermediates=False):
                return _hiera_forward(self, x, mask, return_intermediates)


            Hiera.forward = _forward_with_log


        ''')),
    ),
)

_op(
    "type_setattr_random_mask", "8p",
    "hiera.py: `type.__setattr__(Hiera, \"get_random_mask\", ...)` at the end of the file (one unit more)",
    edits=(
        Edit("hiera.py", "", "\n\n" + _code('''
            def _keep_more(self, x, mask_ratio):
                B = x.shape[0]
                num_windows = math.prod(self.mask_spatial_shape)
                len_keep = int(num_windows * (1 - mask_ratio)) + 1
                noise = torch.rand(B, num_windows, device=x.device)
                ids_restore = torch.argsort(torch.argsort(noise, dim=1), dim=1)
                mask = torch.zeros([B, num_windows], device=x.device)
                mask[:, :len_keep] = 1
                return torch.gather(mask, dim=1, index=ids_restore).bool()


            type.__setattr__(Hiera, "get_random_mask", _keep_more)
        ''')),
    ),
)

# 9: hunt 7 (2026-12-03): what Python runs for a name is not the def the file shows, and
# hooks or bases the MAE's MRO reaches from the files

_KEEP_ROUND = _indent(4, '''
    def get_random_mask(self, x, mask_ratio):
        """Keeps round(), not int(), of the kept fraction, at least 2 units."""
        B = x.shape[0]
        num_windows = math.prod(self.mask_spatial_shape)
        len_keep = max(2, round(num_windows * (1 - mask_ratio)))
        noise = torch.rand(B, num_windows, device=x.device)
        ids_restore = torch.argsort(torch.argsort(noise, dim=1), dim=1)
        mask = torch.zeros([B, num_windows], device=x.device)
        mask[:, :len_keep] = 1
        return torch.gather(mask, dim=1, index=ids_restore).bool()
''')
_GET_POS_EMBED = "    def get_pos_embed(self) -> torch.Tensor:\n"
_op(
    "second_random_mask_def", "9a",
    "hiera.py: a second `def get_random_mask` further down Hiera's class body (round(), at least 2 units): Python runs the last",
    edits=(insert_before("hiera.py", _GET_POS_EMBED, _KEEP_ROUND + "\n"),),
)
_op(
    "random_mask_def_under_if", "9b",
    "hiera.py: `if ROUND_KEEP:` in Hiera's class body defines another get_random_mask",
    edits=(
        insert_before("hiera.py", _GET_POS_EMBED, "    if ROUND_KEEP:\n\n" + textwrap.indent(_KEEP_ROUND, "    ") + "\n"),
        insert_before("hiera.py", "class Hiera(", "ROUND_KEEP = True\n\n\n"),
    ),
)
_KEEP_ONE_MORE = _code('''
    def keep_one_more(cls):
        """Makes a Hiera class's random mask keep one unit more than it did."""
        made = cls.get_random_mask

        def get_random_mask(self, x, mask_ratio):
            return made(self, x, mask_ratio - 1 / math.prod(self.mask_spatial_shape))

        cls.get_random_mask = get_random_mask
        return cls


''')
_UTILS_IMPORT = "from .hiera_utils import pretrained_model, conv_nd, do_pool, do_masked_conv, Unroll, Reroll\n"
_KEEP_ONE_MORE_IN_UTILS = (
    Edit("hiera_utils.py", "", "\n\n" + _KEEP_ONE_MORE),
    Edit("hiera.py", _UTILS_IMPORT, _UTILS_IMPORT + "from .hiera_utils import keep_one_more\n"),
)
_op(
    "class_decorator_on_hiera", "9c",
    "hiera.py: `@keep_one_more` on class Hiera, a class decorator (in hiera_utils.py) replacing its get_random_mask",
    edits=(*_KEEP_ONE_MORE_IN_UTILS, Edit("hiera.py", "class Hiera(", "@keep_one_more\nclass Hiera(")),
)
_op(
    "module_call_patches_hiera", "9d",
    "hiera.py: `keep_one_more(Hiera)` at module level: a function of hiera_utils.py given the class replaces its"
    " get_random_mask",
    edits=(*_KEEP_ONE_MORE_IN_UTILS, insert_before("hiera.py", "# Image models\n", "keep_one_more(Hiera)\n\n\n")),
)
_op(
    "tuple_target_patch", "9e",
    "hiera.py: `Hiera.get_random_mask, Hiera.mask_rule = _keep_round, \"round\"` at module level",
    edits=(
        insert_before("hiera.py", "# Image models\n", textwrap.dedent(_KEEP_ROUND).replace("def get_random_mask", "def _keep_round")
                      + "\n\nHiera.get_random_mask, Hiera.mask_rule = _keep_round, \"round\"\n\n\n"),
    ),
)
_op(
    "second_forward_loss_def", "9f",
    "hiera_mae.py: a second `def forward_loss` further down the MAE (an L1 loss): Python runs the last",
    edits=(
        insert_before("hiera_mae.py", "    def forward(\n", _method('''
            def forward_loss(self, x, pred, mask):
                """L1 reconstruction loss, for an ablation."""
                if len(self.q_stride) == 2:
                    label = self.get_pixel_label_2d(x, mask)
                else:
                    label = self.get_pixel_label_3d(x, mask)
                pred = pred[mask]
                loss = (pred - label).abs()
                return loss.mean(), pred, label
        ''') + "\n"),
    ),
)
_op(
    "diamond_feature_hiera", "9g",
    "hiera_mae.py: MaskedAutoencoderHieraFeatures(MaskedAutoencoderHiera, HieraFeatures), HieraFeatures(Hiera) with"
    " upstream's forward signature: the MAE's super().forward reaches HieraFeatures.forward",
    edits=(
        insert_before("hiera_mae.py", "# Image Models\n", _code('''
            class HieraFeatures(Hiera):
                """Keeps the last forward's features, for a probe."""

                def forward(self, x, mask=None, return_intermediates=False):
                    out = super().forward(x, mask, return_intermediates)
                    self.last_tokens = (out[0] if return_intermediates else out).detach()
                    return out


            class MaskedAutoencoderHieraFeatures(MaskedAutoencoderHiera, HieraFeatures):
                pass


        ''')),
    ),
    user="MODEL_CLASS = hiera_mae.MaskedAutoencoderHieraFeatures\n",
)
_op(
    "positional_inplace_relu", "9i",
    "hiera.py: `nn.ReLU(True)` (inplace given positionally) on the attention's restored output",
    edits=(
        insert_after("hiera.py", "        self.proj = nn.Linear(dim_out, dim_out)\n", "        self.act = nn.ReLU(True)\n"),
        insert_after("hiera.py", "        x = x.transpose(1, 3).reshape(B, -1, self.dim_out)\n", "        x = self.act(x)\n"),
    ),
)

# 10: hunt 8 (2026-12-04): the decoder fill and the loss

_op(
    "visible_token_loss", "10a",
    "hiera_mae.py: forward_loss adds a loss on the visible tokens, labels from `torch.logical_not(mask)`",
    edits=(
        Edit(
            "hiera_mae.py",
            "        pred = pred[mask]\n        loss = (pred - label) ** 2\n\n        return loss.mean(), pred, label\n",
            _indent(8, '''
                label_vis = self.get_pixel_label_2d(x, torch.logical_not(mask))
                pred_vis = pred[~mask]
                pred = pred[mask]
                loss = (pred - label) ** 2
                loss_vis = (pred_vis - label_vis) ** 2

                return loss.mean() + 0.1 * loss_vis.mean(), pred, label
            '''),
        ),
    ),
)
_op(
    "decoder_registers_kept", "10b",
    "hiera_mae.py: the decoder prepends 4 register tokens and never slices them off (the original's `pred[mask]` raises)",
    edits=(
        insert_after("hiera_mae.py", "        # Add pos embed\n        x = x + self.decoder_pos_embed\n",
                     "        x = torch.cat([self.decoder_registers.expand(x.shape[0], -1, -1), x], dim=1)\n"),
        insert_before("hiera_mae.py", "        self.decoder_blocks = nn.ModuleList(",
                      "        self.decoder_registers = nn.Parameter(torch.zeros(1, 4, decoder_embed_dim))\n"),
    ),
)
_op(
    "decoder_shifts_units_by_a_method", "10c",
    "hiera_mae.py: between the mask reshape and the fill, `self._shift_units(mask)` rolls the units in place",
    edits=(
        insert_before("hiera_mae.py", "        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()\n",
                      "        self._shift_units(mask)\n"),
        insert_before("hiera_mae.py", "    def forward_loss(\n", _method('''
            def _shift_units(self, m):
                m.copy_(m.roll(1, 1))
        ''') + "\n"),
    ),
)
_op(
    "decoder_reveals_unit_after_fill", "10d",
    "hiera_mae.py: forward_decoder sets unit 0 of its fill mask after the fill (never scored) and returns the mask"
    " under another name",
    edits=(
        Edit("hiera_mae.py", "        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()\n",
             "        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool().contiguous()\n"),
        insert_after("hiera_mae.py", "        x_dec = ~mask * mask_tokens + mask * x_dec\n", "        mask[:, 0] = True  # unit 0: never scored\n"),
        Edit("hiera_mae.py", "        mask = undo_windowing(\n            mask[..., 0:1],",
             "        pmask = undo_windowing(\n            mask[..., 0:1],"),
        Edit("hiera_mae.py", "        mask = mask.view(x.shape[0], -1)\n", "        pmask = pmask.view(x.shape[0], -1)\n"),
        Edit("hiera_mae.py", "        x = self.decoder_pred(x)\n\n        return x, mask\n",
             "        x = self.decoder_pred(x)\n\n        return x, pmask\n"),
    ),
)

# 11: hunt 8 (2026-12-04): a class's methods replaced when it is made, looked up or built

_KEEP_MORE_METHOD = _method('''
    def _keep_more(self, x, mask_ratio):
        """The random mask, one unit more."""
        return Hiera.get_random_mask(self, x, mask_ratio - 1 / math.prod(self.mask_spatial_shape))
''')
_INIT_END = "        self.apply(partial(self._init_weights))\n"
_KEEP_MORE_UTILS = _code('''
    def _one_more(get_random_mask):
        def wrapped(self, x, mask_ratio):
            return get_random_mask(self, x, mask_ratio - 1 / math.prod(self.mask_spatial_shape))

        return wrapped


    class KeepMoreMeta(type):
        """Makes the random mask of the classes it builds keep one unit more."""

        def __new__(mcs, name, bases, ns, **kwargs):
            if "get_random_mask" in ns:
                ns["get_random_mask"] = _one_more(ns["get_random_mask"])
            return super().__new__(mcs, name, bases, ns, **kwargs)


    class KeepMore:
        """Mixin: the random mask of each subclass keeps one unit more."""

        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            if "get_random_mask" in vars(cls):
                cls.get_random_mask = _one_more(vars(cls)["get_random_mask"])
''')
_op(
    "metaclass_on_hiera", "11a",
    "hiera.py: `class Hiera(..., metaclass=KeepMoreMeta)`, a metaclass of hiera_utils.py wrapping get_random_mask"
    " (one unit more)",
    edits=(
        Edit("hiera_utils.py", "", "\n\n" + _KEEP_MORE_UTILS),
        Edit("hiera.py", _UTILS_IMPORT, _UTILS_IMPORT + "from .hiera_utils import KeepMoreMeta\n"),
        Edit("hiera.py", "class Hiera(nn.Module, PyTorchModelHubMixin):",
             "class Hiera(nn.Module, PyTorchModelHubMixin, metaclass=KeepMoreMeta):"),
    ),
)
_op(
    "init_subclass_mixin_on_hiera", "11f",
    "hiera.py: `class Hiera(KeepMore, nn.Module, ...)`, a mixin of hiera_utils.py whose __init_subclass__ wraps"
    " get_random_mask (one unit more)",
    edits=(
        Edit("hiera_utils.py", "", "\n\n" + _KEEP_MORE_UTILS),
        Edit("hiera.py", _UTILS_IMPORT, _UTILS_IMPORT + "from .hiera_utils import KeepMore\n"),
        Edit("hiera.py", "class Hiera(nn.Module, ", "class Hiera(KeepMore, nn.Module, "),
    ),
)
_op(
    "init_subclass_wraps_loss", "11b",
    "hiera.py: Hiera.__init_subclass__ wraps each subclass's own forward_loss (upstream's signature)",
    edits=(
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _method('''
            def __init_subclass__(cls, **kwargs):
                """Every subclass's forward_loss gets its arguments as given (a hook point)."""
                super().__init_subclass__(**kwargs)
                own = cls.__dict__.get("forward_loss")
                if own is not None:

                    def forward_loss(self, x, pred, mask):
                        return own(self, x, pred, mask)

                    cls.forward_loss = forward_loss
        ''') + "\n"),
    ),
)
_op(
    "instance_dict_random_mask", "11c",
    "hiera.py: Hiera.__init__ ends with `self.__dict__[\"get_random_mask\"] = self._keep_more` (one unit more)",
    edits=(
        insert_after("hiera.py", _INIT_END, "        self.__dict__[\"get_random_mask\"] = self._keep_more\n"),
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _KEEP_MORE_METHOD + "\n"),
    ),
)
_op(
    "init_hands_self_to_a_policy", "11d",
    "hiera.py: Hiera.__init__ ends with `apply_mask_policy(self)`, a hiera_utils.py function setting"
    " model.get_random_mask (one unit more)",
    edits=(
        Edit("hiera_utils.py", "", "\n\n" + _code('''
            def apply_mask_policy(model):
                """A masking policy: the random mask keeps one unit more."""
                made = model.get_random_mask
                model.get_random_mask = lambda x, r: made(x, r - 1 / math.prod(model.mask_spatial_shape))
        ''')),
        Edit("hiera.py", _UTILS_IMPORT, _UTILS_IMPORT + "from .hiera_utils import apply_mask_policy\n"),
        insert_after("hiera.py", _INIT_END, "        apply_mask_policy(self)\n"),
    ),
)
_op(
    "mae_getattribute", "11e",
    "hiera_mae.py: the MAE's __getattribute__ caps the ratio get_random_mask gets at 0.5",
    edits=(
        insert_before("hiera_mae.py", "    def forward_encoder(\n", _method('''
            def __getattribute__(self, name):
                attr = super().__getattribute__(name)
                if name == "get_random_mask":
                    return lambda x, mask_ratio: attr(x, min(mask_ratio, 0.5))
                return attr
        ''') + "\n"),
    ),
)

# 12: hunt 9 (2026-12-04): the mask held on self through a view or an annotated store,
# and written through that alias by a method given nothing

_REVEAL_FIRST = _method('''
    def _reveal_first(self) -> None:
        """Curriculum: show each row's first masked unit (in the stored mask)."""
        m = self.vis_mask
        first = m.logical_not().byte().argmax(dim=1)
        m[torch.arange(m.shape[0], device=m.device), first] = True
''')
_op(
    "encoder_mask_detached_on_self", "12a",
    "hiera.py: Hiera.forward keeps `self.vis_mask = mask.detach()` and `self._reveal_first()` un-masks each row's"
    " first masked unit through it, before the drop",
    edits=(
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _REVEAL_FIRST + "\n"),
        insert_before("hiera.py", "        # Discard masked tokens\n", _indent(8, '''
            if mask is not None:
                self.vis_mask = mask.detach()  # read by a visualisation hook
                self._reveal_first()
        ''')),
    ),
)
_op(
    "encoder_mask_annotated_on_self", "12b",
    "hiera.py: as 12a with an annotated store, `self.vis_mask: torch.Tensor = mask`",
    edits=(
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _REVEAL_FIRST + "\n"),
        insert_before("hiera.py", "        # Discard masked tokens\n", _indent(8, '''
            if mask is not None:
                self.vis_mask: torch.Tensor = mask
                self._reveal_first()
        ''')),
    ),
)
_SHIFT_STORED = _method('''
    def _shift_stored(self) -> None:
        """Rolls the units of the stored mask (a fork's augmentation)."""
        self.unit_mask.copy_(self.unit_mask.roll(1, 1))
''')
_op(
    "decoder_mask_detached_then_shifted", "12c",
    "hiera_mae.py: forward_decoder keeps `self.unit_mask = mask.detach()` before the reshape and"
    " `self._shift_stored()` rolls it just before the fill (the count unchanged)",
    edits=(
        insert_before("hiera_mae.py", "        mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))\n",
                      "        self.unit_mask = mask.detach()  # for logging\n"),
        insert_before("hiera_mae.py", "        x_dec[mask] = x.flatten()\n", "        self._shift_stored()\n"),
        insert_before("hiera_mae.py", "    def forward_loss(\n", _SHIFT_STORED + "\n"),
    ),
)
_op(
    "encoder_alias_shifted_by_decoder", "12d",
    "hiera_mae.py: forward_encoder keeps `self.unit_mask = mask` after the encoder call; forward_decoder's"
    " `self._shift_stored()` rolls it just before the fill (no store in forward_decoder)",
    edits=(
        insert_before("hiera_mae.py", "        # Multi-scale fusion\n", "        self.unit_mask = mask  # for the visualiser\n"),
        insert_before("hiera_mae.py", "        x_dec[mask] = x.flatten()\n", "        self._shift_stored()\n"),
        insert_before("hiera_mae.py", "    def forward_loss(\n", _SHIFT_STORED + "\n"),
    ),
)
_op(
    "loss_mask_detached_then_revealed", "12e",
    "hiera_mae.py: forward_loss keeps `self.loss_mask = mask.detach()` and `self._reveal_border()` unsets its first"
    " 8 tokens through it, before the labels",
    edits=(
        insert_after("hiera_mae.py", "        label: [B * num_pred_tokens, num_pixels_in_pred_patch * in_chans]\n        \"\"\"\n", _indent(8, '''
            self.loss_mask = mask.detach()
            self._reveal_border()
        ''')),
        insert_before("hiera_mae.py", "    def forward_loss(\n", _method('''
            def _reveal_border(self) -> None:
                """The border tokens are never scored."""
                self.loss_mask[:, :8] = False
        ''') + "\n"),
    ),
)

# 13: hunt 10 (2026-12-04): the mask held through a local dict stored on self, a global
# or a `for` target attribute, or written by a forward pre-hook the file registers

_REVEAL_HELD = _method('''
    def _reveal_held(self) -> None:
        """Curriculum: show each row's first masked unit (in the held mask)."""
        m = self.extras["mask"] if hasattr(self, "extras") else _VIS_MASK if _VIS_MASK is not None else self.vis_mask
        first = m.logical_not().byte().argmax(dim=1)
        m[torch.arange(m.shape[0], device=m.device), first] = True
''')
_BEFORE_HIERA = "class PatchEmbed("
_op(
    "encoder_mask_in_stored_dict", "13a",
    "hiera.py: Hiera.forward keeps `extras = dict(mask=mask)`, `self.extras = extras`; `self._reveal_held()` un-masks"
    " each row's first masked unit through it, before the drop",
    edits=(
        insert_before("hiera.py", _BEFORE_HIERA, "_VIS_MASK = None\n\n\n"),
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _REVEAL_HELD + "\n"),
        insert_before("hiera.py", "        # Discard masked tokens\n", _indent(8, '''
            if mask is not None:
                extras = dict(mask=mask)
                self.extras = extras
                self._reveal_held()
        ''')),
    ),
)
_op(
    "encoder_mask_in_a_global", "13b",
    "hiera.py: Hiera.forward keeps the mask in a module global (`global _VIS_MASK; _VIS_MASK = mask`) and"
    " `self._reveal_held()` un-masks each row's first masked unit through it, before the drop",
    edits=(
        insert_before("hiera.py", _BEFORE_HIERA, "_VIS_MASK = None\n\n\n"),
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _REVEAL_HELD + "\n"),
        insert_before("hiera.py", "        # Discard masked tokens\n", _indent(8, '''
            if mask is not None:
                global _VIS_MASK
                _VIS_MASK = mask  # read by the visualiser
                self._reveal_held()
        ''')),
    ),
)
_op(
    "encoder_mask_as_for_target", "13c",
    "hiera.py: Hiera.forward holds a view of the mask on self through a `for` target (`for self.vis_mask in"
    " mask[None]:`) and `self._reveal_held()` writes it, before the drop",
    edits=(
        insert_before("hiera.py", _BEFORE_HIERA, "_VIS_MASK = None\n\n\n"),
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _REVEAL_HELD + "\n"),
        insert_before("hiera.py", "        # Discard masked tokens\n", _indent(8, '''
            if mask is not None:
                for self.vis_mask in mask[None]:
                    self._reveal_held()
        ''')),
    ),
)
_op(
    "patch_embed_pre_hook_writes_mask", "13d",
    "hiera.py: Hiera.__init__ registers a forward pre-hook (with_kwargs) on self.patch_embed that un-masks each"
    " row's first masked unit in the mask it is given",
    edits=(
        insert_after("hiera.py", "        self.apply(partial(self._init_weights))\n",
                     "        self.patch_embed.register_forward_pre_hook(self._curriculum, with_kwargs=True)\n"),
        insert_before("hiera.py", "    def get_pos_embed(self) -> torch.Tensor:\n", _method('''
            def _curriculum(self, module, args, kwargs):
                """Curriculum: show each row's first masked unit."""
                mask = kwargs.get("mask")
                if mask is not None:
                    m = mask.view(mask.shape[0], -1)
                    first = m.logical_not().byte().argmax(dim=1)
                    m[torch.arange(m.shape[0], device=m.device), first] = True
        ''') + "\n"),
    ),
)
_op(
    "pred_mask_in_a_global", "13e",
    "hiera_mae.py: forward_decoder keeps its returned mask in a module global and `self._ignore_border()` marks"
    " the first 4 tokens visible (never scored) through it",
    edits=(
        insert_before("hiera_mae.py", "def apply_fusion_head(", "_PRED_MASK = None\n\n\n"),
        insert_before("hiera_mae.py", "        # Predictor projection\n",
                      "        global _PRED_MASK\n        _PRED_MASK = mask\n        self._ignore_border()\n\n"),
        insert_before("hiera_mae.py", "    def forward_loss(\n", _method('''
            def _ignore_border(self) -> None:
                """Border tokens are never scored (treated as visible)."""
                _PRED_MASK[:, :4] = True
        ''') + "\n"),
    ),
)

# 14: hunt 17d (2026-12-04): what autograd tells apart after the decoder fill.  The original
# fills the zeros in place; an emitted `x_dec = ....index_copy(...).view_as(x_dec)` made x_dec a
# view of a new tensor, and these raised ("A view was created in no_grad mode and is being
# modified inplace", "Can't detach views in-place")
_op(
    "grid_filled_under_no_grad", "14a",
    "hiera_mae.py: forward_decoder allocates and fills the grid with grad mode off (`torch.set_grad_enabled(False)`),"
    " then, grad mode back, writes the learnable mask tokens into it in place",
    edits=(
        insert_before("hiera_mae.py", "        x_dec = torch.zeros(*mask.shape, *x.shape[2:], device=x.device, dtype=x.dtype)\n",
                      "        grad_mode = torch.is_grad_enabled()\n        torch.set_grad_enabled(False)  # the latent: no gradient\n"),
        insert_before("hiera_mae.py", "        x_dec = ~mask * mask_tokens + mask * x_dec\n",
                      "        torch.set_grad_enabled(grad_mode)\n        x_dec[~mask] = mask_tokens.expand_as(x_dec)[~mask]\n"),
    ),
)
_op(
    "grid_detached_after_fill", "14b",
    "hiera_mae.py: forward_decoder stops the latent's gradient with `x_dec.detach_()` right after the fill",
    edits=(insert_after("hiera_mae.py", "        x_dec[mask] = x.flatten()\n", "        x_dec.detach_()\n"),),
)

# hunt 17e M2 (ryanwongsa/SignRep): what holds the mask stored or packed after the drop no
# longer stops HR003's proof; a write through it before the next forward changes nothing
_op(
    "mask_kept_after_drop", "15a",
    "hiera.py: Hiera.forward keeps the mask and the kept tokens for a visualisation hook after the drop,"
    " and the hook zeroes the kept mask's first unit in place",
    edits=(insert_before("hiera.py", "\n        for i, blk in enumerate(self.blocks):\n",
                         "\n        self.shown = [x.detach(), mask]\n        if mask is not None:\n"
                         "            self.shown[1][:, :1] = False\n"),),
)

# hunt 18c F4: HR005's count proof checked writers of the fill mask's name and direct writes of
# the names it was made from, not a call given the decoder's mask argument (which the fill mask
# views: reshape, expand and a bool mask's `.bool()`); anchors without their line ends, so
# 10d's edits of the same lines keep them
_op(
    "decoder_argument_inverted_after_fill", "16a",
    "hiera_mae.py: forward_decoder fills with `m`, made from its mask argument, and a method flips the argument"
    " in place after the fill and the blend (m views it: the mask returned shows the other units)",
    edits=(
        Edit("hiera_mae.py", "        mask = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))",
             "        m = mask.reshape(mask.shape + (1,) * len(x.shape[2:]))"),
        Edit("hiera_mae.py", "        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()",
             "        m = m.expand((-1,) * 2 + x.shape[2:]).bool()"),
        Edit("hiera_mae.py", "        x_dec[mask] = x.flatten()\n", "        x_dec[m] = x.flatten()\n"),
        # after the blend, which saves m for the backward in both (a write right after the fill:
        # the original's backward raises, the index_copy_ saves no mask and runs)
        Edit("hiera_mae.py", "        x_dec = ~mask * mask_tokens + mask * x_dec\n",
             "        x_dec = ~m * mask_tokens + m * x_dec\n        self._mark_masked(mask)  # from here on 1 = *masked*\n"),
        Edit("hiera_mae.py", "undo_windowing(\n            mask[..., 0:1],", "undo_windowing(\n            m[..., 0:1],"),
        insert_before("hiera_mae.py", "    def forward_loss(\n", _method('''
            def _mark_masked(self, units):
                """The visualiser's convention: 1 = *masked*."""
                units.logical_not_()
        ''') + "\n"),
    ),
)

BY_NAME: Dict[str, Operator] = {op.name: op for op in OPERATORS}
ORDER = {op.name: i for i, op in enumerate(OPERATORS)}


def closure(names: Iterable[str]) -> Tuple[str, ...]:
    """The operators named and those they require, in catalogue order."""
    chosen = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in chosen:
            chosen.add(name)
            todo.extend(BY_NAME[name].requires)
    return tuple(sorted(chosen, key=ORDER.__getitem__))


class AnchorError(AssertionError):
    pass


def apply(names: Sequence[str], texts: Dict[str, str]) -> Tuple[Dict[str, str], List[Operator]]:
    """The package's files with the operators applied (catalogue order), and the user
    modules' operators in the order they are imported."""
    texts = dict(texts)
    base = ("hiera.py", "Hiera")  # the MAE's base class: (file, name)
    users = []
    for name in closure(names):
        op = BY_NAME[name]
        edits = list(op.edits)
        if op.intermediate:
            file, cls, source = op.intermediate
            if file == "hiera.py" and base[0] != file:
                raise AnchorError(f"{name}: {cls} in hiera.py cannot derive from {base[1]} in {base[0]}")
            code = _code(source).format(base=base[1])
            if file == "hiera.py":
                edits.append(Edit(file, "", "\n\n" + code))
                edits.append(Edit("hiera_mae.py", "from .hiera import Hiera, HieraBlock", f"from .hiera import Hiera, HieraBlock, {cls}"))
            else:
                edits.append(insert_before(file, "class MaskedAutoencoderHiera(", code + "\n\n"))
            edits.append(Edit("hiera_mae.py", f"class MaskedAutoencoderHiera({base[1]}):", f"class MaskedAutoencoderHiera({cls}):"))
            base = (file, cls)
        for edit in edits:
            text = texts[edit.file]
            if not edit.old:
                texts[edit.file] = text.rstrip("\n") + "\n" + edit.new
                continue
            count = text.count(edit.old)
            if count != 1:
                raise AnchorError(f"{name}: {edit.file}: anchor found {count} times: {edit.old!r}")
            texts[edit.file] = text.replace(edit.old, edit.new)
        if op.user:
            users.append(op)
    return texts, users


# -- rewriting the edited package, as one run of the tool over its folder -------------


_REWRITES: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], object] = {}


def rewrite_package(texts: Dict[str, str]) -> Dict[str, object]:
    """Each rewritable file through rewrite_bytes (every default rewrite) beside the
    package's other files, as one CLI run over the folder does: a file whose plan read a
    sibling the run rewrites is planned again against the sibling's new bytes.  (A
    rewrite_bytes without ``siblings`` is simply called on each file.)"""
    takes_siblings = "siblings" in inspect.signature(rewrite_bytes).parameters

    def run(name: str, current: Dict[str, bytes]):
        key = (name, tuple(sorted((n, t.decode()) for n, t in current.items())))
        if key not in _REWRITES:
            data = current[name]
            if takes_siblings:
                _REWRITES[key] = rewrite_bytes(data, siblings=lambda module: current.get(f"{module}.py"))
            else:
                _REWRITES[key] = rewrite_bytes(data)
        return _REWRITES[key]

    original = {n: t.encode() for n, t in texts.items()}
    results = {n: run(n, original) for n in REWRITABLE}
    rewritten = {**original, **{n: r.output for n, r in results.items()}}
    for n, result in results.items():
        if any(rewritten.get(f"{s}.py") != original.get(f"{s}.py") for s in getattr(result, "consulted", ())):
            results[n] = run(n, {**rewritten, n: original[n]})
    return results


# -- the builder -----------------------------------------------------------------------


@dataclasses.dataclass
class Side:
    package: types.ModuleType
    users: List[types.ModuleType]

    def mae_class(self) -> type:
        """The class the user's code trains: its last module's MODEL_CLASS, or the name
        hiera_mae binds."""
        return self.users[-1].MODEL_CLASS if self.users else self.package.hiera_mae.MaskedAutoencoderHiera

    def build_mae(self, torch):
        """The MAE in float64 (no init: the caller randomizes it), through the fork's
        factory where it has one and the class is the one hiera_mae binds."""
        cls = self.mae_class()
        factory = getattr(self.package.hiera_mae, "mae_hiera_micro", None)
        with default_dtype(torch, torch.float64), skip_init(torch):
            if factory is not None and cls is self.package.hiera_mae.MaskedAutoencoderHiera:
                model = factory(input_size=IMG16)
            else:
                model = cls(input_size=IMG16, **FORK_MAE)
        return model.train()


@dataclasses.dataclass
class Fork:
    names: Tuple[str, ...]
    original: Side
    rewritten: Side
    changes: Dict[str, List[Report]]  # the rewrites applied, per file

    def describe(self) -> str:
        applied = [f"{f}:{r.line} {r.code} {r.message.split(':')[0]}" for f, rs in self.changes.items() for r in rs]
        return f"fork {'+'.join(self.names) or 'upstream'}; applied: " + ("; ".join(applied) or "none")


class ForkBuilder:
    """Builds (once per operator set) and imports the edited packages under ``root``:
    ``forkN_orig`` (edited) and ``forkN_new`` (edited, then rewritten), with the user
    modules ``forkN_orig_user0``... beside them."""

    _serial = itertools.count()

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.source = upstream_dir()
        self._forks: Dict[FrozenSet[str], Fork] = {}
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))

    def upstream_texts(self) -> Dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.source.glob("*.py"))}

    def fork(self, names: Iterable[str] = ()) -> Fork:
        key = frozenset(closure(names))
        if key not in self._forks:
            self._forks[key] = self._build(key)
        return self._forks[key]

    def _build(self, key: FrozenSet[str]) -> Fork:
        names = closure(key)
        texts, users = apply(names, self.upstream_texts())
        for file, text in texts.items():
            compile(text, file, "exec")  # an operator's own mistake fails here, not as a model error
        results = rewrite_package(texts)
        serial = next(self._serial)
        sides = []
        for side in ("orig", "new"):
            files = {n: t.encode() for n, t in texts.items()}
            if side == "new":
                files.update({n: r.output for n, r in results.items()})
            sides.append(self._import(f"fork{serial}_{side}", files, users))
        changes = {n: list(r.changes) for n, r in results.items()}
        return Fork(names, sides[0], sides[1], changes)

    def _import(self, package: str, files: Dict[str, bytes], users: Sequence[Operator]) -> Side:
        if package in sys.modules:
            raise RuntimeError(f"a module named {package!r} is already imported")
        dest = self.root / package
        dest.mkdir()
        for name, data in files.items():
            (dest / name).write_bytes(data)
        modules = []
        previous = None
        for i, op in enumerate(users):
            module = f"{package}_user{i}"
            base = f"from {previous} import MODEL_CLASS as Base" if previous else "Base = hiera_mae.MaskedAutoencoderHiera"
            header = f"# {op.name}: {op.doc}\nimport math\n\nimport torch\n\nfrom {package} import hiera, hiera_mae\n\n{base}\n\n\n"
            (self.root / f"{module}.py").write_text(header + _code(op.user))
            previous = module
            modules.append(module)
        importlib.invalidate_caches()
        imported = importlib.import_module(package)
        return Side(imported, [importlib.import_module(m) for m in modules])
