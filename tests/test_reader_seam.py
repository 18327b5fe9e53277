"""The door for a new input format: one reader (this module's ``MiniReader``, of a made-up text
format) and one registry line make a file of that format analyzable end to end, in process and
by ``roofscope analyze`` (the reader installed as a ``roofscope.readers`` entry point).

The format, one event a line, times in µs::

    #minitrace;rank=1;world=2;device=NVIDIA H100 80GB HBM3
    step 0 0 1000                                   step N, start, duration
    op aten::mm 100 400 64x128,128x256 float,float  op, start, duration, input shapes and types
    kernel gemm 200 100                             a kernel the op above launched
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from roofscope.analyzers import ingest
from roofscope.analysis import analyze
from roofscope.errors import TraceError
from roofscope.analyzers.ingest.frames import assemble
from roofscope.analyzers.model.trace import STEP_PREFIX, Device, Distributed, Trace, TraceMeta

from .kineto import TraceBuilder

ROOT = Path(__file__).resolve().parents[1]
MAGIC = b"#minitrace"
GEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32"
TEXT = f"""#minitrace;rank=1;world=2;device=NVIDIA H100 80GB HBM3
step 0 0 1000
op aten::mm 100 400 64x128,128x256 float,float
kernel {GEMM} 200 100
"""


def _header(line: str) -> dict[str, str]:
    return dict(field.split("=", 1) for field in line.split(";")[1:])


def _ns(us: str) -> int:
    return round(float(us) * 1000)


class MiniReader:
    name = "minitrace"
    suffixes = (".mtr",)

    def sniff(self, head: bytes, file_name: str) -> bool:
        return head.startswith(MAGIC)

    def peek_rank(self, head: bytes) -> Distributed | None:
        h = _header(head.split(b"\n", 1)[0].decode())
        return Distributed(rank=int(h["rank"]), world_size=int(h["world"]), recorded=h) if "rank" in h else None

    def read(self, path: Path) -> Trace:
        first, *lines = Path(path).read_text().splitlines()
        ops: dict[str, list[Any]] = {c: [] for c in ("name", "ts_ns", "dur_ns", "external_id", "input_dims",
                                                     "input_types")}
        kernels: dict[str, list[Any]] = {c: [] for c in ("name", "ts_ns", "dur_ns", "external_id")}
        steps: dict[str, list[Any]] = {c: [] for c in ("name", "ts_ns", "dur_ns")}
        for line in lines:
            kind, *f = line.split()
            if kind == "step":
                steps["name"].append(f"{STEP_PREFIX}{f[0]}")
                steps["ts_ns"].append(_ns(f[1]))
                steps["dur_ns"].append(_ns(f[2]))
            elif kind == "op":
                ops["name"].append(f[0])
                ops["ts_ns"].append(_ns(f[1]))
                ops["dur_ns"].append(_ns(f[2]))
                ops["external_id"].append(len(ops["name"]))
                ops["input_dims"].append([[int(d) for d in s.split("x")] for s in f[3].split(",")])
                ops["input_types"].append(f[4].split(","))
            elif kind == "kernel":
                kernels["name"].append(f[0])
                kernels["ts_ns"].append(_ns(f[1]))
                kernels["dur_ns"].append(_ns(f[2]))
                kernels["external_id"].append(len(ops["name"]))  # launched by the op above
        meta = TraceMeta(reader=self.name, device=Device(name=_header(first).get("device")),
                         distributed=self.peek_rank(first.encode()), events=len(lines))
        return assemble(str(path), meta, ops=ops, kernels=kernels, annotations=steps)


READER = MiniReader()


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(ingest, "READERS", list(ingest.READERS))
    ingest.register_reader(READER)                                  # the one registry line


def _mini(tmp_path: Path) -> Path:
    p = tmp_path / "run.mtr"
    p.write_text(TEXT)
    return p


def _kineto(tmp_path: Path) -> Path:
    """The same step as a Kineto trace."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 1000)
    ext = b.op("aten::mm", 100, 400, [[64, 128], [128, 256]], ["float", "float"])
    b.launch_kernel(GEMM, 150, 200, 100, ext=ext)
    return b.write(tmp_path / "same.json")


def _check(by_kernel: dict[str, Any]) -> None:
    # mm of [64, 128] x [128, 256] fp32: 2*64*128*256 FLOPs; (64*128 + 128*256 + 64*256) * 4 B
    assert by_kernel["flops"] == 2 * 64 * 128 * 256 == 4_194_304
    assert by_kernel["bytes"] == (64 * 128 + 128 * 256 + 64 * 256) * 4 == 229_376
    assert by_kernel["achieved_flops"] == pytest.approx(4_194_304 / 100e-6)      # in 100 µs


def test_a_registered_reader_is_sniffed_read_and_peeked(registered, tmp_path):
    p = _mini(tmp_path)
    t = ingest.read(p)
    assert t.meta.reader == "minitrace" and t.meta.device.name == "NVIDIA H100 80GB HBM3"
    assert t.kernels["op"].tolist() == [0] and t.kernels["step"].tolist() == [0]
    assert t.kernels["ts_ns"].tolist() == [200_000] and t.ops["ts_ns"].tolist() == [100_000]  # from the first event
    assert ingest.peek_rank(p.read_bytes(), p.name) == Distributed(rank=1, world_size=2,
                                                                    recorded={"rank": "1", "world": "2",
                                                                              "device": "NVIDIA H100 80GB HBM3"})
    assert ingest.is_trace_name("rank3.mtr") and ingest.trace_suffix("r.json.gz") == ".json.gz"
    (tmp_path / "x.bin").write_bytes(b"\x00binary")
    with pytest.raises(TraceError, match=r"x\.bin: not a trace any reader knows \(it holds binary data;"
                                         r" readers: minitrace, kineto\)"):
        ingest.read(tmp_path / "x.bin")


def test_unregistered_the_format_is_refused(tmp_path):
    assert not ingest.is_trace_name("run.mtr")
    with pytest.raises(TraceError, match="run.mtr: not a trace any reader knows .*readers: kineto"):
        ingest.read(_mini(tmp_path))


def test_analyzed_end_to_end_as_its_kineto_twin(registered, tmp_path):
    a = analyze(_mini(tmp_path))
    s = a.to_dict()
    assert s["device"] == "NVIDIA H100 80GB HBM3" and s["steps"] == [0] and s["events"] == 3
    assert s["distributed"] == {"rank": "1", "world": "2", "device": "NVIDIA H100 80GB HBM3"}
    mini = a.by_kernel().reset_index().to_dict("records")
    _check(mini[0])
    twin = analyze(_kineto(tmp_path)).by_kernel().reset_index().to_dict("records")
    cols = ("name", "calls", "time_s", "flops", "bytes", "cls", "achieved_flops")
    assert [{c: k[c] for c in cols} for k in mini] == [{c: k[c] for c in cols} for k in twin]


def test_roofscope_analyze_picks_up_an_installed_reader(tmp_path):
    # An installed package declares the reader as an entry point; roofscope loads it on the first read.
    dist = tmp_path / "site" / "minitrace_reader-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: minitrace-reader\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ingest.ENTRY_POINT_GROUP}]\nminitrace = tests.test_reader_seam:READER\n")
    out = tmp_path / "a.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
    r = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(_mini(tmp_path)), "--json", str(out), "-q"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["device"] == "NVIDIA H100 80GB HBM3"
    _check(doc["by_kernel"][0])
