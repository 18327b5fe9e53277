"""Records the h100_graph_*.json.gz fixtures (tests/data/README.md): what Kineto writes for a CUDA-graph
capture and its replays, and an HF GQA generate() trace for inspection. Run on a GPU machine:
``OUT=dir python tests/data/record_graph_fixtures.py``; the fixtures are OUT/<name>.json.gz renamed
h100_graph_<name>.json.gz (hf_gqa_tiny is not kept)."""
import gzip, json, os, shutil, traceback
from collections import Counter
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

OUT = os.environ.get("OUT", "/tmp/out")
ACTS = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
print("torch", torch.__version__, torch.cuda.get_device_name())
print("CUDAGraph python methods:", [m for m in ("capture_begin", "capture_end", "replay") if m in torch.cuda.CUDAGraph.__dict__])


def save(p, name):
    path = f"/tmp/{name}.json"
    p.export_chrome_trace(path)
    with open(path, "rb") as f, gzip.open(f"{OUT}/{name}.json.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    d = json.load(open(path))
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    print(f"== {name}: {len(ev)} events", Counter(e.get("cat") for e in ev))
    rt = Counter(e["name"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    print("   runtime:", dict(rt))
    return ev


class Step(torch.nn.Module):
    def __init__(s, d=512, hq=8, hkv=2, dh=64, S=256):
        super().__init__()
        s.q = torch.nn.Linear(d, hq * dh, bias=False)
        s.o = torch.nn.Linear(hq * dh, d, bias=False)
        s.hq, s.hkv, s.dh = hq, hkv, dh
        s.register_buffer("kc", torch.randn(1, hkv, S, dh))
        s.register_buffer("vc", torch.randn(1, hkv, S, dh))

    def forward(s, x):
        B = x.shape[0]
        q = s.q(x).view(B, 1, s.hq, s.dh).transpose(1, 2)
        o = torch.nn.functional.scaled_dot_product_attention(q, s.kc.expand(B, -1, -1, -1), s.vc.expand(B, -1, -1, -1),
                                                             enable_gqa=True)
        return torch.relu(s.o(o.transpose(1, 2).reshape(B, 1, -1))).sum(-1)


def graphs():
    torch.manual_seed(0)
    m = Step().cuda().to(torch.bfloat16).eval()
    x = torch.randn(4, 1, 512, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3): m(x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        with profile(activities=ACTS, record_shapes=True) as p:
            for _ in range(2):
                with record_function("eager"): m(x)
            torch.cuda.synchronize()
        ev = save(p, "eager")
        print("   eager kernels:", [e["name"][:60] for e in ev if e.get("cat") == "kernel"])
        g = torch.cuda.CUDAGraph()
        try:
            with profile(activities=ACTS, record_shapes=True) as p:
                with record_function("roofscope: graph capture 0"):
                    with torch.cuda.graph(g):
                        y = m(x)
                torch.cuda.synchronize()
            ev = save(p, "capture")
            print("   capture ops:", [(e["name"], e["args"].get("Input Dims")) for e in ev if e.get("cat") == "cpu_op"][:40])
            print("   capture runtime args sample:", [e["args"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")][:6])
        except Exception:
            traceback.print_exc()
        with profile(activities=ACTS, record_shapes=True) as p:
            for _ in range(3):
                with record_function("roofscope: graph replay 0"):
                    g.replay()
            torch.cuda.synchronize()
        ev = save(p, "replay")
        ks = [e for e in ev if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
        print("   replay kernels:", [(e["name"][:60], e["args"].get("correlation"), e["args"].get("External id"), e["args"].get("stream")) for e in ks])
        # the live pattern: session profiler idle in its wait step while a second profiler records the capture
        g2 = torch.cuda.CUDAGraph()
        main = profile(activities=ACTS, record_shapes=True, schedule=schedule(wait=1, warmup=1, active=2))
        main.start()
        try:
            print("   profiler enabled in wait:", torch.autograd.profiler._is_profiler_enabled)
            with profile(activities=ACTS, record_shapes=True) as p2:
                with torch.cuda.graph(g2):
                    y2 = m(x)
            save(p2, "capture_live")
        except Exception:
            traceback.print_exc()
        for i in range(4):
            g2.replay(); main.step()
        torch.cuda.synchronize()
        main.stop()
        save(main, "replay_live")
        # capture while the main profiler is RECORDING
        g3 = torch.cuda.CUDAGraph()
        try:
            with profile(activities=ACTS, record_shapes=True) as p:
                with record_function("roofscope: graph capture 3"):
                    with torch.cuda.graph(g3):
                        y3 = m(x)
                for _ in range(2):
                    with record_function("roofscope: graph replay 3"):
                        g3.replay()
                torch.cuda.synchronize()
            save(p, "capture_and_replay")
        except Exception:
            traceback.print_exc()


def hf():
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    print("transformers", transformers.__version__)
    cfg = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0, eos_token_id=None, bos_token_id=None)
    with torch.device("cuda"):
        m = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    print("attn impl", m.config._attn_implementation)
    ids = torch.randint(1, 1024, (1, 32), device="cuda")
    kw = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)
    m.generate(ids, **kw)
    torch.cuda.synchronize()
    with profile(activities=ACTS, record_shapes=True) as p:
        m.generate(ids, **kw)
        torch.cuda.synchronize()
    ev = save(p, "hf_gqa_tiny")
    ops = Counter(e["name"] for e in ev if e.get("cat") == "cpu_op" and "attention" in e["name"])
    print("   attention ops:", ops)
    print("   attn dims:", {e["name"]: e["args"].get("Input Dims") for e in ev if e.get("cat") == "cpu_op" and "attention" in e["name"]})


for f in (graphs, hf):
    try:
        f()
    except Exception:
        traceback.print_exc()
