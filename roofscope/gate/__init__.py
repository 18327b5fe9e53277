"""The CI regression gate: check a run against absolute bounds and a committed baseline.

From pytest::

    from roofscope.gate import check
    from roofscope.reports.gate import text

    def test_no_efficiency_regression():
        result = check("runs/bench", "benchmarks/baseline.json", max_regression="mfu=5%,step_time=5%")
        assert result.passed, text(result)

``run`` is a Run directory, a trace or a Result; ``baseline`` a baseline file (see
:func:`write_baseline`), a Run directory, a trace or a Result. Limits, statistics and
exit codes: docs/gate.md.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable, Mapping

from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write, check_writable
from roofscope.gate.evaluate import (SKIP, Check, check_bound, kernel_evidence, refuse_incomparable,
                                     regression_checks, warnings_for)
from roofscope.gate.result import TOP_KERNELS, GateResult
from roofscope.gate.snapshot import KERNELS_KEPT, GateInputError, Snapshot, load_baseline, snapshot_of
from roofscope.gate.stats import ALPHA
from roofscope.gate.thresholds import Limit, bounds, parse_limits

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result

__all__ = ["ALPHA", "KERNELS_KEPT", "Check", "GateResult", "Limit", "Snapshot", "check", "load_baseline",
           "write_baseline"]


class NothingToCheckError(RoofscopeError):
    """Neither a baseline nor an absolute bound was given."""


def check(run: "str | os.PathLike | Result | Snapshot",
          baseline: "str | os.PathLike | Result | Snapshot | None" = None, *,
          min_mfu: float | str | None = None, min_hfu: float | str | None = None,
          min_mbu: float | str | None = None, max_step_time_ms: float | None = None,
          max_idle_fraction: float | str | None = None, max_step_time: float | str | None = None,
          max_regression: str | Iterable[str] | Mapping[str, str | Limit | None] | None = None,
          alpha: float = ALPHA, top_kernels: int = TOP_KERNELS, allow_partial: bool = False) -> GateResult:
    """Check ``run`` against the absolute bounds given and, with a ``baseline``, against every
    metric's regression limit (``max_regression`` updates the defaults: ``"mfu=3%,region:*=off"``).

    Raises a :class:`~roofscope.errors.RoofscopeError` (exit code 2) for bad or infinite limits,
    unreadable inputs, a run without profiled steps, what cannot be compared (a baseline of another
    device or precision, implausible samples, a trace cut short unless ``allow_partial``), or nothing
    to check (nothing given, or every check skipped). ``GateResult.exit_code`` is 0 pass, 1
    regression, 3 cannot decide.
    """
    if not 0 < alpha < 1:
        raise RoofscopeError(f"alpha {alpha:g}: expected a probability between 0 and 1")
    limits = parse_limits(max_regression)
    absolute = bounds(min_mfu=min_mfu, min_hfu=min_hfu, min_mbu=min_mbu, max_step_time_ms=max_step_time_ms,
                      max_idle_fraction=max_idle_fraction, max_step_time=max_step_time)
    if baseline is None and not absolute:
        raise NothingToCheckError("nothing to check: give a baseline or an absolute bound such as --min-mfu")
    base = snapshot_of(baseline, baseline=True, allow_partial=allow_partial) if baseline is not None else None
    cur = snapshot_of(run, allow_partial=allow_partial)
    # A baseline file is named by its path; the run it was written from is inside it.
    base_name = os.fspath(baseline) if isinstance(baseline, (str, os.PathLike)) else base.source if base else None
    for who, s in (("run", cur), ("baseline", base)):
        why = s.implausible() if s is not None else None
        if why:
            raise GateInputError(f"{s.source}: implausible {who} ({why}): nothing to compare")
    if base is not None:
        refuse_incomparable(cur, base, str(base_name))
    checks: list[Check] = regression_checks(cur, base, limits, alpha) if base is not None else []
    checks += [check_bound(b, cur) for b in absolute]
    if all(c.status == SKIP for c in checks):
        # A gate that checked nothing would pass every run: that is an input error, not a pass.
        why = "; ".join(f"{c.name}: {c.note}" for c in checks[:4]) + ("; ..." if len(checks) > 4 else "")
        raise NothingToCheckError(f"nothing was checked ({why or 'no metric in common'}): the baseline"
                                  " and the run share no measured metric the limits cover")
    return GateResult(run=cur.source, baseline=base_name, checks=checks,
                      alpha=alpha, warnings=warnings_for(cur, base),
                      kernels=kernel_evidence(cur, base) if base is not None else None, top_kernels=top_kernels)


def write_baseline(run: "str | os.PathLike | Result | Snapshot", path: str | os.PathLike, *,
                   force: bool = False, kernels_kept: int = KERNELS_KEPT, allow_partial: bool = False) -> Snapshot:
    """Write ``run``'s snapshot as a baseline file (never over an existing file without ``force``).
    A run with implausible samples is refused, and one whose trace was cut short unless
    ``allow_partial`` (the baseline then says so, and every check against it needs it too)."""
    check_writable(path, force)
    snap = snapshot_of(run, allow_partial=allow_partial)
    why = snap.implausible()
    if why:
        raise GateInputError(f"{snap.source}: implausible run ({why}): no baseline written")
    atomic_write(path, snap.to_json(kernels_kept), force=force)
    return snap
