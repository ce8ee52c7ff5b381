"""What ``--verify`` compares, and from what state: the names of the output leaves (a
renamed key is a wrong rewrite), dataclass records, Python floats, non-finite values
(the same NaN or infinity on both sides is equal; a different one, or a finite error next
to an infinity, is not), buffers after each case from the same starting state, a random
mask whose rows differ, and a fresh copy of each argument per run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hiera_rewrite import files
from hiera_rewrite.verify import EXIT_VERIFY_FAILED
from hiera_rewrite.verify.compare import Comparison

torch = pytest.importorskip("torch")
pytest.importorskip("timm")

from tests.test_verify_layouts import assert_all_proven, classifier_fork, verify, write  # noqa: E402

_RETURN = "        if return_intermediates:\n            return x, intermediates\n\n        return x\n"


def _rows(outs_a, outs_b):
    grads = {"w": torch.ones(2, dtype=torch.float64)}
    return Comparison().compare("float64 cpu", "forward(x)", outs_a, grads, outs_b, dict(grads), 1e-9, torch)


def test_same_non_finite_values_are_equal_and_others_are_not():
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([1.0, -inf, nan, inf], dtype=torch.float64)
    assert Comparison._errs(a, a.clone(), torch) == (0.0, 0.0)  # was (nan, nan): a FAIL
    assert Comparison._errs(a, torch.tensor([1.0, inf, nan, inf], dtype=torch.float64), torch)[1] == inf
    assert Comparison._errs(a, torch.tensor([1.0, -inf, 0.0, inf], dtype=torch.float64), torch)[1] == inf
    assert Comparison._errs(a, torch.tensor([1.0, -3.0, nan, inf], dtype=torch.float64), torch)[1] == inf
    # a finite error is measured against the finite values, not hidden by an infinity
    abs_err, rel = Comparison._errs(a, torch.tensor([1.5, -inf, nan, inf], dtype=torch.float64), torch)
    assert (abs_err, rel) == (0.5, 0.5)


def test_a_renamed_output_key_fails():
    x = torch.ones(2, dtype=torch.float64)
    rows = _rows([("out['logits']", x)], [("out['logit']", x.clone())])
    assert not rows[0]["ok"] and "out['logit']" in rows[0]["note"]


def test_dataclass_output_fields_are_compared():
    @__import__("dataclasses").dataclass
    class Out:
        logits: object
        features: list

    x = torch.arange(3.0)
    leaves = Comparison._flatten(Out(x, [x + 1, x + 2]))
    assert [name for name, _ in leaves] == ["out.logits", "out.features[0]", "out.features[1]"]
    assert torch.equal(leaves[2][1], x + 2)


def _record_fork():
    """A fork returning a dataclass with a log-feature that is -inf where a logit is <= 0."""
    record = (
        "import dataclasses\n\n\n@dataclasses.dataclass\nclass HieraOutput:\n"
        "    logits: torch.Tensor\n    log_features: torch.Tensor\n    features: list\n\n\n"
    )
    edits = [
        (_RETURN, "        return HieraOutput(x, x.relu().log(), intermediates if return_intermediates else [])\n"),
        ("class Hiera(nn.Module, PyTorchModelHubMixin):", record + "class Hiera(nn.Module, PyTorchModelHubMixin):"),
    ]
    return classifier_fork(edits=edits)


def test_dataclass_output_with_infinities_passes(tmp_path: Path, capsys):
    """Before: the record was compared with == (FAIL, no gradient compared) and the
    identical -inf gave a NaN error (FAIL)."""
    folder = write(tmp_path / "x" / "hiera", _record_fork())
    out = assert_all_proven(folder, capsys)
    assert "out.log_features" in out and "out.features[3]" in out
    assert "grads (61 params)" in out


def test_renamed_dict_key_in_the_rewrite_fails(tmp_path: Path, capsys, monkeypatch):
    """A rewrite returning the same tensors under another key broke every caller that
    reads out["logits"]; the keys sorted alike, so it PASSED before."""
    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        renamed, n = re.subn(r'"logits": x', '"logit": x', result.output.decode())
        if n:
            result.output = renamed.encode()
        return result

    edits = [(_RETURN, '        return {"logits": x, "features": intermediates}\n')]
    folder = write(tmp_path / "x" / "hiera", classifier_fork(edits=edits))
    monkeypatch.setattr(files, "rewrite_bytes", wrong)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    assert "FAIL: the rewritten model returns out['logit'] here" in out
    assert "verify: FAILED" in out


def _running_stats_fork():
    """A fork keeping running statistics of its pooled features (one used in training,
    one only for evaluation) whose forward takes a required padding mask: choosing that
    argument runs the original model once before the cases."""
    head = "        self.head = Head(embed_dim, num_classes, dropout_rate=head_dropout)\n"
    forward_head = "        mask: torch.Tensor = None,\n        return_intermediates: bool = False,\n    ) -> torch.Tensor:"
    edits = [
        (head, head + '        self.register_buffer("feat_scale", torch.ones(()))\n        self.register_buffer("feat_mean", torch.zeros(()))\n'),
        (
            "            x = self.head(x)\n",
            "            if self.training:\n"
            "                self.feat_scale.mul_(0.9).add_(0.1 * x.detach().abs().mean())\n"
            "                self.feat_mean.mul_(0.9).add_(0.1 * x.detach().mean())\n"
            "            x = self.head(x / self.feat_scale)\n",
        ),
        (forward_head, "        padding_mask: torch.Tensor,\n" + forward_head),
        ("        x = x + self.get_pos_embed()\n", "        x = x + self.get_pos_embed()\n        x = x * padding_mask[..., None].to(x.dtype)\n"),
    ]
    return classifier_fork(edits=edits)


def test_every_case_starts_from_the_same_state(tmp_path: Path, capsys):
    """Before: the original side's cases started after the run that chose the padding
    mask had moved feat_scale, the rewritten side's from the built state: FAIL."""
    folder = write(tmp_path / "x" / "hiera", _running_stats_fork())
    out = assert_all_proven(folder, capsys)
    assert "forward(x, padding_mask)" in out
    assert "buffers (2 tensors)" in out


def test_a_rewrite_that_changes_only_a_buffer_fails(tmp_path: Path, capsys, monkeypatch):
    """feat_mean is updated in forward but read only in evaluation: a rewrite changing its
    update changed no output nor gradient, and PASSED before buffers were compared."""
    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        text, n = re.subn(r"feat_mean\.mul_\(0\.9\)\.add_\(0\.1 \*", "feat_mean.mul_(0.9).add_(0.2 *", result.output.decode())
        if n:
            result.output = text.encode()
        return result

    folder = write(tmp_path / "x" / "hiera", _running_stats_fork())
    monkeypatch.setattr(files, "rewrite_bytes", wrong)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    failing = [line for line in out.splitlines() if "buffers (2 tensors)" in line and "FAIL: feat_mean" in line]
    assert failing, out
    assert not [line for line in out.splitlines() if " out" in line and "FAIL" in line], out
    assert "verify: FAILED" in out


def test_a_rewrite_mixing_up_the_rows_masks_fails_on_a_two_unit_grid(tmp_path: Path, capsys, monkeypatch):
    """A 1-D fork has 2 mask units at verify's size: get_random_mask(x, 0.5) under seed 2
    kept the same unit in both rows, so a static token drop that used row 0's mask for
    every row PASSED.  The mask is now drawn under the first seed whose rows differ."""
    from tests.test_verify_layouts import SEQUENCE_1D

    real = files.rewrite_bytes

    def wrong(data, **kwargs):
        result = real(data, **kwargs)
        text, n = re.subn(r"kept = mask\.logical_not\(\)", r"kept = mask[:1].expand_as(mask).logical_not()", result.output.decode())
        if n:
            result.output = text.encode()
        return result

    folder = write(tmp_path / "x" / "hiera", classifier_fork(SEQUENCE_1D))
    monkeypatch.setattr(files, "rewrite_bytes", wrong)
    code, out, err = verify(folder, capsys)
    assert code == EXIT_VERIFY_FAILED, out + err
    failing = [line for line in out.splitlines() if "random_mask_ratio)" in line and "FAIL" in line]
    assert failing, out
    assert "verify: FAILED" in out


def test_python_float_outputs_are_compared_like_tensors():
    """A fork returning a metric as loss.item(): the rewrite may round its last bit
    differently (as it does for tensors); compared with ==, a correct rewrite FAILED."""
    rows = _rows([("out[1]", 0.1 + 0.2), ("out[2]", float("nan"))], [("out[1]", 0.3), ("out[2]", float("nan"))])
    assert rows[0]["ok"] and rows[1]["ok"], rows
    assert rows[0]["rel"] < 1e-15
    rows = _rows([("out[1]", 0.3)], [("out[1]", 0.3 + 1e-6)])
    assert not rows[0]["ok"] and "0.3 vs 0.300000" in rows[0]["note"]
    rows = _rows([("out[1]", 3)], [("out[1]", 4)])  # ints stay exact
    assert not rows[0]["ok"]


def test_a_forward_writing_into_its_argument_gets_a_fresh_copy_each_run(tmp_path: Path, capsys):
    """forward(x, valid_mask) flips its mask in place: every run shared one tensor, so the
    run that chose it, each case and the rewritten side saw a flipped mask in turn (FAIL
    on a correct rewrite)."""
    forward_head = "        mask: torch.Tensor = None,\n        return_intermediates: bool = False,\n    ) -> torch.Tensor:"
    edits = [
        (forward_head, "        valid_mask: torch.Tensor,\n" + forward_head),
        (
            "        x = x + self.get_pos_embed()\n",
            "        x = x + self.get_pos_embed()\n"
            "        pad = valid_mask.logical_not_()  # the attention's convention: True where padded\n"
            "        x = x.masked_fill(pad[..., None], 0.0)\n",
        ),
    ]
    folder = write(tmp_path / "x" / "hiera", classifier_fork(edits=edits))
    out = assert_all_proven(folder, capsys)
    assert "forward(x, valid_mask)" in out
