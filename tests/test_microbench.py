"""`roofscope microbench` (CPU path), the measured-ceilings cache and its automatic use."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import roofscope
from roofscope.cli import main
from roofscope.devices import Ceilings, load_ceilings_file, resolve_ceilings
from roofscope.errors import DeviceError
from roofscope.microbench import cache, measure, parse_device
from roofscope.microbench.cpu import cpu_name

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
CPU_TRACE = DATA / "cpu_block.json.gz"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(autouse=True)
def _any_spread(monkeypatch):
    """These tests check the measurement's plumbing on a machine other jobs share: a noisy
    measurement is cached like a quiet one here (the noise check has its own tests)."""
    monkeypatch.setenv("ROOFSCOPE_NOISY_SPREAD", "1")


def _entry(device: str, when: str, *, driver: str | None = None, torch_v: str | None = None,
           bw: float = 1e12, threads: int | None = None) -> Path:
    env = {"driver": driver, "torch": torch_v}
    if threads is not None:
        env["threads"] = threads
    c = Ceilings(device=device, source="measured", peaks={"bf16": 5e14, "fp32": 4e13}, bandwidth=bw,
                 measured_at=when, env=env)
    return cache.save(c)


def _check_results(c: Ceilings) -> None:
    results = c.env["results"]
    keys = [r["key"] for r in results]
    assert keys[:2] == ["fp32", "bf16"] and keys[-3:] == ["bandwidth:DRAM"] * 3
    for r in results:
        assert r["error"] is None and r["datasheet"] is None and r["seconds"] > 0
        assert r["min"] <= r["median"] <= r["max"] == r["value"]
        assert set(r) == {"name", "kind", "key", "value", "unit", "median", "min", "max", "config",
                          "datasheet", "seconds", "error", "spread", "noisy"}
    # The DRAM roof is the best of its three streaming kernels, and the last level.
    assert c.bandwidth == max(r["value"] for r in results[-3:]) == c.levels[-1][2]
    assert c.peaks["fp32"] == results[0]["value"]
    # Even a core shared with a busy machine multiplies faster than 10 MFLOP/s and copies faster than
    # 10 MB/s (how fast it ran is no test's business: a loaded machine measures its load).
    assert c.peaks["fp32"] > 1e7 and c.bandwidth > 1e7
    assert c.env["runtime_s"] > 0 and c.env["threads"] == torch.get_num_threads()


def test_microbench_cpu_in_process_then_analyze_uses_the_cache(tmp_path, capsys, monkeypatch):
    out = tmp_path / "cpu.json"
    assert main(["microbench", "--device", "cpu", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert re.search(r"ceiling\s+benchmark\s+achieved\s+datasheet\s+% of sheet\s+median/min/max\s+time",
                     printed.out)
    assert re.search(r"fp32\s+fp32 matmul\s+[\d.]+ [GT]FLOP/s", printed.out)
    assert "DRAM copy" in printed.out and "runtime" in printed.out
    assert "fp32 matmul" in printed.err and re.search(r"\[(\d+)/\1\] DRAM triad", printed.err)
    c = load_ceilings_file(out)
    assert c.source == "measured" and c.device == cpu_name()
    _check_results(c)

    (entry,) = cache.entries()
    assert entry.path.parent == Path(os.environ["ROOFSCOPE_CACHE_DIR"]) / "ceilings"
    assert entry.device == cpu_name() and entry.torch == torch.__version__
    assert entry.threads == torch.get_num_threads() and entry.ceilings.bandwidth == c.bandwidth

    # The CPU trace has no datasheet: the cached measurement of this CPU makes it analyzable with no flags.
    report = tmp_path / "a.json"
    assert main(["analyze", str(CPU_TRACE), "--json", str(report)]) == 0
    assert f"from {entry.path}" in capsys.readouterr().out
    ceil = json.loads(report.read_text())["summary"]["ceilings"]
    assert ceil["source"] == "measured" and ceil["bandwidth"] == c.bandwidth
    assert ceil["peaks"]["fp32"] == c.peaks["fp32"]
    assert any(n.startswith(f"using ceilings measured on {c.measured_at} from {entry.path}") for n in ceil["notes"])
    assert any("does not name its CPU" in n for n in ceil["notes"])

    # Opting out: no CPU datasheet, so no ceilings, and a note that says how to give them.
    bare = roofscope.analyze(CPU_TRACE, use_cache=False)
    assert bare.ceilings.source == "none" and "no cached measurement" in bare.ceilings.notes[0]
    monkeypatch.setenv("ROOFSCOPE_NO_CACHE", "1")
    assert roofscope.analyze(CPU_TRACE).ceilings.notes[0].startswith("no ceilings: CPU-only trace")


def test_microbench_cpu_subprocess_json(tmp_path):
    out = tmp_path / "m.json"
    res = subprocess.run([sys.executable, "-m", "roofscope", "microbench", "--device", "cpu", "--quick",
                          "--out", str(out), "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr
    printed = json.loads(res.stdout)
    assert printed["schema_version"] == 1 and printed["device"] == cpu_name()
    c = load_ceilings_file(out)
    assert printed["bandwidth"] == c.bandwidth and printed["peaks"] == dict(c.peaks)
    _check_results(c)
    assert f"wrote {out}" in res.stderr and "cached " in res.stderr
    assert [e.ceilings.bandwidth for e in cache.entries()] == [c.bandwidth]  # env carried the tmp cache


def test_no_cache_flag_and_out_exists_refused_before_measuring(tmp_path, capsys, monkeypatch):
    out = tmp_path / "keep.json"
    out.write_text("precious")

    def boom(**kw):
        raise AssertionError("measured before checking --out")

    with monkeypatch.context() as m:
        m.setattr("roofscope.microbench.cpu.measure_cpu", boom)
        assert main(["microbench", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"roofscope: error: {out} already exists; pass --force to overwrite it"
    assert out.read_text() == "precious" and cache.entries() == []
    assert main(["microbench", "--device", "cpu", "--quick", "--no-cache", "--out", str(out), "--force"]) == 0
    assert load_ceilings_file(out).source == "measured" and cache.entries() == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_requested_without_cuda_is_one_line_exit_2(tmp_path, capsys):
    assert main(["microbench", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sees no CUDA device" in err and "--device cpu" in err
    res = subprocess.run([sys.executable, "-m", "roofscope", "microbench", "--device", "cuda:1", "--quick"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stdout == ""


@pytest.mark.parametrize("bad", ["tpu", "cpu:0", "cuda:x", ""])
def test_bad_device(bad, capsys):
    with pytest.raises(DeviceError, match="expected cpu, cuda or cuda:N"):
        measure(bad)
    assert main(["microbench", "--device", bad]) == 2
    assert "expected cpu, cuda or cuda:N" in capsys.readouterr().err
    assert parse_device("CUDA:3") == ("cuda", 3) and parse_device("cpu") == ("cpu", None)


def test_lookup_preference_rules():
    old_exact = _entry(H100, "2025-01-01T00:00:00+00:00", driver="550.54", torch_v="2.4.0", bw=3.0e12)
    newest = _entry(H100, "2025-06-01T00:00:00+00:00", driver="560.35", torch_v="2.5.0", bw=3.1e12)
    _entry("NVIDIA A100-SXM4-80GB", "2025-07-01T00:00:00+00:00", driver="560.35", torch_v="2.5.0", bw=1.9e12)
    assert old_exact != newest and re.fullmatch(r"nvidia-h100-80gb-hbm3-[0-9a-f]{10}\.json", newest.name)

    c = cache.lookup(H100, driver="550.54", torch_version="2.4.0")  # exact match wins over newer
    assert c.bandwidth == 3.0e12 and not any("differs" in n for n in c.notes)
    assert c.notes[-1] == f"using ceilings measured on 2025-01-01T00:00:00+00:00 from {old_exact}"
    c = cache.lookup("nvidia  h100 80gb hbm3", driver="999.1")  # no exact match: newest, mismatch noted
    assert c.bandwidth == 3.1e12 and "cached driver 560.35 differs from the current 999.1" in c.notes
    assert cache.lookup(H100, driver="999.1", exact=True) is None
    assert cache.lookup(H100).bandwidth == 3.1e12  # nothing to compare: newest
    assert cache.lookup("NVIDIA L4") is None
    # The same key again replaces its file instead of piling up entries.
    _entry(H100, "2025-08-01T00:00:00+00:00", driver="560.35", torch_v="2.5.0", bw=3.2e12)
    assert len(cache.entries()) == 3 and cache.lookup(H100).bandwidth == 3.2e12
    assert cache.cache_key({"device": H100, "driver": "1", "torch": "2"}) == f"device={H100}|driver=1|torch=2|threads="


def test_corrupt_cache_file_is_skipped_with_a_note(capsys):
    good = _entry(H100, "2025-01-01T00:00:00+00:00", bw=3.0e12)
    bad = good.parent / "broken.json"
    bad.write_text('{"schema_version": 1, "device": ')
    (good.parent / "wrong.json").write_text('{"schema_version": 1, "device": "x", "peaks": {}, "bandwidth": 1}')
    skipped: list[str] = []
    assert [e.path for e in cache.entries(skipped)] == [good] and len(skipped) == 2
    c = cache.lookup(H100)
    assert c.bandwidth == 3.0e12 and any(n.startswith(f"skipped unreadable cache file {bad}") for n in c.notes)
    assert main(["devices"]) == 0
    assert f"skipped unreadable cache file {bad}" in capsys.readouterr().out


def test_gpu_trace_uses_cached_ceilings_and_flags_still_apply():
    path = _entry(H100, "2025-01-01T00:00:00+00:00", driver="550.54", bw=3.0e12)
    c = resolve_ceilings(H100, memory_bytes=80 * 2**30)
    assert c.source == "measured" and c.bandwidth == 3.0e12 and c.peaks["bf16"] == 5e14
    assert c.datasheet.key == "h100-sxm"  # kept for reference (% of datasheet)
    assert f"using ceilings measured on 2025-01-01T00:00:00+00:00 from {path}" in c.notes
    u = resolve_ceilings(H100, peak_bandwidth_gbs=2000)
    assert u.source == "user" and u.bandwidth == 2e12 and u.peaks["bf16"] == 5e14
    assert resolve_ceilings(H100, device="h100-sxm").source == "datasheet"  # an explicit --device wins
    assert resolve_ceilings(H100, use_cache=False).bandwidth == 3.35e12
    a = roofscope.analyze(DATA / "h100_eager_block.json.gz")
    assert a.ceilings.source == "measured" and a.summary()["ceilings"]["bandwidth"] == 3.0e12


def test_cpu_session_uses_cached_measurement_else_measures_and_caches(tmp_path):
    x = torch.randn(64, 64)

    def profile(out: Path):
        with roofscope.profile(steps=1, wait=0, warmup=0, out=out, quiet=True, nvml_hz=0) as prof:
            for _ in range(2):
                x @ x
                prof.step()
        return prof.analysis

    a = profile(tmp_path / "p1")  # empty cache: measured now, then cached
    (entry,) = cache.entries()
    assert a.ceilings.bandwidth == entry.ceilings.bandwidth and entry.device == cpu_name()
    _entry(cpu_name(), "2030-01-01T00:00:00+00:00", torch_v=torch.__version__, bw=1.5e10,
           threads=torch.get_num_threads())
    a = profile(tmp_path / "p2")  # same CPU, torch and threads: the newest cached entry, no re-measuring
    assert a.ceilings.bandwidth == 1.5e10 and len(cache.entries()) == 1
    assert load_ceilings_file(tmp_path / "p2" / "ceilings.json").bandwidth == 1.5e10


def test_devices_lists_datasheets_and_cache(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"h100-sxm\s+NVIDIA H100 SXM5 80GB\s+990 TFLOP/s\s+67 TFLOP/s\s+3.35 TB/s", out)
    assert "none yet" in out
    path = _entry(H100, "2025-01-01T00:00:00+00:00", driver="550.54", torch_v="2.4.0", bw=3.0e12)
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"{H100}\s+2025-01-01T00:00:00\+00:00\s+550.54\s+2.4.0\s+3 TB/s\s+500 TFLOP/s\s+{path}", out)


def test_cached_gpu_ceilings_without_zero_operand_matmuls_carry_a_note():
    # An H100 entry measured before the zero-operand matmuls: its bf16 peak (822 TFLOP/s on random
    # operands) is one that an LM head's backward GEMM on real gradients beat (855).
    def entry(names: list[str], when: str, driver: str) -> None:
        results = [{"name": n, "kind": "compute", "key": n.split()[1], "value": 8.22e14} for n in names]
        cache.save(Ceilings(device=H100, source="measured", peaks={"bf16": 8.22e14}, bandwidth=3.28e12,
                            measured_at=when, env={"driver": driver, "torch": "2.11", "results": results}))

    entry(["matmul bf16", "matmul fp16", "hbm copy"], "2026-11-24T00:00:00+00:00", "580.1")
    assert any("random operands only" in n for n in cache.lookup(H100, driver="580.1").notes)
    entry(["matmul bf16", "matmul bf16 zeros", "hbm copy"], "2026-11-25T00:00:00+00:00", "580.2")
    assert not any("random operands only" in n for n in cache.lookup(H100, driver="580.2").notes)
    # CPU ceilings (fp32 matmul only) and results-less files never get the note.
    assert cache.random_operands_only(Ceilings(device="cpu", source="measured", peaks={"fp32": 1e12},
                                               bandwidth=1e11, env={"results": [{"name": "matmul fp32"}]})) == []
    assert cache.random_operands_only(Ceilings(device=H100, source="measured", peaks={}, bandwidth=1e12)) == []


def test_cpu_timings_repeat_until_the_target_time(monkeypatch):
    from roofscope.microbench import cpu

    # A fake clock: each call of fn takes 10 ms, so 0.095 s of target needs 10 timings besides the
    # warm-up; 3 repeats with no target stop at 3; the cap bounds a target that is never reached.
    now = [0.0]
    monkeypatch.setattr(cpu.time, "perf_counter", lambda: now[0])

    def fn() -> None:
        now[0] += 0.01

    assert len(cpu._times(fn, 3)) == 3
    assert len(cpu._times(fn, 3, target_s=0.095)) == 10  # 9 timings: 0.09 s, short of it
    monkeypatch.setattr(cpu, "_MAX_REPEATS", 4)
    assert len(cpu._times(fn, 3, target_s=100.0)) == 4
