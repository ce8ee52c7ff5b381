"""What may hold the mask, for the stores and packs that stop HR003's count proof
(`codemods._mask.stored_or_packed`, hunt 10).

A call given the mask may return it, so its result is taken to hold it -- unless every
function the call runs is the files' own (a method, a submodule's forward, a module
function, here or beside the file) and none returns, yields or stores what may hold the
parameter.  Without that, `x = self.patch_embed(x, mask=...)` made every later `x` a
holder of the mask, and real forks lost the fast path for packing `x` after the drop
(`torch.cat([cls_tokens, x])`, `result["tokens"] = x`)."""

from pathlib import Path
from typing import Optional

import pytest

from hiera_rewrite.engine import rewrite_bytes
from tests.upstream import upstream_dir

DROP = "        # Discard masked tokens\n"
AFTER_DROP = "        for i, blk in enumerate(self.blocks):\n"
GET_POS_EMBED = "    def get_pos_embed(self) -> torch.Tensor:\n"
POS_EMBED_ADD = "        x = x + self.get_pos_embed()\n"
PATCH_EMBED_RETURN = "        x = x.reshape(x.shape[0], x.shape[1], -1).transpose(2, 1)\n        return x\n"


def _read(name: str) -> Optional[bytes]:
    path = upstream_dir() / (name.lstrip(".") + ".py")
    return path.read_bytes() if path.is_file() else None


def _drop_report(*edits):
    text = (upstream_dir() / "hiera.py").read_text()
    for anchor, new in edits:
        assert text.count(anchor) == 1, anchor
        text = text.replace(anchor, new)
    result = rewrite_bytes(text.encode(), siblings=_read)
    line = text.splitlines().index("        # Discard masked tokens") + 3
    return next(r for r in result.reports if r.code == "HR003" and r.line == line)


KEPT = {
    "cls token concatenated after the drop": (
        (AFTER_DROP, "        x = torch.cat([self.pos_embed[:, :1].expand(x.shape[0], -1, -1), x], dim=1)[:, 1:]\n" + AFTER_DROP),
    ),
    "tokens stored in a dict after the drop": (
        (AFTER_DROP, "        result = {}\n        result[\"tokens\"] = x\n" + AFTER_DROP),
    ),
    # the files' own patch_embed, given the mask, returns a new tensor: writing it is not
    # writing the mask (lynu1818/improve_mae writes `x += pos_embed` there)
    "x written in place after patch_embed given the mask": (
        (POS_EMBED_ADD, "        x += self.get_pos_embed()\n"),
    ),
}
REFUSED = {
    "a method returning the mask, stored": (
        (GET_POS_EMBED, "    def keep(self, m):\n        return m\n\n" + GET_POS_EMBED),
        (DROP, "        if mask is not None:\n            self.shown = self.keep(mask)\n" + DROP),
        "mask is stored by `self.shown = ...`",
    ),
    "a method storing the mask it is given": (
        (GET_POS_EMBED, "    def remember(self, m):\n        self.shown = m[:, :]\n        return 0\n\n" + GET_POS_EMBED),
        (DROP, "        if mask is not None:\n            n = self.remember(mask)\n" + DROP),
        "",
    ),
    "a method returning the mask, written in place": (
        (GET_POS_EMBED, "    def keep(self, m):\n        return m\n\n" + GET_POS_EMBED),
        (DROP, "        if mask is not None:\n            k = self.keep(mask)\n            k[:, 0] = True\n" + DROP),
        "mask is passed to `self.keep(mask)`",  # a method: not followed (the emitted code does not check it)
    ),
    "patch_embed returning the mask it is given, written in place": (
        (PATCH_EMBED_RETURN, PATCH_EMBED_RETURN.replace("return x", "return x if mask is None else mask")),
        (POS_EMBED_ADD, "        x += self.get_pos_embed()\n"),
        "",
    ),
    "torch's view of the mask, packed": (
        (DROP, "        if mask is not None:\n            self.history = [torch.flatten(mask)]\n" + DROP),
        "",
    ),
}


@pytest.mark.parametrize("case", sorted(KEPT))
def test_packing_what_the_files_own_calls_return_keeps_the_fast_path(case):
    report = _drop_report(*KEPT[case])
    assert report.applied, report.message


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_may_hold_the_mask_stored_keeps_the_original_statement(case):
    *edits, reason = REFUSED[case]
    report = _drop_report(*edits)
    assert not report.applied
    assert reason in report.message, report.message
