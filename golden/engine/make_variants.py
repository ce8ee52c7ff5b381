"""Writes the byte-exact inputs of the golden/engine cases (run it from anywhere).

Each case is one small module (mask-unit attention with a q-pool, plus a pooling
layer) in one encoding/newline/indentation variant.  The expected outputs
(``*.out.py``) were produced by the tool and reviewed by hand: only the rewritten
statements differ, and they keep the file's newline, indentation and encoding.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent

BASE = '''\
"""Golden (engine): bytes outside the rewritten statements must survive \u00e9xactly."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class UnitAttention(nn.Module):
    def __init__(self, dim, heads, q_stride=1, window_size=2):
        super().__init__()
        self.heads, self.q_stride, self.window_size = heads, q_stride, window_size
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape  # caf\u00e9: tokens of every mask unit are contiguous
        num_windows = N // (self.q_stride * self.window_size)
        qkv = self.qkv(x).reshape(B, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.q_stride > 1:
            q = q.view(B, self.heads, num_windows, self.q_stride, -1, self.head_dim).max(dim=3).values
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 3).reshape(B, -1, C)  # r\u00e9sultat: (B, N, C)
        return self.proj(x)


def golden_example():
    model = nn.Sequential(UnitAttention(8, 2, q_stride=2), Pool(), UnitAttention(8, 4))
    return model.double(), (torch.randn(2, 16, 8, dtype=torch.float64),)


class Pool(nn.Module):
    """Halves the tokens: a max over an unrolled stride."""

    def forward(self, x):
        B, N, C = x.shape
        return x.view(B, 2, N // 2, C).max(dim=1).values
'''


def mixed_newlines(text: str) -> str:
    """Line ``i`` ends in \\r, \\n, \\r\\n in turn (Python accepts any mix)."""
    lines = text.split("\n")
    ends = [["\r", "\n", "\r\n"][i % 3] for i in range(len(lines) - 1)]
    for i in range(1, len(ends)):
        if ends[i - 1] == "\r" and lines[i] == "" and ends[i] == "\n":
            ends[i] = "\r"  # "\r" then an empty "\n" line would read as one "\r\n"
    return "".join(line + end for line, end in zip(lines, ends)) + lines[-1]


def tabs(text: str) -> str:
    return re.sub(r"(?m)^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), text)


VARIANTS = {
    "crlf": BASE.replace("\n", "\r\n").encode("utf-8"),
    "latin1_cookie": ("# -*- coding: latin-1 -*-\n" + BASE).encode("latin-1"),
    "utf8_bom": b"\xef\xbb\xbf" + BASE.encode("utf-8"),
    "tabs": tabs(BASE).encode("utf-8"),
    "no_final_newline": BASE.rstrip("\n").encode("utf-8"),
    "crlf_tabs_no_final_newline": tabs(BASE).rstrip("\n").replace("\n", "\r\n").encode("utf-8"),
    # old-Mac line ends: libcst drops a final \r unless the engine says it is there
    "cr": BASE.replace("\n", "\r").encode("utf-8"),
    "cr_no_final_newline": BASE.rstrip("\n").replace("\n", "\r").encode("utf-8"),
    "cr_tabs_utf8_bom": b"\xef\xbb\xbf" + tabs(BASE).replace("\n", "\r").encode("utf-8"),
    "mixed_newlines": mixed_newlines(BASE).encode("utf-8"),
}

if __name__ == "__main__":
    for name, data in VARIANTS.items():
        (HERE / f"{name}.in.py").write_bytes(data)
