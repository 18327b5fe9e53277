"""A trace read as a stream (kineto_stream.py: regions of REGION_BYTES, tabulated SUB events at a time)
gives exactly what it gives decoded whole, on clean files and on every repair and refusal of a broken one:
the same tables, skipped events (reasons, counts, byte offsets) and one-line errors."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

import roofscope.analyzers.ingest.kineto_columns as columns_mod
import roofscope.analyzers.ingest.kineto_helper as helper_mod
import roofscope.analyzers.ingest.kineto_stream as stream_mod
import roofscope.analyzers.ingest.source as source_mod
from roofscope.analyzers.ingest.kineto_reader import load_trace
from roofscope.errors import TraceError

DATA = Path(__file__).resolve().parent / "data"
TABLES = ("ops", "signatures", "kernels", "runtime", "annotations", "comm_args")
# Kineto's own layout: an event per "  {...}" block, "},\n  {" between them.
EAGER = gzip.decompress((DATA / "h100_eager_block.json.gz").read_bytes())


def _read(path: Path):
    try:
        return load_trace(path)
    except TraceError as e:
        return str(e)


def _whole_and_streamed(path: Path, monkeypatch, regions: list | None = None, helper: bool = False) -> tuple:
    """The file read as one region (every fixture is smaller than BUFFER_BYTES), then in regions of
    about 2 kB (some 6 events) tabulated 5 events at a time (``regions``: the events of each), in
    blocks of 5 kB, or with a helper process (``helper``) regions of 5 kB in blocks of 30 kB (those
    it has room for the helper's, and a block's last 10 kB or more when it frees a slot meanwhile);
    the file read 4 kB or inflated 512 bytes at a time, so that blocks
    follow one another."""
    whole = _read(path)
    with monkeypatch.context() as m:
        m.setattr(stream_mod, "REGION_BYTES", 5000 if helper else 2000)
        m.setattr(stream_mod, "BUFFER_BYTES", 30_000 if helper else 5000)
        m.setattr(stream_mod, "HANDOVER_BYTES", 10_000)
        m.setattr(source_mod, "READ_BYTES", 4096)
        m.setattr(source_mod, "HEAD_BYTES", 512)
        m.setattr(columns_mod, "SUB", 5)
        m.setattr(helper_mod, "wanted", lambda path: helper)
        emit = stream_mod.Stream._emit
        m.setattr(stream_mod.Stream, "_emit", lambda self, events, sink: (
            (regions if regions is not None else []).append(len(events)), emit(self, events, sink))[-1])
        streamed = _read(path)
    return whole, streamed


def _same(a, b) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, str):
        assert a == b
        return
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.meta == b.meta


def _record_sends(monkeypatch) -> list[tuple[int, bool]]:
    """Each block offered to the helper, and whether it took it, as the reading goes."""
    sent: list[tuple[int, bool]] = []
    send = helper_mod.Helper.send

    def recorded(self, block, data):
        taken = send(self, block, data)
        sent.append((block, taken))
        return taken

    monkeypatch.setattr(helper_mod.Helper, "send", recorded)
    return sent


def test_helper_process_takes_the_blocks_it_has_room_for(monkeypatch):
    """Read with a helper process (kineto_helper.py): blocks go to it while one of its slots is free,
    and the merged tables (names, signatures numbered in file order, kernels in time order) are the
    one-process ones."""
    sent = _record_sends(monkeypatch)
    whole, streamed = _whole_and_streamed(DATA / "h100_eager_block.json.gz", monkeypatch, helper=True)
    _same(whole, streamed)
    # 244 kB in blocks of about 30 kB: 6 or more offered (as many as the helper's share leaves), the
    # first two to the two free slots
    blocks = [b for b, _ in sent]
    assert blocks == list(range(1, len(blocks) + 1)) and len(blocks) >= 6 and sent[0][1] and sent[1][1]


def test_the_rest_of_a_block_goes_to_a_helper_that_frees_a_slot(monkeypatch):
    """Each time a region is read the helper is asked whether it has room (here it always says so):
    the buffer's rest goes to it, the reader goes on with the next buffer, and the tables are the
    same."""
    monkeypatch.setattr(helper_mod.Helper, "room", lambda self: True)
    sent = _record_sends(monkeypatch)
    whole, streamed = _whole_and_streamed(DATA / "h100_eager_block.json.gz", monkeypatch, helper=True)
    _same(whole, streamed)
    # more blocks than buffers (about 8): the rests are blocks of their own, some refused for want of a slot
    assert len(sent) > 10 and any(taken for _, taken in sent)


def test_a_busy_helper_is_given_no_more(monkeypatch):
    """A helper that frees no slot (still decoding) gets the first two blocks; the reading process
    decodes the others, and the tables are the same."""
    monkeypatch.setattr(helper_mod.Helper, "_freed", lambda self: None)
    sent = _record_sends(monkeypatch)
    whole, streamed = _whole_and_streamed(DATA / "h100_eager_block.json.gz", monkeypatch, helper=True)
    _same(whole, streamed)
    assert sent[:2] == [(1, True), (2, True)] and len(sent) > 4 and not any(taken for _, taken in sent[2:])


def test_no_helper_when_the_system_refuses_a_process(monkeypatch):
    def refuse() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(helper_mod.os, "fork", refuse)
    sent: list[int] = []
    monkeypatch.setattr(helper_mod.Helper, "send", lambda self, block, data: sent.append(block))
    whole, streamed = _whole_and_streamed(DATA / "h100_eager_block.json.gz", monkeypatch, helper=True)
    _same(whole, streamed)
    assert sent == []  # read alone


@pytest.mark.parametrize("fixture", ["h100_eager_block.json.gz", "cpu_block.json.gz", "h100_conv_block.json.gz"])
def test_streamed_in_small_regions_same_tables(fixture, monkeypatch):
    regions: list[int] = []
    whole, streamed = _whole_and_streamed(DATA / fixture, monkeypatch, regions)
    _same(whole, streamed)
    assert len(regions) > 20 and sum(regions) == whole.meta.events
    # signatures, threads, t0 and kernel order all span regions
    assert len(whole.ops) > 200 and whole.meta.events == streamed.meta.events
    assert whole.meta.skipped_events == {}


def _nth_event(data: bytes, n: int) -> int:
    """Where the n-th event of the file's list begins."""
    at = data.index(b'"traceEvents"')
    for _ in range(n):
        at = data.index(b"},\n  {", at + 1)
    return at + 5


def _with(data: bytes, n: int, old: bytes, new: bytes) -> bytes:
    """``old`` in the n-th event replaced by ``new``."""
    at = data.index(old, _nth_event(data, n))
    return data[:at] + new + data[at + len(old):]


def _name_at(data: bytes, n: int) -> int:
    """Where the n-th event's name begins."""
    return data.index(b'"name": "', _nth_event(data, n)) + 9


def _into_name(data: bytes, n: int, text: bytes) -> bytes:
    return data[:_name_at(data, n)] + text + data[_name_at(data, n):]


# What each broken file is: (its bytes, what decoding it must say)
CASES = {
    "an event of the wrong types": (
        _with(EAGER, 300, b'"ts": ', b'"args": {"bytes": {"not": "a number"}}, "ts": '),
        "skipped"),
    "NaN where a number belongs": (_with(EAGER, 400, b'"dur": ', b'"dur": NaN, "x": '), "skipped"),
    "a raw control character in a name": (_into_name(EAGER, 500, b"\x01"), "analyzed"),
    "a byte that is not UTF-8": (_into_name(EAGER, 200, b"\xff\xfe"), "analyzed"),
    "a lone surrogate": (_into_name(EAGER, 600, b"\\ud800"), "skipped"),
    "an entry that is no object": (EAGER[:_nth_event(EAGER, 250)] + b"17,\n  " + EAGER[_nth_event(EAGER, 250):],
                                   "skipped"),
    "cut short": (EAGER[: len(EAGER) * 3 // 5], "skipped"),
    "cut short after a raw control character": (_into_name(EAGER, 30, b"\x01")[: len(EAGER) // 2], "refused"),
    "a stray character between events": (
        EAGER[:_nth_event(EAGER, 700)] + b"@" + EAGER[_nth_event(EAGER, 700):], "refused"),
    "zeros after the head": (EAGER[:_nth_event(EAGER, 0)] + b"\0" * 50_000, "refused"),
    "zeros between events": (EAGER[:_nth_event(EAGER, 300)] + b"\0" * 5000 + EAGER[_nth_event(EAGER, 300):],
                             "analyzed"),
    "no event at all": (b'{"traceEvents": [' + b"1, " * 3000 + b"2]}", "refused"),
}


@pytest.mark.parametrize("helper", [False, True], ids=["one process", "with a helper"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_files_streamed_as_decoded_whole(case, helper, tmp_path, monkeypatch):
    """The same with a helper process: a broken block sends the file back to one process."""
    data, outcome = CASES[case]
    p = tmp_path / "t.json"
    p.write_bytes(data)
    whole, streamed = _whole_and_streamed(p, monkeypatch, helper=helper)
    _same(whole, streamed)
    if outcome == "refused":
        assert whole.startswith(f"{p}: ") and "\n" not in whole, whole
    else:
        assert not isinstance(whole, str), whole
        assert bool(whole.meta.skipped_events) == (outcome == "skipped"), whole.meta.skipped_events


def test_offsets_of_a_cut_and_a_refusal_are_the_files(tmp_path, monkeypatch):
    """The byte offsets said are the file's, not a region's."""
    monkeypatch.setattr(stream_mod, "REGION_BYTES", 2000)
    monkeypatch.setattr(stream_mod, "BUFFER_BYTES", 5000)
    data, _ = CASES["a stray character between events"]
    (p := tmp_path / "stray.json").write_bytes(data)
    with pytest.raises(TraceError, match=rf"invalid character \(byte {data.index(b'@')}\)\)$"):
        load_trace(p)
    data, _ = CASES["cut short"]
    (p := tmp_path / "cut.json").write_bytes(data)
    # the last event kept ends where the last "},\n  {" that is followed by a whole event begins
    (reason,) = load_trace(p).meta.skipped_events
    assert reason.startswith(f"file cut short at byte {len(data):,}: the events after byte ")


def test_tolerant_path_batched_too(tmp_path, monkeypatch):
    """A malformed event is skipped and counted; the other events are the clean file's."""
    doc = json.loads(EAGER)
    doc["traceEvents"].insert(5, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 1.0,
                                  "args": {"bytes": {"not": "a number"}}})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    whole, streamed = _whole_and_streamed(bad, monkeypatch)
    _same(whole, streamed)
    assert whole.meta.skipped_events == {"args.bytes not a number": 1}
    del doc["traceEvents"][5]
    (tmp_path / "good.json").write_text(json.dumps(doc))
    good = load_trace(tmp_path / "good.json")
    # the same events as the clean file, less the skipped one (the events count includes every entry kept)
    for name in ("ops", "kernels", "runtime"):
        pd.testing.assert_frame_equal(getattr(whole, name), getattr(good, name), check_exact=True)
