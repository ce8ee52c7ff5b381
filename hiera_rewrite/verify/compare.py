"""One case run and compared (worker side): every tensor leaf of what ``forward``
returns (tuples, lists, dicts, dataclass fields, nested; by name), every parameter
gradient and the gradient of every floating input after a backward of a fixed weighted
sum of the outputs, and every buffer after the case (running statistics)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from .inputs import fed



RNG_STATE = "<the random number generators>"  # a key of run_case's buffers, never a module's

class Comparison:
    """Runs a case and compares two runs (a mixin of the worker)."""

    @staticmethod
    def _flatten(value, prefix="out"):
        if isinstance(value, (tuple, list)):
            out = []
            for i, v in enumerate(value):
                out.extend(Comparison._flatten(v, f"{prefix}[{i}]"))
            return out
        if isinstance(value, dict):
            out = []
            for k in sorted(value, key=str):
                out.extend(Comparison._flatten(value[k], f"{prefix}[{k!r}]"))
            return out
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            # a fork's output record (@dataclass class Output: logits, features): its fields
            out = []
            for field in dataclasses.fields(value):
                out.extend(Comparison._flatten(getattr(value, field.name), f"{prefix}.{field.name}"))
            return out
        return [(prefix, value)]

    def run_case(self, model, x, kw, torch, train: bool = True, input_grads: bool = True):
        """One case: (outputs, parameter gradients, buffers, input gradients).  ``train``
        False runs it in eval mode (each module's own mode is restored afterwards);
        ``input_grads``: the floating inputs (``x`` and floating arguments) require grad,
        and their gradients are returned (an error on a path without parameters, a
        residual or a pooled skip, shows only there)."""
        model.zero_grad(set_to_none=True)
        kw = self._made(model, x, kw, torch)
        inputs = {}
        x_in = x.clone()
        if input_grads:
            # leaves of our own; the model gets a copy (non-leaf: in-place writes stay legal)
            if x.is_floating_point():
                inputs["x"] = x.detach().clone().requires_grad_(True)
                x_in = inputs["x"].clone()
            for key, value in list(kw.items()):
                if torch.is_tensor(value) and value.is_floating_point():
                    inputs[key] = value.detach().clone().requires_grad_(True)
                    kw[key] = inputs[key].clone()
        modes = None
        if not train:
            modes = [(m, m.training) for m in model.modules()]
            model.eval()
        try:
            torch.manual_seed(1)
            leaves = self._flatten(model(fed(model, x_in), **kw))
            loss = None
            for _, leaf in leaves:
                if torch.is_tensor(leaf) and leaf.is_floating_point() and leaf.requires_grad:
                    w = torch.linspace(0.5, 1.5, leaf.numel(), dtype=leaf.dtype, device=leaf.device).view(leaf.shape)
                    term = (leaf * w).sum()
                    loss = term if loss is None else loss + term
            if loss is not None:
                loss.backward()
        finally:
            for module, mode in modes or ():
                module.training = mode
        outs = [(name, leaf.detach().clone() if torch.is_tensor(leaf) else leaf) for name, leaf in leaves]
        grads = {name: (p.grad.detach().clone() if p.grad is not None else None) for name, p in model.named_parameters()}
        buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
        # where the generators stand after the step: an extra or a missing draw changes
        # every later step's masks (compared apart from the buffers, see compare())
        buffers[RNG_STATE] = torch.random.get_rng_state()
        if x.is_cuda:
            buffers[RNG_STATE] = torch.cat([buffers[RNG_STATE], torch.cuda.get_rng_state(x.device)])
        input_grads_out = {name: (leaf.grad.detach().clone() if leaf.grad is not None else None) for name, leaf in inputs.items()}
        model.zero_grad(set_to_none=True)
        return outs, grads, buffers, input_grads_out

    @staticmethod
    def _errs(a, b, torch) -> Tuple[float, float]:
        """(max abs error, that over the largest finite |a|).  Non-finite values must be
        the same on both sides (NaN where NaN, the same infinity), else the error is inf;
        where they are, they count as equal and do not set the scale."""
        a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
        if a64.numel() == 0:
            return 0.0, 0.0
        finite_a, finite_b = torch.isfinite(a64), torch.isfinite(b64)
        if not (finite_a.all() and finite_b.all()):
            same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
            if not bool((same | (finite_a & finite_b)).all()):
                return float("inf"), float("inf")
            both = finite_a & finite_b
            a64, b64 = a64[both], b64[both]
            if a64.numel() == 0:
                return 0.0, 0.0
        abs_err = float((a64 - b64).abs().max())
        scale = float(a64.abs().max())
        return abs_err, abs_err / max(scale, 1e-30)

    def compare(self, config, label, outs_a, grads_a, outs_b, grads_b, tol, torch, ref=None, buffers=None, inputs=None) -> List[Dict[str, Any]]:
        """Rows for one case.  ``ref``: the original's float64 (outputs, grads, buffers,
        input grads) for an accuracy comparison (lower precisions) instead of a direct one;
        ``buffers``: both sides' buffers after the case; ``inputs``: both sides' gradients
        of the inputs."""
        rows = []
        ref_outs = dict(ref[0]) if ref else {}
        if buffers is not None:
            rng = [side.get(RNG_STATE) for side in buffers]
            buffers = tuple({k: v for k, v in side.items() if k != RNG_STATE} for side in buffers)
            if rng[0] is not None and rng[1] is not None and not torch.equal(rng[0], rng[1]):
                rows.append({
                    "config": config, "case": label, "kind": "random numbers", "what": "generator state after the step",
                    "shape": "-", "ok": False,
                    "note": "the rewritten step draws other random numbers than the original (an extra or a missing draw changes every later step's masks)",
                })

        def judge(name, a, b, rel, reference) -> Tuple[bool, str, Optional[Tuple[float, float]]]:
            """(ok, why, (original's error, rewritten's error) vs the float64 reference;
            None for a direct comparison)."""
            if reference is None or not torch.is_tensor(reference) or reference.shape != a.shape:
                return rel <= tol, f"rel err {rel:.2e}", None
            e_orig = self._errs(reference, a, torch)[1]
            e_new = self._errs(reference, b, torch)[1]
            ok = e_new <= 2 * e_orig + tol
            return ok, f"error vs float64 {e_new:.2e}, original's {e_orig:.2e}", (e_orig, e_new)

        if len(outs_a) != len(outs_b):
            rows.append({"config": config, "case": label, "what": "outputs", "shape": f"{len(outs_a)} vs {len(outs_b)}", "ok": False, "note": "different number of outputs"})
            return rows
        for (name, a), (name_b, b) in zip(outs_a, outs_b):
            row = {"config": config, "case": label, "kind": "outputs", "what": name, "ok": True}
            if name != name_b:  # a key or field renamed: the caller's out["logits"] breaks
                row.update(shape="-", ok=False, note=f"the rewritten model returns {name_b} here")
            elif torch.is_tensor(a) and torch.is_tensor(b):
                row["shape"] = str(tuple(a.shape)).replace(" ", "")
                if a.shape != b.shape or a.dtype != b.dtype:
                    row.update(ok=False, note=f"{tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
                elif a.is_floating_point() or a.is_complex():
                    row["abs"], row["rel"] = self._errs(a, b, torch)
                    row["ok"], why, errs = judge(name, a, b, row["rel"], ref_outs.get(name) if ref else None)
                    if errs is not None:  # the parity table's errors vs float64
                        row["orig_err"], row["new_err"] = errs
                    if not row["ok"]:
                        row["note"] = why
                else:
                    row["abs"] = float((a.long() - b.long()).abs().max()) if a.numel() else 0.0
                    row["rel"] = None
                    row["ok"] = bool(torch.equal(a, b))
                    if not row["ok"]:
                        row["note"] = "values differ"
            else:
                row["shape"] = type(a).__name__
                if type(a) is float and type(b) is float:  # a metric's .item(): as a tensor
                    row["abs"], row["rel"] = self._errs(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64), torch)
                    row["ok"] = row["rel"] <= tol
                else:
                    row["ok"] = bool(a == b) if not (torch.is_tensor(a) or torch.is_tensor(b)) else False
                if not row["ok"]:
                    row["note"] = f"{a!r} vs {b!r}"[:80]
            rows.append(row)
        groups = [("grads", "params", grads_a, grads_b, ref[1] if ref else {})]
        if buffers is not None and (buffers[0] or buffers[1]):
            # running statistics and other state forward updates, after the case
            groups.append(("buffers", "tensors", buffers[0], buffers[1], ref[2] if ref else {}))
        if inputs is not None and any(g is not None for side in inputs for g in side.values()):
            # dx: the gradient reaching the caller (a component's skip path has no parameter)
            groups.append(("input grads", None, inputs[0], inputs[1], ref[3] if ref and len(ref) > 3 else {}))
        for kind, unit, items_a, items_b, refs in groups:
            worst = (0.0, 0.0, "")
            bad: List[str] = []
            count = 0
            vs_ref: List[Tuple[float, float, str]] = []  # (original's, rewritten's error vs float64, name)
            failing_errs: Dict[str, List[float]] = {}  # name -> [original's, rewritten's] where over the bar
            for name in [n for n in items_b if n not in items_a]:
                bad.append(f"{name}: only in the rewrite")
            # the group's largest value: a direct comparison's floor for a tensor whose own
            # values cancel to round-off (a conv bias before train-mode BatchNorm has an
            # exactly-zero gradient in exact arithmetic: ~1e-11 on both sides, relative error
            # ~1 against itself, yet round-off of the model's own gradients)
            floor = max(
                (float(g.detach().double().abs().nan_to_num(posinf=0.0, neginf=0.0).max())
                 for g in items_a.values() if torch.is_tensor(g) and g.is_floating_point() and g.numel()),
                default=0.0,
            )
            for name, ga in items_a.items():
                gb = items_b.get(name)
                if ga is None or gb is None:
                    if (ga is None) != (gb is None):
                        what = "buffer" if kind == "buffers" else "gradient"
                        bad.append(f"{name}: {what} {'only after' if ga is None else 'lost by'} the rewrite")
                    continue
                count += 1
                if ga.shape != gb.shape or ga.dtype != gb.dtype:
                    bad.append(f"{name}: {tuple(ga.shape)} {ga.dtype} vs {tuple(gb.shape)} {gb.dtype}")
                    continue
                if not (ga.is_floating_point() or ga.is_complex()):
                    if not torch.equal(ga, gb):
                        bad.append(f"{name}: values differ")
                    continue
                abs_err, rel = self._errs(ga, gb, torch)
                ok, why, errs = judge(name, ga, gb, rel, refs.get(name) if ref else None)
                if not ok and errs is None and abs_err <= tol * floor:
                    ok, rel = True, abs_err / floor  # round-off of the group's scale: shown against it
                if errs is not None:
                    vs_ref.append((errs[0], errs[1], name))
                    if not ok:
                        failing_errs[name] = list(errs)
                if not ok:
                    bad.append(f"{name}: {why}")
                if rel >= worst[1]:
                    worst = (abs_err, rel, name)
            row = {
                "config": config,
                "case": label,
                "kind": kind,
                # the inputs by name: "input grads (x, padding_mask)"
                "what": f"{kind} ({', '.join(items_a) if kind == 'input grads' else f'{count} {unit}'})",
                "shape": f"worst: {worst[2]}" if worst[2] else "-",
                "abs": worst[0] if count else None,
                "rel": worst[1] if count else None,
                "ok": not bad,
                "note": "; ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""),
                "failing": [b.split(": ", 1)[0] for b in bad],  # the tensors by name (the parity table's)
                "failing_errs": failing_errs,
            }
            if vs_ref:  # each side's worst error vs float64 (not always the same tensor)
                row["orig_err"] = max(e[0] for e in vs_ref)
                row["new_err"], _, row["new_worst"] = max(vs_ref, key=lambda e: (e[1], e[0]))
            rows.append(row)
        return rows
