"""Each option is declared once, in roofscope/config.py: the command line, the commands' options,
SessionConfig and roofscope.profile() all get its default from there, and profile() takes the
roofline thresholds as the command line does."""
from __future__ import annotations

import inspect
import re
from dataclasses import fields
from pathlib import Path

import click
import pytest
import torch

import roofscope
from roofscope import context
from roofscope.cli import cli
from roofscope.collectors.nvml import NvmlSampler
from roofscope.collectors.session import SessionConfig
from roofscope.collectors.torchprof import Schedule, TorchCollector
from roofscope.commands.analyze import AnalyzeOptions
from roofscope.commands.diff import DiffOptions
from roofscope.commands.merge import MergeOptions
from roofscope.commands.run import RunOptions
from roofscope.config import (CeilingOverrides, Collection, MergeWorkers, Presentation, RankMerge, RooflineThresholds,
                              values)
from roofscope.errors import RoofscopeError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = (Collection, RankMerge, MergeWorkers, Presentation, CeilingOverrides, RooflineThresholds)
DEFAULTS = {f.name: f.default for cls in CONFIGS for f in fields(cls)}
HELP = {f.name: f.metadata["help"] for cls in CONFIGS for f in fields(cls)}
CEILINGS = (CeilingOverrides, RooflineThresholds)
# Each command that takes config options: its required arguments, and the config classes it takes.
COMMANDS = {"analyze": (["t.json"], CEILINGS + (Presentation,)), "report": (["t.json"], CEILINGS),
            "diff": (["a", "b"], CEILINGS), "merge": (["job"], CEILINGS + (MergeWorkers,)),
            "run": (["train.py"], CEILINGS + (Collection, RankMerge, Presentation))}


def _names(classes: tuple[type, ...]) -> list[str]:
    return [f.name for cls in classes for f in fields(cls)]


@pytest.mark.parametrize("command", COMMANDS)
def test_click_defaults_and_help_are_the_configs(command: str) -> None:
    cmd = cli.commands[command]
    args, classes = COMMANDS[command]
    given = cmd.make_context(command, args).params    # what the command receives when no flag is given
    declared = _names(classes)
    assert {name: given[name] for name in declared} == {name: DEFAULTS[name] for name in declared}
    helps = {p.name: p.help for p in cmd.params if isinstance(p, click.Option)}
    assert {name: helps[name] for name in declared} == {name: HELP[name] for name in declared}


@pytest.mark.parametrize("options, classes", [
    (RunOptions(target="train.py"), COMMANDS["run"][1]),
    (MergeOptions(sources=["job"]), COMMANDS["merge"][1]),
    (AnalyzeOptions(trace="t.json"), COMMANDS["analyze"][1]),
    (DiffOptions(run_a="a", run_b="b"), CEILINGS + (Presentation,)),
])
def test_command_options_default_as_the_config(options: object, classes: tuple[type, ...]) -> None:
    assert {name: getattr(options, name) for name in _names(classes)} == {name: DEFAULTS[name]
                                                                        for name in _names(classes)}


def test_session_schedule_collector_and_sampler_default_as_the_config() -> None:
    s = SessionConfig()
    assert values(Collection, s) == values(Collection, Collection())
    assert Schedule() == Schedule(Collection.wait, Collection.warmup, Collection.active) == s.schedule
    collector = inspect.signature(TorchCollector).parameters
    assert (collector["duration_s"].default, collector["delay_s"].default) == (Collection.duration, Collection.delay)
    assert inspect.signature(NvmlSampler).parameters["hz"].default == Collection.nvml_hz


def test_profile_signature_defaults_are_the_configs() -> None:
    sig = inspect.signature(context.profile).parameters
    # profile() calls the active steps `steps` (its first, positional argument); the time window,
    # exit_after_profile, step_on and stepless_after are the command line's alone; `top` is prof.summary()'s.
    own = {"steps": "active"} | {n: n for n in _names(COMMANDS["run"][1]) if n not in (
        "active", "duration", "delay", "exit_after_profile", "step_on", "stepless_after", "top")}
    assert {mine: sig[mine].default for mine in own} == {mine: DEFAULTS[theirs] for mine, theirs in own.items()}
    assert inspect.signature(roofscope.profile).parameters["steps"].default == Collection.active
    assert inspect.signature(context.Profile.summary).parameters["top"].default == Presentation.top


@pytest.mark.parametrize("literal", ["50.0", "300.0"])  # the NVML rate, the merge timeout
def test_a_default_is_written_in_one_module(literal: str) -> None:
    pattern = re.compile(rf"(?<![\w.]){re.escape(literal)}(?![\w.])")
    holders = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "roofscope").rglob("*.py")
                     if pattern.search(p.read_text()))
    assert holders == ["roofscope/config.py"]


@pytest.mark.parametrize("kwargs, message", [
    ({"latency_floor_us": -1}, "latency_floor_us must be >= 0, got -1"),
    ({"underutilized_below": 1.5}, "underutilized_below must be <= 1, got 1.5"),
    ({"merge_timeout": -1}, "merge_timeout must be >= 0, got -1"),
])
def test_profile_refuses_what_the_command_line_refuses(kwargs: dict, message: str) -> None:
    with pytest.raises(RoofscopeError, match=message):
        roofscope.profile(**kwargs)


def test_a_session_refuses_what_the_command_line_refuses() -> None:
    with pytest.raises(RoofscopeError, match="tokens_per_step must be > 0, got 0"):
        SessionConfig(tokens_per_step=0)
    with pytest.raises(RoofscopeError, match="nvml_hz must be >= 0, got -1"):
        SessionConfig(nvml_hz=-1)
    with pytest.raises(RoofscopeError, match="active must be >= 1, got 0"):
        roofscope.profile(steps=0)


def test_profile_classifies_with_its_thresholds(tmp_path: Path) -> None:
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    # 1 TFLOP/s and 10 GB/s: a 256x256 matmul moves 786 kB, a 79 µs floor, far above the default 3 µs.
    with roofscope.profile(steps=2, settle=0, wait=0, warmup=1, out=tmp_path / "p", peak_tflops=1, peak_bandwidth_gbs=10,
                           nvml_hz=0, quiet=True, report=False, latency_floor_us=1e6,
                           underutilized_below=0.5) as prof:
        for _ in range(3):
            a @ b
            prof.step()
    costed = prof.analysis.kernels[prof.analysis.kernels["cls"] != "unknown"]
    assert (prof.analysis.params.latency_floor_s, prof.analysis.params.underutilized_below) == (1.0, 0.5)
    assert len(costed) and (costed["cls"] == "latency").all()
    # The same Run under the default thresholds: the matmul is no longer latency-bound.
    default = roofscope.analyze(prof.run_dir)
    mm = default.kernels[default.kernels["name"].astype(str) == "aten::mm"]
    assert len(mm) and (mm["cls"] != "latency").all()
    assert default.params.latency_floor_s == RooflineThresholds.latency_floor_us / 1e6
