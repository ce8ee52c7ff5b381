"""Which lines of the rewritten files a case ran (worker side): a line tracer limited
to function frames of the traced files."""

from __future__ import annotations

import os
import sys
from typing import Dict, Optional, Set


class Tracer:
    """Line events of function frames of the traced files, into the current bucket."""

    def __init__(self, files: Dict[str, str]) -> None:
        self.files = {os.path.realpath(p): key for p, key in files.items()}
        self.keys: Dict[str, Optional[str]] = {}
        self.bucket: Optional[Dict[str, Set[int]]] = None

    def _call(self, frame, event, arg):
        name = frame.f_code.co_filename
        key = self.keys.get(name, "")
        if key == "":
            key = self.keys[name] = self.files.get(os.path.realpath(name))
        if key is None or self.bucket is None:
            return None
        lines = self.bucket.setdefault(key, set())

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local

    def __call__(self, bucket: Dict[str, Set[int]]):
        tracer = self

        class _On:
            def __enter__(self):
                tracer.bucket = bucket
                sys.settrace(tracer._call)

            def __exit__(self, *exc):
                sys.settrace(None)
                tracer.bucket = None
                return False

        return _On()
