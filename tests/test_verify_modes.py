"""``--verify`` beyond a train-mode step of the parameters: sites reached only in eval
mode, and the gradient of the inputs.

- A fork whose attention takes the rewritten 5-D SDPA path only under ``if not
  self.training:`` (an attention-free token mixing in training): train-mode cases never
  run the site, so the models (and the attention as a component) are also run in eval
  mode while a site is unreached; the site table says which mode proved each site.
- A wrong rewrite that changes only the input's gradient (a ``.detach()`` on a path
  without parameters: a component's pooled skip, the MAE's pixel labels) changed no
  output, parameter gradient nor buffer, and PASSED before the input gradients were
  compared.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hiera_rewrite import cli, files
from hiera_rewrite.verify import EXIT_VERIFY_FAILED

pytest.importorskip("torch")
pytest.importorskip("timm")

from tests.test_verify_components import encoder_fork, hr001_row  # noqa: E402
from tests.test_verify_layouts import assert_all_proven, classifier_fork, site_rows, sub, upstream_files, verify, write, wrong_rewrite  # noqa: E402

_DOC = '        """ Input should be of shape [batch, tokens, channels]. """\n'
_TAIL = "        x = self.proj(x)\n        return x\n"

_TRAIN_MIXING = """\
        if self.training:
            # training: attention-free token mixing (a fork's cheap warm-up)
            B = x.shape[0]
            x = self.qkv(x)[..., : self.dim_out]
            if self.q_stride > 1:
                x = x.reshape(B, self.q_stride, -1, self.dim_out).amax(dim=1)
            return self.proj(x)
"""


def eval_only_attention_fork():
    """classifier_fork whose MaskUnitAttention runs upstream's attention only in eval mode
    (in training it returns early, from a token mixing without attention)."""
    sources = classifier_fork()
    sources["hiera.py"] = sub(sources["hiera.py"], _DOC, _DOC + _TRAIN_MIXING)
    return sources


def test_site_reached_only_in_eval_mode_is_proven_there(tmp_path: Path, capsys):
    """Before: the attention's site was NOT PROVEN (exit 3: no train-mode case, model or
    component, runs it); now the model's eval-mode case proves it, and says so."""
    folder = write(tmp_path / "x" / "hiera", eval_only_attention_fork())
    out = assert_all_proven(folder, capsys)
    rows = site_rows(out)
    attention = [row for key, row in rows.items() if key.endswith("HR001")]
    assert len(attention) == 1 and "MaskUnitAttention.forward" in attention[0], out
    assert " hiera.hiera:Hiera eval forward(x)" in attention[0] and "  eval  " in attention[0], attention[0]
    # the token drop runs in train mode: proven there, no eval case needed for it
    drops = [row for key, row in rows.items() if key.endswith("HR003")]
    assert drops and all("  train  " in row and " eval " not in row for row in drops), out
    assert re.search(r"float64 cpu  eval forward\(x\) +out +\(2,10\) .* pass", out), out
    # the attention's own build was not needed: the model proves it
    assert "component MaskUnitAttention" not in out


def test_sabotaged_eval_only_attention_fails_naming_the_site(tmp_path: Path, capsys, monkeypatch):
    """The output restore loses its transpose inside the eval-only branch: only the
    eval-mode case sees it."""
    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        text, n = re.subn(r"x\.transpose\(1, 2\)\.reshape\(B, -1, self\.dim_out\)", "x.reshape(B, -1, self.dim_out)", result.output.decode())
        if n:
            result.output = text.encode()
        return result

    folder = write(tmp_path / "x" / "hiera", eval_only_attention_fork())
    monkeypatch.setattr(files, "rewrite_bytes", wrong)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    row = [row for key, row in site_rows(out).items() if key.endswith("HR001")]
    assert len(row) == 1 and "MaskUnitAttention.forward" in row[0] and "FAIL" in row[0], out
    failing = [line for line in out.splitlines() if "FAIL" in line and "float64 cpu" in line]
    assert failing and all(" eval forward(x)" in line for line in failing), out
    assert "verify: FAILED" in out


# -- input gradients ----------------------------------------------------------------------


def pooled_skip_fork():
    """encoder_fork whose attention adds a parameter-free pooled skip of its input (dim ==
    dim_out: the Encoder builds it so); the Encoder cannot be built, so the attention is
    verified as a component."""
    edits = [
        (_DOC, _DOC + "        skip = x  # the block's input, pooled like the queries: no parameters on this path\n"),
        (_TAIL, "        x = self.proj(x)\n        if self.dim == self.dim_out:\n"
                "            x = x + skip.view(B, self.q_stride, -1, self.dim).amax(dim=1)\n        return x\n"),
    ]
    sources = encoder_fork(edits)
    sources["blocks.py"] = sub(sources["blocks.py"], "MaskUnitAttention(dim, 2 * dim, heads, q_stride=4", "MaskUnitAttention(dim, dim, heads, q_stride=4")
    return sources


_detaching = wrong_rewrite


def _only_input_grads_fail(out: str) -> None:
    failing = [line for line in out.splitlines() if "FAIL" in line and "cpu" in line]
    assert failing, out
    assert all(re.search(r"input grads \(x\) +worst: x ", line) for line in failing), failing
    assert "verify: FAILED" in out


def test_component_input_gradient_is_compared(tmp_path: Path, capsys):
    """The correct rewrite passes, with the input's gradient compared."""
    folder = write(tmp_path / "x" / "enc", pooled_skip_fork())
    code, out, err = verify(folder, capsys)
    assert code == cli.EXIT_CHANGED, out + err
    assert hr001_row(out).rstrip().endswith("pass")
    assert re.search(r"component MaskUnitAttention\(.*q_stride=4.*\n(?:.*\n)*?.*input grads \(x\) +worst: x +\S+ +\S+ +pass", out), out
    assert "verify: PASSED (1/1 sites exercised, every comparison equal)" in out


def test_rewrite_changing_only_a_components_input_gradient_fails(tmp_path: Path, capsys, monkeypatch):
    """The rewritten attention detaches its pooled skip: outputs and parameter gradients
    are equal, only dx differs.  Before: PASSED."""
    folder = write(tmp_path / "x" / "enc", pooled_skip_fork())
    monkeypatch.setattr(files, "rewrite_bytes", _detaching(r"skip\.view\(", "skip.detach().view("))
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    row = hr001_row(out)
    assert "FAIL" in row and " component MaskUnitAttention(" in row, row
    _only_input_grads_fail(out)


def test_rewrite_changing_only_the_models_input_gradient_fails(tmp_path: Path, capsys, monkeypatch):
    """The MAE's rewritten label selection detaches the pixels it selects: the loss, the
    outputs and every parameter gradient are equal (labels are targets), only the
    gradient of the input image differs.  Before: PASSED."""
    folder = write(tmp_path / "x" / "hiera", upstream_files())
    monkeypatch.setattr(files, "rewrite_bytes", _detaching(r"label = masked_rows\(label, ", "label = masked_rows(label.detach(), "))
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    labels = [row for row in site_rows(out).values() if "get_pixel_label_2d" in row]
    assert len(labels) == 1 and "FAIL" in labels[0], out
    _only_input_grads_fail(out)
