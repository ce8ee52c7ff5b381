"""Hunt 21 (a white-box audit of 262969b).  Each case made the rewritten MAE raise in
`masked_rows`' or `kept_tokens`' count check where the original ran (validation, under
`no_grad`; compiled, where the check is dropped, other rows were selected):

- 21a: forward_decoder, after its fill, runs code writing the unit mask through a holder
  the count's proof did not look for: a module global (`global _VIS_MASK`), a dict on
  `self`, an attribute a subclass's forward_encoder or a caller of forward set
  (`self.vis_mask = mask; self(x, mask=mask)`).  The count is read from shapes, so it
  holds only while the fill's True entries stay; now what forward_decoder runs after its
  fill must be proven to write no tensor but its locals (a method is not followed).
- 21b F1: a hook method Hiera.forward hands the mask to, overridden by a subclass the
  walk did not recognise (two levels down, `BaseMAE = hiera_mae.MaskedAutoencoderHiera`,
  `Base = A if c else B`): a self method given the mask is now followed only where the
  emitted code checks at run time that it runs the one read (the loss's label methods);
  any other keeps the original statement, overridden or not.
- 21b F2: a factory in hiera_mae.py swapping `model.patch_embed` for a stem writing the
  mask: another module's store of the submodule's attribute stops the proof.

Hunt 22 (a white-box audit of the above): forward_decoder's proof accepted a submodule
without reading its forward (a module keeping the mask), a bound method or a list of them
stored on `self` as if modules, a property read, a base's helper resolving its own hook on
the base instead of the MAE, a tuple binding of a "new" tensor, a hook a helper registers;
the submodule follow missed `add_module`, a mixin's store, a class's own `__call__`; a label
method called with `mask if c else m2` was followed though the emitted check guards only
the calls given the mask itself.

The controls keep the fast path."""

from pathlib import Path

import pytest

from tests.test_module_reach import DROP, ENCODER_CALL, _loss_count, _package, _reports, _site, _upstream

FILL = "        x_dec[mask] = x.flatten()\n"
ENCODER = "        # Get multi-scale representations from encoder\n"
MAE_HEAD = "class MaskedAutoencoderHiera(Hiera):\n"
DECODER = "    def forward_decoder(\n"
FLIP_IF_KEPT = "        if self.vis_mask is not None:\n            self.vis_mask.logical_not_()  # the callback draws 1 = masked\n"
STEP = '''    def step_with_vis(self, x: torch.Tensor, mask_ratio: float = 0.6):
        mask = self.get_random_mask(x, mask_ratio)
        self.vis_mask = mask  # for the visualisation callback
        return self(x, mask_ratio, mask=mask)

'''
VIS_SUBCLASS = '''

class MAEWithVis(MaskedAutoencoderHiera):
    def forward_encoder(self, x, mask_ratio, mask=None):
        latent, mask = super().forward_encoder(x, mask_ratio, mask=mask)
        self.vis_mask = mask
        return latent, mask
'''


def _edit(text: str, *pairs) -> str:
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new, 1)
    return text


def _mae(*pairs) -> str:
    return _edit(_upstream("hiera_mae.py"), *pairs)


AFTER_THE_FILL = {
    "a module helper flipping a global": (
        _mae(
            (MAE_HEAD, "_VIS_MASK = None\n\n\ndef _flip_vis():\n    if _VIS_MASK is not None:\n        _VIS_MASK.logical_not_()\n\n\n" + MAE_HEAD),
            (ENCODER, "        global _VIS_MASK\n        _VIS_MASK = mask\n" + ENCODER),
            (FILL, FILL + "        _flip_vis()\n"),
        ),
        "`_VIS_MASK` is a global of the files",
    ),
    "a method flipping a dict on self": (
        _mae(
            (ENCODER, "        extras = dict(mask=mask, mask_ratio=mask_ratio)\n        self.extras = extras\n" + ENCODER),
            (FILL, FILL + "        self._flip_extras()\n"),
            (DECODER, '    def _flip_extras(self):\n        self.extras["mask"].logical_not_()\n\n' + DECODER),
        ),
        '`self.extras` is used as a value',  # read in _flip_extras
    ),
    "a subclass's forward_encoder keeping it": (
        _mae((FILL, FILL + FLIP_IF_KEPT)) + VIS_SUBCLASS,
        "`self.vis_mask` is used as a value",
    ),
    "a caller of forward keeping it": (
        _mae((DECODER, STEP + DECODER), (FILL, FILL + FLIP_IF_KEPT)),
        "`self.vis_mask` is used as a value",
    ),
    "a local name for the holder": (
        _mae((DECODER, STEP + DECODER), (FILL, FILL + "        held = self.vis_mask\n        held[:, 0] = False\n")),
        "`self.vis_mask` is used as a value",
    ),
    "a block's name bound to a method": (
        _mae(
            (DECODER, STEP + "    def _flip_vis(self):\n        self.vis_mask.logical_not_()\n\n" + DECODER),
            (FILL, FILL + "        blk = self._flip_vis\n        blk()\n"),
        ),
        "`self._flip_vis` reads a method or property of the class",
    ),
    "the fill under an if": (
        _mae((FILL, "        if x.numel():\n    " + FILL)),
        "is not one statement of its body",
    ),
}


@pytest.mark.parametrize("case", sorted(AFTER_THE_FILL))
def test_what_the_decoder_runs_after_its_fill_must_write_no_tensor_for_the_count(tmp_path: Path, capsys, case):
    mae, reason = AFTER_THE_FILL[case]
    pkg = _package(tmp_path, {"hiera_mae.py": mae})
    count = _loss_count(_reports(pkg, capsys), pkg)
    assert count is not None and reason in count, count


@pytest.mark.parametrize("after", [
    "",
    "        print(mask.float().mean())\n",
    "        x_dec = x_dec * 1.0\n        if self.training:\n            x_dec = x_dec + 0.0\n",
])
def test_reading_after_the_fill_keeps_the_count(tmp_path: Path, capsys, after):
    pkg = _package(tmp_path, {"hiera_mae.py": _mae((FILL, FILL + after))})
    assert _loss_count(_reports(pkg, capsys), pkg) is None


HOOK = '''    def prepare_mask(self, mask: torch.Tensor) -> None:
        """Hook: adjust the unit mask in place before tokens are dropped (default: nothing)."""
        return None

'''
POS_EMBED = "    def get_pos_embed(self) -> torch.Tensor:\n"
HOOK_CALL = "        # Discard masked tokens\n        if mask is not None:\n"
KEEP_CENTRE = "\n    def prepare_mask(self, mask: torch.Tensor) -> None:\n        mask[:, mask.shape[1] // 2] = True\n"
FAR_SUBCLASSES = {
    "two levels down": {
        "my_mae.py": "from .hiera_mae import MaskedAutoencoderHiera\n\n\nclass MyMAE(MaskedAutoencoderHiera):\n    pass\n",
        "keep_centre.py": "import torch\n\nfrom .my_mae import MyMAE\n\n\nclass KeepCentre(MyMAE):" + KEEP_CENTRE,
    },
    "a module attribute as the base": {
        "keep_centre.py": "import torch\n\nfrom . import hiera_mae\n\nBaseMAE = hiera_mae.MaskedAutoencoderHiera\n\n\n"
                          "class KeepCentre(BaseMAE):" + KEEP_CENTRE,
    },
    "a conditional base": {
        "keep_centre.py": "import torch\n\nfrom .hiera import Hiera\nfrom .hiera_mae import MaskedAutoencoderHiera\n\nPRETRAIN = True\n"
                          "Base = MaskedAutoencoderHiera if PRETRAIN else Hiera\n\n\nclass KeepCentre(Base):" + KEEP_CENTRE,
    },
    "none": {},
}


@pytest.mark.parametrize("subclass", sorted(FAR_SUBCLASSES))
def test_a_hook_method_given_the_mask_keeps_the_drop_whoever_overrides_it(tmp_path: Path, capsys, subclass):
    hiera = _edit(_upstream("hiera.py"), (POS_EMBED, HOOK + POS_EMBED), (HOOK_CALL, HOOK_CALL + "            self.prepare_mask(mask)\n"))
    pkg = _package(tmp_path, {"hiera.py": hiera, **FAR_SUBCLASSES[subclass]})
    reports = _reports(pkg, capsys)
    drop, ratio = _site(reports, pkg, "hiera.py", "HR003", DROP), _site(reports, pkg, "hiera_mae.py", "HR003", ENCODER_CALL)
    assert not drop["applied"] and not ratio["applied"], (drop, ratio)
    assert "`self.prepare_mask` is a method: a subclass anywhere may override it" in drop["message"], drop


FACTORY = '''

class KeepCornerPatchEmbed(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, mask=None):
        if mask is not None:
            mask[:, :, 0, 0] = True  # always show the corner unit
        return self.inner(x, mask=mask)


def mae_hiera_keepcorner(**kwargs):
    model = mae_hiera_tiny_224(**kwargs)
    model.patch_embed = KeepCornerPatchEmbed(model.patch_embed)
    return model
'''


@pytest.mark.parametrize("store", [True, False], ids=["stored", "control"])
def test_another_module_storing_the_submodule_keeps_the_drop(tmp_path: Path, capsys, store):
    mae = _upstream("hiera_mae.py") + (FACTORY if store else FACTORY.replace("    model.patch_embed = KeepCornerPatchEmbed(model.patch_embed)\n", ""))
    pkg = _package(tmp_path, {"hiera_mae.py": mae})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    assert drop["applied"] == (not store), drop
    if store:
        assert "`model.patch_embed = ...` may replace self.patch_embed" in drop["message"], drop


SINUSOID = '''    @staticmethod
    def _sinusoid(T: int, dim: int) -> torch.Tensor:
        pe = torch.zeros(1, T, dim)
        pe[0, :, 0::2] = torch.sin(torch.arange(T).unsqueeze(1) * math.exp(-1.0))
        return pe

'''


@pytest.mark.parametrize("fresh", [True, False], ids=["new tensor", "a name bound twice"])
def test_a_method_run_after_the_fill_that_writes_only_new_tensors_is_checked_at_run_time(tmp_path: Path, capsys, fresh):
    """A fork's own method after the fill (BehaveMAE_Arena's `_get_sinusoidal_embed`): read,
    then named in the emitted check, so that an override anywhere gets the original call.
    Its write into `pe` is a write into a new tensor only where nothing else binds `pe`."""
    method = SINUSOID if fresh else SINUSOID.replace("        return pe\n", "        pe = pe.flatten()\n        return pe\n")
    mae = _mae((DECODER, method + DECODER), (FILL, FILL + "        x_dec = x_dec + self._sinusoid(1, x_dec.shape[-1]).sum()\n"))
    pkg = _package(tmp_path, {"hiera_mae.py": mae})
    count = _loss_count(_reports(pkg, capsys), pkg)
    if not fresh:
        assert count is not None and "`pe[0, :, 0::2] = torch.sin" in count, count  # pe is not only a new tensor
        return
    assert count is None, count
    from hiera_rewrite import cli

    cli.main(["-q", str(pkg / "hiera_mae.py")])
    checked = " ".join((pkg / "hiera_mae.py").read_text().split())
    assert 'not_overridden( self, __class__, "forward_decoder", "_sinusoid", "forward_loss" )' in checked, checked



MASK_VIS = """class MaskVis(nn.Module):
    def __init__(self):
        super().__init__()
        self.mask = None

    def keep(self, mask):
        self.mask = mask

    def forward(self, x):
        if self.mask is not None:
            self.mask.logical_not_()
        return x


"""
ENC_END = "        x = self.encoder_norm(x)\n\n        return x, mask\n"
TAP = """    def on_feature(self, name: str, x: torch.Tensor) -> None:
        return None

    def tap(self, name: str, x: torch.Tensor) -> torch.Tensor:
        self.on_feature(name, x)
        return x

"""
ON_FEATURE = """    def on_feature(self, name: str, x: torch.Tensor) -> None:
        if self.vis_mask is not None:
            self.vis_mask.logical_not_()

"""
CANVAS = """    def _vis_canvas(self, x: torch.Tensor) -> torch.Tensor:
        canvas = torch.zeros(x.shape[0], 4, dtype=torch.bool)
        if self.vis_state is not None:
            canvas, _ = self.vis_state
        canvas[:, 0] = ~canvas[:, 0]
        return canvas

"""
HUNT_22 = {
    "a submodule keeping the mask": (
        {"hiera_mae.py": _mae(
            (MAE_HEAD, MASK_VIS + MAE_HEAD),
            ("        self.decoder_embed = nn.Linear(", "        self.vis = MaskVis()\n        self.decoder_embed = nn.Linear("),
            (ENC_END, ENC_END.replace("\n\n", "\n        self.vis.keep(mask)\n\n")),
            (FILL, FILL + "        x_dec = self.vis(x_dec)\n"),
        )},
        "`self.mask.logical_not_()` may write a tensor it is not given (in MaskVis's forward)",
    ),
    "a bound method stored as a module": (
        {"hiera_mae.py": _mae(
            ("        self.decoder_embed = nn.Linear(", "        self.post_fill = self._flip\n        self.decoder_embed = nn.Linear("),
            (DECODER, STEP + "    def _flip(self, x):\n        self.vis_mask.logical_not_()\n        return x\n\n" + DECODER),
            (FILL, FILL + "        x_dec = self.post_fill(x_dec)\n"),
        )},
        "`self.post_fill` is not a module built here",
    ),
    "a list of hooks looped like blocks": (
        {"hiera_mae.py": _mae(
            ("        self.decoder_embed = nn.Linear(", "        self.post_fill_hooks = [self._flip]\n        self.decoder_embed = nn.Linear("),
            (DECODER, STEP + "    def _flip(self, x):\n        self.vis_mask.logical_not_()\n        return x\n\n" + DECODER),
            (FILL, FILL + "        for hook in self.post_fill_hooks:\n            x_dec = hook(x_dec)\n"),
        )},
        "`self.post_fill_hooks` is iterated",
    ),
    "a property": (
        {"hiera_mae.py": _mae(
            (DECODER, STEP + "    @property\n    def vis_masked(self):\n        return self.vis_mask.logical_not_()\n\n" + DECODER),
            (FILL, FILL + "        vis = self.vis_masked\n"),
        )},
        "`self.vis_masked` reads a method or property of the class",
    ),
    "a base's helper calling a hook the MAE overrides": (
        {"hiera.py": _edit(_upstream("hiera.py"), (POS_EMBED, TAP + POS_EMBED)),
         "hiera_mae.py": _mae((DECODER, STEP + ON_FEATURE + DECODER), (FILL, FILL + '        x_dec = self.tap("grid", x_dec)\n'))},
        "`self.vis_mask` is used as a value",
    ),
    "a tuple binding of a new tensor": (
        {"hiera_mae.py": _mae(
            (DECODER, STEP.replace("self.vis_mask = mask", "self.vis_state = (mask, mask_ratio)") + CANVAS + DECODER),
            (FILL, FILL + "        vis = self._vis_canvas(x_dec)\n"),
        )},
        "`self.vis_state` is used as a value",
    ),
    "a hook registered by a helper of hiera_utils": (
        {"hiera_utils.py": _upstream("hiera_utils.py") + "\n\ndef attach(module, hook):\n    return module.register_forward_hook(hook)\n",
         "hiera_mae.py": _mae(
             ("from .hiera_utils import ", "from .hiera_utils import attach, "),
             ("        self.initialize_weights()\n", "        self.initialize_weights()\n        attach(self.decoder_norm, lambda m, i, o: None)\n"),
         )},
        "registers a forward hook or pre-hook",
    ),
    "a property read by getattr between the decoder and the loss": (
        {"hiera_mae.py": _mae(
            (DECODER, STEP + "    @property\n    def vis_masked(self):\n        return self.vis_mask.logical_not_()\n\n" + DECODER),
            ("        # Toggle mask, to generate labels for *masked* tokens\n",
             '        vis = getattr(self, "vis_masked", None)\n        # Toggle mask, to generate labels for *masked* tokens\n'),
        )},
        'getattr(self, "vis_masked", None)',
    ),
}


@pytest.mark.parametrize("case", sorted(HUNT_22))
def test_what_forward_decoder_runs_after_its_fill_is_read_through(tmp_path: Path, capsys, case):
    files, reason = HUNT_22[case]
    pkg = _package(tmp_path, files)
    count = _loss_count(_reports(pkg, capsys), pkg)
    assert count is not None and reason in count, count


STEM = """

class KeepCornerPatchEmbed(PatchEmbed):
    def __call__(self, x, mask=None):
        if mask is not None:
            mask[:, :, 0, 0] = True
        return super().__call__(x, mask=mask)
"""
EMBED_STORE = "        self.patch_embed = PatchEmbed(\n"


@pytest.mark.parametrize("how", ["add_module", "_modules", "own __call__"])
def test_a_submodule_set_by_name_or_calling_itself_keeps_the_drop(tmp_path: Path, capsys, how):
    hiera = _upstream("hiera.py")
    if how == "add_module":
        hiera = _edit(hiera, ("        # Setup roll and reroll modules\n", '        self.add_module("patch_embed", PatchEmbed(in_chans, embed_dim, patch_kernel, patch_stride, patch_padding))\n        # Setup roll and reroll modules\n'))
    elif how == "_modules":
        hiera = _edit(hiera, ("        # Setup roll and reroll modules\n", '        self._modules["patch_embed"] = PatchEmbed(in_chans, embed_dim, patch_kernel, patch_stride, patch_padding)\n        # Setup roll and reroll modules\n'))
    else:
        hiera = _edit(hiera, (EMBED_STORE, "        self.patch_embed = KeepCornerPatchEmbed(\n")) + STEM
    pkg = _package(tmp_path, {"hiera.py": hiera})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    assert not drop["applied"] and "self.patch_embed(" in drop["message"], drop


def test_a_label_call_given_another_mask_expression_is_not_followed(tmp_path: Path, capsys):
    """Hunt 22b F6: `self.get_pixel_label_2d(x, mask if c else m)` runs before `pred[mask]`
    but is not under the emitted check (which guards the calls given the mask itself)."""
    label = "        if len(self.q_stride) == 2:\n            label = self.get_pixel_label_2d(x, mask)\n"
    mae = _mae((label, "        vis_mask = mask if self.training else mask.clone()\n        raw = self.get_pixel_label_2d(x, vis_mask, norm=False)\n" + label))
    pkg = _package(tmp_path, {"hiera_mae.py": mae})
    line = next(i for i, t in enumerate(mae.splitlines(), 1) if t.strip() == "pred = pred[mask]")
    (loss,) = [r for r in _reports(pkg, capsys)["hiera_mae.py"] if r["code"] == "HR005" and r["line"] == line]
    assert not loss["applied"] and "self.get_pixel_label_2d(x, vis_mask, norm=False)" in loss["message"], loss


# Hunt 22b and 22a, read then and built now: a stem class's metaclass or attribute hook,
# a patch of the stem's forward or `__call__` in the files; the decoder's Linear set by
# `__setattr__` or its forward patched.  Each may run other code than the
# forward the count's proof read (a stem writing the mask, an embedding pooling units).
WRITER = '''

def _keep_corner(self, x, mask=None):
    if mask is not None:
        mask[:, :, 0, 0] = True
    return nn.Module.__call__(self, x, mask=mask)
'''
STEM_CHANGES = {
    "metaclass": (
        "\n\nclass StemRegistry(type):\n    pass\n\n\nclass RegisteredPatchEmbed(PatchEmbed, metaclass=StemRegistry):\n    pass\n",
        "RegisteredPatchEmbed",
    ),
    "__getattribute__": (
        "\n\nclass TracedPatchEmbed(PatchEmbed):\n    def __getattribute__(self, name):\n"
        "        return super().__getattribute__(name)\n",
        "TracedPatchEmbed",
    ),
    "__call__ patched": (WRITER + "\n\nPatchEmbed.__call__ = _keep_corner\n", "PatchEmbed"),
    "forward patched": (WRITER.replace("nn.Module.__call__", "_forward") + "\n\n_forward = PatchEmbed.forward\nPatchEmbed.forward = _keep_corner\n", "PatchEmbed"),
    "control": ("\n\nclass PlainPatchEmbed(PatchEmbed):\n    pass\n", "PlainPatchEmbed"),
}


@pytest.mark.parametrize("change", sorted(STEM_CHANGES))
def test_a_stem_whose_call_may_run_other_code_keeps_the_drop(tmp_path: Path, capsys, change):
    added, stem = STEM_CHANGES[change]
    hiera = _edit(_upstream("hiera.py"), (EMBED_STORE, f"        self.patch_embed = {stem}(\n")) + added
    pkg = _package(tmp_path, {"hiera.py": hiera})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    if change == "control":
        assert drop["applied"], drop
    else:
        assert not drop["applied"] and "self.patch_embed(" in drop["message"], drop


EMBED = "        self.decoder_embed = nn.Linear(encoder_dim_out, decoder_embed_dim)\n"
EMBED_CHANGES = {
    "super().__setattr__": (
        EMBED,
        EMBED + '        if pool_decoder_units:\n            super().__setattr__("decoder_embed", nn.Sequential(self.decoder_embed, UnitPool()))\n',
    ),
    "forward patched on the instance": (
        EMBED,
        EMBED + "        if pool_decoder_units:\n            self.decoder_embed.forward = UnitPool().forward\n",
    ),
    "Linear.forward patched": (
        MAE_HEAD,
        "def _traced_linear(layer, x):\n    return torch.nn.functional.linear(x, layer.weight, layer.bias).mean(dim=-2, keepdim=True)\n\n\n"
        "nn.Linear.forward = _traced_linear\n\n\n" + MAE_HEAD,
    ),
    "control": (EMBED, EMBED + "        self.pool_decoder_units = pool_decoder_units\n"),
}


@pytest.mark.parametrize("change", sorted(EMBED_CHANGES))
def test_a_decoder_embedding_that_may_run_other_code_keeps_the_loss_selection(tmp_path: Path, capsys, change):
    pairs = [EMBED_CHANGES[change]]
    if change != "Linear.forward patched":
        pairs += [
            ("        **kwdargs,\n    ):\n", "        pool_decoder_units: bool = False,\n        **kwdargs,\n    ):\n"),
            (MAE_HEAD, "class UnitPool(nn.Module):\n    def forward(self, x):\n        return x.mean(dim=-2, keepdim=True).expand_as(x)\n\n\n" + MAE_HEAD),
        ]
    mae = _mae(*pairs)
    pkg = _package(tmp_path, {"hiera_mae.py": mae})
    count = _loss_count(_reports(pkg, capsys), pkg)
    if change == "control":
        assert count is None, count
    else:
        assert count is not None and "made from it only by a Linear" in count, count


# Hunt 23a (a white-box audit of 19bb52a): what the decoder runs after its fill, where the
# proof still accepted what it did not read.  A caller keeps the unit mask (`step_with_vis`,
# or a module `MaskVis` it is handed to) and the code run flips it for a figure.
INIT_AT = "        self.decoder_embed = nn.Linear("
FLIP_HELD = "        if self.mask is not None:\n            self.mask.logical_not_()  # the figure draws 1 = masked\n"


def _vis_module(body: str, bases: str = "nn.Module") -> str:
    return f"class MaskVis({bases}):\n    def __init__(self):\n        super().__init__()\n        self.mask = None\n\n{body}\n\n"


STEP_VIS = STEP.replace("self.vis_mask = mask  # for the visualisation callback", "self.vis.mask = mask  # for the figure")
PLAIN_FORWARD = "    def forward(self, x):\n        return x\n"
FLIPPING_FORWARD = "    def forward(self, x):\n" + FLIP_HELD + "        return x\n"
FLIP_ON_SELF = "    def _flip_vis(self, x):\n        if getattr(self, \"vis_mask\", None) is not None:\n            self.vis_mask.logical_not_()\n        return x\n\n"


def _with_vis(module: str, after: str, init: str = "        self.vis = MaskVis()\n", step: str = STEP_VIS):
    return {"hiera_mae.py": _mae((MAE_HEAD, module + MAE_HEAD), (INIT_AT, init + INIT_AT), (DECODER, step + DECODER), (FILL, FILL + after))}


HUNT_23 = {
    "a submodule's method named like a tensor method": (
        _with_vis(_vis_module("    def add(self, tag, x):\n" + FLIP_HELD + "        return x\n"), '        x_dec = self.vis.add("decoder_grid", x_dec)\n'),
        "`self.vis` is used as a value",
    ),
    "a submodule's property": (
        _with_vis(_vis_module("    @property\n    def display_mask(self):\n        return self.mask.logical_not_()\n"), "        shown = self.vis.display_mask\n"),
        "self.vis.display_mask",
    ),
    "a submodule built by a classmethod": (
        _with_vis(_vis_module(FLIPPING_FORWARD + "\n    @classmethod\n    def build(cls):\n        return cls()\n"), "        x_dec = self.vis(x_dec)\n",
                  init="        self.vis = MaskVis.build()\n"),
        "MaskVis.build()",
    ),
    "a submodule built by a method": (
        _with_vis(_vis_module(FLIPPING_FORWARD), "        x_dec = self.vis(x_dec)\n",
                  init="        self.vis = self._make_vis()\n", step=STEP_VIS + "    def _make_vis(self):\n        return MaskVis()\n\n"),
        "self._make_vis()",
    ),
    "a property assigned in the class body": (
        {"hiera_mae.py": _mae((DECODER, STEP + "    def _get_vis_masked(self):\n        return self.vis_mask.logical_not_()\n"
                                              "    vis_masked = property(_get_vis_masked)\n\n" + DECODER),
                              (FILL, FILL + "        shown = self.vis_masked\n"))},
        "self.vis_masked",
    ),
    "a property assigned in Hiera's body, read between the decoder and the loss": (
        {"hiera.py": _edit(_upstream("hiera.py"), ("    def get_pos_embed(self) -> torch.Tensor:\n",
                                                   "    def _get_vis_masked(self):\n        return self.vis_mask.logical_not_()\n"
                                                   "    vis_masked = property(_get_vis_masked)\n\n    def get_pos_embed(self) -> torch.Tensor:\n")),
         "hiera_mae.py": _mae((DECODER, STEP + DECODER),
                              ("        )  # pred_mask is mask at resolution of *prediction*\n",
                               "        )  # pred_mask is mask at resolution of *prediction*\n        shown = self.vis_masked\n"))},
        "self.vis_masked",
    ),
    "a decoder block's attention replaced from hiera_mae.py": (
        {"hiera_mae.py": _mae(
            (MAE_HEAD, "class VisAttention(nn.Module):\n    def __init__(self, attn):\n        super().__init__()\n        self.attn = attn\n"
                       "        self.mask = None\n\n    def forward(self, x):\n" + FLIP_HELD + "        return self.attn(x)\n\n\n" + MAE_HEAD),
            ("        self.decoder_norm = norm_layer(decoder_embed_dim)\n",
             "        self.decoder_blocks[-1].attn = VisAttention(self.decoder_blocks[-1].attn)\n        self.decoder_norm = norm_layer(decoder_embed_dim)\n"),
            (DECODER, STEP.replace("self.vis_mask = mask  # for the visualisation callback", "self.decoder_blocks[-1].attn.mask = mask") + DECODER),
        )},
        "`self.decoder_blocks` is iterated",
    ),
    "a mixin's __call__": (
        _with_vis("class VisCallMixin:\n    def __call__(self, *args, **kwargs):\n" + FLIP_HELD + "        return super().__call__(*args, **kwargs)\n\n\n"
                  + _vis_module(PLAIN_FORWARD, "VisCallMixin, nn.Module"), "        x_dec = self.vis(x_dec)\n"),
        "MaskVis's forward is not read",
    ),
    "the submodule's forward replaced on the instance": (
        _with_vis(_vis_module(PLAIN_FORWARD), "        x_dec = self.vis(x_dec)\n",
                  init="        self.vis = MaskVis()\n        self.vis.forward = self._flip_vis\n", step=STEP_VIS + FLIP_ON_SELF),
        "made from it only by a Linear",  # (any `.forward = ...` in hiera_mae.py: the embedding's may be patched too)
    ),
    "a submodule's __iter__": (
        _with_vis(_vis_module("    def __iter__(self):\n" + FLIP_HELD + "        return iter(())\n\n" + PLAIN_FORWARD), "        for _ in self.vis:\n            pass\n"),
        "`self.vis` is iterated",
    ),
    "a generator made before the fill": (
        {"hiera_mae.py": _mae((DECODER, STEP + "    def _vis_steps(self):\n        yield None\n        self.vis_mask.logical_not_()\n        yield None\n\n" + DECODER),
                              (FILL, "        steps = self._vis_steps()\n" + FILL + "        for _ in steps:\n            pass\n"))},
        "`yield None` is not read",
    ),
    "a submodule in nn.Sequential": (
        _with_vis(_vis_module(FLIPPING_FORWARD), "        x_dec = self.vis(x_dec)\n", init="        self.vis = nn.Sequential(MaskVis())\n"),
        "MaskVis",
    ),
    "a block appended to the decoder's list": (
        {"hiera_mae.py": _mae(
            (MAE_HEAD, _vis_module(FLIPPING_FORWARD) + MAE_HEAD),
            ("        self.decoder_norm = norm_layer(decoder_embed_dim)\n", "        self.decoder_blocks.append(MaskVis())\n        self.decoder_norm = norm_layer(decoder_embed_dim)\n"),
            (DECODER, STEP.replace("self.vis_mask = mask  # for the visualisation callback", "self.decoder_blocks[-1].mask = mask") + DECODER),
        )},
        "`self.decoder_blocks` is iterated",
    ),
    "a global hook registered through an alias": (
        {"hiera_mae.py": _mae(
            ("from .hiera_utils import ", "from torch.nn.modules.module import register_module_forward_hook as on_every_forward\nfrom .hiera_utils import "),
            ("        self.initialize_weights()\n", "        self.initialize_weights()\n        on_every_forward(lambda m, i, o: None)\n"),
        )},
        "registers a forward hook",
    ),
    "F.threshold in place on a uint8 view": (
        {"hiera_mae.py": _mae(("import torch.nn as nn\n", "import torch.nn as nn\nimport torch.nn.functional as F\n"), (DECODER, STEP + DECODER),
                              (FILL, FILL + "        img = self.vis_mask.view(torch.uint8)\n        F.threshold(img, 0, 1, inplace=True)\n"))},
        "`self.vis_mask` is used as a value",
    ),
    "F.threshold in place on what a helper returns": (
        {"hiera_mae.py": _mae(("import torch.nn as nn\n", "import torch.nn as nn\nimport torch.nn.functional as F\n"),
                              (DECODER, STEP.replace("self.vis_mask = mask", "self.vis_state = {\"mask\": mask}") + DECODER),
                              (MAE_HEAD, "def drawn(state):\n    return state[\"mask\"].view(torch.uint8)\n\n\n" + MAE_HEAD),
                              (FILL, FILL + "        img = drawn(self.vis_state)\n        F.threshold(img, 0, 1, inplace=True)\n"))},
        "`self.vis_state` is used as a value",
    ),
    "the fill nested, a decoy at the top level": (
        {"hiera_mae.py": _mae((DECODER, STEP + DECODER),
                              (FILL, "        if x.numel() > 0:\n            x_dec[mask] = x.flatten()\n"
                                     "        self.vis_mask.view(-1)[:] = self.vis_mask.logical_not().flatten()\n"))},
        "is not one statement of its body",
    ),
    "a parametrization on the decoder's Linear": (
        {"hiera_mae.py": _mae(("import torch.nn as nn\n", "import torch.nn as nn\nimport torch.nn.utils.parametrize\n"),
                              (MAE_HEAD, _vis_module("    def forward(self, w):\n" + FLIP_HELD + "        return w\n") + MAE_HEAD),
                              ("        self.initialize_weights()\n", "        self.initialize_weights()\n        self.vis = MaskVis()\n        head = self.decoder_pred\n"
                               '        torch.nn.utils.parametrize.register_parametrization(head, "weight", self.vis)\n'))},
        "registers a forward hook",
    ),
    "control: a submodule of the files that only reads": (
        _with_vis(_vis_module("    def forward(self, x):\n        return x * 1.0\n"), "        x_dec = self.vis(x_dec)\n"),
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(HUNT_23))
def test_what_forward_decoder_runs_after_its_fill_is_proven_not_searched(tmp_path: Path, capsys, case):
    _assert_the_count(tmp_path, capsys, *HUNT_23[case])


def _assert_the_count(tmp_path: Path, capsys, files, reason) -> None:
    """The MAE's forward passes the count (``reason`` None), or refuses quoting ``reason``."""
    pkg = _package(tmp_path, files)
    count = _loss_count(_reports(pkg, capsys), pkg)
    if reason is None:
        assert count is None, count
    else:
        assert count is not None and reason in count, count


# Hunt 24a (a white-box audit of e3948f0): objects the after-the-fill proof took for
# tensors or data.  `MaskVis` keeps the unit mask a caller hands it and flips it in each
# method, property and dunder a figure callback might use.
MASK_VIS = '''class MaskVis(nn.Module):
    def __init__(self):
        super().__init__()
        self.mask = None

    def _flip(self):
        if self.mask is not None:
            self.mask.logical_not_()  # the figure draws 1 = masked

    def add(self, tag, x):
        self._flip()
        return x

    def tolist(self):
        self._flip()
        return []

    @property
    def display_mask(self):
        self._flip()
        return self.mask

    def __getitem__(self, tag):
        self._flip()
        return self.mask

    def __len__(self):
        self._flip()
        return 1

    def forward(self, x):
        return x


'''
MAE_FORWARD_TAIL = "        # Toggle mask, to generate labels for *masked* tokens\n"
ENCODED = "        latent, mask = self.forward_encoder(x, mask_ratio, mask=mask)\n"


def _holding(holder: str) -> str:
    return STEP.replace("self.vis_mask = mask  # for the visualisation callback", f"{holder} = mask")


def _vis(init: str, holder: str, after: str = "", head: str = "", methods: str = "", between: str = "", before: str = ""):
    pairs = [(MAE_HEAD, MASK_VIS + head + MAE_HEAD), (DECODER, _holding(holder) + methods + DECODER)]
    if after:
        pairs.append((FILL, FILL + after))
    if init:
        pairs.append((INIT_AT, init + INIT_AT))
    if between:
        pairs.append((MAE_FORWARD_TAIL, between + MAE_FORWARD_TAIL))
    if before:
        pairs.append((ENCODED, ENCODED + before))
    return {"hiera_mae.py": _mae(*pairs)}


VIS_LIST = "        self.vis_list = nn.ModuleList([MaskVis()])\n"
ONE_VIS = "        self.vis = MaskVis()\n"
STEPS = "    def _vis_steps(self):\n        yield self.vis.add('grid', None)\n\n"
HUNT_24 = {
    "an item of a module list": (_vis(VIS_LIST, "self.vis_list[0].mask", '        x_dec = self.vis_list[0].add("grid", x_dec)\n'), "`self.vis_list` is used as a value"),
    "a loop over enumerate of a module list": (
        _vis(VIS_LIST, "self.vis_list[0].mask", '        for i, vis in enumerate(self.vis_list):\n            x_dec = vis.add(f"grid{i}", x_dec)\n'), "`self.vis_list` is iterated: what its iterator runs is not read"),
    "a nested attribute": (
        _vis("        self.vis = VisHub()\n", "self.vis.rec.mask", '        x_dec = self.vis.rec.add("grid", x_dec)\n',
             head="class VisHub(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.rec = MaskVis()\n\n    def forward(self, x):\n        return x\n\n\n"),
        "self.vis.rec"),
    "a module function given the submodule": (
        _vis(ONE_VIS, "self.vis.mask", "        x_dec = record(self.vis, x_dec)\n", head='def record(rec, x):\n    return rec.add("grid", x)\n\n\n'), "`self.vis` is used as a value"),
    "a compiled holder": (_vis("        self.vis = torch.compile(MaskVis())\n", "self.vis.mask", '        x_dec = self.vis.add("grid", x_dec)\n'), "`self.vis` is used as a value"),
    "a property of a local alias": (_vis(ONE_VIS, "self.vis.mask", "        vis = self.vis\n        shown = vis.display_mask\n"), "`self.vis` is used as a value"),
    "a property of a global": (_vis("", "VIS.mask", "        shown = VIS.display_mask\n", head="VIS = MaskVis()\n\n\n"), "`VIS` is a global of the files"),
    "an if-expression alias": (
        _vis(ONE_VIS, "self.vis.mask", '        vis = self.vis if self.training else None\n        if vis is not None:\n            x_dec = vis.add("grid", x_dec)\n'), "vis"),
    "a generator listed after the fill": (
        {"hiera_mae.py": _mae((MAE_HEAD, MASK_VIS + MAE_HEAD), (DECODER, _holding("self.vis.mask") + STEPS + DECODER), (INIT_AT, ONE_VIS + INIT_AT),
                              (FILL, "        steps = self._vis_steps()\n" + FILL + "        done = list(steps)\n"))},
        "`yield self.vis.add('grid', None)` is not read"),
    "a property set on the class outside its body": (
        _vis(ONE_VIS, "self.vis.mask", "        shown = self.vis.shown_mask\n", head="MaskVis.shown_mask = property(lambda self: self.add('shown', self.mask))\n\n\n"),
        "self.vis.shown_mask"),
    "F.threshold given inplace by position": (
        {"hiera_mae.py": _mae((DECODER, _holding("self.vis_mask").replace("= mask", "= torch.as_tensor(mask, device='cpu')") + DECODER),
                              (FILL, FILL + "        torch.nn.functional.threshold(self.vis_mask.view(torch.uint8), 0, 1, True)\n"))},
        "`self.vis_mask` is used as a value"),
    "an item of a submodule": (_vis(ONE_VIS, "self.vis.mask", '        shown = self.vis["grid"]\n'), "`self.vis` is used as a value"),
    "a submodule's truth test": (_vis(ONE_VIS, "self.vis.mask", "        if self.vis:\n            x_dec = x_dec * 1\n"), "self.vis"),
    "a loop over a literal tuple of submodules": (
        _vis(ONE_VIS, "self.vis.mask", '        for rec in (self.vis,):\n            x_dec = rec.add("grid", x_dec)\n'), "self.vis"),
    "between the decoder and the loss: an item's method": (_vis(VIS_LIST, "self.vis_list[0].mask", between="        records = self.vis_list[0].tolist()\n"), "tolist"),
    "between the decoder and the loss: an alias's method": (
        _vis(ONE_VIS, "self.vis.mask", between="        records = vis.tolist()\n", before="        vis = self.vis\n"), "vis.tolist()"),
    "between the decoder and the loss: a generator listed": (
        _vis(ONE_VIS, "self.vis.mask", methods=STEPS, between="        done = list(steps)\n", before="        steps = self._vis_steps()\n"), "list(steps)"),
    "the decoder's list appended to through an alias": (
        {"hiera_mae.py": _mae((MAE_HEAD, MASK_VIS + MAE_HEAD), (DECODER, _holding("self.decoder_blocks[-1].mask") + DECODER),
                              ("        self.initialize_weights()\n", "        blocks = self.decoder_blocks\n        blocks.append(MaskVis())\n        self.initialize_weights()\n"))},
        "`self.decoder_blocks` is iterated"),
    "a class of the files handed to a block's norm_layer": (
        {"hiera_mae.py": _mae((MAE_HEAD, "class VisNorm(nn.LayerNorm):\n    mask = None\n\n    def forward(self, x):\n        if self.mask is not None:\n"
                                         "            self.mask.logical_not_()\n        return super().forward(x)\n\n\n" + MAE_HEAD),
                              (DECODER, _holding("self.decoder_blocks[-1].norm1.mask") + DECODER),
                              ("                    norm_layer=norm_layer,\n                    mlp_ratio=mlp_ratio,\n",
                               "                    norm_layer=VisNorm,\n                    mlp_ratio=mlp_ratio,\n"))},
        "`self.decoder_blocks` is iterated: what its iterator runs is not read"),  # (VisNorm's blocks: not a proven list)
    "control: a module function given a data attribute": (
        {"hiera_mae.py": _mae((MAE_HEAD, "def scaled(x, shape):\n    return x * len(shape)\n\n\n" + MAE_HEAD),
                              (FILL, FILL + "        x_dec = scaled(x_dec, self.tokens_spatial_shape_final)\n"))},
        None),
}


@pytest.mark.parametrize("case", sorted(HUNT_24))
def test_what_the_decoder_reads_after_its_fill_is_data_or_a_proven_module(tmp_path: Path, capsys, case):
    _assert_the_count(tmp_path, capsys, *HUNT_24[case])


# Stop 48: the after-the-fill reader types every expression it runs (`_Reader`), from
# the bindings of each name outwards.  The older reader read objects only as receivers,
# items and attributes; a local or global object reached through Python's protocols
# (an operator's `__radd__`, `len`'s `__len__`, a truth test, an f-string's `__format__`)
# ran code it never read.
LOUD_VIS = '''class LoudVis(MaskVis):
    def __radd__(self, other):
        self._flip()
        return other

    def __format__(self, spec):
        self._flip()
        return "vis"


'''
LOUD = "        self.vis = LoudVis()\n"
PROTOCOLS = {
    "an operator given a local alias": (_vis(LOUD, "self.vis.mask", "        vis = self.vis\n        x_dec = x_dec + vis\n", head=LOUD_VIS), "`self.vis` is used as a value"),
    "len of a local alias": (_vis(ONE_VIS, "self.vis.mask", "        vis = self.vis\n        n = len(vis)\n"), "`self.vis` is used as a value"),
    "a truth test of a local alias": (
        _vis(ONE_VIS, "self.vis.mask", "        vis = self.vis\n        if vis:\n            x_dec = x_dec * 1\n"), "`self.vis` is used as a value"),
    "a global formatted": (_vis("", "VIS.mask", '        tag = f"grid {VIS}"\n', head=LOUD_VIS + "VIS = LoudVis()\n\n\n"), "`VIS` is a global of the files"),
    "a comprehension storing through its target": (
        _vis("", "self.vis_mask", "        _ = [None for self.vis_mask[:, 0] in [True]]\n"), "is a target that may write what it does not bind"),
    "control: a local made of data and a proven attribute": (
        _vis("", "self.vis_mask", "        scale = float(len(self.tokens_spatial_shape_final)) if self.training else 1.0\n        x_dec = x_dec * scale\n"), None),
}
BEFORE_THE_FILL = _vis(LOUD, "self.vis.mask", "        x_dec = x_dec + vis\n", head=LOUD_VIS)["hiera_mae.py"]
PROTOCOLS["an alias made before the fill, added after it"] = (
    {"hiera_mae.py": BEFORE_THE_FILL.replace(FILL, "        vis = self.vis\n" + FILL, 1)}, "`self.vis` is used as a value",
)


@pytest.mark.parametrize("case", sorted(PROTOCOLS))
def test_what_the_decoder_runs_after_its_fill_is_typed_from_its_bindings(tmp_path: Path, capsys, case):
    _assert_the_count(tmp_path, capsys, *PROTOCOLS[case])

# A name the MAE's module stores data under (`self.grid_scale = 1.0`) that hiera_utils.py's
# helper stores an object under (`model.grid_scale = GridVis()`, its `__rmul__` flipping the
# mask it keeps): the older reader read the MAE's module's stores only.
GRID_VIS = '''

class GridVis(nn.Module):
    def __init__(self):
        super().__init__()
        self.mask = None

    def __rmul__(self, other):
        if self.mask is not None:
            self.mask.logical_not_()
        return other

    def forward(self, x):
        return x


def attach_grid_vis(model):
    model.grid_scale = GridVis()
    return model
'''
MAE_IMPORT = "from .hiera_utils import pretrained_model, undo_windowing, conv_nd\n"
GRID_MAE = _edit(
    _vis("        self.grid_scale = 1.0\n", "self.grid_scale.mask", "        x_dec = x_dec * self.grid_scale\n")["hiera_mae.py"],
    (MAE_IMPORT, MAE_IMPORT.replace("conv_nd", "conv_nd, attach_grid_vis")),
    ("\n# Image Models\n", "\n\ndef mae_hiera_vis(**kwargs):\n    return attach_grid_vis(MaskedAutoencoderHiera(**kwargs))\n\n# Image Models\n"),
)
ELSEWHERE = {
    "an object stored under the name by hiera_utils": (
        {"hiera_mae.py": GRID_MAE, "hiera_utils.py": _upstream("hiera_utils.py") + GRID_VIS}, "`self.grid_scale` is used as a value"),
    "control: data stored under the name by hiera_utils": (
        {"hiera_mae.py": GRID_MAE, "hiera_utils.py": _upstream("hiera_utils.py") + GRID_VIS.replace("model.grid_scale = GridVis()", "model.grid_scale = 2.0")}, None),
}


@pytest.mark.parametrize("case", sorted(ELSEWHERE))
def test_a_data_attribute_read_after_the_fill_is_data_in_every_module_storing_it(tmp_path: Path, capsys, case):
    _assert_the_count(tmp_path, capsys, *ELSEWHERE[case])


# Between the decoder and the loss the same protocols ran unread code: the older check
# read any name or `self.<a>` as a value (an operator given `self.vis` ran its `__radd__`).
BETWEEN = {
    "an operator given a submodule": (
        _vis(LOUD, "self.vis.mask", between="        pred = pred + self.vis\n", head=LOUD_VIS), "`pred = pred + self.vis` at line"),
    "a local alias formatted": (
        _vis(LOUD, "self.vis.mask", between='        tag = f"{vis}"\n', before="        vis = self.vis\n", head=LOUD_VIS), '`tag = f"{vis}"` at line'),
    "control: arithmetic on the decoder's output": (_vis(LOUD, "self.vis.mask", between="        pred = pred * 1.0\n", head=LOUD_VIS), None),
}


@pytest.mark.parametrize("case", sorted(BETWEEN))
def test_what_runs_between_the_decoder_and_the_loss_is_typed(tmp_path: Path, capsys, case):
    _assert_the_count(tmp_path, capsys, *BETWEEN[case])


# Hunt 25a (a white-box audit of the typed reader, 76aeb64), each a crash of the rewritten
# step where the original ran (HR004's: the original fills other units, silently different):
# - F1: what the files store to `self.<a>` was data where no call but the builtins' made
#   it, so a constructor parameter a factory fills with a module of the files, or a local
#   bound to one, passed (`self.recorder = recorder`);
# - F2: the decoder's module list changed through a helper, a tuple alias, an attribute set
#   on it, or a class of the files named `ModuleList`;
# - F3: HR004 read any name but `self` between the kept units' reshape and the fill as a
#   tensor (a global or an alias of a submodule, whose `__rmul__` moved the kept units).
MAE_SIGNATURE = "        norm_layer: nn.Module = partial(nn.LayerNorm, eps=1e-6),\n        **kwdargs,\n"
INIT_DONE = "        self.initialize_weights()\n"


def _given_by_a_factory(files, param: str, argument: str):
    return {"hiera_mae.py": _edit(
        files["hiera_mae.py"], (MAE_SIGNATURE, MAE_SIGNATURE.replace("        **kwdargs", f"        {param}=None,\n        **kwdargs")),
        ("\n# Image Models\n", f"\n\ndef mae_hiera_vis(**kwargs):\n    return MaskedAutoencoderHiera({param}={argument}, **kwargs)\n\n# Image Models\n"),
    )}


ROLL_VIS = GRID_VIS.split("\n\ndef attach_grid_vis")[0].replace("self.mask.logical_not_()", "self.mask.copy_(self.mask.roll(1, 1))") + "\n\n\n"
OWN_LIST = "class ModuleList(nn.ModuleList):\n    def __init__(self, modules):\n        super().__init__(modules)\n        self.vis = MaskVis()\n\n\n"
ADD_BLOCK = "def add_vis_block(blocks):\n    blocks.append(MaskVis())\n    return blocks\n\n\n"
RECORD = '        x_dec = self.recorder.add("decoder_grid", x_dec)\n'
HUNT_25 = {
    "a constructor parameter a factory fills with a module": (
        _given_by_a_factory(_vis("        self.recorder = recorder\n", "self.recorder.mask", '        if self.recorder is not None:\n' + RECORD.replace("        ", "            ", 1)),
                            "recorder", "MaskVis()"), "`self.recorder` is used as a value"),
    "a local bound to a module, then stored": (
        _vis("        recorder = MaskVis()\n        self.recorder = recorder\n", "self.recorder.mask", RECORD), "`self.recorder` is used as a value"),
    "between: a constructor parameter a factory fills with a module": (
        _given_by_a_factory(_vis("        self.pred_scale = pred_scale\n", "self.pred_scale.mask", between="        pred = pred * self.pred_scale\n",
                                 head=ROLL_VIS), "pred_scale", "GridVis()"), "`pred = pred * self.pred_scale` at line"),
    "the decoder's list handed to a helper appending to it": (
        {"hiera_mae.py": _mae((MAE_HEAD, MASK_VIS + ADD_BLOCK + MAE_HEAD), (DECODER, _holding("self.decoder_blocks[-1].mask") + DECODER),
                              (INIT_DONE, "        add_vis_block(self.decoder_blocks)\n" + INIT_DONE))}, "`self.decoder_blocks` is iterated"),
    "the decoder's list aliased in a tuple": (
        {"hiera_mae.py": _mae((MAE_HEAD, MASK_VIS + MAE_HEAD), (DECODER, _holding("self.decoder_blocks[-1].mask") + DECODER),
                              (INIT_DONE, "        blocks, vis = self.decoder_blocks, MaskVis()\n        blocks.append(vis)\n" + INIT_DONE))},
        "`self.decoder_blocks` is iterated"),
    "a module set as an attribute of the decoder's list": (
        {"hiera_mae.py": _mae((MAE_HEAD, MASK_VIS + MAE_HEAD), (DECODER, _holding("self.decoder_blocks.vis.mask") + DECODER),
                              (INIT_DONE, "        self.decoder_blocks.vis = MaskVis()\n" + INIT_DONE))}, "`self.decoder_blocks` is iterated"),
    "a class of the files named ModuleList": (
        {"hiera_mae.py": _mae((MAE_HEAD, MASK_VIS + OWN_LIST + MAE_HEAD), (DECODER, _holding("self.decoder_blocks.vis.mask") + DECODER),
                              ("        self.decoder_blocks = nn.ModuleList(\n", "        self.decoder_blocks = ModuleList(\n"))},
        "`self.decoder_blocks` is iterated"),
    "control: a constructor parameter a factory fills with data": (
        _given_by_a_factory(_vis("        self.pred_scale = pred_scale\n", "self.vis_mask", between="        pred = pred * self.pred_scale\n"),
                            "pred_scale", "2.0"), None),
}


@pytest.mark.parametrize("case", sorted(HUNT_25))
def test_what_the_count_reads_is_typed_from_what_the_files_store(tmp_path: Path, capsys, case):
    _assert_the_count(tmp_path, capsys, *HUNT_25[case])


EXPANDED = "        mask = mask.expand((-1,) * 2 + x.shape[2:]).bool()\n"
FILL_SITE = "x_dec[mask] = x.flatten()"
HR004_CASES = {
    "a global object between the reshape and the fill": {"hiera_mae.py": _mae(
        (MAE_HEAD, ROLL_VIS + "GRID_VIS = GridVis()\n\n\n" + MAE_HEAD), (DECODER, _holding("GRID_VIS.mask") + DECODER),
        (EXPANDED, EXPANDED + "        mask_tokens = mask_tokens * GRID_VIS\n"))},
    "an alias of a submodule made before the reshape": {"hiera_mae.py": _mae(
        (MAE_HEAD, ROLL_VIS + MAE_HEAD), (DECODER, _holding("self.grid_vis.mask") + DECODER), (INIT_AT, "        self.grid_vis = GridVis()\n" + INIT_AT),
        ("        x = self.decoder_embed(x)\n", "        scale = self.grid_vis\n        x = self.decoder_embed(x)\n"),
        (EXPANDED, EXPANDED + "        mask_tokens = mask_tokens * scale\n"))},
    "control: data between the reshape and the fill": {"hiera_mae.py": _mae((EXPANDED, EXPANDED + "        mask_tokens = mask_tokens * 1.0\n"))},
}


@pytest.mark.parametrize("case", sorted(HR004_CASES))
def test_the_fill_reads_only_values_between_the_reshape_and_the_fill(tmp_path: Path, capsys, case):
    pkg = _package(tmp_path, HR004_CASES[case])
    fill = _site(_reports(pkg, capsys), pkg, "hiera_mae.py", "HR004", FILL_SITE)
    if case.startswith("control"):
        assert fill["applied"], fill
    else:
        assert not fill["applied"] and "runs between the kept units' reshape and the fill" in fill["message"], fill


# Hunt 25b: the same protocols in forward_loss, before its selection (the rewritten
# `masked_rows` raised in its count check).
LOSS_START = "        if len(self.q_stride) == 2:\n            label = self.get_pixel_label_2d(x, mask)\n"
IN_THE_LOSS = {
    "an operator handing the mask to a submodule": (
        _vis(LOUD, "self.vis_mask", head=LOUD_VIS), "shown = mask * self.vis"),
    "control: arithmetic on data": (_vis("", "self.vis_mask"), "shown = mask * 1"),
}


@pytest.mark.parametrize("case", sorted(IN_THE_LOSS))
def test_the_mask_handed_to_an_object_in_the_loss_keeps_the_selection(tmp_path: Path, capsys, case):
    files, statement = IN_THE_LOSS[case]
    files = {"hiera_mae.py": _edit(files["hiera_mae.py"], (LOSS_START, f"        {statement}\n" + LOSS_START))}
    _assert_the_count(tmp_path, capsys, files, None if case.startswith("control") else "is handed to `self.vis`")
