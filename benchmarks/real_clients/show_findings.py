"""A Run's top findings as the verify step will read them: rule, kind, saving and the fix it injects."""
import json
import sys

from roofscope.fixes import derive

s = json.load(open(sys.argv[1] + "/summary.json"))
if "--roof" in sys.argv:   # kernels above their roof, and how much GPU time has no cost (issue 39)
    above, un = s.get("above_roof") or {}, s.get("unattributed") or {}
    print(f"{sys.argv[1]}: above roof {above.get('kernels', 0)} kernels {[t.get('name', '')[:50] for t in above.get('top', [])][:3]};"
          f" uncosted {100 * (un.get('share') or 0):.1f}%; ceilings {(s.get('ceilings') or {}).get('source')}")
print(f"{sys.argv[1]}: own step {((s.get('step_time') or {}).get('unprofiled_median_s') or 0) * 1e3:.3f} ms;"
      f" program: {((s.get('diagnosis') or {}).get('program') or {}).get('words')}")
for f in s.get("findings", [])[:6]:
    fix = f.get("fix") or {}
    spec = fix["apply"] if "apply" in fix else derive(f["rule"], f.get("change", ""))
    print(f"  {f['rank']}. {f['rule']} [{f.get('kind', 'fix')}/{f.get('status')}] -{f['saving_s'] * 1e3:.3f} ms/step"
          f" apply={spec or '(source edit)'!r}: {fix.get('text', '')[:160]}")
