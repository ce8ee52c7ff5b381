"""The classes a file derives from, through the modules it imports them from (hunt 10).

HR003 passes the MAE's mask ratio to the `Hiera.forward` that `super().forward` reaches,
whose token drop then takes get_random_mask's kept count.  That holds only for the Hiera
the MAE's `class` statement names, with its get_random_mask as its module shows it:
- a module the MAE imports Hiera through (a re-export, `from .backbones import Hiera`)
  may patch the class on import (`Hiera.get_random_mask = ceil_random_mask`);
- a name bound again after the class statement (`from .hiera_fast import Hiera` at the
  end of the module, for a second MAE) is not the first class's base."""

from typing import Dict, Optional

import pytest

from hiera_rewrite.engine import rewrite_bytes
from tests.upstream import upstream_dir

BACKBONES = '''import math

import torch

from .hiera import Hiera, HieraBlock


def ceil_random_mask(self, x, mask_ratio):
    """Keep ceil(N * (1 - r)) units (never fewer than asked)."""
    B = x.shape[0]
    num_windows = math.prod(self.mask_spatial_shape)
    len_keep = math.ceil(num_windows * (1 - mask_ratio))
    noise = torch.rand(B, num_windows, device=x.device)
    ids_restore = torch.argsort(torch.argsort(noise, dim=1), dim=1)
    mask = torch.zeros([B, num_windows], device=x.device)
    mask[:, :len_keep] = 1
    return torch.gather(mask, dim=1, index=ids_restore).bool()
{patch}'''
PATCH = "\n\nHiera.get_random_mask = ceil_random_mask\n"
IMPORT = "from .hiera import Hiera, HieraBlock\n"
SECOND_MAE = '''

from .hiera_fast import Hiera  # the rewritten backbone, for a second MAE


class MaskedAutoencoderHieraV2(Hiera):
    pass
'''


def _upstream(name: str) -> bytes:
    return (upstream_dir() / name).read_bytes()


def _rewritten_hiera() -> bytes:
    def read(name: str) -> Optional[bytes]:
        path = upstream_dir() / (name.lstrip(".") + ".py")
        return path.read_bytes() if path.is_file() else None

    return rewrite_bytes(_upstream("hiera.py"), siblings=read).output


def _encoder_report(mae: str, modules: Dict[str, bytes]):
    """hiera_mae.py's HR003 report on forward_encoder's `super().forward(...)`, the
    modules beside it as given (hiera.py, as this run rewrites it, by default)."""
    hiera = _rewritten_hiera()
    beside = {"hiera": hiera, "hiera_utils": _upstream("hiera_utils.py"), **modules}

    def read(name: str) -> Optional[bytes]:
        return beside.get(name.lstrip("."))

    result = rewrite_bytes(mae.encode(), siblings=read)
    line = next(i for i, text in enumerate(mae.splitlines(), 1) if "= super().forward(x, mask, return_intermediates=True)" in text)
    return next(r for r in result.reports if r.code == "HR003" and r.line == line)


def test_a_patch_in_the_module_the_mae_imports_hiera_through_is_seen():
    mae = _upstream("hiera_mae.py").decode()
    assert IMPORT in mae
    mae = mae.replace(IMPORT, IMPORT.replace(".hiera", ".backbones"))
    plain = _encoder_report(mae, {"backbones": BACKBONES.format(patch="").encode()})
    assert plain.applied, plain.message  # the re-export alone is followed
    patched = _encoder_report(mae, {"backbones": BACKBONES.format(patch=PATCH).encode()})
    assert not patched.applied
    assert "`Hiera.get_random_mask = ...`" in patched.message and "replace Hiera.get_random_mask" in patched.message


def test_a_base_is_the_binding_where_the_class_statement_runs():
    mae = _upstream("hiera_mae.py").decode()
    fast = _rewritten_hiera()
    # hiera.py stays as it is (a reference copy); hiera_fast.py is the rewritten one
    modules = {"hiera": _upstream("hiera.py"), "hiera_fast": fast}
    both = _encoder_report(mae + SECOND_MAE, modules)
    assert not both.applied, both.message  # MaskedAutoencoderHiera derives from hiera.Hiera
    assert "does not take random_mask_ratio" in both.message
    # control: the first class on hiera_fast's Hiera takes it
    moved = _encoder_report(mae.replace(IMPORT, IMPORT.replace(".hiera", ".hiera_fast")), modules)
    assert moved.applied, moved.message


MASKING = BACKBONES.replace("from .hiera import Hiera, HieraBlock\n", "from .hiera import Hiera\n")
LOSSES = '''from .hiera_mae import MaskedAutoencoderHiera


def l1_loss(self, x, mask):
    return (self.forward_encoder(x, 0.5)[0].abs().mean(), None, None, None)
{patch}'''


def test_a_patch_in_any_module_the_files_import_is_seen():
    """hunt 12: `from . import masking` in hiera_mae.py, whose import replaces
    Hiera.get_random_mask (it is not the module Hiera is imported through)."""
    mae = _upstream("hiera_mae.py").decode().replace(IMPORT, IMPORT + "from . import masking  # noqa: F401\n")
    plain = _encoder_report(mae, {"masking": MASKING.format(patch="").encode()})
    assert plain.applied, plain.message
    patched = _encoder_report(mae, {"masking": MASKING.format(patch=PATCH).encode()})
    assert not patched.applied
    assert "`Hiera.get_random_mask = ...` in `.masking`, a module the files import" in patched.message, patched.message


def test_a_patch_of_the_mae_in_a_module_it_imports_stops_hr005():
    mae = _upstream("hiera_mae.py").decode() + "\n\nfrom . import losses  # noqa: E402,F401\n"
    hiera = _rewritten_hiera()

    def reports(patch: str):
        beside = {"hiera": hiera, "hiera_utils": _upstream("hiera_utils.py"), "losses": LOSSES.format(patch=patch).encode()}
        result = rewrite_bytes(mae.encode(), siblings=lambda name: beside.get(name.lstrip(".")))
        return [r for r in result.reports if r.code == "HR005"]

    assert all(r.applied for r in reports("")), reports("")
    patched = reports("\n\nMaskedAutoencoderHiera.forward_loss = l1_loss\n")
    assert not all(r.applied for r in patched)
    assert any("`MaskedAutoencoderHiera.forward_loss = ...` in `.losses`" in r.message for r in patched), patched


# hunt 14a: the patch reached the files by forms the scan did not follow (each applied on 12bbd5e,
# and the rewritten MAE step then raised in kept_tokens' check: ceil keeps one unit more)
PATCH_FORMS = {
    "an absolute import of the package's module": (
        "import pkg.masking  # noqa: F401\n", {"pkg.masking": MASKING.format(patch=PATCH)},
        "in `pkg.masking`",
    ),
    "`from pkg import masking`": (
        "from pkg import masking  # noqa: F401\n", {"pkg.masking": MASKING.format(patch=PATCH)},
        "in `pkg.masking`",
    ),
    "the class imported under another name": (
        "from . import masking  # noqa: F401\n",
        {"masking": MASKING.replace("from .hiera import Hiera\n", "from .hiera import Hiera as HieraBase\n").format(
            patch="\n\nHieraBase.get_random_mask = ceil_random_mask\n")},
        "`HieraBase.get_random_mask = ...` in `.masking`",
    ),
    "a loop over classes": (
        "from . import masking  # noqa: F401\n",
        {"masking": MASKING.format(patch="\n\nfor _cls in (Hiera,):\n    _cls.get_random_mask = ceil_random_mask\n")},
        "`_cls.get_random_mask = ...` in `.masking`",
    ),
    "the class handed over in a list": (
        "from .masking import use_ceil_masking\n\nuse_ceil_masking([Hiera])\n",
        {"masking": MASKING.format(patch="\n\ndef use_ceil_masking(classes):\n    for cls in classes:\n        cls.get_random_mask = ceil_random_mask\n")},
        "`use_ceil_masking([Hiera])`",
    ),
}


@pytest.mark.parametrize("name", sorted(PATCH_FORMS))
def test_a_patch_reaching_the_files_by_any_import_form_is_seen(name):
    imports, modules, quoted = PATCH_FORMS[name]
    mae = _upstream("hiera_mae.py").decode().replace(IMPORT, IMPORT + imports)
    report = _encoder_report(mae, {k: v.encode() for k, v in modules.items()})
    assert not report.applied and quoted in report.message, report.message
    if "use_ceil_masking" not in imports:  # the same module without its patch keeps the fast path
        assert _encoder_report(mae, {k: MASKING.format(patch="").encode() for k in modules}).applied
