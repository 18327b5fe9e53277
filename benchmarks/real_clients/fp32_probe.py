"""Which fp32 GEMM layouts/shapes reach the detector's CUTLASS SIMT sgemm rate (53.6 TFLOP/s)?"""
import time, torch
from roofscope.microbench.timing import time_cuda
torch.backends.cuda.matmul.allow_tf32 = False
def run(m, n, k, ta, tb):
    a = torch.randn(k, m, device="cuda").t() if ta else torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda").t() if tb else torch.randn(k, n, device="cuda")
    time.sleep(0.2)
    s = time_cuda(lambda: torch.mm(a, b), target_s=0.05)
    t = s.min
    print(f"{m}x{n}x{k} ta={ta} tb={tb}: {2*m*n*k/t/1e12:.1f} TFLOP/s", flush=True)
for shape in [(1024, 12544, 2048), (2048, 12544, 1024), (4096, 4096, 4096), (1024, 16384, 2048), (2048, 16384, 2048), (8192, 8192, 8192)]:
    for ta in (False, True):
        for tb in (False, True):
            run(*shape, ta, tb)
