"""The mask rewrites are exact for what forks and users really do (float64, every output
and every parameter gradient, original vs rewritten upstream):

- subclasses in the user's own module overriding get_random_mask (another count),
  forward_decoder, forward_loss, get_pixel_label_2d, forward_encoder (upstream's signatures);
- masks a caller builds -- ragged, uniform, all-True, all-False -- through forward_loss,
  get_pixel_label_2d/3d, the encoder token drop and the decoder fill;
- forks of get_random_mask with another count, one whose count cannot be read, a
  module binding ``inspect`` itself, a loss fed a batch-flattened 1-D mask.
"""

from __future__ import annotations

import importlib
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import pytest

torch = pytest.importorskip("torch")

from hiera_rewrite.engine import rewrite_bytes  # noqa: E402
from hiera_rewrite.files import sibling_reader  # noqa: E402
from tests.fork_subclasses import subclasses  # noqa: E402
from tests.parity_tools import (  # noqa: E402
    REL_TOL,
    assert_parity_shared,
    default_dtype,
    randomize_,
    share_weights,
    skip_init,
)

MICRO = dict(embed_dim=32, num_heads=2, stages=(1, 2, 3, 1), decoder_depth=1, decoder_embed_dim=64, decoder_num_heads=2)
IMG16 = (128, 128)  # 16 mask units of 8x8 tokens


def _mae(pkg, cls=None, **kwargs):
    cls = cls or pkg.MaskedAutoencoderHiera
    with default_dtype(torch, torch.float64), skip_init(torch):
        model = cls(input_size=IMG16, **{**MICRO, **kwargs})
    return model.train()


def _pair(pkg_a, pkg_b, cls_a=None, cls_b=None, **kwargs):
    a = _mae(pkg_a, cls_a, **kwargs)
    randomize_(a, torch, seed=0)
    b = _mae(pkg_b, cls_b, **kwargs)
    share_weights(a, b)
    return a, b


def _image(batch: int = 2):
    gen = torch.Generator().manual_seed(3)
    return torch.randn(batch, 3, *IMG16, generator=gen, dtype=torch.float64)


# -- subclasses in the user's code ---------------------------------------------------

OVERRIDES = sorted(subclasses(object))


@pytest.mark.parametrize("name", OVERRIDES)
def test_user_subclass_override_is_exact(hiera_orig, hiera_new, name):
    cls_a = subclasses(hiera_orig.MaskedAutoencoderHiera)[name]
    cls_b = subclasses(hiera_new.MaskedAutoencoderHiera)[name]
    model_a, model_b = _pair(hiera_orig, hiera_new, cls_a, cls_b)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)


def test_rounded_count_subclass_runs_the_boolean_path(hiera_new):
    """The override's mask keeps another count: the rewritten model must not use the
    count of the file's get_random_mask for it (it would select 9 of 16, not 8)."""
    cls = subclasses(hiera_new.MaskedAutoencoderHiera)["RoundedKeep"]
    model = _mae(hiera_new, cls)
    randomize_(model, torch, seed=0)
    torch.manual_seed(1)
    loss, pred, label, mask = model(_image(), mask_ratio=0.6)
    kept = int(mask[0].sum())
    assert kept == round(16 * 0.4) + 1
    per_unit = math.prod(model.mask_unit_spatial_shape_final)  # prediction tokens per unit
    assert pred.shape[0] == 2 * (16 - kept) * per_unit


# -- masks a caller builds ---------------------------------------------------------


def _masks(rows: int, units: int) -> Dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    ragged = torch.zeros(rows, units, dtype=torch.bool)
    ragged[0, torch.randperm(units, generator=gen)[:3]] = True
    ragged[1, torch.randperm(units, generator=gen)[:7]] = True
    uniform = torch.zeros(rows, units, dtype=torch.bool)
    for r in range(rows):
        uniform[r, torch.randperm(units, generator=gen)[:5]] = True
    return {
        "ragged": ragged,
        "uniform": uniform,
        "all_true": torch.ones(rows, units, dtype=torch.bool),
        "all_false": torch.zeros(rows, units, dtype=torch.bool),
    }


@pytest.mark.parametrize("kind", ["ragged", "uniform", "all_true", "all_false"])
def test_forward_loss_with_a_caller_mask(hiera_orig, hiera_new, kind):
    model_a, model_b = _pair(hiera_orig, hiera_new)
    tokens = math.prod(model_a.tokens_spatial_shape_final)  # prediction tokens
    mask = _masks(2, tokens)[kind]
    gen = torch.Generator().manual_seed(5)
    pred = torch.randn(2, tokens, model_a.pred_stride**2 * 3, generator=gen, dtype=torch.float64)

    def call(model, x, pred):
        return model.forward_loss(x, pred, mask)

    if kind == "all_false":  # nothing selected: the mean of nothing is NaN on both sides
        a, b = call(model_a, _image(), pred), call(model_b, _image(), pred)
        assert a[0].isnan() and b[0].isnan()
        assert a[1].shape == b[1].shape == a[2].shape == b[2].shape == (0, pred.shape[-1])
        return
    assert_parity_shared(model_a, model_b, call, (_image(), pred), torch, REL_TOL)


@pytest.mark.parametrize("kind", ["ragged", "uniform", "all_true", "all_false"])
def test_pixel_labels_with_a_caller_mask(hiera_orig, hiera_new, kind):
    model_a, model_b = _pair(hiera_orig, hiera_new)
    mask = _masks(2, math.prod(model_a.tokens_spatial_shape_final))[kind]
    x = _image()
    a = model_a.get_pixel_label_2d(x, mask)
    b = model_b.get_pixel_label_2d(x, mask)
    assert a.shape == b.shape and torch.equal(a, b)
    video = torch.randn(2, 3, 4, 64, 64, dtype=torch.float64)  # 2 frames of 2x2 tokens (stride 32)
    mask3 = _masks(2, 2 * 2 * 2)[kind]
    model_a.patch_stride, model_b.patch_stride = (2, 2, 2), (2, 2, 2)
    a = model_a.get_pixel_label_3d(video, mask3)
    b = model_b.get_pixel_label_3d(video, mask3)
    assert a.shape == b.shape and torch.equal(a, b)


def test_encoder_and_decoder_with_a_ragged_caller_mask(hiera_orig, hiera_new):
    """Rows keeping 3 and 5 of 16 units: the original's `.view(B, -1, C)` still works
    (8 units over 2 rows) and mixes rows; the rewrite must give exactly that."""
    model_a, model_b = _pair(hiera_orig, hiera_new)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[0, [1, 4, 9]] = True
    mask[1, [0, 2, 3, 7, 15]] = True
    assert_parity_shared(
        model_a, model_b, lambda m, x: m(x, mask_ratio=0.6, mask=mask), (_image(),), torch, REL_TOL
    )
    gen = torch.Generator().manual_seed(2)
    latent = torch.randn(2, 4, 1, 1, model_a.encoder_norm.normalized_shape[0], generator=gen, dtype=torch.float64)
    assert_parity_shared(model_a, model_b, lambda m, z: m.forward_decoder(z, mask), (latent,), torch, REL_TOL)


@pytest.mark.parametrize("kind", ["uniform", "all_true"])
def test_classifier_token_drop_with_a_caller_mask(hiera_orig, hiera_new, kind):
    mask = _masks(2, 16)[kind]
    with default_dtype(torch, torch.float64), skip_init(torch):
        a = hiera_orig.Hiera(input_size=IMG16, num_classes=5, embed_dim=32, num_heads=2, stages=(1, 2, 3, 1))
        b = hiera_new.Hiera(input_size=IMG16, num_classes=5, embed_dim=32, num_heads=2, stages=(1, 2, 3, 1))
    randomize_(a, torch, seed=0)
    share_weights(a, b)
    call = lambda m, x: m(x, mask=mask, return_intermediates=True)  # noqa: E731
    assert_parity_shared(a, b, call, (_image(),), torch, REL_TOL)


# -- forks of the files ----------------------------------------------------------------


def _fork(tmp_path: Path, tag: str, edits: Dict[str, Sequence[Tuple[str, str]]]):
    """Copies of the installed package with ``edits`` (exact text replacements) made,
    one original and one rewritten, imported as fork_<tag>_orig / fork_<tag>_new.
    Returns (original package, rewritten package, reports per rewritten file)."""
    from tests.upstream import upstream_dir

    source = upstream_dir()
    reports: Dict[str, List] = {}
    packages = []
    for side in ("orig", "new"):
        name = f"fork_{tag}_{side}"
        dest = tmp_path / name
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
        for file, replacements in edits.items():
            text = (dest / file).read_text()
            for old, new in replacements:
                assert old in text, f"{file}: {old!r} not found"
                text = text.replace(old, new)
            (dest / file).write_text(text)
        if side == "new":
            for file in ("hiera.py", "hiera_mae.py", "hiera_utils.py"):  # hiera.py first: hiera_mae.py reads it
                result = rewrite_bytes((dest / file).read_bytes(), siblings=sibling_reader(dest / file))
                (dest / file).write_bytes(result.output)
                reports[file] = result.reports
        sys.path.insert(0, str(tmp_path))
        try:
            importlib.invalidate_caches()
            packages.append(importlib.import_module(name))
        finally:
            sys.path.remove(str(tmp_path))
    return packages[0], packages[1], reports


ROUNDED_KEEP = ("len_keep = int(num_windows * (1 - mask_ratio))", "len_keep = round(num_windows * (1 - mask_ratio))")


def test_fork_get_random_mask_with_another_count(tmp_path):
    """A fork's hiera.py keeps round(...) units: the count the MAE uses is read from it."""
    orig, new, reports = _fork(tmp_path, "rounded", {"hiera.py": [ROUNDED_KEEP]})
    assert any(r.applied and r.code == "HR003" for r in reports["hiera.py"])
    assert any(r.applied and "get_random_mask's ratio" in r.message for r in reports["hiera_mae.py"])
    text = (tmp_path / "fork_rounded_new" / "hiera.py").read_text()
    assert "num_kept = round(mask.shape[1] * (1 - random_mask_ratio))" in text
    assert ROUNDED_KEEP[1] in text  # get_random_mask itself is untouched
    for ratio in (0.5, 0.55, 0.6, 0.9):  # 0.55 and 0.6: round and int differ on 16 units
        model_a, model_b = _pair(orig, new)
        assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=ratio), (_image(),), torch, REL_TOL)
    model = _mae(new)
    torch.manual_seed(0)
    _, pred, _, mask = model(_image(), mask_ratio=0.55)
    assert int(mask[0].sum()) == round(16 * 0.45)


def test_fork_get_random_mask_not_provable_falls_back(tmp_path):
    """A get_random_mask whose count cannot be read (randperm) gets no count; the MAE
    then selects with the mask, exactly, and the refusal names the construct."""
    edit = (
        "        noise = torch.rand(B, num_windows, device=x.device)\n",
        "        noise = torch.rand(B, num_windows, device=x.device)\n"
        "        noise = noise + torch.randperm(num_windows, device=x.device)[None] * 0.0\n",
    )
    orig, new, reports = _fork(tmp_path, "noproof", {"hiera.py": [edit]})
    (skip,) = [r for r in reports["hiera.py"] if not r.applied and r.code == "HR003"]
    assert "get_random_mask is not read" in skip.message and "noise is bound twice" in skip.message
    assert "kept_tokens" not in (tmp_path / "fork_noproof_new" / "hiera.py").read_text()  # the drop stays
    model_a, model_b = _pair(orig, new)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)


def test_fork_binding_inspect_itself(tmp_path):
    """hiera_mae.py with its own `inspect` helper: the rewrite needs no `inspect`,
    passes the count, and the file's helper stays its own; the file still imports and
    matches."""
    edit = ("def apply_fusion_head(", "def inspect(x):\n    return x\n\n\ndef apply_fusion_head(")
    orig, new, reports = _fork(tmp_path, "inspect", {"hiera_mae.py": [edit]})
    applied = [r.message for r in reports["hiera_mae.py"] if r.applied]
    assert any("MAE encoder: pass get_random_mask's ratio" in m for m in applied), applied
    assert new.hiera_mae.inspect(3) == 3
    model_a, model_b = _pair(orig, new)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)


def test_fork_loss_with_a_batch_flattened_mask(tmp_path):
    """A fork's decoder returns (B*N, F) predictions and a 1-D (B*N,) mask, and its
    labels are flattened the same way: the loss selects rows with a 1-D mask."""
    edits = {
        "hiera_mae.py": [
            ("        x = self.decoder_pred(x)\n\n        return x, mask", "        x = self.decoder_pred(x)\n\n        return x.flatten(0, 1), mask.flatten()"),
            (
                "        label = label.flatten(1, 2).flatten(2)\n        label = label[mask]",
                "        label = label.flatten(1, 2).flatten(2).flatten(0, 1)\n        label = label[mask]",
            ),
        ]
    }
    orig, new, reports = _fork(tmp_path, "flat", edits)
    model_a, model_b = _pair(orig, new)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)


@pytest.mark.parametrize("name", ["getattr", "type", "all", "hasattr", "super", "masked_rows", "true_rows", "runs_own", "kept_tokens", "takes_kept_count", "not_overridden"])
def test_inserted_code_never_calls_a_builtin_the_file_rebinds(name):
    """The emitted code calls getattr, type and all (HR005's own-method check,
    not_overridden), type (HR003's `type(self).get_random_mask is __class__...`) and its
    helpers masked_rows, true_rows and kept_tokens; hasattr, super, runs_own and
    takes_kept_count were called by an earlier emission: a file binding one of them gets
    no code calling it."""
    merged = (Path(__file__).resolve().parent.parent / "golden" / "mask" / "mae_merged.in.py").read_text()
    source = merged.replace("\nclass ", f"\ndef {name}(*args):\n    raise AssertionError\n\n\nclass ", 1)
    result = rewrite_bytes(source.encode())
    out = result.output.decode()
    calls = lambda text: len(re.findall(rf"(?<![\w.]){name}\(", text))  # noqa: E731
    assert calls(out) == calls(source), [r.message for r in result.reports]
    assert result.changed  # the rest is still rewritten
    compile(out, "merged", "exec")


def test_encoder_forward_writing_its_mask_in_place(tmp_path):
    """A fork's Hiera.forward always keeps the first unit, writing into the mask it is
    given: the token drop is refused, and the MAE, whose latent then holds another
    count than get_random_mask's, passes no count to its decoder and loss (before: the
    decoder's scatter failed, or with the token drop rewritten the loss was wrong)."""
    edit = ("        # Discard masked tokens\n", "        # Discard masked tokens\n        if mask is not None:\n            mask[:, 0] = True\n")
    orig, new, reports = _fork(tmp_path, "keepfirst", {"hiera.py": [edit]})
    (skip,) = [r for r in reports["hiera.py"] if not r.applied and r.code == "HR003"]
    assert "mask is written in place by `mask[:, 0] = True`" in skip.message
    model_a, model_b = _pair(orig, new)
    torch.manual_seed(1)
    assert int(model_b(_image(1), mask_ratio=0.6)[3].sum()) == 7  # the first unit was dropped: one more kept
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(1),), torch, REL_TOL)


# One-line fork edits of upstream's hiera_mae.py that made the counts wrong (found by a
# mutation harness: each gave a wrong loss, 1e-3..1e-2 relative): (file, old, new, the
# refusal's words).
_ENC = "        _, intermediates = super().forward(x, mask, return_intermediates=True)\n"
FORK_EDITS = {
    "encoder_keeps_first_unit": (
        "            mask = self.get_random_mask(x, mask_ratio)  # [B, #MUs_all]\n",
        "            mask = self.get_random_mask(x, mask_ratio)  # [B, #MUs_all]\n            mask[:, 0] = True\n",
        "`mask[:, 0] = True` at line 192 uses mask",
    ),
    "encoder_logical_or_": (
        _ENC,
        "        mask.logical_or_(torch.arange(mask.shape[1], device=mask.device) == 0)\n" + _ENC,
        "`mask.logical_or_(torch.arange(mask.shape[1], device=mask.device) == 0)` at line 194 uses mask",
    ),
    "decoder_scores_every_token": (
        "        mask = mask.view(x.shape[0], -1)\n",
        "        mask = torch.zeros_like(mask.view(x.shape[0], -1))\n",
        "the mask forward_decoder returns is not its fill mask",
    ),
    "loss_drops_tokens_in_place": (
        "        if len(self.q_stride) == 2:\n            label = self.get_pixel_label_2d(x, mask)\n",
        "        mask[:, :3] = False\n        if len(self.q_stride) == 2:\n            label = self.get_pixel_label_2d(x, mask)\n",
        "mask is written in place by `mask[:, :3] = False`",
    ),
    # The labels method writes the mask forward_loss passes it: forward_loss's own
    # `pred[mask]` then selects another count (before: a size mismatch).
    "labels_score_first_token": (
        "        label = label.flatten(1, 2).flatten(2)\n        label = label[mask]\n",
        "        label = label.flatten(1, 2).flatten(2)\n        mask[:, 0] = True\n        label = label[mask]\n",
        "mask is written in place by `mask[:, 0] = True` at line 156 in get_pixel_label_2d, called by"
        " `self.get_pixel_label_2d(x, mask)` at line 267",
    ),
    "labels_logical_or_": (
        "        label = label.flatten(1, 2).flatten(2)\n        label = label[mask]\n",
        "        label = label.flatten(1, 2).flatten(2)\n"
        "        mask.logical_or_(torch.arange(mask.shape[1], device=mask.device) < 2)\n        label = label[mask]\n",
        "mask is written in place by `mask.logical_or_(",
    ),
    "loss_passes_mask_to_an_in_place_function": (
        "        if len(self.q_stride) == 2:\n            label = self.get_pixel_label_2d(x, mask)\n",
        "        torch.Tensor.logical_or_(mask, torch.arange(mask.shape[1], device=mask.device) < 2)\n"
        "        if len(self.q_stride) == 2:\n            label = self.get_pixel_label_2d(x, mask)\n",
        "mask is written in place by `torch.Tensor.logical_or_(mask, torch.arange(mask.shape[1], device=mask.device) < 2)`"
        " at line 265",
    ),
}


@pytest.mark.parametrize("name", sorted(FORK_EDITS))
def test_fork_edit_changing_the_count_is_refused_and_exact(tmp_path, name):
    old, new, words = FORK_EDITS[name]
    orig, new_pkg, reports = _fork(tmp_path, name, {"hiera_mae.py": [(old, new)]})
    skips = [r.message for r in reports["hiera_mae.py"] if not r.applied]
    assert any(words in m for m in skips), skips
    model_a, model_b = _pair(orig, new_pkg)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)


# The same writes spelled as calls: the dunder a statement runs (`mask[:, 0] = True` is
# `mask.__setitem__(...)`, `mask += m` is `mask.__iadd__(m)`) and the operator module's
# functions.  Each is a write into the mask where it sits: (file, line after which or,
# with a leading "+", before which the call goes, its indent).
WRITE_CALLS = {
    "dunder_setitem": "mask.__setitem__((slice(None), 0), True)",
    "dunder_iadd": "mask.__iadd__(torch.arange(mask.shape[1], device=mask.device) < 3)",
    "operator_setitem": "operator.setitem(mask, (slice(None), 0), True)",
    "operator_iadd": "operator.iadd(mask, torch.arange(mask.shape[1], device=mask.device) == 0)",
}
WRITE_SITES = {
    "mae_encoder": ("hiera_mae.py", "            mask = self.get_random_mask(x, mask_ratio)  # [B, #MUs_all]\n", "            "),
    "mae_loss": ("hiera_mae.py", "+        if len(self.q_stride) == 2:\n            label = self.get_pixel_label_2d(x, mask)\n", "        "),
    "hiera_forward": ("hiera.py", "        # Discard masked tokens\n", "        if mask is not None:\n            "),
}
# One site each for the (slower) numerical check; every pair is checked for the refusal.
WRITE_CALL_PARITY = {
    "dunder_setitem": "mae_encoder",
    "dunder_iadd": "mae_loss",
    "operator_setitem": "hiera_forward",
    "operator_iadd": "mae_encoder",
}


def _write_call_edits(form: str, site: str) -> Dict[str, List[Tuple[str, str]]]:
    file, anchor, indent = WRITE_SITES[site]
    call = f"{indent}{WRITE_CALLS[form]}\n"
    edit = (anchor[1:], call + anchor[1:]) if anchor.startswith("+") else (anchor, anchor + call)
    return {file: [("import math\n", "import math\nimport operator\n"), edit]}


@pytest.mark.parametrize("site", sorted(WRITE_SITES))
@pytest.mark.parametrize("form", sorted(WRITE_CALLS))
def test_a_write_spelled_as_a_call_is_refused(form, site):
    """Before: none of these was seen where the mask's count is proven (the operator
    functions only in forward_loss, as a call that may write), and the rewrite kept
    the static count of a mask the call had changed."""
    from tests.upstream import upstream_dir

    ((file, replacements),) = _write_call_edits(form, site).items()
    text = (upstream_dir() / file).read_text()
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    skips = [r.message for r in rewrite_bytes(text.encode()).reports if not r.applied]
    # the encoder proves the mask untouched from get_random_mask to the call: any statement using it stops it
    words = f"`{WRITE_CALLS[form]}` at line" if site == "mae_encoder" else f"mask is written in place by `{WRITE_CALLS[form]}`"
    assert any(words in m for m in skips), skips


@pytest.mark.parametrize("form", sorted(WRITE_CALL_PARITY))
def test_a_write_spelled_as_a_call_is_exact(tmp_path, form):
    orig, new_pkg, _ = _fork(tmp_path, f"call_{form}", _write_call_edits(form, WRITE_CALL_PARITY[form]))
    model_a, model_b = _pair(orig, new_pkg)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.6), (_image(),), torch, REL_TOL)


def _mixin(pkg):
    """`class M(MaskedAutoencoderHiera, MyHiera)`: the user's Hiera subclass, whose
    forward keeps upstream's signature, comes after the MAE in M's MRO."""

    class MyHiera(pkg.hiera.Hiera):
        def forward(self, x, mask=None, return_intermediates=False):
            return super().forward(x, mask, return_intermediates=return_intermediates)

    class Mixed(pkg.MaskedAutoencoderHiera, MyHiera):
        pass

    return Mixed


def test_mro_mixin_with_a_user_hiera_forward(hiera_orig, hiera_new):
    """Out of contract (README, "What the rewrite assumes"): a class in another module
    that puts a Hiera subclass overriding forward between the MAE and Hiera.  It fails
    loudly, naming the argument and the forward that does not take it."""
    model_a, model_b = _pair(hiera_orig, hiera_new, _mixin(hiera_orig), _mixin(hiera_new))
    model_a(_image(), mask_ratio=0.6)
    with pytest.raises(TypeError, match=r"MyHiera.forward\(\) got an unexpected keyword argument 'random_mask_ratio'"):
        model_b(_image(), mask_ratio=0.6)


def _ragged_encoder(old):
    def forward_encoder(self, x, mask_ratio, mask=None):
        if mask is None:
            mask = self.get_random_mask(x, mask_ratio)
            mask[0, mask[0].logical_not().nonzero()[0, 0]] = True  # row 0 keeps one more
            mask[1, mask[1].nonzero()[0, 0]] = False  # row 1 one less
        return old(self, x, mask_ratio, mask=mask)

    return forward_encoder


def test_encoder_assigned_to_the_class_making_a_ragged_mask(hiera_orig, hiera_new, monkeypatch):
    """`MaskedAutoencoderHiera.forward_encoder = f` (upstream's signature), f making a mask
    whose rows keep different counts with get_random_mask's total: forward passes the
    decoder and the loss no count (before: `type(self).m is Cls.m` held for the function
    set on the class, the decoder scattered get_random_mask's count: loss 1.8e-2 off)."""
    for pkg in (hiera_orig, hiera_new):
        cls = pkg.hiera_mae.MaskedAutoencoderHiera
        monkeypatch.setattr(cls, "forward_encoder", _ragged_encoder(cls.forward_encoder))
    model_a, model_b = _pair(hiera_orig, hiera_new)
    assert_parity_shared(model_a, model_b, lambda m, x: m(x, mask_ratio=0.75), (_image(),), torch, REL_TOL)
