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

from pathlib import Path

import pytest

from hiera_rewrite import cli
from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_layouts import assert_all_proven, classifier_fork, verify, write

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
