"""The gate's result object: checks, warnings, kernel evidence, exit code, JSON."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from roofscope.gate.evaluate import FAIL, PASS, SKIP, UNDECIDED, Check
from roofscope.jsonsafe import json_safe
from roofscope.text import shorten
from roofscope.version import __version__

SCHEMA_VERSION = 1
TOP_KERNELS = 10
EXIT_PASS, EXIT_FAIL, EXIT_UNDECIDED = 0, 1, 3   # 2: usage or input errors, raised before a result exists


@dataclass
class GateResult:
    """What :func:`roofscope.gate.check` found. ``passed`` / ``exit_code`` give the verdict;
    ``to_dict()`` the JSON; roofscope.reports.gate renders its text (``text(result)``)."""

    run: str
    baseline: str | None
    checks: list[Check]
    alpha: float
    warnings: list[str] = field(default_factory=list)
    kernels: pd.DataFrame | None = None    # analyzers.diff.compare_kernels(baseline, run), per step
    top_kernels: int = TOP_KERNELS

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def undecided(self) -> list[Check]:
        return [c for c in self.checks if c.status == UNDECIDED]

    @property
    def passed(self) -> bool:
        """Every check decided and passed: a check the samples cannot decide is not a pass."""
        return not self.failures and not self.undecided

    @property
    def exit_code(self) -> int:
        """0 pass, 1 regression, 3 cannot decide (usage and input errors raise before a result exists: 2)."""
        return EXIT_FAIL if self.failures else EXIT_UNDECIDED if self.undecided else EXIT_PASS

    def verdict(self) -> str:
        checked = [c for c in self.checks if c.status != SKIP]
        skipped = len(self.checks) - len(checked)
        if self.failures:
            names = ", ".join(c.name for c in self.failures)
            return f"FAIL: {len(self.failures)} of {len(checked)} checks regressed ({names})"
        if self.undecided:
            names = ", ".join(c.name for c in self.undecided)
            return (f"UNDECIDED: {len(self.undecided)} of {len(checked)} checks cannot be decided from these"
                    f" steps ({names}); not a pass")
        return f"PASS: {len(checked)} checks passed" + (f", {skipped} skipped" if skipped else "")

    def grown_kernels(self) -> pd.DataFrame:
        """Kernels whose time per step grew (slower or new), largest growth first."""
        if self.kernels is None:
            return pd.DataFrame()
        k = self.kernels
        grown = k[k["status"].isin(["slower", "appeared"]) & (k["delta_s"] > 0)]
        return grown.sort_values("delta_s", ascending=False, kind="stable").head(self.top_kernels)

    def class_changes(self) -> pd.DataFrame:
        """Kernels in both runs whose roofline class changed, largest time first."""
        if self.kernels is None:
            return pd.DataFrame()
        k = self.kernels
        both = k["status"].isin(["faster", "slower", "unchanged"]) & (k["cls_a"] != k["cls_b"])
        return k[both].sort_values("time_b_s", ascending=False, kind="stable").head(self.top_kernels)

    def culprits(self, n: int = 3) -> str:
        """The kernels that grew most, in one line: ``name +1.234 ms/step (memory), ...``."""
        k = self.grown_kernels().head(n)
        return ", ".join(f"{shorten(str(r.name), 48)} +{1e3 * r.delta_s:.3f} ms/step ({r.cls_b or '-'})"
                         for r in k.itertuples())

    def to_dict(self) -> dict[str, Any]:
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            return df.to_dict("records") if len(df) else []

        return json_safe({
            "schema_version": SCHEMA_VERSION, "roofscope_version": __version__,
            "run": self.run, "baseline": self.baseline, "passed": self.passed, "exit_code": self.exit_code,
            "verdict": self.verdict(), "alpha": self.alpha,
            "counts": {s: sum(c.status == s for c in self.checks) for s in (PASS, FAIL, SKIP, UNDECIDED)},
            "checks": [c.to_dict() for c in self.checks], "warnings": self.warnings,
            "evidence": {"grown_kernels": records(self.grown_kernels()),
                         "class_changes": records(self.class_changes())},
        })
