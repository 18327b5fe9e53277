"""roofscope against Holistic Trace Analysis (HTA) on the same traces, side by side and interleaved.

For each trace (the HTA A100 rank trace, and the same trace copied N times back to back with
shifted timestamps and ids, built by bench_ingest.replicate), each repeat runs, one after the
other in fresh processes:

* roofscope: ``python -m roofscope analyze TRACE --json OUT -q`` (start-up, ingestion, costs,
  roofline, timeline, metrics, diagnosis, JSON written), this checkout's code;
* HTA: ``TraceAnalysis(trace_dir=...)`` (its load and parse) followed by
  ``get_temporal_breakdown()`` (its cheapest whole-trace analysis), start-up included.

Both are timed from outside (wall, best of --repeat) with the child's peak RSS from wait4;
the table gives the ratio HTA / roofscope (above 1: roofscope is faster). HTA is installed
from PyPI (package HolisticTraceAnalysis) into its own virtual environment under the cache
directory (default ~/.cache/roofscope-bench/hta-venv), never into this project's environment.

    python benchmarks/bench_vs_hta.py [--trace PATH] [--copies 10] [--repeat 2] [--venv DIR]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import DEFAULT_TRACE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "roofscope-bench" / "hta-venv"
REPLICATE = """
import gzip, json, sys
from pathlib import Path
from bench_ingest import replicate
src, copies, dst = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
if copies == 1:
    dst.symlink_to(src.resolve())
    print(len(json.loads(gzip.decompress(src.read_bytes()))["traceEvents"]))
else:
    print(replicate(src, copies, dst))
"""
HTA_CODE = """
import sys, time
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
a.get_temporal_breakdown(visualize=False)
print(f"{t1 - t:.3f} {time.perf_counter() - t1:.3f}")
"""


def ensure_hta(venv: Path) -> Path:
    """The venv's python, with HTA installed (created on first use)."""
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", "import hta"], capture_output=True).returncode == 0:
        return python
    print(f"installing HolisticTraceAnalysis into {venv} ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "HolisticTraceAnalysis"], check=True)
    return python


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB (the child's, from wait4) and stdout of one command."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}")
    return wall, usage.ru_maxrss / 1024, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--copies", type=int, default=10, help="copies in the large trace (0: only the trace)")
    ap.add_argument("--repeat", type=int, default=2, help="interleaved runs per tool and trace; the best is kept")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="HTA's virtual environment")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    hta_python = ensure_hta(args.venv)
    # pip compiles an installed package's bytecode (HTA's here); a checkout run with
    # PYTHONDONTWRITEBYTECODE set would compile roofscope's ~70 modules again in every run (~0.1 s).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "roofscope")], check=True)
    load = os.getloadavg()[0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for label, copies in (("trace", 1), (f"x{args.copies}", args.copies)):
            if copies < 1 or (label != "trace" and copies == 1):
                continue
            d = Path(tmp) / label
            d.mkdir()
            path = d / "rank0.json.gz"
            # In a child, so that this process stays small: a forked child starts with its
            # parent's peak RSS, which wait4 would report as the child's.
            out = subprocess.run([sys.executable, "-c", REPLICATE, str(args.trace), str(copies), str(path)],
                                 check=True, capture_output=True, text=True, cwd=Path(__file__).parent)
            events = int(out.stdout)
            cases.append((label, d, path, events))
        results: dict[str, dict[str, list[tuple[float, float]]]] = {c[0]: {"roofscope": [], "hta": []} for c in cases}
        for _ in range(args.repeat):
            for label, d, path, _n in cases:
                rs = timed([sys.executable, "-m", "roofscope", "analyze", str(path),
                            "--json", str(Path(tmp) / "s.json"), "-q", "--force"], env)
                results[label]["roofscope"].append(rs[:2])
                hta = timed([str(hta_python), "-c", HTA_CODE, str(d)])
                results[label]["hta"].append(hta[:2])
                print(f"{label}: roofscope {rs[0]:.2f} s, HTA {hta[0]:.2f} s (load {hta[2].split()[0]} s)",
                      file=sys.stderr, flush=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average before {load:.1f}; "
          f"best of {args.repeat}, interleaved\n")
    print("| trace | events | roofscope analyze --json s | HTA load + temporal breakdown s | HTA / roofscope "
          "| roofscope peak RSS MB | HTA peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, _d, _p, n in cases:
        r = min(t for t, _ in results[label]["roofscope"])
        h = min(t for t, _ in results[label]["hta"])
        rr = max(m for _, m in results[label]["roofscope"])
        hr = max(m for _, m in results[label]["hta"])
        name = args.trace.name if label == "trace" else f"{args.trace.name} x{args.copies}"
        print(f"| {name} | {n:,} | {r:.2f} | {h:.2f} | {h / r:.1f}x | {rr:.0f} | {hr:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
