"""The GPU timeline's result: its frames, their columns and kinds, and its summary.json block.

Data only: analyzers/views/timeline.py computes a :class:`Timeline`; the pipeline's result, the rules and
the renderers read it without importing the view (definitions of every column are in
analyzers/views/timeline.py's docstring).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from roofscope.jsonsafe import json_safe

GAP_KINDS = ("host", "queued", "other", "edge")
SYNC_KINDS = ("stream_sync", "device_sync", "event_sync", "memcpy_sync", "item", "dtoh_copy")
# Per-device columns of the steps frame (summed over GPUs when a trace holds several).
DEVICE_COLUMNS = ("wall_s", "busy_s", "idle_s", "kernels", "memcpy_s", "memset_s", "comm_s", "comm_exposed_s",
                  "idle_host_s", "idle_queued_s", "idle_other_s", "idle_edge_s")
STEP_COLUMNS = ("ts_ns", "end_ns", *DEVICE_COLUMNS, "launch_api_s", "sync_count", "sync_s", "launch_overhead_s")
GAP_COLUMNS = ("step", "device", "start_ns", "end_ns", "dur_s", "kind", "next_kernel", "next_name", "after_sync")
SYNC_COLUMNS = ("step", "kind", "name", "ts_ns", "end_ns", "dur_s", "op", "op_name", "caller")


@dataclass(frozen=True)
class Timeline:
    """Per-step table (index ``step``, :data:`STEP_COLUMNS`), idle gaps (:data:`GAP_COLUMNS`), host
    syncs (:data:`SYNC_COLUMNS`), overall figures, and the warm-up steps that captured a CUDA graph."""

    steps: pd.DataFrame
    gaps: pd.DataFrame
    syncs: pd.DataFrame
    overall: dict[str, Any] = field(default_factory=dict)
    capture_steps: list[int] = field(default_factory=list)

    def to_dict(self, top: int = 5) -> dict[str, Any]:
        """JSON-safe summary: overall figures, per-step records, gaps by kind and the longest ``top``."""
        g = self.gaps
        by_kind = g.groupby("kind")["dur_s"].agg(["size", "sum"]) if len(g) else None
        longest = g.nlargest(top, "dur_s") if len(g) else g
        return json_safe({
            "overall": self.overall,
            "steps": self.steps.reset_index().to_dict("records"),
            "gaps": {
                "count": int(len(g)),
                "time_s": float(g["dur_s"].sum()) if len(g) else 0.0,
                "by_kind": {k: {"count": int(by_kind["size"].get(k, 0)) if by_kind is not None else 0,
                                "time_s": float(by_kind["sum"].get(k, 0.0)) if by_kind is not None else 0.0}
                            for k in GAP_KINDS},
                "top": [{"step": int(r.step), "device": int(r.device), "kind": r.kind, "dur_us": r.dur_s * 1e6,
                         "after_sync": bool(r.after_sync), "next_kernel": r.next_name}
                        for r in longest.itertuples()],
            },
            "sync_callers": _sync_callers(self.syncs, top),
        })


def _sync_callers(syncs: pd.DataFrame, top: int) -> list[dict[str, Any]]:
    if not len(syncs):
        return []
    g = syncs.groupby(["kind", "caller"]).agg(count=("dur_s", "size"), time_s=("dur_s", "sum"))
    g = g.sort_values(["count", "time_s"], ascending=False).head(top)
    return [{"kind": kind, "caller": caller, "count": int(r["count"]), "time_s": float(r["time_s"])}
            for (kind, caller), r in g.iterrows()]
