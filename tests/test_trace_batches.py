"""Batched ingestion (kineto_frames.py decodes and tabulates BATCH_EVENTS events at a time) gives exactly the
tables of one batch, on the clean fast path and on the whole-file tolerant path alike."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

import roofscope.analyzers.ingest.kineto_frames as trace_mod
from roofscope.analyzers.ingest.kineto_reader import load_trace

DATA = Path(__file__).resolve().parent / "data"
TABLES = ("ops", "signatures", "kernels", "runtime", "annotations", "comm_args")


def _same(a, b) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.meta == b.meta


@pytest.mark.parametrize("fixture", ["h100_eager_block.json.gz", "cpu_block.json.gz"])
def test_small_batches_same_tables(fixture, monkeypatch):
    whole = load_trace(DATA / fixture)
    # 7 events per batch: signatures, threads, t0 and kernel order all span batches
    monkeypatch.setattr(trace_mod, "BATCH_EVENTS", 7)
    batched = load_trace(DATA / fixture)
    _same(whole, batched)
    assert len(whole.ops) > 7 * 10 and whole.meta.events == batched.meta.events


def test_tolerant_path_batched_too(tmp_path, monkeypatch):
    """A malformed event sends the file to the whole-file decoder (kineto.decode), which skips and
    counts it; its events are tabulated in batches as well, with the same result."""
    doc = json.loads(gzip.decompress((DATA / "h100_eager_block.json.gz").read_bytes()))
    doc["traceEvents"].insert(5, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 1.0,
                                  "args": {"bytes": {"not": "a number"}}})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    whole = load_trace(bad)
    assert whole.meta.skipped_events == {"args.bytes not a number": 1}
    monkeypatch.setattr(trace_mod, "BATCH_EVENTS", 5)
    _same(whole, load_trace(bad))
    del doc["traceEvents"][5]
    (tmp_path / "good.json").write_text(json.dumps(doc))
    good = load_trace(tmp_path / "good.json")
    # the same events as the clean file, less the skipped one (the events count includes every entry kept)
    for name in ("ops", "kernels", "runtime"):
        pd.testing.assert_frame_equal(getattr(whole, name), getattr(good, name), check_exact=True)
