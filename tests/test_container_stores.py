"""A tensor put into a container other code reaches (hunt 15, a white-box audit of
1ec596a): `FEATURES.append(h)` on a module-level list, `self.cache["k"] = h`,
`self.kept.append(y)`.  Code outside the function may modify it in place there, before
backward, as it may through `self.k = h` (which was refused); the in-place check took a
container store for a local container, or for no store at all:

- HR002 (opt-in) rewrote the pool (also where a local name is another name for such a
  container, `cache = self.cache`): `.amax` saves its input and output for backward, so
  an in-place op on the stored tensor made the rewritten backward raise where the
  original ran;
- HR001 did not copy its restored output stored that way (now `.clone()`, as for an
  attribute).

A local container the function itself holds is still followed (the pool keeps the fast
path), and a numpy look-alike `a.reshape(...).max(1)[0]` (the first row of the maxima,
and no `.amax` on an array) is not taken for a tensor pool."""

from __future__ import annotations

import functools
import types

import pytest

from hiera_rewrite.engine import every_code, rewrite_bytes
from tests.upstream import read_upstream_module, upstream_dir

rewrite_bytes = functools.partial(rewrite_bytes, codes=every_code())

STORED = '''import torch
import torch.nn as nn

FEATURES = []


class GlobalList(nn.Module):
    def forward(self, x):
        h = x * 1
        FEATURES.append(h)
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        FEATURES[-1].mul_(2)


class SelfDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        h = x * 1
        self.cache["pre_pool"] = h
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.cache["pre_pool"].mul_(2)


class SelfListAfter(nn.Module):
    def __init__(self):
        super().__init__()
        self.kept = []

    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        self.kept.append(y)
        return y * 3

    def modify(self):
        self.kept[-1].mul_(2)


class AliasedDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        h = x * 1
        cache = self.cache  # a local name for a container others reach
        cache["pre_pool"] = h
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.cache["pre_pool"].mul_(2)
'''

LOCAL = '''import torch
import torch.nn as nn


class LocalList(nn.Module):
    def forward(self, x):
        outs = []
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        outs.append(y)
        return outs[0] * 3


def shape_statistics(counts):
    return counts.reshape(2, 2, -1).max(1)[0]


def tensor_statistics(counts):
    return counts.reshape(2, 2, -1).max(dim=1)[0] * 2
'''


def _load(source: str) -> types.ModuleType:
    module = types.ModuleType("stores")
    exec(compile(source, "stores", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("case", ["GlobalList", "SelfDict", "SelfListAfter", "AliasedDict"])
def test_a_pool_stored_in_a_container_others_reach_is_refused(case):
    torch = pytest.importorskip("torch")
    reports = [r for r in rewrite_bytes(STORED.encode()).reports if r.code == "HR002"]
    assert len(reports) == 4 and not any(r.applied for r in reports), reports
    assert all("where other code may modify it in place" in r.message for r in reports), reports

    def backward(source: str) -> None:
        module = _load(source)
        torch.manual_seed(0)
        model = getattr(module, case)()
        x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
        out = model(x)
        model.modify()  # another method, before backward
        out.sum().backward()

    backward(STORED)  # the original runs
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        backward(STORED.replace(".max(dim=1).values", ".amax(dim=1)"))  # what the rewrite made of it


def test_a_local_container_keeps_the_pool_and_numpy_is_not_a_pool():
    result = rewrite_bytes(LOCAL.encode())
    reports = [r for r in result.reports if r.code == "HR002"]
    assert [(r.line, r.applied) for r in reports] == [(8, True), (18, True)], reports
    out = result.output.decode()
    assert "counts.reshape(2, 2, -1).max(1)[0]" in out  # numpy's spelling: untouched
    assert "counts.reshape(2, 2, -1).amax(dim=1) * 2" in out


def test_hr001_copies_its_output_stored_in_a_dict_on_self():
    pytest.importorskip("hiera")
    text = (upstream_dir() / "hiera.py").read_text()
    restore = "        x = x.transpose(1, 3).reshape(B, -1, self.dim_out)\n"
    assert text.count(restore) == 1
    text = text.replace(restore, restore + '        self.cache["attn"] = x  # read by a visualisation hook\n')
    result = rewrite_bytes(text.encode(), siblings=read_upstream_module)
    [report] = [r for r in result.reports if r.code == "HR001"]
    assert report.applied and "it is stored" in report.message, report
    assert 'x = x.transpose(1, 2).reshape(B, -1, self.dim_out).clone()\n        self.cache["attn"] = x' in result.output.decode()
