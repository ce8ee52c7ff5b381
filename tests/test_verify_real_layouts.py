"""Issue 31: ``--verify`` on the layouts of real research repos that vendor Hiera.

Each repo is built here, in a temp dir, from copies of the installed upstream files (read
at test time, never stored) plus the edits that make it look like the repos where verify
failed:

* A. every factory takes a required ``model_name``; the repo's own code names the models
  (a registry, a call in a script, argparse ``choices``, a YAML config, an ``if model_name
  == ...`` chain in the constructor): verify tries those values, smallest model first, and
  where it still cannot reach a site names one flag with a value from the repo;
* B. ``from src.models.components.hiera import ...`` with ``src/`` a plain folder (no
  ``__init__.py``) at the repo root: the import root is the repo root;
* C. a library whose nets refuse to build without a config object, built with one in the
  repo's own tests (``tests/test_*.py``): verify builds them as the tests do;
* D. a module that raises on import because of an installed library's version.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hiera_rewrite import cli
from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_layouts import _cut_factories, _model_name_fork, assert_all_proven, classifier_fork, sub, upstream_files, verify, write

pytest.importorskip("torch")
pytest.importorskip("timm")


# -- B: a namespace folder at the repo root named in the repo's own imports --------------------

HIERA_MODULE = '''\
import torch.nn as nn

from src.models.components.hiera.hiera import Hiera


class HieraModule(nn.Module):
    """The training wrapper (a LightningModule in the real repos)."""

    def __init__(self, net: Hiera):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)
'''


def src_namespace_repo(tmp_path: Path, package_init: str) -> Path:
    """repo/src/ without __init__.py; src/models/ and src/models/components/ regular
    packages; the Hiera files (relative imports) in src/models/components/hiera/.  The
    repo imports them as ``src.models.components.hiera...`` (run from the repo root)."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    folder = write(repo / "src" / "models" / "components" / "hiera", classifier_fork())
    write(repo / "src" / "models" / "components", {"__init__.py": ""})
    write(repo / "src" / "models", {"__init__.py": package_init, "hiera_module.py": HIERA_MODULE})
    write(repo / "src", {"train.py": "from src.models.hiera_module import HieraModule\n"})
    assert not (repo / "src" / "__init__.py").exists()
    return folder


def test_src_namespace_folder_imported_by_a_parent_package_init(tmp_path: Path, capsys):
    """src/models/__init__.py imports ``from src.models.hiera_module import HieraModule``
    (the lightning-hydra layout): it runs whenever the Hiera files import.  The import root
    is the repo root (before: src/, the package's parent; "cannot import src (not
    installed)", every site NOT PROVEN)."""
    folder = src_namespace_repo(tmp_path, "from src.models.hiera_module import HieraModule\n")
    out = assert_all_proven(folder, capsys)
    assert f"import root {tmp_path / 'repo'} (src)" in out, out
    assert "model src.models.components.hiera.hiera:Hiera (class)" in out, out
    assert "cannot import src" not in out


def test_src_namespace_folder_named_by_the_repos_scripts(tmp_path: Path, capsys):
    """No package __init__ imports through src, but the repo's own code does (its train
    script, its wrapper): the files import under the names the repo gives them,
    ``src.models.components.hiera.hiera`` (before: ``models.components.hiera.hiera``, from
    src/ as the root, a name nothing in the repo uses)."""
    folder = src_namespace_repo(tmp_path, "")
    out = assert_all_proven(folder, capsys)
    assert f"import root {tmp_path / 'repo'} (src)" in out, out
    assert "model src.models.components.hiera.hiera:Hiera (class)" in out, out



def test_a_sibling_importing_the_tree_by_a_shorter_name_is_no_clone(tmp_path: Path, capsys):
    """src/, src/models/, src/models/components/ are regular packages; hiera.py imports its
    utilities as ``src.models.components.hiera_utils`` (run from the repo root), and another
    file of the folder as ``models.components.hiera_utils`` (a script once run from src/).
    The shorter name made src/models a repo-as-package clone imported as ``models``, where
    hiera.py's ``src.`` import cannot resolve ("cannot import src (not installed)", every
    site NOT PROVEN; seen in a real lightning-hydra repo).  The longer name, from the repo
    root, wins."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    sources = classifier_fork()
    sources["hiera.py"] = sub(sources["hiera.py"], "from .hiera_utils import", "from src.models.components.hiera_utils import")
    sources["other.py"] = "from models.components.hiera_utils import conv_nd\n\nCONV = conv_nd(2)\n"
    folder = write(repo / "src" / "models" / "components", sources)
    write(repo / "src" / "models", {"__init__.py": ""})
    write(repo / "src", {"__init__.py": ""})
    out = assert_all_proven(folder, capsys)
    assert f"package layout, import root {repo} (src)" in out, out
    assert "model src.models.components.hiera:Hiera (class)" in out, out


def test_a_plain_folder_named_like_an_installed_package_is_not_the_root(tmp_path: Path, capsys):
    """A clone of upstream's repo inside the project: repo/hiera/ (setup.py, hubconf.py, no
    __init__.py) holding the package repo/hiera/hiera/; the training script does ``from
    hiera import hiera``.  Run from the repo root, ``hiera`` is the installed package (a
    regular package wins over a plain folder), not repo/hiera/: the files import as the
    package ``hiera`` from repo/hiera/ (before: the repo root, ``hiera.hiera.hiera``, "'hiera.hiera'
    is not a package", every site NOT PROVEN; seen in two real forks)."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    folder = write(repo / "hiera" / "hiera", upstream_files())
    write(repo / "hiera", {"setup.py": "from setuptools import setup\n\nsetup(name='hiera')\n", "hubconf.py": "from hiera import hiera_tiny_224\n"})
    write(repo, {"train_mae.py": "from hiera import hiera\n\nmodel = hiera.hiera_tiny_224()\n"})
    out = assert_all_proven(folder, capsys)
    assert f"package layout, import root {repo / 'hiera'} (hiera)" in out, out
    assert "model hiera.hiera:hiera_tiny_224 -> Hiera" in out, out

# -- A: a required model_name the repo's own code names -----------------------------------------

CHECK = '        assert model_name.startswith("hiera"), model_name\n'

# the constructor picks its configuration by name; the smallest name it knows raises (no such
# model in this fork): the next smallest is taken
NAME_CHAIN = '''\
        if model_name == "hiera_base_224":
            stages = (2, 3, 16, 3)
        elif model_name == "hiera_small_224":
            stages = (1, 2, 11, 2)
        elif model_name in ("hiera_tiny_224", "hiera_tiny_224_in21k"):
            stages = (1, 2, 7, 2)
        elif model_name == "hiera_nano_224":
            raise NotImplementedError("hiera_nano_224 is not released")
        else:
            raise ValueError(f"unknown model {model_name}")
'''

BUILD_MODEL = '''

HIERA_CONFIGS = {
    "hiera_base_224": dict(embed_dim=96, num_heads=1, stages=(2, 3, 16, 3)),
    "hiera_tiny_224": dict(embed_dim=96, num_heads=1, stages=(1, 2, 7, 2)),
}


def build_model(model_name: str, num_classes: int = 1000):
    cfg = HIERA_CONFIGS[model_name]
    model = Hiera(model_name=model_name, num_classes=num_classes, **cfg)
    return model
'''

ARGPARSE_CHOICES = '''\
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--model_name", required=True, choices=["hiera_base_224", "hiera_tiny_224"])
'''


def model_name_repo(tmp_path: Path, source: str) -> Path:
    """``Hiera(model_name: str, ...)`` with no default (factories cut: build_from_args reads
    kwargs["model_name"]); the repo names the models in one place (``source``)."""
    sources = _model_name_fork(partial_factory=False)
    repo = tmp_path / "repo"
    if source == "chain":
        sources["hiera.py"] = sub(sources["hiera.py"], CHECK, NAME_CHAIN)
    elif source == "registry":
        sources["hiera.py"] += BUILD_MODEL
    elif source == "test call":
        sources["hiera.py"] += BUILD_MODEL.replace("HIERA_CONFIGS[model_name]", "{}")
        write(repo / "tests", {"test_model.py": (
            "from hiera.hiera import build_model\n\n\ndef test_build():\n"
            '    model = build_model(model_name="hiera_tiny_224", num_classes=3)\n'
            "    assert model is not None\n"
        )})
    elif source == "choices":
        write(repo, {"train.py": ARGPARSE_CHOICES})
    elif source == "factory names":  # a label only; the factories' names are the repo's model names
        sources["hiera.py"] = sub(sources["hiera.py"], CHECK, "        self.model_name = model_name\n")
        sources["hiera.py"] += (
            "\n\nhiera_base_224 = partial(Hiera, embed_dim=96, num_heads=1, stages=(2, 3, 16, 3))\n"
            "hiera_tiny_224 = partial(Hiera, embed_dim=96, num_heads=1, stages=(1, 2, 7, 2))\n"
        )
    elif source == "smallest first":
        write(repo / "scripts", {"train.sh": "python train.py --model_name hiera_base_224 --epochs 100\n"})
        write(repo / "configs" / "model", {"hiera.yaml": "model_name: hiera_small_224\nlr: 0.001\n"})
    return write(repo / "hiera", sources)


@pytest.mark.parametrize("source, origin", [
    ("chain", "model_name='hiera_tiny_224' (named in Hiera.__init__)"),
    ("registry", "model_name='hiera_tiny_224' (a key of hiera.hiera.HIERA_CONFIGS)"),
    ("test call", "model_name='hiera_tiny_224' (tests/test_model.py:5)"),
    ("choices", "model_name='hiera_tiny_224' (train.py --model_name choices)"),
    ("smallest first", "model_name='hiera_small_224' (configs/model/hiera.yaml)"),
    ("factory names", "model_name='hiera_tiny_224' (the name of a factory of Hiera)"),
])
def test_required_model_name_from_the_repos_own_names(tmp_path: Path, capsys, source: str, origin: str):
    """Issue 31, class A: Hiera needs ``model_name`` and the repo names its models in its
    constructor (an ``if model_name == ...`` chain), a registry a factory looks it up in, a
    call in its tests, argparse ``choices``, a YAML config beside a script giving a larger
    one, or only by its factories' names (``hiera_tiny_224 = partial(Hiera, ...)``, the
    name a label: a real fork's calculate_flops.py builds ``getattr(hiera,
    name)(model_name=name)``).  verify tries them, smallest model first, and a name the constructor rejects
    gives way to the next (before: "needs model_name", NOT PROVEN, the message asking for
    ``--kwargs '{"model_name": "..."}'``; or, for the last, the script's larger model)."""
    out = assert_all_proven(model_name_repo(tmp_path, source), capsys)
    assert origin in out, out


MAE_CONFIGS = '''\
GRID_2D = dict(input_size=(64, 64), q_stride=(2, 2), mask_unit_size=(8, 8), patch_kernel=(7, 7), patch_stride=(4, 4), patch_padding=(3, 3))
MAE_CONFIGS = {
    "mae_hiera_small_64": dict(GRID_2D, embed_dim=96, stages=(1, 2, 11, 2)),
    "mae_hiera_tiny_64": dict(GRID_2D, embed_dim=96, stages=(1, 2, 7, 2)),
    "mae_hiera_tiny_4x64": dict(
        input_size=(4, 64, 64), q_stride=(1, 2, 2), mask_unit_size=(1, 8, 8), patch_kernel=(3, 7, 7),
        patch_stride=(2, 4, 4), patch_padding=(1, 3, 3), embed_dim=96, stages=(1, 2, 7, 2),
    ),
}


'''

# the name picks the grid over what the caller gives (sizes the caller gives stay)
MAE_PICK = '''\
        picked = MAE_CONFIGS[model_name]
        kwdargs.update({k: v for k, v in picked.items() if k not in ("embed_dim", "stages") or k not in kwdargs})
        patch_stride = kwdargs.pop("patch_stride", patch_stride)
'''


def test_a_site_only_another_named_model_reaches(tmp_path: Path, capsys):
    """Issue 31, class A: the MAE needs ``model_name`` and its registry holds a 2-D and a
    video model; the name picks the grid over the caller's (so the 3-D build of the class
    verify tries is 2-D again).  The 3-D label path runs only for ``mae_hiera_tiny_4x64``:
    verify builds the smallest model of each other kind the repo names while a site is
    unreached (before: NOT PROVEN, "reach it with --factory ...:'{...}'")."""
    sources = upstream_files()
    mae = _cut_factories(sources["hiera_mae.py"])
    mae = sub(mae, "        self,\n        in_chans: int = 3,\n        patch_stride", "        self,\n        model_name: str,\n        in_chans: int = 3,\n        patch_stride")
    mae = sub(mae, "        **kwdargs,\n    ):\n        super().__init__(\n", "        **kwdargs,\n    ):\n" + MAE_PICK + "        super().__init__(\n")
    mae = sub(mae, "class MaskedAutoencoderHiera(Hiera):", MAE_CONFIGS + "class MaskedAutoencoderHiera(Hiera):")
    sources["hiera_mae.py"] = mae
    sources["__init__.py"] = "from .hiera import Hiera, hiera_tiny_224\nfrom .hiera_mae import MaskedAutoencoderHiera\n"
    out = assert_all_proven(write(tmp_path / "x" / "hiera", sources), capsys)
    assert "model_name='mae_hiera_tiny_64' (a key of hiera.hiera_mae.MAE_CONFIGS)" in out, out
    assert "model hiera.hiera_mae:MaskedAutoencoderHiera (class) (model_name='mae_hiera_tiny_4x64': a key of hiera.hiera_mae.MAE_CONFIGS)  input (2, 3, 4, 64, 64)" in out, out
    assert "mae_hiera_small_64" not in out  # the same kind as tiny_64, larger: not built


# -- C: nets that refuse to build without the config object the repo's tests give ---------------


def config_library(tmp_path: Path, how: str) -> Path:
    """repo/mylib: a library whose ``Hiera(config=None)`` raises "must set config" and reads
    every setting from ``self.config`` (a ``HieraConfig`` dataclass of mylib/config.py, with
    a ``from_yaml``); tests/test_hiera.py builds it with a real config (``how``: inline, a
    pytest fixture, or from configs/hiera_tiny.yaml).  Returns mylib/models/."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    sources = classifier_fork()
    hiera = sources["hiera.py"]
    head = "    @has_config\n    def __init__(\n        self,\n"
    tail = "    ):\n        super().__init__()\n"
    start = hiera.index(head)
    end = hiera.index(tail, start)
    fields, names = [], []
    for line in hiera[start + len(head):end].splitlines():
        m = re.match(r"\s+(\w+): (.+?) = (.+),$", line.split("#")[0].rstrip())
        if m:
            names.append(m.group(1))
            fields.append(f"    {m.group(1)}: {'tuple' if m.group(2).startswith('Tuple') else 'object'} = {m.group(3)}")
    assert "embed_dim" in names and "stages" in names
    hiera = hiera[:start] + (
        '    def __init__(self, config: Optional["HieraConfig"] = None):\n'
        "        super().__init__()\n"
        "        if config is None:\n"
        '            raise ValueError("must set config")\n'
        "        self.config = config\n"
        "        c = self.config\n" + "".join(f"        {n} = c.{n}\n" for n in names)
    ) + hiera[end + len(tail):]
    hiera = sub(hiera, "class Hiera(nn.Module, PyTorchModelHubMixin):", "class Hiera(nn.Module):")
    hiera = sub(hiera, "from .hfhub import has_config, PyTorchModelHubMixin\n", "from ..config import HieraConfig\n")
    config = (
        "from dataclasses import dataclass\n\nimport yaml\n\n\n@dataclass\nclass HieraConfig:\n" + "\n".join(fields) + "\n\n"
        "    @classmethod\n    def from_yaml(cls, path):\n        with open(path) as f:\n"
        "            return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in yaml.safe_load(f).items()})\n"
    )
    write(repo / "mylib", {"__init__.py": "", "config.py": config})
    folder = write(repo / "mylib" / "models", {"__init__.py": "", "hiera.py": hiera, "hiera_utils.py": sources["hiera_utils.py"]})
    made = "HieraConfig(input_size=(64, 64), embed_dim=96, num_heads=1, stages=(1, 2, 7, 2), q_pool=2, num_classes=10)"
    test = "import pytest\nimport torch\n\nfrom mylib.config import HieraConfig\nfrom mylib.models.hiera import Hiera\n\n\n"
    if how == "inline":
        test += f"def test_forward():\n    net = Hiera(config={made})\n"
    elif how == "fixture":
        test += f"@pytest.fixture\ndef config():\n    return {made}\n\n\ndef test_forward(config):\n    net = Hiera(config=config)\n"
    else:
        write(repo / "configs", {"hiera_tiny.yaml": "input_size: [64, 64]\nembed_dim: 96\nnum_heads: 1\nstages: [1, 2, 7, 2]\nq_pool: 2\nnum_classes: 10\n"})
        test += 'def test_forward():\n    net = Hiera(HieraConfig.from_yaml("configs/hiera_tiny.yaml"))\n'
    test += "    assert net(torch.randn(2, 3, 64, 64)).shape == (2, 10)\n"
    write(repo / "tests", {"test_hiera.py": test})
    return folder


@pytest.mark.parametrize("how, built", [
    ("inline", "built from small: config.embed_dim=8, config.stages=(1, 1, 1, 1)"),
    ("fixture", "built from small: config.embed_dim=8, config.stages=(1, 1, 1, 1)"),
    ("yaml", "built from its configuration"),
])
def test_net_built_with_the_config_its_tests_give(tmp_path: Path, capsys, how: str, built: str):
    """Issue 31, class C: ``Hiera(config=None)`` raises "must set config"; the repo's test
    builds it with ``HieraConfig(...)`` (inline, through a pytest fixture, or
    ``HieraConfig.from_yaml("configs/hiera_tiny.yaml")``, a path from the repo root).  verify
    builds it as the test does, the config called again on each side from that side's copy
    (its sizes small where it is a class taking them).  Before: the config argument was
    dropped, "ValueError: must set config", NOT PROVEN."""
    out = assert_all_proven(config_library(tmp_path, how), capsys)
    assert "model mylib.models.hiera:Hiera (as at tests/test_hiera.py:" in out, out
    assert built in out, out
    assert "must set config" not in out


# -- D: a module that raises on import inside an installed library ------------------------------


def _huggingface_hub_version():
    hub = pytest.importorskip("huggingface_hub")
    from packaging.version import Version

    return Version(hub.__version__)


def test_import_rejected_by_the_installed_huggingface_hub_is_named(tmp_path: Path, capsys):
    """Issue 31, class D: a fork dropped ``@has_config`` (whose ``*args, **kwdargs`` hid the
    signature from the hub mixin) and gave ``Hiera.__init__`` a dataclass *class* as a
    default (``settings=HieraSettings``).  huggingface_hub >= 0.30 passes every dataclass
    default to ``asdict()`` when a ``PyTorchModelHubMixin`` class is defined, so the module
    cannot be imported here at all (0.29.3 imports it and verify PASSES: checked by hand in a
    throwaway venv).  That is the environment, not verify: the message names the library, its
    version, the statement and the way out (before: "TypeError: asdict() should be called on
    dataclass instances", nothing more)."""
    from packaging.version import Version

    version = _huggingface_hub_version()
    if version < Version("0.30"):
        pytest.skip(f"huggingface_hub {version} accepts a dataclass class as a default")
    sources = classifier_fork()
    hiera = sub(sources["hiera.py"], "    @has_config\n    def __init__(\n        self,\n", "    # @has_config\n    def __init__(\n        self,\n        settings=HieraSettings,\n")
    hiera = sub(hiera, "class Hiera(nn.Module, PyTorchModelHubMixin):", '@dataclass\nclass HieraSettings:\n    decoder: str = "hiera"\n\n\nclass Hiera(nn.Module, PyTorchModelHubMixin):')
    sources["hiera.py"] = "from dataclasses import dataclass\n" + hiera
    folder = write(tmp_path / "x" / "hiera", sources)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    verdict = [line for line in out.splitlines() if line.startswith("verify: NOT PROVEN")]
    assert len(verdict) == 1, out
    assert "asdict() should be called on dataclass instances, raised in huggingface" in verdict[0], out
    assert f"hub {version} (hub_mixin.py __init_subclass__) by " in verdict[0], out
    assert "hiera/hiera.py:" in verdict[0] and "`class Hiera(nn.Module, PyTorchModelHubMixin):`" in verdict[0], out
    assert "Hiera.__init__(settings=HieraSettings) is a dataclass class, not an instance" in verdict[0], out
    assert "install 'huggingface_hub<0.30'" in verdict[0], out
    assert "mismatch" not in out and "=> FAIL" not in out


FALLBACK = '''\
import dataclasses

import torch.nn as nn
from huggingface_hub import PyTorchModelHubMixin


@dataclasses.dataclass
class Settings:
    width: int = 8


try:
    class Net(nn.Module, PyTorchModelHubMixin):
        def __init__(self, settings=Settings):
            super().__init__()
except TypeError:  # a huggingface_hub this code does not work with: no hub support
    del PyTorchModelHubMixin

    class Net(nn.Module, PyTorchModelHubMixin):
        def __init__(self, settings=Settings):
            super().__init__()
'''


def test_a_fallback_raising_while_handling_the_library_error_names_the_first(tmp_path: Path, monkeypatch):
    """The error import raises is the fallback's ``NameError: PyTorchModelHubMixin``; the
    error it was handling, raised inside huggingface_hub, is the cause named (then the
    NameError), not the NameError alone."""
    import importlib
    import sys

    from packaging.version import Version

    from hiera_rewrite.verify.discovery import Discovery

    if _huggingface_hub_version() < Version("0.30"):
        pytest.skip("this huggingface_hub accepts a dataclass class as a default")
    side = tmp_path / "orig"
    write(side / "fallbackpkg", {"__init__.py": "", "net.py": FALLBACK})
    monkeypatch.syspath_prepend(str(side))
    with pytest.raises(NameError) as raised:
        importlib.import_module("fallbackpkg.net")
    sys.modules.pop("fallbackpkg", None)
    finder = Discovery()
    finder.spec = {"sides": {"orig": str(side)}, "traced": {"orig": {}}}
    said = finder.environment_error(raised.value)
    assert said is not None
    assert said.startswith("TypeError: asdict() should be called on dataclass instances, raised in huggingface"), said
    assert "by fallbackpkg/net.py:13 `class Net(nn.Module, PyTorchModelHubMixin):`" in said, said
    assert "(then, handling it: NameError: name 'PyTorchModelHubMixin' is not defined)" in said, said
    assert "Net.__init__(settings=Settings) is a dataclass class, not an instance" in said, said
