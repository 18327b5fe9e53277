"""When Kineto detaches CUPTI between profiler sessions (``TEARDOWN_CUPTI``).

Without a teardown CUPTI stays attached to every later launch, and the rest of the program runs
slower than it would unprofiled (GPT-2 ``generate()`` on an H200: 7.2 against 5.8 ms per token
after the profile, docs/overhead.md). But Kineto's teardown is asynchronous, and it races the next
session:

- every session's reset asks for it: the reset at its stop, and the reset at the *next* session's
  start while CUPTI is still attached; ``TEARDOWN_CUPTI`` is read at each of them;
- the reset starts a thread that arranges for ``cuptiFinalize`` to run in the callback of the
  next CUDA API call;
- a session started before that call is finalized with it and records no GPU activity at all
  (pytorch/kineto#1554; measured on the H200 in docs/validation.md).

roofscope starts sessions in quick succession: a rearm, a CUDA-graph capture's own profiler, a
step-less window followed by the step schedule. So when the user has not set the variable,
roofscope keeps it ``0`` and sets ``1`` only around a stop after which no session of roofscope's
starts at once (:func:`stopping`); a session that starts soon after such a stop first lets the
pending teardown finish (:func:`before_start`: a CUDA call). torch.profiler turns teardown off itself where
CUDA graphs crash it (it sets ``DISABLE_CUPTI_LAZY_REINIT``): that wins, as the user's own
setting does.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

ENV = "TEARDOWN_CUPTI"
NO_LAZY_REINIT_ENV = "DISABLE_CUPTI_LAZY_REINIT"
# How long a teardown's thread may take to be ready for its finalize: it subscribes CUPTI's
# callbacks and flushes the (already drained) activity buffers first.
TEARDOWN_S = 0.1
_POLL_S = 0.002


@dataclass
class _State:
    owned: bool = False                 # roofscope decides the variable (the user did not set it)
    pending_since: float | None = None  # time.monotonic() of the latest stop that asked for a teardown


_state = _State()


def claim() -> str:
    """Take the variable over unless the user set it; says how. Until :func:`stopping` says
    otherwise, no session's reset detaches CUPTI."""
    value = os.environ.get(ENV)
    if value not in (None, "") and not _state.owned:
        return f"left as set ({ENV}={value})"
    _state.owned = True
    os.environ[ENV] = "0"
    return "detached where profiling ends"


def _may_detach() -> bool:
    return _state.owned and NO_LAZY_REINIT_ENV not in os.environ


@contextmanager
def stopping(then_start: bool = False) -> Iterator[None]:
    """Around a Kineto session's stop: CUPTI is detached after it, unless ``then_start`` (a session
    of roofscope's starts right after: detaching now would race it, and it detaches at its own stop)."""
    if then_start or not _may_detach():
        yield
        return
    os.environ[ENV] = "1"
    try:
        yield
    finally:
        os.environ[ENV] = "0"
        _state.pending_since = time.monotonic()


def before_start() -> None:
    """Before a Kineto session starts: let a teardown begun by a :func:`stopping` reach its finalize
    first. The finalize runs in the callback of a CUDA call, so one is made: at once when the
    teardown's thread has had :data:`TEARDOWN_S`, else repeatedly until it has."""
    since, _state.pending_since = _state.pending_since, None
    if since is None:
        return
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    while True:
        ready = time.monotonic() - since >= TEARDOWN_S
        torch.cuda.synchronize()
        if ready:
            return
        time.sleep(_POLL_S)
