"""Does reduce-overhead fail after the same model ran under plain torch.compile in the process
(as in verify's worker), and is inductor's FX graph cache the link?  Upstream Hiera-Tiny
(original source), bf16, B=16, on CUDA: 3 compile-mode steps, dynamo reset, then 6
reduce-overhead steps; variant 'nocache' turns inductor's fx_graph_cache off first.
Each variant in a fresh process; prints one line each."""
import subprocess
import sys

CHILD = r'''
import sys, time
variant = sys.argv[1]
import torch, hiera
if variant == "nocache":
    torch._inductor.config.fx_graph_cache = False
model = hiera.hiera_tiny_224().cuda().to(torch.bfloat16).train()
x = torch.randn(16, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
def run(call, n, mark=None):
    for i in range(n):
        torch.manual_seed(i)
        model.zero_grad(set_to_none=True)
        if mark: mark()
        call(x).float().sum().backward()
    torch.cuda.synchronize()
t0 = time.time()
if variant != "ro_only":
    run(torch.compile(model, dynamic=False), 3)
    torch._dynamo.reset()
try:
    run(torch.compile(model, mode="reduce-overhead", dynamic=False), 6, torch.compiler.cudagraph_mark_step_begin)
    print(f"{variant}: ro OK ({time.time()-t0:.0f}s)")
except Exception as exc:
    print(f"{variant}: ro FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:150]} ({time.time()-t0:.0f}s)")
'''
for v in sys.argv[1:] or ["default", "nocache"]:
    r = subprocess.run([sys.executable, "-c", CHILD, v], capture_output=True, text=True, timeout=300, cwd="/tmp")
    lines = [l for l in r.stdout.splitlines() if l.startswith(v + ":")]
    print(lines[-1] if lines else f"{v}: no result (exit {r.returncode}): {r.stderr.strip().splitlines()[-1:]}", flush=True)
