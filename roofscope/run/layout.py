"""Every file name of a Run directory and of a job directory, in one place.

A Run (schema 1)::

    run.json                 metadata (schema.RunMeta): versions, command, host, device, steps, exit status
    trace.json.gz            the Kineto trace
    ceilings.json            ceilings measured where the run was collected (optional)
    telemetry.json.gz        NVML samples taken while profiling (optional; collectors/nvml.py)
    summary.json             the analysis summary, stamped with the analysis version (optional; derived.py)
    report.html              the HTML report rendered with that summary (optional)
    counters.json.gz         hardware counters joined to the trace's kernels (optional; roofscope/run/counters.py)
    counters.ncu-rep         Nsight Compute's own report of the counters pass (optional)
    graph-capture-NNNN.json.gz  one trace per recorded CUDA-graph capture (optional; analyzers/cost/graphs.py)
    verify.json              the fixes re-run in the program by `roofscope verify` (optional; run/verification.py)
    .roofscope-files         the manifest: every file above that roofscope wrote (manifest.py; --force replaces
                             those and never another file kept in the directory)

While a profile runs, its Run directory also holds ``.roofscope-claim`` (directory.py) and the recording
(``.roofscope-recording-*/``: the profiler's exports until the Run is written from them).

A job directory (torchrun: one Run per rank, collectors/distributed.py)::

    rank-0000/ ... rank-NNNN/                 the parts, one Run each
    job.json, summary.json, report.html       what `roofscope merge` writes beside them
"""
from __future__ import annotations

import re

META_FILE = "run.json"
TRACE_FILE = "trace.json.gz"
CEILINGS_FILE = "ceilings.json"
TELEMETRY_FILE = "telemetry.json.gz"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
COUNTERS_FILE = "counters.json.gz"
COUNTERS_REPORT = "counters.ncu-rep"
CAPTURE_FILES = "graph-capture-{:04d}.json.gz"   # .format(i): the i-th recorded capture
CAPTURE_GLOB = "graph-capture-*.json.gz"
VERIFY_FILE = "verify.json"
MANIFEST_FILE = ".roofscope-files"

# Every name roofscope gives its own bookkeeping inside a Run directory begins so (the manifest, the claim,
# the recording, the files being staged): none is the user's, none is a Run file.
HOUSEKEEPING_PREFIX = ".roofscope-"
RECORDING_PREFIX = ".roofscope-recording-"
# A Run's files before the manifest existed: what --force may replace in a Run that has none.
RUN_FILES = (META_FILE, TRACE_FILE, CEILINGS_FILE, TELEMETRY_FILE, SUMMARY_FILE, REPORT_FILE, COUNTERS_FILE,
             COUNTERS_REPORT, VERIFY_FILE)

JOB_FILE = "job.json"
# What `roofscope merge` writes into a job directory beside the parts.
COMBINED_FILES = (JOB_FILE, SUMMARY_FILE, REPORT_FILE)
RANK_DIR = re.compile(r"^rank-(\d+)$")

# JSON files roofscope writes that a folder of rank traces may hold beside the traces.
NOT_TRACES = frozenset({JOB_FILE, SUMMARY_FILE, META_FILE, CEILINGS_FILE, COUNTERS_FILE, TELEMETRY_FILE, VERIFY_FILE})


def part_name(rank: int, world_size: int) -> str:
    """``rank-0003``: four digits, more when the world needs them, so names sort by rank."""
    width = max(4, len(str(world_size - 1)))
    return f"rank-{rank:0{width}d}"
