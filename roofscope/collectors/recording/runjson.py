"""run.json's fields as a stopped session knows them, in run.json's order (run/schema.py types them):
the schedule asked for and what the steps were, every step's own time, the first optimizer's facts,
module labels, telemetry, graph captures, the rank's part of a job and the frameworks loaded."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roofscope.collectors import metadata
from roofscope.collectors.frameworks import loaded_frameworks
from roofscope.collectors.recording.recorders import Recorders
from roofscope.collectors.steptimes import StepTime
from roofscope.collectors.torchprof import TorchCollector
from roofscope.config import Collection

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer

    from roofscope.collectors.distributed import JobPart


def run_fields(config: Collection, collector: TorchCollector, recorders: Recorders, step_times: list[StepTime],
               dropped: int, decided: dict[str, Any], optimizer: dict[str, Any] | None, *, started: str, wall_s: float,
               exit_status: dict[str, Any], inductor: str, warnings: list[str],
               part: "JobPart | None", program: dict[str, Any] | None,
               cpu_marks: tuple[dict[str, Any] | None, dict[str, Any] | None]) -> dict[str, Any]:
    """The fields. ``step_times``: the StepTimer's records (``dropped`` past its bound); ``decided``:
    the step policy's source, step_on, settle, rearmed and loop (policy.StepPolicy.decided); ``warnings``
    is the session's list itself: later additions land in run.json too. ``program``: the outermost module
    the steps ran (StepHooks.facts); ``cpu_marks``: the process's clocks where the profiled steps began and
    ended (metadata.cpu_snapshot; a profile that never ended them: the session's start and the end)."""
    c, rec = collector, recorders
    fields: dict[str, Any] = dict(
        started=started, wall_s=round(wall_s, 3), exit_status=exit_status, device=metadata.device_metadata(),
        steps={"requested": ({"duration_s": config.duration, "delay_s": config.delay}
                             if c.windowed else {"wait": config.wait, "warmup": config.warmup,
                                                     "active": config.active}),
               "boundaries_seen": c.steps, "source": decided["source"], "step_on": decided["step_on"],
               **({"delay_from": c.delay_from} if c.windowed else
                  {"profiled_from": (c.begin + config.warmup) if c.begin is not None else None,
                   "settle": decided["settle"], "rearmed": decided["rearmed"]}),
               **({"stepless_window": c.kept_window} if c.kept_window else {}),
               **({"loop": decided["loop"]} if decided.get("loop") else {})},
        step_times=step_times_columns(step_times, dropped),
        tokens_per_step=config.tokens_per_step, model_flops_per_step=config.model_flops_per_step,
        inductor_benchmark_kernel=inductor, optimizer=optimizer,
        modules=rec.modules_block(), telemetry=rec.telemetry_block(), warnings=warnings, graphs=rec.graphs_block())
    if part is not None:
        fields["distributed"] = part.meta()
    fields["frameworks"] = loaded_frameworks()
    fields["program"] = {**(program or {}), "backends": metadata.backend_flags()}
    fields["cpu"] = metadata.cpu_facts(*cpu_marks)
    return fields


def step_times_columns(steps: list[StepTime], dropped: int) -> dict[str, Any] | None:
    """run.json's ``step_times``: the StepTimer's records column by column (run/schema.StepTimes)."""
    if not steps:
        return None
    columns: dict[str, Any] = {"index": [t.index for t in steps], "phase": [t.phase for t in steps],
                               "host_s": [round(t.host_s, 9) for t in steps], "gpu_s": [t.gpu_s for t in steps],
                               "tokens": [t.tokens for t in steps], "dropped": dropped}
    if any(t.outer is not None for t in steps):   # loop steps inside an outer loop: the stretch each is in
        columns["outer"] = [t.outer for t in steps]
    return columns


def optimizer_facts(optimizer: "Optimizer") -> dict[str, Any]:
    """What the analysis needs to know of the training loop's optimizer: its parameter count
    (MFU from tokens) and whether it runs fused, foreach or per-parameter (the optimizer rule)."""
    tensors = [p for g in optimizer.param_groups for p in g["params"]]
    d = getattr(optimizer, "defaults", {}) or {}
    return {"class": type(optimizer).__name__, "tensors": len(tensors),
            "params": int(sum(p.numel() for p in tensors)),
            "fused": d.get("fused"), "foreach": d.get("foreach"), "groups": param_group_facts(optimizer)}


def param_group_facts(optimizer: "Optimizer") -> list[dict[str, int]]:
    """Per parameter group and element size: tensors, elements and bytes per element. The cost
    model sizes fused / foreach optimizer ops from them when the trace has no TensorList shapes
    (analyzers/cost/hidden_args.py); torch's optimizers call those ops once per group and dtype."""
    out = []
    for g in optimizer.param_groups:
        sizes: dict[int, list[int]] = {}
        for p in g["params"]:
            acc = sizes.setdefault(int(p.element_size()), [0, 0])
            acc[0] += 1
            acc[1] += int(p.numel())
        out += [{"tensors": t, "numel": n, "itemsize": b} for b, (t, n) in sorted(sizes.items())]
    return out
