"""The command line's early read (kineto_prefetch.py): a child forked at start-up reads the trace while the
process imports the analysis; what the analysis gets is what reading the file itself gives, and whatever
the child cannot give (a changed file, an error) is read again here, with the same messages."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import roofscope.analyzers.ingest.kineto_frames as frames_mod
import roofscope.analyzers.ingest.kineto_prefetch as prefetch
from roofscope.analyzers.ingest.kineto_reader import load_trace
from roofscope.cli import main
from roofscope.errors import TraceError

DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parents[1]
TABLES = ("ops", "signatures", "kernels", "runtime", "annotations", "comm_args")


@pytest.fixture
def forkable(monkeypatch):
    """A fork allowed whatever threads the test runner holds; read_columns counted in this process."""
    monkeypatch.setattr(prefetch, "may_fork", lambda: True)
    here: list[str] = []
    read = frames_mod.read_columns
    monkeypatch.setattr(frames_mod, "read_columns", lambda path: (here.append(path), read(path))[-1])
    yield here
    prefetch._stop()


def _same(a, b) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.meta == b.meta


@pytest.mark.parametrize("fixture", ["h100_eager_block.json.gz", "cpu_block.json.gz", "h100_conv_block.json.gz"])
def test_the_childs_read_is_the_read(fixture, forkable):
    path = DATA / fixture
    alone = load_trace(path)
    forkable.clear()
    prefetch.start(str(path))
    assert prefetch._child is not None
    _same(load_trace(path), alone)
    assert forkable == [] and prefetch._child is None  # the child's columns, taken once


def test_a_file_changed_since_is_read_here(forkable, tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes((DATA / "cpu_block.json.gz").read_bytes())
    prefetch.start(str(path))
    path.write_bytes((DATA / "h100_eager_block.json.gz").read_bytes())
    os.utime(path, ns=(1, 1))
    _same(load_trace(path), load_trace(DATA / "h100_eager_block.json.gz"))
    assert forkable[0] == str(path)  # read here, not taken from the child


def test_what_the_child_cannot_read_is_read_here_and_refused_so(forkable, tmp_path):
    path = tmp_path / "broken.json"
    data = gzip.decompress((DATA / "cpu_block.json.gz").read_bytes())
    at = data.index(b"},", len(data) // 2) + 2
    path.write_bytes(data[:at] + b" @ " + data[at:])  # a stray byte between two events: no repair makes it JSON
    with pytest.raises(TraceError) as alone:
        load_trace(path)
    prefetch.start(str(path))
    with pytest.raises(TraceError) as read:
        load_trace(path)
    assert str(read.value) == str(alone.value) and len(forkable) == 2


def test_a_child_not_taken_is_stopped(forkable):
    prefetch.start(str(DATA / "cpu_block.json.gz"))
    pid = prefetch._child.pid
    prefetch._stop()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, 0)


@pytest.mark.parametrize("name", ["h100_eager_block.json.gz", "cpu_cnn_runs/threads1"])
def test_the_programs_own_run_reads_ahead_and_writes_the_same(name, tmp_path):
    """`python -m roofscope analyze` (the program's own run: the child reads the trace, or the Run's) against
    main() in this process (no child): the same JSON."""
    trace = DATA / name
    assert main(["analyze", str(trace), "--json", str(tmp_path / "here.json"), "-q"]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(trace), "--json",
                           str(tmp_path / "own.json"), "-q"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "own.json").read_bytes() == (tmp_path / "here.json").read_bytes()


def test_a_child_dies_with_its_parent(tmp_path):
    """A parent killed outright (SIGKILL: no exit handlers) takes its reading child with it."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "import roofscope.analyzers.ingest.kineto_prefetch as prefetch\n"
        "prefetch.may_fork = lambda: True\n"
        "prefetch.read_columns = lambda path: time.sleep(60)\n"
        f"prefetch.start({str(DATA / 'cpu_block.json.gz')!r})\n"
        "print(prefetch._child.pid, flush=True)\n"
        "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    for _ in range(200):  # the kernel's signal, then the reaping by init
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{child}/stat") as f:
            if f.read().split(") ")[1].startswith("Z"):
                return
        time.sleep(0.01)
    pytest.fail(f"child {child} outlived its parent")
