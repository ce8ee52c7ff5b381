"""Hunt 18a: what reaches HR001's restored output, or HR002's pooled tensor and the
tensor it pools, unseen (a white-box audit of c50ca3f).  `.amax` saves its input and
output for backward, and SDPA's fused kernels save their output (of which HR001's
restore is a view): an in-place op on either before backward made the rewritten
backward raise "modified by an inplace operation" where the original ran.

- F1 (HR001): another module of the folder (hiera_mae.py) wraps the attention's `proj`
  (`blk.attn.proj = nn.Sequential(nn.Dropout(0.1, inplace=True), blk.attn.proj)`); only
  hiera.py was read.  F6: `self.proj.forward = ...`, `self._modules.update(proj=...)`.
- F2 (HR002): a pooling function's callers in another module of the folder.
- F3, F4: callers not all found (the function passed as a value, a method).
- F5: what it pools starts at a call, not a name (`self.tap(...).view(...)`).
- F9: the tensor it pools stored by the statement binding it (`h = self.pre = v`).
- F7: a `match` capture; F8: the tensor used as a key of a dict others reach.

Each is refused (HR002) or gets the restore's `.clone()` (HR001); the original runs
where the unchecked rewrite raises."""

from __future__ import annotations

import functools
import importlib
import sys
import types
from pathlib import Path

import pytest

from hiera_rewrite.engine import every_code, rewrite_bytes, selected_codes
from hiera_rewrite.files import process_file
from tests.upstream import read_upstream_module, upstream_dir

rewrite_all = functools.partial(rewrite_bytes, codes=every_code())


def _load(source: str) -> types.ModuleType:
    module = types.ModuleType("escapes")
    exec(compile(source, "escapes", "exec"), module.__dict__)
    return module


def _original_runs_amax_raises(source: str) -> None:
    """The original runs forward, `modify()` (another method) and backward; with the pools
    rewritten unchecked (`.amax`), backward raises."""
    torch = pytest.importorskip("torch")

    def backward(text: str) -> None:
        module = _load(text)
        model = module.Case()
        x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
        out = model(x)
        model.modify()
        out.sum().backward()

    backward(source)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        backward(source.replace(".max(dim=1).values", ".amax(dim=1)"))


HEADER = '''import torch
import torch.nn as nn
from functools import partial

'''

# case: (the class Case, the text the HR002 report must contain)
POOLS = {
    # F3: the function passed as a value (partial): its callers were not checked
    "function_passed_to_partial": ('''
def pool(t, stride):
    return t.view(t.shape[0], stride, -1, t.shape[-1]).max(dim=1).values


class Case(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = partial(pool, stride=2)

    def forward(self, x):
        h = x * 1
        self.skip = h
        return self.pool(h) * 3

    def modify(self):
        self.skip.mul_(2)
''', "whose callers are not all seen"),
    # F4: a method pooling its parameter; the caller writes the tensor after the call
    "method_parameter": ('''
class Case(nn.Module):
    def pool(self, t):
        return t.view(t.shape[0], 2, -1, t.shape[-1]).max(dim=1).values

    def forward(self, x):
        h = x * 1
        y = self.pool(h)
        self.h = h
        return y * 3

    def modify(self):
        self.h.mul_(2)
''', "it pools a parameter of a method (`pool`)"),
    "staticmethod_parameter": ('''
class Case(nn.Module):
    @staticmethod
    def pool(t):
        return t.view(t.shape[0], 2, -1, t.shape[-1]).max(dim=1).values

    def forward(self, x):
        h = x * 1
        y = Case.pool(h)
        self.h = h
        return y * 3

    def modify(self):
        self.h.mul_(2)
''', "it pools a parameter of a method (`pool`)"),
    # F5: what it pools starts at a call that keeps it, or an `a if c else b`
    "root_is_a_call": ('''
class Case(nn.Module):
    def tap(self, t):
        self.tapped = t
        return t

    def forward(self, x):
        y = self.tap(x * 1).view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.tapped.mul_(2)
''', "comes from `self.tap(x * 1)`"),
    "root_is_a_conditional": ('''
class Case(nn.Module):
    def forward(self, x):
        self.buf = x * 2
        y = (self.buf if self.training else x * 2).view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.buf.mul_(2)
''', "comes from `self.buf`"),
    "root_is_a_conditional_view": ('''
class Case(nn.Module):
    def forward(self, x):
        h = x * 1
        self.h = h
        y = (h if self.training else h * 1).view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.h.mul_(2)
''', "is stored in `self.h`"),
    # F9: stored by the statement that binds it
    "chained_assignment": ('''
class Case(nn.Module):
    def forward(self, x):
        h = self.pre_pool = x * 1
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.pre_pool.mul_(2)
''', "is stored in `self.pre_pool`"),
    "walrus_stored": ('''
class Case(nn.Module):
    def forward(self, x):
        self.pre_pool = (h := x * 1)
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.pre_pool.mul_(2)
''', "is stored in `self.pre_pool`"),
    # F7: a match capture keeps it
    "match_capture": ('''
class Case(nn.Module):
    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        match y:
            case kept:
                self.kept = kept
        return y * 3

    def modify(self):
        self.kept.mul_(2)
''', "is matched by the `match`"),
    # F8: a key of a dict others reach
    "dict_key": ('''
class Case(nn.Module):
    def __init__(self):
        super().__init__()
        self.names = {}

    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        self.names[y] = "pooled"
        return y * 3

    def modify(self):
        for t in self.names:
            t.mul_(2)
''', "is used as a key of `self.names`"),
}


@pytest.mark.parametrize("case", sorted(POOLS))
def test_hr002_refuses_what_reaches_the_pool_unseen(case):
    body, expected = POOLS[case]
    source = HEADER + body
    reports = [r for r in rewrite_all(source.encode()).reports if r.code == "HR002"]
    assert reports and not any(r.applied for r in reports), reports
    assert any(expected in r.message for r in reports), reports
    _original_runs_amax_raises(source)


UTILS = '''import torch


def pool(t, stride):
    return t.view(t.shape[0], stride, -1, t.shape[-1]).max(dim=1).values
'''

MODEL = '''import torch
import torch.nn as nn

from utils import pool


class Case(nn.Module):
    def forward(self, x):
        h = x * 1
        self.pre_pool = h  # read by a feature visualiser
        return pool(h, 2) * 3

    def modify(self):
        self.pre_pool.mul_(2)
'''


def test_hr002_checks_the_callers_in_the_modules_beside_the_file(tmp_path):
    """F2: the caller of `pool` is in model.py, beside utils.py (another file of the run)."""
    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "model.py").write_text(MODEL)
    _, result, error, _ = process_file((str(tmp_path / "utils.py"), selected_codes(["HR002"]), 0, False))
    assert error is None, error
    [report] = [r for r in result.reports if r.code == "HR002"]
    assert not report.applied, report
    assert "passed to pool at line 11 of a module beside this file" in report.message, report
    assert "is stored in `self.pre_pool`" in report.message, report
    _original_runs_amax_raises(UTILS + MODEL.replace("from utils import pool\n", ""))

    # a caller beside that leaves it alone keeps the rewrite (with the clone: returned)
    (tmp_path / "model.py").write_text(MODEL.replace("        self.pre_pool = h  # read by a feature visualiser\n", ""))
    _, result, error, _ = process_file((str(tmp_path / "utils.py"), selected_codes(["HR002"]), 0, False))
    [report] = [r for r in result.reports if r.code == "HR002"]
    assert report.applied and "clone" in report.message, report
    # passed as a value beside the file: refused
    (tmp_path / "model.py").write_text(MODEL.replace("return pool(h, 2) * 3", "return list(map(pool, [h], [2]))[0] * 3"))
    _, result, error, _ = process_file((str(tmp_path / "utils.py"), selected_codes(["HR002"]), 0, False))
    [report] = [r for r in result.reports if r.code == "HR002"]
    assert not report.applied and "referenced other than by a call" in report.message, report


def test_hr002_upstream_in_its_folder_keeps_the_pools(tmp_path):
    """Control: read beside hiera.py (its caller), upstream's do_pool keeps `.amax(...).clone()`
    and the q-pool `.amax` (the golden output of a lone file)."""
    pytest.importorskip("hiera")
    pkg = tmp_path / "upkg"
    pkg.mkdir()
    for path in upstream_dir().glob("*.py"):
        (pkg / path.name).write_bytes(path.read_bytes())
    codes = selected_codes(["HR001", "HR002"])
    _, utils, error, _ = process_file((str(pkg / "hiera_utils.py"), codes, 0, False))
    assert error is None and [r.applied for r in utils.reports if r.code == "HR002"] == [True], utils.reports
    assert ".amax(dim=1).clone()" in utils.output.decode()
    _, hiera, error, _ = process_file((str(pkg / "hiera.py"), codes, 0, False))
    assert error is None
    assert [r.applied for r in hiera.reports if r.code in ("HR001", "HR002")] == [True], hiera.reports  # HR001 takes the q-pool's site
    assert "x = x.transpose(1, 2).reshape(B, -1, self.dim_out)\n" in hiera.output.decode()  # no clone


# -- HR001: the restore's clone ------------------------------------------------------------

RESTORE = "        x = x.transpose(1, 3).reshape(B, -1, self.dim_out)\n"
INIT = "        self.use_mask_unit_attn = use_mask_unit_attn\n"
CLONED = "x = x.transpose(1, 2).reshape(B, -1, self.dim_out).clone()\n"

# case: (edits of hiera.py, the text the HR001 report must contain, proj frozen, what a visualiser normalises)
HR001_CASES = {
    # F6: the attention's own __init__ wraps proj's forward with an in-place dropout
    "proj_forward_patched": (
        [(INIT, INIT + "        self.proj_drop = nn.Dropout(0.1, inplace=True)\n"
                       "        proj_forward = self.proj.forward\n"
                       "        self.proj.forward = lambda t: proj_forward(self.proj_drop(t))\n")],
        "passed to `self.proj(...)`", False, None,
    ),
    "proj_in_modules_update": (
        [(INIT, INIT + "        self._modules.update(proj=nn.Sequential(nn.Dropout(0.1, inplace=True), self.proj))\n")],
        "passed to `self.proj(...)`", False, None,
    ),
    # F7: a match capture keeps it
    "match_capture": (
        [(RESTORE, RESTORE + "        match (True, x):\n            case (True, out):\n                self.last_out = out\n")],
        "is matched by the `match`", True, lambda attn: attn.last_out,
    ),
    # F8: a key of a module-level dict
    "dict_key": (
        [("class MaskUnitAttention(nn.Module):\n", "ACTIVATIONS = {}\n\n\nclass MaskUnitAttention(nn.Module):\n"),
         (RESTORE, RESTORE + '        ACTIVATIONS[x] = "attn_out"\n')],
        "is used as a key of `ACTIVATIONS`", True, "keys",
    ),
}


def _package(tmp_path: Path, tag: str, files: dict) -> types.ModuleType:
    dest = tmp_path / tag
    dest.mkdir()
    for path in upstream_dir().glob("*.py"):
        data = files.get(path.name)
        (dest / path.name).write_bytes(data if data is not None else path.read_bytes())
    importlib.invalidate_caches()
    return importlib.import_module(tag)


def _hiera_run(torch, pkg, frozen: bool, kept):
    torch.manual_seed(0)
    model = pkg.hiera.Hiera(input_size=(64, 64), embed_dim=16, num_heads=2, stages=(1, 1, 1, 1), q_pool=2, num_classes=10).double()
    if frozen:
        for blk in model.blocks:
            blk.attn.proj.requires_grad_(False)
    torch.manual_seed(1)
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64, requires_grad=True)
    out = model(x)
    if kept == "keys":
        with torch.no_grad():
            for t in list(pkg.hiera.ACTIVATIONS):
                t.div_(t.norm())
    elif kept is not None:
        with torch.no_grad():
            for blk in model.blocks:  # a visualiser normalises what it kept, in place
                t = kept(blk.attn)
                t.div_(t.norm())
    (out * torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
    return out.detach(), [p.grad for p in model.parameters() if p.requires_grad], x.grad


def _same(torch, a, b) -> None:
    out_a, grads_a, input_a = a
    out_b, grads_b, input_b = b
    torch.testing.assert_close(out_b, out_a, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(input_b, input_a, rtol=1e-10, atol=1e-12)
    assert len(grads_a) == len(grads_b)
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(gb, ga, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", sorted(HR001_CASES))
def test_hr001_copies_its_output_reached_unseen(case, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("hiera")
    edits, expected, frozen, kept = HR001_CASES[case]
    text = (upstream_dir() / "hiera.py").read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    result = rewrite_all(text.encode(), siblings=read_upstream_module)
    [report] = [r for r in result.reports if r.code == "HR001"]
    assert report.applied and expected in report.message, report
    assert CLONED in result.output.decode()

    monkeypatch.syspath_prepend(str(tmp_path))
    tag = f"escape_{case}"
    try:
        a = _hiera_run(torch, _package(tmp_path, f"{tag}_a", {"hiera.py": text.encode()}), frozen, kept)
        b = _hiera_run(torch, _package(tmp_path, f"{tag}_b", {"hiera.py": result.output}), frozen, kept)
    finally:
        for module in [m for m in sys.modules if m.startswith(tag)]:
            del sys.modules[module]
    _same(torch, a, b)  # raised "modified by an inplace operation" without the copy


MAE_ANCHOR = "        self.decoder_norm = norm_layer(decoder_embed_dim)\n"
MAE_EDIT = (
    "        # attention-output dropout in the encoder (regularises the fine-tune)\n"
    "        for blk in self.blocks:\n"
    "            blk.attn.proj = nn.Sequential(nn.Dropout(0.1, inplace=True), blk.attn.proj)\n"
)


def test_hr001_reads_the_modules_beside_the_file_for_proj(tmp_path, monkeypatch):
    """F1: hiera_mae.py (beside hiera.py, another file of the run) wraps each encoder
    attention's proj in an in-place dropout; HR001 in hiera.py clones its restore."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("hiera")
    mae = (upstream_dir() / "hiera_mae.py").read_text()
    assert mae.count(MAE_ANCHOR) == 1
    mae = mae.replace(MAE_ANCHOR, MAE_ANCHOR + MAE_EDIT)
    folder = tmp_path / "run"
    folder.mkdir()
    for path in upstream_dir().glob("*.py"):
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "hiera_mae.py").write_text(mae)
    _, result, error, _ = process_file((str(folder / "hiera.py"), selected_codes(), 0, False))
    assert error is None, error
    [report] = [r for r in result.reports if r.code == "HR001"]
    assert report.applied and "passed to `self.proj(...)`" in report.message, report
    assert CLONED in result.output.decode()

    monkeypatch.syspath_prepend(str(tmp_path))
    sides = []
    try:
        for tag, hiera in (("beside_proj_a", None), ("beside_proj_b", result.output)):
            pkg = _package(tmp_path, tag, {"hiera_mae.py": mae.encode(), "hiera.py": hiera})
            module = importlib.import_module(f"{tag}.hiera_mae")
            torch.manual_seed(0)
            model = module.MaskedAutoencoderHiera(
                input_size=(64, 64), embed_dim=16, num_heads=2, stages=(1, 1, 1, 1), q_pool=2,
                decoder_depth=1, decoder_embed_dim=16, decoder_num_heads=2,
            ).double()
            model.train()  # the dropout writes in place
            torch.manual_seed(1)
            x = torch.randn(2, 3, 64, 64, dtype=torch.float64, requires_grad=True)
            loss, pred, label, mask = model(x, mask_ratio=0.6)
            (loss + (pred * torch.linspace(0.5, 1.5, pred.numel(), dtype=pred.dtype).view(pred.shape)).sum()).backward()
            sides.append((torch.stack([loss.detach(), pred.detach().sum()]), [p.grad for p in model.parameters() if p.grad is not None], x.grad))
            assert pkg is not None
    finally:
        for module in [m for m in sys.modules if m.startswith("beside_proj")]:
            del sys.modules[module]
    _same(torch, sides[0], sides[1])  # raised "modified by an inplace operation" without the copy


def test_a_keyword_out_of_another_call_is_no_write():
    """`dict(..., out=x)` keeps x in a dict (stored where it goes), it writes nothing."""
    pytest.importorskip("hiera")
    text = (upstream_dir() / "hiera.py").read_text()
    text = text.replace(RESTORE, RESTORE + "        self.maps = dict(out=x)\n")
    result = rewrite_all(text.encode(), siblings=read_upstream_module)
    [report] = [r for r in result.reports if r.code == "HR001"]
    assert report.applied and "is stored in `self.maps`" in report.message, report
    assert "writes it in place" not in report.message


@pytest.mark.parametrize("owner, register", [
    ("Pyramid", 'setattr(self, f"block{i + 1}", block)'),
    ("MaskUnitAttention", 'setattr(self, f"block{i + 1}", block)'),
    ("Pyramid", 'self.add_module(f"block{i + 1}", block)'),
    ("MaskUnitAttention", 'self.add_module(f"block{i + 1}", block)'),
    ("Pyramid", 'self.body.add_module(f"block{i + 1}", block)'),
])
def test_hr001_beside_a_computed_setattr_on_self_counts_only_in_a_related_class(tmp_path, owner, register):
    """A model beside hiera.py registering its stages by computed names
    (`setattr(self, f"block{i + 1}", block)`, archaeoscape's pvt.py) does not set an
    attention's proj (no clone, stop 44's corpus); in a subclass of the attention it may."""
    pytest.importorskip("hiera")
    folder = tmp_path / "run"
    folder.mkdir()
    for path in upstream_dir().glob("*.py"):
        (folder / path.name).write_bytes(path.read_bytes())
    base = "nn.Module" if owner == "Pyramid" else "MaskUnitAttention"
    (folder / "pvt.py").write_text(
        "import torch.nn as nn\n\nfrom .hiera import MaskUnitAttention\n\n\n"
        f"class Stages({base}):\n    def __init__(self, *args):\n        nn.Module.__init__(self)\n"
        f"        self.body = nn.Module()\n        for i, block in enumerate(args):\n            {register}\n"
    )
    _, result, error, _ = process_file((str(folder / "hiera.py"), selected_codes(), 0, False))
    assert error is None, error
    [report] = [r for r in result.reports if r.code == "HR001"]
    assert report.applied, report
    assert (CLONED in result.output.decode()) == (owner != "Pyramid"), report.message
