"""`roofscope microbench` (CPU path), the measured-ceilings cache and its automatic use."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import roofscope
from roofscope.cli import main
from roofscope.config import CeilingOverrides
from roofscope.hardware.devices import Ceilings, load_ceilings_file, resolve_ceilings
from roofscope.errors import DeviceError
from roofscope.microbench import cache, measure, parse_device
from roofscope.microbench.cpu import cpu_name
from .conftest import console_field

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
CPU_TRACE = DATA / "cpu_block.json.gz"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(autouse=True)
def _any_spread(monkeypatch):
    """These tests check the measurement's plumbing on a machine other jobs share: a noisy or
    implausible measurement is cached like a quiet one here (the noise check and the physics
    check have their own tests, which put the check back with :func:`_physics`)."""
    monkeypatch.setenv("ROOFSCOPE_NOISY_SPREAD", "1")
    monkeypatch.setattr(cache, "implausible", lambda c: [])
    monkeypatch.setattr("roofscope.microbench.cpu.implausible", lambda c: [])


def _physics(monkeypatch) -> None:
    from roofscope.hardware import ceilings
    from roofscope.microbench import cpu

    monkeypatch.setattr(cache, "implausible", ceilings.implausible)
    monkeypatch.setattr(cpu, "implausible", ceilings.implausible)


def _entry(device: str, when: str, *, driver: str | None = None, torch_v: str | None = None,
           bw: float = 1e12, threads: int | None = None) -> Path:
    env = {"driver": driver, "torch": torch_v}
    if threads is not None:
        env["threads"] = threads
    c = Ceilings(device=device, source="measured", peaks={"bf16": 5e14, "fp32": 4e13}, bandwidth=bw,
                 measured_at=when, env=env)
    return cache.save(c)


def _check_results(c: Ceilings, threads: int) -> None:
    """``threads``: torch's threads in the process that measured (an in-process test's can differ from a
    fresh process's: a script run in-process may have set them)."""
    from roofscope.microbench.cpupeak import read_peak

    results = c.env["results"]
    keys = [r["key"] for r in results]
    assert keys[:2] == ["fp32", "bf16"] and keys[-3:] == ["bandwidth:DRAM"] * 3
    peak = read_peak(c.env["threads"])
    # The 'datasheet' of a CPU benchmark is its theoretical roof (compute, L2, LLC); DRAM has none.
    theory = {} if peak is None else {**peak.peaks(), **{f"bandwidth:{k}": v for k, v in peak.cache_bandwidth().items()}}
    for r in results:
        assert r["error"] is None and r["datasheet"] == theory.get(r["key"]) and r["seconds"] > 0
        assert r["min"] <= r["median"] <= r["max"] == r["value"]
        assert set(r) == {"name", "kind", "key", "value", "unit", "median", "min", "max", "config",
                          "datasheet", "seconds", "error", "spread", "noisy"}
    # The DRAM roof is the best of its three streaming kernels, and the last level.
    assert c.bandwidth == max(r["value"] for r in results[-3:]) == c.levels[-1][2]
    assert c.env["achievable"]["fp32"] == results[0]["value"]
    assert c.peaks["fp32"] == max(results[0]["value"], theory.get("fp32", 0.0))
    # Even a core shared with a busy machine multiplies faster than 10 MFLOP/s and copies faster than
    # 10 MB/s (how fast it ran is no test's business: a loaded machine measures its load).
    assert c.peaks["fp32"] > 1e7 and c.bandwidth > 1e7
    assert c.env["runtime_s"] > 0 and c.env["threads"] == threads


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
    _check_results(c, torch.get_num_threads())

    (entry,) = cache.entries()
    assert entry.path.parent == Path(os.environ["ROOFSCOPE_CACHE_DIR"]) / "ceilings"
    assert entry.device == cpu_name() and entry.torch == torch.__version__
    assert entry.threads == torch.get_num_threads() and entry.ceilings.bandwidth == c.bandwidth

    # The CPU trace has no datasheet: the cached measurement of this CPU makes it analyzable with no flags.
    report = tmp_path / "a.json"
    assert main(["analyze", str(CPU_TRACE), "--json", str(report)]) == 0
    assert f"from {entry.path}" in console_field(capsys.readouterr().out, "ceilings")
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
    fresh = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, check=True).stdout
    _check_results(c, int(fresh))
    assert f"wrote {out}" in res.stderr
    if "not cached: implausible ceilings" in res.stderr:  # the machine was busy: the physics check holds in the child
        assert cache.entries() == []
    else:
        assert "cached " in res.stderr
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
    u = resolve_ceilings(H100, CeilingOverrides(peak_bandwidth_gbs=2000))
    assert u.source == "user" and u.bandwidth == 2e12 and u.peaks["bf16"] == 5e14
    assert resolve_ceilings(H100, CeilingOverrides(device="h100-sxm")).source == "datasheet"  # an explicit --device wins
    assert resolve_ceilings(H100, use_cache=False).bandwidth == 3.35e12
    a = roofscope.analyze(DATA / "h100_eager_block.json.gz")
    assert a.ceilings.source == "measured" and a.to_dict()["ceilings"]["bandwidth"] == 3.0e12


def test_cpu_session_uses_cached_measurement_else_measures_and_caches(tmp_path):
    x = torch.randn(64, 64)

    def profile(out: Path):
        with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=out, quiet=True, nvml_hz=0) as prof:
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


# -- CPU roofs that hold: the theoretical peak, the physics check, no re-measuring (issues 29, 27) --

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
cpu MHz\t\t: 2900.000
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512_vnni
"""
EPYC_AVX2 = """model name\t: AMD EPYC 7B13
cpu MHz\t\t: 2450.000
flags\t\t: fpu sse sse2 avx fma avx2
"""
LAPTOP = """model name\t: Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz
cpu MHz\t\t: 800.000
flags\t\t: fpu sse sse2 avx fma avx2
"""
SAPPHIRE_RAPIDS = """model name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz
cpu MHz\t\t: 2000.000
flags\t\t: sse avx fma avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
GRAVITON = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
"""


def test_theoretical_peak_from_cpuinfo():
    from roofscope.microbench.cpupeak import theoretical_peak

    # AVX-512, clock from sysfs (3.5 GHz, used as is): 16 lanes x 2 FMA units x 2 = 64 FLOP/cycle;
    # 4 cores x 3.5e9 x 64 = 896 GFLOP/s fp32, half for fp64; no avx512_bf16: bf16 computes in fp32;
    # VNNI int8 4x fp32: 3.584 TOP/s. Caches: 4 x 3.5e9 x 128 B = 1.792 TB/s L2, x 64 B = 896 GB/s LLC.
    p = theoretical_peak(XEON, cores=4, max_freq_khz=3_500_000)
    assert p.isa == "avx512f" and p.clock_source == "cpuinfo_max_freq"
    assert p.peaks() == pytest.approx({"fp64": 448e9, "fp32": 896e9, "bf16": 896e9, "fp16": 896e9, "int8": 3584e9})
    assert p.cache_bandwidth() == pytest.approx({"L2": 1.792e12, "LLC": 896e9})
    # AVX2 VM, no sysfs clock: the nominal 2.45 GHz x 1.5 boost allowance = 3.675 GHz; 8 lanes x 2 x 2 = 32:
    # 2 cores x 3.675e9 x 32 = 235.2 GFLOP/s, above the 207 its fp32 matmul reached (docs/microbench.md).
    p = theoretical_peak(EPYC_AVX2, cores=2)
    assert p.isa == "avx2" and p.peaks()["fp32"] == pytest.approx(235.2e9) and p.peaks()["fp32"] > 207e9
    assert p.describe() == ("2 cores × 3.67 GHz (cpu MHz 2450 × 1.5 boost allowance) × 32 fp32 FLOP/cycle"
                            " (avx2: 8 lanes × 2 FMA units × 2)")
    # An idle laptop reports 800 MHz: the model name's 1.90 GHz is the larger nominal clock.
    # 1 core x 1.9e9 x 1.5 x 32 = 91.2 GFLOP/s.
    p = theoretical_peak(LAPTOP, cores=1)
    assert p.peaks()["fp32"] == pytest.approx(91.2e9) and p.clock_source.startswith("model name 1.90 GHz")
    # AMX: 2048 bf16 FLOP per cycle per core (1024 FMA), 4096 int8 ops; avx512_fp16 doubles fp32's 64.
    # 8 cores x 2.0e9 x 1.5 = 24e9 core-cycles/s: bf16 49.152 T, fp16 3.072 T, int8 98.304 T, fp32 1.536 T.
    p = theoretical_peak(SAPPHIRE_RAPIDS, cores=8)
    assert p.peaks() == pytest.approx({"fp64": 768e9, "fp32": 1.536e12, "bf16": 49.152e12, "fp16": 3.072e12,
                                       "int8": 98.304e12})
    # ARM (no x86 flags), an x86 text without any clock, no cores: no theoretical peak.
    assert theoretical_peak(GRAVITON, cores=4) is None
    assert theoretical_peak("flags\t: sse avx2 fma\n", cores=4) is None
    assert theoretical_peak(XEON, cores=0) is None


def test_read_peak_uses_sysfs_and_caps_cores_by_threads(tmp_path):
    from roofscope.microbench.cpupeak import read_peak

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(XEON)
    freq = tmp_path / "sys/devices/system/cpu/cpu0/cpufreq"
    freq.mkdir(parents=True)
    (freq / "cpuinfo_max_freq").write_text("3500000\n")
    p = read_peak(threads=1, root=str(tmp_path))
    assert p.cores == 1 and p.peaks()["fp32"] == pytest.approx(3.5e9 * 64)
    # More threads than usable cores add no FLOPs.
    assert read_peak(threads=10_000, root=str(tmp_path)).cores == len(os.sched_getaffinity(0))
    assert read_peak(root=str(tmp_path / "nowhere")) is None


def _cpu_set(l2: float, llc: float, dram: float, fp32: float, *, threads: int | None = None,
             torch_v: str | None = None, noisy: tuple[str, ...] = ()) -> Ceilings:
    """A CPU measurement as measure_cpu makes it, before the theoretical roofs (copy only, one per level)."""
    threads = threads or torch.get_num_threads()
    caps = {"L2": 2 << 20, "LLC": 32 << 20, "DRAM": 0}
    results = [{"name": "fp32 matmul", "kind": "compute", "key": "fp32", "value": fp32, "unit": "FLOP/s",
                "config": {"n": 512}}]
    results += [{"name": f"{lv} copy", "kind": "memory", "key": f"bandwidth:{lv}", "value": bw, "unit": "B/s",
                 "config": {"level": lv, "capacity": caps[lv]}} for lv, bw in (("L2", l2), ("LLC", llc), ("DRAM", dram))]
    measured = (("L2", 2.0 * (1 << 20), l2), ("LLC", 32.0 * (1 << 20), llc), ("DRAM", float("inf"), dram))
    from roofscope.hardware.ceilings import levels_payload
    from roofscope.microbench.cpu import _monotone

    return Ceilings(device=cpu_name(), source="measured", peaks={"fp32": fp32}, bandwidth=dram,
                    levels=_monotone(measured), measured_at="2026-11-25T12:00:00+00:00",
                    env={"torch": torch_v or torch.__version__, "threads": threads, "results": results,
                         "noisy": list(noisy), "achievable_levels": levels_payload(measured)})


def test_compute_and_cache_roofs_are_theoretical_with_the_measured_rates_as_achievable():
    from roofscope.microbench.cpu import with_theoretical
    from roofscope.microbench.cpupeak import theoretical_peak

    peak = theoretical_peak(EPYC_AVX2, cores=2)  # 235.2 GFLOP/s fp32; 3.675e9 x 2 = 7.35e9 core-cycles/s
    c = with_theoretical(_cpu_set(l2=150e9, llc=60e9, dram=20e9, fp32=68.9e9), peak)
    assert c.peaks == pytest.approx(peak.peaks()) and c.env["achievable"] == {"fp32": 68.9e9}
    # L2 7.35e9 x 128 B = 940.8 GB/s, LLC x 64 B = 470.4 GB/s, DRAM the measured 20 GB/s.
    # (pytest.approx compares flat sequences only: the names and the rates apart)
    assert [n for n, _, _ in c.levels] == ["L2", "LLC", "DRAM"]
    assert [bw for _, _, bw in c.levels] == pytest.approx([940.8e9, 470.4e9, 20e9])
    assert c.bandwidth == 20e9
    compute = next(n for n in c.notes if n.startswith("compute roofs: "))
    assert compute.endswith("achievable (measured): fp32 68.9 GFLOP/s (29%)")  # 68.9 / 235.2
    memory = next(n for n in c.notes if n.startswith("memory roofs: "))
    assert memory == ("memory roofs: L2 941 GB/s, LLC 470 GB/s theoretical (128, 64 B/cycle per core), DRAM"
                      " measured; achievable (measured): L2 150 GB/s, LLC 60 GB/s, DRAM 20 GB/s")
    assert with_theoretical(c, peak) == c  # a cached set gets the same roofs and notes again
    # A measured rate above the theoretical one (a clock higher than assumed) is the roof instead.
    fast = with_theoretical(_cpu_set(l2=150e9, llc=60e9, dram=20e9, fp32=300e9), peak)
    assert fast.peaks["fp32"] == 300e9 and any(n.startswith("measured fp32 beat the theoretical") for n in fast.notes)
    # No theoretical peak (ARM): the measured rates stay the roofs, and the note says so.
    arm = with_theoretical(_cpu_set(l2=150e9, llc=60e9, dram=20e9, fp32=68.9e9), None)
    assert arm.peaks == {"fp32": 68.9e9} and any("no theoretical peak for this CPU" in n for n in arm.notes)


def test_implausible_measurement_is_not_cached_and_yields_a_note(monkeypatch, capsys):
    from roofscope.hardware.ceilings import implausible
    from roofscope.errors import RoofscopeError
    from roofscope.microbench import cpu
    from roofscope.microbench.cpupeak import theoretical_peak

    _physics(monkeypatch)
    # The busy 2-core machine of issue 27: L2 copy 34 MB/s, LLC 1.1 GB/s, DRAM 7 GB/s.
    busy = cpu.with_theoretical(_cpu_set(l2=34e6, llc=1.1e9, dram=7e9, fp32=68.9e9),
                                theoretical_peak(EPYC_AVX2, cores=2))
    assert implausible(busy) == ["L2 34 MB/s is slower than DRAM 7 GB/s", "LLC 1.1 GB/s is slower than DRAM 7 GB/s",
                                 "memory at 34 MB/s is below 1 GB/s"]
    with pytest.raises(RoofscopeError, match=r"^not cached: implausible ceilings \(L2 34 MB/s is slower"):
        cache.save(busy)
    assert cache.entries() == []
    # A matmul at 1 GFLOP/s is 0.43% of 235.2: below the 1% floor. An "LLC" at 4.2 GB/s beside DRAM at
    # 17.1 (0.25 of it: a cloud VM's shared LLC, measured 2026-11-25) is weather, not impossible.
    slow = cpu.with_theoretical(_cpu_set(150e9, 60e9, 20e9, 1e9), theoretical_peak(EPYC_AVX2, cores=2))
    assert implausible(slow) == ["fp32 matmul 1 GFLOP/s is below 1% of the peak 235 GFLOP/s"]
    assert implausible(_cpu_set(150e9, 4.2e9, 17.1e9, 68.9e9)) == []

    # The refusal is remembered (when and why), so `roofscope run` does not measure again for an hour.
    assert cache.implausible_attempt(cpu_name(), 3600).startswith(
        "the measurement of 2026-11-25T12:00:00+00:00 was implausible (L2 34 MB/s is slower than DRAM 7 GB/s")
    assert cache.implausible_attempt(cpu_name(), 0) is None

    # `roofscope run`: measured (here: the hour is over), not cached, no warning; this run and the next
    # hour's get the theoretical roofs alone (2 cores x 3.675 GHz: L2 940.8 GB/s, LLC 470.4 GB/s, also beyond).
    peak = theoretical_peak(EPYC_AVX2, cores=2)
    monkeypatch.setattr(cpu, "read_peak", lambda threads: peak)
    calls = []
    monkeypatch.setattr(cpu, "measure_cpu", lambda quick, progress: calls.append(quick) or busy)
    warnings: list[str] = []
    for retry_after, measured in ((0.0, [True]), (3600.0, [True])):
        monkeypatch.setattr(cpu, "RETRY_AFTER_S", retry_after)
        c = cpu.ceilings_for_run(torch.get_num_threads(), torch.__version__, warnings=warnings)
        assert calls == measured and cache.entries() == [] and warnings == []
        assert c.peaks == pytest.approx(peak.peaks()) and c.bandwidth == pytest.approx(470.4e9)
        memory = next(n for n in c.notes if n.startswith("memory roofs: "))
        assert "theoretical, beyond the LLC too: the measurement of 2026-11-25T12:00:00+00:00 was implausible (L2 34" \
            " MB/s is slower than DRAM 7 GB/s" in memory
    assert "measured again from 1 h after it" in memory
    # `roofscope microbench` says why it did not cache.
    monkeypatch.setattr("roofscope.microbench.measure", lambda device, quick, progress: busy)
    assert main(["microbench", "--device", "cpu"]) == 0
    assert "not cached: implausible ceilings" in capsys.readouterr().err and cache.entries() == []
    # A set cached by an older roofscope without the check is skipped by lookups, with a note.
    path = cache.cache_dir() / "old-busy.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    from roofscope.hardware.ceilings import ceilings_payload

    path.write_text(json.dumps({**ceilings_payload(busy), "cache": cache.key_fields(busy)}))
    good = cache.save(_cpu_set(150e9, 60e9, 20e9, 68.9e9, threads=99))
    found = cache.lookup(cpu_name())
    assert found.bandwidth == 20e9 and any(n.startswith(f"skipped implausible cached ceilings {path}") for n in found.notes)
    assert good != path


def test_real_gpu_ceilings_pass_the_physics_check():
    from roofscope.hardware.ceilings import implausible

    # An H100's measured set (2026-11): L2 8.54 TB/s over HBM 3.28 TB/s, matmuls near the datasheet.
    c = load_ceilings_file(DATA / "h100_lightning_cudagraph_trees" / "ceilings.json")
    assert [n for n, _, _ in c.levels] == ["L2", "HBM"] and implausible(c) == []
    # The same set with its L2 read at a tenth of HBM, or its bf16 GEMM at 0.5% of the datasheet's 989.5 TFLOP/s.
    from dataclasses import replace

    assert implausible(replace(c, levels=(("L2", 50e6, 0.328e12), c.levels[1]))) == [
        "L2 328 GB/s is slower than HBM 3.28 TB/s"]
    assert implausible(replace(c, peaks={**c.peaks, "bf16": 4.9e12})) == [
        "bf16 matmul 4.9 TFLOP/s is below 1% of the peak 990 TFLOP/s"]


def test_noisy_plausible_set_is_cached_unless_a_quiet_one_is(monkeypatch):
    from roofscope.errors import RoofscopeError

    noisy = _cpu_set(150e9, 60e9, 9e9, 68.9e9, noisy=("DRAM copy",))
    path = cache.save(noisy)  # nothing better cached: kept, so the next run does not measure again
    assert cache.lookup(cpu_name()).bandwidth == 9e9
    quiet = _cpu_set(150e9, 60e9, 20e9, 68.9e9)
    assert cache.save(quiet) == path  # a quiet measurement replaces a noisy one
    with pytest.raises(RoofscopeError, match=r"not cached: noisy measurement of DRAM copy .* quiet measurement of"
                                             r" 2026-11-25T12:00:00\+00:00"):
        cache.save(noisy)
    assert cache.lookup(cpu_name()).bandwidth == 20e9


def _no_measuring(**kw):
    raise AssertionError("measured again although a plausible cached set exists")


def test_run_reuses_an_older_cache_without_measuring(monkeypatch):
    from roofscope.microbench import cpu
    from roofscope.microbench.cpupeak import read_peak

    # Another torch and thread count: still this CPU's plausible roofs, reused with the differences noted.
    cache.save(_cpu_set(150e9, 60e9, 20e9, 68.9e9, threads=7, torch_v="2.0.0"))
    monkeypatch.setattr(cpu, "measure_cpu", _no_measuring)
    threads = torch.get_num_threads()
    c = cpu.ceilings_for_run(threads, torch.__version__)
    assert c.bandwidth == 20e9 and "cached threads 7 differs from the current " + str(threads) in c.notes
    theory = read_peak(threads)
    if theory is not None:  # an x86 machine: compute roofs are its theoretical peak
        assert c.peaks == pytest.approx({k: max(v, 68.9e9 if k == "fp32" else 0) for k, v in theory.peaks().items()})


RUN_SCRIPT = textwrap.dedent('''
    import torch
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32)
    for _ in range(8):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
''')
MEASURING = "roofscope: measuring this CPU's ceilings once (cached for later runs): "


def test_run_measures_once_with_progress_then_reuses_the_cache(tmp_path, capsys, monkeypatch):
    from roofscope.microbench import cpu

    script = tmp_path / "train.py"
    script.write_text(RUN_SCRIPT)
    calls = []

    def fake(quick, progress):
        calls.append(quick)
        for i, name in enumerate(["fp32 matmul", "DRAM copy"]):
            if progress is not None:
                progress(name, i, 2)
        return cpu.with_theoretical(_cpu_set(150e9, 60e9, 20e9, 68.9e9), cpu.read_peak(torch.get_num_threads()))

    monkeypatch.setattr(cpu, "measure_cpu", fake)
    assert main(["run", "--settle", "0", "-o", str(tmp_path / "r1"), str(script)]) == 0
    err = capsys.readouterr().err
    assert f"{MEASURING}[1/2] fp32 matmul\n{MEASURING}[2/2] DRAM copy\n" in err and calls == [True]
    assert load_ceilings_file(tmp_path / "r1" / "ceilings.json").bandwidth == 20e9
    # The second run reuses the cached set: nothing measured, nothing printed about it.
    assert main(["run", "--settle", "0", "-o", str(tmp_path / "r2"), str(script)]) == 0
    assert MEASURING not in capsys.readouterr().err and calls == [True]
    # -q: no progress lines (a fresh cache, so it measures).
    monkeypatch.setenv("ROOFSCOPE_CACHE_DIR", str(tmp_path / "cache2"))
    assert main(["run", "-q", "--settle", "0", "-o", str(tmp_path / "r3"), str(script)]) == 0
    assert MEASURING not in capsys.readouterr().err and calls == [True, True]


def test_run_subprocess_reuses_the_cache(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RUN_SCRIPT)
    # 17.3 GB/s DRAM: a value only the cache can give this Run.
    cache.save(_cpu_set(150e9, 60e9, 17.3e9, 68.9e9))
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(tmp_path / "r"), str(script)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert MEASURING not in res.stderr
    c = load_ceilings_file(tmp_path / "r" / "ceilings.json")
    assert c.bandwidth == 17.3e9 and any(n.startswith("compute roofs: ") for n in c.notes)
    assert "compute roofs: " in res.stdout  # the summary's ceilings line names the roofs' origin
