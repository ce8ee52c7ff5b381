"""Engine robustness: the self-check, atomic writes and `# hiera-rewrite: skip`.

A broken rewrite is simulated by registering a throw-away one (code HR9xx) for the
duration of a test; the CLI runs in-process here (its subprocess behaviour is in
tests/test_cli.py).
"""

from __future__ import annotations

import functools

import os
import shutil
import stat
import subprocess
from pathlib import Path

import libcst as cst
import pytest

from hiera_rewrite import cli, engine
from hiera_rewrite.engine import every_code, InternalError, rewrite_bytes, write_atomic

# every rewrite, HR002 (opt-in) included: the fixtures exercise them all
rewrite_bytes = functools.partial(rewrite_bytes, codes=every_code())
from hiera_rewrite.rewrite import REGISTRY, PlanContext, Rewrite

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_IN = (ROOT / "golden/attention/windowed_basic.in.py").read_bytes()
SIMPLE = b"import torch\n\n\ndef f(x):\n    y = x + 1\n    return y\n"


def _fake(code: str, replace):
    """A rewrite that replaces every `Integer` node by ``replace(node)``."""

    class Fake(Rewrite):
        name = "fake"
        message = "fake rewrite"
        explanation = "for tests"

        def plan(self, ctx: PlanContext) -> None:
            found = []

            class Visit(cst.CSTVisitor):
                def visit_Integer(self, node: cst.Integer) -> None:
                    found.append(node)

            ctx.module.visit(Visit())
            for node in found:
                ctx.add_site(node, {node: replace(node)})

    Fake.code = code
    return Fake


@pytest.fixture
def fake_rewrite(monkeypatch):
    engine._load_rewrites()

    def install(code, replace):
        monkeypatch.setitem(REGISTRY, code, _fake(code, replace))
        return code

    return install


def _unparsable(node):
    return cst.Name("def")  # `y = x + def` does not parse


def _uncompilable(node):
    return cst.Await(cst.Name("x"))  # `y = x + await x` in a plain def: libcst parses it, Python does not


def _unstable(node):
    return cst.Integer(str(int(node.value) + 1))  # a second pass changes it again


def _crash(node):
    raise RuntimeError("bug in a rewrite")


# -- the self-check ---------------------------------------------------------------


def test_unparsable_output_is_an_internal_error(fake_rewrite):
    code = fake_rewrite("HR990", _unparsable)
    with pytest.raises(InternalError, match="does not parse"):
        rewrite_bytes(SIMPLE, codes=[code])


def test_output_python_rejects_is_an_internal_error(fake_rewrite):
    # libcst parses the output (`await` in a plain def): Python's compiler is the check.
    code = fake_rewrite("HR994", _uncompilable)
    with pytest.raises(InternalError, match=r"does not parse \(line 5\): cannot parse: .*await"):
        rewrite_bytes(SIMPLE, codes=[code])


def test_unstable_output_is_an_internal_error(fake_rewrite):
    code = fake_rewrite("HR991", _unstable)
    with pytest.raises(InternalError, match="not stable"):
        rewrite_bytes(SIMPLE, codes=[code])


def test_fake_rewrite_is_otherwise_harmless(fake_rewrite):
    # Guard: without Integer nodes the fake plans nothing and the file is unchanged.
    code = fake_rewrite("HR992", _unstable)
    data = b"def f(x):\n    return x\n"
    assert rewrite_bytes(data, codes=[code]).output == data


@pytest.mark.parametrize("replace, reason", [(_unparsable, "does not parse"), (_unstable, "not stable"), (_crash, "RuntimeError: bug in a rewrite")], ids=["unparsable", "unstable", "crash"])
def test_cli_writes_nothing_on_internal_error(tmp_path, fake_rewrite, capsys, replace, reason):
    code = fake_rewrite("HR993", replace)
    broken = tmp_path / "broken.py"
    broken.write_bytes(SIMPLE)
    other = tmp_path / "other.py"
    other.write_bytes(GOLDEN_IN)
    old_ns = 1_400_000_000_000_000_000
    os.utime(broken, ns=(old_ns, old_ns))

    rc = cli.main([str(broken), str(other)])
    err = capsys.readouterr().err
    assert rc == 2
    assert broken.read_bytes() == SIMPLE and broken.stat().st_mtime_ns == old_ns
    assert f"{broken}:1:1: internal error, nothing written: " in err and reason in err
    assert "Traceback" not in err
    # The other file is still processed (the fake also rewrites its integers, so it
    # fails the same way: the error names each file).
    assert other.read_bytes() == GOLDEN_IN
    assert f"{other}:1:1: internal error" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.py", "other.py"]

    # With the fake deselected the same run succeeds.
    rc = cli.main(["--ignore", code, str(other)])
    assert rc == 1 and other.read_bytes() != GOLDEN_IN


def test_traceback_flag_shows_the_bug(tmp_path, fake_rewrite, capsys):
    fake_rewrite("HR994", _crash)
    path = tmp_path / "a.py"
    path.write_bytes(SIMPLE)
    assert cli.main(["--traceback", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "bug in a rewrite" in err
    assert path.read_bytes() == SIMPLE


def test_stdin_internal_error_echoes_input(fake_rewrite, monkeypatch, capsysbinary):
    import io

    fake_rewrite("HR995", _unstable)

    class Stdin:
        buffer = io.BytesIO(SIMPLE)

    monkeypatch.setattr("sys.stdin", Stdin)
    assert cli.main(["-"]) == 2
    captured = capsysbinary.readouterr()
    assert captured.out == SIMPLE
    assert b"<stdin>:1:1: internal error, nothing written" in captured.err


# -- atomic writes ---------------------------------------------------------------


def test_write_atomic_keeps_mode_and_leaves_no_temp(tmp_path):
    path = tmp_path / "m.py"
    path.write_bytes(b"old\n")
    path.chmod(0o640)
    write_atomic(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]


def test_write_atomic_failure_keeps_the_original(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_bytes(b"old\n")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(engine.os, "replace", failing_replace)
    with pytest.raises(OSError):
        write_atomic(path, b"new\n")
    assert path.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]


def test_cli_reports_write_failure(tmp_path, monkeypatch, capsys):
    path = tmp_path / "a.py"
    path.write_bytes(GOLDEN_IN)

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(engine.os, "replace", failing_replace)
    assert cli.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:1:1: cannot write: No space left on device" in err
    assert path.read_bytes() == GOLDEN_IN
    assert [p.name for p in tmp_path.iterdir()] == ["a.py"]


def test_write_atomic_keeps_hard_links(tmp_path):
    """A rename would give the rewritten file a new inode and leave the other name
    holding the old text (hunt 15c)."""
    path = tmp_path / "m.py"
    path.write_bytes(b"old text, longer than the new\n")
    other = tmp_path / "vendored.py"
    os.link(path, other)
    write_atomic(path, b"new\n")
    assert path.read_bytes() == other.read_bytes() == b"new\n"
    assert path.stat().st_ino == other.stat().st_ino and path.stat().st_nlink == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py", "vendored.py"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_write_atomic_keeps_owner_and_group(tmp_path):
    """As root (a container, a CI job), the file was given to root (hunt 15c)."""
    path = tmp_path / "m.py"
    path.write_bytes(b"old\n")
    os.chown(path, 1234, 1000)
    path.chmod(0o664)
    write_atomic(path, b"new\n")
    assert (path.stat().st_uid, path.stat().st_gid) == (1234, 1000)
    assert stat.S_IMODE(path.stat().st_mode) == 0o664 and path.read_bytes() == b"new\n"


def test_write_atomic_through_a_symlink_keeps_the_link(tmp_path):
    real = tmp_path / "real.py"
    real.write_bytes(GOLDEN_IN)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    assert cli.main([str(link)]) == 1
    assert link.is_symlink(), "the symlink was replaced by a regular file"
    assert real.read_bytes() != GOLDEN_IN



def test_a_link_to_a_file_of_another_folder_is_not_rewritten(tmp_path, capsys):
    """hunt 12: pkgB/m.py -> ../pkgA/m.py, the two folders given: the file was planned
    once, against pkgA's modules, though pkgB imports it beside other ones."""
    for pkg in ("pkgA", "pkgB"):
        (tmp_path / pkg).mkdir()
    real = tmp_path / "pkgA" / "m.py"
    real.write_bytes(GOLDEN_IN)
    (tmp_path / "pkgB" / "m.py").symlink_to(Path("..") / "pkgA" / "m.py")
    assert cli.main([str(tmp_path / "pkgA"), str(tmp_path / "pkgB")]) == 2
    assert real.read_bytes() == GOLDEN_IN
    err = capsys.readouterr().err
    assert "a file of another folder: the modules beside it differ between its folders, not rewritten" in err
    assert cli.main([str(tmp_path / "pkgB" / "m.py")]) == 2  # the link alone: the same
    assert real.read_bytes() == GOLDEN_IN
    assert cli.main([str(real)]) == 1  # the file itself, in its own folder

# -- skip markers ----------------------------------------------------------------------


def _marked(where: str) -> bytes:
    if where == "class-above":
        return GOLDEN_IN.replace(b"class WindowAttention", b"# hiera-rewrite: skip\nclass WindowAttention")
    if where == "function-header":
        return GOLDEN_IN.replace(b"def forward(self, x):", b"def forward(self, x):  # hiera-rewrite: skip (benchmark baseline)")
    if where == "function-above":
        return GOLDEN_IN.replace(b"    def forward(self, x):", b"    # hiera-rewrite: skip\n    def forward(self, x):")
    if where == "decorated-function":
        return GOLDEN_IN.replace(b"    def forward(self, x):", b"    # hiera-rewrite: skip\n    @torch.no_grad()\n    def forward(self, x):")
    raise AssertionError(where)


@pytest.mark.parametrize("where, owner", [
    ("class-above", "class WindowAttention"),
    ("function-header", "function forward"),
    ("function-above", "function forward"),
    ("decorated-function", "function forward"),
])
def test_skip_marker_leaves_code_alone_and_reports_it(where, owner, tmp_path, capsys):
    data = _marked(where)
    result = rewrite_bytes(data)
    assert result.output == data
    assert result.changes == []
    skipped = [r for r in result.reports if not r.applied and "hiera-rewrite: skip" in r.message]
    assert skipped and all(owner in r.message for r in skipped), result.reports

    path = tmp_path / "marked.py"
    path.write_bytes(data)
    assert cli.main([str(path)]) == 0
    err = capsys.readouterr().err
    assert f"skipped: left alone: `# hiera-rewrite: skip` on {owner}" in err
    assert path.read_bytes() == data


def test_skip_marker_is_local(tmp_path):
    # A marked function next to an unmarked one: only the unmarked one changes.
    pool = (
        b"\n\n# hiera-rewrite: skip\n"
        b"def pool_kept(x, stride):\n"
        b"    return x.view(x.shape[0], stride, -1, x.shape[-1]).max(dim=1).values\n"
        b"\n\n"
        b"def pool_fast(x, stride):\n"
        b"    return x.view(x.shape[0], stride, -1, x.shape[-1]).max(dim=1).values\n"
    )
    result = rewrite_bytes(pool)
    lines = result.output.splitlines()
    assert lines[4] == pool.splitlines()[4]
    assert lines[-1] == b"    return x.view(x.shape[0], stride, -1, x.shape[-1]).amax(dim=1).clone()"
    assert [r.code for r in result.changes] == ["HR002"]


def test_marker_text_elsewhere_does_not_skip():
    # The marker in a string or on an unrelated statement is not a marker.
    data = GOLDEN_IN.replace(b'"""A small', b'"""hiera-rewrite: skip -- A small').replace(
        b"        B, N, _ = x.shape", b"        B, N, _ = x.shape  # hiera-rewrite: skip"
    )
    assert rewrite_bytes(data).changed


# -- odd but valid inputs ----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n\n\n",
        b"   \n\t\n",
        b"\xef\xbb\xbf",
        b"# only a comment",
        b"\\\n",
        b"x = 1\r",
        b"x = 1\ry = 2\r",
        b"if True:\n\tx = 1\n\tif x:\n\t\ty = x.max(dim=1).values\n",
        b"\x0c\nclass A:\n    pass\n",
        b"# -*- coding: utf-16 -*-\n",
    ],
    ids=["empty", "blank-lines", "whitespace", "bom-only", "comment-no-newline", "continuation", "cr-only", "cr-lines", "tabs", "form-feed", "utf16-cookie"],
)
def test_odd_inputs_do_not_crash(data):
    try:
        result = rewrite_bytes(data)
    except engine.InputError:
        return  # reported as an input error (exit 2): fine
    assert result.output == data


# -- line ends ---------------------------------------------------------------------------

POOL_LINES = [
    b"import torch",
    b"",
    b"",
    b"def pool(x, stride):",
    b"    # a comment line",
    b"    return x.view(x.shape[0], stride, -1, x.shape[-1]).max(dim=1).values",
    b"",
    b"",
    b"def other(x):",
    b"    return x + 1",
]
POOL_REWRITTEN = b"    return x.view(x.shape[0], stride, -1, x.shape[-1]).amax(dim=1).clone()"


def _joined(ends, final: bool) -> bytes:
    """POOL_LINES with line ``i`` ended by ``ends[i % len(ends)]`` (the last one only
    if ``final``)."""
    out = b""
    for i, line in enumerate(POOL_LINES):
        end = ends[i % len(ends)]
        if out.endswith(b"\r") and not line and end == b"\n":
            end = b"\r"  # "\r" then an empty "\n" line would read as one "\r\n"
        out += line + (b"" if i == len(POOL_LINES) - 1 and not final else end)
    return out


@pytest.mark.parametrize("final", [True, False], ids=["final-newline", "no-final-newline"])
@pytest.mark.parametrize(
    "ends", [[b"\n"], [b"\r\n"], [b"\r"], [b"\r", b"\n", b"\r\n"], [b"\n", b"\r"], [b"\r\n", b"\r"]],
    ids=["lf", "crlf", "cr", "cr-lf-crlf", "lf-cr", "crlf-cr"],
)
def test_bytes_outside_the_rewrite_survive_every_line_end(ends, final):
    # Python's tokenizer takes \n, \r\n and \r, mixed in any way; libcst drops a
    # final \r unless the engine says it is there (the engine used to lose it).
    data = _joined(ends, final)
    compile(data, "<test>", "exec")
    result = rewrite_bytes(data)
    expected = data.replace(POOL_LINES[5], POOL_REWRITTEN)
    assert result.output == expected
    assert [r.code for r in result.changes] == ["HR002"]
    assert [(r.line, r.col) for r in result.changes] == [(6, 12)]  # lines counted at every line end


def test_cr_goldens_keep_the_final_cr():
    for name in ("cr", "cr_tabs_utf8_bom", "mixed_newlines"):
        data = (ROOT / "golden/engine" / f"{name}.in.py").read_bytes()
        assert data.endswith(b"\r")
        output = rewrite_bytes(data).output
        assert output.endswith(b"\r") and not output.endswith(b"\r\r"), name


def test_decode_error_line_counts_cr_line_ends():
    with pytest.raises(engine.InputError) as exc:
        rewrite_bytes(b"x = 1\ry = 2\rz = '\xff'\r")
    assert exc.value.line == 3


def test_cr_file_without_a_rewrite_is_not_written(tmp_path, capsysbinary):
    path = tmp_path / "clean.py"
    data = b"import torch\r\r\rdef f(x):\r    return x.max(dim=1).values\r"
    path.write_bytes(data)
    old_ns = 1_500_000_000_123_456_789
    os.utime(path, ns=(old_ns, old_ns))
    inode = path.stat().st_ino
    assert cli.main([str(path)]) == 0
    assert cli.main(["--check", str(path)]) == 0
    assert cli.main(["--diff", str(path)]) == 0
    assert capsysbinary.readouterr().out == b""
    assert path.read_bytes() == data
    assert path.stat().st_mtime_ns == old_ns and path.stat().st_ino == inode


@pytest.mark.parametrize("name", ["cr", "mixed_newlines", "crlf"])
def test_diff_of_odd_line_ends_applies_with_patch(tmp_path, capsysbinary, monkeypatch, name):
    source = (ROOT / "golden/engine" / f"{name}.in.py").read_bytes()
    expected = (ROOT / "golden/engine" / f"{name}.out.py").read_bytes()
    (tmp_path / "a.py").write_bytes(source)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--diff", "--select", ",".join(every_code()), "a.py"]) == 1
    diff = capsysbinary.readouterr().out
    assert (tmp_path / "a.py").read_bytes() == source
    # every line of the diff ends in \n: a lone \r stays inside a line, as patch reads it
    assert diff.startswith(b"--- a/a.py\n+++ b/a.py\n@@ ")
    assert all(line[:1] in (b" ", b"-", b"+", b"@", b"\\") for line in diff.split(b"\n")[2:-1])
    if shutil.which("patch"):
        subprocess.run(["patch", "-p1", "-s"], cwd=tmp_path, input=diff, check=True)
        assert (tmp_path / "a.py").read_bytes() == expected


# -- valid Python that libcst cannot parse -------------------------------------------------


def test_valid_python_libcst_rejects_is_left_untouched(tmp_path, capsys):
    """Hypothesis found it (test_property): a backslash continuation at the end of the file,
    then ``\\r\\n``.  Python compiles it; libcst's tokenizer does not.  The file is left as it
    is (exit 0, not written) with a skipped report saying why, not an input error (exit 2: a
    pre-commit hook would block a valid file)."""
    data = b"classmatch:globalA\n\\\r\n"
    compile(data, "<test>", "exec", dont_inherit=True)
    result = rewrite_bytes(data)
    assert result.output == data and not result.changes
    assert [(r.code, r.applied) for r in result.reports] == [(engine.UNREAD_CODE, False)]
    path = tmp_path / "m.py"
    path.write_bytes(data)
    before = path.stat().st_mtime_ns
    assert cli.main(["--check", str(path)]) == cli.EXIT_CLEAN
    assert "HR000 skipped: valid Python that libcst cannot parse" in capsys.readouterr().err
    assert cli.main([str(path)]) == cli.EXIT_CLEAN
    assert path.read_bytes() == data and path.stat().st_mtime_ns == before
