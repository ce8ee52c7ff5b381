"""``hiera-rewrite --verify --check <dir>`` with no flags on fork-like repos.

Each repo is built here, in a temp dir, from a copy of the installed upstream
package made at test time (plus small edits by string replacement): the pristine
package folder; a namespace package (no ``__init__.py``) with relative imports in a
git repo; repo-root absolute imports (``from models.hiera import ...``); factories
deleted with required constructor arguments and a factory reading ``kwargs[...]``.
Each must PASS with every rewritten site exercised (the site table is checked
against the sites a plain ``--check`` reports).  A sabotaged rewrite must FAIL
naming the site; a site no model reaches must be NOT PROVEN, naming its class.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

from hiera_rewrite import cli, files
from hiera_rewrite.verify import EXIT_VERIFY_FAILED

pytest.importorskip("torch")
pytest.importorskip("timm")

MODULES = ["hiera.py", "hiera_mae.py", "hiera_utils.py", "hfhub.py"]


def upstream_files() -> Dict[str, str]:
    from hiera_rewrite.export import upstream_dir

    folder = upstream_dir()
    return {p.name: p.read_text() for p in sorted(folder.glob("*.py"))}


def write(folder: Path, sources: Dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        (folder / name).write_text(text)
    return folder


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def sub(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) >= count, f"upstream changed: {old!r} not found"
    return text.replace(old, new)


def applied_sites(folder: Path, capsys) -> List[str]:
    """path:line CODE of every change a plain --check reports."""
    cli.main(["--check", str(folder)])
    err = capsys.readouterr().err
    return [f"{m.group(1)}:{m.group(2)} {m.group(3)}" for m in re.finditer(r"^(\S+\.py):(\d+):\d+: (HR\d+) (?!skipped)", err, re.M)]


def site_rows(out: str) -> Dict[str, str]:
    """The site table: 'path:line CODE' -> its row."""
    lines = out.splitlines()
    start = lines.index("sites")
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("  "):
            break
        cells = line.split()
        rows[f"{cells[0]} {cells[1]}"] = line
    return rows


def verify(target: Path, capsys, *extra: str, graph_report: bool = False):
    """--verify --check; without the torch.compile report unless asked (test_verify tests it:
    a few seconds a model, in each of these tests)."""
    flags = [] if graph_report else ["--no-graph-report"]
    code = cli.main(["--verify", "--check", *flags, *extra, str(target)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def wrong_rewrite(pattern: str, replacement: str):
    """files.rewrite_bytes, with ``pattern`` replaced (re.sub) in every rewritten output."""
    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        text, n = re.subn(pattern, replacement, result.output.decode())
        if n:
            result.output = text.encode()
        return result

    return wrong


def sabotage(monkeypatch, pattern: str, replacement: str) -> None:
    """A wrong rewrite for the rest of the test (:func:`wrong_rewrite`)."""
    monkeypatch.setattr(files, "rewrite_bytes", wrong_rewrite(pattern, replacement))


def assert_all_proven(folder: Path, capsys):
    before = snapshot(folder.parent)
    expected = applied_sites(folder, capsys)
    assert expected, "nothing to rewrite"
    code, out, err = verify(folder, capsys)
    print(out)
    assert code == cli.EXIT_CHANGED, out + err
    rows = site_rows(out)
    assert sorted(rows) == sorted(expected), out
    for key, row in rows.items():
        assert row.rstrip().endswith("pass"), row
        assert " - " not in row, row  # exercised by a named case
    assert f"verify: PASSED ({len(expected)}/{len(expected)} sites exercised, every comparison equal)" in out
    assert "not built:" not in out  # only the top-level models were built (no Unroll/Reroll)
    assert snapshot(folder.parent) == before  # nothing written into the user's tree
    return out


def test_pristine_upstream_package(tmp_path: Path, capsys, monkeypatch):
    folder = write(tmp_path / "x" / "hiera", upstream_files())
    monkeypatch.chdir(tmp_path / "x")
    out = assert_all_proven(Path("hiera"), capsys)
    assert "hiera.hiera:hiera_tiny_224 -> Hiera" in out
    assert "hiera.hiera_mae:mae_hiera_tiny_224 -> MaskedAutoencoderHiera" in out
    assert "mae_hiera_base_16x224" in out  # the video variant, built only for the 3-D label path


def test_namespace_package_with_relative_imports(tmp_path: Path, capsys):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    sources = {k: v for k, v in upstream_files().items() if k in MODULES}
    folder = write(repo / "models" / "backbone", sources)  # no __init__.py anywhere
    out = assert_all_proven(folder, capsys)
    assert "namespace layout, import root " + str(repo) in out
    assert "models.backbone.hiera:hiera_tiny_224 -> Hiera" in out


def test_repo_root_absolute_imports(tmp_path: Path, capsys):
    repo = tmp_path / "repo"
    sources = {k: v for k, v in upstream_files().items() if k in MODULES}
    for name in sources:
        for mod in ("hiera_utils", "hiera", "hfhub"):
            sources[name] = sources[name].replace(f"from .{mod} import", f"from models.{mod} import")
    assert "from models.hiera import Hiera" in sources["hiera_mae.py"]
    folder = write(repo / "models", sources)  # no __init__.py, no .git
    (repo / "train.py").write_text("from models.hiera_mae import mae_hiera_base_224\n")
    out = assert_all_proven(folder, capsys)
    assert "import root " + str(repo) in out
    assert "models.hiera_mae:mae_hiera_tiny_224 -> MaskedAutoencoderHiera" in out


def _cut_factories(text: str) -> str:
    """Everything from the first module-level @pretrained_model on is deleted."""
    at = text.index("\n@pretrained_model(")
    return text[:at] + "\n"


def test_factories_removed_required_arguments(tmp_path: Path, capsys):
    sources = upstream_files()
    hiera = _cut_factories(sources["hiera.py"])
    # embed_dim and num_heads lose their defaults (moved first, as a fork might)
    hiera = sub(hiera, "        embed_dim: int = 96,  # initial embed dim\n", "")
    hiera = sub(hiera, "        num_heads: int = 1,  # initial number of heads\n", "")
    hiera = sub(hiera, "        self,\n        input_size: Tuple[int, ...] = (224, 224),", "        self,\n        embed_dim: int,\n        num_heads: int,\n        input_size: Tuple[int, ...] = (224, 224),")
    mae = _cut_factories(sources["hiera_mae.py"])
    mae = sub(mae, "        self,\n        in_chans: int = 3,", "        self,\n        out_chans: int,\n        in_chans: int = 3,")
    mae = sub(mae, "        del self.norm, self.head\n", "        del self.norm, self.head\n        self.out_chans = out_chans\n")
    mae += '''

def mae_from_config(**kwargs):
    return MaskedAutoencoderHiera(
        out_chans=kwargs["out_chans"],
        embed_dim=kwargs["init_embed_dim"],
        num_heads=kwargs["init_num_heads"],
        stages=(1, 2, 7, 2),
        q_pool=2,
    )
'''
    init = "from .hiera import Hiera\nfrom .hiera_mae import MaskedAutoencoderHiera, mae_from_config\n"
    sources.update({"hiera.py": hiera, "hiera_mae.py": mae, "__init__.py": init})
    assert "def hiera_tiny_224" not in hiera and "def mae_hiera_tiny_224" not in mae
    folder = write(tmp_path / "x" / "hiera", sources)
    out = assert_all_proven(folder, capsys)
    assert "hiera.hiera:Hiera (class)" in out
    assert "filled from names: embed_dim=8, num_heads=1" in out
    assert "hiera.hiera_mae:mae_from_config -> MaskedAutoencoderHiera" in out
    # its configuration comes from kwargs[...]: small values from the keywords' names
    assert "filled from names: out_chans=8, embed_dim=8, num_heads=1" in out
    assert "hiera.hiera_mae:MaskedAutoencoderHiera (class, 3-D)" in out  # no video factory left


@pytest.fixture
def pristine(tmp_path: Path) -> Path:
    return write(tmp_path / "x" / "hiera", upstream_files())


def test_sabotaged_rewrite_fails_naming_the_site(pristine: Path, capsys, monkeypatch):
    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        text = result.output.decode()
        # the attention output restore loses its transpose: runs, tokens in the wrong order
        swapped, n = re.subn(r"x\.transpose\(1, 2\)\.reshape\(B, -1, self\.dim_out\)", "x.reshape(B, -1, self.dim_out)", text)
        if n:
            result.output = swapped.encode()
        return result

    monkeypatch.setattr(files, "rewrite_bytes", wrong)
    code, out, err = verify(pristine, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    rows = site_rows(out)
    hr001 = [row for key, row in rows.items() if key.endswith("HR001") and "hiera.py:" in key]
    assert hr001 and "MaskUnitAttention.forward" in hr001[0] and "FAIL" in hr001[0], out
    assert "verify: FAILED" in out


def test_site_no_model_reaches_is_not_proven(pristine: Path, capsys):
    utils = pristine / "hiera_utils.py"
    utils.write_text(
        utils.read_text()
        + '''

class UnusedPool(nn.Module):
    """Instantiated nowhere; its constructor takes an argument nothing can guess.  Its
    get_random_mask (upstream's shape) gives the token drop a kept count: HR003's site."""

    def __init__(self, stride: int, keep_order, num_windows: int = 4):
        super().__init__()
        self.stride = stride
        self.keep_order = keep_order
        self.num_windows = num_windows

    def get_random_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
        """A random (B, num_windows) unit mask, True = keep; the same count in every row."""
        B = x.shape[0]
        len_keep = int(self.num_windows * (1 - mask_ratio))
        noise = torch.rand(B, self.num_windows, device=x.device)
        rank = torch.argsort(torch.argsort(noise, dim=1), dim=1)
        keep = torch.zeros([B, self.num_windows], device=x.device)
        keep[:, :len_keep] = 1
        keep = torch.gather(keep, dim=1, index=rank)
        return keep.bool()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x[mask[..., None].tile(1, self.stride, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return x
'''
    )
    code, out, err = verify(pristine, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    rows = site_rows(out)
    unused = [row for row in rows.values() if "UnusedPool.forward" in row]
    assert unused and "NOT PROVEN" in unused[0], out
    assert all(row.rstrip().endswith("pass") for row in rows.values() if "UnusedPool" not in row), out
    message = [line for line in out.splitlines() if line.startswith("not proven:")]
    assert len(message) == 1 and "UnusedPool.forward" in message[0], out
    assert """--kwargs '{"keep_order": "..."}'""" in message[0], out
    assert "verify: NOT PROVEN" in out


# -- inputs: grids, extra forward arguments, other outputs -------------------------------------

_GRID_DEFAULTS = {
    "input_size": "input_size: Tuple[int, ...] = (224, 224),",
    "in_chans": "in_chans: int = 3,",
    "q_stride": "q_stride: Tuple[int, ...] = (2, 2),",
    "mask_unit_size": "mask_unit_size: Tuple[int, ...] = (8, 8),",
    "patch_kernel": "patch_kernel: Tuple[int, ...] = (7, 7),",
    "patch_stride": "patch_stride: Tuple[int, ...] = (4, 4),",
    "patch_padding": "patch_padding: Tuple[int, ...] = (3, 3),",
}


def classifier_fork(grid=None, edits=()) -> Dict[str, str]:
    """hiera.py (factories deleted: the class defaults are the configuration) and the
    modules it imports, as a classifier-only fork: sites HR001 and HR003 (the token drop)."""
    sources = upstream_files()
    hiera = _cut_factories(sources["hiera.py"])
    for key, value in (grid or {}).items():
        old = _GRID_DEFAULTS[key]
        hiera = sub(hiera, old, old.split("=")[0] + f"= {value!r},")
    for old, new in edits:
        hiera = sub(hiera, old, new)
    return {"__init__.py": "", "hiera.py": hiera, "hiera_utils.py": sources["hiera_utils.py"], "hfhub.py": sources["hfhub.py"]}


def test_sequence_1d_classifier(tmp_path: Path, capsys):
    """A 1-D Hiera over (B, C, T) sequences: input_size (T,), everything 1-D.  A
    classifier-only fork: the static token drop is reached by passing the rewritten
    forward the count get_random_mask states (the MAE does so; no MAE here)."""
    grid = {"input_size": (256,), "q_stride": (2,), "mask_unit_size": (8,), "patch_kernel": (7,), "patch_stride": (4,), "patch_padding": (3,)}
    folder = write(tmp_path / "x" / "hiera", classifier_fork(grid))
    out = assert_all_proven(folder, capsys)
    assert "model hiera.hiera:Hiera (class)  input (2, 3, 64)" in out
    assert "forward(x, mask, return_intermediates=True, random_mask_ratio)" in out


def test_keypoint_grid_one_channel(tmp_path: Path, capsys):
    """Pose/behaviour data: a (time, individuals, keypoints) grid with one channel."""
    grid = {"input_size": (64, 4, 32), "in_chans": 1, "q_stride": (2, 1, 2), "mask_unit_size": (4, 1, 4),
            "patch_kernel": (3, 1, 3), "patch_stride": (2, 1, 2), "patch_padding": (1, 0, 1)}
    folder = write(tmp_path / "x" / "hiera", classifier_fork(grid))
    out = assert_all_proven(folder, capsys)
    assert "model hiera.hiera:Hiera (class)  input (2, 1, 32, 2, 32)" in out  # 2 mask units per dim


def test_video_class_defaults(tmp_path: Path, capsys):
    """A video fork whose class defaults are 16x224 (B, 3, T, H, W), no factories."""
    grid = {"input_size": (16, 224, 224), "q_stride": (1, 2, 2), "mask_unit_size": (1, 8, 8),
            "patch_kernel": (3, 7, 7), "patch_stride": (2, 4, 4), "patch_padding": (1, 3, 3)}
    folder = write(tmp_path / "x" / "hiera", classifier_fork(grid))
    out = assert_all_proven(folder, capsys)
    assert re.search(r"model hiera\.hiera:Hiera \(class\)  input \(2, 3, \d+, 64, 64\)", out), out


def large_patch_fork(tmp_path: Path) -> Path:
    """Issue 22, class 3: 32-pixel patches, the class default input_size, and neither
    ``self.patch_stride`` nor ``self.tokens_spatial_shape``."""
    grid = {"patch_kernel": (32, 32), "patch_stride": (32, 32), "patch_padding": (0, 0)}
    edits = [("        self.patch_stride = patch_stride\n", ""), ("self.tokens_spatial_shape", "self.token_grid")]
    return write(tmp_path / "x" / "hiera", classifier_fork(grid, edits))


def test_large_patches_and_no_token_grid_attribute(tmp_path: Path, capsys):
    """Issue 22, class 3: a fork with 32-pixel patches that keeps the class default
    input_size (224, 224) (its scripts always give one: 7 tokens, less than a mask unit)
    and keeps neither ``self.patch_stride`` nor ``self.tokens_spatial_shape``.  The smallest
    valid input follows from the first convolution's stride (32), mask_unit_size (8, 8),
    q_stride (2, 2) and its 3 q-strided unroll stages: 2 units of 8 tokens of 32 px = 512.
    Before, every input tried (16, 32, 64 px) was smaller than a patch times a mask unit."""
    out = assert_all_proven(large_patch_fork(tmp_path), capsys)
    assert "model hiera.hiera:Hiera (class)  input (2, 3, 512, 512)" in out


def test_channels_last_sequence_and_grid_without_a_channel_dim(tmp_path: Path, capsys):
    """Issue 22, class 3: forks whose forward takes another rank than upstream's: a 1-D
    sequence model taking (B, T, C) (it transposes itself) and a one-channel keypoint grid
    taking (B, T, I, K) (it adds the channel dim itself).  After the channels-first input
    fails on the original, verify tries channels-last, then no channel dim."""
    last = classifier_fork(SEQUENCE_1D, [("        intermediates = []\n", "        intermediates = []\n        x = x.transpose(1, 2)  # (B, T, C) -> (B, C, T)\n")])
    grid = {"input_size": (64, 4, 32), "in_chans": 1, "q_stride": (2, 1, 2), "mask_unit_size": (4, 1, 4),
            "patch_kernel": (3, 1, 3), "patch_stride": (2, 1, 2), "patch_padding": (1, 0, 1)}
    flat = classifier_fork(grid, [("        intermediates = []\n", "        intermediates = []\n        x = x.unsqueeze(1)  # (B, T, I, K) -> (B, 1, T, I, K)\n")])
    write(tmp_path / "x" / "hiera", last)
    write(tmp_path / "y" / "hiera", flat)
    out = assert_all_proven(tmp_path / "x" / "hiera", capsys)
    assert "model hiera.hiera:Hiera (class)  input (2, 64, 3)" in out
    assert "input (2, 64, 3): the original raised with (2, 3, 64): RuntimeError" in out
    out = assert_all_proven(tmp_path / "y" / "hiera", capsys)
    assert "model hiera.hiera:Hiera (class)  input (2, 32, 2, 32)" in out


_FORWARD_HEAD = "        mask: torch.Tensor = None,\n        return_intermediates: bool = False,\n    ) -> torch.Tensor:"


def test_forward_with_a_required_padding_mask(tmp_path: Path, capsys):
    """forward(x, padding_mask) with no default: a (B, N) token mask is constructed
    from the model's token grid and the same one is given to both sides."""
    edits = [
        (_FORWARD_HEAD, "        padding_mask: torch.Tensor,\n" + _FORWARD_HEAD),
        ("        x = x + self.get_pos_embed()\n", "        x = x + self.get_pos_embed()\n        x = x * padding_mask[..., None].to(x.dtype)\n"),
    ]
    folder = write(tmp_path / "x" / "hiera", classifier_fork(edits=edits))
    out = assert_all_proven(folder, capsys)
    assert "forward's required padding_mask: padding_mask=all-True bool (2, 256) (tokens)" in out
    assert "forward(x, padding_mask)" in out


def test_forward_returning_a_dict(tmp_path: Path, capsys):
    """A fork returning {"logits": ..., "features": [...]}: every tensor leaf compared."""
    edits = [("        if return_intermediates:\n            return x, intermediates\n\n        return x\n",
              '        return {"logits": x, "features": intermediates}\n')]
    folder = write(tmp_path / "x" / "hiera", classifier_fork(edits=edits))
    out = assert_all_proven(folder, capsys)
    assert "out['features'][3]" in out and "out['logits']" in out


# -- constructor arguments: configuration objects, the repo's own values, partial factories ----


def _config_object_hiera(text: str) -> str:
    """Hiera.__init__(self, cfg) reading its knobs as cfg.x (cfg.get / getattr for two)."""
    start = text.index("    @has_config\n    def __init__(\n        self,\n        input_size")
    end = text.index("    ):\n        super().__init__()\n", start) + len("    ):\n        super().__init__()\n")
    body = "    def __init__(self, cfg):\n        super().__init__()\n"
    for knob in ["input_size", "in_chans", "embed_dim", "num_heads", "num_classes", "stages", "q_pool", "q_stride",
                 "mask_unit_size", "mask_unit_attn", "dim_mul", "head_mul", "patch_kernel", "patch_stride", "patch_padding"]:
        body += f"        {knob} = cfg.{knob}\n"
    body += (
        '        mlp_ratio = cfg.get("mlp_ratio", 4.0)\n'
        '        drop_path_rate = getattr(cfg, "drop_path_rate", 0.0)\n'
        '        norm_layer, head_dropout, head_init_scale, sep_pos_embed = "LayerNorm", 0.0, 0.001, False\n'
    )
    return text[:start] + body + text[end:]


def test_config_object_from_the_repos_json_config(tmp_path: Path, capsys):
    """Hiera(cfg) with cfg.x: the values come from the repo's JSON config (a 1-D,
    two-channel model) and its training script's argparse defaults; sizes stay small."""
    repo = tmp_path / "repo"
    sources = classifier_fork()
    del sources["__init__.py"]
    sources["hiera.py"] = _config_object_hiera(sources["hiera.py"]).replace("from .", "from models.")
    folder = write(repo / "models", sources)
    config = {"model": {"input_size": [256], "in_chans": 2, "embed_dim": 96, "num_heads": 1, "stages": [1, 2, 7, 2], "q_pool": 2,
                        "q_stride": [2], "mask_unit_size": [8], "mask_unit_attn": [True, True, False, False], "dim_mul": 2.0,
                        "head_mul": 2.0, "patch_kernel": [7], "patch_stride": [4], "patch_padding": [3]}, "lr": 1e-3}
    write(repo / "configs", {"seq_tiny.json": json.dumps(config, indent=1)})
    write(repo, {"train.py": 'import argparse\np = argparse.ArgumentParser()\np.add_argument("--num-classes", type=int, default=400)\n'})
    out = assert_all_proven(folder, capsys)
    assert "model models.hiera:Hiera (class)  input (2, 2, 64)" in out
    assert "input_size=[256] (configs/seq_tiny.json)" in out and "in_chans=2 (configs/seq_tiny.json)" in out
    assert "filled from names: embed_dim=8, num_heads=1, num_classes=10, stages=[1, 1, 1, 1]" in out


def _model_name_fork(partial_factory: bool) -> Dict[str, str]:
    """Hiera gains a required model_name; a **kwargs factory reads its configuration."""
    head = "        self,\n        input_size: Tuple[int, ...] = (224, 224),"
    edits = [
        (head, "        self,\n        model_name: str,\n        input_size: Tuple[int, ...] = (224, 224),"),
        ("        depth = sum(stages)\n", '        assert model_name.startswith("hiera"), model_name\n        depth = sum(stages)\n'),
    ]
    sources = classifier_fork(edits=edits)
    sources["hiera.py"] += (
        "\n\ndef build_from_args(**kwargs):\n"
        '    return Hiera(model_name=kwargs["model_name"], num_classes=kwargs["num_classes"], embed_dim=kwargs["embed_dim"], stages=(1, 2, 7, 2))\n'
    )
    if partial_factory:
        sources["hiera.py"] += '\n\nhiera_tiny = partial(Hiera, model_name="hiera_tiny", embed_dim=96, num_heads=1, stages=(1, 2, 7, 2))\n'
    return sources


ARGPARSE_SCRIPT = '''\
import argparse


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-name", default="hiera_base_224", type=str)
    parser.add_argument("--num_classes", default=1000, type=int)
    return parser.parse_args()
'''


def test_kwargs_factory_filled_from_argparse_defaults(tmp_path: Path, capsys):
    folder = write(tmp_path / "x" / "hiera", _model_name_fork(partial_factory=False))
    write(tmp_path / "x", {"main_pretrain.py": ARGPARSE_SCRIPT})
    out = assert_all_proven(folder, capsys)
    assert "model hiera.hiera:build_from_args -> Hiera  input (2, 3, 64, 64)" in out
    assert "model_name='hiera_base_224' (main_pretrain.py --model_name)" in out


POSE_FACTORY = '''

def hiera_pose(**kwargs):
    """A behaviour model over (frames, individuals, keypoints) with one channel; its
    configuration comes from the training script's arguments."""
    q_strides = kwargs["q_strides"]  # "2,1,2;2,1,2" parsed by main_pretrain.py: one per pooled stage
    assert all(tuple(q) == tuple(q_strides[0]) for q in q_strides), q_strides
    return Hiera(
        input_size=kwargs["input_size"],
        in_chans=1,
        embed_dim=kwargs["init_embed_dim"],
        num_heads=kwargs["init_num_heads"],
        stages=kwargs["stages"],
        q_pool=len(q_strides),
        q_stride=q_strides[0],
        mask_unit_size=kwargs["mask_unit_size"],
        patch_kernel=kwargs["patch_kernel"],
        patch_stride=kwargs["patch_kernel"],
        patch_padding=(0, 0, 0),
    )
'''

POSE_ARGPARSE = '''\
import argparse


def parse_tuples(text):
    return [tuple(int(v) for v in group.split(",")) for group in text.split(";")]


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="hiera_pose", type=str)
    parser.add_argument("--input_size", default="400,1,72", type=str)
    parser.add_argument("--q_strides", default="15,1,1;16,1,1", type=str)
    parser.add_argument("--mask_unit_size", default="4,1,4", type=str)
    parser.add_argument("--patch_kernel", default="2,1,3", type=str)
    parser.add_argument("--init_embed_dim", default=96, type=int)
    parser.add_argument("--batch_size", default=64, type=int)
    return parser.parse_args()
'''

POSE_SCRIPT = '''\
#!/bin/bash
DATA=data/mabe22
# pretrain on the keypoint grid
python main_pretrain.py --model hiera_pose --data_path $DATA \\
    --input_size 64,4,32 --patch_kernel 2,1,2 --q_strides "2,1,2;2,1,2" --stages 2,3,4 \\
    --init_embed_dim 128 --init_num_heads 2 --batch_size 512 --epochs 200 2>&1 | tee logs/pretrain.txt
'''


def test_keypoint_factory_filled_from_a_shell_script(tmp_path: Path, capsys):
    """Issue 22, class 3: a behaviour/keypoint fork (one channel, a 3-D grid) whose factory
    reads kwargs["input_size"], kwargs["q_strides"], kwargs["init_embed_dim"]...: the
    values are only in the repo's scripts/train.sh (`--q_strides "2,1,2;2,1,2"`) and its
    argparse string defaults, strings main_pretrain.py parses itself into tuples.  The
    script's values win over argparse's; strings of integers become the tuple (list of
    tuples) the factory indexes.  Before: the script was not read and the factory got
    the string "15,1,1;16,1,1" (NOT PROVEN)."""
    sources = classifier_fork()
    sources["hiera.py"] += POSE_FACTORY
    folder = write(tmp_path / "x" / "hiera", sources)
    write(tmp_path / "x", {"main_pretrain.py": POSE_ARGPARSE})
    write(tmp_path / "x" / "scripts", {"train.sh": POSE_SCRIPT})
    out = assert_all_proven(folder, capsys)
    assert "model hiera.hiera:hiera_pose -> Hiera  input (2, 1, 16, 2, 16)" in out
    assert "q_strides=[(2, 1, 2), (2, 1, 2)] (scripts/train.sh --q_strides)" in out
    assert "input_size=(64, 4, 32) (scripts/train.sh --input_size)" in out
    assert "patch_kernel=(2, 1, 2) (scripts/train.sh --patch_kernel)" in out
    assert "mask_unit_size=(4, 1, 4) (main_pretrain.py --mask_unit_size)" in out


def test_partial_factory(tmp_path: Path, capsys):
    folder = write(tmp_path / "x" / "hiera", _model_name_fork(partial_factory=True))
    out = assert_all_proven(folder, capsys)
    assert "model hiera.hiera:hiera_tiny -> Hiera  input (2, 3, 64, 64)" in out


def test_missing_value_names_the_exact_kwargs(tmp_path: Path, capsys):
    """No value for model_name anywhere the fork accepts: not proven, the suggested flag
    names model_name (since 927129d verify first tries the files' factory names, which this
    fork rejects, and suggests one of them); given a value it accepts, it passes."""
    folder = write(tmp_path / "x" / "hiera", _model_name_fork(partial_factory=False))
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "verify: NOT PROVEN" in out, out
    assert '"model_name": ' in out.split("not proven:", 1)[1], out
    code, out, err = verify(folder, capsys, "--kwargs", '{"model_name": "hiera_x"}')
    assert code == cli.EXIT_CHANGED, out + err
    assert "verify: PASSED (2/2 sites exercised" in out


# -- an installed-package layout; a missing third-party module --------------------------------


def test_installed_package_layout(tmp_path: Path, capsys, monkeypatch):
    """The repo is itself the installed package ``mypkg`` (its files at the repo root,
    ``package-dir = {mypkg = "."}``; here the install is a link on sys.path) and imports
    itself as ``from mypkg.models.backbones.attention import ...``.  The attention
    (HR001's site) lives in a module reached only under that name: it must be imported
    from the rewritten copy, not from the user's tree through the installed name."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    sources = classifier_fork()
    hiera = sources["hiera.py"]
    start, end = hiera.index("class MaskUnitAttention(nn.Module):"), hiera.index("class HieraBlock(nn.Module):")
    attention = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nfrom mypkg.models.backbones.hiera_utils import do_pool\n\n\n" + hiera[start:end]
    hiera = hiera[:start] + hiera[end:]
    hiera = sub(hiera, "from .hiera_utils import", "from mypkg.models.backbones.attention import MaskUnitAttention\nfrom mypkg.models.backbones.hiera_utils import")
    hiera = sub(hiera, "from .hfhub import", "from mypkg.models.backbones.hfhub import")
    sources.update({"hiera.py": hiera, "attention.py": attention})
    folder = write(repo / "models" / "backbones", sources)
    write(repo / "models", {"__init__.py": ""})
    write(repo, {"pyproject.toml": '[project]\nname = "mypkg"\n\n[tool.setuptools.package-dir]\nmypkg = "."\n'})
    site = tmp_path / "site"
    site.mkdir()
    (site / "mypkg").symlink_to(repo, target_is_directory=True)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    out = assert_all_proven(folder, capsys)
    assert f"installed layout, {repo} imported as mypkg" in out
    assert "model mypkg.models.backbones.hiera:Hiera (class)" in out
    assert not list(repo.rglob("__pycache__"))


def test_missing_third_party_module_is_not_a_mismatch(tmp_path: Path, capsys):
    sources = classifier_fork(edits=[("import torch.nn as nn\n", "import torch.nn as nn\nimport flash_attn_not_installed_here\n")])
    folder = write(tmp_path / "x" / "hiera", sources)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "cannot import flash_attn_not_installed_here (not installed)" in out, out
    assert "mismatch" not in out and "=> FAIL" not in out
    assert "verify: NOT PROVEN (0/2 sites exercised; cannot import flash_attn_not_installed_here (not installed))" in out, out


# -- sabotage and unreachable sites on the new layouts ------------------------------------------

SEQUENCE_1D = {"input_size": (256,), "q_stride": (2,), "mask_unit_size": (8,), "patch_kernel": (7,), "patch_stride": (4,), "patch_padding": (3,)}


def test_sabotaged_static_token_drop_fails_on_a_classifier_fork(tmp_path: Path, capsys, monkeypatch):
    """The static-count path of HR003 in a classifier-only 1-D fork, reached only through
    the random_mask_ratio case: a gather of the dropped windows instead of the kept ones FAILs
    there, naming Hiera.forward."""
    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        text = result.output.decode()
        swapped, n = re.subn(r"mask\.logical_not\(\)\.byte\(\)\.argsort\(", "mask.byte().argsort(", text)
        if n:
            result.output = swapped.encode()
        return result

    folder = write(tmp_path / "x" / "hiera", classifier_fork(SEQUENCE_1D))
    monkeypatch.setattr(files, "rewrite_bytes", wrong)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    rows = site_rows(out)
    drop = [row for row in rows.values() if "Hiera.forward" in row]
    # (its "exercised by" column names forward(x) first: the count reset before
    # patch_embed runs in every case; the failing comparisons are the random_mask_ratio case's)
    assert drop and "FAIL" in drop[0], out
    failing = [line for line in out.splitlines() if "random_mask_ratio)" in line and "FAIL" in line]
    assert failing and not [line for line in out.splitlines() if "forward(x)  " in line and "FAIL" in line], out
    assert "verify: FAILED" in out


def test_unreached_site_in_a_padding_mask_fork_is_not_proven(tmp_path: Path, capsys):
    """A 1-D padding-mask fork with a token dropper no model builds (its constructor
    needs a value nothing gives): not proven, naming it and the --kwargs to give."""
    edits = [
        (_FORWARD_HEAD, "        padding_mask: torch.Tensor,\n" + _FORWARD_HEAD),
        ("        x = x + self.get_pos_embed()\n", "        x = x + self.get_pos_embed()\n        x = x * padding_mask[..., None].to(x.dtype)\n"),
    ]
    sources = classifier_fork(SEQUENCE_1D, edits)
    sources["hiera.py"] += '''

class TokenDropper(nn.Module):
    """Built by no model of the files.  Its get_random_mask (upstream's shape) gives the
    token drop a kept count: HR003's site."""

    def __init__(self, mu_size: int, keep_order, num_windows: int = 4):
        super().__init__()
        self.mu_size, self.keep_order, self.num_windows = mu_size, keep_order, num_windows

    def get_random_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
        """A random (B, num_windows) unit mask, True = keep; the same count in every row."""
        B = x.shape[0]
        len_keep = int(self.num_windows * (1 - mask_ratio))
        noise = torch.rand(B, self.num_windows, device=x.device)
        rank = torch.argsort(torch.argsort(noise, dim=1), dim=1)
        keep = torch.zeros([B, self.num_windows], device=x.device)
        keep[:, :len_keep] = 1
        keep = torch.gather(keep, dim=1, index=rank)
        return keep.bool()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return x
'''
    folder = write(tmp_path / "x" / "hiera", sources)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    rows = site_rows(out)
    assert any("TokenDropper.forward" in row and "NOT PROVEN" in row for row in rows.values()), out
    assert all(row.rstrip().endswith("pass") for row in rows.values() if "TokenDropper" not in row), out
    message = [line for line in out.splitlines() if line.startswith("not proven:")]
    assert len(message) == 1 and "TokenDropper.forward" in message[0], out
    assert """--kwargs '{"keep_order": "..."}'""" in message[0], out
    assert "verify: NOT PROVEN (2/3 sites exercised; 1 never ran in a compared case)" in out  # hiera.py's 2 and TokenDropper's


def test_configuration_from_a_call_site_in_the_training_script(tmp_path: Path, capsys):
    """Factories deleted, class defaults 2-D, and the training script builds the model
    for a one-channel keypoint grid: that call's configuration is the one verified."""
    folder = write(tmp_path / "x" / "hiera", classifier_fork())
    write(tmp_path / "x", {"train_pose.py": (
        "from hiera.hiera import Hiera\n\n"
        "model = Hiera(input_size=(64, 4, 32), in_chans=1, q_stride=(2, 1, 2), mask_unit_size=(4, 1, 4),\n"
        "              patch_kernel=(3, 1, 3), patch_stride=(2, 1, 2), patch_padding=(1, 0, 1), num_classes=5)\n"
    )})
    out = assert_all_proven(folder, capsys)
    assert "model hiera.hiera:Hiera (as at train_pose.py:3)  input (2, 1, 32, 2, 32)" in out


def checkpoint_fork(tmp_path: Path) -> Path:
    """Issue 22, class 7: factories cut, the MAE's constructor loads a checkpoint file the
    clone does not hold."""
    sources = upstream_files()
    mae = _cut_factories(sources["hiera_mae.py"])
    mae = sub(mae, "        self,\n        in_chans: int = 3,", '        self,\n        checkpoint: str = "checkpoints/mae_hiera.pth",\n        in_chans: int = 3,')
    mae = sub(
        mae,
        "        del self.norm, self.head\n",
        '        del self.norm, self.head\n        if checkpoint:\n            self.load_state_dict(torch.load(checkpoint, map_location="cpu"))\n',
    )
    sources.update({"hiera_mae.py": mae, "__init__.py": "from .hiera import Hiera, hiera_tiny_224\nfrom .hiera_mae import MaskedAutoencoderHiera\n"})
    return write(tmp_path / "x" / "hiera", sources)


def test_constructor_loading_a_checkpoint(tmp_path: Path, capsys):
    """Issue 22, class 7: the MAE's constructor loads `checkpoint="checkpoints/mae_hiera.pth"`
    (a file the repo's clone does not hold).  verify builds it with the checkpoint off
    (`checkpoint=''`: both sides share their weights anyway) and says so; before, every
    build raised FileNotFoundError and every MAE site was NOT PROVEN."""
    out = assert_all_proven(checkpoint_fork(tmp_path), capsys)
    assert "no checkpoint: checkpoint=''" in out
    assert "FileNotFoundError" not in out


def repo_package(tmp_path: Path) -> Path:
    """Issue 22, class 9: a clone named myrepo whose files import
    `from myrepo.models.<module> import ...`; returns its models/ folder."""
    repo = tmp_path / "myrepo"
    (repo / ".git").mkdir(parents=True)
    sources = {}
    for name, text in upstream_files().items():
        for module in ("hiera_utils", "hfhub", "hiera", "hiera_mae"):
            text = text.replace(f"from .{module} import", f"from myrepo.models.{module} import")
        sources[name] = text
    sources["__init__.py"] = ""
    return write(repo / "models", sources)


def test_repo_that_is_itself_a_package(tmp_path: Path, capsys):
    """Issue 22, class 9: the clone's files import `from myrepo.models.hiera import ...`
    (the repo is a package, meant to be installed editable, and is not installed here);
    verify imports the clone folder under its own name (before: "cannot import myrepo
    (not installed)", every site NOT PROVEN)."""
    folder = repo_package(tmp_path)
    out = assert_all_proven(folder, capsys)
    assert f"repo-as-package layout, {folder.parent} imported as myrepo" in out
    assert "model myrepo.models.hiera_mae:mae_hiera_tiny_224" in out


def library_named_module_fork(tmp_path: Path) -> Path:
    """Issue 22, class 2: the package holds a `transformers.py` of its own, and hiera_utils
    imports the library `transformers`."""
    sources = upstream_files()
    sources["transformers.py"] = '"""The repo\'s own helpers (a name a library has too)."""\nHELPERS = True\n'
    sources["hiera_utils.py"] = sub(
        sources["hiera_utils.py"], "import torch\n", "import torch\nimport transformers\n\nTRANSFORMERS_VERSION = transformers.__version__\n"
    )
    return write(tmp_path / "x" / "hiera", sources)


def test_repo_module_named_like_a_library(tmp_path: Path, capsys):
    """Issue 22, class 2: a `transformers.py` of the repo's own sits beside the model files
    in a package; Python, importing from the repo root, gives `import transformers` the
    installed library.  verify did not: it put the package's own folder on sys.path, and
    the repo's module shadowed the library (every import failed, every site NOT PROVEN)."""
    pytest.importorskip("transformers")
    out = assert_all_proven(library_named_module_fork(tmp_path), capsys)
    assert "AttributeError" not in out


# -- issue 22, class 5: required constructor arguments the repo passes at its call sites -------

# HR003 rewrites the wrapper's token drop (its site in heads.py) only because the class
# has a get_random_mask of upstream's shape whose kept count it reads, and its unit size
# is an attribute (a local name is refused)
CLASSIFIER_HEAD = '''\
import math

import torch
import torch.nn as nn


class HieraClassifier(nn.Module):
    """A linear probe over the kept mask units of an encoder the caller builds."""

    def __init__(self, encoder: nn.Module, num_classes: int):
        super().__init__()
        self.encoder = encoder
        self.fc = nn.Linear(encoder.norm.normalized_shape[-1], num_classes)
        # tokens of one mask unit in the encoder's last stage (after its q_pool poolings)
        self.unit_tokens = encoder.mu_size // math.prod(encoder.q_stride) ** encoder.q_pool

    def get_random_mask(self, x: torch.Tensor, mask_ratio: float) -> torch.Tensor:
        """A random (B, units) mask over the encoder's mask units, True = keep; the same count in every row."""
        B = x.shape[0]
        units = math.prod(self.encoder.mask_spatial_shape)
        len_keep = int(units * (1 - mask_ratio))
        noise = torch.rand(B, units, device=x.device)
        rank = torch.argsort(torch.argsort(noise, dim=1), dim=1)
        keep = torch.zeros([B, units], device=x.device)
        keep[:, :len_keep] = 1
        keep = torch.gather(keep, dim=1, index=rank)
        return keep.bool()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.encoder(x, return_intermediates=True)[1][-1].flatten(1, -2)
        x = x[mask[..., None].tile(1, self.unit_tokens, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        return self.fc(x.mean(1))
'''


def _encoder_fork(tmp_path: Path, script: str, factory: bool = False) -> Path:
    """A classifier fork plus heads.py (a wrapper taking a built encoder, no default; one
    HR003 site of its own) and a training script building the wrapper."""
    sources = classifier_fork()
    if factory:
        sources["hiera.py"] += "\n\ndef hiera_tiny_64(**kwargs):\n    return Hiera(input_size=(64, 64), embed_dim=96, num_heads=1, stages=(1, 2, 7, 2), **kwargs)\n"
    sources["heads.py"] = CLASSIFIER_HEAD
    folder = write(tmp_path / "x" / "hiera", sources)
    write(tmp_path / "x", {"train.py": script})
    return folder


def test_module_argument_built_as_at_the_call_site(tmp_path: Path, capsys):
    """HieraClassifier(encoder=Hiera(input_size=(64, 64), ...), num_classes=5) in the training
    script: verify builds that Hiera small, on each side from its own copy, and passes it as
    the encoder (before: "needs norm", a key __init__ reads from the encoder taken for a
    configuration object; heads.py's site NOT PROVEN)."""
    folder = _encoder_fork(tmp_path, (
        "from hiera.heads import HieraClassifier\n"
        "from hiera.hiera import Hiera\n\n"
        "model = HieraClassifier(encoder=Hiera(input_size=(64, 64), embed_dim=96, num_heads=1, stages=(1, 2, 7, 2)), num_classes=5)\n"
    ))
    out = assert_all_proven(folder, capsys)
    assert "model hiera.heads:HieraClassifier (as at train.py:4)  input (2, 3, 64, 64)" in out, out
    assert "built from its configuration, encoder=hiera.hiera:Hiera (small: embed_dim=8, stages=(1, 1, 1, 1), num_classes=10)" in out, out


def test_module_argument_from_a_factory_through_a_local_name(tmp_path: Path, capsys):
    """enc = hiera_tiny_64(); HieraClassifier(enc, 5) in a function of the training script:
    the factory's configuration, built small, is the encoder."""
    folder = _encoder_fork(tmp_path, (
        "from hiera.heads import HieraClassifier\n"
        "from hiera.hiera import hiera_tiny_64\n\n\n"
        "def main(num_classes=5):\n"
        "    enc = hiera_tiny_64()\n"
        "    model = HieraClassifier(enc, num_classes)\n"
        "    return model\n"
    ), factory=True)
    out = assert_all_proven(folder, capsys)
    assert "model hiera.heads:HieraClassifier (as at train.py:7)  input (2, 3, 64, 64)" in out, out


@pytest.mark.parametrize("call, line", [
    # the keyword beside one only the script computes (num_classes=args.classes)
    ('model = Hiera(model_name="hiera_tiny_224", num_classes=args.classes)\n', 8),
    # the keywords built as a dict and unpacked: the dict's literal keys are the call's
    ('cfg = dict(model_name="hiera_tiny_224", num_classes=args.classes)\nmodel = Hiera(**cfg)\n', 9),
])
def test_required_value_from_a_call_site(tmp_path: Path, capsys, call: str, line: int):
    """Hiera(model_name, ...) with no default; the training script passes
    model_name="hiera_tiny_224", as a keyword or inside a dict it unpacks: the literal is
    the value (before: the call was skipped, "needs model_name", NOT PROVEN)."""
    folder = write(tmp_path / "x" / "hiera", _model_name_fork(partial_factory=False))
    write(tmp_path / "x", {"train.py": (
        "import argparse\n\nfrom hiera.hiera import Hiera\n\n"
        "parser = argparse.ArgumentParser()\n"
        'parser.add_argument("--classes", type=int, default=400)\n'
        "args = parser.parse_args()\n" + call
    )})
    out = assert_all_proven(folder, capsys)
    assert f"model_name='hiera_tiny_224' (train.py:{line})" in out, out


def test_module_argument_from_its_annotation(tmp_path: Path, capsys):
    """No script builds the wrapper, but its encoder is annotated `encoder: Hiera` (a model
    class of the files): that class, built as verify builds it as a model, is the encoder."""
    folder = _encoder_fork(tmp_path, "")
    heads = folder / "heads.py"
    heads.write_text(sub(heads.read_text(), "import torch.nn as nn\n", "import torch.nn as nn\n\nfrom .hiera import Hiera\n").replace("encoder: nn.Module", "encoder: Hiera"))
    out = assert_all_proven(folder, capsys)
    assert "model hiera.heads:HieraClassifier (class)  input (2, 3, 64, 64)" in out, out
    assert "encoder=hiera.hiera:Hiera (small: embed_dim=8, stages=(1, 1, 1, 1), num_classes=10)" in out, out


def test_module_argument_nothing_gives_names_it(tmp_path: Path, capsys):
    """No script builds the wrapper and `encoder: nn.Module` names no class of the files:
    NOT PROVEN, naming encoder and the --kwargs (before: "needs norm", a key its
    __init__ reads from the encoder, as if it were a configuration object)."""
    folder = _encoder_fork(tmp_path, "print('no model built here')\n")
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "needs encoder (no default, no guess from its name)" in out, out
    assert """give the missing argument: --kwargs '{"encoder": "..."}'""" in out, out
    assert "verify: NOT PROVEN (2/3 sites exercised; 1 never ran in a compared case)" in out, out  # hiera.py's 2, heads.py's 1


def test_a_package_init_that_raises_on_both_sides_is_no_mismatch(tmp_path: Path, capsys):
    """The fork deleted its MAE factories but its package __init__.py still imports them:
    importing the package raises on both sides, and leaves hiera.hiera and hiera.hiera_mae
    imported.  The original side built its models from those; the rewritten side must see
    the same imports (before: 'cannot build the rewritten model: ImportError', verdict
    FAILED, a mismatch reported where the two sides agree)."""
    sources = upstream_files()
    sources["hiera_mae.py"] = _cut_factories(sources["hiera_mae.py"])
    assert "mae_hiera_tiny_224" in sources["__init__.py"]
    folder = write(tmp_path / "x" / "hiera", sources)
    code, out, err = verify(folder, capsys)
    assert "cannot build the rewritten model" not in out, out
    assert "note: cannot import hiera: ImportError: cannot import name 'mae_hiera_tiny_224'" in out, out
    assert code == cli.EXIT_CHANGED and "verify: PASSED (8/8 sites exercised" in out, out + err


def test_required_name_looked_up_in_a_registry(tmp_path: Path, capsys):
    """Hiera(model_name) with no default, no call site, no script value: its __init__ looks
    the name up in a module-level registry (HIERA_VARIANTS[model_name]).  The registry's key
    of the smallest model is the value (before: "needs model_name", NOT PROVEN)."""
    sources = _model_name_fork(partial_factory=False)
    sources["hiera.py"] = sub(
        sources["hiera.py"],
        '        assert model_name.startswith("hiera"), model_name\n',
        "        self.variant = HIERA_VARIANTS[model_name]\n",
    )
    sources["hiera.py"] += '\n\nHIERA_VARIANTS = {"hiera_base_224": (2, 3, 16, 3), "hiera_tiny_224": (1, 2, 7, 2), "hiera_large_224": (2, 6, 36, 4)}\n'
    folder = write(tmp_path / "x" / "hiera", sources)
    out = assert_all_proven(folder, capsys)
    assert "model_name='hiera_tiny_224' (a key of hiera.hiera.HIERA_VARIANTS)" in out, out


# CLASSIFIER_HEAD whose encoder is the factory of the fork's hiera module a name picks
BACKBONE_HEAD = sub(CLASSIFIER_HEAD, "import torch.nn as nn\n", "import torch.nn as nn\n\nfrom . import hiera as zoo\n")
BACKBONE_HEAD = sub(BACKBONE_HEAD, "class HieraClassifier(nn.Module):\n    \"\"\"A linear probe over the kept mask units of an encoder the caller builds.",
                    "class Backbone(nn.Module):\n    \"\"\"A linear probe over the kept mask units of a Hiera the config names.")
BACKBONE_HEAD = sub(
    BACKBONE_HEAD,
    "    def __init__(self, encoder: nn.Module, num_classes: int):\n        super().__init__()\n        self.encoder = encoder\n"
    "        self.fc = nn.Linear(encoder.norm.normalized_shape[-1], num_classes)\n"
    "        # tokens of one mask unit in the encoder's last stage (after its q_pool poolings)\n"
    "        self.unit_tokens = encoder.mu_size // math.prod(encoder.q_stride) ** encoder.q_pool\n",
    "    def __init__(self, model_name: str, num_classes: int = 5):\n        super().__init__()\n"
    "        self.encoder = getattr(zoo, model_name)(input_size=(64, 64))\n"
    "        self.fc = nn.Linear(self.encoder.norm.normalized_shape[-1], num_classes)\n"
    "        self.unit_tokens = self.encoder.mu_size // math.prod(self.encoder.q_stride) ** self.encoder.q_pool\n",
)


def test_required_name_of_a_factory_called_by_name(tmp_path: Path, capsys):
    """Backbone(model_name) with no default, no call site, no script value: its __init__
    calls ``getattr(zoo, model_name)(...)`` on the fork's hiera module.  The smallest
    factory that module defines is the value (hiera_tiny_224, not the imported names nor
    Hiera itself); before: "needs model_name", backbone.py's site NOT PROVEN."""
    sources = upstream_files()
    sources["backbone.py"] = BACKBONE_HEAD
    folder = write(tmp_path / "x" / "hiera", sources)
    out = assert_all_proven(folder, capsys)
    assert "model_name='hiera_tiny_224' (a factory of hiera.hiera, called by name)" in out, out
    assert "hiera/backbone.py:" in out


HIERA_CONFIG = '''\
@dataclass
class HieraConfig:
    input_size: Tuple[int, ...] = (256,)
    in_chans: int = 3
    embed_dim: int = 96
    num_heads: int = 1
    num_classes: int = 1000
    stages: Tuple[int, ...] = (1, 2, 7, 2)
    q_pool: int = 2
    q_stride: Tuple[int, ...] = (2,)
    mask_unit_size: Tuple[int, ...] = (8,)
    mask_unit_attn: Tuple[bool, ...] = (True, True, False, False)
    dim_mul: float = 2.0
    head_mul: float = 2.0
    patch_kernel: Tuple[int, ...] = (7,)
    patch_stride: Tuple[int, ...] = (4,)
    patch_padding: Tuple[int, ...] = (3,)
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.0

    def get(self, key, default=None):
        return getattr(self, key, default)


'''


def test_config_object_annotated_with_a_dataclass_takes_its_defaults(tmp_path: Path, capsys):
    """Hiera(cfg: HieraConfig) reading cfg.x, the dataclass holding a 1-D model's defaults,
    and nothing else in the repo: the dataclass's defaults are the configuration (sizes
    still small), as its own defaults are for a constructor.  Before, every key was guessed
    from its name, and a 2-D model was verified in place of the fork's 1-D one."""
    sources = classifier_fork(SEQUENCE_1D)
    text = _config_object_hiera(sources["hiera.py"]).replace("    def __init__(self, cfg):\n", "    def __init__(self, cfg: HieraConfig):\n")
    at = text.index("class Hiera(")
    sources["hiera.py"] = "from dataclasses import dataclass\n" + text[:at] + HIERA_CONFIG + text[at:]
    out = assert_all_proven(write(tmp_path / "x" / "hiera", sources), capsys)
    assert "model hiera.hiera:Hiera (class)  input (2, 3, 64)" in out, out
    assert "input_size=(256,) (a default of HieraConfig)" in out and "q_stride=(2,) (a default of HieraConfig)" in out, out
    assert "filled from names: embed_dim=8, num_heads=1, num_classes=10, stages=(1, 1, 1, 1)" in out, out
