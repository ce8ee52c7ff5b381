"""Writes the byte-exact variants of ``upstream_multiline.in.py`` (run it from anywhere).

CRLF newlines, a latin-1 file with a coding cookie and a non-ASCII byte, tab
indentation, and no final newline.  The expected outputs were produced by the tool
and reviewed: only the rewritten statements differ, and they keep the file's
newline, indentation and encoding.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    base = (HERE / "upstream_multiline.in.py").read_text(encoding="utf-8")
    body = base.split("\n", 1)[1]
    variants = {
        "variant_crlf": ('"""Golden: upstream chains, CRLF newlines."""\n' + body).replace("\n", "\r\n").encode(),
        "variant_latin1": (
            "# -*- coding: latin-1 -*-\n"
            '"""Golden: upstream chains in a latin-1 file (r\u00e9sum\u00e9: \u00e9 is one byte)."""\n' + body
        ).encode("latin-1"),
        "variant_tabs": re.sub(
            r"(?m)^((?:    )+)",
            lambda m: "\t" * (len(m.group(1)) // 4),
            '"""Golden: upstream chains, tab indentation."""\n' + body,
        ).encode(),
        "variant_no_final_newline": ('"""Golden: upstream chains, no final newline."""\n' + body).rstrip("\n").encode(),
    }
    for name, data in variants.items():
        (HERE / f"{name}.in.py").write_bytes(data)


if __name__ == "__main__":
    main()
