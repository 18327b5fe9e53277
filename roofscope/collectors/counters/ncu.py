"""The Nsight Compute (ncu) collector: the counters pass of a Run.

The script runs a second time, under ``ncu --profile-from-start off`` with the range of
ncu_target.py on the same steps the Kineto trace recorded, ``--clock-control none`` (ncu
otherwise locks clocks well below boost, so times would not be the trace's), and the metric
set of ncu_csv.py. ncu writes an ``.ncu-rep`` (kept: the Nsight Compute UI opens it); its
raw page, exported as CSV in base units, becomes the counters table. Every failure ncu can
report (not installed, no counter permission, nothing profiled, the script failing,
metrics this GPU lacks) is an :class:`NcuError` that says how to fix it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from roofscope.collectors.counters.ncu_csv import DRAM_READ, DRAM_WRITE, METRICS, TIME, parse_ncu_csv
from roofscope.collectors.torchprof import Schedule
from roofscope.errors import RoofscopeError

NCU_ENV = "ROOFSCOPE_NCU"
DEFAULT_NCU = "/usr/local/cuda/bin/ncu"
PERMISSION_URL = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
# Without these the counters cannot place a kernel on the roofline at all.
ESSENTIAL = (TIME, DRAM_READ, DRAM_WRITE)
_ROOFSCOPE_PARENT = str(Path(__file__).resolve().parents[2])


class NcuError(RoofscopeError):
    """ncu is missing, lacks permission, or profiled nothing usable."""


@dataclass(frozen=True)
class Target:
    """What to re-run: the script (or ``-m`` module), its arguments and the recorded schedule."""

    target: str
    args: tuple[str, ...]
    module: bool
    schedule: Schedule
    step_on: str | None = None   # the Run's --step-on: the counters pass counts the same boundaries


@dataclass
class NcuResult:
    table: pd.DataFrame      # parse_ncu_csv's frame
    version: str
    report: Path             # the .ncu-rep
    command: list[str]
    warnings: list[str]


def find_ncu() -> str:
    """``$ROOFSCOPE_NCU``, else ``ncu`` on PATH, else the CUDA toolkit's default location."""
    env = os.environ.get(NCU_ENV)
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise NcuError(f"{NCU_ENV}={env} is not an executable file; point it at Nsight Compute's ncu")
        return env
    found = shutil.which("ncu")
    if found:
        return found
    if os.path.isfile(DEFAULT_NCU) and os.access(DEFAULT_NCU, os.X_OK):
        return DEFAULT_NCU
    raise NcuError("Nsight Compute (ncu) not found on PATH or at /usr/local/cuda/bin/ncu: install Nsight "
                   f"Compute (it ships with the CUDA toolkit) and put ncu on PATH, or set {NCU_ENV}=/path/to/ncu")


def ncu_version(ncu: str) -> str:
    """The ``Version ...`` line of ``ncu --version`` (e.g. ``2025.3.1.0 (build 36398880)``)."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NcuError(f"cannot run {ncu} --version: {e}") from None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    version = next((line for line in reversed(lines) if line.startswith("Version")), lines[-1] if lines else "")
    return version.removeprefix("Version").strip()


def profile_command(ncu: str, target: Target, report_base: Path, sample: int | None = None,
                    python: str = sys.executable, skip: int = 0, kernel_name: str | None = None,
                    nvtx: str | None = None) -> list[str]:
    """The ncu command line of the counters pass (``report_base`` + ``.ncu-rep`` is written).
    ``kernel_name`` (a regex on the function name) and ``nvtx`` (a push/pop range, as
    roofscope.region() opens) become ncu's own filters; its launch skip and count apply to the
    launches they select."""
    s = target.schedule
    cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--metrics", ",".join(METRICS)]
    if kernel_name is not None:
        cmd += ["--kernel-name", f"regex:{kernel_name}"]
    if nvtx is not None:
        cmd += ["--nvtx", "--nvtx-include", f"{nvtx}/"]
    if skip:
        cmd += ["--launch-skip", str(skip)]
    if sample is not None:
        cmd += ["--launch-count", str(sample)]
    cmd += ["-o", str(report_base), "--force-overwrite",
            python, "-m", "roofscope.collectors.counters.ncu_target",
            "--wait", str(s.wait), "--warmup", str(s.warmup), "--active", str(s.active)]
    if target.step_on:
        cmd += ["--step-on", target.step_on]
    if target.module:
        cmd.append("-m")
    return cmd + [target.target, *target.args]


def import_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def check_output(lines: list[str], returncode: int, schedule: Schedule, filtered: bool = False) -> None:
    """Raise the :class:`NcuError` that ncu's output and exit code call for, if any."""
    text = "\n".join(lines)
    if "ERR_NVGPUCTRPERM" in text:
        raise NcuError("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or "
                       "allow all users with the line `options nvidia NVreg_RestrictProfilingToAdminUsers=0` "
                       f"in a file in /etc/modprobe.d/ and reboot; see {PERMISSION_URL}")
    failed = next((line for line in lines if "The application returned an error code" in line), None)
    if failed is not None:
        code = failed.rsplit("(", 1)[-1].rstrip(").")
        raise NcuError(f"the script failed under ncu with exit code {code}; it must run to the end of "
                       "the profiled steps (see its output above)")
    if returncode != 0:
        errors = [line.removeprefix("==ERROR==").strip() for line in lines if line.startswith("==ERROR==")]
        raise NcuError(f"ncu failed with exit code {returncode}: {errors[-1] if errors else 'no error message'}")
    if "No kernels were profiled" in text and filtered:
        raise NcuError("ncu profiled no kernels: no launch of the profiled steps matched --kernel-name / --nvtx"
                       " (the regex is searched in the function name, e.g. `gemm|gelu`; --nvtx names a"
                       " roofscope.region() or other NVTX push/pop range)")
    if "No kernels were profiled" in text:
        raise NcuError("ncu profiled no kernels: the script reached no step boundary of the profiled range "
                       f"(it starts after {schedule.wait + schedule.warmup} steps; call roofscope.step() per "
                       "iteration or use an optimizer) or launched no CUDA kernels (is CUDA available?)")


def check_metrics(table: pd.DataFrame) -> list[str]:
    """Warnings for metrics ncu reported as ``n/a``; an :class:`NcuError` if the roofline needs them."""
    na = list(table.attrs.get("na_metrics", []))
    if not na:
        return []
    msg = f"ncu reported n/a for {', '.join(na)}: not supported on this GPU or ncu version"
    if any(m in ESSENTIAL for m in na):
        raise NcuError(msg)
    return [msg + "; those columns are empty"]


def _run_streaming(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[list[str], int]:
    """Run ``cmd``, echoing its output (the script's and ncu's) as it comes; keep ncu's own lines."""
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", bufsize=1)
    except OSError as e:
        raise NcuError(f"cannot run {cmd[0]}: {e.strerror}") from None
    kept: list[str] = []
    assert proc.stdout is not None
    with proc.stdout:
        for line in proc.stdout:
            sys.stdout.write(line)
            if line.startswith("==") or "ERR_NVGPUCTRPERM" in line:
                kept.append(line.rstrip("\n"))
    sys.stdout.flush()
    return kept, proc.wait()


def collect(target: Target, cwd: str, workdir: Path, sample: int | None = None, skip: int = 0,
            kernel_name: str | None = None, nvtx: str | None = None) -> NcuResult:
    """Run the counters pass of ``target`` in ``cwd``; the report lands in ``workdir``."""
    if sample is not None and sample < 1:
        raise NcuError(f"--sample must be at least 1, got {sample}")
    if skip < 0:
        raise NcuError(f"--skip must be at least 0, got {skip}")
    if not Path(cwd).is_dir():
        raise NcuError(f"the Run's working directory {cwd} does not exist here; run the counters pass where "
                       "the Run was recorded, or export a CSV with ncu yourself and pass --from-csv")
    ncu = find_ncu()
    version = ncu_version(ncu)
    base = workdir / "counters"
    cmd = profile_command(ncu, target, base, sample, skip=skip, kernel_name=kernel_name, nvtx=nvtx)
    env = dict(os.environ)
    # The inner runner must be this roofscope, also when it runs from a source tree (an
    # installed one is found anyway, and its site-packages must not go ahead of the stdlib).
    if Path(_ROOFSCOPE_PARENT).name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOFSCOPE_PARENT, env.get("PYTHONPATH")) if p)
    lines, rc = _run_streaming(cmd, cwd, env)
    check_output(lines, rc, target.schedule, filtered=kernel_name is not None or nvtx is not None)
    report = base.with_suffix(".ncu-rep")
    if not report.is_file():
        raise NcuError(f"ncu wrote no report ({report.name}); its messages: {' | '.join(lines[-3:]) or 'none'}")
    exported = subprocess.run(import_command(ncu, report), capture_output=True, text=True, errors="replace")
    if exported.returncode != 0:
        last = (exported.stderr.strip() or exported.stdout.strip()).splitlines()[-1:] or ["no message"]
        raise NcuError(f"ncu --import {report.name} failed (exit {exported.returncode}): {last[0]}")
    table = parse_ncu_csv(exported.stdout)
    return NcuResult(table=table, version=version, report=report, command=cmd, warnings=check_metrics(table))
