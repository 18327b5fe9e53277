"""GPU validation of the diagnosis (issue 5): profile a workload, take roofscope's top
recommendation, apply it, re-profile, and compare the predicted saving with the measured one.

    python benchmarks/validate_rules.py OUTDIR [--only NAME ...]
    python benchmarks/validate_rules.py OUTDIR --runs DIR    # re-analyze Runs recorded before

Each workload is a pair of `roofscope run` invocations (before, after the fix); the table
printed at the end is what docs/validation.md quotes. OUTDIR gets results.json (the before
run's findings, both runs' metrics) and the `roofscope run` logs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# name: (expected top rule, roofscope run args before, args after the fix, what the fix is)
WORKLOADS = {
    "decode_b1": ("cuda_graphs", ["--active", "10", "examples/decode.py", "--batch", "1", "--new-tokens", "48"],
                  ["--active", "10", "examples/decode.py", "--batch", "1", "--new-tokens", "48", "--cuda-graph"],
                  "decode step replayed as a CUDA graph"),
    "pointwise_eager": ("fusion", ["examples/pointwise.py", "--steps", "10"],
                        ["examples/pointwise.py", "--steps", "10", "--compile"], "torch.compile"),
    "mlp_fp32": ("tf32", ["examples/mlp.py", "--steps", "10", "--width", "4096", "--batch", "8192"],
                 ["examples/mlp.py", "--steps", "10", "--width", "4096", "--batch", "8192", "--tf32"],
                 "torch.set_float32_matmul_precision('high')"),
    "gpt_eager": ("fusion", ["examples/gpt.py", "--steps", "8"], ["examples/gpt.py", "--steps", "8", "--compile"],
                  "torch.compile"),
}


def profile(out: Path, name: str, args: list[str], runs: Path | None) -> tuple[Path, float]:
    if runs is not None:
        return runs / name, float("nan")
    run_dir = Path("/tmp/roofscope-validate") / name
    t0 = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "roofscope", "run", "-q", "--no-report", "-o", str(run_dir),
                              "--force", *args], stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.exit(f"{name}: roofscope run exited {rc}; see {out / (name + '.log')}")
    return run_dir, time.perf_counter() - t0


def main() -> int:
    import roofscope

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--runs", type=Path, help="analyze the Runs already in this directory instead of profiling")
    opts = ap.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    results = {}
    rows = []
    for name, (expected, before, after, fix) in WORKLOADS.items():
        if opts.only and name not in opts.only:
            continue
        a_dir, wall_a = profile(opts.out, name + "_before", before, opts.runs)
        b_dir, wall_b = profile(opts.out, name + "_after", after, opts.runs)
        a, b = roofscope.analyze(a_dir), roofscope.analyze(b_dir)
        sa, sb = a.to_dict(), b.to_dict()
        top = sa["findings"][0] if sa["findings"] else None
        pred = next((f for f in sa["findings"] if f["rule"] == expected), None)
        step_a, step_b = sa["metrics"]["step_time_s"], sb["metrics"]["step_time_s"]
        measured = step_a - step_b
        results[name] = {"fix": fix, "expected_rule": expected, "top_rule": top and top["rule"],
                         "findings": sa["findings"], "binding": sa["diagnosis"]["binding"],
                         "skipped": sa["diagnosis"]["skipped"], "metrics_before": sa["metrics"],
                         "metrics_after": sb["metrics"], "findings_after": sb["findings"],
                         "ceilings": sa["ceilings"]["source"], "wall_s": [wall_a, wall_b]}
        rows.append((name, top["rule"] if top else "-", fix, step_a * 1e3,
                     pred["saving_s"] * 1e3 if pred else float("nan"), pred["saving_pct"] if pred else float("nan"),
                     step_b * 1e3, measured * 1e3, measured / step_a,
                     measured / pred["saving_s"] if pred and pred["saving_s"] else float("nan")))
        (opts.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print("| workload | top rule | fix applied | step before ms | predicted ms (%) | step after ms |"
          " measured ms (%) | measured / predicted |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for n, rule, fix, sa_, p, pp, sb_, m, mp, ratio in rows:
        print(f"| {n} | {rule} | {fix} | {sa_:.3f} | {p:.3f} ({pp:.0%}) | {sb_:.3f} | {m:.3f} ({mp:.0%}) | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
