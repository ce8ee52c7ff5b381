"""The modules that run when the files are imported, read for patches of their classes (hunt 17b).

HR003 and HR005 rest on methods of the MAE and of Hiera running the defs the files show
(`get_random_mask`, `forward`, `forward_loss`).  Any module that runs when the files are
imported may replace one; the emitted runtime checks look at the type only.  Four holes:
- F1: a subclass in a module the files import (re-exported by the package `__init__`)
  replaces a method by an instance attribute in its `__init__` (`self.forward_loss =
  self.l1_loss`): such stores in those modules were skipped;
- F2: a patch two relative imports away (`__init__` -> `.registry` -> `.masking`): the
  imports of a module found by a relative import were not followed;
- F3: a nested package: Python runs every enclosing package's `__init__.py` first (and the
  base's package's), only the file's own folder's was read;
- F4: a class nested in a def or a `try:` whose base name the statement binds first (a
  local `from .hiera_video import Hiera`) was resolved to the module's binding.
Each is now refused; the controls (the same layout without the patch) keep the fast path."""

import json
import shutil
from pathlib import Path
from typing import Dict, List, Optional

import libcst as cst
import pytest

from hiera_rewrite import cli
from hiera_rewrite.codemods import _calls
from hiera_rewrite.files import sibling_reader
from hiera_rewrite.index import ModuleIndex
from hiera_rewrite.rewrite import PlanContext
from tests.upstream import upstream_dir

INIT_TAIL = "    MaskedAutoencoderHiera,\n)"

CEIL = '''def ceil_random_mask(self, x, mask_ratio):
    """Keep ceil(N * (1 - r)) units (never fewer than asked)."""
    B = x.shape[0]
    num_windows = math.prod(self.mask_spatial_shape)
    len_keep = math.ceil(num_windows * (1 - mask_ratio))
    noise = torch.rand(B, num_windows, device=x.device)
    ids_restore = torch.argsort(torch.argsort(noise, dim=1), dim=1)
    mask = torch.zeros([B, num_windows], device=x.device)
    mask[:, :len_keep] = 1
    return torch.gather(mask, dim=1, index=ids_restore).bool()
'''
MASKING = "import math\n\nimport torch\n\nfrom {hiera} import Hiera\n\n\n" + CEIL + "{patch}"
PATCH = "\n\nHiera.get_random_mask = ceil_random_mask\n"

SUBCLASS = '''import torch

from .hiera_mae import MaskedAutoencoderHiera


class MaskedAutoencoderHieraL1(MaskedAutoencoderHiera):
    """MAE whose pixel loss is picked by a config flag."""

    def __init__(self, *args, loss: str = "l1", **kwargs):
        super().__init__(*args, **kwargs)
        if loss == "l1":
            {store}

    def l1_loss(self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor):
        label = self.get_pixel_label_2d(x, mask)
        pred = pred[mask]
        return (pred - label).abs().mean(), pred, label
'''

VIDEO = '''import torch

from .hiera import Hiera as HieraBase


class Hiera(HieraBase):
    def forward(self, x: torch.Tensor, mask=None, return_intermediates: bool = False):
        return super().forward(x, mask, return_intermediates)
'''
ENCODER = '''class MaskedVideoEncoder(Hiera):
    def forward_masked(self, x: torch.Tensor, mask_ratio: float, mask: Optional[torch.Tensor] = None):
        if mask is None:
            mask = self.get_random_mask(x, mask_ratio)
        _, intermediates = super().forward(x, mask, return_intermediates=True)
        return intermediates[-1], mask
'''


def _upstream(name: str) -> str:
    return (upstream_dir() / name).read_text()


def _init(line: str) -> str:
    """upstream's package `__init__.py`, ``line`` added at its end."""
    init = _upstream("__init__.py")
    assert INIT_TAIL in init
    return init.replace(INIT_TAIL, INIT_TAIL + "\n" + line + "\n", 1)


def _package(tmp_path: Path, files: Dict[str, str], nested: bool = False) -> Path:
    """pkg/: upstream's files (flat; ``nested``: pkg/models/{hiera,hiera_utils,hfhub}.py and
    pkg/mae/hiera_mae.py importing them by `..models.`), then ``files`` (relative path ->
    text) written over them."""
    pkg = tmp_path / "pkg"
    pkg.mkdir(parents=True)
    if nested:
        for sub in ("models", "mae"):
            (pkg / sub).mkdir()
            (pkg / sub / "__init__.py").write_text("")
        (pkg / "__init__.py").write_text("")
        for name in ("hiera.py", "hiera_utils.py", "hfhub.py"):
            shutil.copy(upstream_dir() / name, pkg / "models" / name)
        mae = _upstream("hiera_mae.py")
        for old in ("from .hiera import ", "from .hiera_utils import "):
            assert old in mae
            mae = mae.replace(old, old.replace("from .", "from ..models."))
        (pkg / "mae" / "hiera_mae.py").write_text(mae)
    else:
        for name in ("__init__.py", "hiera.py", "hiera_mae.py", "hiera_utils.py", "hfhub.py"):
            shutil.copy(upstream_dir() / name, pkg / name)
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def _reports(pkg: Path, capsys) -> Dict[str, List[dict]]:
    """The run's reports over the whole package (`hiera-rewrite --check pkg/`), by file."""
    capsys.readouterr()
    cli.main(["--check", "--output-format", "json", "-j", "1", str(pkg)])
    out = json.loads(capsys.readouterr().out)
    return {str(Path(f["path"]).relative_to(pkg)): f["reports"] for f in out["files"]}


def _site(reports: Dict[str, List[dict]], pkg: Path, rel: str, code: str, text: str) -> dict:
    """The report of ``code`` on the line of ``rel`` holding ``text`` (the first such line)."""
    line = next(i for i, t in enumerate((pkg / rel).read_text().splitlines(), 1) if text in t)
    found = [r for r in reports[rel] if r["code"] == code and r["line"] == line]
    assert len(found) == 1, (rel, line, reports[rel])
    return found[0]


ENCODER_CALL = "= super().forward(x, mask, return_intermediates=True)"
DROP = "x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])]"
LOSS_CALL = "return *self.forward_loss(x, pred, ~pred_mask), mask"


def _loss_count(reports, pkg: Path) -> Optional[str]:
    """None where MAE.forward passes the masked count to forward_loss (HR005 applied at
    the call), else every HR005 message of hiera_mae.py (the refusal is reported on
    forward_loss's selection, the call then not at all)."""
    line = next(i for i, t in enumerate((pkg / "hiera_mae.py").read_text().splitlines(), 1) if LOSS_CALL in t)
    if any(r["code"] == "HR005" and r["line"] == line and r["applied"] for r in reports["hiera_mae.py"]):
        return None
    return "\n".join(r["message"] for r in reports["hiera_mae.py"] if r["code"] == "HR005")


def _drop_and_ratio(reports, pkg: Path, mae: str = "hiera_mae.py", hiera: str = "hiera.py"):
    return _site(reports, pkg, hiera, "HR003", DROP), _site(reports, pkg, mae, "HR003", ENCODER_CALL)


# -- F1: `self.<method> = ...` in a module the files import ------------------------------


@pytest.mark.parametrize("store", [
    "self.forward_loss = self.l1_loss",
    'setattr(self, "forward_loss", self.l1_loss)',
    "self.__dict__['forward_loss'] = self.l1_loss",
])
def test_an_instance_attribute_set_by_a_subclass_the_package_imports_stops_hr005(tmp_path: Path, capsys, store):
    files = {"video_mae.py": SUBCLASS.format(store=store), "__init__.py": _init("from .video_mae import MaskedAutoencoderHieraL1")}
    pkg = _package(tmp_path, files)
    loss = _loss_count(_reports(pkg, capsys), pkg)
    assert loss is not None and "in `.video_mae`, a module the files import, may replace MaskedAutoencoderHiera.forward_loss" in loss, loss
    # control: the subclass choosing its loss otherwise (no store of the method's name)
    control = _package(tmp_path / "ctl", {**files, "video_mae.py": SUBCLASS.format(store="self.loss_name = 'l1'")})
    assert _loss_count(_reports(control, capsys), control) is None


def test_an_instance_mask_maker_set_by_a_subclass_the_package_imports_stops_hr003(tmp_path: Path, capsys):
    sub = SUBCLASS.format(store="self.get_random_mask = self.ceil_random_mask").replace(
        "import torch\n", "import math\n\nimport torch\n", 1) + "\n" + "\n".join("    " + line if line else "" for line in CEIL.splitlines()) + "\n"
    files = {"video_mae.py": sub, "__init__.py": _init("from .video_mae import MaskedAutoencoderHieraL1")}
    pkg = _package(tmp_path, files)
    drop, ratio = _drop_and_ratio(_reports(pkg, capsys), pkg)
    assert not drop["applied"] and not ratio["applied"], (drop, ratio)
    assert "`self.get_random_mask = ...` in `.video_mae`" in drop["message"], drop


# -- F2: imports followed transitively, each from its own folder ----------------------------


def test_a_patch_two_relative_imports_away_is_read(tmp_path: Path, capsys):
    files = {
        "__init__.py": _init("from . import registry  # noqa: F401,E402"),
        "registry.py": "from . import masking  # noqa: F401\n",
        "masking.py": MASKING.format(hiera=".hiera", patch=PATCH),
    }
    pkg = _package(tmp_path, files)
    drop, ratio = _drop_and_ratio(_reports(pkg, capsys), pkg)
    assert not drop["applied"] and not ratio["applied"], (drop, ratio)
    assert "`Hiera.get_random_mask = ...` in `.masking`, a module the files import" in drop["message"], drop
    # control: the same modules without the patch keep the fast path
    control = _package(tmp_path / "ctl", {**files, "masking.py": MASKING.format(hiera=".hiera", patch="")})
    drop, ratio = _drop_and_ratio(_reports(control, capsys), control)
    assert drop["applied"] and ratio["applied"], (drop, ratio)


def test_a_patch_of_the_mae_two_relative_imports_away_stops_hr005(tmp_path: Path, capsys):
    losses = (
        "from .hiera_mae import MaskedAutoencoderHiera\n\n\ndef l1_loss(self, x, pred, mask):\n"
        "    return (pred - x).abs().mean(), pred, x\n\n\nMaskedAutoencoderHiera.forward_loss = l1_loss\n"
    )
    init = _init("from . import registry  # noqa: F401,E402")
    pkg = _package(tmp_path, {"__init__.py": init, "registry.py": "from . import losses  # noqa: F401\n", "losses.py": losses})
    loss = _loss_count(_reports(pkg, capsys), pkg)
    assert loss is not None and "`MaskedAutoencoderHiera.forward_loss = ...` in `.losses`" in loss, loss


def test_a_package_imported_runs_its_init(tmp_path: Path, capsys):
    """`from . import strategies`, a package (strategies/__init__.py) whose `__init__`
    imports the patch from its own folder (`.ceil` is strategies/ceil.py)."""
    init = _init("from . import strategies  # noqa: F401,E402")
    files = {
        "__init__.py": init,
        "strategies/__init__.py": "from .ceil import ceil_random_mask  # noqa: F401\n",
        "strategies/ceil.py": MASKING.format(hiera="..hiera", patch=PATCH),
        "ceil.py": MASKING.format(hiera=".hiera", patch=""),  # a decoy beside the files
    }
    pkg = _package(tmp_path, files)
    drop, ratio = _drop_and_ratio(_reports(pkg, capsys), pkg)
    assert not drop["applied"] and not ratio["applied"], (drop, ratio)
    assert "in `.strategies.ceil`, a module the files import" in drop["message"], drop


def test_more_modules_than_the_walk_reads_refuse(tmp_path: Path, capsys):
    """A chain longer than the walk's bound: the proof stops with it (the module past the
    bound may be the patch), naming why."""
    limit = getattr(_calls, "MODULE_LIMIT", 64)
    n = limit + 4
    init = _init("from . import m0  # noqa: F401,E402")
    files = {"__init__.py": init, **{f"m{i}.py": f"from . import m{i + 1}  # noqa: F401\n" for i in range(n)}}
    files[f"m{n}.py"] = "X = 1\n"
    pkg = _package(tmp_path, files)
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    assert not drop["applied"]
    # (the folder itself holds more modules than the subclass search reads: that stops it first)
    assert f"more than {limit} modules run when the files are imported: not all are read" in drop["message"] or (
        f"folder holds more than {limit} modules" in drop["message"]), drop


# -- F3: every enclosing package's `__init__` ---------------------------------------------


def test_a_patch_in_the_top_package_init_is_read(tmp_path: Path, capsys):
    top = "from .models.hiera import Hiera  # noqa: F401\nfrom . import masking  # noqa: F401\n"
    pkg = _package(tmp_path, {"__init__.py": top, "masking.py": MASKING.format(hiera=".models.hiera", patch=PATCH)}, nested=True)
    drop, ratio = _drop_and_ratio(_reports(pkg, capsys), pkg, mae="mae/hiera_mae.py", hiera="models/hiera.py")
    assert not drop["applied"] and not ratio["applied"], (drop, ratio)
    assert "`Hiera.get_random_mask = ...` in `..masking`" in drop["message"], drop
    control = _package(tmp_path / "ctl", {"__init__.py": top, "masking.py": MASKING.format(hiera=".models.hiera", patch="")}, nested=True)
    drop, ratio = _drop_and_ratio(_reports(control, capsys), control, mae="mae/hiera_mae.py", hiera="models/hiera.py")
    assert drop["applied"] and ratio["applied"], (drop, ratio)


def test_a_patch_in_the_base_package_init_is_read(tmp_path: Path, capsys):
    """pkg/models/__init__.py wraps Hiera.forward: hiera_mae.py (in pkg/mae/) imports
    `..models.hiera`, which runs pkg/models/__init__.py first."""
    wrap = (
        "from .hiera import Hiera\n\n_forward = Hiera.forward\n\n\n"
        "def _recording(self, x, mask=None, return_intermediates=False):\n"
        "    return _forward(self, x, mask, return_intermediates)\n\n\nHiera.forward = _recording\n"
    )
    pkg = _package(tmp_path, {"models/__init__.py": wrap}, nested=True)
    ratio = _site(_reports(pkg, capsys), pkg, "mae/hiera_mae.py", "HR003", ENCODER_CALL)
    assert not ratio["applied"], ratio
    # the proof's own step (another may refuse first): Hiera.forward, as the MAE's file finds it
    path = pkg / "mae" / "hiera_mae.py"
    ctx = PlanContext(ModuleIndex(cst.parse_module(path.read_bytes())), "HR003", lambda s, i: None, siblings=sibling_reader(path))
    found = _calls.resolve_class(ctx, ctx.module, "Hiera")
    assert found is not None
    why = _calls.replaced(ctx, found[0], found[1], "forward")
    assert why is not None and "`Hiera.forward = ...` in `..models.__init__`" in why, why


# -- F4: a nested class's base, bound by the statement holding it ---------------------------


@pytest.mark.parametrize("holder", ["def", "try"])
def test_a_base_bound_in_the_statement_holding_the_class_is_not_resolved(tmp_path: Path, capsys, holder):
    indented = "\n".join("    " + line if line else "" for line in ENCODER.splitlines())
    if holder == "def":
        extra = "\n\ndef video_encoder_class():\n    from .hiera_video import Hiera\n\n" + indented + "\n\n    return MaskedVideoEncoder\n"
    else:
        extra = "\n\ntry:\n    from .hiera_video import Hiera\n\n" + indented + "\nexcept ImportError:\n    MaskedVideoEncoder = None\n"
    mae = _upstream("hiera_mae.py")
    anchor = "\n\n# Image Models\n"
    assert anchor in mae
    pkg = _package(tmp_path, {"hiera_video.py": VIDEO, "hiera_mae.py": mae.replace(anchor, extra + anchor, 1)})
    reports = _reports(pkg, capsys)
    lines = [i for i, t in enumerate((pkg / "hiera_mae.py").read_text().splitlines(), 1) if ENCODER_CALL in t]
    assert len(lines) == 2
    first, nested = ([r for r in reports["hiera_mae.py"] if r["code"] == "HR003" and r["line"] == n][0] for n in lines)
    assert first["applied"], first  # MaskedAutoencoderHiera: hiera.Hiera, rewritten
    assert not nested["applied"], nested
    assert "is not found" in nested["message"], nested
    # control: the same class on the module's Hiera (no binding of its own) is resolved
    plain = "\n\ndef video_encoder_class():\n" + indented + "\n\n    return MaskedVideoEncoder\n"
    pkg = _package(tmp_path / "ctl", {"hiera_video.py": VIDEO, "hiera_mae.py": mae.replace(anchor, plain + anchor, 1)})
    reports = _reports(pkg, capsys)
    lines = [i for i, t in enumerate((pkg / "hiera_mae.py").read_text().splitlines(), 1) if ENCODER_CALL in t]
    assert all(r["applied"] for r in reports["hiera_mae.py"] if r["code"] == "HR003" and r["line"] in lines)


def test_a_parameter_named_like_the_base_is_not_the_module_binding(tmp_path: Path, capsys):
    indented = "\n".join("    " + line if line else "" for line in ENCODER.splitlines())
    extra = "\n\ndef video_encoder_class(Hiera):\n" + indented + "\n\n    return MaskedVideoEncoder\n"
    mae = _upstream("hiera_mae.py")
    anchor = "\n\n# Image Models\n"
    pkg = _package(tmp_path, {"hiera_mae.py": mae.replace(anchor, extra + anchor, 1)})
    reports = _reports(pkg, capsys)
    lines = [i for i, t in enumerate((pkg / "hiera_mae.py").read_text().splitlines(), 1) if ENCODER_CALL in t]
    nested = [r for r in reports["hiera_mae.py"] if r["code"] == "HR003" and r["line"] == lines[1]][0]
    assert not nested["applied"] and "is not found" in nested["message"], nested


# -- hunt 17e M3: a module found elsewhere reads its own imports ------------------------------
# (peasant98/DenseTact-Model: hiera_mae.py imports `.hiera_layers.hiera`, whose PatchEmbed
# calls do_masked_conv from its own `.hiera_utils`: not followed, so the ratio was refused as
# "may keep it"; now read from that module's folder, a keeping helper there still refuses)
KEEPING = "_SEEN = []\n\n\ndef do_masked_conv("


@pytest.mark.parametrize("keeps", [False, True], ids=["reads", "keeps"])
def test_an_encoder_in_a_subfolder_has_its_own_imports_read(tmp_path: Path, capsys, keeps: bool):
    utils = _upstream("hiera_utils.py")
    if keeps:
        old = "    if mask is None:\n        return conv(x)\n"
        assert utils.count(old) == 1 and utils.count("def do_masked_conv(") == 1
        utils = utils.replace("def do_masked_conv(", KEEPING).replace(old, old + "    _SEEN.append(mask)\n")
    pkg = _package(tmp_path, {"models/hiera_utils.py": utils}, nested=True)
    reports = _reports(pkg, capsys)
    ratio = _site(reports, pkg, "mae/hiera_mae.py", "HR003", ENCODER_CALL)
    assert ratio["applied"] != keeps, ratio
    drop = _site(reports, pkg, "models/hiera.py", "HR003", DROP)
    assert drop["applied"] != keeps, drop
    if keeps:
        assert "`_SEEN.append(mask)`" in drop["message"], drop
