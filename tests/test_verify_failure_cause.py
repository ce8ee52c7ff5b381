"""Issue 31: an unreached site names what stopped it, not the last build's missing label.

A real fork's MAE (a fusion head whose channels do not match: the original raises in every
build, up to its own configuration) is registered by a decorator without
``functools.wraps``, so its factory runs as ``model_def`` and verify cannot tell the
required ``model_name`` from the factory's name.  The class's own builds got a
``model_name`` and raised; the factory's build, tried last, lacked it.  The report gave that
last error: "needs model_name ... --kwargs '{"model_name": "..."}'", a flag that reaches
nothing (with any name the original raises).  The failure is the raise; the flag is the
build that raised, with the values it took.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from tests.test_verify_layouts import classifier_fork, sub, verify, write

pytest.importorskip("torch")
pytest.importorskip("timm")

REGISTRY = '''

def register_model(fn):
    def model_def(**kwargs):  # no functools.wraps: the factory runs as model_def
        return fn(**kwargs)
    return model_def


@register_model
def hiera_fused_tiny_224(**kwargs):
    return Hiera(embed_dim=96, num_heads=1, stages=(1, 2, 7, 2), **kwargs)
'''


def _fork() -> dict:
    head = "        self,\n        input_size: Tuple[int, ...] = (224, 224),"
    edits = [
        (head, "        self,\n        model_name: str,\n        input_size: Tuple[int, ...] = (224, 224),"),
        ("        depth = sum(stages)\n", "        self.model_name = model_name\n        depth = sum(stages)\n"),
    ]
    sources = classifier_fork(edits=edits)
    hiera = sources["hiera.py"]
    # a fusion of the last features with a projection one channel too wide: raises in every build
    marker = "        if mask is None:\n            x = x.mean(dim=1)\n"
    fused = "        x = x + x @ torch.zeros(x.shape[-1] + 1, x.shape[-1], dtype=x.dtype, device=x.device)\n"
    sources["hiera.py"] = sub(hiera, marker, fused + marker) + REGISTRY
    return sources


def test_the_cause_is_the_raise_not_the_factorys_missing_label(tmp_path: Path, capsys):
    folder = write(tmp_path / "x" / "hiera", _fork())
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "verify: NOT PROVEN" in out, out
    causes = [line for line in out.splitlines() if line.startswith("not proven:") and " HR003 " in line]
    assert causes, out
    for cause in causes:
        assert "the original model raised" in cause and "RuntimeError" in cause, cause
        assert '"model_name": "..."' not in cause, cause
        flag = re.search(r"--factory (\S+?):'(\{.*?\})'", cause)
        assert flag is not None, cause
        assert json.loads(flag.group(2)).get("model_name"), cause  # the value the build took
