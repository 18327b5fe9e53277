"""Do the CPU roofs hold? Runs the CPU examples under `roofscope run` a few times and prints,
per run, the ops above their roof and the highest efficiency (issue 29 item 4).

    python benchmarks/cpu_roofs.py [--repeats 3] [--fresh-cache]

``--fresh-cache`` starts from an empty ceilings cache in a temporary folder (the first run
measures, the later ones reuse it); without it, the user's cache is used as `roofscope run` would.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = {
    "mlp": ["examples/mlp.py"],
    "pointwise": ["examples/pointwise.py"],
    "gpt": ["examples/gpt.py", "--steps", "6"],
}


def check(run_dir: Path) -> tuple[int, float, str]:
    """(ops above their roof, highest efficiency, the op that reached it) of a Run."""
    import roofscope

    k = roofscope.analyze(run_dir / "trace.json.gz", ceilings_file=run_dir / "ceilings.json").kernels
    eff = k["efficiency"].dropna()
    if eff.empty:
        return 0, float("nan"), "-"
    top = eff.idxmax()
    bound = "compute" if k.at[top, "compute_bound"] else f"memory {k.at[top, 'roof_level'] or 'DRAM'}"
    return int(k["above_roof"].sum()), float(eff.max()), f"{k.at[top, 'name']}, {bound}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fresh-cache", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        if args.fresh_cache:
            env["ROOFSCOPE_CACHE_DIR"] = str(Path(tmp) / "cache")
        worst = 0.0
        for i in range(args.repeats):
            for name, cmd in JOBS.items():
                out = Path(tmp) / f"{name}-{i}"
                t = time.perf_counter()
                res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-q", "-o", str(out), *cmd],
                                     cwd=ROOT, env=env, capture_output=True, text=True)
                if res.returncode != 0:
                    print(f"{name} run {i}: exit {res.returncode}: {res.stderr.strip()[-300:]}")
                    continue
                above, eff, where = check(out)
                worst = max(worst, eff)
                print(f"{name:10s} run {i}: {above} ops above their roof, highest efficiency {eff:.3f} ({where});"
                      f" {time.perf_counter() - t:.1f} s", flush=True)
        print(f"highest efficiency over all runs: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
