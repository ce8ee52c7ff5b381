"""The pre-commit hook, run by the real ``pre-commit`` tool (PyPI ``pre-commit``).

Each test builds a temporary git repository holding a copy of the installed upstream
``hiera.py`` at ``models/hiera.py`` (third-party code is copied at test time, never
committed here) and a second copy at ``vendor/hiera.py`` that the hook's
``files: ^models/hiera`` must leave alone.  ``pre-commit run --all-files`` then runs
twice: the first run rewrites the file and fails with "files were modified by this
hook", the second passes, and the file equals what ``rewrite_bytes`` makes of the
original.

Three configurations are run, the ones README's "Pre-commit" section shows:

* the ``repo: local`` hook with ``language: system`` (the tool already installed:
  here, this test environment's ``hiera-rewrite``), taken from README itself;
* the same local hook with ``language: python`` and this checkout as
  ``additional_dependencies`` (pre-commit installs the tool into its own venv);
* ``repo: <clone>`` + ``rev: <commit>`` with this project's ``.pre-commit-hooks.yaml``,
  the form a published release is used in.

The last two install from a snapshot of this checkout's working tree (tracked and
untracked files git does not ignore, committed in a temporary repository), so
uncommitted changes are tested too.  Installing needs libcst and black from the
package index (or a wheelhouse pip is configured for): where pip cannot reach them the
test is skipped and says so; any other install failure fails the test.  Measured: 34-41 s
for the module on a shared 2-core machine (system hook 2-3 s; the two installing tests,
marked slow, 18-22 s and 13-14 s, almost all of it building their hook environments).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from hiera_rewrite.engine import rewrite_bytes

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
GIT = shutil.which("git")

pytestmark = pytest.mark.skipif(GIT is None, reason="git is not installed: pre-commit needs a git repository")

GIT_ID = ["-c", "user.name=hiera-rewrite tests", "-c", "user.email=tests@invalid", "-c", "commit.gpgsign=false"]

# pip's words for "the index cannot be reached" (no network, no wheelhouse).
OFFLINE = re.compile(
    # "versions: none": the index has no release of it at all (a bad pin lists the versions)
    r"\(from versions: none\)\s*\n.*No matching distribution found for \S+"
    r"|Failed to establish a new connection|Network is unreachable|Temporary failure in name resolution"
    r"|Could not fetch URL|ProxyError|Name or service not known"
)


def _upstream_hiera() -> Path:
    spec = importlib.util.find_spec("hiera")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("hiera-transformer is not installed (pip install -e '.[test]')")
    return Path(list(spec.submodule_search_locations)[0]) / "hiera.py"


def _git(*args: str, cwd: Path) -> str:
    proc = subprocess.run([GIT, *GIT_ID, *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def _env(home: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRE_COMMIT", "GIT_"))}
    env["PRE_COMMIT_HOME"] = str(home)
    env["PRE_COMMIT_COLOR"] = "never"
    # `language: system` finds the tool on PATH: this environment's console script.
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        pytest.fail("the pre-commit package is missing: pip install -e '.[test]'")
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Dict[str, str]:
    """This checkout's working tree committed in a temporary repository: (path, sha)."""
    listed = subprocess.run(
        [GIT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()
    dest = tmp_path_factory.mktemp("hiera-rewrite-snapshot")
    for name in filter(None, sorted(set(listed.split("\0")))):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    _git("init", "-q", cwd=dest)
    _git("add", "-A", cwd=dest)
    _git("commit", "-q", "-m", "snapshot of the working tree", cwd=dest)
    return {"path": str(dest), "sha": _git("rev-parse", "HEAD", cwd=dest)}


def _fork(tmp_path: Path, config: str) -> Path:
    """A fork's repository: upstream hiera.py vendored twice, the config, all committed."""
    repo = tmp_path / "fork"
    original = _upstream_hiera().read_bytes()
    for place in ("models/hiera.py", "vendor/hiera.py"):
        (repo / place).parent.mkdir(parents=True, exist_ok=True)
        (repo / place).write_bytes(original)
    (repo / ".pre-commit-config.yaml").write_text(config)
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "vendor hiera", cwd=repo)
    return repo


def _run(repo: Path, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files", "--color", "never"],
        cwd=repo, env=_env(home), capture_output=True, text=True,
    )


def _skip_if_offline(proc: subprocess.CompletedProcess, home: Path) -> None:
    if proc.returncode in (0, 1) and "hook id: hiera-rewrite" in proc.stdout + proc.stderr:
        return
    log = home / "pre-commit.log"
    text = proc.stdout + proc.stderr + (log.read_text(errors="replace") if log.exists() else "")
    if "Installing environment" in text and OFFLINE.search(text):
        pytest.skip(
            "pre-commit could not install the hook environment: pip cannot reach the package index "
            f"(offline, no wheelhouse): {OFFLINE.search(text).group(0).splitlines()[-1].strip()}"
        )


def _check_two_runs(repo: Path, home: Path) -> List[str]:
    original = (repo / "models/hiera.py").read_bytes()
    first = _run(repo, home)
    _skip_if_offline(first, home)
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    assert "hiera-rewrite" in out and "Failed" in out, out
    assert "- files were modified by this hook" in out, out
    assert "models/hiera.py:" in out and " HR001 " in out, out
    assert "hiera-rewrite: 1 file rewritten, 0 unchanged." in out, out
    assert (repo / "models/hiera.py").read_bytes() == rewrite_bytes(original).output
    assert (repo / "vendor/hiera.py").read_bytes() == original, "files: ^models/hiera was not honoured"

    second = _run(repo, home)
    out2 = second.stdout + second.stderr
    assert second.returncode == 0, out2
    assert re.search(r"^hiera-rewrite\.+Passed$", out2, re.M), out2
    assert (repo / "models/hiera.py").read_bytes() == rewrite_bytes(original).output
    return [first.stdout, second.stdout]


def _readme_local_hook() -> str:
    """The `repo: local` + `language: system` block of README's Pre-commit section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Pre-commit\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    local = [b for b in blocks if "repo: local" in b and "language: system" in b]
    assert len(local) == 1, "README's Pre-commit section should show one `repo: local` system hook"
    return local[0]


def test_readme_local_system_hook(tmp_path, pre_commit_home):
    config = _readme_local_hook()
    assert config.startswith("repos:\n"), "README's local hook should be a whole config a fork can paste"
    _check_two_runs(_fork(tmp_path, config), pre_commit_home)


@pytest.mark.slow
def test_local_python_hook_installs_the_tool(tmp_path, pre_commit_home, snapshot):
    """README's `language: python` variant, the tool installed by pre-commit from a path."""
    config = (
        "repos:\n- repo: local\n  hooks:\n  - id: hiera-rewrite\n    name: hiera-rewrite\n"
        "    entry: hiera-rewrite\n    language: python\n"
        f"    additional_dependencies: [\"{snapshot['path']}\"]\n"
        "    types: [python]\n    files: ^models/hiera\n"
    )
    readme = (ROOT / "README.md").read_text()
    assert "additional_dependencies:" in readme and "language: python" in readme
    _check_two_runs(_fork(tmp_path, config), pre_commit_home)


@pytest.mark.slow
def test_hook_definition_from_a_clone(tmp_path, pre_commit_home, snapshot):
    """`repo:` + `rev:` with this project's .pre-commit-hooks.yaml (the published form)."""
    config = (
        f"repos:\n- repo: {snapshot['path']}\n  rev: {snapshot['sha']}\n"
        "  hooks: [{id: hiera-rewrite, files: ^models/hiera}]\n"
    )
    _check_two_runs(_fork(tmp_path, config), pre_commit_home)


def test_the_hooks_run_serially():
    """hiera_mae.py's rewrite is planned against hiera.py: pre-commit's parallel
    processes (require_serial: false, its default) let one read hiera.py while another
    rewrites it -- "rewrite is not stable" on the first run, or another rewrite on the
    second (hunt 15c: upstream's files and one more file of the fork)."""
    shipped = (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert re.search(r"^\s*require_serial: true$", shipped, re.M), shipped
    assert re.search(r"^\s*require_serial: true$", _readme_local_hook(), re.M), _readme_local_hook()
