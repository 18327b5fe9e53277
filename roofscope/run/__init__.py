"""The Run: a versioned directory holding everything one profile collected.

``layout`` names its files (and a job directory's), ``schema`` types its documents and holds
the version policy every reader applies, ``directory`` opens and writes a Run, ``manifest`` lists
the files roofscope wrote into one (what ``--force`` may replace), ``derived``
stamps the files computed from it (summary.json, report.html). The names
below are the package's public face; other modules import them from here.
"""
from __future__ import annotations

from roofscope.run.derived import ANALYSIS_VERSION, summary_text
from roofscope.run.directory import (SCHEMA_VERSION, Run, RunError, environment, is_run_dir, load, new_meta, read_meta,
                                     typed_meta, update_meta, write_run)
from roofscope.run.layout import (CAPTURE_FILES, CEILINGS_FILE, COMBINED_FILES, COUNTERS_FILE, COUNTERS_REPORT,
                                  JOB_FILE, META_FILE, REPORT_FILE, SUMMARY_FILE, TELEMETRY_FILE, TRACE_FILE)

__all__ = ["ANALYSIS_VERSION", "CAPTURE_FILES", "CEILINGS_FILE", "COMBINED_FILES", "COUNTERS_FILE",
           "COUNTERS_REPORT", "JOB_FILE", "META_FILE", "REPORT_FILE", "SCHEMA_VERSION", "SUMMARY_FILE",
           "TELEMETRY_FILE", "TRACE_FILE", "Run", "RunError", "environment", "is_run_dir", "load", "new_meta",
           "read_meta", "summary_text", "typed_meta", "update_meta", "write_run"]
