"""The built package, not the source tree: wheel and sdist from ``python -m build``.

One build (sdist from this checkout, the wheel built from that sdist, as ``build``
does) and one fresh ``python -m venv`` per session: the wheel is installed there with
its dependencies (libcst, black) from the package index, plus ``hiera-transformer``
with ``--no-deps`` (the rewrite needs no torch).  Every command then runs from a
temporary folder with the venv's interpreter and console script, so nothing of the
checkout can be imported.  ``twine check --strict`` passes on both files; the sdist
holds what a downstream packager needs (README, LICENSE, CHANGELOG, pyproject.toml,
the tests with their golden files); the wheel installs ``hiera_rewrite`` and
``hiera_rewrite.codemods`` and no top-level ``codemods``.

Building and installing need setuptools, libcst and black from the index (or a
wheelhouse pip is configured for); where pip cannot reach them the tests are skipped
and say so.  Measured on a shared 2-core machine: 22-28 s for the module, nearly all
of it the build (6-9 s) and the venv with its installs (10-13 s).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

import hiera_rewrite
from hiera_rewrite.engine import every_code, rewrite_bytes

# one xdist worker runs the whole module: its build of the sdist and wheel runs once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_IN = ROOT / "golden/attention/windowed_basic.in.py"
UPSTREAM = "hiera-transformer==0.1.4"

OFFLINE = re.compile(
    # "versions: none": the index has no release of it at all (a bad pin lists the versions)
    r"\(from versions: none\)\s*\n.*No matching distribution found for \S+"
    r"|Failed to establish a new connection|Network is unreachable|Temporary failure in name resolution"
    r"|Could not fetch URL|ProxyError|Name or service not known"
)


def _clean_env(extra_path: List[Path] = ()) -> Dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONSAFEPATH")
    }
    env["PATH"] = os.pathsep.join([*map(str, extra_path), env.get("PATH", "")])
    return env


def _run(cmd: List[str], cwd: Path, env: Dict[str, str], what: str, ok=(0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode not in ok:
        text = proc.stdout + proc.stderr
        found = OFFLINE.search(text)
        if found:
            pytest.skip(
                f"{what}: pip cannot reach the package index (offline, no wheelhouse): "
                f"{found.group(0).splitlines()[-1].strip()}"
            )
        pytest.fail(f"{what} failed (exit {proc.returncode}):\n{text[-4000:]}")
    return proc


def _source_tree(dest: Path) -> Path:
    """The files of this checkout a clean clone would have (tracked, and new ones not
    ignored), copied to ``dest``: setuptools writes its egg-info and release tree where it
    builds, and the checkout's own (a stale SOURCES.txt; another build running beside) must
    not decide what the sdist holds."""
    git = shutil.which("git")
    listed = subprocess.run(
        [git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True
    ) if git else None
    if listed is None or listed.returncode != 0:
        shutil.copytree(ROOT, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", ".whl"))
        return dest
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> Dict[str, Path]:
    """The sdist and the wheel, built once (isolated build, as a packager runs it)."""
    if importlib.util.find_spec("build") is None:
        pytest.fail("the build package is missing: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("dist")
    source = _source_tree(tmp_path_factory.mktemp("source"))
    _run([sys.executable, "-m", "build", "--outdir", out, source], out, _clean_env(), "python -m build")
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="module")
def venv(tmp_path_factory, dists) -> Dict[str, object]:
    """A fresh venv with the wheel (and its dependencies) and hiera-transformer --no-deps."""
    base = tmp_path_factory.mktemp("fresh")
    root, cwd = base / "venv", base / "work"
    cwd.mkdir()
    env = _clean_env()
    _run([sys.executable, "-m", "venv", root], cwd, env, "python -m venv")
    bindir = root / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    env = _clean_env([bindir])
    env["VIRTUAL_ENV"] = str(root)
    _run([python, "-m", "pip", "install", "-q", dists["wheel"]], cwd, env, "pip install <wheel>")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", UPSTREAM], cwd, env, f"pip install --no-deps {UPSTREAM}")
    script = shutil.which("hiera-rewrite", path=str(bindir))
    assert script, f"no hiera-rewrite console script in {bindir}"
    return {"root": root, "python": python, "script": script, "cwd": cwd, "env": env}


def _tool(venv, *args: object, ok=(0,)) -> subprocess.CompletedProcess:
    return _run([venv["script"], *args], venv["cwd"], venv["env"], f"hiera-rewrite {' '.join(map(str, args))}", ok=ok)


def _py(venv, code: str, ok=(0,)) -> subprocess.CompletedProcess:
    return _run([venv["python"], "-c", code], venv["cwd"], venv["env"], "python -c", ok=ok)


def test_twine_check(dists):
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", dists["sdist"], dists["wheel"]],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def test_sdist_holds_what_a_packager_needs(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("README.md", "LICENSE", "CHANGELOG.md", "pyproject.toml", "MANIFEST.in",
                   ".pre-commit-hooks.yaml", "PKG-INFO", "hiera_rewrite/__init__.py",
                   "codemods/__init__.py", "tests/conftest.py", "tests/upstream.py",
                   "golden/attention/windowed_basic.in.py", "golden/attention/windowed_basic.out.py",
                   "golden/attention/windowed_basic.reports.txt"):
        assert needed in names, f"sdist lacks {needed}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith((".venv/", ".git/", "build/", "dist/"))]


def test_wheel_contents(dists):
    version = hiera_rewrite.__version__
    assert dists["wheel"].name == f"hiera_rewrite-{version}-py3-none-any.whl"
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = set(whl.namelist())
        meta = whl.read(f"hiera_rewrite-{version}.dist-info/METADATA").decode()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"hiera_rewrite", f"hiera_rewrite-{version}.dist-info"}, top  # no top-level codemods
    shipped = {n.rsplit("/", 1)[1] for n in names if n.startswith("hiera_rewrite/codemods/")}
    assert shipped == {p.name for p in (ROOT / "codemods").glob("*.py")}
    verify = {n.rsplit("/", 1)[1] for n in names if n.startswith("hiera_rewrite/verify/")}
    assert verify == {p.name for p in (ROOT / "hiera_rewrite" / "verify").glob("*.py")}  # the whole subpackage
    assert f"hiera_rewrite-{version}.dist-info/licenses/LICENSE" in names
    assert f"\nVersion: {version}\n" in meta
    assert "\nLicense-Expression: MIT\n" in meta
    requires = re.findall(r"^Requires-Dist: (\S+?)(?:[<>=;\s]|$)", meta, re.M)
    assert {"libcst", "black"} <= set(requires)


def test_installed_outside_the_checkout(venv):
    proc = _py(venv, (
        "import sys, hiera_rewrite, importlib.metadata as m\n"
        "heavy = [n for n in ('torch', 'libcst', 'black') if n in sys.modules]\n"
        "print(hiera_rewrite.__file__); print(m.version('hiera-rewrite')); print(heavy)\n"
        "import hiera_rewrite.codemods\n"
        "try:\n    import codemods\nexcept ImportError:\n    print('no codemods')\n"
        "else:\n    print('codemods at', codemods.__file__)\n"
    ))
    file, version, heavy, codemods = proc.stdout.splitlines()
    assert Path(file).resolve().is_relative_to(Path(venv["root"]).resolve()), file
    assert not Path(file).resolve().is_relative_to(ROOT), file
    assert version == hiera_rewrite.__version__
    assert heavy == "[]", f"import hiera_rewrite loaded {heavy}"
    assert codemods == "no codemods", codemods


def test_version_and_list(venv):
    assert _tool(venv, "--version").stdout.strip() == f"hiera-rewrite {hiera_rewrite.__version__}"
    listed = _tool(venv, "--list").stdout
    codes = re.findall(r"^(HR\d{3})\b", listed, re.M)
    assert codes == every_code() and len(codes) >= 6, listed


def test_check_and_rewrite_a_golden_input(venv):
    original = GOLDEN_IN.read_bytes()
    target = Path(venv["cwd"]) / "windowed_basic.py"
    target.write_bytes(original)
    check = _tool(venv, "--check", target.name, ok=(1,))
    assert "would be rewritten" in check.stderr and " HR001 " in check.stderr, check.stderr
    assert target.read_bytes() == original
    _tool(venv, target.name, ok=(1,))
    assert target.read_bytes() == rewrite_bytes(original).output == (ROOT / "golden/attention/windowed_basic.out.py").read_bytes()


def test_export_the_installed_upstream(venv):
    proc = _tool(venv, "--export", "hiera_fast")
    exported = Path(venv["cwd"]) / "hiera_fast"
    where = _py(venv, "import importlib.util as u; print(list(u.find_spec('hiera').submodule_search_locations)[0])")
    upstream = Path(where.stdout.strip())
    assert upstream.resolve().is_relative_to(Path(venv["root"]).resolve())
    files = sorted(p.name for p in upstream.glob("*.py"))
    assert sorted(p.name for p in exported.glob("*.py")) == files and "hiera.py" in files
    def on_disk(module: str):
        path = upstream / f"{module}.py"
        return path.read_bytes() if path.is_file() else None

    first = {name: rewrite_bytes((upstream / name).read_bytes(), siblings=on_disk) for name in files}

    def rewritten(module: str):  # hiera_mae.py is planned again against the hiera.py the export writes
        result = first.get(f"{module}.py")
        return result.output if result is not None else on_disk(module)

    for name in files:  # the installed tool writes what this checkout's engine writes
        result = first[name]
        if any(first.get(f"{s}.py") is not None and first[f"{s}.py"].changed for s in result.consulted):
            result = rewrite_bytes((upstream / name).read_bytes(), siblings=rewritten)
        assert (exported / name).read_bytes() == result.output, name
    assert (exported / "hiera.py").read_bytes() != (upstream / "hiera.py").read_bytes()
    assert "hiera_fast/hiera.py:" in proc.stdout + proc.stderr and " HR001 " in proc.stdout + proc.stderr
