"""Speed of `roofscope merge` on many synthetic ranks: the HTA A100 rank trace (109k events) copied
once per rank with distributedInfo.rank rewritten, merged by local worker processes (``--jobs``)
and by a Dask distributed cluster (``--scheduler local:N``: a scheduler and N worker processes
started for the merge; a remote ``tcp://`` address works the same way).

    python benchmarks/bench_ranks.py [--trace PATH] [--ranks 64,512] [--jobs 2] [--engines processes,dask]

A rank file is two gzip members: a head holding the rank (written per rank) and the events
(compressed once), so 512 ranks are written in seconds. Each case runs `roofscope merge` in a
fresh subprocess (imports, worker or cluster start-up and the HTML report included, as a user
sees it) and prints its wall time.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "external" / "hta_a100_rank0.json.gz"
ROOT = Path(__file__).resolve().parents[1]


def replicate(trace: Path, n: int, into: Path) -> list[Path]:
    """``n`` copies of ``trace`` with ranks 0..n-1 and world size n."""
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    events = doc.pop("traceEvents")
    body = gzip.compress(b'"traceEvents": ' + json.dumps(events).encode() + b"}", compresslevel=1)
    paths = []
    for r in range(n):
        # distributedInfo in the head, as Kineto writes it before the events: the merge reads ranks there.
        head = {**doc, "distributedInfo": {**(doc.get("distributedInfo") or {}), "rank": r, "world_size": n}}
        p = into / f"rank{r:04d}.json.gz"
        p.write_bytes(gzip.compress(json.dumps(head).encode()[:-1] + b", ") + body)
        paths.append(p)
    return paths


def merge(source: Path, out: Path, engine: str, jobs: int) -> float:
    how = ["--jobs", str(jobs)] if engine == "processes" else ["--scheduler", f"local:{jobs}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "roofscope", "merge", str(source), "-o", str(out), *how, "-q", "--force"],
                   check=True, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--ranks", default="64,512", help="comma-separated rank counts")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (both engines)")
    ap.add_argument("--engines", default="processes,dask")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"skipped: {args.trace} not found")
        return
    load = os.getloadavg()[0]
    rows = []
    for n in map(int, args.ranks.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "ranks"
            src.mkdir()
            replicate(args.trace, n, src)
            for engine in args.engines.split(","):
                wall = merge(src, Path(tmp) / f"out-{engine}", engine, args.jobs)
                rows.append((n, engine, wall))
                print(f"{n} ranks, {engine}: {wall:.1f} s", file=sys.stderr, flush=True)
    print(f"{os.cpu_count()} CPUs, load average before {load:.1f} (other processes share the cores); "
          f"{args.jobs} workers\n")
    print("| ranks | engine | wall s | s per rank |\n|---:|---|---:|---:|")
    for n, engine, wall in rows:
        print(f"| {n} | {engine} | {wall:.1f} | {wall / n:.3f} |")


if __name__ == "__main__":
    main()
