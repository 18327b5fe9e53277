"""Property test: real traces mutated the ways real files differ and break (field types, missing
keys, truncation, hostile and non-UTF-8 names, NaN tokens) are analyzed (rc 0) or refused in one
line (rc 2) by analyze, report and diff; never a traceback, never an escape sequence or a
line-leading workflow command in the output."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from roofscope.cli import main  # noqa: E402

from .conftest import ROOT, external  # noqa: E402

# A real H100 trace of the project's own fixtures and ROCm 6.2's MI250 trace from HTA's (vendored).
BASES = [ROOT / "tests" / "data" / "h100_compiled_block.json.gz",
         external("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")]

HOSTILE = [None, "", "abc", "0x1f", "12", "1e3", "NaN", -1, 0, 1.5, 1e308, -1e308, 2**70, True, [], [[1, [2]]],
           {}, {"a": 1}, "<script>alert(1)</script>", "\u0000\u202e\n\"", "x" * 5000,
           # json writes NaN / Infinity tokens, which are not JSON; a 5000-digit number string;
           # escape sequences and a GitHub Actions command behind a newline.
           float("nan"), float("-inf"), "9" * 5000, "\x1b[31m\n::notice::x", "=HYPERLINK(1)"]
ARG_KEYS = ["External id", "correlation", "device", "stream", "bytes", "grid", "block", "Input Dims",
            "Input type", "Input Strides", "Concrete Inputs", "Sequence number", "Record function id",
            "kernel_num_gb", "kernel_flop", "In msg nelems", "Collective name", "dtype", "Group size"]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
TOP_KEYS = ["traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion"]


def _load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


_DOCS: dict[Path, dict] = {}


def _doc(i: int) -> dict:
    path = BASES[i]
    if path not in _DOCS:
        _DOCS[path] = _load(path)
    return json.loads(json.dumps(_DOCS[path]))  # a fresh copy to mutate


@st.composite
def mutated(draw) -> bytes:
    """One real trace, serialized, with 1-4 mutations."""
    doc = _doc(draw(st.integers(0, len(BASES) - 1)))
    events = doc["traceEvents"]
    cut = None
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["type", "type", "arg_type", "arg_type", "arg_type_all", "missing", "name",
                                     "top", "truncate", "non_utf8"]))
        e = events[draw(st.integers(0, len(events) - 1))] if events else {}
        if kind == "type":
            e[draw(st.sampled_from(EVENT_KEYS))] = draw(st.sampled_from(HOSTILE))
        elif kind == "arg_type":
            if isinstance(e.get("args"), dict):
                e["args"][draw(st.sampled_from(ARG_KEYS))] = draw(st.sampled_from(HOSTILE))
        elif kind == "arg_type_all":  # one field wrong in every event that has it
            key, value = draw(st.sampled_from(ARG_KEYS)), draw(st.sampled_from(HOSTILE))
            for ev in events:
                if isinstance(ev.get("args"), dict) and key in ev["args"]:
                    ev["args"][key] = value
        elif kind == "missing":
            target = e.get("args") if draw(st.booleans()) and isinstance(e.get("args"), dict) else e
            if isinstance(target, dict) and target:
                target.pop(draw(st.sampled_from(sorted(target))), None)
        elif kind == "name":
            e["name"] = draw(st.text(max_size=40))
        elif kind == "top":
            key = draw(st.sampled_from(TOP_KEYS))
            if draw(st.booleans()):
                doc.pop(key, None)
            else:
                doc[key] = draw(st.sampled_from(HOSTILE))
        elif kind == "truncate":
            cut = draw(st.floats(0.0, 1.0))
        elif kind == "non_utf8" and isinstance(e.get("name"), str):
            e["name"] = e["name"] + "@@BYTES@@"
    data = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
    data = data.replace(b"@@BYTES@@", draw(st.binary(min_size=1, max_size=4)).replace(b'"', b"\xff")
                        .replace(b"\\", b"\xfe"))
    if cut is not None:
        data = data[: int(len(data) * cut)]
    return gzip.compress(data, compresslevel=1) if draw(st.booleans()) else data


def _check(capsys, argv: list[str]) -> None:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc in (0, 2), (rc, err)
    assert "Traceback" not in out + err
    assert "\x1b" not in out and not any(line.startswith("::") for line in out.splitlines())
    if rc == 2:
        assert err.startswith("roofscope: error: ") and err.count("\n") == 1, err


_SETTINGS = dict(deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                        HealthCheck.data_too_large])


@settings(max_examples=40, **_SETTINGS)
@given(data=mutated())
def test_analyze_mutated_traces(tmp_path, capsys, data):
    p = tmp_path / "t.json"
    p.write_bytes(data)
    _check(capsys, ["analyze", str(p), "--json", str(tmp_path / "s.json"), "--force"])


@settings(max_examples=12, **_SETTINGS)
@given(a=mutated(), b=mutated())
def test_report_and_diff_mutated_traces(tmp_path, capsys, a, b):
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_bytes(a)
    pb.write_bytes(b)
    _check(capsys, ["report", str(pa), "-o", str(tmp_path / "r.html"), "--force"])
    _check(capsys, ["diff", str(pa), str(pb)])
