"""Fixes roofscope can inject into a program without editing it: the spec grammar and registry
(registry.py), what installers get (injection.py) and the built-in installers (patches.py).

Nothing here imports torch until an installer runs: the analysis names fixes (summary.json's
``fix.apply``) with this package as well as the program's process applies them.
"""
from __future__ import annotations

from roofscope.fixes.injection import Injection, Roots
from roofscope.fixes.registry import (FIXES, Fix, FixError, Spec, derive, install, load_modules, parse,
                                      register, spec_text, switches)

__all__ = ["FIXES", "Fix", "FixError", "Injection", "Roots", "Spec", "derive", "install", "load_modules", "parse",
           "register", "spec_text", "switches"]
