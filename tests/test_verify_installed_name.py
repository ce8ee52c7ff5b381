"""Issue 22, class 1: a fork's package folder named like an installed distribution.

``models/hiera/`` holds the fork's files, importing each other relatively, with no
``__init__.py`` (a namespace package) and no VCS folder, while hiera-transformer is
installed as ``hiera``.  verify took ``models/`` as the import root and imported the
files as ``hiera.hiera``: the installed regular package won that name, and the folder
put on sys.path made ``hiera.py`` a top-level module ("attempted relative import with
no known parent package", every site NOT PROVEN).  The import root is now the folder
above, as Python imports the files run from the repo root: ``models.hiera.hiera``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hiera_rewrite.verify.layout import find_layout
from tests.test_verify_layouts import MODULES, assert_all_proven, upstream_files, write

pytest.importorskip("torch")
pytest.importorskip("timm")


def installed_name_repo(tmp_path: Path) -> Path:
    """A repo with the fork's files in ``models/hiera/`` (relative imports, no
    ``__init__.py``, no VCS folder); returns the repo."""
    repo = tmp_path / "repo"
    write(repo / "models" / "hiera", {k: v for k, v in upstream_files().items() if k in MODULES})
    return repo


def test_namespace_folder_named_like_an_installed_package(tmp_path: Path, capsys, monkeypatch):
    import hiera  # the installed distribution holding the name

    assert Path(hiera.__file__).name == "__init__.py"
    repo = installed_name_repo(tmp_path)
    monkeypatch.chdir(repo)
    assert find_layout(Path("models/hiera/hiera.py")).root == repo
    out = assert_all_proven(Path("models/hiera"), capsys)
    assert f"namespace layout, import root {repo} (models)" in out
    assert "models.hiera.hiera:hiera_tiny_224 -> Hiera" in out
    assert "attempted relative import" not in out


def test_a_regular_package_keeps_its_own_name(tmp_path: Path):
    """With an __init__.py the repo's own package wins the name (its root first on the
    path), as in upstream's own folder: the import root stays where it was."""
    folder = write(tmp_path / "x" / "hiera", upstream_files())
    layout = find_layout(folder / "hiera.py")
    assert (layout.root, layout.kind) == (tmp_path / "x", "package")
