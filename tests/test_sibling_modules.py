"""The modules a file imports, read as the file imports them (hiera_rewrite.files.sibling_path).

A real fork (a robotics repo) keeps hiera_mae.py in models/ and imports its helpers as
`from models.hiera_layers.hiera_utils import undo_windowing`: read beside the file, that
module was not found, and a proof needing it (HR005's undo_windowing, HR003's Hiera.forward)
was refused.  And `from ..utils.hiera_utils import ...` used to read a hiera_utils.py
*beside* the file, another module than the one imported: a proof over the wrong code."""

import os
import shutil
from pathlib import Path

import pytest

from hiera_rewrite.engine import rewrite_bytes
from hiera_rewrite.files import sibling_path, sibling_reader
from tests.upstream import upstream_dir

UPSAMPLE = (
    "    x = x.permute(permute).reshape(B, *shape, C)\n\n    return x\n",
    "    x = x.permute(permute).reshape(B, *shape, C)\n    x = x.repeat_interleave(2, dim=1).repeat_interleave(2, dim=2)\n\n    return x\n",
)


def test_sibling_path(tmp_path: Path):
    f = tmp_path / "repo" / "models" / "hiera_mae.py"
    assert sibling_path(f, "hiera_utils") == f.parent / "hiera_utils.py"
    assert sibling_path(f, ".hiera_utils") == f.parent / "hiera_utils.py"
    assert sibling_path(f, "..utils.hiera_utils") == tmp_path / "repo" / "utils" / "hiera_utils.py"
    assert sibling_path(f, ".layers.hiera_utils") == f.parent / "layers" / "hiera_utils.py"
    # dotted absolute: under the nearest folder of the file's path named like its first part
    assert Path(os.path.abspath(sibling_path(f, "models.layers.hiera_utils"))) == Path(os.path.abspath(tmp_path / "repo" / "models" / "layers" / "hiera_utils.py"))
    assert sibling_path(f, "other.hiera_utils") is None  # no folder named so: not guessed



def test_a_package_beside_a_module_of_the_same_name_is_what_python_imports(tmp_path: Path):
    """`pkg/hiera.py` beside a package `pkg/hiera/` (a module moved into a package, the old
    file left): `from .hiera import Hiera` imports the package; the file proves nothing."""
    f = tmp_path / "pkg" / "hiera_mae.py"
    (tmp_path / "pkg" / "hiera").mkdir(parents=True)
    (tmp_path / "pkg" / "hiera.py").write_text("class Hiera: pass\n")
    assert sibling_path(f, ".hiera") == f.parent / "hiera.py"  # a folder without __init__.py: the file
    (tmp_path / "pkg" / "hiera" / "__init__.py").write_text("from .hiera import Hiera\n")
    assert sibling_path(f, ".hiera") is None
    assert sibling_reader(f)(".hiera") is None

def _layout(tmp_path: Path, mae_import: str, utils_at: str, decoy: bool = False, upsample: bool = False) -> Path:
    """models/hiera.py and models/hiera_mae.py from upstream, hiera_utils.py at ``utils_at``
    (under the repo), hiera_mae.py importing undo_windowing by ``mae_import``."""
    src = upstream_dir()
    models = tmp_path / "repo" / "models"
    models.mkdir(parents=True)
    utils = tmp_path / "repo" / utils_at
    utils.parent.mkdir(parents=True, exist_ok=True)
    text = (src / "hiera_utils.py").read_text()
    utils.write_text(text.replace(*UPSAMPLE) if upsample else text)
    if decoy:  # a plain upstream copy beside the file, which the file does not import
        shutil.copy(src / "hiera_utils.py", models / "hiera_utils.py")
    # hiera.py imports its helpers (do_pool, which the MAE's count reads in the decoder's
    # blocks) from the same module
    module = mae_import.split(" import ")[0][len("from "):]
    hiera = (src / "hiera.py").read_text()
    assert hiera.count("from .hiera_utils import ") == 1
    (models / "hiera.py").write_text(hiera.replace("from .hiera_utils import ", f"from {module} import "))
    mae = (src / "hiera_mae.py").read_text()
    old = "from .hiera_utils import pretrained_model, undo_windowing, conv_nd"
    assert old in mae
    (models / "hiera_mae.py").write_text(mae.replace(old, mae_import))
    return models / "hiera_mae.py"


def _forward_count(path: Path) -> str:
    result = rewrite_bytes(path.read_bytes(), siblings=sibling_reader(path))
    forward = [r for r in result.reports if r.code == "HR005" and ("MAE forward" in r.message or "masked count is not passed" in r.message)]
    assert len(forward) == 1, result.reports
    return ("APPLIED " if forward[0].applied else "") + forward[0].message


@pytest.mark.parametrize("mae_import, utils_at", [
    ("from models.hiera_layers.hiera_utils import pretrained_model, undo_windowing, conv_nd", "models/hiera_layers/hiera_utils.py"),
    ("from .hiera_layers.hiera_utils import pretrained_model, undo_windowing, conv_nd", "models/hiera_layers/hiera_utils.py"),
    ("from ..utils.hiera_utils import pretrained_model, undo_windowing, conv_nd", "utils/hiera_utils.py"),
])
def test_a_helper_imported_from_another_folder_is_read_there(tmp_path: Path, mae_import, utils_at):
    path = _layout(tmp_path, mae_import, utils_at)
    assert _forward_count(path).startswith("APPLIED MAE forward"), mae_import
    # the module imported there does more than rearrange: refused, naming it
    path = _layout(tmp_path / "up", mae_import, utils_at, upsample=True)
    assert "undo_windowing (line" in _forward_count(path) and "does more than rearrange" in _forward_count(path)


def test_a_module_beside_the_file_that_is_not_the_one_imported_proves_nothing(tmp_path: Path):
    """`from ..utils.hiera_utils import undo_windowing` with an upstream copy beside the
    file: the one imported upsamples, so the count is refused (it read the decoy before)."""
    path = _layout(tmp_path, "from ..utils.hiera_utils import pretrained_model, undo_windowing, conv_nd", "utils/hiera_utils.py", decoy=True, upsample=True)
    assert _forward_count(path).startswith("skipped: undo_windowing (line")


def test_an_absolute_plain_import_in_a_package_is_not_read_beside(tmp_path: Path):
    """`from hiera_utils import undo_windowing` in a package module is absolute: Python
    finds a top-level hiera_utils.py on sys.path, not the one beside the file. With an
    __init__.py there it is not followed; in a plain folder (scripts run from it) it is."""
    plain = _layout(tmp_path / "plain", "from hiera_utils import pretrained_model, undo_windowing, conv_nd", "models/hiera_utils.py")
    assert _forward_count(plain).startswith("APPLIED MAE forward")
    package = _layout(tmp_path / "package", "from hiera_utils import pretrained_model, undo_windowing, conv_nd", "models/hiera_utils.py")
    (package.parent / "__init__.py").write_text("")
    assert "the undo_windowing called is not a function this rewrite can read" in _forward_count(package)


def test_the_imports_of_a_module_found_elsewhere_are_not_followed(tmp_path: Path):
    """hiera.py imports do_masked_conv from `.layers.hiera_utils`, which imports
    get_resized_mask from `.ops` -- layers/ops.py, whose copy writes the mask. Read from
    the file's folder, `.ops` was pkg/ops.py (a pure copy): HR003 was applied and the
    rewritten MAE raised. Now the imports of a module found elsewhere are not followed."""
    src = upstream_dir()
    utils = (src / "hiera_utils.py").read_text()
    a, b = utils.index("def get_resized_mask("), utils.index("def do_masked_conv(")
    head = "import torch\nimport torch.nn.functional as F\n\n\n"
    writer = utils[a:b].replace("    # (spatial) mask: [B, C, (t), (h), w]\n", "    # (spatial) mask: [B, C, (t), (h), w]\n    mask[..., 0, 0] = True\n")
    assert writer != utils[a:b]
    pkg = tmp_path / "pkg"
    (pkg / "layers").mkdir(parents=True)
    (pkg / "hiera.py").write_text((src / "hiera.py").read_text().replace("from .hiera_utils import", "from .layers.hiera_utils import"))
    (pkg / "layers" / "hiera_utils.py").write_text((utils[:a] + utils[b:]).replace(
        "import torch.nn.functional as F\n", "import torch.nn.functional as F\n\nfrom .ops import get_resized_mask\n", 1))
    (pkg / "layers" / "ops.py").write_text(head + writer)
    (pkg / "ops.py").write_text(head + utils[a:b])  # the decoy beside hiera.py
    path = pkg / "hiera.py"
    reports = rewrite_bytes(path.read_bytes(), siblings=sibling_reader(path)).reports
    drop = [r for r in reports if r.code == "HR003"]
    assert drop and not any(r.applied for r in drop), drop
