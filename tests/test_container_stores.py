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


# -- hunt 17a: what keeps the tensor without a direct store (F1), a local container
# others reach (F2, F3), a store inside a tuple or for target (F4) ----------------------

KEPT_HEADER = '''import torch
import torch.nn as nn

FEATURES = []


def record(t):
    FEATURES.append(t)

'''

# case: (the class Case, the text its HR002 report must contain)
KEPT = {
    # F1: before the pool, a call that may keep the tensor it pools was no store
    "module_function_stores_it": ('''
class Case(nn.Module):
    def forward(self, x):
        h = x * 1
        record(h)
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        FEATURES[-1].mul_(2)
''', "is passed to `record(...)`"),
    "self_method_stores_it": ('''
class Case(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = {}

    def record(self, name, t):
        self.features[name] = t

    def forward(self, x):
        h = x * 1
        self.record("pre_pool", h)
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.features["pre_pool"].mul_(2)
''', "is passed to `self.record(...)`"),
    "setattr": ('''
class Case(nn.Module):
    def forward(self, x):
        h = x * 1
        setattr(self, "pre_pool", h)
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.pre_pool.mul_(2)
''', "is passed to `setattr(...)`"),
    # the caller of a pooling function stored what it passes before the call
    "caller_stored_it_before_the_call": ('''
def pool(t):
    return t.view(t.shape[0], 2, -1, t.shape[-1]).max(dim=1).values


class Case(nn.Module):
    def forward(self, x):
        h = x * 1
        self.pre_pool = h
        y = pool(h)
        return y * 3

    def modify(self):
        self.pre_pool.mul_(2)
''', "is stored in `self.pre_pool`"),
    "global_name": ('''
class Case(nn.Module):
    def forward(self, x):
        global LAST
        LAST = x * 1
        y = LAST.view(LAST.shape[0], 2, -1, LAST.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        LAST.mul_(2)
''', "is the global `LAST`"),
    # (found with F1) the tensor it pools comes from what other code may hold
    "made_by_a_method_that_keeps_it": ('''
class Case(nn.Module):
    def make(self, x):
        out = x * 2
        self.made = out
        return out

    def forward(self, x):
        h = self.make(x)
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.made.mul_(2)
''', "comes from `self.make(x)`"),
    "made_by_a_function_that_keeps_it": ('''
def make(x):
    out = x * 2
    FEATURES.append(out)
    return out


class Case(nn.Module):
    def forward(self, x):
        h = make(x)
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        FEATURES[-1].mul_(2)
''', "comes from `make(x)`"),
    "read_from_a_dict_of_self": ('''
class Case(nn.Module):
    def forward(self, x):
        self.cache = {"h": x * 1}
        h = self.cache["h"]
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.cache["h"].mul_(2)
''', "comes from `self.cache`"),
    "loop_over_a_list_of_self": ('''
class Case(nn.Module):
    def forward(self, x):
        self.feats = [x * 1]
        for h in self.feats:
            y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.feats[0].mul_(2)
''', "is bound by a compound statement's header"),
    "module_global": ('''
G = torch.ones(2, 4, 3, dtype=torch.float64, requires_grad=True) * 1


class Case(nn.Module):
    def forward(self, x):
        h = G
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * x.sum()

    def modify(self):
        G.mul_(2)
''', "is the global `G`"),
    "passed_from_an_attribute": ('''
def pool(t):
    return t.view(t.shape[0], 2, -1, t.shape[-1]).max(dim=1).values


class Case(nn.Module):
    def forward(self, x):
        self.pre_pool = x * 1
        y = pool(self.pre_pool)
        return y * 3

    def modify(self):
        self.pre_pool.mul_(2)
''', "comes from `self.pre_pool`"),
    # F2: a new local container, published before the tensor goes in
    "published_dict": ('''
class Case(nn.Module):
    def forward(self, x):
        feats = {}
        self.stage_feats = feats
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        feats["pooled"] = y
        return y * 3

    def modify(self):
        self.stage_feats["pooled"].mul_(2)
''', 'is stored in `feats["pooled"]`'),
    "published_list": ('''
class Case(nn.Module):
    def forward(self, x):
        outs = []
        self.outs = outs
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        outs.append(y)
        return y * 3

    def modify(self):
        self.outs[-1].mul_(2)
''', "is stored by `outs.append(...)`"),
    "appended_to_a_global_list": ('''
class Case(nn.Module):
    def forward(self, x):
        maps = {}
        FEATURES.append(maps)
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        maps["pooled"] = y
        return y * 3

    def modify(self):
        FEATURES[-1]["pooled"].mul_(2)
''', 'is stored in `maps["pooled"]`'),
    # F3: a new dict whose values are containers others reach
    "nested_item_store": ('''
class Case(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = {}

    def forward(self, x):
        record = {"inner": self.inner, "step": 0}
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        record["inner"]["pooled"] = y
        return y * 3

    def modify(self):
        self.inner["pooled"].mul_(2)
''', 'is stored in `record["inner"]["pooled"]`'),
    "nested_append_before_the_pool": ('''
class Case(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = []

    def forward(self, x):
        record = {"pre": self.pre}
        h = x * 1
        record["pre"].append(h)
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.pre[-1].mul_(2)
''', 'is stored by `record["pre"].append(...)`'),
    # F4: tuple and for targets that store into an attribute or an item
    "tuple_target_attribute": ('''
class Case(nn.Module):
    def forward(self, x):
        h = x * 1
        self.pre_pool, self.stride = h, 2
        y = h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        return y * 3

    def modify(self):
        self.pre_pool.mul_(2)
''', "is stored in `self.pre_pool`"),
    "tuple_target_item": ('''
class Case(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        self.cache["pooled"], n = y, 2
        return y * n

    def modify(self):
        self.cache["pooled"].mul_(2)
''', 'is stored in `self.cache["pooled"]`'),
    "for_target_item": ('''
class Case(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        y = x.view(x.shape[0], 2, -1, x.shape[-1]).max(dim=1).values
        for self.cache["pooled"] in [y]:
            pass
        return y * 3

    def modify(self):
        self.cache["pooled"].mul_(2)
''', 'is stored in `self.cache["pooled"]`'),
}


@pytest.mark.parametrize("case", sorted(KEPT))
def test_a_pool_kept_where_other_code_reaches_it_is_refused(case):
    torch = pytest.importorskip("torch")
    body, expected = KEPT[case]
    source = KEPT_HEADER + body
    reports = [r for r in rewrite_bytes(source.encode()).reports if r.code == "HR002"]
    assert reports and not any(r.applied for r in reports), reports
    assert any(expected in r.message for r in reports), reports

    def backward(text: str) -> None:
        module = _load(text)
        model = module.Case()
        x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
        out = model(x)
        model.modify()  # another method, before backward
        out.sum().backward()

    backward(source)  # the original runs
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        backward(source.replace(".max(dim=1).values", ".amax(dim=1)"))  # what the rewrite would make of it


# HR001: the restored output kept where other code reaches it; the kept tensor is
# modified in place before backward, with the output projection frozen (its Linear then
# saves no input, and nothing but the rewrite's SDPA holds the restored output)
ATTN_RESTORE = "        x = x.transpose(1, 3).reshape(B, -1, self.dim_out)\n"
ATTN_TOP = "        B, N, _ = x.shape\n"
ATTN_INIT = "        self.use_mask_unit_attn = use_mask_unit_attn\n"
KEPT_RESTORE = {
    # F2: `maps` is new, but published on self before the output goes in
    "published_dict": (
        [(ATTN_TOP, "        maps = {}\n        self.last_maps = maps  # read by a visualiser\n" + ATTN_TOP),
         (ATTN_RESTORE, ATTN_RESTORE + '        maps["out"] = x\n')],
        'it is stored in `maps["out"]`', lambda attn: attn.last_maps["out"],
    ),
    # F3: a new dict holding a dict of self
    "nested_item_store": (
        [(ATTN_INIT, ATTN_INIT + "        self.maps = {}\n"),
         (ATTN_TOP, '        record = {"maps": self.maps, "step": 0}\n' + ATTN_TOP),
         (ATTN_RESTORE, ATTN_RESTORE + '        record["maps"]["out"] = x\n')],
        'it is stored in `record["maps"]["out"]`', lambda attn: attn.maps["out"],
    ),
    # F4: an attribute in a tuple target
    "tuple_target_attribute": (
        [(ATTN_RESTORE, ATTN_RESTORE + "        self.last_out, self.last_windows = x, num_windows\n")],
        "it is stored in `self.last_out`", lambda attn: attn.last_out,
    ),
}


@pytest.mark.parametrize("case", sorted(KEPT_RESTORE))
def test_hr001_copies_its_output_kept_where_other_code_reaches_it(case, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("hiera")
    import importlib
    import sys

    edits, expected, kept = KEPT_RESTORE[case]
    text = (upstream_dir() / "hiera.py").read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    result = rewrite_bytes(text.encode(), siblings=read_upstream_module)
    [report] = [r for r in result.reports if r.code == "HR001"]
    assert report.applied and expected in report.message, report
    assert "x = x.transpose(1, 2).reshape(B, -1, self.dim_out).clone()\n" in result.output.decode()

    monkeypatch.syspath_prepend(str(tmp_path))
    tag = f"kept_restore_{case}"
    packages = []
    for side, source in (("a", text.encode()), ("b", result.output)):
        dest = tmp_path / f"{tag}_{side}"
        dest.mkdir()
        for path in upstream_dir().glob("*.py"):
            (dest / path.name).write_bytes(source if path.name == "hiera.py" else path.read_bytes())
        importlib.invalidate_caches()
        packages.append(importlib.import_module(dest.name))

    def run(pkg):
        torch.manual_seed(0)
        model = pkg.Hiera(input_size=(64, 64), embed_dim=16, num_heads=2, stages=(1, 1, 1, 1), q_pool=2, num_classes=10).double()
        for blk in model.blocks:
            blk.attn.proj.requires_grad_(False)
        torch.manual_seed(1)
        x = torch.randn(2, 3, 64, 64, dtype=torch.float64, requires_grad=True)
        out = model(x)
        with torch.no_grad():
            for blk in model.blocks:  # a visualiser normalises what it kept, in place
                t = kept(blk.attn)
                t.div_(t.norm())
        (out * torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
        return out.detach(), [p.grad for p in model.parameters() if p.requires_grad], x.grad

    try:
        out_a, grads_a, input_a = run(packages[0])
        out_b, grads_b, input_b = run(packages[1])  # raised "modified by an inplace operation" without the copy
    finally:
        for module in [m for m in sys.modules if m.startswith(tag)]:
            del sys.modules[module]
    torch.testing.assert_close(out_b, out_a, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(input_b, input_a, rtol=1e-10, atol=1e-12)
    assert len(grads_a) == len(grads_b)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
