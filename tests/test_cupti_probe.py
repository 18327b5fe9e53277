"""The CUPTI dead-path probe (collectors/counters/cupti_probe.py) and the collector's experimental_config."""
from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
import torch

from roofscope.collectors.counters import cupti_probe
from roofscope.collectors.counters.cupti_probe import (CuptiCountersError, counter_events, cupti_counters_work,
                                              require_cupti_counters)
from roofscope.collectors.torchprof import Schedule, TorchCollector
from roofscope.errors import RoofscopeError

from .conftest import external

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "ncu" / "h200_probe_kineto.json.gz"   # H200, torch 2.11+cu130: no counter events
ALEXNET = external("hta_a100_alexnet_cupti_counters.json.gz")


def _exports(monkeypatch, source: Path) -> list[str]:
    """The probe 'profiles' by writing ``source``'s JSON where it asked; CUDA appears available."""
    calls: list[str] = []

    def record(path: str) -> None:
        calls.append(path)
        Path(path).write_bytes(gzip.decompress(source.read_bytes()))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cupti_probe, "_record", record)
    return calls


def test_counter_events_counted_in_real_traces():
    assert counter_events(KINETO) == 0
    if ALEXNET.exists():
        assert counter_events(ALEXNET) == 77  # the A100 AlexNet trace's cuda_profiler_range events


def test_dead_path_detected(monkeypatch):
    calls = _exports(monkeypatch, KINETO)
    assert cupti_counters_work() is False and len(calls) == 1 and calls[0].endswith("probe.json")
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(CuptiCountersError) as e:
        require_cupti_counters()
    assert str(e.value) == ("torch 2.11.0+cu130 with CUDA 13.0 records no CUPTI counter events"
                            " (_ExperimentalConfig(profiler_metrics=...) is compiled out for CUDA >= 12.6);"
                            " use --counters ncu")
    assert isinstance(e.value, RoofscopeError) and e.value.exit_code == 2 and "\n" not in str(e.value)
    assert not Path(calls[0]).exists()  # the probe's temporary trace is gone


def test_working_path_passes(monkeypatch):
    _exports(monkeypatch, ALEXNET)
    assert cupti_counters_work() is True
    require_cupti_counters()  # no error


def test_profiler_failure_means_no_counters(monkeypatch):
    def refuse(path: str) -> None:
        raise RuntimeError("CUPTI_ERROR_NOT_SUPPORTED")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cupti_probe, "_record", refuse)
    assert cupti_counters_work() is False


def test_no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cupti_counters_work() is False
    with pytest.raises(CuptiCountersError, match=r"^--counters cupti needs a CUDA GPU, and torch .* sees none"):
        require_cupti_counters()


def test_collector_passes_experimental_config(tmp_path, monkeypatch):
    seen: dict = {}

    def profile(**kwargs):
        seen.update(kwargs)
        return "profile"

    monkeypatch.setattr(torch.profiler, "profile", profile)
    cfg = cupti_probe.experimental_config()
    assert TorchCollector(tmp_path / "t.json", experimental_config=cfg)._new_profile(None) == "profile"
    assert seen["experimental_config"] is cfg and seen["record_shapes"] is True
    TorchCollector(tmp_path / "u.json")._new_profile(None)
    assert seen["experimental_config"] is None  # the default: torch.profiler's own default


def test_collector_records_with_the_config_on_cpu(tmp_path):
    """A real CPU profile with the counter config still writes a trace (the config is inert there)."""
    c = TorchCollector(tmp_path / "trace.json", Schedule(wait=0, warmup=1, active=1),
                       experimental_config=cupti_probe.experimental_config())
    c.start()
    for _ in range(2):
        torch.ones(64, 64) @ torch.ones(64, 64)
        c.step()
    assert c.stop() and (tmp_path / "trace.json").stat().st_size > 0


@pytest.mark.gpu
def test_real_probe_on_this_gpu():
    works = cupti_counters_work()
    major, minor = (int(x) for x in torch.version.cuda.split(".")[:2])
    if (major, minor) >= (12, 6):
        # Measured on the H200 (torch 2.11+cu130): the range profiler is compiled out.
        assert works is False
    if works:
        require_cupti_counters()
    else:
        with pytest.raises(CuptiCountersError,
                           match=re.escape(f"torch {torch.__version__} with CUDA {torch.version.cuda} records no")):
            require_cupti_counters()


def test_run_counters_cupti_records_with_the_config_when_the_probe_passes(tmp_path, monkeypatch, capsys):
    from roofscope.cli import main
    from roofscope.collectors import torchprof

    seen: list = []
    init = torchprof.TorchCollector.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("experimental_config"))
        init(self, *args, **kwargs)

    cfg = cupti_probe.experimental_config()
    monkeypatch.setattr(torchprof.TorchCollector, "__init__", spy)
    monkeypatch.setattr(cupti_probe, "require_cupti_counters", lambda: None)
    monkeypatch.setattr(cupti_probe, "experimental_config", lambda: cfg)
    script = tmp_path / "s.py"
    script.write_text("import torch, roofscope\nfor _ in range(4):\n    torch.ones(8, 8) @ torch.ones(8, 8)\n"
                      "    roofscope.step()\n")
    assert main(["run", "--counters", "cupti", "--settle", "0", "--wait", "0", "--warmup", "1", "--active", "1", "--nvml-hz", "0",
                 "--no-report", "-q", "-o", str(tmp_path / "run"), "--peak-tflops", "1",
                 "--peak-bandwidth", "10", str(script)]) == 0
    assert seen == [cfg]
    # Where the probe finds the path dead, the run is refused before the script starts.
    monkeypatch.setattr(cupti_probe, "require_cupti_counters",
                        lambda: (_ for _ in ()).throw(CuptiCountersError("records no counter events")))
    assert main(["run", "--counters", "cupti", "-o", str(tmp_path / "run2"), str(script)]) == 2
    assert "records no counter events" in capsys.readouterr().err and not (tmp_path / "run2").exists()
