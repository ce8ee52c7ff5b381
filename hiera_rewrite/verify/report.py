"""``--verify``'s report: one table per model, the site table and the verdict.

A site is *exercised* when a compared case ran each of its required regions on both
sides (:mod:`.sites`); PASS needs every site exercised and every comparison equal.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Set, Tuple

from .sites import ran, regions_run

# A group's verdict, one word each: the report's last line and the summary say the same.
PASSED, NOT_PROVEN, FAILED = "PASSED", "NOT PROVEN", "FAILED"

def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2e}"


def _table(rows: List[Tuple[str, ...]], out, indent: str = "  ") -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1], file=out)


def site_verdicts(report: Dict[str, Any], sites: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per site: the cases that ran it on both sides, whether all its regions ran,
    and whether those cases' comparisons passed."""
    case_ok: Dict[Tuple[str, str], bool] = {}
    for model in report.get("models", []):
        for row in model.get("rows", []):
            key = (model["label"], "build" if row["case"] == "state_dict" else row["case"])
            case_ok[key] = case_ok.get(key, True) and row["ok"]
    verdicts = []
    compared = [cov for cov in report.get("coverage", []) if (cov["model"], cov["case"]) in case_ok]
    for site in sites:
        # a helper function the rewrite adds beside a site's other changes (forward.leaves_mask
        # beside the token drop) that no compared case calls is not required; where the
        # helper is all the site changes (get_random_mask.num_kept) it stays required
        if any(not r.get("helper") and (r["orig_stmts"] or r["new_stmts"]) for r in site["regions"]):
            site = dict(site, regions=[
                r for r in site["regions"]
                if not r.get("helper") or any(ran(r["new_stmts"], set(cov["new"].get(site["path"], ()))) for cov in compared)
            ])
        required = [r for r in site["regions"] if r["orig_stmts"] or r["new_stmts"]]
        seen = [False] * len(required)
        cases: List[Tuple[str, str]] = []
        new_lines: Set[int] = set()
        for cov in report.get("coverage", []):
            key = (cov["model"], cov["case"])
            if key not in case_ok:  # not compared (the rewritten side failed to build)
                continue
            orig = set(cov["orig"].get(site["path"], ()))
            new = set(cov["new"].get(site["path"], ()))
            hits = regions_run(site, orig, new)
            if any(hits):
                cases.append(key)
                seen = [a or b for a, b in zip(seen, hits)]
                new_lines |= new
        stmts = sorted({s for r in required for s in r["new_stmts"]})
        run_stmts = sum(1 for lo, hi in stmts if any(line in new_lines for line in range(lo, hi + 1)))
        # the mode that proved it: train-mode cases alone, else eval-mode ones alone, else both
        modes = "-"
        if bool(required) and all(seen):
            by_mode = {}
            for mode in ("train", "eval"):
                mode_seen = [False] * len(required)
                for cov in report.get("coverage", []):
                    key = (cov["model"], cov["case"])
                    if key in cases and (key[1].startswith("eval ") == (mode == "eval")):
                        hits = regions_run(site, set(cov["orig"].get(site["path"], ())), set(cov["new"].get(site["path"], ())))
                        mode_seen = [a or b for a, b in zip(mode_seen, hits)]
                by_mode[mode] = all(mode_seen)
            modes = "train" if by_mode["train"] else "eval" if by_mode["eval"] else "train+eval"
        verdicts.append(
            {
                "site": site,
                "unreachable": None if bool(required) and all(seen) else _dead(site) or (None if cases else _unreachable(site, report)),
                "mode": modes,
                "cases": cases,
                "exercised": bool(required) and all(seen),
                "definition_only": not required,
                "ok": all(case_ok[c] for c in cases),
                "stmts": (run_stmts, len(stmts)),
            }
        )
    return verdicts


def _dead(site: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A site in a function a later def of the same name replaces (:func:`.sites._shadowed`):
    no call of the original or the rewritten file can run it."""
    line = site.get("shadowed")
    if not line:
        return None
    name = site["owner"].rsplit(".", 1)[-1]
    return {"what": f"the later def {name} replaces it", "where": f"{site['path']}:{line}", "dead": True}


def _unreachable(site: Dict[str, Any], report: Dict[str, Any]) -> Optional[Dict[str, str]]:
    """Where the original itself cannot run the path to a site: a model of the site's class
    (or of a subclass, or holding it as a part) raised at the same statement of the files in
    every way it was built.  ``{"where", "what"}`` or None."""
    owner = site.get("owner_class")
    if not owner:
        return None
    contains = report.get("contains", {})
    for failure in report.get("failures", []):
        if failure.get("unreachable") and (owner in failure.get("classes", ()) or owner in contains.get(failure.get("class"), ())):
            return failure["unreachable"]
    return None


def _hint(site: Dict[str, Any], report: Dict[str, Any]) -> str:
    """Why no case reached the site, and the flag that would."""
    owner_class = site.get("owner_class")
    module = site.get("module") or "MODULE"
    if not owner_class:
        calls = [f for f in report.get("failures", []) if f.get("function") == site["owner"]]
        reason = "; ".join(f"{f['label']}: {f['error']}" for f in calls[:1])
        missing = [f.get("missing") for f in calls if f.get("missing")]
        factory = f"name a model that calls {site['owner']} with --factory MODULE:FUNC[:JSON]"
        if missing:
            return f"{reason}; give the missing argument: --kwargs '{json.dumps({m: '...' for m in missing[0]})}' (given to every call that takes it) if it is a value, or {factory}"
        return (f"{reason}; " if reason else "") + f"no model built here calls {site['owner']}; {factory}"
    unimported = [i for i in report.get("imports", []) if i["module"] == site.get("module")]
    if unimported:
        return f"cannot import {unimported[0]['module']}: {unimported[0]['error']}"
    contains = report.get("contains", {})
    # the class's own builds (first: the innermost) and those of the models that would hold it
    why = [f for f in report.get("failures", []) if f.get("class") == owner_class or owner_class in contains.get(f.get("class"), ())]
    why.sort(key=lambda f: f.get("class") != owner_class)
    reason = "; ".join(f"{f['label']}: {f['error']}" for f in why[:2])
    missing = [f.get("missing") for f in why if f.get("missing")]
    large = next((f for f in why if f.get("too_large")), None)
    if large is not None:  # its error names the flags that build it smaller
        return f"{large['label']}: {large['error']}"
    flag = next((f["flag"] for f in why if f.get("flag")), None)
    if missing:
        text = f"give the missing argument: --kwargs '{json.dumps({m: '...' for m in missing[0]})}' (given to every build that takes it)"
    elif flag:  # the build that was tried, to give with the values the original runs with
        text = f"reach it with {flag}, changing what the original raised at (or a factory of a model holding it; --input-shape B,C,... for the input)"
    else:
        text = f"reach it with --factory {module}:{owner_class}:'{{...}}' (or a factory of a model holding it), --kwargs JSON or --input-shape B,C,..."
    return (f"{reason}; " if reason else "") + text


def _ratio(orig: Optional[float], new: Optional[float]) -> Optional[float]:
    if orig is None or new is None:
        return None
    if orig == 0:
        return 1.0 if new == 0 else float("inf")
    return new / orig


def parity_rows(report: Dict[str, Any], verdicts: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per model x case x configuration (dtype and device): each side's worst
    output error and worst parameter-gradient error against the original's float64
    result on the same device (a float64 row is that reference: the rewritten's direct
    error), the ratio new/orig of the worst errors (the larger of the two), ok or the
    failing tensors (and the sites the case ran); a configuration the original could not
    run in is a row 'not run'."""
    out: List[Dict[str, Any]] = []
    for model in report.get("models", []):
        label = model["label"] if model.get("component") else model["label"].split(" ")[0]
        by_key: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
        for row in model.get("rows", []):
            if row["case"] == "state_dict":
                continue
            by_key.setdefault((row["config"], row["case"]), []).append(row)
        configs = list(model.get("configs") or [])
        cases = list(dict.fromkeys(case for _, case in by_key))
        # each case in every configuration, the reference first
        order = sorted(by_key, key=lambda k: (cases.index(k[1]), configs.index(k[0]) if k[0] in configs else len(configs)))
        for config, case in order:
            rows = by_key[(config, case)]
            # float64 (on CPU, and on CUDA with --verify-cuda): compared directly, the reference of the rest
            entry: Dict[str, Any] = {"model": label, "case": case, "config": config, "reference": config.split(" ")[0] == "float64"}
            for kind, key in (("outputs", "out"), ("grads", "grad")):
                mine = [r for r in rows if r.get("kind") == kind]
                if entry["reference"]:  # direct: the rewritten's error is its difference from the original
                    errs = [r["rel"] for r in mine if r.get("rel") is not None]
                    entry[f"{key}_orig"], entry[f"{key}_new"] = (0.0, max(errs)) if errs else (None, None)
                else:
                    pairs = [(r["orig_err"], r["new_err"]) for r in mine if "orig_err" in r]
                    entry[f"{key}_orig"] = max(p[0] for p in pairs) if pairs else None
                    entry[f"{key}_new"] = max(p[1] for p in pairs) if pairs else None
            if not entry["reference"]:
                ratios = [r for r in (_ratio(entry["out_orig"], entry["out_new"]), _ratio(entry["grad_orig"], entry["grad_new"])) if r is not None]
                entry["ratio"] = max(ratios) if ratios else None
            failing = [r for r in rows if not r["ok"]]
            entry["ok"] = not failing
            entry["precision"] = any(r.get("precision") for r in rows)
            if failing:
                what = []

                def named(name: str, errs) -> str:  # a tensor, with both errors where judged vs float64
                    return f"{name} ({_fmt(errs[1])}, original's {_fmt(errs[0])})" if errs else name

                for r in failing:
                    names = r.get("failing")
                    if r.get("kind") == "outputs":
                        what.append(named(r["what"], (r["orig_err"], r["new_err"]) if "orig_err" in r else None))
                    elif r.get("kind") is None or not names:  # the run itself, or a count that differs
                        what.append(f"{r['what']}: {r.get('note', '')}")
                    else:  # "grads blocks.0.attn.qkv.weight (6.03e-02, original's 1.36e-02), ... (+7 more)"
                        errs = r.get("failing_errs") or {}
                        what.append(f"{r['kind']} {', '.join(named(n, errs.get(n)) for n in names[:3])}" + (f" (+{len(names) - 3} more)" if len(names) > 3 else ""))
                sites = [f"{v['site']['path']}:{v['site']['line']} {v['site']['code']}" for v in verdicts if (model["label"], case) in v["cases"]]
                entry["note"] = "; ".join(what) + (f" (sites this case ran: {', '.join(sites)})" if sites else "")
            out.append(entry)
        for config, why in (model.get("not_run") or {}).items():
            out.append({"model": label, "case": "-", "config": config, "reference": False, "not_run": why, "ok": True})
    return out


def print_parity(rows: List[Dict[str, Any]], out) -> None:
    from .runner import ULPS  # noqa: PLC0415 -- the bar, stated where it is used

    print(f"parity (error vs the original's float64 result on the same device, max|err| / max|reference|; a lower precision passes when new <= 2 x orig + {ULPS} eps of its dtype)", file=out)
    table = [("model", "case", "config", "out orig", "out new", "grad orig", "grad new", "new/orig", "result")]
    for r in rows:
        if r.get("not_run"):
            table.append((r["model"], r["case"], r["config"], "-", "-", "-", "-", "-", f"not run: {r['not_run']}"))
            continue
        orig = lambda v: "ref" if r["reference"] and v is not None else _fmt(v)  # noqa: E731
        ratio = r.get("ratio")
        table.append(
            (
                r["model"],
                r["case"],
                r["config"],
                orig(r["out_orig"]),
                _fmt(r["out_new"]),
                orig(r["grad_orig"]),
                _fmt(r["grad_new"]),
                "-" if ratio is None else "inf" if ratio == float("inf") else f"{ratio:.2f}",
                ("ok (fused kernel's precision)" if r.get("precision") else "ok") if r["ok"] else f"FAILED: {r['note']}",
            )
        )
    _table(table, out)


def graph_line(graph: Dict[str, Any]) -> str:
    """The fullgraph report of one model (a report, not part of the verdict)."""
    if graph.get("skipped"):
        return f"torch.compile(fullgraph=True): not traced ({graph['skipped']})"
    new = graph.get("new")
    if new is None:
        return "torch.compile(fullgraph=True): compiles fullgraph"
    if graph.get("untraced"):
        return f"torch.compile(fullgraph=True): {new['reason']}"
    at = f"breaks at {new['where']}" if new.get("where") else "breaks"
    orig = graph.get("orig")
    if orig is None:
        also = "the original does not break there (it compiles fullgraph)"
    elif orig.get("where") == new.get("where"):
        also = "the original breaks at the same statement"
    else:
        also = f"the original breaks at {orig.get('where') or 'another place'}"
    return f"torch.compile(fullgraph=True): {at}: {new['reason']} ({also})"


def print_report(report: Dict[str, Any], sites: List[Dict[str, Any]], out) -> str:
    """Print the report; return the verdict: PASSED, NOT_PROVEN or FAILED (a comparison differs)."""
    ok = True
    for problem in report.get("errors", []):
        print(f"  FAILED: {problem}", file=out)
        ok = False
    for model in report.get("models", []):
        head = f"model {model['label']}"
        if model.get("input"):
            head += f"  input {tuple(model['input'])}"
        print(head, file=out)
        for note in model.get("notes", []):
            print(f"  {note}", file=out)
        if model.get("error"):
            print(f"  FAILED: {model['error']}", file=out)
            ok = False
            continue
        rows = [("config", "case", "compared", "shape", "max abs err", "max rel err", "result")]
        for row in model["rows"]:
            rows.append(
                (
                    row["config"],
                    row["case"],
                    row["what"],
                    row["shape"],
                    _fmt(row.get("abs")),
                    _fmt(row.get("rel")),
                    ("pass (fused kernel's precision)" if row.get("precision") else "pass") if row["ok"] else "FAIL" + (f": {row['note']}" if row.get("note") else ""),
                )
            )
        _table(rows, out)
        for row in model["rows"]:
            if row.get("precision"):
                print(f"  {row['config']} {row['case']} {row['what']}: {row['precision']}", file=out)
        model_ok = all(row["ok"] for row in model["rows"]) and bool(model["rows"])
        ok = ok and model_ok
        print(f"  => {'PASS' if model_ok else 'FAIL'}  ({model.get('seconds', 0):.1f}s)", file=out)
        if "graph" in model:
            print(f"  {graph_line(model['graph'])}", file=out)
    verdicts = site_verdicts(report, sites)
    parity = parity_rows(report, verdicts)
    if any(not r["reference"] for r in parity):  # a lower precision was run (or could not be)
        print_parity(parity, out)
    for timing in report.get("timing", []):
        for line in timing["lines"]:
            print(line, file=out)
    for failure in report.get("failures", []):
        print(f"not built: {failure['label']}: {failure['error']}", file=out)
    for note in report.get("notes", []):
        print(f"  note: {note}", file=out)

    # a model by its factory or class; a component by its constructor call
    short = {m["label"]: m["label"] if m.get("component") else m["label"].split(" ")[0] for m in report.get("models", [])}
    unproven = [v for v in verdicts if not v["exercised"] and not v["definition_only"] and not v["unreachable"]]
    unreachable = [v for v in verdicts if not v["exercised"] and not v["definition_only"] and v["unreachable"]]
    if verdicts:
        print("sites", file=out)
        rows = [("site", "code", "in", "exercised by", "mode", "lines run", "result")]
        for v in verdicts:
            s = v["site"]
            cases = [f"{short[m]} {c}" for m, c in v["cases"]]
            by = cases[0] + (f" (+{len(cases) - 1})" if len(cases) > 1 else "") if cases else "-"
            if v["definition_only"]:
                result = "pass (definition only)" if v["ok"] else "FAIL"
            elif not v["exercised"] and v["unreachable"]:
                result = f"unreachable in the original: {v['unreachable']['what']} at {v['unreachable']['where']}"
            elif not v["exercised"]:
                result = "NOT PROVEN: " + ("only part of it ran" if cases else "no compared case ran it")
            else:
                result = "pass" if v["ok"] else "FAIL: a comparison of a case that ran it differs"
            ran, total = v["stmts"]
            rows.append((f"{s['path']}:{s['line']}", s["code"], s["owner"], by, v["mode"], f"{ran}/{total}", result))
        _table(rows, out)
        for v in unproven:
            s = v["site"]
            print(f"not proven: {s['path']}:{s['line']}:{s['col']} {s['code']} in {s['owner']}: {_hint(s, report)}", file=out)
        for v in unreachable:
            s, why = v["site"], v["unreachable"]
            tail = "(dead code: no call runs it)" if why.get("dead") else "in every build tried (no input the original accepts runs this site)"
            print(
                f"unreachable in the original: {s['path']}:{s['line']}:{s['col']} {s['code']} in {s['owner']}: "
                f"{why['what']} at {why['where']} {tail}",
                file=out,
            )
    failed_sites = [v for v in verdicts if v["exercised"] and not v["ok"]]
    if failed_sites:
        ok = False
    missing = sorted({i["error"] for i in report.get("imports", []) if i["missing"]})
    nothing_built = not report.get("models") and not report.get("errors") and not missing
    if nothing_built:  # not a mismatch either: the sites' messages say why
        print("  no model could be built; name one with --factory module:function", file=out)
    proven = sum(1 for v in verdicts if v["exercised"] or v["definition_only"])
    tally = f"{proven}/{len(verdicts)} sites exercised"
    if unreachable:
        tally += f", {len(unreachable)} unreachable in the original"
    if ok and not unproven and not nothing_built and (proven or not unreachable):
        precision = sorted({r["config"] for m in report.get("models", []) for r in m.get("rows", []) if r.get("precision")})
        if precision:  # equal with the math kernel on both sides; the fused kernel's rounding otherwise
            print(f"verify: {PASSED} ({tally}, every comparison equal; in {', '.join(precision)} within the fused attention kernel's precision)", file=out)
            return PASSED
        print(f"verify: {PASSED} ({tally}, every comparison equal)", file=out)
        return PASSED
    if ok and missing:  # not a mismatch: install what the files import, then verify again
        print(f"verify: {NOT_PROVEN} ({tally}; {'; '.join(missing)})", file=out)
    elif ok:
        why = f"{len(unproven)} never ran in a compared case" if unproven else "no model could be built" if nothing_built else "no site ran in the original"
        print(f"verify: {NOT_PROVEN} ({tally}; {why})", file=out)
    else:
        print(f"verify: {FAILED} ({tally})", file=out)
        return FAILED
    return NOT_PROVEN
