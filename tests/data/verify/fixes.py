"""Fixes of a test registry (`--fix-module`), each with an effect a test can predict to the number:
``nap:MS`` caps every time.sleep at MS ms (train.py's 50 ms sleep becomes MS: a saving of 50 - MS ms per
step), ``crash`` makes SGD's step raise, ``perturb`` scales cross_entropy by 1.1 (every loss 10% higher:
9.1% apart relative to the larger), ``widen`` scales every Linear's output by 1.1 (outputs 10% apart),
``nap_switch:MS`` is ``nap`` as a switch (verify turns it off and on between the steps of one run)."""
import time
from types import SimpleNamespace

import torch

from roofscope.fixes import register


def nap(arg, inj):
    limit, sleep = float(arg) / 1e3, time.sleep
    inj.patch(time, "sleep", lambda s: sleep(min(s, limit)))
    inj.applied(f"time.sleep capped at {arg} ms")


def nap_switch(arg, inj):
    cap, sleep = SimpleNamespace(limit=None), time.sleep
    inj.patch(time, "sleep", lambda s: sleep(s if cap.limit is None else min(s, cap.limit)))
    inj.setting(cap, "limit", float(arg) / 1e3)
    inj.applied(f"time.sleep capped at {arg} ms, as a switch")


def crash(arg, inj):
    def step(*args, **kwargs):
        raise RuntimeError("synthetic crash in the optimizer")

    inj.patch(torch.optim.SGD, "step", step)
    inj.applied("SGD.step raises")


def perturb(arg, inj):
    ce = torch.nn.functional.cross_entropy
    inj.patch(torch.nn.functional, "cross_entropy", lambda *a, **k: ce(*a, **k) * 1.1)
    inj.applied("cross_entropy scaled by 1.1")


def widen(arg, inj):
    forward = torch.nn.Linear.forward
    inj.patch(torch.nn.Linear, "forward", lambda self, x: forward(self, x) * 1.1)
    inj.applied("Linear outputs scaled by 1.1")


register("nap", nap, "time.sleep capped at ARG ms", takes_arg=True)
register("nap_switch", nap_switch, "time.sleep capped at ARG ms, turned off and on", takes_arg=True, switch=True)
register("crash", crash, "SGD's step raises")
register("perturb", perturb, "cross_entropy scaled by 1.1")
register("widen", widen, "every Linear's output scaled by 1.1")
