"""--verify in a lower precision: the fused attention kernel's precision told apart from a
wrong rewrite and from a fused kernel that misreads its inputs (hiera_rewrite/verify/kernels.py).

On CPU, PyTorch's flash kernel misreads a float32 mask given with float64 q (errors of
order one, issue 29 class 8); in bfloat16 it is within a few eps of float64."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from hiera_rewrite.verify.kernels import fused_calls, math_twin, worst_call  # noqa: E402
from hiera_rewrite.verify.worker import Worker  # noqa: E402


def _qkv(dtype):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, 64, 32, generator=g).to(dtype) for _ in range(3)]


def _mask(dtype):
    g = torch.Generator().manual_seed(1)
    keep = torch.rand(64, 64, generator=g) > 0.3
    if dtype is torch.bool:
        return keep
    return torch.randn(64, 64, generator=g).to(dtype).masked_fill(~keep, -1e4)


@pytest.mark.parametrize("q_dtype, mask_dtype, misread", [
    (torch.float64, torch.float32, True),  # the CPU flash kernel misreads it
    (torch.float64, torch.float64, False),
    (torch.bfloat16, torch.bfloat16, False),
    (torch.bfloat16, torch.bool, False),
])
def test_each_call_is_judged_against_float64(q_dtype, mask_dtype, misread):
    q, k, v = _qkv(q_dtype)
    calls = fused_calls(torch)
    with calls:
        F.scaled_dot_product_attention(q, k, v, attn_mask=_mask(mask_dtype))
        F.scaled_dot_product_attention(q, k, v)
    assert len(calls.calls) == 2
    bad = worst_call(calls.calls)
    if misread:
        assert bad is not None and bad["error"] > 0.1 and "float32" in bad["mask"]
    else:
        assert bad is None, calls.calls


class Attention(torch.nn.Module):
    """q, k, v from one linear; a float mask buffer in its own dtype."""

    def __init__(self, mask_dtype):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)
        self.mask_dtype = mask_dtype

    def forward(self, x):
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 16)).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=_mask(self.mask_dtype)[:16, :16])


CASE = "forward(x)"


def _judged(model_dtype, mask_dtype, twin_ok=True):
    """One failing row of a configuration in ``model_dtype`` whose math twin passes
    (or not), through Worker.judge_kernels: the row afterwards."""
    worker = Worker({"traced": {}, "quiet": True})
    model = Attention(mask_dtype)
    cname = f"{str(model_dtype)[6:]} cpu"
    configs = [("cpu", model_dtype, 1e-3, cname), ("cpu", model_dtype, 1e-3, math_twin(cname))]
    plan = {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "x": torch.randn(2, 16, 32, dtype=torch.float64),
        "runs": {(cname, CASE): ({}, {"train": True, "input_grads": True}, None)},
    }
    row = {"config": cname, "case": CASE, "kind": "outputs", "what": "out", "ok": False, "note": "error vs float64 3.0e-02, original's 4.0e-03"}
    twin = {"config": math_twin(cname), "case": CASE, "kind": "outputs", "what": "out", "ok": twin_ok}
    entry = {"label": "Attention", "rows": [row, twin]}
    worker.judge_kernels(entry, plan, model, configs, torch)
    return row


def test_a_row_within_the_kernels_precision_passes_with_its_reason():
    row = _judged(torch.bfloat16, torch.bfloat16)
    assert row["ok"], row
    assert "precision" in row["precision"] and "math kernel" in row["precision"]


def test_a_fused_kernel_misreading_a_call_fails_and_names_it():
    row = _judged(torch.float64, torch.float32)
    assert not row["ok"]
    assert "misreads an attention call" in row["note"] and "float32" in row["note"]


def test_a_row_whose_math_twin_fails_is_the_rewrite_and_stays_failed():
    row = _judged(torch.bfloat16, torch.bfloat16, twin_ok=False)
    assert not row["ok"] and "precision" not in row and "misreads" not in row["note"]
