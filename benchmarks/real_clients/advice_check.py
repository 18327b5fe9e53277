"""Checks the advice roofscope gives the issue-37 clients (docs/diagnosis.md): reads each Run
under rc/ (its summary recomputed if an older analysis wrote it) and prints, per client, the program
roofscope saw, the top findings (status, kind, saving, apply, the snippet's first line) and PASS/FAIL
for what must hold:

* lora_accum: CUDA graphs blocked by several forwards per step (outputs_reused); nothing applies reduce-overhead;
* unet_attention: SDPA's math fallback named with its reason (strides); no fix sets is_causal;
* llama_decode_loop: a decode loop of its own (no generate() named); a StaticCache and a compiled forward;
* gpt2_generate: the static cache, applied as static_cache;
* hf_bert_trainer: fusion counts the forward and backward only (its saving is printed beside the step);
* torchvision_detection: no compile saving claimed for torchvision's kernels; the inspection is advice;
* triton_loop: no fix names a loss.

    python benchmarks/real_clients/advice_check.py rc    # after device_advice.sh
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import roofscope


def code(snippet: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in snippet.splitlines())


def check(name: str, s: dict) -> list[tuple[str, bool]]:
    f = s["findings"]
    by = {x["rule"]: x for x in f}
    prog = s["diagnosis"].get("program") or {}
    applies = [x["fix"].get("apply", "") for x in f]
    if name == "lora_accum":
        g = by.get("cuda_graphs", {})
        return [("forwards_per_step == 4", prog.get("forwards_per_step") == 4),
                ("cuda_graphs blocked by outputs_reused", g.get("status") == "blocked"
                 and any(b["kind"] == "outputs_reused" for b in g.get("blockers", []))),
                ("no apply compile:reduce-overhead", all("reduce-overhead" not in a for a in applies))]
    if name == "unet_attention":
        a = by.get("sdpa", {})
        return [("sdpa: math backend, strides", "math backend (strides)" in a.get("title", "")),
                ("no is_causal in any fix", all("is_causal" not in code(x["fix"]["snippet"]) for x in f))]
    if name == "llama_decode_loop":
        d = by.get("launch_bound_decode", {})
        return [("kind decode_loop", prog.get("kind") == "decode_loop"),
                ("StaticCache + compiled forward", "StaticCache" in d.get("fix", {}).get("snippet", "")),
                # the call, or its config, not the word ("generated tokens")
                ("generate() named nowhere", all(not re.search(r"generate\(|generation_config|static_cache",
                                                               x["fix"]["snippet"] + x["fix"]["text"]) for x in f))]
    if name == "gpt2_generate":
        d = by.get("launch_bound_decode", {})
        return [("kind generate", prog.get("kind") == "generate"),
                ("apply static_cache", d.get("fix", {}).get("apply") == "static_cache")]
    if name == "hf_bert_trainer":
        fu = by.get("fusion")
        return [("fusion saving (printed)", True)] + ([] if fu is None else [
            (f"fusion {fu['saving_s'] * 1e3:.3f} ms = {100 * fu['saving_pct']:.1f}% (was 2.83 ms, 7.3%)", True)])
    if name == "torchvision_detection":
        sg, uu = by.get("small_grid"), by.get("underutilized")
        return [("small_grid: no saving from torchvision's kernels", sg is None or sg["status"] == "blocked"
                 or not any(k["op"].startswith("torchvision::") for k in sg["evidence"]["kernels"])),
                ("underutilized is advice", uu is None or (uu["kind"] == "advice" and uu["saving_s"] == 0))]
    if name == "triton_loop":
        return [("no loss in any fix", all("loss" not in x["fix"]["snippet"] for x in f))]
    return []


def main(root: str) -> int:
    bad = 0
    for d in sorted(Path(root).iterdir()):
        if not (d / "run.json").is_file():
            continue
        s = roofscope.load(d).summary()   # recomputed where an older analysis wrote it
        prog = (s["diagnosis"].get("program") or {}).get("words", "")
        print(f"== {d.name}: {prog}; step {s['diagnosis']['step_s'] * 1e3:.3f} ms")
        for x in s["findings"][:4]:
            first = (x["fix"]["snippet"] or x["fix"]["text"]).splitlines()[0][:110]
            print(f"  {x['rank']}. {x['rule']} [{x.get('status')}/{x.get('kind')}] -{x['saving_s'] * 1e3:.3f} ms"
                  f" apply={x['fix'].get('apply')!r}: {first}")
        for what, ok in check(d.name, s):
            print(f"  {'PASS' if ok else 'FAIL'} {what}")
            bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "rc"))
