"""Builder for small synthetic Kineto traces with hand-checkable numbers."""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PID = 100
TID = 100


@dataclass
class TraceBuilder:
    device_name: str | None = "NVIDIA H100 80GB HBM3"
    events: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    _ext: int = 0
    _corr: int = 1000

    def op(self, name: str, ts: float, dur: float, dims: list | None = None, types: list | None = None,
           concrete: list | None = None, tid: int = TID, **args: Any) -> int:
        self._ext += 1
        a: dict[str, Any] = {"External id": self._ext, **args}
        if dims is not None:
            a["Input Dims"] = dims
            a["Input type"] = types or []
            a["Concrete Inputs"] = concrete if concrete is not None else ["" for _ in dims]
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid,
                            "ts": ts, "dur": dur, "args": a})
        return self._ext

    def annotation(self, name: str, ts: float, dur: float, tid: int = TID) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": PID, "tid": tid,
                            "ts": ts, "dur": dur, "args": {}})

    def launch_kernel(self, name: str, launch_ts: float, ts: float, dur: float, ext: int | None = None,
                      tid: int = TID, stream: int = 7, cat: str = "kernel", nbytes: int | None = None,
                      runtime: str = "cudaLaunchKernel", grid: list[int] | None = None) -> int:
        """A runtime launch at ``launch_ts`` on thread ``tid`` and its GPU activity at ``ts``."""
        self._corr += 1
        c = self._corr
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": PID, "tid": tid,
                            "ts": launch_ts, "dur": 2, "args": {"External id": ext or c, "correlation": c}})
        ka: dict[str, Any] = {"External id": ext or c, "correlation": c, "device": 0, "stream": stream}
        if nbytes is not None:
            ka["bytes"] = nbytes
        if grid is not None:
            ka["grid"] = grid
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                            "ts": ts, "dur": dur, "args": ka})
        self.events.append({"ph": "s", "id": c, "pid": PID, "tid": tid, "ts": launch_ts, "cat": "ac2g",
                            "name": "ac2g"})
        return c

    def doc(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schemaVersion": 1, "traceEvents": self.events, **self.extra}
        if self.device_name:
            d["deviceProperties"] = [{"id": 0, "name": self.device_name, "totalGlobalMem": 85e9}]
        return d

    def write(self, path: Path, gz: bool | None = None) -> Path:
        data = json.dumps(self.doc()).encode()
        if gz if gz is not None else str(path).endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path
