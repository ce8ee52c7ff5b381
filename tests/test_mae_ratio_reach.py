"""The MAE passing get_random_mask's ratio to Hiera.forward's drop, where hiera.py's proof
does not see what the MAE's side changes (hunt 18b, 18d).  Each case made the rewritten
step raise in kept_tokens' check where the original ran (under torch.compile, which drops
the check, other tokens were kept); each now keeps the original call, with the reason:

- 18d F1: two sites counting with `random_mask_ratio` in one function (two masked views,
  each drawn with its own ratio): the later binding was the one both counts read;
- 18d F2 / 18b F5: hiera.py rewritten by an earlier run, its get_random_mask edited since
  (`round` for `int`): the count it emitted is stale;
- 18b F13: the submodule given the mask built by a constructor the proof cannot name
  (`(KeepCentre if c else PatchEmbed)(...)`) was taken to write nothing;
- 18b F14, F9, F3: the MAE sets `self.patch_embed`, registers a forward pre-hook, or
  replaces a method Hiera.forward calls: hiera.py's proof knew its own file only;
- 18b F1: a module imported by name at run time (`importlib.import_module`) was not read.
The controls (upstream, the same layouts without the change) keep the fast path."""

from pathlib import Path

import pytest

from hiera_rewrite.engine import rewrite_bytes
from tests.test_module_reach import DROP, ENCODER_CALL, SUBCLASS, _init, _loss_count, _package, _reports, _site, _upstream
from tests.upstream import read_upstream_module, upstream_dir

INIT_END = "        self.initialize_weights()\n"
FORWARD_ENCODER = "    def forward_encoder(\n"
TWO_VIEWS = '''    def forward_two_views(self, x, ratio_a: float, ratio_b: float, mask_a=None, mask_b=None):
        """Two masked views of one batch (context and target), each drawn with its own ratio."""
        if mask_a is None:
            mask_a = self.get_random_mask(x, ratio_a)
        if mask_b is None:
            mask_b = self.get_random_mask(x, ratio_b)
        _, views_a = super().forward(x, mask_a, return_intermediates=True)
        _, views_b = super().forward(x, mask_b, return_intermediates=True)
        return views_a[-1], views_b[-1]

'''


def _mae(*edits) -> str:
    text = _upstream("hiera_mae.py")
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _rewritten_hiera() -> str:
    return rewrite_bytes((upstream_dir() / "hiera.py").read_bytes(), siblings=read_upstream_module).output.decode()


def _ratio_reports(text: str, siblings=None):
    if siblings is None:
        hiera = _rewritten_hiera()

        def siblings(name):
            return hiera.encode() if name == "hiera" else read_upstream_module(name)

    return [r for r in rewrite_bytes(text.encode(), siblings=siblings).reports if r.code == "HR003"]


def test_two_views_drawn_with_their_own_ratios_keep_their_encoder_calls():
    reports = _ratio_reports(_mae((FORWARD_ENCODER, TWO_VIEWS + FORWARD_ENCODER)))
    text = _mae((FORWARD_ENCODER, TWO_VIEWS + FORWARD_ENCODER))
    lines = [i + 1 for i, l in enumerate(text.splitlines()) if "_, views_" in l]
    views = [r for r in reports if r.line in lines]
    assert len(views) == 2 and not any(r.applied for r in views), views
    assert all("another site counting with random_mask_ratio" in r.message for r in views), views
    assert any(r.applied for r in reports if r.line not in lines)  # forward_encoder's own call


def test_two_masks_drawn_and_dropped_in_one_hiera_method_keep_their_drops():
    method = '''    def forward_two_views(self, x, context_ratio: float, target_ratio: float):
        context_mask = self.get_random_mask(x, context_ratio)
        target_mask = self.get_random_mask(x, target_ratio)
        x = self.unroll(self.patch_embed(x) + self.get_pos_embed())
        ctx = x[context_mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        tgt = x[target_mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return ctx, tgt

'''
    text = (upstream_dir() / "hiera.py").read_text()
    anchor = "    def get_pos_embed(self) -> torch.Tensor:\n"
    assert text.count(anchor) == 1
    text = text.replace(anchor, method + anchor)
    lines = [i + 1 for i, l in enumerate(text.splitlines()) if "_mask[..., None].tile" in l]
    drops = [r for r in _ratio_reports(text, read_upstream_module) if r.line in lines]
    assert len(drops) == 2 and not any(r.applied for r in drops), drops
    assert all("another site counting with random_mask_ratio" in r.message for r in drops), drops


@pytest.mark.parametrize("edited", [False, True], ids=["unchanged", "round-since"])
def test_a_forward_rewritten_by_an_earlier_run_is_passed_the_ratio_only_while_its_count_is_current(edited):
    hiera = _rewritten_hiera()
    old = "len_keep = int(num_windows * (1 - mask_ratio))"
    assert hiera.count(old) == 1 and "random_mask_ratio" in hiera
    if edited:
        hiera = hiera.replace(old, "len_keep = round(num_windows * (1 - mask_ratio))")

    def siblings(name):
        return hiera.encode() if name == "hiera" else read_upstream_module(name)

    text = _upstream("hiera_mae.py")
    line = next(i + 1 for i, l in enumerate(text.splitlines()) if ENCODER_CALL in l)
    ratio = next(r for r in _ratio_reports(text, siblings) if r.line == line)
    assert ratio.applied != edited, ratio
    if edited:
        assert "is not the kept count of get_random_mask as it is now" in ratio.message, ratio


@pytest.mark.parametrize("built", ["PatchEmbed", "KeepCentrePatchEmbed", "layers.PatchEmbed"])
def test_a_submodule_given_the_mask_is_followed_through_each_class_it_may_be(tmp_path: Path, capsys, built):
    """`(A if c else B)(...)` follows both classes; a class named through a module
    (`layers.PatchEmbed`) is not followed: the drop is kept."""
    text = _upstream("hiera.py")
    old = "        self.patch_embed = PatchEmbed(\n"
    anchor = "\n\nclass Hiera(nn.Module, PyTorchModelHubMixin):\n"
    assert text.count(old) == 1 and text.count(anchor) == 1
    text = text.replace(old, f"        self.patch_embed = ({built} if keep_centre else PatchEmbed)(\n")
    text = text.replace("        sep_pos_embed: bool = False,\n", "        sep_pos_embed: bool = False,\n        keep_centre: bool = False,\n", 1)
    text = text.replace(anchor, KEEP_CENTRE + anchor)
    if built.startswith("layers."):
        text = text.replace("\nimport torch\n", "\nimport torch\n\nfrom . import hiera_utils as layers\n", 1)
    pkg = _package(tmp_path, {"hiera.py": text})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    assert drop["applied"] == (built == "PatchEmbed"), drop
    if built == "KeepCentrePatchEmbed":
        assert "KeepCentre" in drop["message"] or "super().forward(x, mask)" in drop["message"], drop
    elif built != "PatchEmbed":
        assert "self.patch_embed(" in drop["message"], drop


KEEP_CENTRE = '''

class KeepCentrePatchEmbed(PatchEmbed):
    """Always shows the centre unit."""

    def forward(self, x, mask=None):
        if mask is not None:
            flat = mask.view(mask.shape[0], -1)
            flat[:, flat.shape[1] // 2] = True
        return super().forward(x, mask)
'''
SHOW_CENTRE = '''

def _show_centre(module, args, kwargs):
    flat = kwargs["mask"].view(kwargs["mask"].shape[0], -1)
    flat[:, flat.shape[1] // 2] = True
'''


@pytest.mark.parametrize("case", ["none", "torch_norm", "patch_embed", "pre_hook", "method_patch"])
def test_what_the_mae_changes_in_hieras_forward_stops_the_ratio(tmp_path: Path, capsys, case):
    mae = _upstream("hiera_mae.py")
    anchor = "\n\nclass MaskedAutoencoderHiera(Hiera):\n"
    assert mae.count(anchor) == 1 and mae.count(INIT_END) == 1
    if case == "patch_embed":
        mae = mae.replace("from .hiera import ", "from .hiera import PatchEmbed\nfrom .hiera import ", 1)
        mae = mae.replace(anchor, KEEP_CENTRE + anchor).replace(
            INIT_END, INIT_END.replace("self.initialize_weights()", "old = self.patch_embed.proj\n        self.patch_embed = "
                                       "KeepCentrePatchEmbed(old.in_channels, old.out_channels, old.kernel_size, old.stride, "
                                       "old.padding)\n        self.initialize_weights()"))
    elif case == "torch_norm":  # (ryanwongsa/SignRep: torch's module, out of contract as any package's)
        mae = mae.replace(INIT_END, INIT_END.replace("self.initialize_weights()", "self.norm = nn.Identity()\n        self.initialize_weights()"))
    elif case == "pre_hook":
        mae = mae.replace(anchor, SHOW_CENTRE + anchor).replace(
            INIT_END, INIT_END + "        self.patch_embed.register_forward_pre_hook(_show_centre, with_kwargs=True)\n")
    elif case == "method_patch":
        # (a method Hiera.forward calls, patched from the MAE's file: hiera.py's proof followed its def)
        mae += "\n\ndef _fixed_pos_embed(self):\n    return self.pos_embed\n\n\nHiera.get_pos_embed = _fixed_pos_embed\n"
    pkg = _package(tmp_path, {"hiera_mae.py": mae})
    reports = _reports(pkg, capsys)
    ratio = _site(reports, pkg, "hiera_mae.py", "HR003", ENCODER_CALL)
    assert ratio["applied"] == (case in ("none", "torch_norm")), ratio
    # the MAE's proof says why, or hiera.py's drop, whose proof now sees the MAE's self
    # (hunt 19c: `self.patch_embed(...)` for any subclass), keeps its drop and says why
    drop = _site(reports, pkg, "hiera.py", "HR003", DROP)
    expected = {
        "patch_embed": ["MaskedAutoencoderHiera binds `patch_embed`", "self.patch_embed("],
        "pre_hook": ["registers a forward hook or pre-hook", "self.patch_embed("],
        "method_patch": ["`Hiera.get_pos_embed = ...`"],
    }.get(case, [])
    assert not expected or any(e in ratio["message"] or not drop["applied"] and e in drop["message"] for e in expected), (ratio, drop)


def test_a_module_imported_by_name_at_run_time_stops_the_proofs(tmp_path: Path, capsys):
    loop = 'import importlib as _importlib\nfor _plugin in ("masking",):\n    _importlib.import_module(f".{_plugin}", __name__)'
    pkg = _package(tmp_path, {"__init__.py": _init(loop), "masking.py": "import torch\n"})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    assert not drop["applied"] and "imports a module by name at run time" in drop["message"], drop


def test_an_instance_attribute_set_by_a_subclass_of_an_aliased_base_stops_hr005(tmp_path: Path, capsys):
    """hunt 18b F4: hunt 17b F1's subclass, its base imported under another name."""
    sub = SUBCLASS.format(store="self.forward_loss = self.l1_loss")
    old = "from .hiera_mae import MaskedAutoencoderHiera\n\n\nclass MaskedAutoencoderHieraL1(MaskedAutoencoderHiera):"
    assert sub.count(old) == 1
    sub = sub.replace(old, "from .hiera_mae import MaskedAutoencoderHiera as MAE\n\n\nclass MaskedAutoencoderHieraL1(MAE):")
    pkg = _package(tmp_path, {"video_mae.py": sub, "__init__.py": _init("from .video_mae import MaskedAutoencoderHieraL1")})
    loss = _loss_count(_reports(pkg, capsys), pkg)
    assert loss is not None and "may replace MaskedAutoencoderHiera.forward_loss" in loss, loss


MIXINS = '''LOGGED = ("forward_loss",)


class LossLogging:
    """Wraps each logged method of a subclass to record its calls."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in LOGGED:
            method = getattr(cls, name, None)
            if method is not None:
                def logged(self, *args, _method=method):
                    return _method(self, *args)
                setattr(cls, name, logged)
'''


@pytest.mark.parametrize("base", ["mixins.LossLogging", "nn.Module"])
def test_a_base_named_through_a_module_of_the_files_is_read_or_stops_hr005(tmp_path: Path, capsys, base):
    """hunt 18b F10: a mixin base written `mixins.LossLogging` was skipped (only bare names
    were followed), and its `__init_subclass__` wraps forward_loss; torch's `nn.Module`
    named so is not the files' and is not read."""
    old = "class MaskedAutoencoderHiera(Hiera):"
    mae = _upstream("hiera_mae.py")
    assert mae.count(old) == 1
    mae = mae.replace(old, f"class MaskedAutoencoderHiera(Hiera, {base}):").replace("from .hiera import ", "from . import mixins\nfrom .hiera import ", 1)
    pkg = _package(tmp_path, {"hiera_mae.py": mae, "mixins.py": MIXINS})
    loss = _loss_count(_reports(pkg, capsys), pkg)
    if base == "nn.Module":
        assert loss is None, loss
    else:
        assert loss is not None and "the base `mixins.LossLogging` of MaskedAutoencoderHiera is not read" in loss, loss
