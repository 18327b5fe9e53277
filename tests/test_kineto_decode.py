"""Tolerant Kineto decoding: type variants of real traces, malformed events skipped and counted,
non-traces refused in one line."""
from __future__ import annotations

import json

import msgspec
import pytest

from roofscope.analyzers.ingest.kineto import as_dims, as_int, skip_reason
from roofscope.analyzers.ingest.kineto_reader import load_trace
from roofscope.reports.console import skipped_line
from roofscope.errors import TraceError

from .kineto import PID, TID, TraceBuilder


def _variant_trace(tmp_path):
    """Types as vLLM/SGLang/ROCm traces write them: numbers as strings, hex stream handles."""
    b = TraceBuilder()
    ext = b.op("aten::copy_", 0, 100, dims=[[4, 8], [4, 8]], types=["float", "float"])
    b.launch_kernel("Memcpy HtoD (Host -> Device)", 10, 20, 5, ext=ext, cat="gpu_memcpy", nbytes=128)
    b.launch_kernel("void kernel_a()", 30, 40, 3, ext=ext)
    k_copy, k_a = (e for e in b.events if e["cat"] in ("gpu_memcpy", "kernel"))
    k_copy["args"]["bytes"] = "128"          # vLLM / SGLang: bytes as a string
    k_a["args"]["stream"] = "0x7"            # ROCm: stream handle as a hex string
    k_a["args"]["correlation"] = str(k_a["args"]["correlation"])
    k_a["args"]["grid"] = "grid(100,)"       # Triton launcher style
    k_a["args"]["block"] = [128, 1, 1]
    for e in b.events:
        if e["cat"] == "cuda_runtime":
            e["args"]["stream"] = "0x0"
    return b


def test_type_variants_decode_without_skipping(tmp_path):
    t = load_trace(_variant_trace(tmp_path).write(tmp_path / "t.json"))
    assert t.meta.skipped_events == {}
    k = t.kernels.set_index("name")
    assert k.loc["Memcpy HtoD (Host -> Device)", "bytes"] == 128.0
    assert k.loc["void kernel_a()", "stream"] == 7
    assert k.loc["void kernel_a()", "grid"] == [100]
    # the string correlation id still links the kernel to its launch and op
    assert k.loc["void kernel_a()", "op"] == 0


def test_malformed_event_is_skipped_and_counted(tmp_path):
    b = _variant_trace(tmp_path)
    b.launch_kernel("void kernel_b()", 50, 60, 4)
    bad = [e for e in b.events if e["name"] == "void kernel_b()"][0]
    bad["args"]["bytes"] = "lots"
    b.events.append({"ph": "X", "cat": "cpu_op", "name": {"not": "a name"}, "pid": PID, "tid": TID,
                     "ts": 1, "dur": 1, "args": {}})
    b.events.append(17)
    t = load_trace(b.write(tmp_path / "t.json.gz"))
    assert t.meta.skipped_events == {"args.bytes not a number": 1, "name not a string": 1,
                                        "event not an object": 1}
    # kernel_b skipped, the other two GPU activities kept
    assert sorted(t.kernels["name"].astype(str)) == ["Memcpy HtoD (Host -> Device)", "void kernel_a()"]
    assert skipped_line(t.meta.skipped_events).startswith("skipped 3 malformed events: ")


class _Msgspec023:
    """A decoder as msgspec 0.23 behaves on bytes that are not UTF-8: a DecodeError, where 0.22 raised
    UnicodeDecodeError (a CI venv got 0.23 on 2026-11-29 and a fuzzed trace's event ended in a traceback)."""

    def __init__(self, inner):
        self.inner = inner

    def decode(self, data):
        try:
            return self.inner.decode(data)
        except UnicodeDecodeError:
            raise msgspec.DecodeError("Invalid UTF-8 encoded string") from None


@pytest.fixture(params=["installed", "0.23"])
def msgspec_version(request, monkeypatch):
    if request.param == "0.23":
        from roofscope.analyzers.ingest import kineto, kineto_helper, kineto_stream
        for mod, names in ((kineto, ("_DECODER", "_LOOSE_DECODER", "_EVENT_DECODER", "_SNIFF_DECODER")),
                           (kineto_stream, ("_EVENTS", "_RAWS", "_HEAD")), (kineto_helper, ("_EVENTS",))):
            for name in names:
                monkeypatch.setattr(mod, name, _Msgspec023(getattr(mod, name)))
    return request.param


def _non_utf8_trace(tmp_path, spoil):
    """A relu op launching a kernel whose name holds bytes that are not UTF-8, then a gelu op; ``spoil``
    mends the events before they are written."""
    b = TraceBuilder()
    b.op("aten::relu", 0, 20)
    b.launch_kernel("relu_XX_kernel", 5, 50, 2)
    b.op("aten::gelu", 100, 5)
    spoil(b.events)
    data = json.dumps(b.doc()).encode().replace(b"relu_XX_kernel", b"relu_\xff\xfe_kernel")
    p = tmp_path / "t.json"
    p.write_bytes(data)
    return load_trace(p)


def test_non_utf8_names_and_corrupt_times(tmp_path):
    t = _non_utf8_trace(tmp_path, lambda events: events[-1].update(ts="nan"))
    assert t.kernels["name"].astype(str).tolist() == ["relu_\ufffd\ufffd_kernel"]
    assert t.meta.skipped_events == {"ts not a time": 1}
    assert t.ops["name"].astype(str).tolist() == ["aten::relu"]


def test_non_utf8_bytes_after_a_malformed_event_with_either_msgspec(tmp_path, msgspec_version):
    # The first event's "ph" is null: the typed pass fails on it before it meets the kernel name's bytes,
    # so the events are decoded one by one, and that decoder meets them (the fuzzed trace of the failure).
    t = _non_utf8_trace(tmp_path, lambda events: events.insert(0, {**events[0], "ph": None}))
    assert t.kernels["name"].astype(str).tolist() == ["relu_\ufffd\ufffd_kernel"]
    assert t.meta.skipped_events == {"ph not a string": 1}


@pytest.mark.parametrize("doc,what", [
    ({"schema": "1.0.3-chakra.0.0.4", "pid": 1, "nodes": [{"id": 1, "name": "[pytorch|profiler|execution_trace|thread]"}]},
     "a PyTorch execution trace"),
    ([[1700000000, -1, 0, 1024], [1700000001, 1, 1, 1024]], "a memory timeline"),
    ({"rocprofiler-sdk-tool": [{"metadata": {"pid": 1}}]}, "rocprofv3 output"),
])
def test_non_traces_are_named_in_one_line(tmp_path, doc, what):
    p = tmp_path / "x.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert f"not a Kineto trace: {what}" in str(e.value) and "\n" not in str(e.value)


def test_rocm_copy_bytes_and_device_ids(tmp_path):
    """ROCm: the memcpy's size is on its hipMemcpyWithStream call (a string), and kernels name
    device 2 while deviceProperties lists only id 0."""
    b = TraceBuilder(device_name="AMD Instinct MI300X")
    ext = b.op("aten::copy_", 0, 100)
    c = b.launch_kernel("Memcpy HtoD (Host -> Device)", 10, 20, 5, ext=ext, cat="gpu_memcpy",
                        runtime="hipMemcpyWithStream")
    for e in b.events:
        if e.get("args", {}).get("correlation") == c:
            if e["cat"] == "cuda_runtime":
                e["args"].update(size="2560", kind="1", stream="0x0")
            else:
                e["args"]["device"] = 2
    t = load_trace(b.write(tmp_path / "t.json"))
    assert t.kernels["bytes"].tolist() == [2560.0]
    assert t.meta.device.name == "AMD Instinct MI300X"
    assert t.meta.device.memory_bytes == 85e9


def test_helpers():
    assert as_int("0x10") == 16 and as_int("010") == 10 and as_int(7) == 7 and as_int("zz") is None
    assert as_dims("grid(4, 2, 1)") == [4, 2, 1] and as_dims("") is None and as_dims([1, 1, 1]) == [1, 1, 1]
    assert skip_reason("Expected `float | null`, got `str` - at `$.args.bytes`") == "args.bytes not a number"
    assert skip_reason("Expected `array | str | null`, got `object` - at `$.args.grid`") == "args.grid not a list"
    assert skip_reason("Number out of range - at `$.dur`") == "dur: number out of range"
    assert skipped_line({"a": 2, "b": 1}) == "skipped 3 malformed events: a (2); b (1)"
