#!/usr/bin/env python3
"""Compare two run.py outputs site by site.

    python3 benchmarks/corpus_sites/cmp.py OLD NEW [--loose] [--all]

OLD and NEW are run.py OUTDIRs (or their sites.json files).  Prints each side's totals
(applied / skipped, per repo where they differ), then every site whose status or message
differs, and every site reported on one side only.

Sites are matched in passes, each pass only among the sites still unmatched:
  1. (repo, file, code, line, col, src)      -- the same corpus: line numbers are the
                                                original file's, equal on both sides
  2. (repo, file, code, scope, src)          -- robust to line shifts (a re-laid-out corpus
                                                at another commit): the enclosing class/def
                                                qualname and the stripped source line
  3. (repo, file, code, scope)               -- the source line itself edited
Within a key, sites with the same (status, message) pair first, the rest in line order.
--loose: compare messages with line numbers ("at line 600") normalised away.
Exit status: 0 no difference, 1 differences.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path


def load(arg: str) -> dict:
    p = Path(arg)
    if p.is_dir():
        p = p / "sites.json"
    return json.loads(p.read_text())


def norm(msg: str, loose: bool) -> str:
    return re.sub(r"\b(line|lines) \d+(-\d+)?", r"\1 N", msg) if loose else msg


KEYS = [
    lambda s: (s["repo"], s["file"], s["code"], s["line"], s["col"], s["src"]),
    lambda s: (s["repo"], s["file"], s["code"], s["scope"], s["src"]),
    lambda s: (s["repo"], s["file"], s["code"], s["scope"]),
]


def match(old: list, new: list, loose: bool):
    pairs = []
    left_o = list(range(len(old)))
    left_n = list(range(len(new)))
    for key in KEYS:
        go, gn = defaultdict(list), defaultdict(list)
        for i in left_o:
            go[key(old[i])].append(i)
        for j in left_n:
            gn[key(new[j])].append(j)
        used_o, used_n = set(), set()
        for k, os_ in go.items():
            ns = gn.get(k, [])
            if not ns:
                continue
            ns = list(ns)
            rest_o = []
            for i in os_:  # identical (status, message) first
                same = next((j for j in ns if (new[j]["status"], norm(new[j]["message"], loose)) ==
                             (old[i]["status"], norm(old[i]["message"], loose))), None)
                if same is None:
                    rest_o.append(i)
                else:
                    ns.remove(same)
                    pairs.append((i, same))
                    used_o.add(i); used_n.add(same)
            for i, j in zip(sorted(rest_o, key=lambda i: (old[i]["line"], old[i]["col"])),
                            sorted(ns, key=lambda j: (new[j]["line"], new[j]["col"]))):
                pairs.append((i, j))
                used_o.add(i); used_n.add(j)
        left_o = [i for i in left_o if i not in used_o]
        left_n = [j for j in left_n if j not in used_n]
    return pairs, left_o, left_n


def where(s: dict) -> str:
    return f"{s['repo']}  {s['file']}:{s['line']}:{s['col']}  {s['code']}  [{s['scope']}]"


def main() -> int:
    ap = argparse.ArgumentParser(description="compare two run.py outputs site by site")
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--loose", action="store_true", help="ignore line numbers inside messages")
    ap.add_argument("--all", action="store_true", help="also print the per-repo table when totals agree")
    args = ap.parse_args()
    a, b = load(args.old), load(args.new)
    old, new = a["sites"], b["sites"]

    for name, d in (("OLD", a), ("NEW", b)):
        s = d["sites"]
        print(f"{name}: {d['rev']} ({d['sha'][:12]}): {sum(x['status'] == 'applied' for x in s)} applied / "
              f"{sum(x['status'] == 'skipped' for x in s)} skipped ({len(s)} sites, {len(d['repos'])} repos)")
        for r in d["repos"]:
            if r.get("problems"):
                print(f"  problem  {r['repo']}: {'; '.join(r['problems'])}")

    # per repo
    per = defaultdict(lambda: [0, 0, 0, 0])
    for s in old:
        per[s["repo"]][0 if s["status"] == "applied" else 1] += 1
    for s in new:
        per[s["repo"]][2 if s["status"] == "applied" else 3] += 1
    repos = sorted({r["repo"] for r in a["repos"]} | {r["repo"] for r in b["repos"]})
    changed = [r for r in repos if per[r][:2] != per[r][2:]]
    if changed or args.all:
        print("\nper repo (applied/skipped)  OLD -> NEW")
        for r in (repos if args.all else changed):
            o, n = per[r][:2], per[r][2:]
            print(f"  {r:45s} {o[0]:3d}/{o[1]:<3d} -> {n[0]:3d}/{n[1]:<3d}{'' if o == n else '   *'}")
    only_a = sorted({r["repo"] for r in a["repos"]} - {r["repo"] for r in b["repos"]})
    only_b = sorted({r["repo"] for r in b["repos"]} - {r["repo"] for r in a["repos"]})
    if only_a or only_b:
        print(f"\nrepos only in OLD: {only_a}\nrepos only in NEW: {only_b}")

    pairs, lo, ln = match(old, new, args.loose)
    diffs = [(i, j) for i, j in pairs
             if (old[i]["status"], norm(old[i]["message"], args.loose)) != (new[j]["status"], norm(new[j]["message"], args.loose))]
    moved = [(i, j) for i, j in pairs if (old[i]["line"], old[i]["col"]) != (new[j]["line"], new[j]["col"])]
    print(f"\nmatched {len(pairs)} sites ({len(moved)} at another line/col), "
          f"{len(diffs)} differ, {len(lo)} only in OLD, {len(ln)} only in NEW")
    key = lambda p: (old[p[0]]["repo"], old[p[0]]["file"], old[p[0]]["line"], old[p[0]]["col"])
    for i, j in sorted(diffs, key=key):
        o, n = old[i], new[j]
        print(f"\n~ {where(o)}" + ("" if (o["line"], o["col"]) == (n["line"], n["col"]) else f"  (NEW at {n['line']}:{n['col']})"))
        print(f"    src: {o['src']}")
        print(f"    OLD {o['status']}: {o['message']}")
        print(f"    NEW {n['status']}: {n['message']}")
    for tag, side, idx in (("- only in OLD", old, lo), ("+ only in NEW", new, ln)):
        for i in sorted(idx, key=lambda i: (side[i]["repo"], side[i]["file"], side[i]["line"])):
            s = side[i]
            print(f"\n{tag}: {where(s)}\n    src: {s['src']}\n    {s['status']}: {s['message']}")
    return 1 if (diffs or lo or ln) else 0


if __name__ == "__main__":
    sys.exit(main())
