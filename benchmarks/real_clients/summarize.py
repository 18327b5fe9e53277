"""Summarize the real-client Runs for docs/validation.md: per client the phase table, MFU/HFU
and the formula used, the top findings and changes, kernels above their roof, the class
agreement with ncu counters (when the Run has them), and, for a client run again with its fix
applied (RUN_compile), the top change's predicted saving against the measured one.

    python benchmarks/real_clients/summarize.py [--ceilings FILE] rc/hf_trainer_llama rc/lightning_cnn ...

--ceilings re-analyzes every Run against a ceilings file (`roofscope microbench --out`) instead of
the ceilings each Run was recorded with.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import roofscope
from roofscope.analyzers.compare.diff import diff


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def client(run: Path, ceilings: Any = None) -> None:
    a = roofscope.analyze(run, ceilings=ceilings)
    s = a.to_dict()
    m = s["metrics"]
    print(f"### {run.name}\n")
    print(f"device {s['device']}, ceilings {a.ceilings.source} (bandwidth {a.ceilings.bandwidth / 1e12:.2f} TB/s),"
          f" frameworks {s['diagnosis'].get('frameworks')}, step {ms(m['step_time_s'])} ms\n")
    print("| phase | GPU time ms/step | share | kernels/step | compute | memory | latency | underutilized |")
    print("|---|---|---|---|---|---|---|---|")
    for p, r in s["phases"].items():
        cls = [ms(r.get(f"{c}_s", 0.0)) for c in ("compute", "memory", "latency", "underutilized")]
        print(f"| {p} | {ms(r['time_s'])} | {pct(r['share'])} | {r['kernels']:.0f} | {' | '.join(cls)} |")
    print(f"\nMFU {pct(m['mfu'])} ({m['mfu_source']}: {m.get('mfu_formula')}), HFU {pct(m['hfu'])}"
          f" ({m.get('hfu_source')}), peak {m['peak_roof']}\n")
    k = a.kernels
    eff = k["efficiency"]
    above = k[eff > 1.0]
    print(f"kernels above their roof: {len(above)} of {len(k)} launches"
          f" ({above['dur_s'].sum() / max(k['dur_s'].sum(), 1e-30):.1%} of kernel time), max efficiency"
          f" {eff.max():.3f}\n")
    if "counters" in s:
        c = s["counters"]
        print(f"counters: {c}\n")
    for f in s["findings"][:3]:
        print(f"- #{f['rank']} {f['rule']} ({f['change']}): {f['title']}: {ms(f['saving_s'])} ms"
              f" ({pct(f['saving_pct'])}); fix: `{(f['fix']['snippet'].splitlines() or ['-'])[0]}`")
    print()
    for c in s["diagnosis"]["changes"][:3]:
        print(f"- change #{c['rank']} {c['change']} ({'+'.join(c['rules'])}): {ms(c['saving_s'])} ms/step")
    # the client run again with its fix: RUN_compile, or RUN_compile_MODE (--compile MODE)
    fixed = next(iter(sorted(run.parent.glob(f"{run.name}_compile*/"))), None)
    if fixed is not None:
        p = diff(a, roofscope.analyze(fixed, ceilings=ceilings), applied="torch_compile" if any(
            c["change"] == "torch_compile" for c in s["diagnosis"]["changes"]) else None).prediction
        print(f"\napplied fix ({fixed.name}): {p.rule}: predicted {ms(p.predicted_s)} ms, measured"
              f" {ms(p.measured_s)} ms, ratio {p.ratio if p.ratio is None else round(p.ratio, 2)}: {p.verdict}")
    print()


if __name__ == "__main__":
    args = sys.argv[1:]
    ceilings = None
    if args[:1] == ["--ceilings"]:
        from roofscope.hardware.devices import load_ceilings_file

        ceilings, args = load_ceilings_file(args[1]), args[2:]
    for r in args:
        client(Path(r), ceilings)
