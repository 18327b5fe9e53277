"""Kineto (torch.profiler) JSON decoding: typed structs, a tolerant fallback, non-trace detection.

Fields whose JSON type varies between torch/Kineto versions and vendors are typed to accept
every variant seen in real traces (ids and sizes as numbers or numeric strings, ROCm's
``"stream": "0x0"``, ``"grid": "grid(100,)"``), so one typed msgspec pass decodes them at C
speed. An event that still does not fit (a hostile or corrupted field) fails that pass; the
file is then decoded event by event, and each malformed event is skipped and counted by its
reason ("args.bytes not a number"); so is an event holding a token that is not JSON (NaN,
Infinity, a lone surrogate escape: Python's json writes them). Shape arguments stay raw JSON
bytes so that identical op signatures are deduplicated before anything is parsed. Files that
are not Kineto traces (execution traces, memory timelines, rocprof output) are refused in one
line. kineto_stream.py applies the same repairs region by region, and decodes the end of a file
with its head here, byte offsets given as the file's.
"""
from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Union

import msgspec

from roofscope.analyzers.model.trace import CUT_SHORT
from roofscope.errors import TraceError

_NO_RAW = msgspec.Raw(b"")

# int | str: ROCm writes stream handles as hex strings ("0x0"); see as_int.
_IntOrStr = Union[int, str, None]
# Launch dimensions: [x, y, z], or a string in some Triton/ROCm traces ("grid(100,)").
_Dims = Union[list[int], str, None]


class Args(msgspec.Struct, frozen=True, gc=False):
    external_id: Union[int, None] = msgspec.field(name="External id", default=None)
    correlation: Union[int, None] = None
    device: _IntOrStr = None
    stream: _IntOrStr = None
    bytes: Union[float, None] = None
    # ROCm memcpy runtime calls carry the copy size (as a string) where CUDA kernels carry bytes.
    size: Union[float, None] = None
    grid: _Dims = None
    block: _Dims = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NO_RAW)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NO_RAW)
    input_strides: msgspec.Raw = msgspec.field(name="Input Strides", default=_NO_RAW)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NO_RAW)
    # record_param_comms' collective arguments (newer PyTorch). Raw: other ops use these keys
    # with other types (an op's own "dtype"), so they are decoded on record_param_comms only.
    comm_collective: msgspec.Raw = msgspec.field(name="Collective name", default=_NO_RAW)
    comm_in_nelems: msgspec.Raw = msgspec.field(name="In msg nelems", default=_NO_RAW)
    comm_out_nelems: msgspec.Raw = msgspec.field(name="Out msg nelems", default=_NO_RAW)
    comm_dtype: msgspec.Raw = msgspec.field(name="dtype", default=_NO_RAW)
    comm_group_size: msgspec.Raw = msgspec.field(name="Group size", default=_NO_RAW)
    kernel_num_gb: Union[float, None] = None
    kernel_flop: Union[float, None] = None
    kernel_backend: Union[str, None] = None
    rf_id: Union[int, None] = msgspec.field(name="Record function id", default=None)
    # Autograd sequence number: a backward node carries its forward op's number.
    seq: Union[int, None] = msgspec.field(name="Sequence number", default=None)
    # CUPTI range-profiler counters (old Kineto "cuda_profiler_range" events): SASS
    # instruction counts per precision; FLOPs = add + mul + 2 * fma.
    sass_dadd: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_dadd_pred_on.sum", default=None)
    sass_dmul: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_dmul_pred_on.sum", default=None)
    sass_dfma: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_dfma_pred_on.sum", default=None)
    sass_hadd: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_hadd_pred_on.sum", default=None)
    sass_hmul: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_hmul_pred_on.sum", default=None)
    sass_hfma: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_hfma_pred_on.sum", default=None)
    sass_fadd: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", default=None)
    sass_fmul: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_fmul_pred_on.sum", default=None)
    sass_ffma: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", default=None)


EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: str = ""
    pid: _IntOrStr = None
    tid: _IntOrStr = None
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    args: Args = EMPTY_ARGS


# Top-level keys kept as trace metadata; typed Any so that an odd value is checked here
# (clean_meta), not a reason to refuse the file.
META_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "record_shapes", "baseTimeNanoseconds",
             "cuda_runtime_version", "cuda_driver_version", "cupti_version", "displayTimeUnit", "traceName")


class TraceFile(msgspec.Struct):
    traceEvents: Union[list[Event], None] = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    record_shapes: Any = None
    baseTimeNanoseconds: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    displayTimeUnit: Any = None
    traceName: Any = None


class _LooseFile(TraceFile):
    """The same file with its events left raw, to decode them one by one."""

    traceEvents: Union[list[msgspec.Raw], None] = None


class _Sniff(msgspec.Struct):
    """Keys that name the other JSON files a profiling user has lying around."""

    nodes: msgspec.Raw = _NO_RAW                       # PyTorch execution trace (ExecutionTraceObserver)
    schema: msgspec.Raw = _NO_RAW
    rocprofiler_sdk: msgspec.Raw = msgspec.field(name="rocprofiler-sdk-tool", default=_NO_RAW)
    traceEvents: msgspec.Raw = _NO_RAW


# strict=False: numbers written as strings ("2560") decode as numbers.
_DECODER = msgspec.json.Decoder(Union[TraceFile, list[Event]], strict=False)
_LOOSE_DECODER = msgspec.json.Decoder(Union[_LooseFile, list[msgspec.Raw]], strict=False)
_EVENT_DECODER = msgspec.json.Decoder(Event, strict=False)
_SNIFF_DECODER = msgspec.json.Decoder(Union[_Sniff, list[msgspec.Raw]])


@dataclass
class Decoded:
    doc: TraceFile
    # Malformed events skipped, by reason ("args.bytes not a number": 12).
    skipped: Counter = field(default_factory=Counter)
    # Entries decoded one by one, kept or skipped (0: the typed pass took them all); a file none
    # of whose entries is an event is refused (no_events) by whoever read all of its pieces.
    entries: int = 0


def _same(at: int) -> int:
    return at


@dataclass
class _Piece:
    """What decoding one piece of a file knows of the file: its name, where the piece's bytes are in
    it (messages give the file's byte offsets) and the first malformation a repair fixed before
    the piece (what decoding the file whole would have named; kineto_stream.py)."""

    path: str
    at: Callable[[int], int] = _same
    first_error: str | None = None
    skipped: Counter = field(default_factory=Counter)

    def moved(self, error: Exception | str) -> str:
        """A msgspec message with its byte offset in the file."""
        return _BYTE_AT.sub(lambda m: f"(byte {self.at(int(m.group(1)))})", str(error))

    def invalid(self, error: Exception, why: str = "") -> TraceError:
        return TraceError(f"{self.path}: not valid JSON ({self.first_error or self.moved(error)}){why}")


_BYTE_AT = re.compile(r"\(byte (\d+)\)")


def decode(path: str, data: bytes, at: Callable[[int], int] = _same, first_error: str | None = None) -> Decoded:
    """Decode a Kineto trace; raises :class:`TraceError` (one line) for anything else. ``at`` and
    ``first_error`` place a piece of a file read as a stream (see :class:`_Piece`)."""
    if not data.strip():
        raise TraceError(f"{path}: empty file")
    piece = _Piece(path, at, first_error)
    entries = 0
    try:
        given = data
        data, doc = _parse(piece, data, _typed)
        # Some event does not fit the typed pass, or holds a token that is not JSON (a marked
        # value, which may fit a string field): decode them one by one.
        if doc is None or (data is not given and MARK in data):
            data, loose = _parse(piece, data, lambda d: _loose(path, d))
            raws = loose if isinstance(loose, list) else loose.traceEvents
            entries = len(raws or ())
            events = one_by_one(raws or (), MARK in data, piece.skipped)
            doc = events if isinstance(loose, list) else TraceFile(traceEvents=None if raws is None else events,
                                                                   **{k: getattr(loose, k) for k in META_KEYS})
    except RecursionError:
        # No decoder splits such a file into events; no profiler nests its arguments this deep.
        raise TraceError(f"{path}: not a Kineto trace (JSON nested more than {sys.getrecursionlimit()} levels"
                         " deep)") from None
    if isinstance(doc, list):
        doc = TraceFile(traceEvents=doc)
    if doc.traceEvents is None:
        raise TraceError(f"{path}: {_what_else(data)}")
    return Decoded(doc, piece.skipped, entries)


def no_events(path: str, data: bytes, entries: int) -> TraceError:
    """The refusal of a file none of whose ``entries`` is a trace event (``data``: its last piece)."""
    return TraceError(f"{path}: {_what_else(data, None, f'none of its {entries} entries is a trace event')}")


class _Malformed(Exception):
    def __init__(self, error: msgspec.DecodeError):
        self.error = error


def _typed(data: bytes) -> TraceFile | list[Event] | None:
    """The one fast typed pass; None when some event does not fit it."""
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError as e:
        raise _Malformed(e) from None


def _loose(path: str, data: bytes) -> _LooseFile | list[msgspec.Raw]:
    try:
        return _LOOSE_DECODER.decode(data)
    except msgspec.ValidationError as e:
        raise TraceError(f"{path}: {_what_else(data, e)}") from None
    except msgspec.DecodeError as e:
        raise _Malformed(e) from None


def _parse(piece: _Piece, data: bytes, fn: Callable[[bytes], Any]) -> tuple[bytes, Any]:
    """``fn(data)``, after replacing bytes that are not UTF-8 and repairing malformed JSON where
    that is possible; returns the data it finally decoded, too."""
    for _ in range(2):
        try:
            return data, fn(data)
        except UnicodeDecodeError:
            data = valid_utf8(data)
        except _Malformed as e:
            if not_utf8(e.error):
                data = valid_utf8(data)
                continue
            return _repaired(piece, data, e.error, fn)
    raise TraceError(f"{piece.path}: not valid UTF-8 JSON")


def not_utf8(error: Exception) -> bool:
    """Whether a decode failed on bytes that are not UTF-8: msgspec before 0.23 raises UnicodeDecodeError,
    0.23 a DecodeError ("Invalid UTF-8 encoded string")."""
    return isinstance(error, UnicodeDecodeError) or (isinstance(error, msgspec.DecodeError) and "UTF-8" in str(error))


def valid_utf8(data: bytes) -> bytes:
    # Names are for display: a byte that is not UTF-8 becomes U+FFFD rather than sinking the file.
    return data.decode("utf-8", errors="replace").encode("utf-8")


# Raw control characters are invalid inside JSON strings (some writers leave them in kernel
# names); as a space they are harmless everywhere.
CONTROL = bytes.maketrans(bytes(range(32)), b" " * 32)
# A cut file is closed after one of its last complete events: tried from the end, this many.
CUT_TRIES = 32


def _repaired(piece: _Piece, data: bytes, error: msgspec.DecodeError,
              fn: Callable[[bytes], Any]) -> tuple[bytes, Any]:
    """Decode JSON that is malformed only by raw control characters or by being cut short
    (a process killed while writing its trace): what is complete is analyzed, and said so."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        data = valid_utf8(data)
    marked = mark(data)
    if marked is not data:
        # NaN, Infinity or a lone surrogate escape (Python's json writes them) is not JSON, and
        # msgspec calls a leading "-I" truncation: the marked events are skipped, not the file.
        return _parse(piece, marked, fn)
    if "truncated" not in str(error):
        cleaned = data.translate(CONTROL)
        try:
            return cleaned, fn(cleaned)
        except _Malformed:
            raise piece.invalid(error) from None
    if piece.first_error:
        # Decoded whole, the file would have had its control characters replaced, and been cut
        # short after that: refused.
        raise piece.invalid(error)
    end = len(data)
    for _ in range(CUT_TRIES):
        end = data.rfind(b"}", 0, end)
        if end < 0:
            break
        for close in (b"]}", b"]"):
            candidate = data[: end + 1] + close
            try:
                doc = fn(candidate)
            except _Malformed:
                continue
            piece.skipped[f"{CUT_SHORT} at byte {piece.at(len(data)):,}: the events after byte "
                          f"{piece.at(end + 1):,} are lost"] += 1
            return candidate, doc
    raise piece.invalid(error, "; the file is truncated") from None


# Where a token that is not JSON was: a string holding a NUL and this text (NUL never occurs
# in a profiler's strings), then what it was (see mark).
MARK = b"\\u0000roofscope:"
MARK_REASONS = {b"nonfinite": "NaN or Infinity (not JSON)", b"surrogate": "a lone UTF-16 surrogate in a string"}
# A run of JSON without escapes or the letters of NaN / Infinity outside strings (one match for
# most of a file), a string with escapes, a bare NaN / Infinity, or a lone such character.
# (possessive: never backtracks, ~80 MB/s).
_TOKENS = re.compile(rb'(?:[^"NI-]++|"[^"\\]*+")++|"[^"\\]*+(?:\\.[^"\\]*+)*+"|-?Infinity|NaN|[NI-]')
# A surrogate escape: a high one followed by its low one is a pair (kept), any other is alone.
_SURROGATES = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
                         rb"|\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def _mark_surrogate(m: re.Match) -> bytes:
    return m.group() if len(m.group()) == 12 else MARK + b"surrogate"


def _mark_token(m: re.Match) -> bytes:
    token = m.group()
    if token in (b"NaN", b"Infinity", b"-Infinity"):
        return b'"' + MARK + b'nonfinite"'
    return _SURROGATES.sub(_mark_surrogate, token) if token[:1] == b'"' and b"\\u" in token else token


def mark(data: bytes) -> bytes:
    """``data`` with NaN / Infinity tokens and lone surrogate escapes replaced by marked strings
    (the same object when it has none: a regex pass over the file only where one may be)."""
    if not any(t in data for t in (b"NaN", b"Infinity", b"\\ud", b"\\uD")):
        return data
    marked = _TOKENS.sub(_mark_token, data)
    return data if marked == data else marked


def one_by_one(raws: Iterable[msgspec.Raw], marked: bool, skipped: Counter) -> list[Event]:
    """Each event decoded on its own: the malformed ones are skipped and counted by reason, and so
    are those holding a marked token (``marked``: the data has some; see :func:`mark`)."""
    events = []
    for raw in raws:
        at = bytes(raw).find(MARK) if marked else -1
        if at >= 0:
            what = bytes(raw)[at + len(MARK):]
            skipped[next((r for k, r in MARK_REASONS.items() if what.startswith(k)), "not JSON")] += 1
            continue
        try:
            try:
                events.append(_EVENT_DECODER.decode(raw))
            except (UnicodeDecodeError, msgspec.DecodeError) as e:
                if not not_utf8(e):
                    raise
                events.append(_EVENT_DECODER.decode(valid_utf8(bytes(raw))))
        except msgspec.ValidationError as e:
            skipped[skip_reason(str(e))] += 1
    return events


_EXPECTED = {"int": "an integer", "float": "a number", "str": "a string", "array": "a list",
             "object": "an object", "bool": "a boolean"}
_VALIDATION = re.compile(r"Expected `([a-z]+)[^`]*`, got `([a-z]+)`(?: - at `\$\.?(.*)`)?$")
_AT = re.compile(r"^(.*?)(?: - at `\$\.?(.*)`)?$")


def skip_reason(message: str) -> str:
    """A short reason from a msgspec validation message: ``args.bytes not a number``."""
    m = _VALIDATION.match(message)
    if m:
        where = re.sub(r"\[\d+\]", "[]", m.group(3) or "") or "event"
        return f"{where} not {_EXPECTED.get(m.group(1), m.group(1))}"
    m = _AT.match(message)
    what, where = m.group(1), re.sub(r"\[\d+\]", "[]", m.group(2) or "") or "event"
    return f"{where}: {what[0].lower() + what[1:]}" if what else where


def _what_else(data: bytes, err: Exception | None = None, fallback: str | None = None) -> str:
    """What a JSON file that is not a Kineto trace is, for the refusal."""
    try:
        sniff = _SNIFF_DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        sniff = None
    if isinstance(sniff, list):
        first = bytes(sniff[0])[:1] if sniff else b""
        if first == b"[":
            return ("not a Kineto trace: a memory timeline (export_memory_timeline's raw list of "
                    "[time, action, ...] rows); pass the profiler's trace (export_chrome_trace / "
                    "tensorboard_trace_handler) instead")
    elif sniff is not None:
        if sniff.nodes and sniff.schema:
            return ("not a Kineto trace: a PyTorch execution trace (ExecutionTraceObserver's graph of "
                    "nodes); pass the torch.profiler trace recorded beside it")
        if sniff.rocprofiler_sdk:
            return ("not a Kineto trace: rocprofv3 output; record the workload with torch.profiler "
                    "(its ROCm build writes Kineto traces) instead")
    if fallback:
        return f"not a Kineto trace ({fallback})"
    if err is not None:
        return f"not a Kineto trace ({err})"
    return "not a Kineto trace (no 'traceEvents' list)"


def clean_meta(doc: TraceFile) -> dict[str, Any]:
    """Top-level metadata with wrongly typed values dropped (a string where a list belongs)."""
    meta = {k: getattr(doc, k) for k in META_KEYS}
    props = meta["deviceProperties"]
    meta["deviceProperties"] = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else None
    if not isinstance(meta["distributedInfo"], dict):
        meta["distributedInfo"] = None
    base = meta["baseTimeNanoseconds"]
    meta["baseTimeNanoseconds"] = base if isinstance(base, int) and not isinstance(base, bool) else None
    for k in ("displayTimeUnit", "traceName"):
        if not isinstance(meta[k], str):
            meta[k] = None
    return meta


def as_int(v: Any) -> int | None:
    """An id or handle as an int: ints as they are, numeric strings in any base ("0x0"), else None."""
    if v is None or type(v) is int:
        return v
    try:
        return int(v, 0)
    except (TypeError, ValueError):
        try:
            return int(v)
        except (TypeError, ValueError):
            return None


def as_dims(v: Any) -> list[int] | None:
    """Launch dimensions as a list of ints ("grid(100,)" -> [100]), None when absent or unreadable."""
    if v is None or type(v) is list:
        return v
    digits = re.findall(r"\d+", v) if isinstance(v, str) else []
    # A number of more than 18 digits is no launch dimension (and int() refuses 4300 digits).
    return [int(x) for x in digits] if digits and max(map(len, digits)) <= 18 else None
