"""What `self.<method>(...)` given the mask runs, and which modules the walk reads (hunts
18b, 19b, 19c).  Each case made the rewritten step raise in kept_tokens' or masked_rows'
check where the original ran (under torch.compile, which drops the check, other rows were
selected); each now keeps the original statement, with the reason:

- 19c F1: a method drawing its own mask hands it to a hook (`self.prepare_mask(mask)`)
  that a subclass overrides (in hiera.py or hiera_mae.py), that `__init__` replaces on the
  instance, or a forward pre-hook registered in hiera_mae.py writes;
- 19c F2: the hook reached through a helper (`self.embed_tokens(x, mask)`), overridden by
  the MAE: only the names Hiera.forward reads itself were checked;
- 19c F3: an inherited helper's `self.prepare_mask` resolved against the helper's class,
  not the subclass whose method dropped the tokens;
- 19c F4: `yield mask` before the drop (the caller runs in between);
- 19c R1: a drop inside the `if mask is None:` block drawing the mask was reported
  rewritten, but the block was rebuilt from its original lines (kept as it was);
- 18b F2: a subclass of the MAE in a third module overriding such a hook;
- 18b F6: `from .plugins import *` importing the submodules `__all__` names;
- 18b F7: a flat layout's `from utils import masking` (a folder beside the file);
- 18b F8: `torch.nn.Module.__setattr__(self, "forward_loss", f)`;
- 18b F11: a file rewritten from stdin, whose package's modules are unknown;
- 19b F1: forward_decoder returning `mask.view(torch.uint8)` (a dtype view: `~` is bitwise).
The controls (the same layouts without the hazard) keep the fast path."""

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from hiera_rewrite import cli
from tests.test_module_reach import CEIL, DROP, ENCODER_CALL, INIT_TAIL, MASKING, PATCH, SUBCLASS, _init, _loss_count, _package, _reports, _site, _upstream
from tests.upstream import upstream_dir

POS_EMBED = "    def get_pos_embed(self) -> torch.Tensor:\n"
IMAGE_MODELS = "\n\n# Image models\n"
HOOK = '''    def prepare_mask(self, mask: torch.Tensor) -> None:
        """Hook: adjust the unit mask in place before tokens are dropped (default: nothing)."""
        return None

'''
KEEP_CENTRE = '''    def prepare_mask(self, mask: torch.Tensor) -> None:
        mask[:, mask.shape[1] // 2] = True

'''
MASKED = '''    def forward_masked(self, x: torch.Tensor, mask_ratio: float):
        mask = self.get_random_mask(x, mask_ratio)
        self.prepare_mask(mask)
        x = self.patch_embed(x, mask=mask.view(x.shape[0], 1, *self.mask_spatial_shape))
        x = self.unroll(x + self.get_pos_embed())
        x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return x, mask

'''
UNCHECKED_METHOD = "is a method: a subclass anywhere may override it"
MASKED_DROP = "x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])"
EMBED_OLD = '''        x = self.patch_embed(
            x,
            mask=mask.view(
                x.shape[0], 1, *self.mask_spatial_shape
            )  # B, C, *mask_spatial_shape
            if mask is not None
            else None,
        )
        x = x + self.get_pos_embed()
        x = self.unroll(x)
'''
EMBED = '''    def embed_tokens(self, x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """Patch and position embedding, unrolled."""
        if mask is not None:
            self.prepare_mask(mask)
        x = self.patch_embed(x, mask=mask.view(x.shape[0], 1, *self.mask_spatial_shape) if mask is not None else None)
        return self.unroll(x + self.get_pos_embed())

'''
PRE_HOOK = '''

def _show_centre_unit(module, args, kwargs):
    flat = kwargs["mask"].view(kwargs["mask"].shape[0], -1)
    flat[:, flat.shape[1] // 2] = True
'''


def _edit(text: str, *edits) -> str:
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _hiera(*edits) -> str:
    return _edit(_upstream("hiera.py"), *edits)


def _sub(name: str, body: str, base: str = "Hiera") -> str:
    """A subclass, put where IMAGE_MODELS was."""
    return f"\n\nclass {name}({base}):\n{body.rstrip()}\n{IMAGE_MODELS}"


# -- 19c F1: a method drawing its own mask hands it to a hook ------------------------------


@pytest.mark.parametrize("hazard", [None, "subclass here", "subclass in hiera_mae.py", "instance attribute", "pre-hook in hiera_mae.py"])
def test_a_hook_given_a_drawn_mask_is_followed_to_what_self_may_run(tmp_path: Path, capsys, hazard):
    hiera = _hiera((POS_EMBED, HOOK + MASKED + POS_EMBED))
    mae = _upstream("hiera_mae.py")
    if hazard == "subclass here":
        hiera = _edit(hiera, (IMAGE_MODELS, _sub("KeepCentreHiera", KEEP_CENTRE)))
    elif hazard == "subclass in hiera_mae.py":
        mae = mae + _sub("KeepCentreHiera", KEEP_CENTRE)
    elif hazard == "instance attribute":
        hiera = _edit(
            hiera,
            ("        sep_pos_embed: bool = False,\n", "        sep_pos_embed: bool = False,\n        keep_centre: bool = False,\n"),
            ("        self.sep_pos_embed = sep_pos_embed\n",
             "        self.sep_pos_embed = sep_pos_embed\n        if keep_centre:\n            self.prepare_mask = self._keep_centre\n"),
            (POS_EMBED, KEEP_CENTRE.replace("prepare_mask", "_keep_centre") + POS_EMBED),
        )
    elif hazard == "pre-hook in hiera_mae.py":
        mae = _edit(
            mae,
            ("        self.initialize_weights()\n",
             "        self.initialize_weights()\n        self.patch_embed.register_forward_pre_hook(_show_centre_unit, with_kwargs=True)\n"),
        ) + PRE_HOOK
    pkg = _package(tmp_path, {"hiera.py": hiera, "hiera_mae.py": mae})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", MASKED_DROP)
    # overridden or not: a method is not followed (a subclass anywhere may override it)
    assert not drop["applied"] and "self.prepare_mask(mask)" in drop["message"], drop
    if hazard is None:
        assert UNCHECKED_METHOD in drop["message"], drop


# -- 19c F2, F3: the hook reached through a helper --------------------------------------------


def test_a_hook_reached_through_a_helper_and_overridden_by_the_mae_stops_the_drop_and_the_ratio(tmp_path: Path, capsys):
    hiera = _hiera((EMBED_OLD, "        x = self.embed_tokens(x, mask)\n"), (POS_EMBED, HOOK + EMBED + POS_EMBED))
    files = {"hiera.py": hiera, "hiera_mae.py": _edit(_upstream("hiera_mae.py"), ("    def forward_encoder(\n", KEEP_CENTRE + "    def forward_encoder(\n"))}
    pkg = _package(tmp_path, files)
    reports = _reports(pkg, capsys)
    drop, ratio = _site(reports, pkg, "hiera.py", "HR003", DROP), _site(reports, pkg, "hiera_mae.py", "HR003", ENCODER_CALL)
    assert not drop["applied"] and not ratio["applied"], (drop, ratio)
    assert "self.embed_tokens(x, mask)" in drop["message"] and UNCHECKED_METHOD in drop["message"], drop
    # the same helper, the hook not overridden: refused as well (an override elsewhere is not seen)
    control = _package(tmp_path / "ctl", {"hiera.py": hiera})
    reports = _reports(control, capsys)
    assert not _site(reports, control, "hiera.py", "HR003", DROP)["applied"]
    assert not _site(reports, control, "hiera_mae.py", "HR003", ENCODER_CALL)["applied"]


def test_an_inherited_helper_calls_the_hook_of_the_subclass_that_drops(tmp_path: Path, capsys):
    masked = MASKED.replace(
        "        self.prepare_mask(mask)\n        x = self.patch_embed(x, mask=mask.view(x.shape[0], 1, *self.mask_spatial_shape))\n"
        "        x = self.unroll(x + self.get_pos_embed())\n",
        "        x = self.embed_tokens(x, mask)\n",
    )
    assert masked != MASKED
    hiera = _hiera((POS_EMBED, HOOK + EMBED + POS_EMBED), (IMAGE_MODELS, _sub("KeepCentreHiera", KEEP_CENTRE + masked)))
    pkg = _package(tmp_path, {"hiera.py": hiera})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", MASKED_DROP)
    assert not drop["applied"] and "self.embed_tokens(x, mask)" in drop["message"], drop
    control = _package(tmp_path / "ctl", {"hiera.py": _hiera((POS_EMBED, HOOK + EMBED + POS_EMBED), (IMAGE_MODELS, _sub("MaskedHiera", masked)))})
    assert not _site(_reports(control, capsys), control, "hiera.py", "HR003", MASKED_DROP)["applied"]


# -- 19c F4, R1 ---------------------------------------------------------------------------------


def test_a_generator_yielding_the_mask_before_the_drop_keeps_it(tmp_path: Path, capsys):
    stages = MASKED.replace("forward_masked", "forward_stages").replace("        self.prepare_mask(mask)\n", "        yield mask\n")
    stages = stages.replace("        return x, mask\n", "        yield x\n")
    pkg = _package(tmp_path, {"hiera.py": _hiera((POS_EMBED, stages + POS_EMBED))})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", MASKED_DROP)
    assert not drop["applied"] and "suspends at `yield mask`" in drop["message"], drop


def test_a_drop_inside_the_block_drawing_the_mask_is_reported_as_it_is_written(tmp_path: Path, capsys):
    method = '''    def forward_masked(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, mask_ratio: float = 0.6):
        x = self.unroll(self.patch_embed(x) + self.get_pos_embed())
        if mask is None:
            mask = self.get_random_mask(x, mask_ratio)
            x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return x

'''
    pkg = _package(tmp_path, {"hiera.py": _hiera((POS_EMBED, method + POS_EMBED))})
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", MASKED_DROP)
    cli.main(["-q", str(pkg / "hiera.py")])
    kept = MASKED_DROP in (pkg / "hiera.py").read_text()
    assert drop["applied"] != kept, (drop, kept)  # what the report says is what the file holds


# -- 18b F2: a subclass of the MAE in a third module overriding the hook -----------------------


@pytest.mark.parametrize("imported", [True, False], ids=["imported", "beside"])
def test_a_subclass_of_the_mae_elsewhere_overriding_a_hook_forward_calls_stops_the_ratio(tmp_path: Path, capsys, imported):
    call = "        if mask is not None:\n            self.prepare_mask(mask)\n\n        # Discard masked tokens\n"
    hiera = _hiera((POS_EMBED, HOOK + POS_EMBED), ("        # Discard masked tokens\n", call))
    keep = "import torch\n\nfrom .hiera_mae import MaskedAutoencoderHiera\n\n\nclass KeepCentreMAE(MaskedAutoencoderHiera):\n" + KEEP_CENTRE
    files = {"hiera.py": hiera, "keep_mae.py": keep}
    if imported:
        files["__init__.py"] = _init("from .keep_mae import KeepCentreMAE")
    pkg = _package(tmp_path, files)
    ratio = _site(_reports(pkg, capsys), pkg, "hiera_mae.py", "HR003", ENCODER_CALL)
    assert not ratio["applied"], ratio
    control = _package(tmp_path / "ctl", {"hiera.py": hiera, "keep_mae.py": keep.replace("prepare_mask", "log_mask")})
    drop = _site(_reports(control, capsys), control, "hiera.py", "HR003", DROP)
    assert not drop["applied"] and UNCHECKED_METHOD in drop["message"], drop  # the hook: a method


# -- 18b F6: a star import of a package whose __all__ names its submodules -----------------------


@pytest.mark.parametrize("names", ['["masking"]', "[]", "sorted(PLUGINS)"])
def test_a_star_import_reads_the_submodules_all_names(tmp_path: Path, capsys, names):
    files = {
        "__init__.py": _init("from .plugins import *  # noqa: F401,F403"),
        "plugins/__init__.py": f'PLUGINS = {{"masking"}}\n__all__ = {names}\n',
        "plugins/masking.py": MASKING.format(hiera="..hiera", patch=PATCH),
    }
    pkg = _package(tmp_path, files)
    drop = _site(_reports(pkg, capsys), pkg, "hiera.py", "HR003", DROP)
    assert drop["applied"] == (names == "[]"), drop
    if names == '["masking"]':
        assert "`Hiera.get_random_mask = ...` in `.plugins.masking`" in drop["message"], drop
    elif names != "[]":
        assert "`__all__` of `.plugins`" in drop["message"], drop


# -- 18b F7: layouts without a package around the files ------------------------------------------


def _flat(root: Path, plain: bool = True) -> Path:
    """root/: upstream's files importing each other by plain names (a research repo's
    flat layout, no `__init__.py`)."""
    root.mkdir(parents=True)
    for name in ("hiera.py", "hiera_mae.py", "hiera_utils.py", "hfhub.py"):
        text = (upstream_dir() / name).read_text()
        for module in ("hiera_utils", "hfhub", "hiera"):
            text = text.replace(f"from .{module} import", f"from {module} import")
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("patch", [PATCH, ""], ids=["patched", "control"])
def test_a_flat_layout_reads_a_package_beside_the_files(tmp_path: Path, capsys, patch):
    proj = _flat(tmp_path / "proj")
    (proj / "utils").mkdir()
    (proj / "utils" / "__init__.py").write_text("")
    (proj / "utils" / "masking.py").write_text(MASKING.format(hiera="hiera", patch=patch))
    mae = (proj / "hiera_mae.py").read_text()
    anchor = "from hiera_utils import pretrained_model, undo_windowing, conv_nd\n"
    (proj / "hiera_mae.py").write_text(_edit(mae, (anchor, anchor + "from utils import masking  # noqa: F401\n")))
    reports = _reports(proj, capsys)
    ratio = _site(reports, proj, "hiera_mae.py", "HR003", ENCODER_CALL)
    assert ratio["applied"] == (not patch), ratio
    if patch:
        assert "in `utils.masking`, a module the files import" in ratio["message"], ratio


def test_packages_side_by_side_under_a_repo_root_are_read(tmp_path: Path, capsys):
    """repo/backbones/hiera.py and repo/mae/hiera_mae.py (`from backbones.hiera import
    Hiera`): the MAE's base is found, and gets the ratio (it was refused, not found)."""
    repo = tmp_path / "repo"
    for sub in ("backbones", "mae"):
        (repo / sub).mkdir(parents=True)
        (repo / sub / "__init__.py").write_text("")
    for name in ("hiera.py", "hiera_utils.py", "hfhub.py"):
        shutil.copy(upstream_dir() / name, repo / "backbones" / name)
    mae = _upstream("hiera_mae.py").replace("from .hiera import", "from backbones.hiera import").replace("from .hiera_utils import", "from backbones.hiera_utils import")
    (repo / "mae" / "hiera_mae.py").write_text(mae)
    ratio = _site(_reports(repo, capsys), repo, "mae/hiera_mae.py", "HR003", ENCODER_CALL)
    assert ratio["applied"], ratio


# -- 18b F8 --------------------------------------------------------------------------------------


def test_an_unbound_module_setattr_of_the_loss_stops_hr005(tmp_path: Path, capsys):
    store = 'torch.nn.Module.__setattr__(self, "forward_loss", self.l1_loss)'
    files = {"l1_mae.py": SUBCLASS.format(store=store), "__init__.py": _init("from .l1_mae import MaskedAutoencoderHieraL1")}
    pkg = _package(tmp_path, files)
    loss = _loss_count(_reports(pkg, capsys), pkg)
    assert loss is not None and "in `.l1_mae`, a module the files import, may replace MaskedAutoencoderHiera.forward_loss" in loss, loss
    # control: another attribute set so
    control = _package(tmp_path / "ctl", {**files, "l1_mae.py": SUBCLASS.format(store=store.replace('"forward_loss"', '"loss_name"'))})
    assert _loss_count(_reports(control, capsys), control) is None


# -- 18b F11: stdin ------------------------------------------------------------------------------


def _stdin_reports(monkeypatch, capsys, data: bytes, *args: str):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    capsys.readouterr()
    cli.main(["--check", "--output-format", "json", *args, "-"])
    return json.loads(capsys.readouterr().out)["files"][0]


def test_from_stdin_the_claims_about_the_package_are_not_made_unless_its_path_is_given(tmp_path: Path, capsys, monkeypatch):
    pkg = _package(tmp_path, {"__init__.py": _init("from .hiera_mae import MaskedAutoencoderHiera as _M\n_M.forward_loss = _M.forward_loss")})
    data = (pkg / "hiera_mae.py").read_bytes()
    line = next(i for i, t in enumerate(data.decode().splitlines(), 1) if "return *self.forward_loss(x, pred, ~pred_mask), mask" in t)

    def loss_call(found):
        return [r for r in found["reports"] if r["code"] == "HR005" and r["line"] == line and r["applied"]]

    unplaced = _stdin_reports(monkeypatch, capsys, data)
    assert unplaced["path"] == "<stdin>" and not loss_call(unplaced), unplaced
    assert any("read from stdin" in r["message"] for r in unplaced["reports"]), unplaced
    placed = _stdin_reports(monkeypatch, capsys, data, "--stdin-filename", str(pkg / "hiera_mae.py"))
    assert placed["path"] == str(pkg / "hiera_mae.py") and not loss_call(placed)  # the patch in __init__ is read
    assert any("in `__init__`, a module the files import" in r["message"] for r in placed["reports"]), placed
    clean = _package(tmp_path / "ctl", {})
    placed = _stdin_reports(monkeypatch, capsys, data, "--stdin-filename", str(clean / "hiera_mae.py"))
    assert loss_call(placed), placed


# -- 19b F1: a dtype view of the decoder's mask ---------------------------------------------------


@pytest.mark.parametrize("view", ["mask.view(torch.uint8)", "mask.view(dtype=torch.int8)", "mask.view(x.shape[0], -1)", "mask.view(-1, mask.shape[1])"])
def test_a_dtype_view_of_the_returned_mask_stops_the_count(tmp_path: Path, capsys, view):
    old = "        mask = mask.view(x.shape[0], -1)\n"
    mae = _edit(_upstream("hiera_mae.py"), (old, old + f"        mask = {view}\n"))
    pkg = _package(tmp_path, {"hiera_mae.py": mae})
    loss = _loss_count(_reports(pkg, capsys), pkg)
    assert (loss is None) == ("dtype" not in view and "uint8" not in view), loss


# -- hunt 20a: the receivers' frontier again -------------------------------------------------------

HOOK_CALL = "        if mask is not None:\n            self.prepare_mask(mask)\n\n        # Discard masked tokens\n"


def _hooked_hiera() -> str:
    return _hiera((POS_EMBED, HOOK + POS_EMBED), ("        # Discard masked tokens\n", HOOK_CALL))


def _reports_of(root: Path, capsys, *files: str):
    """The run's reports over ``files`` only (the rest of the folder is read, not planned)."""
    capsys.readouterr()
    cli.main(["--check", "--output-format", "json", "-j", "1", *(str(root / f) for f in files)])
    out = json.loads(capsys.readouterr().out)
    return {str(Path(f["path"]).relative_to(root)): f["reports"] for f in out["files"]}


@pytest.mark.parametrize("how", ["override", "patch"])
def test_in_the_nested_layout_the_mae_overriding_a_hook_of_a_helper_stops_the_ratio(tmp_path: Path, capsys, how):
    """F1: hiera.py found far from the planned MAE (`..models.hiera`): its self calls are
    checked against the planned file's folder and imports too (the MAE overriding the
    hook, or its file patching it on Hiera)."""
    hiera = _hiera((EMBED_OLD, "        x = self.embed_tokens(x, mask)\n"), (POS_EMBED, HOOK + EMBED + POS_EMBED))
    pkg = _package(tmp_path, {"models/hiera.py": hiera}, nested=True)
    mae = (pkg / "mae" / "hiera_mae.py").read_text()
    if how == "override":
        mae = _edit(mae, ("    def forward_encoder(\n", KEEP_CENTRE + "    def forward_encoder(\n"))
    else:
        mae += "\n\ndef _keep_centre(self, mask):\n    mask[:, mask.shape[1] // 2] = True\n\n\nHiera.prepare_mask = _keep_centre\n"
    (pkg / "mae" / "hiera_mae.py").write_text(mae)
    ratio = _site(_reports(pkg, capsys), pkg, "mae/hiera_mae.py", "HR003", ENCODER_CALL)
    assert not ratio["applied"], ratio
    control = _package(tmp_path / "ctl", {"models/hiera.py": hiera}, nested=True)
    assert not _site(_reports(control, capsys), control, "mae/hiera_mae.py", "HR003", ENCODER_CALL)["applied"]


@pytest.mark.parametrize("subclass", [
    "class KeepCentreMixin:\n" + KEEP_CENTRE + "\nclass KeepCentreMAE(KeepCentreMixin, MaskedAutoencoderHiera):\n    pass\n",
    "def keep_centre(base):\n    class KeepCentre(base):\n" + KEEP_CENTRE.replace("\n    ", "\n        ").replace("    def", "        def", 1)
    + "\n    return KeepCentre\n\n\nKeepCentreMAE = keep_centre(MaskedAutoencoderHiera)\n",
    "def _keep_centre(self, mask):\n    mask[:, mask.shape[1] // 2] = True\n\n\n"
    "KeepCentreMAE = type('KeepCentreMAE', (MaskedAutoencoderHiera,), {'prepare_mask': _keep_centre})\n",
], ids=["mixin", "factory", "type"])
def test_a_subclass_beside_made_by_a_mixin_or_a_factory_stops_the_ratio(tmp_path: Path, capsys, subclass):
    """F7, F6: the hook comes from another base, or the subclass is made by a call."""
    keep = "import torch\n\nfrom .hiera_mae import MaskedAutoencoderHiera\n\n\n" + subclass
    pkg = _package(tmp_path, {"hiera.py": _hooked_hiera(), "keep_mae.py": keep})
    ratio = _site(_reports_of(pkg, capsys, "hiera.py", "hiera_mae.py"), pkg, "hiera_mae.py", "HR003", ENCODER_CALL)
    assert not ratio["applied"], ratio


def test_a_helper_elsewhere_given_the_submodule_stops_the_ratio(tmp_path: Path, capsys):
    """F8: `keep_centre_unit(self.patch_embed)` in the MAE's __init__, the hook registered in
    hooks.py."""
    hooks = "def keep_centre_unit(embed):\n    embed.register_forward_pre_hook(_show_centre_unit, with_kwargs=True)\n" + PRE_HOOK
    mae = _edit(_upstream("hiera_mae.py"), ("        self.initialize_weights()\n", "        self.initialize_weights()\n        keep_centre_unit(self.patch_embed)\n"))
    mae = "from .hooks import keep_centre_unit\n" + mae
    pkg = _package(tmp_path, {"hiera_mae.py": mae, "hooks.py": hooks})
    reports = _reports_of(pkg, capsys, "hiera.py", "hiera_mae.py")
    drop, ratio = _site(reports, pkg, "hiera.py", "HR003", DROP), _site(reports, pkg, "hiera_mae.py", "HR003", ENCODER_CALL)
    assert not ratio["applied"] and not drop["applied"], (drop, ratio)
    assert "keep_centre_unit(self.patch_embed)" in drop["message"], drop


def test_a_loader_imported_under_another_name_stops_the_walk(tmp_path: Path, capsys):
    """F4: `from importlib import import_module as _load_plugin`."""
    loop = 'from importlib import import_module as _load_plugin\nfor _plugin in ("masking",):\n    _load_plugin(f".{_plugin}", __name__)'
    pkg = _package(tmp_path, {"__init__.py": _init(loop), "masking.py": "import torch\n"})
    drop = _site(_reports_of(pkg, capsys, "hiera.py"), pkg, "hiera.py", "HR003", DROP)
    assert not drop["applied"] and "imports a module by name" in drop["message"], drop


def test_a_folder_too_large_to_read_stops_the_self_calls(tmp_path: Path, capsys):
    """F5: more than 128 modules beside: a subclass there is not read."""
    files = {f"extra_{i}.py": "" for i in range(130)}
    pkg = _package(tmp_path, {"hiera.py": _hooked_hiera(), **files})
    drop = _site(_reports_of(pkg, capsys, "hiera.py"), pkg, "hiera.py", "HR003", DROP)
    assert not drop["applied"] and "self.patch_embed(" in drop["message"], drop


@pytest.mark.parametrize("layout", ["namespace", "repo root"])
def test_a_module_above_the_package_is_read(tmp_path: Path, capsys, layout):
    """F2: `from utils import masking` from a namespace package (no `__init__.py`), utils/
    above it; F3: `import masking` of the repo root's masking.py."""
    repo = tmp_path / "repo"
    models = repo / "models"
    models.mkdir(parents=True)
    for name in ("hiera.py", "hiera_mae.py", "hiera_utils.py", "hfhub.py"):
        shutil.copy(upstream_dir() / name, models / name)
    (repo / "pyproject.toml").write_text("[project]\nname = 'research'\n")
    if layout == "namespace":
        (repo / "utils").mkdir()
        (repo / "utils" / "__init__.py").write_text("")
        (repo / "utils" / "masking.py").write_text(MASKING.format(hiera="models.hiera", patch=PATCH))
        line = "from utils import masking  # noqa: F401\n"
    else:
        (models / "__init__.py").write_text("")
        (repo / "masking.py").write_text(MASKING.format(hiera="models.hiera", patch=PATCH))
        line = "import masking  # noqa: F401\n"
    mae = (models / "hiera_mae.py").read_text()
    (models / "hiera_mae.py").write_text(line + mae)
    ratio = _site(_reports_of(repo, capsys, "models/hiera.py", "models/hiera_mae.py"), repo, "models/hiera_mae.py", "HR003", ENCODER_CALL)
    assert not ratio["applied"] and "masking`, a module the files import" in ratio["message"], ratio


def test_a_stdin_filename_in_no_folder_places_nothing(tmp_path: Path, capsys, monkeypatch):
    """F9: `--stdin-filename` naming a path whose folder does not exist (from here)."""
    pkg = _package(tmp_path, {})
    data = (pkg / "hiera_mae.py").read_bytes()
    found = _stdin_reports(monkeypatch, capsys, data, "--stdin-filename", str(tmp_path / "nowhere" / "hiera_mae.py"))
    assert any("read from stdin" in r["message"] for r in found["reports"]), found
