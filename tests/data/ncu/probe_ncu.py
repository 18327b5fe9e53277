import sys, torch, torch.nn.functional as F
mode = sys.argv[1] if len(sys.argv) > 1 else "plain"
dev = "cuda"
a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
c = torch.randn(1000, 1000, device=dev)
x = torch.randn(64 * 1024 * 1024, device=dev)
ln = torch.nn.LayerNorm(4096).to(dev)
h = torch.randn(8192, 4096, device=dev)
q = torch.randn(4, 16, 2048, 64, device=dev, dtype=torch.bfloat16)
def step():
    a @ b
    c @ c
    x + 1
    x.sum()
    ln(h)
    torch.softmax(h, -1)
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
prof = None
if mode == "kineto":
    from torch.profiler import profile, ProfilerActivity, schedule
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                   schedule=schedule(wait=1, warmup=1, active=2),
                   on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[2]))
    prof.start()
if mode == "expcfg":
    from torch.profiler import profile, ProfilerActivity
    from torch._C._profiler import _ExperimentalConfig
    cfg = _ExperimentalConfig(profiler_metrics=["kineto__tensor_core_insts", "dram__bytes_read.sum", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"], profiler_measure_per_kernel=True)
    with profile(activities=[ProfilerActivity.CUDA], experimental_config=cfg) as p:
        step(); torch.cuda.synchronize()
    p.export_chrome_trace(sys.argv[2]); print("expcfg exported"); sys.exit(0)
for i in range(5):
    if i == 2 and mode == "range":
        torch.cuda.synchronize(); torch.cuda.cudart().cudaProfilerStart()
    step()
    if i == 3 and mode == "range":
        torch.cuda.synchronize(); torch.cuda.cudart().cudaProfilerStop()
    if prof is not None:
        if i in (1, 3): torch.cuda.synchronize()
        prof.step()
if prof is not None: prof.stop()
torch.cuda.synchronize()
print("done", mode)
