"""Issue 31 (time): verify reads a class's ``__init__`` from its source once.

``inspect.getsource`` of a class parses its whole module on every call (Python 3.11's
class finder walks the module's syntax tree).  Verify asks for the parameters of the same
classes at every build of every candidate: in a real fork with six files and a dozen
models that was 1832 calls, about 3 s of each build, and 65 s of a 156 s run.
"""

from __future__ import annotations

import inspect
import sys
import textwrap

from hiera_rewrite.verify import arguments


def test_each_class_init_is_parsed_once(tmp_path, monkeypatch):
    (tmp_path / "parse_once_mod.py").write_text(
        textwrap.dedent(
            """
            class Base:
                def __init__(self, depth=2, **kwargs):
                    self.depth = depth

            class Net(Base):
                def __init__(self, model_name: str, width: int = 8, **kwargs):
                    super().__init__(**kwargs)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import parse_once_mod  # noqa: PLC0415

    calls = []
    real = inspect.getsource
    monkeypatch.setattr(arguments.inspect, "getsource", lambda obj: calls.append(obj) or real(obj))
    try:
        first = arguments.init_params(parse_once_mod.Net)
        for _ in range(5):
            assert arguments.init_params(parse_once_mod.Net) == first
    finally:
        sys.modules.pop("parse_once_mod", None)
    params, required = first
    assert {"model_name", "width", "depth"} <= set(params) and required == {"model_name"}
    names = [c.__name__ for c in calls]
    assert {"Base", "Net"} <= set(names) and len(names) == len(set(names)), names  # once each, not six times
