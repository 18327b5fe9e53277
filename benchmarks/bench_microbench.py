"""Run roofscope's GPU microbenchmarks and print every result beside its datasheet figure.

    python benchmarks/bench_microbench.py [--quick] [--index N] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys

from roofscope.microbench.gpu import measure_gpu

_SCALE = {"FLOP/s": (1e12, "TFLOP/s"), "B/s": (1e12, "TB/s"), "s": (1e-6, "us")}


def table(ceilings) -> str:
    env = ceilings.env
    lines = [f"{ceilings.device} | torch {env['torch']} | CUDA {env['cuda']} | driver {env['driver']} | "
             f"SM max {env['sm_clock_max_mhz']} MHz | runtime {env['runtime_s']:.1f} s",
             "| benchmark | value | unit | % datasheet | median | min | max | config | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in env["results"]:
        div, unit = _SCALE[r["unit"]]
        if r["value"] is None:
            lines.append(f"| {r['name']} | - | {unit} | - | - | - | - | {r['error']} | {r['seconds']:.2f} |")
            continue
        pct = f"{100 * r['value'] / r['datasheet']:.1f}%" if r["datasheet"] else "-"
        lines.append(f"| {r['name']} | {r['value'] / div:.3g} | {unit} | {pct} | {r['median'] / div:.3g} | "
                     f"{r['min'] / div:.3g} | {r['max'] / div:.3g} | {r['config']} | {r['seconds']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--json", help="also write the Ceilings as JSON here")
    args = ap.parse_args(argv)
    c = measure_gpu(args.index, quick=args.quick,
                    progress=lambda name, i, n: print(f"[{i + 1}/{n}] {name}", file=sys.stderr, flush=True))
    print(table(c))
    for note in c.notes:
        print("note:", note)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(c.to_dict(), f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
