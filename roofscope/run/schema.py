"""Typed documents of a Run and of a job directory, and the one version policy every reader applies.

A document's version is an integer, its major version: a change that readers of the same
version can still read (a new optional field) keeps the number; anything else bumps it.
:func:`check_version` reads the current version and the older ones still supported, and
refuses a newer one with a one-line error telling to upgrade roofscope.

The Structs type the fields roofscope's own code reads; fields a collector adds that no
reader needs stay untyped (``dict[str, Any]``), and unknown fields are ignored on decode,
so a Run written by a newer roofscope of the same version still reads.
"""
from __future__ import annotations

import math
from typing import Annotated, Any

import msgspec

from roofscope.errors import RoofscopeError

RUN_SCHEMA_VERSION = 1        # run.json
TELEMETRY_VERSION = 1         # telemetry.json.gz
COUNTERS_VERSION = 1          # counters.json.gz ("version", not "schema_version")
CEILINGS_VERSION = 1          # ceilings.json and the microbenchmark cache's entries
JOB_SCHEMA_VERSION = 1        # job.json
VERIFY_VERSION = 1            # verify.json


class VersionError(RoofscopeError):
    """A document of a version this roofscope cannot read."""


def check_version(found: Any, current: int, what: str, where: str, *, key: str = "schema_version",
                  error: type[Exception] = VersionError, oldest: int = 1) -> int:
    """The version ``found`` (under ``key``) in ``where`` if this roofscope reads it (``oldest`` ..
    ``current``), else ``error`` with a one-line message: a newer version asks for an upgrade."""
    if isinstance(found, bool) or not isinstance(found, int):
        raise error(f"{where}: {what} {key} {found!r} is not a version; not a roofscope {what} file")
    if found > current:
        raise error(f"{where}: {what} {key} {found} is newer than this roofscope reads ({current}); upgrade roofscope")
    if found < oldest:
        raise error(f"{where}: {what} {key} {found} is older than this roofscope reads ({oldest} or later);"
                    " collect it again")
    return found


class _Doc(msgspec.Struct, kw_only=True):
    """Keyword-only fields; every field written, defaults included, as the dict writers did."""


# -- run.json -------------------------------------------------------------------------------------

class Environment(_Doc):
    roofscope: str | None = None
    python: str | None = None
    platform: str | None = None
    hostname: str | None = None
    torch: str | None = None
    cuda: str | None = None


class Steps(_Doc):
    # {"wait", "warmup", "active"} for a step schedule, {"duration_s", "delay_s"} for a time window
    requested: dict[str, Any] = {}
    boundaries_seen: int | None = None
    source: str | None = None
    step_on: str | None = None
    delay_from: str | None = None
    recorded: list[int] = []
    # The boundary from which steps were recorded (wait + settling + warm-up), how the steady
    # state was judged (collectors/steptimes.py) and why the schedule ran again, if it did.
    profiled_from: int | None = None
    settle: dict[str, Any] | None = None
    rearmed: str | None = None
    # The script's loop that made the steps, or held the forward steps (collectors/loops/tracker.py facts).
    loop: dict[str, Any] | None = None


class StepTimes(_Doc):
    """Every step's own time, profiled or not (collectors/steptimes.py), column by column: step
    ``index`` N is the interval from boundary N to N+1, the trace's ``ProfilerStep#N``; ``phase`` is
    unprofiled, warmup or active. A column an older collector did not write reads as one of the
    same length (phases ``unprofiled``, times unknown): readers take the columns as they are."""

    index: list[int] = []
    phase: list[str] = []
    host_s: list[float] = []
    gpu_s: list[float | None] = []
    tokens: list[int | None] = []
    dropped: int = 0
    # Loop steps inside an outer loop (collectors/loops/): the outer loop's iteration each step ended in.
    outer: list[int | None] = []

    def __post_init__(self) -> None:
        n = len(self.index)
        self.phase = self.phase or ["unprofiled"] * n
        self.host_s = self.host_s or [math.nan] * n
        self.gpu_s = self.gpu_s or [None] * n
        self.tokens = self.tokens or [None] * n
        self.outer = self.outer or [None] * n
        # ValueError: msgspec reports it as the document's ValidationError (a malformed Run file).
        if any(len(c) != n for c in (self.phase, self.host_s, self.gpu_s, self.tokens, self.outer)):
            raise ValueError(f"step_times: columns of different lengths (index has {n})")


class Distributed(_Doc):
    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None
    node: str | None = None
    source: str | None = None
    group_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    run_id: str | None = None
    backend: str | None = None
    job_id: str | None = None


class TelemetryEntry(_Doc):
    file: str | None = None
    hz: float | None = None
    samples: int | None = None
    notes: list[str] = []


class CountersEntry(_Doc):
    """run.json's record of the counters pass stored in the Run."""

    file: str
    tool: str = "ncu"
    ncu_version: str | None = None
    kernels: int = 0
    matched: int | None = None
    sample: int | None = None
    skip: int = 0
    command: list[str] | None = None
    report: str | None = None


class ParamGroup(_Doc):
    """One parameter group's tensors of one element size (collectors/session.param_group_facts)."""

    tensors: int = 0
    numel: int = 0
    itemsize: int = 4


class Optimizer(_Doc):
    """The first optimizer the program stepped (collectors/session.optimizer_facts)."""

    cls: str | None = msgspec.field(default=None, name="class")   # its class name ("AdamW")
    tensors: int | None = None      # parameter tensors it updates
    params: int | None = None       # their elements
    # Its defaults' flags as it holds them (None when it has none; a custom optimizer's may be any
    # value, which must never keep its Run from being written): readers take them as true or false.
    fused: Any = None
    foreach: Any = None
    groups: list[ParamGroup] = []


class RunMeta(_Doc):
    schema_version: int
    created: str | None = None
    command: list[str] = []
    cwd: str | None = None
    environment: Environment = msgspec.field(default_factory=Environment)
    started: str | None = None
    wall_s: float | None = None
    exit_status: Any = None               # {code, reason, detail}; a bare code from hand-made Runs
    device: dict[str, Any] = {}           # machine facts; keys vary by backend (collectors/metadata.py)
    steps: Steps | None = None
    tokens_per_step: int | float | None = None   # as given: summary.json repeats it (4096, not 4096.0)
    model_flops_per_step: float | None = None
    frameworks: list[str] | None = None   # None: not recorded (an older Run), which is not "none loaded"
    optimizer: Optimizer | None = None
    # The outermost module, its forwards and generate() calls, backend flags (collectors/steps.py
    # StepHooks.facts, metadata.backend_flags); the cores, threads and load (metadata.cpu_facts).
    program: dict[str, Any] | None = None
    cpu: dict[str, Any] | None = None
    distributed: Distributed | None = None
    telemetry: TelemetryEntry | None = None
    counters: CountersEntry | None = None
    step_times: StepTimes | None = None
    warnings: list[str] = []


# -- telemetry.json.gz, counters.json.gz, ceilings.json, job.json, verify.json ---------------------------------

class TelemetryDoc(_Doc):
    schema_version: int
    interval_s: Annotated[float, msgspec.Meta(gt=0)]
    devices: list[dict[str, Any]] = []
    samples: dict[str, list[Any]] = {}
    notes: list[str] = []
    cost: dict[str, Any] = {}


class CountersHeader(_Doc):
    """counters.json.gz less its ``columns``."""

    version: int
    tool: str = "ncu"
    ncu_version: str | None = None
    metrics: list[str] = []
    sample: int | None = None
    skip: int = 0
    join: dict[str, int] | None = None
    na_metrics: list[str] = []
    warnings: list[str] = []
    source: str | None = None
    command: list[str] | None = None


class FixVerdict(_Doc):
    """One fix of verify.json (run/verification.py): seconds saved per step, negative when it costs time."""

    rule: str                            # the finding's rule ("" for a fix asked for with --fix alone)
    fix: str                             # the spec injected (roofscope/fixes/)
    status: str
    reason: str
    predicted_s: float | None = None     # the analysis's saving per step for it; None: it predicted none
    realized_s: float | None = None      # mean saving per step over the pairs
    ci_s: list[float] | None = None      # its 95% interval
    pairs: int = 0
    rules: list[str] = []                # every finding the fix answers
    change: str = ""
    baseline_s: float | None = None      # median step time without the fix, and with it
    fixed_s: float | None = None
    results: str = ""                    # how the results compared
    applied: list[str] = []              # what the fix changed in the program
    within_run: bool = False             # each pair came from one run, the fix turned off and on (a switch)
    # Beside a switch's steps with it off (baseline_s): the rounds' own runs without it, as a check that turning
    # it off and on leaves the program's other steps as they run alone
    baseline_runs_s: float | None = None


class Verification(_Doc):
    schema_version: int = VERIFY_VERSION
    created: str = ""
    settings: dict[str, Any] = {}
    fixes: list[FixVerdict] = []


class JobPart(_Doc):
    path: str
    rank: int | None = None
    node: str | None = None
    kind: str = "run"                     # "run" or "trace"


class JobDoc(_Doc):
    schema_version: int
    parts: list[JobPart]
    kind: str = "roofscope-job"
    world_size: int | None = None
    created: str | None = None


def read_versioned(data: bytes | dict[str, Any], kind: type[msgspec.Struct], *, key: str, current: int,
                   what: str, where: str, error: type[Exception]) -> Any:
    """Decode ``data`` (JSON bytes or an already decoded object) as ``kind``: the version first
    (a newer document is refused before its fields are judged), then the fields; every problem
    is ``error`` with a one-line message."""
    try:
        doc = msgspec.json.decode(data) if isinstance(data, bytes) else data
    except (msgspec.DecodeError, RecursionError) as e:  # RecursionError: JSON nested 10^4 deep
        raise error(f"{where}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise error(f"{where}: not a roofscope {what} file (the JSON must be an object)")
    check_version(doc.get(key), current, what, where, key=key, error=error)
    try:
        return msgspec.convert(doc, kind)
    except msgspec.ValidationError as e:
        raise error(f"{where}: malformed {what} file: {e}") from None
