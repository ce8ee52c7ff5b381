"""A function whose nested def, lambda or class names its locals, or that reaches them
by name (`locals()`...), is proven nothing about (hunt 5: closures writing the mask or
rebinding it with `nonlocal` went unseen): every rewrite in it keeps the original
statement and names the nested scope.  A nested scope that uses only its own names
(parameters, its own locals) changes nothing.  The numeric cases are the fork-edit
operators 8l and 8m (tests/test_fork_edits.py)."""

from __future__ import annotations

import pytest

from hiera_rewrite.engine import rewrite_bytes

ATTENTION = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def forward(self, x):
        B, N, C = x.shape
        num_windows = 4
        {pre}
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 3).reshape(B, -1, C)
        return self.proj(x)
'''

OWN_NAMES = {
    "nothing": "pass",
    "def_with_its_own_locals": "def helper(y):\n            x = y * 2\n            return x",
    "lambda_of_its_parameter": "double = lambda t: t * 2",
    "nested_def_of_a_nested_def": "def outer(m):\n            def inner(*a):\n                return m(*a)\n            return inner",
}

NAMES_A_LOCAL = {
    "def_reading_a_local": ("def helper():\n            return x.sum()", "the nested `def helper` (line 10) names x of forward"),
    "nonlocal_rebinding": (
        "def shrink():\n            nonlocal num_windows\n            num_windows = 2",
        "the nested `def shrink` (line 10) names num_windows of forward",
    ),
    "lambda_closing_over": ("peek = lambda: qkv", "a lambda (line 10) names qkv of forward"),
    "nested_class": ("class Cache:\n            last = num_windows", "the nested `class Cache` (line 10) names num_windows of forward"),
    "locals": ("print(locals())", "`locals()` (line 10) reaches the locals of forward by name"),
    "frame": ("import sys\n        frame = sys._getframe()", "`_getframe()` (line 11) reaches the locals of forward by name"),
}


def _reports(pre: str):
    return rewrite_bytes(ATTENTION.replace("{pre}", pre).encode()).reports


@pytest.mark.parametrize("name", sorted(OWN_NAMES))
def test_a_nested_scope_of_its_own_names_keeps_the_rewrite(name):
    reports = _reports(OWN_NAMES[name])
    assert [r.code for r in reports if r.applied] == ["HR001"], [r.message for r in reports]


@pytest.mark.parametrize("name", sorted(NAMES_A_LOCAL))
def test_a_nested_scope_naming_a_local_refuses_naming_it(name):
    pre, why = NAMES_A_LOCAL[name]
    reports = _reports(pre)
    assert not any(r.applied for r in reports), [r.message for r in reports]
    assert any(why in r.message and "nothing about them is proven" in r.message for r in reports), [r.message for r in reports]
