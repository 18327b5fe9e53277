"""collectors/cupti.py: TEARDOWN_CUPTI is 1 only around a stop after which no session starts at once."""
from __future__ import annotations

import os

import pytest

from roofscope.collectors import cupti


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(cupti, "_state", cupti._State())
    monkeypatch.delenv(cupti.ENV, raising=False)
    monkeypatch.delenv(cupti.NO_LAZY_REINIT_ENV, raising=False)


def test_claimed_teardown_is_asked_only_around_a_final_stop():
    assert cupti.claim() == "detached where profiling ends"
    # A session's start resets Kineto and would detach a still attached CUPTI: 0 outside stops.
    assert os.environ[cupti.ENV] == "0"
    with cupti.stopping(then_start=True):
        assert os.environ[cupti.ENV] == "0"
    assert cupti._state.pending_since is None
    with cupti.stopping():
        assert os.environ[cupti.ENV] == "1"
    assert os.environ[cupti.ENV] == "0"
    assert cupti._state.pending_since is not None
    # A second session in the same process claims again over roofscope's own 0.
    assert cupti.claim() == "detached where profiling ends"


def test_the_users_setting_is_left_alone(monkeypatch):
    monkeypatch.setenv(cupti.ENV, "1")
    assert cupti.claim() == "left as set (TEARDOWN_CUPTI=1)"
    with cupti.stopping():
        assert os.environ[cupti.ENV] == "1"
    assert os.environ[cupti.ENV] == "1"
    assert cupti._state.pending_since is None


def test_torch_turning_teardown_off_for_cuda_graphs_wins(monkeypatch):
    cupti.claim()
    # torch.profiler sets both where CUDA graphs crash CUPTI's re-init.
    monkeypatch.setenv(cupti.NO_LAZY_REINIT_ENV, "1")
    monkeypatch.setenv(cupti.ENV, "0")
    with cupti.stopping():
        assert os.environ[cupti.ENV] == "0"


def test_a_start_after_a_teardown_clears_it_without_cuda():
    cupti.claim()
    with cupti.stopping():
        pass
    cupti.before_start()   # no CUDA here: nothing to call, nothing pending after
    assert cupti._state.pending_since is None
