"""Hunt 23b (a white-box audit of 19bb52a): the HR003 token drop's count is the MAE's
ratio, which holds only while nothing between get_random_mask and the drop writes the
mask.  Hiera.forward hands the mask to `self.patch_embed(x, mask)`, and the proof read
the stem class's forward for a write.  Each case below ran other code for that call
than the forward read, which wrote the mask (a visible "register" unit), so the
rewritten drop raised in its count check (compiled: other tokens were kept):

- the stem's `__call__` bound by `__call__ = f`, under an `if`, from a mixin base, or
  torch's `_call_impl` overridden; a `__new__` making another class's instance;
- the stem's class swapped (`self.patch_embed.__class__ = K`, in Hiera or a factory of
  hiera_mae.py);
- a stem factory under a decorator wrapping what it returns;
- a module function the stem calls replaced from another file (`_hiera.do_masked_conv = f`);
- a torch wrapper (`torch.compile`, `checkpoint_wrapper`) around a stem of the files,
  taken for a module built outside the files.

The follow now proves the stem's class instead (`_calls.module_class_unproven`): one
plain base each down to nn.Module, no name of the call protocol bound, no class swap in
a module read; a followed module function no module read replaces
(`followed_function`); a call of outside code given a stem of the files follows that
stem.  The controls keep the fast path."""

from pathlib import Path

import pytest

from tests.test_module_reach import DROP, _package, _reports, _site, _upstream
from tests.test_after_the_fill import _edit

ARGS = "in_chans, embed_dim, patch_kernel, patch_stride, patch_padding"
HIERA_HEAD = "\n\nclass Hiera(nn.Module, PyTorchModelHubMixin):\n"
STEM = "        self.patch_embed = PatchEmbed(\n            in_chans, embed_dim, patch_kernel, patch_stride, patch_padding\n        )\n"
DOC = '    """Patch embed that supports any number of spatial dimensions (1d, 2d, 3d)."""\n'
WRITE = "        if mask is not None:\n            mask[:, :, 0, 0] = True  # a visible register unit\n"
KEEP = f'''

class KeepCornerPatchEmbed(PatchEmbed):
    def forward(self, x, mask=None):
{WRITE}        x = do_masked_conv(x, self.proj, mask)
        return x.reshape(x.shape[0], x.shape[1], -1).transpose(2, 1)
'''
READ_ONLY = '''

class LoggedPatchEmbed(PatchEmbed):
    def forward(self, x, mask=None):
        x = do_masked_conv(x, self.proj, mask)
        return x.reshape(x.shape[0], x.shape[1], -1).transpose(2, 1)
'''


def _stem(statement: str):
    return (STEM, STEM + "        if keep_corner:\n            " + statement + "\n")


FLAG = ("        sep_pos_embed: bool = False,\n", "        sep_pos_embed: bool = False,\n        keep_corner: bool = False,\n")
WRITER_CALL = f"\n\ndef _keep_corner_call(module, x, mask=None):\n{WRITE.replace('        ', '    ')}    return module._call_impl(x, mask=mask)\n"

HIERA_CASES = {
    "__call__ = f in the class body": [
        (HIERA_HEAD, WRITER_CALL + "\n\nclass KeepCornerPatchEmbed(PatchEmbed):\n    __call__ = _keep_corner_call\n" + HIERA_HEAD),
        _stem(f"self.patch_embed = KeepCornerPatchEmbed({ARGS})"), FLAG,
    ],
    "__call__ under an if": [
        (DOC, DOC + f"\n    if KEEP_CORNER:\n        def __call__(self, x, mask=None):\n{WRITE.replace('        ', '            ')}"
         "            return super().__call__(x, mask=mask)\n\n"),
        ("class PatchEmbed(nn.Module):\n", "KEEP_CORNER = True\n\n\nclass PatchEmbed(nn.Module):\n"),
    ],
    "a mixin's __call__": [
        (HIERA_HEAD, f"\n\nclass RegisterUnitMixin:\n    def __call__(self, x, mask=None):\n{WRITE}"
         "        return super().__call__(x, mask=mask)\n\n\nclass KeepCornerPatchEmbed(RegisterUnitMixin, PatchEmbed):\n    pass\n" + HIERA_HEAD),
        _stem(f"self.patch_embed = KeepCornerPatchEmbed({ARGS})"), FLAG,
    ],
    "_call_impl": [
        (HIERA_HEAD, f"\n\nclass KeepCornerPatchEmbed(PatchEmbed):\n    def _call_impl(self, x, mask=None):\n{WRITE}"
         "        return super()._call_impl(x, mask=mask)\n" + HIERA_HEAD),
        _stem(f"self.patch_embed = KeepCornerPatchEmbed({ARGS})"), FLAG,
    ],
    "__new__": [
        (HIERA_HEAD, KEEP + HIERA_HEAD),
        (DOC, DOC + "\n    def __new__(cls, *args, register_unit=False, **kwargs):\n"
         "        return super().__new__(KeepCornerPatchEmbed if register_unit else cls)\n"),
        ("        padding: Tuple[int, ...],\n    ):\n", "        padding: Tuple[int, ...],\n        register_unit: bool = False,\n    ):\n"),
        (STEM, STEM.replace("patch_padding\n", "patch_padding, register_unit=keep_corner\n")), FLAG,
    ],
    "__class__ swapped": [(HIERA_HEAD, KEEP + HIERA_HEAD), _stem("self.patch_embed.__class__ = KeepCornerPatchEmbed"), FLAG],
    "torch.compile of a stem of the files": [
        (HIERA_HEAD, KEEP + HIERA_HEAD), _stem(f'self.patch_embed = torch.compile(KeepCornerPatchEmbed({ARGS}), backend="eager")'), FLAG,
    ],
    "a local stem given to torch.compile": [
        (HIERA_HEAD, KEEP + HIERA_HEAD), _stem(f"stem = KeepCornerPatchEmbed({ARGS})\n            self.patch_embed = torch.compile(stem)"), FLAG,
    ],
    "control: a stem subclass reading the mask": [
        (HIERA_HEAD, READ_ONLY + HIERA_HEAD), _stem(f"self.patch_embed = LoggedPatchEmbed({ARGS})"), FLAG,
    ],
    "control: torch.compile of a stem reading the mask": [
        (HIERA_HEAD, READ_ONLY + HIERA_HEAD), _stem(f"self.patch_embed = torch.compile(LoggedPatchEmbed({ARGS}))"), FLAG,
    ],
}

DECORATED_FACTORY = f'''

def keeps_register_unit(make):
    def wrapped(*args, **kwargs):
        return RegisterUnit(make(*args, **kwargs))
    return wrapped


class RegisterUnit(nn.Module):
    def __init__(self, stem):
        super().__init__()
        self.stem = stem

    def forward(self, x, mask=None):
{WRITE}        return self.stem(x, mask=mask)


@keeps_register_unit
def make_patch_embed(dim_in, dim_out, kernel, stride, padding):
    return PatchEmbed(dim_in, dim_out, kernel, stride, padding)
'''
MODULE_PATCH = f'''from . import hiera as _hiera
from .hiera_utils import do_masked_conv as _do_masked_conv


def _conv_keeping_register_unit(x, conv, mask=None):
{WRITE.replace('        ', '    ')}    return _do_masked_conv(x, conv, mask)


_hiera.do_masked_conv = _conv_keeping_register_unit
'''
MAE_FACTORY = '''

def mae_hiera_keepcorner(**kwargs):
    model = MaskedAutoencoderHiera(**kwargs)
    model.patch_embed.__class__ = KeepCornerPatchEmbed
    return model
'''


def _files(case: str):
    if case in HIERA_CASES:
        return {"hiera.py": _edit(_upstream("hiera.py"), *HIERA_CASES[case])}
    if case == "a decorated stem factory":
        return {"hiera.py": _edit(_upstream("hiera.py"), (HIERA_HEAD, DECORATED_FACTORY + HIERA_HEAD), (STEM, f"        self.patch_embed = make_patch_embed({ARGS})\n"))}
    if case == "a function the stem calls replaced from hiera_mae.py":
        return {"hiera_mae.py": _edit(_upstream("hiera_mae.py"), ("from .hiera_utils import pretrained_model, undo_windowing, conv_nd\n",
                                                                  "from .hiera_utils import pretrained_model, undo_windowing, conv_nd\n" + MODULE_PATCH))}
    assert case == "__class__ swapped by a factory of hiera_mae.py"
    return {
        "hiera.py": _edit(_upstream("hiera.py"), (HIERA_HEAD, KEEP + HIERA_HEAD)),
        "hiera_mae.py": _edit(_upstream("hiera_mae.py"), ("from .hiera import Hiera, HieraBlock\n", "from .hiera import Hiera, HieraBlock, KeepCornerPatchEmbed\n"),
                              ("\n# Image Models\n", MAE_FACTORY + "\n# Image Models\n")),
    }


CASES = sorted([*HIERA_CASES, "a decorated stem factory", "a function the stem calls replaced from hiera_mae.py", "__class__ swapped by a factory of hiera_mae.py"])


@pytest.mark.parametrize("case", CASES)
def test_a_stem_whose_call_is_not_the_forward_read_keeps_the_drop(tmp_path: Path, capsys, case):
    pkg = _package(tmp_path, _files(case))
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    if case.startswith("control"):
        assert drop["applied"], drop
    else:
        # the statement where the proof stopped: the stem's call, or what the stem runs
        stopped = "do_masked_conv(x, self.proj, mask)" if "replaced from" in case else "self.patch_embed("
        assert not drop["applied"] and stopped in drop["message"], drop


# Hunt 24b (a white-box audit of e3948f0): what the stem proof still trusted.  A called
# parameter (`stem_layer(...)`) a caller of the files fills with a class of the files; a
# parameter handed to outside code (`torch.compile(stem)`); a hook registered by a helper
# of hiera_utils.py; the stem's module function replaced through its module's namespace or
# `__code__`; `inplace=` on a uint8 view of the mask.
UTILS_END = "\n\ndef undo_windowing("
MAE_IMPORTS = "from .hiera_utils import pretrained_model, undo_windowing, conv_nd\n"
STEM_PARAM = ("        sep_pos_embed: bool = False,\n", "        sep_pos_embed: bool = False,\n        stem_layer=None,\n")
BY_PARAM = (STEM, f"        if stem_layer is not None:\n            self.patch_embed = stem_layer({ARGS})\n        else:\n"
                  + STEM.replace("        ", "            ", 1).replace("\n        )", "\n            )"))
WRITING_CONV = f"\n\ndef _conv_keeping_register_unit(x, conv, mask=None):\n{WRITE.replace('        ', '    ')}    return _do_masked_conv(x, conv, mask)\n\n\n"
PRE_HOOK = f'''

def _register_unit(module, args, kwargs):
    mask = kwargs.get("mask")
{WRITE.replace('        ', '    ')}

def keep_register_unit(module):
    if hasattr(module, "spatial_dims"):
        module.register_forward_pre_hook(_register_unit, with_kwargs=True)
'''
INIT_END = "        self.apply(partial(self._init_weights))\n"
HUNT_24 = {
    "a stem class handed to Hiera by the MAE's model zoo": {
        "hiera.py": _edit(_upstream("hiera.py"), STEM_PARAM, BY_PARAM, (HIERA_HEAD, KEEP + HIERA_HEAD)),
        "hiera_mae.py": _edit(_upstream("hiera_mae.py"), ("from .hiera import Hiera, HieraBlock\n", "from .hiera import Hiera, HieraBlock, KeepCornerPatchEmbed\n"),
                              ("\n# Image Models\n", "\n\ndef mae_hiera_keepcorner(**kwargs):\n    return MaskedAutoencoderHiera(stem_layer=KeepCornerPatchEmbed, **kwargs)\n\n# Image Models\n")),
    },
    "a parameter defaulting to a class of hiera_utils": {
        "hiera_utils.py": _edit(_upstream("hiera_utils.py"), (UTILS_END, "\n\nclass RegisterUnitPatchEmbed(nn.Module):\n    def forward(self, x, mask=None):\n"
                                                             + WRITE + "        return x\n" + UTILS_END)),
        "hiera.py": _edit(_upstream("hiera.py"), ("from .hfhub import", "from . import hiera_utils\nfrom .hfhub import"),
                          (STEM_PARAM[0], STEM_PARAM[0] + "        stem_layer=hiera_utils.RegisterUnitPatchEmbed,\n"),
                          (STEM, f"        self.patch_embed = stem_layer({ARGS})\n")),
    },
    "a builder function given the class": {
        "hiera.py": _edit(_upstream("hiera.py"), (HIERA_HEAD, KEEP + "\n\ndef build_layer(layer, *args):\n    return layer(*args)\n" + HIERA_HEAD), FLAG,
                          (STEM, f"        self.patch_embed = build_layer(KeepCornerPatchEmbed if keep_corner else PatchEmbed, {ARGS})\n")),
    },
    "a stem instance handed by the zoo to torch.compile": {
        "hiera.py": _edit(_upstream("hiera.py"), (STEM_PARAM[0], STEM_PARAM[0] + "        stem=None,\n"), (HIERA_HEAD, KEEP + HIERA_HEAD),
                          (STEM, f"        self.patch_embed = torch.compile(stem if stem is not None else PatchEmbed({ARGS}))\n")),
        "hiera_mae.py": _edit(_upstream("hiera_mae.py"), ("from .hiera import Hiera, HieraBlock\n", "from .hiera import Hiera, HieraBlock, KeepCornerPatchEmbed\n"),
                              ("\n# Image Models\n", "\n\ndef mae_hiera_keepcorner(**kwargs):\n    stem = KeepCornerPatchEmbed(3, 96, (7, 7), (4, 4), (3, 3))\n"
                               "    return MaskedAutoencoderHiera(stem=stem, **kwargs)\n\n# Image Models\n")),
    },
    "a pre-hook a helper registers through self.apply": {
        "hiera_utils.py": _edit(_upstream("hiera_utils.py"), (UTILS_END, PRE_HOOK + UTILS_END)),
        "hiera.py": _edit(_upstream("hiera.py"), ("from .hiera_utils import pretrained_model,", "from .hiera_utils import keep_register_unit, pretrained_model,"), FLAG,
                          (INIT_END, INIT_END + "        if keep_corner:\n            self.apply(keep_register_unit)\n")),
    },
    "do_masked_conv replaced through vars() of hiera": {
        "hiera_mae.py": _edit(_upstream("hiera_mae.py"), (MAE_IMPORTS, MAE_IMPORTS + "from . import hiera as _hiera\nfrom .hiera_utils import do_masked_conv as _do_masked_conv\n"
                                                          + WRITING_CONV + 'vars(_hiera)["do_masked_conv"] = _conv_keeping_register_unit\n')),
    },
    "hiera handed to a helper": {
        "hiera_utils.py": _edit(_upstream("hiera_utils.py"), (UTILS_END, "\n\ndef keep_register_unit(module):\n    pass\n" + UTILS_END)),
        "hiera_mae.py": _edit(_upstream("hiera_mae.py"), (MAE_IMPORTS, MAE_IMPORTS.replace("conv_nd", "conv_nd, keep_register_unit")
                                                          + "from . import hiera as _hiera\n\nkeep_register_unit(_hiera)\n")),
    },
    "do_masked_conv.__code__ replaced": {
        "hiera_utils.py": _edit(_upstream("hiera_utils.py"), (UTILS_END, "\n\ndef _keeping(x, conv, mask=None):\n    return conv(x)\n\n\n"
                                                             "do_masked_conv.__code__ = _keeping.__code__\n" + UTILS_END)),
    },
    "F.threshold in place on the mask's uint8 view": {
        "hiera.py": _edit(_upstream("hiera.py"), ("        x = do_masked_conv(x, self.proj, mask)\n",
                                                  "        if mask is not None:\n            F.threshold(mask.view(torch.uint8)[:, :, :1, :1], 0, 1, inplace=True)\n"
                                                  "        x = do_masked_conv(x, self.proj, mask)\n")),
    },
    "control: a stem parameter given a stem class of torch's": {
        "hiera.py": _edit(_upstream("hiera.py"), STEM_PARAM, BY_PARAM),
        "hiera_mae.py": _edit(_upstream("hiera_mae.py"), ("\n# Image Models\n", "\n\ndef mae_hiera_plain(**kwargs):\n    return MaskedAutoencoderHiera(**kwargs)\n\n# Image Models\n")),
    },
}


@pytest.mark.parametrize("case", sorted(HUNT_24))
def test_a_stem_or_what_it_runs_chosen_elsewhere_keeps_the_drop(tmp_path: Path, capsys, case):
    pkg = _package(tmp_path, HUNT_24[case])
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    if case.startswith("control"):
        assert drop["applied"], drop
    else:
        assert not drop["applied"], drop


# Noticed by hunt 24, built in stop 48: the stem's class given other bases, torch's global
# hook dicts written directly, a hook registration reached by name.
HOOK_FN = f"\n\ndef _register_unit(module, args, kwargs):\n    mask = kwargs.get(\"mask\")\n{WRITE.replace('        ', '    ')}    return None\n"
HUNT_24_NOTICED = {
    "PatchEmbed.__bases__ given a mixin with __call__": {
        "hiera.py": _edit(_upstream("hiera.py"), (HIERA_HEAD, f"\n\nclass RegisterUnitBase(nn.Module):\n    def __call__(self, x, mask=None):\n{WRITE}"
                                                              "        return super().__call__(x, mask=mask)\n\n\nPatchEmbed.__bases__ = (RegisterUnitBase,)\n" + HIERA_HEAD)),
    },
    "torch's global pre-hook dict written directly": {
        "hiera.py": _edit(_upstream("hiera.py"), (HIERA_HEAD, HOOK_FN + "\n\nfrom torch.nn.modules import module as _torch_module\n\n"
                                                              "_torch_module._global_forward_pre_hooks[0] = _register_unit\n" + HIERA_HEAD)),
    },
    "a pre-hook registered through getattr": {
        "hiera.py": _edit(_upstream("hiera.py"), (HIERA_HEAD, HOOK_FN + HIERA_HEAD), FLAG,
                          (INIT_END, INIT_END + '        if keep_corner:\n            getattr(self.patch_embed, "register_forward_pre_hook")(_register_unit, with_kwargs=True)\n')),
    },
}


@pytest.mark.parametrize("case", sorted(HUNT_24_NOTICED))
def test_a_stem_given_other_bases_or_hooks_by_name_keeps_the_drop(tmp_path: Path, capsys, case):
    pkg = _package(tmp_path, HUNT_24_NOTICED[case])
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    assert not drop["applied"] and "self.patch_embed(" in drop["message"], drop


# Hunt 25b (on 76aeb64): an operator, an item read or store, `+=` or a torch function
# handed the mask to an object of the files before the drop (`mask * self.vis`: the
# module's `__rmul__` flipped it in place), which only calls were followed for; the
# rewritten drop raised in its count check.
MASK_TOY = '''

class MaskToy(nn.Module):
    def _record(self, mask):
        mask.logical_not_()  # the figure draws 1 = masked
        return mask

    def __rmul__(self, mask):
        return self._record(mask)

    def __getitem__(self, mask):
        return self._record(mask)

    def __setitem__(self, mask, value):
        self._record(mask)

    def forward(self, x):
        return x
'''
DEPTH = "        depth = sum(stages)\n"
DISCARD = "        if mask is not None:\n            x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(\n"


def _toy(statement: str):
    return {"hiera.py": _edit(_upstream("hiera.py"), (HIERA_HEAD, MASK_TOY + HIERA_HEAD), (DEPTH, "        self.vis = MaskToy()\n" + DEPTH),
                              (DISCARD, DISCARD.replace("            x = x[", f"            {statement}\n            x = x[", 1)))}


HUNT_25 = {
    "an operator": ("shown = mask * self.vis", "`self.vis`"),
    "an item read": ("shown = self.vis[mask]", "`self.vis`"),
    "an item store": ("self.vis[mask] = 1", "`self.vis`"),
    "+= on an alias": ("vis = self.vis; vis += mask", "`vis`"),
    "a torch function": ("shown = torch.logical_and(mask, self.vis)", "`self.vis`"),
    "control: arithmetic on data": ("shown = mask * 1", None),
}


@pytest.mark.parametrize("case", sorted(HUNT_25))
def test_the_mask_handed_to_an_object_by_a_protocol_keeps_the_drop(tmp_path: Path, capsys, case):
    statement, handed = HUNT_25[case]
    pkg = _package(tmp_path, _toy(statement))
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    if handed is None:
        assert drop["applied"], drop
    else:
        assert not drop["applied"] and f"is handed to {handed}" in drop["message"], drop
