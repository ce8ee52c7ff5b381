"""Which part of --bench-modes' reduce-overhead step breaks CUDA-graph recording (H200 probe).

Each variant runs in a fresh process: the rewritten MAE-Tiny (the installed upstream,
rewritten in memory), bf16 on CUDA, B=16, compiled with mode="reduce-overhead" and warmed
up 6 steps by hiera_rewrite.verify.cuda's step; the variants change what the step does
besides forward + backward (seeding each step, zero_grad before mark_step).
"""
import subprocess
import sys

VARIANTS = ["default", "seed_once", "zero_after", "seed_once+zero_after"]

CHILD = r'''
import sys, time, types, importlib.util, os, tempfile
variant = sys.argv[1]
import torch
from hiera_rewrite.export import upstream_dir
from hiera_rewrite.engine import rewrite_bytes
tmp = tempfile.mkdtemp()
pkg = os.path.join(tmp, "hx"); os.makedirs(pkg)
for p in upstream_dir().glob("*.py"):
    data = p.read_bytes()
    if p.name in ("hiera.py", "hiera_mae.py"):
        data = rewrite_bytes(data).output
    open(os.path.join(pkg, p.name), "wb").write(data)
sys.path.insert(0, tmp)
import hx
model = hx.mae_hiera_tiny_224().cuda().to(torch.bfloat16).train()
x = torch.randn(16, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
call = torch.compile(model, mode="reduce-overhead", dynamic=False)
mark = torch.compiler.cudagraph_mark_step_begin
torch.manual_seed(0)
def step(seed):
    if "seed_once" not in variant:
        torch.manual_seed(seed)
    if "zero_after" not in variant:
        model.zero_grad(set_to_none=True)
    mark()
    loss = call(x)[0]
    loss.backward()
    if "zero_after" in variant:
        model.zero_grad(set_to_none=True)
t0 = time.time()
try:
    for i in range(6):
        step(10000 + i)
    torch.cuda.synchronize()
    ts = []
    for i in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); step(i); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort()
    from torch._dynamo.utils import counters
    print(f"{variant}: OK warm {time.time()-t0:.0f}s median {ts[5]:.2f} ms cudagraph_skips {counters['inductor'].get('cudagraph_skips', 0)}")
except Exception as exc:
    print(f"{variant}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
'''

for v in VARIANTS if len(sys.argv) < 2 else sys.argv[1:]:
    r = subprocess.run([sys.executable, "-c", CHILD, v], capture_output=True, text=True, timeout=240, cwd="/tmp")
    lines = [l for l in r.stdout.splitlines() if l.startswith(v + ":")]
    print(lines[-1] if lines else f"{v}: no result (exit {r.returncode}): {r.stderr.strip().splitlines()[-1:]}", flush=True)
