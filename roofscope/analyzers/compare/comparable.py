"""What two runs must share before `diff` or the gate compares them: one device, and whole traces.

A run on another device differs from its counterpart by the hardware, not by a change of the
code: its step times, its kernels and the ceilings its utilizations are shares of are another
machine's. A trace cut short (a process killed while writing it, a partial copy) holds only its
first events: its steps, kernel times and utilizations are of that part, and a GPU trace cut
before its kernels reads as a CPU-only one. Either is refused in one line (exit 2), never judged;
each command names the option that compares anyway, where one makes sense.
"""
from __future__ import annotations

from roofscope.errors import RoofscopeError


class IncomparableError(RoofscopeError):
    """Two runs that do not compare: another device or precision, a trace cut short."""


def refuse_other_device(device_a: str | None, device_b: str | None, what: str, remedy: str) -> None:
    """Refuse two runs of named, different devices; ``what`` names them (``"A ran on {a}, B on {b}"``)."""
    if device_a and device_b and device_a != device_b:
        raise IncomparableError(what.format(a=device_a, b=device_b) + ": their step times, kernels and ceilings"
                                f" differ by the hardware, not by a change of the code; {remedy}")


def refuse_cut_short(where: str, cut: str | None, allow_partial: bool) -> None:
    """Refuse a trace cut short (``cut``: its reader's reason, ``TraceMeta.cut_short``) unless
    ``allow_partial``: its figures are of the part it holds."""
    if cut and not allow_partial:
        raise IncomparableError(f"{where}: the trace was cut short ({cut}): its steps and figures are of the part"
                                " it holds; record it again, or pass --allow-partial to compare what it holds")
