"""What runs beside the profiler while it may record: the NVML sampler, module labels and the
CUDA-graph capture recorder. Started with the session's profiler, stopped as soon as the profile is
complete (the rest of the program runs free of them), started again when the session profiles again
(policy.py's re-arm); their counts and captures stay for run.json."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofscope.collectors.distributed import JobPart
from roofscope.collectors.graphs import GraphRecorder
from roofscope.collectors.modules import ModuleLabels
from roofscope.collectors.nvml import NvmlSampler
from roofscope.collectors.torchprof import TorchCollector
from roofscope.run import TELEMETRY_FILE
from roofscope.run.telemetry import Telemetry


@dataclass
class Recorders:
    """The session's side recorders (module docstring). ``telemetry`` is the sampler's record once
    it stopped (None while it runs, or without one)."""

    collector: TorchCollector
    graphs_dir: Path
    nvml_hz: float
    modules: bool
    part: JobPart | None = None         # one rank's part of a job: its device is the one NVML samples
    sampler: NvmlSampler | None = None
    labels: ModuleLabels | None = None
    graphs: GraphRecorder | None = None
    telemetry: Telemetry | None = None
    on: bool = False                    # installed (start) and not yet removed (remove)

    def start(self) -> None:
        import torch  # start-up time: the CLI does not import torch until a profile starts

        if self.nvml_hz > 0 and torch.cuda.is_available():
            self.sampler = NvmlSampler(hz=self.nvml_hz,
                                       cuda_device=self.part.cuda_device() if self.part is not None else None)
            self.sampler.energy_every_pass = self.collector.recording_next or self.collector.windowed
            self.sampler.start()
            self.telemetry = None
        if self.modules:
            self.labels = ModuleLabels()
            self.labels.install()
        if torch.cuda.is_available():
            collector = self.collector
            # A rearm's recorder goes on numbering after the first one's captures, kept in the same folder.
            earlier = self.graphs
            self.graphs = GraphRecorder(self.graphs_dir, collector.make_room, collector.give_back_room)
            if earlier is not None:
                self.graphs.adopt(earlier)
            self.graphs.install()
            collector.held.on_hold = self.graphs.file_window
        self.on = True

    @property
    def capturing(self) -> bool:
        """A CUDA graph is being captured: nothing runs during one, so no step boundary is marked."""
        return self.on and self.graphs is not None and bool(self.graphs.capturing)

    def sample_energy_closely(self) -> None:
        """The next step is recorded: the sampler reads energy on every pass from now on."""
        if self.sampler is not None:
            self.sampler.energy_every_pass = True

    def remove(self) -> None:
        """Uninstall the graph recorder and the labeller; their captures and call counts stay for run.json."""
        if self.on and self.graphs is not None:
            self.graphs.remove()
        if self.on and self.labels is not None:
            self.labels.remove()
        self.on = False

    def stop_sampler(self) -> None:
        # Also when the sampler never ran (no NVML) or its thread stopped: its notes say why.
        if self.sampler is not None:
            self.telemetry = self.sampler.stop()
            self.sampler = None

    @property
    def captures(self) -> list[Path]:
        return list(self.graphs.files) if self.graphs is not None else []

    def notes(self) -> list[str]:
        return self.graphs.notes() if self.graphs is not None else []

    # -- run.json ----------------------------------------------------------------------------

    def modules_block(self) -> dict[str, Any]:
        return {"enabled": self.modules, "calls": self.labels.calls if self.labels is not None else 0}

    def graphs_block(self) -> dict[str, Any] | None:
        g = self.graphs
        return {"captures": g.captures, "recorded": len(g.files), "skipped": g.skipped} if g is not None else None

    def telemetry_block(self) -> dict[str, Any]:
        """run.json's `telemetry`: where the samples are kept (roofscope/run.py's file) or why there are none."""
        t = self.telemetry
        if t is not None:
            return {"file": TELEMETRY_FILE, "hz": self.nvml_hz, "samples": len(t.samples.get("t_unix_ns", [])),
                    "notes": t.notes}
        if self.nvml_hz == 0:
            return {"file": None, "notes": ["NVML telemetry turned off"]}
        return {"file": None, "notes": ["no CUDA device: no NVML telemetry"]}
