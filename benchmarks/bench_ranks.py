"""Speed of `roofscope merge` on many rank traces: the HTA A100 rank trace replicated N times
(copies with distributedInfo.rank rewritten, in a temporary directory), merged with
``--jobs 2`` and, on a subset, with ``--jobs 1`` for comparison.

    python benchmarks/bench_ranks.py [--trace PATH] [--ranks 64] [--subset 8]

Each case runs `roofscope merge` in a fresh subprocess (imports and worker start-up
included, as a user sees it) and prints its wall time.
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


def replicate(trace: Path, n: int, into: Path) -> list[Path]:
    """``n`` copies of ``trace`` with ranks 0..n-1 and world size n."""
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    events = doc.pop("traceEvents")
    paths = []
    for r in range(n):
        # distributedInfo first, as Kineto writes it: the merge reads ranks from the file's head.
        head = {**doc, "distributedInfo": {**(doc.get("distributedInfo") or {}), "rank": r, "world_size": n}}
        data = json.dumps({**head, "traceEvents": events}).encode()
        p = into / f"rank{r:04d}.json.gz"
        p.write_bytes(gzip.compress(data, compresslevel=1))
        paths.append(p)
    return paths


def merge(paths: list[Path], jobs: int, out: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "roofscope", "merge", *map(str, paths), "-o", str(out), "--jobs",
                    str(jobs), "-q", "--force"], check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--subset", type=int, default=8)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"skipped: {args.trace} not found")
        return
    with tempfile.TemporaryDirectory() as tmp:
        paths = replicate(args.trace, args.ranks, Path(tmp))
        load = os.getloadavg()[0]
        rows = [(args.subset, 1, merge(paths[:args.subset], 1, Path(tmp) / "o1")),
                (args.subset, 2, merge(paths[:args.subset], 2, Path(tmp) / "o2")),
                (args.ranks, 2, merge(paths, 2, Path(tmp) / "o3"))]
    print(f"load average before: {load:.1f} (other processes share the cores)")
    print("| ranks | jobs | wall s | s per rank |\n|---:|---:|---:|---:|")
    for n, jobs, wall in rows:
        print(f"| {n} | {jobs} | {wall:.1f} | {wall / n:.2f} |")


if __name__ == "__main__":
    main()
