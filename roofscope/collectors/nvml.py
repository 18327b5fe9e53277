"""Background GPU telemetry: clocks, power, energy, temperature, utilization, throttle reasons.

``NvmlSampler`` polls NVML from a daemon thread at a fixed rate while the workload runs,
so the roofline can be read against the clocks the GPU actually ran at (a kernel at 60%
of a datasheet peak may be at 100% of a power-capped one). pynvml is imported by
``start()`` only, and every NVML failure becomes a note: telemetry must never break the
profiled program.
"""
from __future__ import annotations

import math
import os
import sys
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from roofscope.config import Collection
from roofscope.run.telemetry import FIELDS, Telemetry

# nvmlDeviceGetTotalEnergyConsumption busy-waits in the driver: 3.9 ms of CPU per call on
# an H200 (every other query here takes under 5 us; benchmarks/bench_nvml.py). The counter
# only needs reading often enough to bracket a window, so it is read this often, not per pass.
ENERGY_INTERVAL_S = 0.25

_DEVICE_KEYS = ("nvml_index", "cuda_index", "name", "uuid", "max_sm_clock_mhz",
                "max_mem_clock_mhz", "power_limit_w", "memory_total_bytes")


def _strtoul(token: str) -> int:
    """Leading-digit parse as CUDA does (``"1gpu"`` is 1); -1 when there are none."""
    digits = len(token) - len(token.lstrip("0123456789"))
    return int(token[:digits]) if digits else -1


def _parse_visible(nvml_count: int, env: Mapping[str, str] | None,
                   uuids: list[str] | None) -> tuple[list[int], list[str], bool]:
    """``visible_nvml_indices`` plus whether positions really are CUDA ordinals."""
    var = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    everything = list(range(nvml_count))
    if var is None:
        return everything, [], True
    if not var.strip():
        return [], ["CUDA_VISIBLE_DEVICES is empty: no GPU is visible to CUDA"], True
    tokens = [t.strip() for t in var.split(",")]
    if any(t.startswith("MIG-") for t in tokens):
        return everything, ["CUDA_VISIBLE_DEVICES names MIG instances: sampling all GPUs, "
                            "CUDA ordinals unknown"], False
    if uuids is None and any(t.startswith("GPU-") for t in tokens):
        return everything, ["CUDA_VISIBLE_DEVICES names GPU UUIDs but device UUIDs are unknown: "
                            "sampling all GPUs, CUDA ordinals unknown"], False
    out: list[int] = []
    for token in tokens:
        if token.startswith("GPU-"):
            hits = [i for i, u in enumerate(uuids or []) if u and u.startswith(token)]
            index = hits[0] if len(hits) == 1 else -1
        else:
            index = _strtoul(token)
        if index in out:
            # CUDA treats a repeated device as a malformed list and exposes nothing.
            return [], [f"CUDA_VISIBLE_DEVICES repeats {token!r}: no GPU is visible to CUDA"], True
        if not 0 <= index < nvml_count:
            return out, [f"CUDA_VISIBLE_DEVICES entry {token!r} is not a valid device: "
                         "it and later entries are ignored, as CUDA does"], True
        out.append(index)
    return out, [], True


def visible_nvml_indices(nvml_count: int, env: Mapping[str, str] | None = None,
                         uuids: list[str] | None = None) -> tuple[list[int], list[str]]:
    """NVML indices of the GPUs CUDA sees, in CUDA ordinal order, and notes on the parse."""
    indices, notes, _ = _parse_visible(nvml_count, env, uuids)
    return indices, notes


def rank_devices(visible: list[int], mapped: bool, cuda_device: int) -> tuple[list[int], list[str]]:
    """The NVML index of the GPU one rank computes on (CUDA ordinal ``cuda_device``, usually its
    LOCAL_RANK), and notes; every visible GPU, with a note, when that GPU cannot be told."""
    if not mapped:
        return visible, [f"CUDA device {cuda_device} cannot be mapped to an NVML index: sampling every GPU"]
    if 0 <= cuda_device < len(visible):
        return [visible[cuda_device]], []
    if len(visible) == 1:
        # Launchers that bind one GPU per rank (srun --gpus-per-task=1) leave each rank ordinal 0.
        return visible, []
    return visible, [f"CUDA device {cuda_device} is not among the {len(visible)} visible GPUs: sampling every GPU"]


_Probe = tuple[str, tuple[str, ...], Callable[[Any], tuple], int]


def _probes(nv: Any, energy_every: int) -> list[_Probe]:
    """(note label, columns filled, query, run every n-th pass) for each per-sample NVML call."""
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) \
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons

    def util(h: Any) -> tuple:
        u = nv.nvmlDeviceGetUtilizationRates(h)
        return int(u.gpu), int(u.memory)

    return [
        ("sm_clock", ("sm_clock_mhz",), lambda h: (int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),), 1),
        ("mem_clock", ("mem_clock_mhz",), lambda h: (int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),), 1),
        ("power", ("power_w",), lambda h: (nv.nvmlDeviceGetPowerUsage(h) / 1000.0,), 1),
        ("energy", ("energy_mj",), lambda h: (int(nv.nvmlDeviceGetTotalEnergyConsumption(h)),), energy_every),
        ("temperature", ("temp_c",), lambda h: (int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),), 1),
        ("utilization", ("gpu_util_pct", "mem_util_pct"), util, 1),
        ("memory", ("mem_used_bytes",), lambda h: (int(nv.nvmlDeviceGetMemoryInfo(h).used),), 1),
        ("clock_event_reasons", ("clock_event_reasons",), lambda h: (int(reasons(h)),), 1),
    ]


def _rocm() -> bool:
    """True under a ROCm build of torch (torch already imported by the profiled script)."""
    torch = sys.modules.get("torch")
    return bool(getattr(getattr(torch, "version", None), "hip", None))


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlSampler:
    """Samples every selected GPU each ``1/hz`` seconds from a daemon thread."""

    def __init__(self, hz: float = Collection.nvml_hz, devices: Sequence[int] | None = None,
                 cuda_device: int | None = None) -> None:
        if isinstance(hz, bool) or not isinstance(hz, (int, float)) or not math.isfinite(hz) or hz <= 0:
            raise ValueError(f"sampling rate must be a positive number of Hz, got {hz!r}")
        self.hz = float(hz)
        # The energy counter is slow to read (~3.4 ms of CPU on an H200), so it is read every
        # ENERGY_INTERVAL_S, or on every pass once the caller sets this for the profiled window.
        self.energy_every_pass = False
        self._requested = None if devices is None else [int(d) for d in devices]
        self._cuda_device = cuda_device    # one rank's GPU as a CUDA ordinal (collectors/distributed.py)
        self._reset()

    def _reset(self) -> None:
        self._tel = Telemetry(interval_s=1.0 / self.hz)
        self._nv: Any = None
        self._handles: list[tuple[int, Any]] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._passes = 0
        self._pass_s = 0.0
        self._thread_cpu_s = 0.0
        self._done = False

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> None:
        if self.running:
            return
        if self._thread is not None and not self._done:
            self.stop()  # a session whose thread died on its own still owes an NVML shutdown
        self._reset()
        notes = self._tel.notes
        if _rocm():
            notes.append("AMD GPU (ROCm build of torch): NVML is NVIDIA-only, so clocks, power and throttling "
                         "are not sampled; the trace is analyzed without telemetry")
            return
        try:
            import pynvml
        except ImportError:
            notes.append("pynvml not installed (pip install nvidia-ml-py)")
            return
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError, OSError: a missing driver is a normal, reportable state
            notes.append(f"NVML init failed: {e}")
            return
        self._nv = pynvml
        try:
            self._open_devices()
        except Exception as e:
            notes.append(f"NVML device query failed: {type(e).__name__}: {e}")
            self._handles = []
        if not self._handles:
            notes.append("no GPU")
            self._shutdown()
            return
        self._thread = threading.Thread(target=self._run, name="roofscope-nvml", daemon=True)
        self._thread.start()

    def _open_devices(self) -> None:
        nv, notes = self._nv, self._tel.notes
        count = int(nv.nvmlDeviceGetCount())
        handles: dict[int, Any] = {}
        for i in range(count):
            try:
                handles[i] = nv.nvmlDeviceGetHandleByIndex(i)
            except Exception as e:
                notes.append(f"GPU {i}: cannot open: {e}")
        uuids = [self._query(lambda: _text(nv.nvmlDeviceGetUUID(handles[i]))) if i in handles else ""
                 for i in range(count)]
        visible, parse_notes, mapped = _parse_visible(count, None, uuids)
        notes.extend(parse_notes)
        wanted = visible if self._requested is None else self._requested
        if self._cuda_device is not None:
            wanted, rank_notes = rank_devices(visible, mapped, self._cuda_device)
            notes.extend(rank_notes)
        for i in wanted:
            if i not in handles:
                if not 0 <= i < count:
                    notes.append(f"no GPU with NVML index {i} (NVML sees {count})")
                continue
            h = handles[i]
            limit_mw = self._query(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h)) \
                or self._query(lambda: nv.nvmlDeviceGetPowerManagementLimit(h))
            total = self._query(lambda: int(nv.nvmlDeviceGetMemoryInfo(h).total))
            self._tel.devices.append(dict(zip(_DEVICE_KEYS, (
                i,
                visible.index(i) if mapped and i in visible else None,
                self._query(lambda: _text(nv.nvmlDeviceGetName(h))),
                uuids[i] or None,
                self._query(lambda: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))),
                self._query(lambda: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))),
                None if limit_mw is None else limit_mw / 1000.0,
                total,
            ))))
            self._handles.append((i, h))

    @staticmethod
    def _query(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def _run(self) -> None:
        cpu0 = time.thread_time()
        nv, notes = self._nv, self._tel.notes
        skip = tuple(c for c in (getattr(nv, "NVMLError_NotSupported", None),
                                 getattr(nv, "NVMLError_NoPermission", None)) if c is not None)
        columns = self._tel.samples
        interval = self._tel.interval_s
        device = None
        try:
            # One probe list per device, so an unsupported query is dropped for that GPU only.
            energy_every = max(1, round(ENERGY_INTERVAL_S / interval))
            probes = [(i, h, _probes(nv, energy_every)) for i, h in self._handles]
            deadline = time.monotonic()
            while not self._stop.is_set():
                t0 = time.perf_counter()
                for j, (device, h, plist) in enumerate(probes):
                    row = dict.fromkeys(FIELDS)
                    row["t_unix_ns"], row["device"] = time.time_ns(), device
                    for probe in list(plist):
                        label, cols, query, every = probe
                        # Offsetting by the device's position spreads slow reads over passes.
                        if every > 1 and not self.energy_every_pass and (self._passes + j) % every:
                            continue
                        try:
                            row.update(zip(cols, query(h)))
                        except skip as e:
                            why = "not supported" if "NotSupported" in type(e).__name__ else "no permission"
                            notes.append(f"{label}: {why} on GPU {device}")
                            plist.remove(probe)
                    with self._lock:
                        for f in FIELDS:
                            columns[f].append(row[f])
                self._pass_s += time.perf_counter() - t0
                self._passes += 1
                deadline += interval
                now = time.monotonic()
                if deadline < now:
                    # Fell behind (a slow NVML call, a stalled process): skip the lost ticks
                    # instead of bursting to catch up.
                    deadline += math.ceil((now - deadline) / interval) * interval
                self._stop.wait(deadline - now)
        except Exception as e:
            notes.append(f"sampling stopped on GPU {device}: {type(e).__name__}: {e}")
        finally:
            self._thread_cpu_s = time.thread_time() - cpu0

    def _shutdown(self) -> None:
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception as e:
                self._tel.notes.append(f"NVML shutdown failed: {e}")
            self._nv = None

    def stop(self) -> Telemetry:
        if self._done:
            return self._tel
        self._stop.set()
        alive = False
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 10 * self._tel.interval_s))
            alive = self._thread.is_alive()
        if alive:
            # An NVML call is hanging; shutting NVML down under it could crash the process.
            self._tel.notes.append("sampler thread did not stop within the timeout; NVML left initialized")
        else:
            self._shutdown()
        with self._lock:
            self._tel.samples = {f: list(v) for f, v in self._tel.samples.items()}
        self._tel.cost = {
            "samples": self._passes,
            "mean_sample_s": self._pass_s / self._passes if self._passes else None,
            "thread_cpu_s": self._thread_cpu_s,
        }
        self._done = True
        return self._tel
