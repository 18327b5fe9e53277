"""`roofscope verify RUN`: the Run's top fixes injected into its program and measured, without the profiler.

workflow.py runs the rounds and writes verify.json; candidates.py chooses the fixes and their
predictions from the Run's summary; runs.py starts one run of the program (collectors/inject/'s
bootstrap) and estimates its cost; stats.py turns the runs into a saving, its interval and a status.
docs/verify.md is the user's guide.
"""
from __future__ import annotations

from roofscope.verify.candidates import NothingToVerify
from roofscope.verify.runs import Program
from roofscope.verify.workflow import Stopped, VerifyError, verify_run

__all__ = ["NothingToVerify", "Program", "Stopped", "VerifyError", "verify_run"]
