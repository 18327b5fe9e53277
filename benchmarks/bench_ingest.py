"""Ingestion and full-analysis speed and peak memory on real traces.

Builds a 10x replicated copy of the HTA A100 trace (each copy shifted in time and
in its correlation / External ids, so linking stays one-to-one), then, each case in
a fresh subprocess so peak RSS is its own:

* decode only: json (stdlib), orjson (when installed), msgspec typed structs of the whole file at once,
* roofscope ingest (ingest.read: the file read as a stream, regions decoded into columns) and full
  analysis (ingest + costs + classes).

    python benchmarks/bench_ingest.py [--trace PATH] [--copies 10] [--repeat 3]

Timings are in-process wall times after imports (the last case: imports included, from the
first line of the script; start-up of the interpreter itself excluded, ~0.03 s); peak RSS is
the subprocess's VmHWM, imports included. Analysis imports no torch (1.5 s here), so none is
imported.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "external" / "hta_a100_rank0.json.gz"

_CASES = {
    "decode json": "import json,gzip\nT0()\njson.loads(gzip.decompress(open(P,'rb').read()))",
    "decode orjson": "import orjson,gzip\nT0()\norjson.loads(gzip.decompress(open(P,'rb').read()))",
    "decode msgspec (typed, whole file)": (
        "from roofscope.analyzers.ingest.source import read_chunks\n"
        "from roofscope.analyzers.ingest.kineto import decode\nT0()\ndecode(P, b''.join(read_chunks(P)))"),
    "roofscope ingest (streamed)": "from roofscope.analyzers.ingest import read\nT0()\nread(P)",
    "roofscope full analysis": (
        "from roofscope.analysis import analyze\nfrom roofscope.reports.export import to_json\n"
        "T0()\na=analyze(P)\nto_json(a)"),
    "roofscope analyze --json, whole process": "T0()\nfrom roofscope.cli import main\nmain(['analyze', P, "
                                               "'--json', '/dev/null', '-q', '-f'])",
}

_PRELUDE = """
import sys, time
P = sys.argv[1]
_t = [0.0]
def T0(): _t[0] = time.perf_counter()
"""
_EPILOGUE = """
dt = time.perf_counter() - _t[0]
# VmHWM, not ru_maxrss: the latter survives exec and would report the parent's peak.
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]
print(f"{dt:.4f} {int(hwm) / 1024:.1f}")
"""


def replicate(src: Path, copies: int, dst: Path) -> int:
    """Write ``copies`` back-to-back copies of a trace; returns the event count."""
    import msgspec

    doc = msgspec.json.decode(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))) - min(ts)
    id_span = 1 + max(max((e.get("args") or {}).get(k, 0) or 0 for k in ("correlation", "External id"))
                      if isinstance(e.get("args"), dict) else 0 for e in events)
    out = []
    for i in range(copies):
        shift, id_shift = i * (span + 1000), i * id_span
        for e in events:
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + shift
            if e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                e2["id"] += id_shift
            a = e2.get("args")
            if isinstance(a, dict):
                a = dict(a)
                for k in ("correlation", "External id"):
                    if isinstance(a.get(k), int) and a[k] > 0:
                        a[k] += id_shift
                if isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e2['name'][13:]) + i * 100}"
                e2["args"] = a
            out.append(e2)
    doc["traceEvents"] = out
    dst.write_bytes(gzip.compress(msgspec.json.encode(doc), compresslevel=3))
    return len(out)


def run_case(code: str, path: Path) -> tuple[float, float]:
    script = _PRELUDE + code + _EPILOGUE
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise RuntimeError(res.stderr.strip().splitlines()[-1])
    dt, rss = res.stdout.split()
    return float(dt), float(rss)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the best time is kept")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / f"replicated_{args.copies}x.json.gz"
        n_big = replicate(args.trace, args.copies, big)
        n_small = len(json.loads(gzip.decompress(args.trace.read_bytes()))["traceEvents"])
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n")
        print(f"| case | trace | events | time s (best of {args.repeat}) | peak RSS MB |")
        print("|---|---|---:|---:|---:|")
        for label, path, n in ((args.trace.name, args.trace, n_small), (big.name, big, n_big)):
            for case, code in _CASES.items():
                if case == "decode orjson" and importlib.util.find_spec("orjson") is None:
                    continue  # not a roofscope dependency
                runs = [run_case(code, path) for _ in range(args.repeat)]
                best = min(r[0] for r in runs)
                rss = max(r[1] for r in runs)
                print(f"| {case} | {label} | {n:,} | {best:.2f} | {rss:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
