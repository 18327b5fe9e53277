"""roofscope's version, in a module of its own so that reports and Runs can record it
without importing the package's public facade (which reaches every layer)."""
from __future__ import annotations

__version__ = "0.1.0"
