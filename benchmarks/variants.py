#!/usr/bin/env python3
"""Candidate changes to the emitted code, applied to hiera-rewrite's output at run time
so they can be measured before a codemod emits them (issue 15; benchmarks/NOTES.md).

Each edit replaces one exact piece of today's emitted (or kept upstream) code; an edit
whose text is not found fails loudly (the codemods changed: update the edit).  Nothing
here is committed source of upstream Hiera: the files are rewritten in a temp folder.

* ``unbind``: ``q, k, v = qkv[0], qkv[1], qkv[2]`` -> ``qkv.unbind(0)``.  Backward:
  one ``stack`` instead of three ``select_backward`` (each a zero-filled qkv-sized
  tensor and a copy) and two qkv-sized adds.
* ``index_select``: the encoder's token drop and the loss's ``pred`` selection select
  rows of the flattened tensor with ``index_select`` on flat row indices instead of
  ``gather``: ``gather`` saves its whole input for the backward, ``index_select``
  only the index.
* ``sortdesc``: ``mask.logical_not().byte().argsort(dim=1, stable=True)`` ->
  ``mask.byte().argsort(dim=1, descending=True, stable=True)`` (the same indices:
  a stable sort keeps equal keys in index order either way); one op less per site.
* ``all``: the three together.
* ``scatter``: the decoder fill as a per-row ``scatter`` instead of the emitted
  flat ``index_copy`` (issue 23).

    python benchmarks/variants.py all /tmp/variant        # write the three files
    python benchmarks/variants.py all --check             # float64 parity against FAIR on CPU
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Tuple

Edit = Tuple[str, str, str, int]  # file, old, new, expected count

# HR001 emits `q, k, v = qkv.unbind(0)` itself now (where no in-place op can reach q, k, v):
# the edit checks that the rewritten file has it and changes nothing.
_UNBIND: List[Edit] = [
    ("hiera.py", "q, k, v = qkv[0], qkv[1], qkv[2]", "q, k, v = qkv.unbind(0)", 0),
    ("hiera.py", "q, k, v = qkv.unbind(0)", "q, k, v = qkv.unbind(0)", 1),
]

_ENCODER_GATHER_OLD = """\
                x = (
                    x.view(x.shape[0], -1, mask.shape[-1], x.shape[-1])
                    .gather(
                        2,
                        kept_windows[:, None, :, None].expand(
                            -1, x.shape[1] // mask.shape[-1], -1, x.shape[-1]
                        ),
                    )
                    .view(x.shape[0], -1, x.shape[-1])
                )
"""
_ENCODER_GATHER_NEW = """\
                # rows of x.flatten(0, 1): batch b, in-window position t, kept window j
                kept_rows = (
                    kept_windows[:, None, :]
                    + torch.arange(0, x.shape[1], mask.shape[-1], device=x.device)[None, :, None]
                    + torch.arange(0, x.shape[0] * x.shape[1], x.shape[1], device=x.device)[:, None, None]
                )
                x = x.flatten(0, 1).index_select(0, kept_rows.flatten()).view(x.shape[0], -1, x.shape[-1])
"""
_PRED_GATHER_OLD = """\
            pred = pred.gather(
                1,
                masked_tokens.reshape(
                    masked_tokens.shape + (1,) * (pred.dim() - 2)
                ).expand(-1, -1, *pred.shape[2:]),
            ).flatten(0, 1)
"""
_PRED_GATHER_NEW = """\
            pred = pred.flatten(0, 1).index_select(
                0,
                (
                    masked_tokens
                    + torch.arange(0, pred.shape[0] * pred.shape[1], pred.shape[1], device=pred.device)[:, None]
                ).flatten(),
            )
"""
# HR003 and HR005 emit index_select themselves now (the label selections too): the
# gathers these edits replaced are gone (count 0: the edit checks that, changes nothing).
_INDEX_SELECT: List[Edit] = [
    ("hiera.py", _ENCODER_GATHER_OLD, _ENCODER_GATHER_NEW, 0),
    ("hiera_mae.py", _PRED_GATHER_OLD, _PRED_GATHER_NEW, 0),
    ("hiera_mae.py", ".gather(\n", ".gather(\n", 0),
]
_SORT_OLD = "mask.logical_not().byte().argsort(dim=1, stable=True)"
_SORT_NEW = "mask.byte().argsort(dim=1, descending=True, stable=True)"
_SORTDESC: List[Edit] = [("hiera.py", _SORT_OLD, _SORT_NEW, 1), ("hiera_mae.py", _SORT_OLD, _SORT_NEW, 0)]
# issue 23: the decoder fill as an index_copy of the flat kept units (emitted) against a
# scatter of each row's kept units along the unit axis (issue 23 asked to measure it; the
# scatter form is exact only where every row keeps as many units, as the model's own masks)
_FILL_OLD = "x_dec = x_dec.flatten(0, 1).index_copy(0, kept, x.flatten(0, 1)).view_as(x_dec)"
_FILL_NEW = (
    "x_dec = x_dec.scatter(1, (kept.view(x.shape[0], -1) % x_dec.shape[1])"
    ".reshape(x.shape[:2] + (1,) * (x.dim() - 2)).expand_as(x), x)"
)
_SCATTER: List[Edit] = [("hiera_mae.py", _FILL_OLD, _FILL_NEW, 1)]

VARIANTS: Dict[str, List[Edit]] = {
    "unbind": _UNBIND,
    "index_select": _INDEX_SELECT,
    "sortdesc": _SORTDESC,
    "all": _UNBIND + _INDEX_SELECT + _SORTDESC,
    "scatter": _SCATTER,
}
FILES = ("hiera.py", "hiera_mae.py", "hiera_utils.py")


def apply(name: str, sources: Dict[str, str]) -> Dict[str, str]:
    """The three rewritten files with variant ``name``'s edits applied."""
    out = dict(sources)
    for file, old, new, count in VARIANTS[name]:
        found = out[file].count(old)
        if found != count:
            raise SystemExit(f"variant {name}: expected {count} x {old.strip().splitlines()[0]!r} in {file}, "
                             f"found {found} (the emitted code changed: update benchmarks/variants.py)")
        out[file] = out[file].replace(old, new)
    return out


def write(name: str, src_dir: Path, dst_dir: Path) -> Path:
    """Read the rewritten files from ``src_dir``, write the variant's into ``dst_dir``."""
    sources = {f: (src_dir / f).read_text() for f in FILES}
    dst_dir.mkdir(parents=True, exist_ok=True)
    for f, text in apply(name, sources).items():
        (dst_dir / f).write_text(text)
    return dst_dir


def rewritten_sources() -> Dict[str, str]:
    """Today's hiera-rewrite output for the installed upstream files (needs libcst/black)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench

    engine = bench.import_rewrite_engine()
    src = bench.upstream_dir()
    return {f: engine.rewrite_bytes((src / f).read_bytes()).output.decode() for f in FILES}


def check(name: str) -> int:
    """float64 CPU check of the variant: bitwise equal to today's rewritten output (loss,
    pred, label, mask, every gradient) and within 1e-12 of FAIR, on MAE 2-D (q_pool
    1/2/3) and 3-D configurations with the model's own random mask."""
    import tempfile

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench
    import hiera

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="hiera_variant_"))
    base_src = rewritten_sources()
    pkgs = [hiera]
    for label, sources in (("rewritten", base_src), ("variant", apply(name, base_src))):
        folder = tmp / f"src_{label}"
        folder.mkdir()
        for f, text in sources.items():
            (folder / f).write_text(text)
        pkgs.append(bench.make_rewritten_package(tmp, name=f"hiera_{label}_check", pregenerated=folder)[0])
    micro = dict(embed_dim=16, num_heads=1, stages=(1, 2, 2, 1), decoder_embed_dim=32, decoder_depth=1,
                 decoder_num_heads=2)
    configs = [dict(micro, q_pool=q, in_chans=3, input_size=(64, 64)) for q in (1, 2, 3)]
    configs.append(dict(micro, q_pool=2, **{**bench._VIDEO, "input_size": (4, 64, 64)}))
    bad = 0
    for cfg in configs:
        torch.manual_seed(0)
        models = [pkg.MaskedAutoencoderHiera(**cfg).double() for pkg in pkgs]
        for m in models[1:]:
            m.load_state_dict(models[0].state_dict())
        x = torch.randn(3, cfg["in_chans"], *cfg["input_size"], dtype=torch.float64)
        runs = []
        for m in models:
            torch.manual_seed(1)
            out = m(x, mask_ratio=0.6)
            out[0].backward()
            runs.append(([t.detach() for t in out], [p.grad for p in m.parameters()]))
        (of, gf), (orw, grw), (ov, gv) = runs
        bitwise = all(torch.equal(u, v) for u, v in zip(orw + grw, ov + gv))
        vs_fair = max(float((u - v).abs().max()) for u, v in zip(of + gf, ov + gv) if u.is_floating_point())
        ok = bitwise and vs_fair <= 1e-12 and all(u.shape == v.shape for u, v in zip(of, ov))
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} q_pool={cfg['q_pool']} input={cfg['input_size']}: outputs and gradients "
              f"bitwise equal to today's rewritten: {bitwise}; max |diff| to FAIR {vs_fair:.1e}")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variant", choices=sorted(VARIANTS))
    p.add_argument("out", nargs="?", type=Path, help="folder for the variant's hiera.py, hiera_mae.py, hiera_utils.py")
    p.add_argument("--check", action="store_true", help="float64 parity against FAIR on the CPU")
    args = p.parse_args(argv)
    if args.check:
        return check(args.variant)
    if not args.out:
        p.error("give an output folder or --check")
    args.out.mkdir(parents=True, exist_ok=True)
    for f, text in apply(args.variant, rewritten_sources()).items():
        (args.out / f).write_text(text)
    print(f"wrote variant {args.variant} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
