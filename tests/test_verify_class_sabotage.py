"""Issue 22: each fork class verify now proves also FAILS when the rewrite is wrong.

For every class whose repo PASSES with no flags (tests/test_verify_layouts.py,
test_verify_installed_name.py), the same repo is verified with a rewrite sabotaged at one
site that the class's models run: the verdict must be FAILED and that site's row must say
FAIL.  (Classes 4 and 8 have theirs in test_verify_shrink.py and test_verify_unreachable.py;
class 6's is the budget case here.)  A sabotage the class's repo never runs, or a layout
that proves nothing, would fail these tests: every sabotage below is checked to have
changed the rewritten code, and the site named must be one the repo's models reach.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hiera_rewrite import files
from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_budget import memory_fork
from tests.test_verify_installed_name import installed_name_repo
from tests.test_verify_layouts import (
    _encoder_fork,
    checkpoint_fork,
    large_patch_fork,
    library_named_module_fork,
    repo_package,
    site_rows,
    verify,
    wrong_rewrite,
)

pytest.importorskip("torch")
pytest.importorskip("timm")

#: one wrong rewrite per kind of site, each a plausible emission bug: (regex, replacement)
WRONG = {
    # the attention output restore loses its transpose: runs, tokens in the wrong order
    "HR001": (r"x\.transpose\(1, 2\)\.reshape\(B, -1, self\.dim_out\)", "x.reshape(B, -1, self.dim_out)"),
    # the kept mask units gathered in reverse order
    "HR003": (r"argsort\(dim=1, stable=True\)\[:, :num_kept\]", "argsort(dim=1, stable=True)[:, :num_kept].flip(1)"),
    # the decoder fill puts the kept units' tokens one unit off
    "HR004": (r"index_copy_\(0, (\w+), ", r"index_copy_(0, \1.roll(1), "),
    # the loss's selected rows in reverse order
    "HR005": (r"argsort\(stable=True\)\[:count\]", "argsort(stable=True)[:count].flip(0)"),
}


def _encoder_repo(tmp_path: Path) -> Path:
    return _encoder_fork(tmp_path, (
        "from hiera.heads import HieraClassifier\n"
        "from hiera.hiera import Hiera\n\n"
        "model = HieraClassifier(encoder=Hiera(input_size=(64, 64), embed_dim=96, num_heads=1, stages=(1, 2, 7, 2)), num_classes=5)\n"
    ))


#: class -> (repo builder returning the folder to verify; the code of
#: the site sabotaged; the file and function of its row that must FAIL; extra verify flags)
CLASSES = {
    "1 folder named like an installed package": (lambda t: installed_name_repo(t) / "models" / "hiera", "HR005", "hiera_mae.py", "get_pixel_label_2d", ()),
    "2 repo module named like a library": (library_named_module_fork, "HR001", "hiera.py", "MaskUnitAttention.forward", ()),
    "3 inputs from the model's own grid": (large_patch_fork, "HR003", "hiera.py", "Hiera.forward", ()),
    "5 module argument from a call site": (_encoder_repo, "HR001", "hiera.py", "MaskUnitAttention.forward", ()),
    "6 a model over the memory budget": (memory_fork, "HR001", "hiera.py", "MaskUnitAttention.forward", ("--verify-budget", "3,60")),
    "7 constructor loading a checkpoint": (checkpoint_fork, "HR004", "hiera_mae.py", "forward_decoder", ()),
    "9 repo that is itself a package": (repo_package, "HR003", "hiera.py", "Hiera.forward", ()),
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_a_wrong_rewrite_fails_naming_its_site(name: str, tmp_path: Path, capsys, monkeypatch):
    if name.startswith("2 "):
        pytest.importorskip("transformers")
    build, code, filename, function, flags = CLASSES[name]
    folder = build(tmp_path)
    real, wrong = files.rewrite_bytes, wrong_rewrite(*WRONG[code])
    changed = []

    def counted(data, **kwargs):
        result = wrong(data, **kwargs)
        changed.append(result.output != real(data, **kwargs).output)
        return result

    monkeypatch.setattr(files, "rewrite_bytes", counted)
    status, out, err = verify(folder, capsys, *flags)
    assert any(changed), f"the {code} sabotage matched nothing in the rewritten files"
    assert status == EXIT_VERIFY_FAILED, out + err
    assert "verify: FAILED" in out, out
    rows = site_rows(out)
    named = [row for key, row in rows.items() if key.endswith(code) and f"{filename}:" in key and function in row]
    assert named and "FAIL: a comparison of a case that ran it differs" in named[0], out
