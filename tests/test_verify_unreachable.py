"""Issue 22, class 8: a path the original cannot run.

A fork changed what ``Hiera.forward`` returns with ``return_intermediates=True`` (a third
value), and its own MAE still unpacks two: the original MAE raises "too many values to
unpack" in every build.  The MAE's sites get a verdict of their own, "unreachable in the
original: <exception> at <file:line>", apart from NOT PROVEN; the classifier's sites are
still proven and compared; the verdict is PASSED, saying how many sites the original
cannot reach.  A sabotaged rewrite of a reachable site still FAILS, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

from hiera_rewrite import cli
from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_layouts import _cut_factories, applied_sites, sabotage, site_rows, sub, upstream_files, verify, write

pytest.importorskip("torch")
pytest.importorskip("timm")


@pytest.fixture(scope="module")
def fork(tmp_path_factory) -> Path:
    sources = upstream_files()
    sources["hiera.py"] = sub(
        sources["hiera.py"],
        "        if return_intermediates:\n            return x, intermediates\n",
        "        if return_intermediates:\n            return x, intermediates, mask\n",
    )
    return write(tmp_path_factory.mktemp("unreachable") / "x" / "hiera", sources)


def test_sites_only_a_broken_path_reaches_are_unreachable_not_unproven(fork: Path, capsys, monkeypatch):
    monkeypatch.chdir(fork.parent)
    expected = applied_sites(Path("hiera"), capsys)
    code, out, err = verify(Path("hiera"), capsys)
    assert code == cli.EXIT_CHANGED, out + err
    rows = site_rows(out)
    assert sorted(rows) == sorted(expected), out
    mae = {k: r for k, r in rows.items() if "hiera_mae.py" in k}
    assert mae and all(
        "unreachable in the original: ValueError: too many values to unpack (expected 2) at hiera/hiera_mae.py:" in r for r in mae.values()
    ), out
    assert all(r.rstrip().endswith("pass") for k, r in rows.items() if k not in mae), out  # proven through the classifier
    lines = [line for line in out.splitlines() if line.startswith("unreachable in the original:")]
    assert len(lines) == len(mae), out
    assert "NOT PROVEN" not in out, out
    assert f"verify: PASSED ({len(rows) - len(mae)}/{len(rows)} sites exercised, {len(mae)} unreachable in the original, every comparison equal)" in out, out


def test_a_sabotaged_reachable_site_still_fails(fork: Path, capsys, monkeypatch):
    # the attention output restore loses its transpose: runs, tokens in the wrong order
    sabotage(monkeypatch, r"x\.transpose\(1, 2\)\.reshape\(B, -1, self\.dim_out\)", "x.reshape(B, -1, self.dim_out)")
    monkeypatch.chdir(fork.parent)
    code, out, err = verify(Path("hiera"), capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    hr001 = [row for key, row in site_rows(out).items() if key.endswith("HR001") and "hiera.py:" in key]
    assert hr001 and "FAIL" in hr001[0], out
    assert "verify: FAILED" in out


def test_an_unbuildable_model_names_the_factory_line_to_edit(tmp_path: Path, capsys, monkeypatch):
    """Every build of the fork's MAE fails its own check (it wants q_pool=1 from its caller):
    its sites are NOT PROVEN, and the message gives the --factory line of the build tried,
    filled in with the model's configuration; that line with the value changed (and smaller
    dims) proves every 2-D site."""
    sources = upstream_files()
    sources["hiera_mae.py"] = sub(
        sources["hiera_mae.py"],
        "        encoder_dim_out = self.blocks[-1].dim_out\n",
        "        encoder_dim_out = self.blocks[-1].dim_out\n        assert self.q_pool < 2, 'this fork pools once'\n",
    )
    write(tmp_path / "x" / "hiera", sources)
    monkeypatch.chdir(tmp_path / "x")
    code, out, err = verify(Path("hiera"), capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    line = """--factory hiera.hiera_mae:MaskedAutoencoderHiera:'{"embed_dim": 96, "num_heads": 1, "stages": [1, 2, 7, 2], "q_pool": 2}'"""
    unproven = [x for x in out.splitlines() if x.startswith("not proven:")]
    assert unproven and all(f"reach it with {line}" in x for x in unproven), out
    given = '{"embed_dim": 8, "num_heads": 1, "stages": [1, 2, 7, 2], "q_pool": 1, "input_size": [64, 64], "decoder_depth": 1, "decoder_embed_dim": 16}'
    code, out, err = verify(Path("hiera"), capsys, "--factory", f"hiera.hiera_mae:MaskedAutoencoderHiera:{given}")
    # every site but the 3-D label path (a 2-D model): that is what --factory for a video build would add
    unproven = sorted(k for k, r in site_rows(out).items() if "NOT PROVEN" in r)
    assert [k.split(":")[0] for k in unproven] == ["hiera/hiera_mae.py"] * 2 and "verify: NOT PROVEN (6/8 sites exercised" in out, out
    assert all("get_pixel_label_3d" in r or "forward_loss" in r for k, r in site_rows(out).items() if k in unproven), out


def test_a_shape_error_in_every_build_is_not_called_unreachable(tmp_path: Path, capsys, monkeypatch):
    """A fork (factories deleted) sizes its decoder's position table for 256-pixel images:
    every build verify tries (224 px and smaller) raises the same shape mismatch at the same
    statement.  A real 256-pixel input runs that path, so it is NOT PROVEN, never
    "unreachable in the original" (that would be a PASS for code nothing compared)."""
    sources = upstream_files()
    mae = _cut_factories(sources["hiera_mae.py"])
    sources["hiera_mae.py"] = sub(
        mae,
        "                1, math.prod(self.tokens_spatial_shape_final), decoder_embed_dim",
        "                1, 64 if len(self.q_stride) == 2 else math.prod(self.tokens_spatial_shape_final), decoder_embed_dim  # 8 x 8 at 256 px",
    )
    sources["__init__.py"] = "from .hiera import Hiera, hiera_tiny_224\nfrom .hiera_mae import MaskedAutoencoderHiera\n"
    write(tmp_path / "x" / "hiera", sources)
    monkeypatch.chdir(tmp_path / "x")
    code, out, err = verify(Path("hiera"), capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "unreachable in the original" not in out, out
    assert "verify: NOT PROVEN" in out and "RuntimeError: The size of tensor a" in out, out


def _dict_forward_mae(read: str) -> Dict[str, str]:
    """upstream's files, the MAE's forward taking a batch dict and reading it with ``read``."""
    sources = upstream_files()
    mae = sub(sources["hiera_mae.py"], "    def forward(\n        self,\n        x: torch.Tensor,\n", "    def forward(\n        self,\n        batch: dict,\n")
    sources["hiera_mae.py"] = sub(
        mae,
        "    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:\n\n        latent, mask",
        f"    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:\n{read}        latent, mask",
    )
    return sources


def test_a_forward_taking_a_dict_is_not_called_unreachable(tmp_path: Path, capsys):
    """The fork's MAE.forward takes a batch dict with two keys (``batch["video"]``,
    ``batch["clip_id"]``), an input verify does not make.  Every build raised at the first
    read, a TypeError (a tensor indexed by a string) in one and an IndexError in another: a
    statement that fails on the input verify made, not a path the original cannot run.
    Before, the TypeError counted as "unreachable" and the verdict was PASSED with the MAE's
    six sites never compared."""
    read = '        x = batch["video"]\n        clip = batch["clip_id"]\n'
    code, out, err = verify(write(tmp_path / "x" / "hiera", _dict_forward_mae(read)), capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "unreachable" not in out, out
    assert "verify: NOT PROVEN (2/8 sites exercised; 6 never ran in a compared case)" in out, out  # hiera.py's 2 compared


def test_a_forward_taking_a_dict_of_one_key_is_given_one(tmp_path: Path, capsys):
    """The same fork reading one key (``x = batch.get("video")``): verify gives forward
    ``{"video": x}`` and proves every site (issue 22, class 3: an input the original takes)."""
    folder = write(tmp_path / "x" / "hiera", _dict_forward_mae('        x = batch.get("video")\n'))
    code, out, err = verify(folder, capsys)
    assert code == cli.EXIT_CHANGED, out + err
    assert "forward takes a dict: {'video': x}" in out, out
    assert "verify: PASSED (8/8 sites exercised, every comparison equal)" in out, out


def _raised(source: str, call: str, **names) -> BaseException:
    scope = dict(names)
    path = Path(names.pop("path"))
    path.write_text(source)
    exec(compile(source, str(path), "exec"), scope)  # noqa: S102 -- the test's own code
    try:
        eval(call, scope)  # noqa: S307
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError(f"{call} did not raise")


@pytest.mark.parametrize(
    "body, expected",
    [
        # unpacking what the model's own method returns: the same whatever the input
        ("class M(nn.Module):\n    def f(self, x):\n        return x, x, x\n    def g(self, x):\n        a, b = self.f(x)\n", True),
        ("def helper(x):\n    return x, x, x\nclass M(nn.Module):\n    def g(self, x):\n        a, b = helper(x)\n", True),
        # unpacking the input's shape, a tensor or a tensor's method: the input decides
        ("class M(nn.Module):\n    def g(self, x):\n        B, C, H, W = x.shape\n", False),
        ("class M(nn.Module):\n    def g(self, x):\n        a, b = x\n", False),
        ("class M(nn.Module):\n    def g(self, x):\n        a, b = x.split(1)\n", False),
        # a tensor indexed by a string (the fork's forward takes a dict), a tensor's attribute
        ('class M(nn.Module):\n    def g(self, x):\n        return x["video"]\n', False),
        ("class M(nn.Module):\n    def g(self, x):\n        return x.video\n", False),
        # the model lacks an attribute; a call with the wrong arguments; an undefined name
        ("class M(nn.Module):\n    def g(self, x):\n        return self.missing(x)\n", True),
        ("class M(nn.Module):\n    def f(self, x):\n        return x\n    def g(self, x):\n        return self.f(x, x)\n", True),
        ("class M(nn.Module):\n    def g(self, x):\n        return undefined_name\n", True),
        # a name only one branch binds: the input chose the branch
        ("class M(nn.Module):\n    def g(self, x):\n        if x.dim() == 3:\n            y = x\n        return y\n", False),
    ],
)
def test_which_errors_are_the_same_whatever_the_input(tmp_path: Path, body: str, expected: bool):
    import torch

    from hiera_rewrite.verify.worker import _structural

    exc = _raised("import torch\nfrom torch import nn\n" + body, "M().g(torch.zeros(3, 3, 4, 4, 4))", path=str(tmp_path / "fork.py"))
    assert _structural(exc) is expected, (type(exc).__name__, exc)


@pytest.mark.parametrize(
    "forward, key",
    [
        ('    def forward(self, batch):\n        return batch["video"] * 2\n', "video"),
        ('    def forward(self, batch, mask=None):\n        x = batch.get("video")\n        return self.f(x)\n', "video"),
        ('    def forward(self, batch):\n        return batch["video"] + batch["audio"]\n', None),  # two keys: not made
        ("    def forward(self, x):\n        return x[..., 0]\n", None),
        ('    def forward(self, x):\n        return x.shape, x["a"]\n', None),  # read as a tensor too
        ("    def forward(self, x, mask=None, return_intermediates=False):\n        return self.f(x)\n", None),
    ],
)
def test_the_key_a_dict_taking_forward_reads(tmp_path: Path, forward: str, key):
    import importlib
    import sys

    from hiera_rewrite.verify.inputs import fed, input_key

    (tmp_path / "dict_forward_mod.py").write_text("class M:\n" + forward)
    sys.path.insert(0, str(tmp_path))
    try:
        cls = importlib.import_module("dict_forward_mod").M
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("dict_forward_mod", None)
    assert input_key(cls) == key
    assert fed(cls(), 7) == ({key: 7} if key else 7)
