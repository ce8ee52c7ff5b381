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


def verify(target: Path, capsys, *extra: str):
    code = cli.main(["--verify", "--check", *extra, str(target)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


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
    """Instantiated nowhere; its constructor takes an argument nothing can guess."""

    def __init__(self, stride: int, keep_order):
        super().__init__()
        self.stride = stride
        self.keep_order = keep_order

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
    assert "keep_order" in message[0] and "--factory hiera.hiera_utils:UnusedPool:" in message[0], out
    assert "verify: NOT PROVEN" in out
