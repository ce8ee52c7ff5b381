"""The ``--verify`` worker: a fresh subprocess that imports both sides and compares them.

Started by :mod:`.runner` (``runpy.run_module`` of this package's own copy, loaded by
path; it imports the standard library, torch and its sibling modules), with a JSON spec:
the two copies, the modules to scan, the files to trace and the sites to reach.

1. Original side: import the modules, find the top-level models and their factories
   (:mod:`.discovery`), build each small (:mod:`.arguments`), choose its input and cases
   (:mod:`.inputs`) and run every case under a line tracer limited to the rewritten
   files (:mod:`.tracing`).  The first variant of each top-level class is built;
   further variants only while a site is still unreached; then, while one is, each
   model's cases again in eval mode; then each model of a class again with one of its
   run-time switches on (``return_likelihoods=True``); then, for each site no model
   reached, the class holding it is built directly as a *component*, as the files
   construct it (and with its switched-off branches on) while its sites are unreached
   (train mode, then eval mode); then a module-level function holding one is called
   directly (:mod:`.functions`).
   Every case compares outputs, parameter gradients, buffers and the inputs' gradients.
2. Rewritten side: the modules are dropped from ``sys.modules``, the path swapped to
   the rewritten copy, and each plan built again under the same names with the same
   weights and inputs, traced the same way, and compared (:mod:`.compare`).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from .arguments import BRANCH_KNOBS, Building, MissingArgs, is_size, runtime_switches
from .budget import Budget, OverBudget, cap_memory, too_large
from .compare import Comparison
from .discovery import Discovery
from .functions import function_modes, function_owner
from .inputs import Inputs, fed, input_key
from .kernels import CALL_ULPS, fused_calls, is_math_twin, kernel_scope, math_twin, worst_call
from .tracing import Tracer


INSTALL_HINT = "pip install 'hiera-rewrite[verify]'"


_MAX_CANDIDATES = 12
# the fullgraph report (not part of the verdict): seconds per trace, and in all (a large
# model's dynamo trace can take minutes on CPU: the report is left out, the verdict is not)
GRAPH_SECONDS = 20.0
GRAPH_TOTAL_SECONDS = 40.0


class Worker(Discovery, Building, Inputs, Comparison):
    """One verification: both sides imported in turn, built, run, traced and compared."""

    def __init__(self, spec: Dict[str, Any]) -> None:
        self.spec = spec
        self.report: Dict[str, Any] = {"models": [], "errors": [], "notes": [], "failures": [], "coverage": [], "imports": []}
        self.t0 = time.time()
        traced: Dict[str, str] = {}
        for side_files in spec["traced"].values():
            traced.update(side_files)
        self.trace = Tracer(traced)
        self.coverage: Dict[Tuple[str, str], Dict[str, Dict[str, Set[int]]]] = {}
        self._repo: Optional[Dict[str, Tuple[Any, str]]] = None
        self.labels: Set[str] = set()
        self.origin: Dict[str, Optional[str]] = {}  # filled name -> where its value came from
        self.trees: List[Tuple[Any, Any]] = []  # (module, syntax tree) of each module scanned
        limits = spec.get("budget") or {}
        self.memory_gib, self.seconds = limits.get("memory_gib"), limits.get("seconds")
        self.budget = Budget(self.seconds)  # `with self.budget():` around each case
        # the fullgraph report is not part of the verdict: each trace has a budget of its
        # own, and once the reports have taken GRAPH_TOTAL_SECONDS the later models get none
        self.graph_budget = Budget(min(self.seconds or GRAPH_SECONDS, GRAPH_SECONDS))
        self.graph_seconds = 0.0
        self.graph_cut: Optional[str] = None  # the model whose trace ran past its budget
        self.scan_order: List[str] = []  # the modules discovery imported, in order
        self.raises_at: Dict[Any, str] = {}  # class -> the statement its every build raised at
        # class -> the statement a candidate's builds raised at in every size tried, up to
        # its own configuration (any error): another candidate of the class raising there in
        # its small build is not built larger (the size is not what it trips on)
        self.raises_at_every_size: Dict[Any, str] = {}
        self.over_budget: Dict[Any, Dict[str, Any]] = {}  # class -> the error of its small build over budget

    def progress(self, message: str) -> None:
        if not self.spec["quiet"]:
            print(f"verify: [{time.time() - self.t0:5.1f}s] {message}", file=sys.stderr, flush=True)

    def bucket(self, side: str, label: str, case: str) -> Dict[str, Set[int]]:
        return self.coverage.setdefault((label, case), {"orig": {}, "new": {}})[side]

    def enter(self, side: str) -> None:
        base = self.spec["sides"][side]
        entries = [base]
        for rel in self.spec["flat_dirs"]:
            entry = os.path.normpath(os.path.join(base, rel))
            if entry not in entries:
                entries.append(entry)
        entries.append(self.spec["project_dir"])
        self.path_entries = entries
        sys.path[:0] = entries
        importlib.invalidate_caches()
        self.before = set(sys.modules)
        # the imports discovery made on the original side, in its order: a package whose
        # __init__ raises leaves its submodules imported there, so it must here too
        for name in self.scan_order:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 -- noted on the original side
                pass

    def leave(self) -> None:
        roots = [os.path.realpath(p) for p in self.path_entries]

        def inside(mod) -> bool:
            try:  # a namespace package's __path__ is recomputed from its parent's
                locations = [getattr(mod, "__file__", None)] + list(getattr(mod, "__path__", []) or [])
            except Exception:  # noqa: BLE001
                return True
            for loc in locations:
                if isinstance(loc, str):
                    real = os.path.realpath(loc)
                    if any(real == r or real.startswith(r + os.sep) for r in roots):
                        return True
            return False

        # decide for all first: deleting a parent first breaks its children's __path__
        doomed = [name for name in list(sys.modules) if name not in self.before and (sys.modules[name] is None or inside(sys.modules[name]))]
        for name in doomed:
            sys.modules.pop(name, None)
        for entry in self.path_entries:
            while entry in sys.path:
                sys.path.remove(entry)
        importlib.invalidate_caches()

    def in_tree(self, module) -> bool:
        loc = getattr(module, "__file__", None) if module is not None else None
        if not isinstance(loc, str):
            return False
        real = os.path.realpath(loc)
        return any(real.startswith(os.path.realpath(p) + os.sep) for p in self.path_entries[:-1])

    def unreached(self) -> List[Dict[str, Any]]:
        """Sites some region of which (with original statements) no case ran yet (not one
        in a function a later def replaces: no case can)."""
        out = []
        for site in self.spec["sites"]:
            if site.get("shadowed"):
                continue
            regions = [r for r in site["regions"] if r["orig_stmts"]]
            for region in regions:
                hit = False
                for (_, _), sides in self.coverage.items():
                    lines = sides["orig"].get(site["path"], set())
                    if any(line in lines for lo, hi in region["orig_stmts"] for line in range(lo, hi + 1)):
                        hit = True
                        break
                if not hit:
                    out.append(site)
                    break
        return out

    def forget(self, label: str) -> None:
        """Drop the coverage of a build that failed: no comparison will use it."""
        for key in [k for k in self.coverage if k[0] == label]:
            del self.coverage[key]

    def attempt(self, cand: Dict[str, Any], modes: List[Dict[str, Any]], torch, configs, label: str) -> Tuple[Optional[Dict[str, Any]], List[Dict[str, Any]]]:
        """Build and run one candidate on the original side, in the first of ``modes``
        that works: (its plan or None, the errors of the modes tried)."""
        errors: List[Dict[str, Any]] = []
        if cand.get("cls") is not None and cand["cls"] in self.over_budget:
            # its small build already went over budget in another candidate: not again
            return None, [self.over_budget[cand["cls"]]]
        for mode in modes:
            if mode["how"] == "the factory" and any(e.get("same_as_factory") for e in errors):
                continue  # built from the factory's own arguments, it raised at a statement of the files
            tried = {"module": mode["module"], "attr": mode["attr"], "kwargs": mode.get("kwargs", {}), "how": mode["how"]}

            def failed(error: Dict[str, Any], tried=tried) -> None:  # with the build it came from
                errors.append(dict(error, mode=tried))

            t0 = time.time()
            self.progress(f"building {label} ({mode['how']}, original)")
            bucket = self.bucket("orig", label, "build")
            try:
                with self.budget(), self.trace(bucket):
                    plan = self.plan_mode(cand, mode, torch)
            except MissingArgs as exc:
                failed({"error": f"needs {', '.join(exc.names)} (no default, no guess from its name)", "missing": exc.names})
                self.forget(label)
                continue
            except (Exception, OverBudget) as exc:  # noqa: BLE001
                failed(self.too_large_error(mode, exc) or {"error": f"cannot build ({mode['how']}): {type(exc).__name__}: {exc}"})
                self.forget(label)
                if errors[-1].get("too_large"):
                    self.note_over_budget(cand, mode, errors[-1])
                    break  # the next modes are larger
                continue
            model = plan.pop("model")
            plan["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            plan["runs"] = {}
            plan["label"] = label
            plan["component"] = bool(cand.get("component"))
            try:
                base: Dict[str, Any] = {}
                for i, (device, dtype, tol, cname) in enumerate(configs):
                    model.to(device=device, dtype=dtype)
                    if i == 0:
                        shapes, fallbacks = plan.pop("shapes"), plan.pop("fallbacks", None)
                        with self.budget():
                            plan["x"], base, arg_notes = self.choose_input(model, shapes, torch, fallbacks)
                        plan["shape"] = list(plan["x"].shape)
                        plan["layout"] = self.input_layout(plan["shape"], shapes, fallbacks)  # --verify-cuda times in it
                        plan["notes"].extend(arg_notes)
                        if input_key(type(model)) is not None:  # forward(batch) reading batch["video"]
                            plan["notes"].append(f"forward takes a dict: {{{input_key(type(model))!r}: x}}")
                    if i == 0:
                        self.run_config(model, plan, label, device, dtype, cname, base, torch, traced=True)
                        continue
                    try:  # a lower precision the original cannot run here (a CPU op without fp16): not run
                        self.run_config(model, plan, label, device, dtype, cname, base, torch, traced=False)
                    except (Exception, OverBudget) as exc:  # noqa: BLE001 -- the user's code may raise anything
                        for key in [k for k in plan["runs"] if k[0] == cname]:
                            del plan["runs"][key]
                        why = f"the original raised {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
                        plan.setdefault("not_run", {})[cname] = why
                        plan["notes"].append(f"{cname}: not run: {why}")
            except (Exception, OverBudget) as exc:  # noqa: BLE001
                error = self.too_large_error(mode, exc) or {"error": f"the original model raised ({mode['how']}): {type(exc).__name__}: {exc}", "ran": True}
                where = None if error.get("too_large") else self.raised_at(exc)
                if where is not None and _structural(exc):  # a statement of the files raised, whatever the input
                    error["raised"] = {"where": where, "what": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
                    error["same_as_factory"] = mode["how"].startswith("its configuration") and not mode.get("filled")
                error["where"] = where
                failed(error)
                self.forget(label)
                del model
                if where is not None and where == self.raises_at.get(cand.get("cls")):
                    break  # another build of a class already found to raise there in every build
                if where is not None and where == self.raises_at_every_size.get(cand.get("cls")):
                    errors[-1]["error"] += " (as every size of another build of the class raised there: not built larger)"
                    break
                if errors[-1].get("too_large"):
                    self.note_over_budget(cand, mode, errors[-1])
                    break
                continue
            plan["orig_model"] = model if not plan["component"] else None  # for the fullgraph report
            del model
            plan["seconds"] = time.time() - t0
            # --verify-cuda times the model at its own size: the first mode that is not shrunk
            plan["bench_mode"] = next((m for m in modes if not m["how"].startswith("small")), mode)
            plan["notes"][1:1] = [f"not built so: {e['error']}" for e in errors if not e.get("missing")]  # after "built from"
            return plan, errors
        return None, errors

    def run_config(self, model, plan, label, device, dtype, cname, base, torch, traced: bool) -> None:
        """Every case of one configuration (device, dtype) on the original side, into
        ``plan["runs"]``; the reference configuration (the first) is ``traced``."""
        x = plan["x"].to(device=device, dtype=dtype)
        for case, kw in self.cases(model, x, torch, base):
            if traced and "graph_case" not in plan:
                plan["graph_case"] = kw  # the model's first case: its fullgraph probe
            self.progress(f"running {label} {case} [{cname}] (original)")
            # every case starts from the built state, as on the rewritten side
            # (choosing the input ran the model: running statistics moved)
            model.load_state_dict(plan["state"])
            bucket = self.bucket("orig", label, case) if traced else None
            with kernel_scope(cname, torch):
                plan["runs"][(cname, case)] = self.run_original(model, x, kw, torch, plan, bucket)

    def run_original(self, model, x, kw, torch, plan, bucket, train: bool = True):
        """One case of the original side (traced into ``bucket`` unless None): (kw, options,
        result).  With the floating inputs requiring grad first; an original that cannot
        run so (``x.numpy()`` in its forward) runs without, and the rewritten side likewise
        (noted: no input gradient compared)."""
        for input_grads in (True, False):
            try:
                with self.budget():
                    if bucket is None:
                        result = self.run_case(model, x, kw, torch, train=train, input_grads=input_grads)
                    else:
                        with self.trace(bucket):
                            result = self.run_case(model, x, kw, torch, train=train, input_grads=input_grads)
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                if not input_grads or too_large(exc, self.memory_gib, self.seconds):
                    raise
                first = exc
                model.load_state_dict(plan["state"])
                if bucket is not None:
                    bucket.clear()  # only the run that is compared counts
                continue
            note = f"input gradients not compared: the original raised with inputs requiring grad ({type(first).__name__}: {str(first)[:100]})" if not input_grads else None
            if note and note not in plan["notes"]:
                plan["notes"].append(note)
            return kw, {"train": train, "input_grads": input_grads}, result
        raise AssertionError("unreachable")

    def reach_eval(self, plans: List[Dict[str, Any]], torch, configs) -> None:
        """While a site is unreached: the cases of each plan not run so yet, again in eval
        mode (``model.eval()``: a fork's ``if not self.training:`` branch, an eval-only
        path), float64 on CPU, each its own compared case ("eval forward(x)")."""
        if not configs or not self.unreached():
            return
        device, dtype, _, cname = configs[0]
        for plan in plans:
            if plan.get("eval_done") or plan.get("tensors"):  # a function call has no mode
                continue
            if not self.unreached():
                return
            plan["eval_done"] = True
            label = plan["label"]
            cases = [(case, kw, opts) for (cfg, case), (kw, opts, _) in plan["runs"].items() if cfg == cname and opts["train"]]
            try:
                model = self.construct(self.ctor_of(plan, torch), dict(plan["kwargs"]), torch, {})
                model.load_state_dict(plan["state"])
                model.to(device=device, dtype=dtype)
            except Exception as exc:  # noqa: BLE001
                plan["notes"].append(f"not run in eval mode: cannot build it again ({type(exc).__name__}: {exc})")
                continue
            x = plan["x"].to(device=device, dtype=dtype)
            for case, kw, opts in cases:
                if not self.unreached():
                    break
                name = f"eval {case}"
                self.progress(f"running {label} {name} [{cname}] (original)")
                model.load_state_dict(plan["state"])
                try:
                    with self.budget(), self.trace(self.bucket("orig", label, name)):
                        result = self.run_case(model, x, kw, torch, train=False, input_grads=opts["input_grads"])
                except (Exception, OverBudget) as exc:  # noqa: BLE001 -- eval mode is extra: say why, go on
                    self.coverage.pop((label, name), None)
                    plan["notes"].append(f"{name}: the original raised in eval mode ({type(exc).__name__}: {str(exc)[:100]}): not compared")
                    break
                plan["runs"][(cname, name)] = (kw, dict(opts, train=False), result)
            del model

    @staticmethod
    def json_kwargs(kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """The keyword arguments that JSON can carry (tuples as lists, a configuration
        object as its values); the others (modules, callables) are left out."""
        out = {}
        for key, value in kwargs.items():
            value = getattr(value, "values", value) if type(value).__name__ == "ConfigSpec" else value
            try:
                out[key] = json.loads(json.dumps(value))
            except (TypeError, ValueError):
                continue
        return out

    def too_large_error(self, mode: Dict[str, Any], exc: BaseException) -> Optional[Dict[str, Any]]:
        """A build or case over the memory or time budget: "too large to verify here", with
        the flags that build it smaller (its sizes as tried, to give smaller), else None."""
        why = too_large(exc, self.memory_gib, self.seconds)
        if why is None:
            return None
        sizes = {k: v for k, v in self.json_kwargs(mode.get("kwargs", {})).items() if is_size(k) or "size" in k.lower() or "shape" in k.lower()}
        given = json.dumps(sizes)
        hint = f"--factory {mode['module']}:{mode['attr']}:'{given}' or --kwargs '{given}' with smaller values, or --input-shape B,C,... smaller"
        return {"error": f"too large to verify here ({mode['how']}): {why}; build it smaller: {hint}", "too_large": True}

    def note_over_budget(self, cand: Dict[str, Any], mode: Dict[str, Any], error: Dict[str, Any]) -> None:
        """A class whose smallest build went over budget: its other candidates are not built."""
        if cand.get("cls") is not None and mode is not None and mode["how"].startswith("small"):
            self.over_budget[cand["cls"]] = error

    def raised_at(self, exc: BaseException) -> Optional[str]:
        """``file:line`` of the innermost frame of ``exc`` in the original side's copy of
        the user's files (shown as the user named it), or None."""
        base = os.path.realpath(self.spec["sides"]["orig"])
        names = {os.path.realpath(copy): user for copy, user in self.spec["traced"].get("orig", {}).items()}
        where = None
        tb = exc.__traceback__
        while tb is not None:
            real = os.path.realpath(tb.tb_frame.f_code.co_filename)
            if real.startswith(base + os.sep):
                where = f"{names.get(real) or os.path.relpath(real, base)}:{tb.tb_lineno}"
            tb = tb.tb_next
        return where

    def not_built(self, label: str, cls, errors: List[Dict[str, Any]]) -> None:
        """A candidate no mode built and ran: its last error is the failure (or the raise of a
        build before a factory that lacked a value the builds before it had), the others notes.
        Where every mode that built raised at the same statement of the files (and none
        lacked an argument or a budget), the path is *unreachable in the original*."""
        if errors:
            # a factory tried last that lacked an argument its class's builds were given
            # (model_name: no guess from an unwrapped factory's name) did not stop the
            # proof where those builds ran and the original raised: that raise is the cause
            ran = [e for e in errors if e.get("ran")]
            last = errors[-1]
            if last.get("missing") and (last.get("mode") or {}).get("how", "").startswith("the factory") and ran:
                cause = ran[-1]
            else:
                cause = last
            failure = dict(cause, label=label, **{"class": cls.__name__ if cls else None})
            failure.pop("mode", None)
            # the build to start from, as a --factory line: the model's own configuration as
            # tried (the class and what its factory gives), else the first build tried
            tried = [e["mode"] for e in errors if e.get("mode")]
            last = next((m for m in tried if m["how"].startswith("its configuration")), tried[0] if tried else None)
            if last is not None:
                given = dict(self.json_kwargs(last["kwargs"]), **self.chosen(last))  # with the repo's values it took (model_name)
                failure["flag"] = f"--factory {last['module']}:{last['attr']}:'{json.dumps(given)}'"
            wheres = [e.get("where") for e in errors]
            sizes = [e["mode"]["how"] for e in errors if e.get("mode")]
            if (
                cls is not None and len(errors) >= 3 and wheres[0] is not None and len(set(wheres)) == 1
                and any(h.startswith("small") for h in sizes) and any(not h.startswith("small") for h in sizes)
            ):
                self.raises_at_every_size.setdefault(cls, wheres[0])
            raised = [e["raised"] for e in errors if e.get("raised")]
            every = all(e.get("raised") for e in errors if e.get("ran"))  # no build ran into another error
            if raised and every and len({r["where"] for r in raised}) == 1 and not any(e.get("missing") or e.get("too_large") for e in errors):
                failure["unreachable"] = raised[-1]
                self.raises_at[cls] = raised[-1]["where"]
                failure["classes"] = [k.__name__ for k in cls.__mro__] if cls else []
            self.report["failures"].append(failure)
        if len(errors) > 1:
            self.report["notes"].append(f"{label}: " + "; ".join(e["error"] for e in errors if e is not cause))

    def unique(self, label: str) -> str:
        while label in self.labels:
            label += "'"
        self.labels.add(label)
        return label

    def reach_switches(self, plans: List[Dict[str, Any]], torch, configs) -> None:
        """While a site of a model's class is unreached: each model built from its class,
        again with one of its run-time switches on (:func:`runtime_switches`: an argument
        defaulting to False that a method reads, ``return_likelihoods``), one at a time,
        each its own compared case; its input the model's, else (the original raising with
        every layout) with the last dim 2 or 3 times as wide (a switch reading features
        stacked on it: ``x[..., F:2 * F]``)."""
        def unreached_in(cls) -> bool:
            owners = {s.get("owner_class") for s in self.unreached()}
            return any(k.__name__ in owners for k in cls.__mro__)

        for plan in list(plans):
            if plan.get("component") or plan.get("tensors"):
                continue
            try:
                ctor = self.resolve(plan["module"], plan["attr"])
            except Exception:  # noqa: BLE001
                continue
            if not isinstance(ctor, type):
                continue
            how = plan["notes"][0].removeprefix("built from ") if plan.get("notes") else "its build"
            for name in runtime_switches(ctor):
                if not unreached_in(ctor):
                    break
                if plan["kwargs"].get(name) is True:
                    continue
                label = self.unique(f"{plan['label']} ({name}=True)")
                mode = {"module": plan["module"], "attr": plan["attr"], "kwargs": dict(plan["kwargs"], **{name: True}),
                        "how": f"{how}, {name}=True", "own_input": True, "widen": True, "filled": {}, "required": []}
                variant, errors = self.attempt({"cls": ctor, "label": label, "kwargs": {}}, [mode], torch, configs, label)
                if variant is not None:
                    variant["orig_model"] = None  # the model's own fullgraph report is its first build's
                    plans.append(variant)
                else:
                    self.report["notes"].append(f"{label}: not built: " + "; ".join(e["error"] for e in errors)[:300])

    def reach_components(self, torch, configs, plans: List[Dict[str, Any]], models: Set[Any]) -> None:
        """Sites no model reached: build the class holding each directly (unless it was
        one of the ``models`` tried), in its modes (:meth:`component_modes`) while a site
        of the class is unreached; each mode that runs is its own compared case."""
        for cand in self.components(self.unreached(), torch, models):
            name = cand["cls"].__name__
            tried: List[str] = []
            missing = None
            for mode in self.component_modes(cand):
                if not any(s.get("owner_class") == name for s in self.unreached()):
                    break
                plan, errors = self.attempt(cand, [mode], torch, configs, self.unique(mode["label"]))
                if plan is not None:
                    plans.append(plan)
                    self.reach_eval([plan], torch, configs)
                for err in errors:
                    tried.append(f"{mode['label'].removeprefix('component ')}: {err['error']}")
                    missing = missing or err.get("missing")
            if tried:
                failure = {"error": "; ".join(tried), "label": f"component {name}", "class": name}
                if missing:
                    failure["missing"] = missing
                self.report["failures"].append(failure)

    def reach_functions(self, torch, configs, plans: List[Dict[str, Any]]) -> None:
        """Sites still unreached in module-level functions: each function called directly
        (:mod:`.functions`), in its modes while a site of it is unreached; each mode
        that runs is its own compared case."""
        done: Set[Tuple[str, str]] = set()
        for site in self.unreached():
            name, module = function_owner(site), sys.modules.get(site["module"])
            function = vars(module).get(name) if module is not None and name else None
            if not inspect.isfunction(function) or (site["module"], name) in done:
                continue
            done.add((site["module"], name))
            recipes: List[Tuple[str, Dict[str, Any]]] = []
            for where, recipe in self.constructions(function):
                if all(recipe != r for _, r in recipes):
                    recipes.append((where, recipe))
            modes = function_modes(function, recipes[:2], self.spec["kwargs"], self.fill, BRANCH_KNOBS)
            label = f"function {name}"
            if not modes:
                self.report["failures"].append({"error": "cannot tell which of its arguments are tensors (annotate them torch.Tensor)", "label": label, "class": None, "function": name})
                continue
            cand = {"module": site["module"], "attr": name, "label": label, "cls": None, "component": True, "kwargs": {}}
            tried: List[str] = []
            missing = None
            for mode in modes:
                if not any(function_owner(s) == name and s["module"] == site["module"] for s in self.unreached()):
                    break
                plan, errors = self.attempt(cand, [mode], torch, configs, self.unique(mode["label"]))
                if plan is not None:
                    plans.append(plan)
                for err in errors:
                    tried.append(f"{mode['label'].removeprefix('function ')}: {err['error']}")
                    missing = missing or err.get("missing")
            if tried:
                failure = {"error": "; ".join(tried), "label": label, "class": None, "function": name}
                if missing:
                    failure["missing"] = missing
                self.report["failures"].append(failure)

    def run(self) -> None:
        try:
            import torch
        except Exception as exc:  # noqa: BLE001
            self.report["errors"].append(f"cannot import torch ({type(exc).__name__}: {exc}): {INSTALL_HINT}")
            return
        torch.set_grad_enabled(True)
        configs = []
        for device, dtype, tol in self.spec["configs"]:
            if device == "cuda" and not torch.cuda.is_available():
                self.report["notes"].append(f"CUDA not available: {dtype} on cuda skipped")
                continue
            configs.append((device, getattr(torch, dtype), tol, f"{dtype} {device}"))
        # each lower precision again with the math kernel alone on both sides
        # (:mod:`.kernels`): the rewrite apart from the fused kernel it reaches
        configs += [(d, t, tol, math_twin(c)) for d, t, tol, c in configs if t != torch.float64]

        self.enter("orig")
        plans = []
        try:
            cands = self.discover(torch)
            tried = 0
            models: Set[Any] = set()  # the classes tried as models
            for cand in cands:
                if cand["later"]:
                    missing = self.unreached()
                    if not missing and plans:
                        break
                    owners = {s.get("owner_class") for s in missing}
                    cls = cand["cls"]
                    relevant = cls is not None and any(
                        o and any(k.__name__ == o for k in cls.__mro__) for o in owners
                    ) or not any(o and o not in {p.__name__ for p in self.parts} for o in owners)
                    if plans and not relevant:
                        continue
                if tried >= _MAX_CANDIDATES:
                    self.report["notes"].append(f"stopped after {tried} candidate models")
                    break
                tried += 1
                models.add(cand["cls"])
                plan, errors = self.attempt(cand, self.modes(cand), torch, configs, self.unique(cand["label"]))
                if plan is not None:
                    plans.append(plan)
                else:
                    self.not_built(cand["label"], cand["cls"], errors)
            # after every train-mode case of the models (upstream needs none of this)
            self.reach_eval(plans, torch, configs)
            self.reach_switches(plans, torch, configs)
            if not self.spec["factories"]:
                self.reach_components(torch, configs, plans, models)
                self.reach_functions(torch, configs, plans)
        finally:
            self.leave()

        ref_name = configs[0][3] if configs else None
        benches = [(plan["label"], plan["bench_mode"], plan["shape"], plan.get("layout", "channels_first")) for plan in plans if not plan["component"]]
        self.enter("new")
        try:
            for plan in plans:
                self.run_new(plan, configs, ref_name, torch)
        finally:
            self.leave()
        if self.spec.get("bench"):
            self.time_steps(benches, torch)
        for (label, case), sides in self.coverage.items():
            self.report["coverage"].append(
                {"model": label, "case": case, **{side: {k: sorted(v) for k, v in sides[side].items()} for side in ("orig", "new")}}
            )

    def run_new(self, plan, configs, ref_name, torch) -> None:
        label = plan["label"]
        entry = {"label": label, "input": plan["shape"], "rows": [], "notes": plan["notes"], "component": plan["component"]}
        entry["configs"] = [c[3] for c in configs]  # the parity table's dtypes and devices
        if plan.get("not_run"):  # configs the original could not run in (said, not compared)
            entry["not_run"] = dict(plan["not_run"])
        t0 = time.time()
        self.report["models"].append(entry)
        try:
            self.progress(f"building {label} (rewritten)")
            with self.budget(), self.trace(self.bucket("new", label, "build")):
                model = self.construct(self.ctor_of(plan, torch), dict(plan["kwargs"]), torch, {})
            new_state = model.state_dict()
            keys_a, keys_b = list(plan["state"]), list(new_state)
            same = keys_a == keys_b and all(plan["state"][k].shape == new_state[k].shape for k in keys_a)
            note = "" if same else f"missing {sorted(set(keys_a) - set(keys_b))[:3]}, unexpected {sorted(set(keys_b) - set(keys_a))[:3]}"
            if same and keys_a != keys_b:
                note = "different order"
            entry["rows"].append({"config": "-", "case": "state_dict", "what": f"{len(keys_a)} tensors", "shape": "same names, shapes" if same else "differs", "ok": same, "note": note})
            if not same:
                return
            for i, (device, dtype, tol, cname) in enumerate(configs):
                model.load_state_dict(plan["state"])
                model.to(device=device, dtype=dtype)
                x = plan["x"].to(device=device, dtype=dtype)
                for (cfg, case), (kw, opts, (outs_a, grads_a, bufs_a, dx_a)) in plan["runs"].items():
                    if cfg != cname:
                        continue
                    self.progress(f"running {label} {case} [{cname}] (rewritten)")
                    kw_b = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in kw.items()}
                    model.load_state_dict(plan["state"])
                    try:
                        with self.budget(), kernel_scope(cname, torch):
                            if i == 0:
                                with self.trace(self.bucket("new", label, case)):
                                    outs_b, grads_b, bufs_b, dx_b = self.run_case(model, x, kw_b, torch, **opts)
                            else:
                                outs_b, grads_b, bufs_b, dx_b = self.run_case(model, x, kw_b, torch, **opts)
                    except (Exception, OverBudget) as exc:  # noqa: BLE001
                        entry["rows"].append({"config": cname, "case": case, "what": "forward/backward", "shape": "-", "ok": False, "note": f"the rewritten model raised {type(exc).__name__}: {exc}"})
                        continue
                    ref = None
                    if dtype != torch.float64:  # lower precision: judged by accuracy vs float64
                        # on the same device where it ran (the same random draws), else CPU's
                        same = next((c[3] for c in configs if c[0] == device and c[1] == torch.float64 and (c[3], case) in plan["runs"]), ref_name)
                        ref = plan["runs"].get((same, case), (None, None, None))[2]
                    entry["rows"].extend(self.compare(cname, case, outs_a, grads_a, outs_b, grads_b, tol, torch, ref=ref, buffers=(bufs_a, bufs_b), inputs=(dx_a, dx_b)))
            self.judge_kernels(entry, plan, model, configs, torch)
            original = plan.get("orig_model")
            if original is not None and configs and "graph_case" in plan and self.spec.get("graph_report", True):
                model.load_state_dict(plan["state"])
                model.to(device="cpu", dtype=configs[0][1])
                entry["graph"] = self.graph_entry(label, model, original, plan["x"].to(dtype=configs[0][1]), plan["graph_case"], torch)
            del model
        except (Exception, OverBudget) as exc:  # noqa: BLE001
            entry["error"] = f"cannot build the rewritten model: {type(exc).__name__}: {exc}"
        finally:
            entry["seconds"] = plan["seconds"] + time.time() - t0
            plan.clear()

    def judge_kernels(self, entry, plan, model, configs, torch) -> None:
        """A lower-precision CUDA case that failed with the fused kernels but passes in
        its math twin: run once more recording each SDPA call against float64
        (:mod:`.kernels`). Every call within its bound: the rows are the fused kernel's
        precision (passed, with a note); else they fail, naming the call."""
        twins = {c[3] for c in configs if is_math_twin(c[3])}
        failing: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
        for row in entry["rows"]:
            if not row["ok"] and math_twin(row["config"]) in twins:
                failing.setdefault((row["config"], row["case"]), []).append(row)
        for (cname, case), rows in failing.items():
            twin_rows = [r for r in entry["rows"] if r["config"] == math_twin(cname) and r["case"] == case]
            if not twin_rows or not all(r["ok"] for r in twin_rows):
                continue  # the rewrite itself differs: failed as it is
            device, dtype = next((c[0], c[1]) for c in configs if c[3] == cname)
            kw, opts, _ = plan["runs"][(cname, case)]
            model.load_state_dict(plan["state"])
            model.to(device=device, dtype=dtype)
            calls = fused_calls(torch)
            self.progress(f"running {entry['label']} {case} [{cname}] (rewritten, each attention call against float64)")
            try:
                with self.budget(), calls:
                    self.run_case(model, plan["x"].to(device=device, dtype=dtype), {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in kw.items()}, torch, **opts)
            except (Exception, OverBudget) as exc:  # noqa: BLE001
                for row in rows:
                    row["note"] += f"; the attention calls could not be checked ({type(exc).__name__})"
                continue
            bad = worst_call(calls.calls)
            for row in rows:
                if bad is None:
                    row["ok"] = True
                    row["precision"] = (
                        f"the fused attention kernel's precision: {row['note']}; with the math kernel on both sides "
                        f"({math_twin(cname)}) they agree, and each of the {len(calls.calls)} attention calls is within "
                        f"{CALL_ULPS} eps of its dtype of float64 on its inputs"
                    )
                    row["note"] = ""
                else:
                    row["note"] += (
                        f"; the fused kernel misreads an attention call: q {bad['q']}, mask {bad['mask']}: "
                        f"error {bad['error']:.2e} vs float64 on its inputs (bound {bad['bound']:.2e})"
                    )

    def graph_entry(self, label: str, model, original, x, kw, torch) -> Dict[str, Any]:
        """The fullgraph report of one model, within the report's budgets: none once the
        reports have taken GRAPH_TOTAL_SECONDS, or once one trace ran past its own budget
        (the models of one repo share their blocks: the next trace would most likely be
        cut too, after as long)."""
        if self.graph_cut is not None:
            return {"skipped": f"the trace of {self.graph_cut} ran past the report's {self.graph_budget.seconds:g} s"}
        if self.graph_seconds >= GRAPH_TOTAL_SECONDS:
            return {"skipped": f"the reports of the models above took {self.graph_seconds:.0f} s"}
        self.progress(f"tracing {label} with torch.compile(fullgraph=True)")
        start = time.time()
        graph = self.graph_report(model, original, x, kw, torch)
        self.graph_seconds += time.time() - start
        if graph.get("untraced") and graph["new"]["reason"].startswith("not traced: past"):
            self.graph_cut = label
        return graph

    def graph_report(self, model, original, x, kw, torch) -> Dict[str, Any]:
        """Whether the rewritten model's first case traces as one graph under torch.compile
        (dynamo on CPU, the small config): "compiles fullgraph", else the first statement
        that breaks it (file:line and dynamo's reason) and whether the original breaks at the
        same statement.  A report for the user's own compile blockers, not a verdict."""
        new = self._first_break(model, x, kw, torch, "new")
        if new is None:
            return {"new": None}
        if new["where"] is None and new["reason"].startswith("not traced"):
            return {"new": new, "untraced": True}
        return {"new": new, "orig": self._first_break(original, x, kw, torch, "orig")}

    def _first_break(self, model, x, kw, torch, side: str) -> Optional[Dict[str, Any]]:
        import torch._dynamo as dynamo

        made = self._made(model, x, kw, torch)
        dynamo.reset()
        try:
            with self.graph_budget():
                explained = dynamo.explain(lambda: model(fed(model, x), **made))()
        except OverBudget:
            return {"where": None, "reason": f"not traced: past the report's {self.graph_budget.seconds:g} s"}
        except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
            return {"where": None, "reason": f"not traced: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
        finally:
            dynamo.reset()
        if not explained.break_reasons:
            return None
        first = explained.break_reasons[0]
        names = self.spec["traced"].get(side, {})
        base = os.path.realpath(self.spec["sides"][side])
        frames = list(first.user_stack or [])
        mine = [f for f in frames if os.path.realpath(f.filename).startswith(base + os.sep)]
        frame = (mine or frames or [None])[-1]
        where = None
        if frame is not None:
            real = os.path.realpath(frame.filename)
            shown = next((user for copy, user in names.items() if os.path.realpath(copy) == real), None)
            shown = shown or (os.path.relpath(real, base) if real.startswith(base + os.sep) else frame.filename)
            where = f"{shown}:{frame.lineno}"
        reason = next((line.strip() for line in first.reason.splitlines() if line.strip()), "")
        return {"where": where, "reason": reason[:200]}

    def time_steps(self, benches, torch) -> None:
        """--verify-cuda: a training step of each passing model, original vs rewritten, at the
        model's own size in bfloat16 on CUDA, interleaved rounds (:mod:`.cuda`)."""
        timing = self.report.setdefault("timing", [])
        if not torch.cuda.is_available():
            timing.append({"label": "-", "lines": ["timing skipped: CUDA not available"]})
            return
        from . import cuda as timer  # noqa: PLC0415 -- only with --verify-cuda

        bench = self.spec["bench"]
        passed = {m["label"] for m in self.report["models"] if not m.get("error") and m["rows"] and all(r["ok"] for r in m["rows"])}
        for label, mode, verified_shape, layout in benches[: bench.get("models", 2)]:
            if label not in passed:
                continue
            models = {}
            try:
                for side in ("orig", "new"):
                    self.enter(side)
                    try:
                        self.progress(f"building {label} at its own size for timing ({side})")
                        models[side], built = self.build(mode, torch, {})
                    finally:
                        self.leave()
                models["new"].load_state_dict(models["orig"].state_dict())
                for model in models.values():
                    model.to(device="cuda", dtype=torch.bfloat16)
                model = models["orig"]
                shape = self.bench_shape(model, built, bench, verified_shape, torch, layout)
                self.progress(f"timing {label} {tuple(shape)} on {torch.cuda.get_device_name()}")
                # forward's required arguments, made again for this size (none: {})
                probe = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
                extra = self._made(model, probe, self.forward_args(model, probe, torch)[0], torch)
                sides = {"original": models["orig"], "rewritten": models["new"]}
                make = lambda: fed(model, torch.randn(*shape, device="cuda", dtype=torch.bfloat16))  # noqa: E731 -- a dict where forward takes one
                rounds, steps = int(bench.get("rounds", 8)), int(bench.get("steps", 5))
                if bench.get("modes"):  # --bench-modes: each mode, compiled and warmed up first
                    result = timer.time_modes(sides, make, baseline="original", modes=bench["modes"], forward_kwargs=extra, rounds=rounds, steps=steps, torch=torch)
                    ratios = {m["mode"]: {"ratio": m["ratios"]["rewritten"]["median"], "ran": m["ran"]} for m in result["modes"] if "ratios" in m}
                    timing.append({"label": label, "lines": timer.format_modes(label, result, "bfloat16", shape), "result": {"device": result["device"], "modes": ratios}})
                    continue
                result = timer.time_training_steps(sides, make, baseline="original", forward_kwargs=extra, rounds=rounds, steps=steps, torch=torch)
                timing.append({"label": label, "lines": timer.format_timing(label, result, "bfloat16", shape), "result": {k: v for k, v in result.items() if k != "ratios"} | {"ratio": result["ratios"]["rewritten"]["median"]}})
            except Exception as exc:  # noqa: BLE001 -- timing is extra: say why, keep the verdict
                hint = "; try a smaller --bench-batch" if "out of memory" in str(exc) else ""
                timing.append({"label": label, "lines": [f"timing of {label} skipped: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{hint}"]})
            finally:
                models.clear()
                if bench.get("modes"):
                    try:  # the compiled graphs and their CUDA-graph pools hold the models
                        torch._dynamo.reset()
                    except Exception:  # noqa: BLE001
                        pass
                torch.cuda.empty_cache()


#: a TypeError of a call with the wrong arguments (the files' own signatures), not of a value
_SIGNATURE = re.compile(
    r"unexpected keyword argument|missing \d+ required|takes (?:from \d+ to )?\d+ positional arguments? but \d+ (?:were|was) given"
    r"|got multiple values for argument|takes no arguments"
)


def _structural(exc: BaseException) -> bool:
    """An error a statement raises whatever the input verify made is (its shapes, its values,
    its type): only such a raise in every build makes a path *unreachable in the original*.
    Those are: a name that is not defined; a call of the files' own code with the wrong
    arguments; an attribute a model (an ``nn.Module``) does not have; unpacking the wrong
    number of values from what a call returns (``_, x = super().forward(...)``).  Not: a
    shape mismatch, an index or an assert; a TypeError of a value (a tensor indexed by a
    string: the fork's forward takes a dict); an attribute a tensor lacks; unpacking a
    tensor, its shape or the input itself (``B, C, H, W = x.shape``: the input's rank)."""
    if isinstance(exc, NameError):
        return not isinstance(exc, UnboundLocalError)  # a branch the input chose left it unbound
    if isinstance(exc, TypeError):
        return bool(_SIGNATURE.search(str(exc)))
    if isinstance(exc, AttributeError):
        return _missing_on_a_module(exc)
    if isinstance(exc, ValueError) and "values to unpack" in str(exc):
        return _unpacks_a_call(exc)
    return False


def _last_frame(exc: BaseException):
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _missing_on_a_module(exc: AttributeError) -> bool:
    """The attribute was looked up on an ``nn.Module`` (by ``Module.__getattr__``, or so
    recorded in ``exc.obj``)."""
    nn = getattr(sys.modules.get("torch"), "nn", None)
    if nn is None:
        return False
    obj = getattr(exc, "obj", None)
    if obj is None:
        tb = _last_frame(exc)
        if tb is not None and tb.tb_frame.f_code.co_name == "__getattr__":
            obj = tb.tb_frame.f_locals.get("self")
    return isinstance(obj, nn.Module)


def _unpacks_a_call(exc: ValueError) -> bool:
    """The statement that raised (the innermost frame) is ``a, b = f(...)``: values unpacked
    from what a function or the model's own method returned (``helper(x)``, ``self.f(x)``,
    ``super().forward(x)``), not from a name, an attribute, a subscript or a tensor's
    method (``x.shape``, ``qkv.unbind(0)``, ``x.split(8)``: the input's rank or size)."""
    import ast  # noqa: PLC0415
    import linecache  # noqa: PLC0415

    tb = _last_frame(exc)
    if tb is None:
        return False
    path, line = tb.tb_frame.f_code.co_filename, tb.tb_lineno
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return False
    spans = [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not spans:
        return False
    stmt = min(spans, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    if not isinstance(stmt, ast.Assign) or not any(isinstance(t, (ast.Tuple, ast.List)) for t in stmt.targets):
        return False
    call = stmt.value
    if not isinstance(call, ast.Call):
        return False
    func = call.func  # a function (helper(x)) or the model's own method (self.f(x), super().forward(x))
    if isinstance(func, ast.Name):
        return True
    base = func.value if isinstance(func, ast.Attribute) else None
    while isinstance(base, ast.Attribute):  # self.encoder.forward(x)
        base = base.value
    return (isinstance(base, ast.Name) and base.id == "self") or (
        isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"
    )


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    worker = Worker(spec)
    if not any(device == "cuda" for device, _, _ in spec["configs"]):  # the driver's reservations are not ours to cap
        problem = cap_memory(worker.memory_gib)
        if problem:
            worker.report["notes"].append(problem)
    try:
        worker.run()
    except (Exception, OverBudget) as exc:  # noqa: BLE001 -- report, never hide
        import traceback

        worker.report["errors"].append(f"verification crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    Path(spec["report"]).write_text(json.dumps(worker.report))


if __name__ == "__main__":
    main(sys.argv[1])
