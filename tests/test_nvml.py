"""NVML sampler and telemetry summary, against a fake pynvml (and the real one where NVML is absent)."""
from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from roofscope.analyzers.views.telemetry_summary import TelemetryError, load, summarize
from roofscope.collectors import nvml
from roofscope.collectors.nvml import FIELDS, NvmlSampler, Telemetry, visible_nvml_indices
from roofscope.run.telemetry import decode_reasons
from roofscope.errors import RoofscopeError

T0 = 1_700_000_000_000_000_000  # an arbitrary wall-clock origin, ns
S = 1_000_000_000  # ns per second


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class FakeNvml:
    """Just the pynvml surface the sampler uses; ``fail`` maps a function name to a callable
    ``(handle, call_number) -> Exception | None`` deciding whether that call raises."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, count: int = 2, fail: dict | None = None) -> None:
        self.count = count
        self.fail = fail or {}
        self.calls: dict[tuple[str, int], int] = {}
        self.shutdowns = 0

    def _call(self, name: str, h: int) -> None:
        n = self.calls[(name, h)] = self.calls.get((name, h), 0) + 1
        exc = self.fail.get(name, lambda h, n: None)(h, n)
        if exc is not None:
            raise exc

    def nvmlInit(self): pass
    def nvmlShutdown(self): self.shutdowns += 1
    def nvmlDeviceGetCount(self): return self.count
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return f"Fake H100 {h}"
    def nvmlDeviceGetUUID(self, h): return f"GPU-{'ab'[h % 2]}{h}00-fake"
    def nvmlDeviceGetMaxClockInfo(self, h, kind): return 1980 if kind == self.NVML_CLOCK_SM else 2619
    def nvmlDeviceGetEnforcedPowerLimit(self, h): return 700_000
    def nvmlDeviceGetPowerManagementLimit(self, h): return 650_000

    def nvmlDeviceGetClockInfo(self, h, kind):
        self._call("clock", h)
        return 1755 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, h):
        self._call("power", h)
        return 250_500  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._call("energy", h)
        return 1_000_000 + self.calls[("energy", h)]

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._call("temp", h)
        return 61

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=97, memory=43)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=80 * 2**30, used=12 * 2**30)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


@pytest.fixture
def thread_errors(monkeypatch):
    """Exceptions that escaped any thread: the sampler must never leak one."""
    seen: list = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


def wait_for_passes(s: NvmlSampler, n: int) -> None:
    """Until the sampler has made ``n`` passes, however long a loaded machine takes: a sleep of a
    set time would see fewer passes, or none, when the sampler's thread waits for a core."""
    deadline = time.monotonic() + 60   # a hang guard
    while s._passes < n and time.monotonic() < deadline:
        time.sleep(0.005)


def rows_of(tel: Telemetry, device: int) -> int:
    return sum(1 for d in tel.samples["device"] if d == device)


def test_rate_values_and_lifecycle(fake, thread_errors):
    s = NvmlSampler(hz=50)
    s.start()
    assert s.running
    t = next(t for t in threading.enumerate() if t.name == "roofscope-nvml")
    assert t.daemon
    wait_for_passes(s, 10)
    tel = s.stop()
    assert not s.running and not t.is_alive()
    # Each pass covers both GPUs; ticks 20 ms apart: n passes span at least (n - 1) * 20 ms, never less
    # (a late pass is followed by the next tick, not by a burst), whatever the load.
    n = tel.cost["samples"]
    assert n >= 10 and rows_of(tel, 0) == rows_of(tel, 1) == n
    starts = tel.samples["t_unix_ns"][::2]
    assert (starts[-1] - starts[0]) / 1e9 >= (n - 1) * 0.020 - 1e-3
    assert tel.cost["mean_sample_s"] > 0 and tel.cost["thread_cpu_s"] >= 0
    assert {len(v) for v in tel.samples.values()} == {2 * tel.cost["samples"]}
    assert list(tel.samples) == list(FIELDS)
    assert set(tel.samples["power_w"]) == {250.5}  # mW -> W
    assert set(tel.samples["sm_clock_mhz"]) == {1755}
    assert set(tel.samples["clock_event_reasons"]) == {0x4}
    assert set(tel.samples["mem_used_bytes"]) == {12 * 2**30}
    ts = tel.samples["t_unix_ns"]
    assert ts == sorted(ts) and abs(ts[0] - time.time_ns()) < 5 * S
    assert [d["cuda_index"] for d in tel.devices] == [0, 1]
    assert tel.devices[1] == {"nvml_index": 1, "cuda_index": 1, "name": "Fake H100 1", "uuid": "GPU-b100-fake",
                              "max_sm_clock_mhz": 1980, "max_mem_clock_mhz": 2619, "power_limit_w": 700.0,
                              "memory_total_bytes": 80 * 2**30}
    assert tel.notes == []
    assert s.stop() is tel and fake.shutdowns == 1  # second stop: same result, no second shutdown
    assert thread_errors == []


def test_throttle_reasons_fallback(monkeypatch):
    class OldNvml(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # drivers before 535 only have the old name

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
            return 0x20

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", OldNvml(count=1))
    s = NvmlSampler(hz=200)
    s.start()
    wait_for_passes(s, 1)
    tel = s.stop()
    assert tel.notes == [] and set(tel.samples["clock_event_reasons"]) == {0x20}


def test_invalid_rate():
    for hz in (0, -5, float("nan")):
        with pytest.raises(ValueError):
            NvmlSampler(hz=hz)


def test_stop_without_start():
    tel = NvmlSampler().stop()
    assert tel.samples["t_unix_ns"] == [] and tel.cost["samples"] == 0


def test_not_supported_noted_once_and_skipped(fake, thread_errors):
    fake.fail["power"] = lambda h, n: NVMLError_NotSupported()
    fake.fail["temp"] = lambda h, n: NVMLError_NoPermission() if h == 1 else None
    s = NvmlSampler(hz=200)
    s.start()
    wait_for_passes(s, 3)
    tel = s.stop()
    assert tel.cost["samples"] >= 3
    assert tel.notes == ["power: not supported on GPU 0", "power: not supported on GPU 1",
                         "temperature: no permission on GPU 1"]
    assert fake.calls[("power", 0)] == 1 and fake.calls[("temp", 1)] == 1  # not retried
    assert set(tel.samples["power_w"]) == {None}
    temps = {d: {t for t, dd in zip(tel.samples["temp_c"], tel.samples["device"]) if dd == d} for d in (0, 1)}
    assert temps == {0: {61}, 1: {None}}
    assert thread_errors == []


def test_unexpected_error_stops_sampling_quietly(fake, thread_errors):
    fake.fail["temp"] = lambda h, n: RuntimeError("driver went away") if (h, n) == (1, 3) else None
    s = NvmlSampler(hz=500)
    s.start()
    deadline = time.monotonic() + 60   # a hang guard: the thread stops within a few samples
    while s.running and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not s.running  # the thread ended by itself
    tel = s.stop()
    assert tel.notes == ["sampling stopped on GPU 1: RuntimeError: driver went away"]
    # Passes 1-2 complete (4 rows), pass 3 keeps GPU 0's row and drops GPU 1's half-read one.
    assert tel.samples["device"] == [0, 1, 0, 1, 0]
    assert {len(v) for v in tel.samples.values()} == {5}
    assert fake.shutdowns == 1 and thread_errors == []


def test_real_pynvml_without_driver():
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine")
    s = NvmlSampler()
    s.start()
    assert not s.running
    tel = s.stop()
    assert len(tel.notes) == 1 and tel.notes[0].startswith("NVML init failed: ")
    assert tel.samples["t_unix_ns"] == [] and tel.devices == []


def test_pynvml_missing_and_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    s = NvmlSampler()
    s.start()
    assert s.stop().notes == ["pynvml not installed (pip install nvidia-ml-py)"]
    nv = FakeNvml(count=0)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s = NvmlSampler()
    s.start()
    assert not s.running and s.stop().notes == ["no GPU"] and nv.shutdowns == 1


def test_visible_devices_and_explicit_selection(fake, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    s = NvmlSampler(hz=100)
    s.start()
    tel = s.stop()
    assert [(d["nvml_index"], d["cuda_index"]) for d in tel.devices] == [(1, 0)]
    assert set(tel.samples["device"]) == {1}
    s = NvmlSampler(hz=100, devices=[0, 5])
    s.start()
    tel = s.stop()
    assert [(d["nvml_index"], d["cuda_index"]) for d in tel.devices] == [(0, None)]  # GPU 0 is hidden from CUDA
    assert tel.notes == ["no GPU with NVML index 5 (NVML sees 2)"]


@pytest.mark.parametrize("var, expected, note", [
    (None, [0, 1, 2, 3], None),
    ("1,0", [1, 0], None),
    (" 2 , 3", [2, 3], None),
    ("1gpu,3", [1, 3], None),  # CUDA parses leading digits, like strtoul
    ("0,bogus,1", [0], "'bogus'"),
    ("0,7,1", [0], "'7'"),
    ("0,-1,1", [0], "'-1'"),
    ("1,1", [], "repeats"),
    ("", [], "empty"),
    ("GPU-bb,GPU-aa11", [1, 0], None),
    ("GPU-aa", [], "'GPU-aa'"),  # ambiguous prefix: two GPUs start with it
    ("GPU-cc,0", [2, 0], None),
    ("MIG-GPU-aa11/1/0", [0, 1, 2, 3], "MIG"),
])
def test_visible_nvml_indices(var, expected, note):
    env = {} if var is None else {"CUDA_VISIBLE_DEVICES": var}
    uuids = ["GPU-aa11-x", "GPU-bb22-x", "GPU-cc33-x", "GPU-aa44-x"]
    indices, notes = visible_nvml_indices(4, env, uuids)
    assert indices == expected
    assert (notes == []) if note is None else (len(notes) == 1 and note in notes[0])


def test_visible_uuids_unknown():
    indices, notes = visible_nvml_indices(2, {"CUDA_VISIBLE_DEVICES": "GPU-aa"})
    assert indices == [0, 1] and "UUID" in notes[0]


def make_tel(power, energy=None, reasons=None, sm=None, t_s=(0, 1, 2), device=0, devices=None) -> Telemetry:
    n = len(t_s)
    col = {f: [None] * n for f in FIELDS}
    col["t_unix_ns"] = [T0 + int(t * S) for t in t_s]
    col["device"] = [device] * n
    col["power_w"] = list(power)
    col["energy_mj"] = list(energy) if energy else [None] * n
    col["clock_event_reasons"] = list(reasons) if reasons else [None] * n
    col["sm_clock_mhz"] = list(sm) if sm else [None] * n
    devs = devices or [{"nvml_index": device, "cuda_index": 0, "name": "Fake", "uuid": None,
                        "max_sm_clock_mhz": 2000, "max_mem_clock_mhz": None, "power_limit_w": 700.0,
                        "memory_total_bytes": None}]
    return Telemetry(interval_s=1.0, devices=devs, samples=col, notes=["n1"], cost={"samples": n})


def test_summarize_hand_worked():
    # Power 100, 200, 300 W at 0, 1, 2 s: trapezoids (100+200)/2*1 + (200+300)/2*1 = 150 + 250 = 400 J.
    # SM clocks 1500, 1800, 2100 MHz: mean 1800, ratio to the 2000 MHz max = 0.9.
    # Reasons: idle|app-clocks, power cap, HW thermal -> idle 1/3, app 1/3, power cap 1/3, thermal 1/3;
    # throttled (power cap or thermal) in samples 2 and 3 -> 2/3 (idle/app bits do not count).
    tel = make_tel([100.0, 200.0, 300.0], reasons=[0x1 | 0x2, 0x4, 0x40], sm=[1500, 1800, 2100])
    out = summarize(tel, steps=4)
    d = out["devices"][0]
    assert out["samples"] == 3 and out["notes"] == ["n1"] and out["interval_s"] == 1.0
    assert d["energy_j"] == pytest.approx(400.0) and d["energy_source"] == "power_integral"
    assert d["energy_per_step_j"] == pytest.approx(100.0)  # 400 J / 4 steps
    assert d["sm_clock_mhz"] == {"mean": 1800.0, "min": 1500.0, "max": 2100.0}
    assert d["sm_clock_ratio"] == pytest.approx(0.9)
    assert d["power_w"] == {"mean": 200.0, "max": 300.0} and d["power_limit_w"] == 700.0
    assert d["duration_s"] == 2.0
    th = d["throttle"]
    assert th["gpu_idle"] == th["applications_clocks_setting"] == pytest.approx(1 / 3)
    assert th["sw_power_cap"] == th["hw_thermal_slowdown"] == pytest.approx(1 / 3)
    assert th["hw_slowdown"] == 0.0 and th["throttled_share"] == pytest.approx(2 / 3)
    assert d["temp_c"] is None and d["mem_used_bytes"] is None and d["mem_clock_mhz"] is None
    json.dumps(out, allow_nan=False)


def test_summarize_energy_counter_and_window():
    # Counter 1000 -> 3000 -> 5000 mJ: 4000 mJ = 4 J, preferred over the 400 J power integral.
    tel = make_tel([100.0, 200.0, 300.0], energy=[1000, 3000, 5000])
    d = summarize(tel)["devices"][0]
    assert d["energy_j"] == pytest.approx(4.0) and d["energy_source"] == "counter"
    # Window [1 s, 2 s], bounds inclusive: samples 2 and 3, counter 3000 -> 5000 mJ = 2 J.
    out = summarize(tel, start_unix_ns=T0 + S, end_unix_ns=T0 + 2 * S)
    assert out["samples"] == 2 and out["devices"][0]["energy_j"] == pytest.approx(2.0)
    # Without the counter the same window integrates (200+300)/2 * 1 s = 250 J.
    d = summarize(make_tel([100.0, 200.0, 300.0]), start_unix_ns=T0 + S)["devices"][0]
    assert d["samples"] == 2 and d["energy_j"] == pytest.approx(250.0)
    # The sampler reads the counter sparsely. Power 100/200/300/400 W at 0-3 s, counter only at
    # 1 s (1000 mJ) and 2 s (3000 mJ): 2 J from the counter, plus the edges integrated:
    # [0, 1] s (100+200)/2 = 150 J and [2, 3] s (300+400)/2 = 350 J -> 502 J.
    tel = make_tel([100.0, 200.0, 300.0, 400.0], energy=[None, 1000, 3000, None], t_s=(0, 1, 2, 3))
    d = summarize(tel)["devices"][0]
    assert d["energy_j"] == pytest.approx(502.0) and d["energy_source"] == "counter+power_integral"
    # Only one counter reading: nothing to subtract, so integrate power: 150+250+350 = 750 J.
    tel = make_tel([100.0, 200.0, 300.0, 400.0], energy=[None, 1000, None, None], t_s=(0, 1, 2, 3))
    d = summarize(tel)["devices"][0]
    assert d["energy_j"] == pytest.approx(750.0) and d["energy_source"] == "power_integral"
    # A counter that has not ticked over the window (1000 -> 1000 mJ) is not "0 J": integrate
    # power instead, (100+200)/2 + (200+300)/2 = 400 J over 0-2 s.
    tel = make_tel([100.0, 200.0, 300.0], energy=[1000, 1000, 1000])
    d = summarize(tel)["devices"][0]
    assert d["energy_j"] == pytest.approx(400.0) and d["energy_source"] == "power_integral"
    # An edge without power to integrate: the whole window falls back to integrating power.
    tel = make_tel([None, 200.0, 300.0, 400.0], energy=[None, 1000, 3000, None], t_s=(0, 1, 2, 3))
    d = summarize(tel)["devices"][0]
    assert d["energy_j"] == pytest.approx(250.0 + 350.0) and d["energy_source"] == "power_integral"
    # A counter that went backwards (driver reload) is not trusted either.
    d = summarize(make_tel([100.0, 200.0, 300.0], energy=[9000, 1000, 2000]))["devices"][0]
    assert d["energy_source"] == "power_integral"


def test_summarize_missing_and_empty_window():
    tel = make_tel([None, float("nan"), None], sm=[1500, None, None])
    d = summarize(tel)["devices"][0]
    assert d["energy_j"] is None and d["energy_per_step_j"] is None and d["power_w"] == {"mean": None, "max": None}
    assert d["sm_clock_mhz"] == {"mean": 1500.0, "min": 1500.0, "max": 1500.0}
    assert d["throttle"]["throttled_share"] is None
    out = summarize(tel, start_unix_ns=T0 + 10 * S, steps=3)
    assert out["samples"] == 0 and out["devices"][0]["samples"] == 0
    assert out["notes"][-1] == "no telemetry samples in the requested window"
    json.dumps(out, allow_nan=False)
    with pytest.raises(ValueError):
        summarize(tel, steps=0)


def test_summarize_two_devices_and_sampler_output(fake, monkeypatch):
    monkeypatch.setattr(nvml, "ENERGY_INTERVAL_S", 0.02)  # at 200 Hz: every 4th pass
    s = NvmlSampler(hz=200)
    s.start()
    wait_for_passes(s, 10)          # GPU 1 reads its counter twice (passes 3 and 7) or more
    tel = s.stop()
    n = tel.cost["samples"]
    assert n >= 10
    # GPU 0 reads the counter on passes 0, 4, 8, ...; GPU 1, staggered, on passes 3, 7, ...
    assert fake.calls[("energy", 0)] == (n + 3) // 4 and fake.calls[("energy", 1)] == (n + 0) // 4
    out = summarize(tel, steps=2)
    assert [d["nvml_index"] for d in out["devices"]] == [0, 1]
    frame = tel.frame()
    for d in out["devices"]:
        rows = frame[frame["device"] == d["nvml_index"]]
        read = rows.dropna(subset=["energy_mj"])["t_unix_ns"]
        # The fake counter gains 1 mJ per read; the edges outside the first..last read run at
        # a constant 250.5 W.
        reads = fake.calls[("energy", d["nvml_index"])]
        edges_s = (rows["t_unix_ns"].max() - rows["t_unix_ns"].min() - (read.max() - read.min())) / 1e9
        assert d["energy_source"] == ("counter" if edges_s == 0 else "counter+power_integral")
        assert d["energy_j"] == pytest.approx((reads - 1) / 1000 + 250.5 * edges_s)
        assert d["energy_per_step_j"] == pytest.approx(d["energy_j"] / 2)
        assert d["sm_clock_ratio"] == pytest.approx(1755 / 1980)
        assert d["throttle"]["sw_power_cap"] == 1.0 and d["throttle"]["throttled_share"] == 1.0
        assert d["gpu_util_pct"] == 97.0 and d["temp_c"] == 61.0 and d["mem_clock_mhz"] == 2619.0
        assert d["mem_used_bytes"] == 12 * 2**30 and isinstance(d["mem_used_bytes"], int)
    json.dumps(out, allow_nan=False)


def test_decode_reasons():
    assert decode_reasons(0x4 | 0x40 | 0x1000) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_reasons(0) == []


def test_json_round_trip():
    tel = make_tel([100.0, float("nan"), 300.0], energy=[1, 2, 3], reasons=[0, 4, 64])
    data = tel.to_json()
    assert b" " not in data and json.loads(data)["schema_version"] == 1
    back = Telemetry.from_json(data)
    assert back.samples["power_w"] == [100.0, None, 300.0]  # NaN written as null
    assert back.samples["energy_mj"] == [1, 2, 3] and back.devices == tel.devices
    assert back.notes == ["n1"] and back.cost == {"samples": 3} and back.interval_s == 1.0
    assert Telemetry.from_json(data.decode()).samples == back.samples
    frame = back.frame()
    assert list(frame.columns) == list(FIELDS) and len(frame) == 3
    assert str(frame["t_unix_ns"].dtype) == "int64" and frame["power_w"].isna().tolist() == [False, True, False]


@pytest.mark.parametrize("data, message", [
    (b"not json", "not valid JSON"),
    (b"[]", "must be an object"),
    (b'{"schema_version": 2}', "schema_version"),
    (b'{"schema_version": 1, "interval_s": 0}', "interval_s"),
])
def test_from_json_malformed(data, message):
    with pytest.raises(ValueError, match=message):
        Telemetry.from_json(data)


def test_from_json_bad_columns():
    doc = json.loads(make_tel([1.0, 2.0, 3.0]).to_json())
    del doc["samples"]["temp_c"]
    with pytest.raises(ValueError, match="lack column.*temp_c"):
        Telemetry.from_json(json.dumps(doc))
    doc = json.loads(make_tel([1.0, 2.0, 3.0]).to_json())
    doc["samples"]["power_w"].append(4.0)
    with pytest.raises(ValueError, match="differ in length"):
        Telemetry.from_json(json.dumps(doc))
    doc["samples"]["power_w"] = [1.0, "x", 3.0]
    with pytest.raises(ValueError, match="non-numeric"):
        Telemetry.from_json(json.dumps(doc))


def test_load(tmp_path):
    tel = make_tel([100.0, 200.0, 300.0])
    (tmp_path / "t.json").write_bytes(tel.to_json())
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(tel.to_json()))
    for name in ("t.json", "t.json.gz"):
        assert load(tmp_path / name).samples == tel.samples
    (tmp_path / "bad.gz").write_bytes(gzip.compress(tel.to_json())[:30])
    (tmp_path / "bad.json").write_bytes(b"{")
    for name, message in [("missing.json", "no such"), ("bad.gz", "gzip"), ("bad.json", "not valid JSON"), ("", "directory")]:
        with pytest.raises(TelemetryError, match=message) as e:
            load(tmp_path / name)
        assert isinstance(e.value, RoofscopeError) and "\n" not in str(e.value)


def test_rocm_torch_degrades_to_a_note(monkeypatch):
    """Under a ROCm build of torch (torch.version.hip set) NVML is never tried: one note, no samples."""
    import types

    fake_torch = types.SimpleNamespace(version=types.SimpleNamespace(hip="6.2.41133", cuda=None))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # would be "pynvml not installed" if reached
    s = NvmlSampler(hz=10)
    s.start()
    tel = s.stop()
    assert len(tel.notes) == 1 and tel.notes[0].startswith("AMD GPU (ROCm build of torch): NVML is NVIDIA-only")
    assert all(len(v) == 0 for v in tel.samples.values())
