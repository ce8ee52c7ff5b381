"""Names the mask rewrites emit into a method, bound by that method itself (hunt 13, R2).

The emitted calls (`kept_tokens(...)`, `masked_rows(...)`, `true_rows(...)`,
`type(random_mask_ratio) in (int, float)`, `math.prod(...)`) look their names up as
globals or builtins.  A fork's method binding one of them anywhere (`kept_tokens =
x.shape[1]` after the drop) makes it local to the whole method: the rewrite raised
`UnboundLocalError` or `TypeError` where the original ran (ed2ab72 checked the module's
top level only).  Such a site keeps its original statement, with the name in the report;
the same edit with another local name is still rewritten (the check is not a refusal of
every edit there)."""

import pytest

from hiera_rewrite.engine import rewrite_bytes
from tests.upstream import edited_site_report, read_upstream_module, upstream_dir

DROP = "        # Discard masked tokens\n"
AFTER_DROP = "        for i, blk in enumerate(self.blocks):\n"
LOSS_SELECT = "        pred = pred[mask]\n"
FILL = "        x_dec[mask] = x.flatten()\n"
FORWARD_RETURN = "        return *self.forward_loss(x, pred, ~pred_mask), mask\n"


_read = read_upstream_module
_report = edited_site_report


# id: (file, code, anchor of the site, lines below it, edits (each with {name}), name)
CASES = {
    "kept_tokens in Hiera.forward": (
        "hiera.py", "HR003", DROP, 2,
        [(AFTER_DROP, "        {name} = x.shape[1]  # visible tokens per image\n        self.last_kept = {name}\n" + AFTER_DROP)],
        "kept_tokens",
    ),
    "type in Hiera.forward": (
        "hiera.py", "HR003", DROP, 2,
        [(AFTER_DROP, "        {name} = x.dtype\n        self.last_dtype = {name}\n" + AFTER_DROP)],
        "type",
    ),
    "int in Hiera.forward": (
        "hiera.py", "HR003", DROP, 2,
        [(AFTER_DROP, "        for {name} in self.blocks[:0]:\n            pass\n" + AFTER_DROP)],
        "int",
    ),
    "masked_rows in forward_loss": (
        "hiera_mae.py", "HR005", LOSS_SELECT, 0,
        [(LOSS_SELECT, "        {name} = int(mask.sum())\n        self.last_masked = {name}\n" + LOSS_SELECT)],
        "masked_rows",
    ),
    "true_rows in forward_decoder": (
        "hiera_mae.py", "HR004", FILL, 0,
        [(FILL, FILL + "        {name} = mask.sum()\n        self.last_rows = {name}\n")],
        "true_rows",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_local_binding_of_an_emitted_name_keeps_the_original_statement(case):
    file, code, anchor, offset, edits, name = CASES[case]
    report = _report(file, code, anchor, offset, [(old, new.format(name=name)) for old, new in edits])
    assert not report.applied and f"needs the name {name}," in report.message, report
    other = _report(file, code, anchor, offset, [(old, new.format(name="fork_" + name)) for old, new in edits])
    assert other.applied, other


def test_a_local_math_keeps_the_loss_without_a_count():
    """MAE.forward's emitted count reads `math.prod`: a local `math` there (a fork's
    `import numpy as math`, say) keeps the original call, without the count."""
    text = (upstream_dir() / "hiera_mae.py").read_text()
    # (before the decoder: between it and the loss, any import keeps the count back anyway)
    decoder = "        pred, pred_mask = self.forward_decoder(\n"
    assert text.count(decoder) == 1
    edited = text.replace(decoder, "        import numpy as math\n\n" + decoder)
    result = rewrite_bytes(edited.encode(), siblings=_read)
    assert any("needs the name math," in r.message for r in result.reports if not r.applied), result.reports
    assert "        return *self.forward_loss(x, pred, ~pred_mask), mask\n" in result.output.decode()


def test_a_local_binding_of_a_name_the_copied_kept_count_reads_keeps_the_original_statement():
    """A fork's get_random_mask keeps `round(...)` units; the rewrite copies that formula
    into Hiera.forward, where a local `round` would be another function (hunt 14a)."""
    keep = ("        len_keep = int(num_windows * (1 - mask_ratio))\n", "        len_keep = round(num_windows * (1 - mask_ratio))\n")

    def report(name):
        local = (AFTER_DROP, f"        {name} = 2  # digits of the logged values\n        self.log_digits = {name}\n" + AFTER_DROP)
        return _report("hiera.py", "HR003", DROP, 2, [keep, local])

    shadowed = report("round")
    assert not shadowed.applied and "kept count reads round, which forward binds itself" in shadowed.message, shadowed
    assert report("digits").applied
