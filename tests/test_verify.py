"""`roofscope verify`: the fix registry and its installers, the bootstrap that injects them, the statistics,
the candidates a Run's summary names, the ranking of a verified Run, and the command end to end on small
CPU programs (tests/data/verify/: a training loop that sleeps 50 ms a step, and a test registry of fixes
with effects known to the number)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch

from roofscope.analyzers.model.findings import Diagnosis, Finding
from roofscope.analyzers.compare.verified import rank_verified
from roofscope.cli import main
from roofscope.collectors.inject import bootstrap
from roofscope.errors import RoofscopeError
from roofscope.fixes import (FIXES, FixError, Injection, derive, install, load_modules, parse, spec_text,
                             switches)
from roofscope.fixes.registry import DERIVED_BY_CHANGE, DERIVED_BY_RULE
from roofscope.run import new_meta, write_run
from roofscope.run.schema import FixVerdict, Verification
from roofscope.run.verification import load as load_verification
from roofscope.run.verification import text as verification_text
from roofscope.config import VerifySettings
from roofscope.verify.candidates import Candidate, NothingToVerify, choose
from roofscope.verify.workflow import Trial, _plan
from roofscope.verify.stats import (decided, interval, results_distance, results_verdict, step_time, t975,
                                    timing_status)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "verify"
TRAIN, INFER, TEST_FIXES = DATA / "train.py", DATA / "infer.py", DATA / "fixes.py"
CPU_TRACE = ROOT / "tests" / "data" / "cpu_block.json.gz"
TIMING = ("verified", "mispredicted", "no effect", "slower", "undecided")


@pytest.fixture
def one_thread():
    """Steps of one thread: two on a shared 2-core machine make the step times swing by 5x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- the registry ---------------------------------------------------------------------------------------


def test_specs_parse_to_canonical_text():
    specs = parse(" compile:default ; threads:02;dataloader:workers=4;dataloader:pin_memory;compile")
    assert spec_text(specs) == "compile;threads:2;dataloader:workers=4;dataloader:pin_memory"
    assert spec_text(parse("compile:reduce-overhead")) == "compile:reduce-overhead"


@pytest.mark.parametrize("spec, message", [
    ("nope", "unknown fix 'nope'; one of channels_last, compile,"),
    ("threads", "fix threads needs a positive count: threads:N, got threads"),
    ("threads:0", "fix threads needs a positive count"),
    ("compile:fast", "fix compile: unknown mode 'fast'; one of default, reduce-overhead, max-autotune,"),
    ("dataloader:workers=x", "fix dataloader takes workers=N or pin_memory, got 'workers=x'"),
    ("tf32:yes", "fix tf32 takes no argument, got tf32:yes"),
    (" ; ", "empty fix spec"),
])
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(FixError) as e:
        parse(spec)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_findings_without_apply_derive_their_fix_from_rule_then_change():
    assert derive("fusion") == "compile"
    assert derive("cuda_graphs", "torch_compile") == "compile:reduce-overhead"   # the rule first
    assert derive("launch_bound_decode") == "static_cache"
    assert derive("some_new_rule", "precision") == "tf32"                       # then the change
    assert derive("host_syncs", "host_syncs") == "" and derive("sdpa", "sdpa") == ""
    for spec in [*DERIVED_BY_RULE.values(), *DERIVED_BY_CHANGE.values()]:
        assert spec_text(parse(spec)) == spec


def test_a_fix_module_registers_fixes_once():
    load_modules([str(TEST_FIXES)])
    load_modules([str(TEST_FIXES)])   # twice: imported once, no "already exists"
    assert {"nap", "crash", "perturb", "widen"} <= set(FIXES)
    assert str(parse("nap:5")[0]) == "nap:5"
    with pytest.raises(RoofscopeError, match="--fix-module nowhere.py: no such file"):
        load_modules(["nowhere.py"])


# -- installers, in this process (undone) -------------------------------------------------------------


def _installed(spec: str) -> Injection:
    inj = Injection()
    install(parse(spec), inj)
    return inj


def test_threads_fix_sets_and_pins_the_count():
    before = torch.get_num_threads()
    inj = _installed(f"threads:{before + 1}")
    try:
        assert torch.get_num_threads() == before + 1
        torch.set_num_threads(7)   # the program's own call: ignored, and said
        assert torch.get_num_threads() == before + 1
        assert inj.done["threads"] == [f"torch.set_num_threads({before + 1}) (was {before})",
                                       f"the program's torch.set_num_threads(7) ignored: it runs {before + 1}"]
    finally:
        inj.undo()
    assert torch.get_num_threads() == before
    inj = _installed(f"threads:{before}")
    try:
        assert inj.skipped["threads"] == [f"the program already runs {before} thread{'s' if before > 1 else ''}"
                                          " (torch's count, and it sets no other)"] and not inj.done["threads"]
        # A program that sets its own count after the start: the fix holds it at the count asked for.
        torch.set_num_threads(before + 3)
        assert torch.get_num_threads() == before
        assert inj.done["threads"] == [f"the program's torch.set_num_threads({before + 3}) ignored: it runs {before}"]
    finally:
        inj.undo()
    assert torch.get_num_threads() == before


def test_the_threads_switch_turns_back_to_the_programs_own_count():
    before = torch.get_num_threads()
    inj = _installed(f"threads:{before + 1}")
    try:
        inj.set_fixed(False)
        assert torch.get_num_threads() == before       # off: what the program started with
        torch.set_num_threads(before + 2)              # the program's own call, ignored while the fix holds...
        assert torch.get_num_threads() == before
        inj.set_fixed(True)
        assert torch.get_num_threads() == before + 1
        inj.set_fixed(False)                           # ...is what it runs with when the fix is off
        assert torch.get_num_threads() == before + 2
    finally:
        inj.undo()
    assert torch.get_num_threads() == before
    assert [switches(parse(spec)) for spec in ("threads:2", "tf32", "cudnn_benchmark", "channels_last",
                                               "static_cache", "fused_optimizer")] == [True] * 3 + [False] * 3


def test_fused_optimizer_fix_leaves_a_programs_own_choice():
    params = [torch.nn.Parameter(torch.ones(3))]
    inj = _installed("fused_optimizer")
    try:
        assert torch.optim.AdamW(params).defaults["fused"] is True   # AdamW.__init__ calls Adam's: decided once
        assert torch.optim.SGD(params, lr=0.1, foreach=False).defaults["fused"] is None
    finally:
        inj.undo()
    assert inj.done["fused_optimizer"] == ["AdamW(..., fused=True)"]
    assert inj.skipped["fused_optimizer"] == ["the program sets SGD's fused/foreach itself"]
    assert torch.optim.AdamW(params).defaults["fused"] is None


def test_dataloader_fix_changes_defaults_only():
    ds = list(range(8))
    inj = _installed("dataloader:workers=2")
    try:
        loader = torch.utils.data.DataLoader(ds, 4)   # batch_size positional: kept
        assert (loader.num_workers, loader.batch_size) == (2, 4)
        assert torch.utils.data.DataLoader(ds, num_workers=1).num_workers == 1
    finally:
        inj.undo()
    assert inj.done["dataloader"] == ["DataLoader(num_workers=2)"]
    assert torch.utils.data.DataLoader(ds).num_workers == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a CPU machine says")
@pytest.mark.parametrize("spec", ["tf32", "cudnn_benchmark", "dataloader:pin_memory"])
def test_cuda_fixes_do_not_apply_on_a_cpu(spec):
    inj = _installed(spec)
    inj.undo()
    assert inj.skipped[spec.split(":")[0]] == ["no CUDA device"] and not any(inj.done.values())


@pytest.mark.skipif(find_spec("transformers") is not None, reason="what a machine without transformers says")
def test_static_cache_without_transformers():
    inj = _installed("static_cache")
    assert inj.skipped["static_cache"] == ["transformers is not installed"] and not inj.done["static_cache"]


def test_channels_last_fix_converts_a_conv_root_and_its_inputs():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    seen = []
    model[0].register_forward_pre_hook(lambda m, a: seen.append(a[0].is_contiguous(memory_format=torch.channels_last)))
    mlp = torch.nn.Linear(2, 2)
    inj = _installed("channels_last")
    try:
        for _ in range(2):
            model(torch.randn(2, 3, 8, 8))
        mlp(torch.ones(1, 2))   # no convolution: left alone
    finally:
        inj.undo()
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert seen == [True, True]   # the first call's input through the root hook, the next through the module's
    assert inj.done["channels_last"] == ["Sequential and its 4-D inputs in channels_last"]


def test_compile_fix_compiles_the_roots_forward_from_its_second_call():
    model, loss = torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.nn.MSELoss()
    inj = _installed("compile:reduce-overhead")
    try:
        out = model(torch.ones(1, 2))   # the first call runs eager (its forward was chosen before the hook)
        loss(out, torch.zeros(1, 2))    # a root without parameters: not compiled
    finally:
        inj.undo()
    assert "forward" in vars(model) and "forward" not in vars(loss)
    assert inj.done["compile"] == ["torch.compile(Sequential.forward, mode='reduce-overhead')"]
    compiled = torch.nn.Linear(2, 2)
    compiled.compile()
    inj = _installed("compile")
    try:
        inj.roots._pre(compiled, (torch.ones(1, 2),))   # its first call, as the module hook sees it
    finally:
        inj.undo()
    assert inj.skipped["compile"] == ["the program already compiles Linear"] and not inj.done["compile"]


def test_compile_without_graphs_is_a_switch_between_the_compiled_forward_and_the_programs():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    inj = _installed("compile")
    try:
        model(torch.ones(1, 2))
        compiled = vars(model)["forward"]
        inj.set_fixed(False)   # verify's alternation: the program's own forward between the compiled one's steps
        assert model.forward.__func__ is torch.nn.Sequential.forward
        inj.set_fixed(True)
        assert model.forward is compiled and model.forward is not torch.nn.Sequential.forward
    finally:
        inj.undo()
    # A CUDA graph's replays own their outputs' memory: reduce-overhead and max-autotune run apart.
    assert [switches(parse(spec)) for spec in ("compile", "compile:max-autotune-no-cudagraphs", "compile;tf32",
                                               "compile:reduce-overhead", "compile:max-autotune",
                                               "compile;channels_last")] == [True, True, True, False, False, False]


def test_tf32_fix_turns_both_switches_on_and_names_them(monkeypatch):
    # On the H200 this fix crashed every run ("Unknown attribute __name__": torch.backends.cuda.matmul is an
    # object without one); CPU tests never reached it (no CUDA device). A CUDA device is pretended here.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    try:
        inj = _installed("tf32")
        assert not any(inj.done.values())   # on already: nothing to do, unless the program turns it off
        # The program turns TF32 off for its matmuls at its start (a GPU test's program did, and undid the fix
        # installed before it): its assignment is its own setting, and the fix holds.
        torch.backends.cuda.matmul.allow_tf32 = False
        assert torch.backends.cuda.matmul.allow_tf32 is True
        inj.set_fixed(False)   # verify's alternation: the program's own setting, then the fix's again
        assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is True
        inj.boundary()
        assert torch.backends.cuda.matmul.allow_tf32 is False
        inj.set_fixed(True)
        torch.set_float32_matmul_precision("highest")   # off by another route: seen at the next boundary
        inj.boundary()
        assert torch.backends.cuda.matmul.allow_tf32 is True
        inj.undo()
        assert torch.backends.cuda.matmul.allow_tf32 is False   # as the program had it at its first step
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert inj.done["tf32"] == ["torch.backends.cuda.matmul.allow_tf32 = True"]
    assert inj.skipped["tf32"] == ["torch.backends.cuda.matmul.allow_tf32 already True",
                                   "torch.backends.cudnn.allow_tf32 already True"]


def test_fallback_random_is_a_switch_on_inductors_config():
    # What the CPU fusion rule applies with compile to a model drawing dropout masks (compile;fallback_random):
    # Inductor's config module, held as a flag, off and on between steps, and put back.
    import torch._inductor.config as inductor_config

    before = inductor_config.fallback_random
    inductor_config.fallback_random = False
    try:
        inj = _installed("compile;fallback_random")
        assert inductor_config.fallback_random is True
        assert inj.done["fallback_random"] == ["torch._inductor.config.fallback_random = True"]
        inj.set_fixed(False)
        assert inductor_config.fallback_random is False
        inj.set_fixed(True)
        assert inductor_config.fallback_random is True
        inj.undo()
        assert inductor_config.fallback_random is False
    finally:
        inductor_config.fallback_random = before


def test_a_flag_on_a_plain_module_is_held_at_the_step_boundaries():
    import types

    settings = types.ModuleType("settings")   # a built-in type: its assignments cannot be caught as made
    settings.fast = False
    inj = Injection()
    inj.installing("fast")
    inj.flag(settings, "fast", True, "settings.fast = True")
    assert settings.fast is True and inj.done["fast"] == ["settings.fast = True"]
    settings.fast = False          # the program's own line: seen at the next boundary, and held against
    inj.boundary()
    assert settings.fast is True
    inj.set_fixed(False)
    assert settings.fast is False
    inj.undo()
    assert settings.fast is False


def test_a_flag_the_program_sets_to_the_fixs_value_itself_is_not_applied(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        inj = _installed("cudnn_benchmark")
        torch.backends.cudnn.benchmark = True   # the program's own line
        inj.boundary()
        inj.set_fixed(False)
        assert torch.backends.cudnn.benchmark is True   # nothing of the fix's to turn off
        inj.undo()
    finally:
        torch.backends.cudnn.benchmark = before
    assert not inj.done["cudnn_benchmark"]
    assert inj.skipped["cudnn_benchmark"] == ["the program sets torch.backends.cudnn.benchmark = True itself"]


def test_mark_step_fix_begins_a_graph_step_before_each_forward_of_the_model(monkeypatch):
    # Gradient accumulation under mode="reduce-overhead": 3 forwards of the model, and a loss module
    # (no parameters) called as often, which marks nothing: 3 marks, the first through the root hook.
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(len(marks)))
    model, loss = torch.nn.Linear(2, 2), torch.nn.MSELoss()
    inj = _installed("mark_step")
    try:
        for _ in range(3):
            loss(model(torch.ones(1, 2)), torch.zeros(1, 2))
    finally:
        inj.undo()
    assert marks == [0, 1, 2]
    assert inj.done["mark_step"] == ["torch.compiler.cudagraph_mark_step_begin() before each Linear forward"]


# -- the bootstrap, in this process --------------------------------------------------------------------


def _record(tmp_path: Path, script: Path, *args: str, name: str = "rec") -> dict:
    rec = tmp_path / f"{name}.json"
    code = bootstrap.main(["--record", str(rec), "--steps", "5", "--warmup-steps", "2", "--compare-steps", "2",
                           "--settle", "0", *args, str(script)])
    assert code == 0
    return json.loads(rec.read_text())


def test_bootstrap_times_the_steps_after_the_warmup_and_stops_the_program(tmp_path, one_thread):
    base = _record(tmp_path, TRAIN, name="base")
    fixed = _record(tmp_path, TRAIN, "--fix-module", str(TEST_FIXES), "--fix", "nap:5", name="nap")
    for rec in (base, fixed):
        steps = rec["steps"]
        # Boundary 2 ends the warm-up (step index 1); 5 steps later, at boundary 7, the program is stopped.
        assert (steps["source"], steps["boundaries"], steps["timed_from"], steps["settled"]) == (
            "optimizer", 7, 1, True)
        assert steps["index"] == [1, 2, 3, 4, 5, 6] and rec["outcome"]["reason"] == "stopped"
        assert len(rec["losses"]) == 2 and len(rec["outputs"]) == 2   # the first 2 steps' backwards and forwards
        assert rec["outputs"][0]["output"]["shape"] == [16, 10]
    assert base["applied"] == {} and fixed["applied"] == {"nap": ["time.sleep capped at 5 ms"]}
    assert base["losses"] == fixed["losses"]   # napping changes no result
    # Each step sleeps 50 ms, capped at 5 with the fix: at least 45 ms apart less the compute's jitter.
    assert step_time(base) >= 0.050 and step_time(base) - step_time(fixed) > 0.030


def test_a_program_that_ends_before_its_steps_settle_has_the_steps_after_the_warmup_timed(tmp_path, one_thread):
    rec = tmp_path / "rec.json"
    assert bootstrap.main(["--record", str(rec), "--steps", "20", "--warmup-steps", "2", "--compare-steps", "2",
                           "--settle-tolerance", "1e-9", str(TRAIN), "8"]) == 0
    steps = json.loads(rec.read_text())["steps"]
    # 8 boundaries; the warm-up ended at the second (index 1), nothing settled within 1e-9 of its median.
    assert (steps["boundaries"], steps["timed_from"], steps["settled"]) == (8, 1, False)
    assert steps["index"] == list(range(1, 8))


def test_bootstrap_keeps_an_inference_loops_outputs(tmp_path, one_thread):
    base = _record(tmp_path, INFER, name="base")
    wide = _record(tmp_path, INFER, "--fix-module", str(TEST_FIXES), "--fix", "widen", name="wide")
    assert base["steps"]["source"] == "forward" and base["losses"] == []
    first = base["outputs"][0]
    assert first["input"]["shape"] == [4, 64] and len(first["input"]["values"]) == 256
    assert first["output"]["shape"] == [4, 2048] and len(first["output"]["values"]) == 1024   # 8,192 sampled
    # Two Linears without bias, each output 1.1x: the model's output 1.21x, 21% away from the baseline's.
    distance, what = results_distance(base, wide)
    assert distance == pytest.approx(0.21, rel=1e-5) and what == "the model's outputs of the first 2 forwards"


def test_a_switch_is_turned_off_and_on_in_blocks_of_the_timed_steps(tmp_path, one_thread):
    rec = _record(tmp_path, TRAIN, "--fix-module", str(TEST_FIXES), "--fix", "nap_switch:5", "--alternate", "2",
                  "--steps", "8")
    steps = rec["steps"]
    # Blocks of 2 timed steps, ABBA: on on, off off, off off, on on. The warm-up (2 steps) ran with it on.
    assert steps["fixed"] == [True, True, False, False, False, False, True, True]
    assert steps["timed_from"] == 1 and steps["index"] == list(range(1, 10))
    assert len(rec["losses"]) == 2 and rec["applied"] == {"nap_switch": ["time.sleep capped at 5 ms, as a switch"]}
    # Each step sleeps 50 ms, 5 with the switch on: its own run's steps 45 ms apart, less the compute's jitter.
    on, off = step_time(rec, fixed=True), step_time(rec, fixed=False)
    assert off >= 0.050 and off - on > 0.030


@pytest.mark.parametrize("args", [("--fix", "nap:5"), ()])
def test_only_switches_alternate(tmp_path, capsys, args):
    rec = tmp_path / "rec.json"
    assert bootstrap.main(["--record", str(rec), "--steps", "4", "--alternate", "2", "--fix-module", str(TEST_FIXES),
                           *args, str(TRAIN)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--alternate needs --steps and a --fix whose every fix is a switch (" in err
    assert "nap_switch" in err and "threads" in err and not rec.exists()


def test_a_failing_installer_is_the_runs_failure(tmp_path, capsys):
    fixes = tmp_path / "bad.py"
    fixes.write_text("from roofscope.fixes import register\n\ndef boom(arg, inj):\n    raise ValueError('no way')\n\n"
                     "register('boom', boom, 'raises')\n")
    rec = tmp_path / "rec.json"
    assert bootstrap.main(["--record", str(rec), "--fix-module", str(fixes), "--fix", "boom", str(TRAIN)]) == 1
    assert json.loads(rec.read_text())["outcome"]["detail"] == "installing boom failed: ValueError: no way"


# -- statistics ----------------------------------------------------------------------------------------


def test_t_quantiles_are_scipys():
    from scipy.stats import t

    assert max(abs(t975(d) - float(t.ppf(0.975, d))) for d in range(1, 300)) < 1e-3


def test_interval_is_students_t():
    ci = interval([0.010, 0.012, 0.014])
    # mean 12 ms, sd 2 ms, t(0.975, 2 dof) = 4.303: half-width 4.303 * 2 / sqrt(3) = 4.9687 ms
    assert (ci.mean, ci.lo, ci.hi, ci.n) == pytest.approx((0.012, 0.0070313, 0.0169687, 3), abs=1e-7)
    assert interval([0.01]) is None


# A saving of at most 0.5 ms is none (say --precision 0.02 of a 25 ms step).
@pytest.mark.parametrize("diffs, predicted, status, words", [
    ([0.010, 0.012, 0.014], 0.012, "verified", "saves 12 ms/step [7.03, 17] over 3 pairs: 1.00x the predicted 12 ms"),
    ([0.010, 0.012, 0.014], 0.006, "mispredicted", "2.00x the predicted 6 ms"),
    ([0.010, 0.012, 0.014], None, "mispredicted", "roofscope predicted no saving for it"),
    ([-0.010, -0.012, -0.014], 0.012, "slower", "costs 12 ms/step more [7.03, 17] over 3 pairs"),
    # mean 0.1 ms, sd 0.1 ms: half-width 4.303 * 0.1 / sqrt(3) = 0.248 ms: [-0.148, 0.348], under 0.5 ms
    ([0.0000, 0.0001, 0.0002], 0.012, "no effect", "saves 0.1 ms/step [-0.148, 0.348] over 3 pairs: not told apart"),
    ([0.002, -0.001, -0.004], 0.012, "undecided", "costs 1 ms/step more [-6.45, 8.45] over 3 pairs"),
    # The H200 ResNet's compile, 2 pairs saving 5.31 and 11.73 ms: [-32.3, 49.3] holds 0 and 49 ms.
    ([0.00531, 0.01173], 0.0032, "undecided", "not told apart from 0 nor from a saving of 49.3 ms; more pairs"),
])
def test_timing_status(diffs, predicted, status, words):
    got, reason = timing_status(interval(diffs), predicted, negligible_s=0.0005)
    assert got == status and words in reason


def test_a_fix_measured_too_few_times_is_undecided_on_the_baselines_step():
    t = Trial(Candidate(fix="compile", rule="fusion", predicted_s=0.0032))
    t.pairs = [(0.03197, 0.02666)]    # one pair: no interval, however large the saving
    v = t.verdict(0.02)
    assert (v.status, v.reason, v.pairs) == ("undecided", "only 1 pair measured: no interval", 1)
    assert v.realized_s == pytest.approx(0.00531)
    # Two pairs saving 0.1 and 0.3 ms of a 32 ms step: 0.2 ± 12.706 * 0.1414 / sqrt(2) = [-1.07, 1.47] ms,
    # past 2% of 32 ms (0.64 ms): undecided; at --precision 0.05 (1.6 ms) the same interval is no effect.
    t.pairs = [(0.0320, 0.0319), (0.0320, 0.0317)]
    assert t.verdict(0.02).status == "undecided" and t.verdict(0.05).status == "no effect"


def test_a_fix_stops_once_its_interval_decides_its_status():
    ci = interval([0.010, 0.012, 0.014])   # [7.03, 16.97] ms
    assert decided(ci, 0.012, 0.05, 0.02)          # inside the verified band [6, 18] ms
    assert not decided(ci, 0.010, 0.05, 0.02)      # straddles 1.5x of 10 ms: more pairs may tell
    assert decided(ci, 0.010, 0.05, 0.2)           # half-width 4.97 ms <= 20% of a 50 ms step: narrow enough
    assert not decided(interval([-0.002, 0.001, 0.004]), 0.012, 0.05, 0.02)


def _switch_run(host_ms: list[float], fixed: list[bool]) -> dict:
    n = len(host_ms)
    return {"outcome": {"code": 0, "reason": "stopped"}, "applied": {"tf32": ["on"]}, "losses": [1.0],
            "steps": {"timed_from": 0, "index": list(range(1, n + 1)), "host_s": [h / 1e3 for h in host_ms],
                      "gpu_s": [None] * n, "fixed": fixed}}


def test_a_switchs_pair_comes_from_its_own_run_unless_the_program_ended_before_turning_it_off():
    settings = VerifySettings(min_pairs=2)
    base = _switch_run([50.0, 52.0, 51.0], [])
    del base["steps"]["fixed"]
    trial = Trial(Candidate("tf32", "tf32", ["tf32"], predicted_s=0.010), within_run=True)
    # Blocks of 2, ABBA: on on off off off off on on. Medians: on 40 ms (39 40 40 41), off 49 ms (the baseline run: 51).
    trial.add(1, base, _switch_run([40, 41, 48, 50, 49, 49, 39, 40], [True] * 2 + [False] * 4 + [True] * 2), [base],
              settings)
    # The program ended inside the first block: its steps with the fix on against the round's baseline.
    trial.add(2, base, _switch_run([42, 44], [True, True]), [base, base], settings)
    assert [x for pair in trial.pairs for x in pair] == pytest.approx([0.049, 0.040, 0.051, 0.043])
    assert len(trial.apart) == 1   # one pair from inside a run
    v = trial.verdict(0.02)
    assert v.within_run and v.pairs == 2 and v.baseline_runs_s == pytest.approx(0.051)   # round 1's baseline run
    assert v.reason.endswith("; 1 of 2 pairs from one run, the fix turned off and on between its steps (the program"
                             " ended before the others turned it off)")
    # Undecided inside runs: what widens the interval is how much the fix saved from one run to the next.
    inside = Trial(Candidate("tf32", "tf32", ["tf32"], predicted_s=0.010), within_run=True)
    for rnd, on in ((1, 49.0), (2, 41.0)):   # off 50 ms both times: saved 1 and 9 ms, [-45.8, 55.8] at t = 12.7
        inside.add(rnd, base, _switch_run([on, on, 50, 50], [True, True, False, False]), [base], settings)
    v = inside.verdict(0.02)
    assert v.status == "undecided" and "; inside its runs it saved 1 to 9 ms/step from one run to the next" in v.reason


def test_the_cost_said_up_front_counts_a_switchs_steps_twice():
    # The Run: 10 s in all, 10 unprofiled steps of 0.5 s: 5 s outside them. A run: 5 + 0.5 x (3 warm-up + 3 + 20
    # timed) = 18 s; a switch's, 20 timed steps more: 28 s. A round of the baseline, tf32 (a switch) and
    # channels_last: 18 + 28 + 18 = 64 s; 3 rounds at least (192 s), 10 at most (640 s).
    meta = {"wall_s": 10.0, "step_times": {"phase": ["unprofiled"] * 10, "host_s": [0.5] * 10}}
    said: list[str] = []
    trials = _plan([Candidate("tf32"), Candidate("channels_last")], meta, VerifySettings(), said.append, Path("run"))
    assert [t.within_run for t in trials] == [True, False]
    assert "cost: ~18 s a run (from the Run's own times): 3 rounds at least (~3 min 12 s), at most 10 (~10 min 40 s)" \
        in said[2]
    # A budget of 150 s holds 3 rounds of the baseline and tf32 (46 s each), not of all three.
    trials = _plan([Candidate("tf32"), Candidate("channels_last")], meta, VerifySettings(budget_s=150), said.append,
                   Path("run"))
    assert [t.cand.fix for t in trials] == ["tf32"] and said[-1].startswith("  not tried: channels_last")


def test_step_time_is_the_median_of_the_timed_steps():
    rec = {"steps": {"timed_from": 2, "index": [1, 2, 3, 4, 5], "host_s": [9.0, 9.0, 0.3, 0.1, 0.2],
                     "gpu_s": [None] * 5}}
    assert step_time(rec) == 0.2
    rec["steps"]["gpu_s"] = [1.0, 1.0, 0.03, 0.01, 0.02]   # GPU times where every timed step has one
    assert step_time(rec) == 0.02
    assert step_time({"steps": {"timed_from": None}}) is None


def test_results_are_compared_only_when_the_program_repeats_itself():
    base, perturbed = {"losses": [2.0, 1.9]}, {"losses": [2.2, 2.09]}
    # 0.2 / 2.2 and 0.19 / 2.09: both 9.09% apart, relative to the larger
    assert results_distance(base, perturbed) == (pytest.approx(0.0909, abs=1e-4), "the loss of the first 2 backwards")
    assert results_verdict([base, dict(base)], [perturbed], 0.01) == (
        True, "the loss of the first 2 backwards moved by 9.1% (tolerance 1%; without the fix 0%)")
    assert results_verdict([base, dict(base)], [base], 0.01)[0] is False
    assert results_verdict([base], [perturbed], 0.01) == (None, "")   # a second baseline first
    changed, note = results_verdict([base, {"losses": [2.5, 1.9]}], [perturbed], 0.01)
    assert changed is None and note.startswith("results not compared: two runs without the fix differ (20%)")
    outputs = {"outputs": [{"input": {"shape": [1], "values": [1.0]}, "output": {"shape": [2], "values": [3.0, 4.0]}}]}
    moved = {"outputs": [{"input": {"shape": [1], "values": [1.0]}, "output": {"shape": [2], "values": [3.3, 4.4]}}]}
    assert results_distance(outputs, moved)[0] == pytest.approx(0.1)   # |(0.3, 0.4)| / |(3, 4)|
    moved["outputs"][0]["input"]["values"] = [2.0]                   # other inputs: nothing compares
    assert results_distance(outputs, moved) is None


def test_a_compiled_model_that_draws_random_numbers_is_not_judged_by_its_loss():
    # A Lightning BERT fine-tune with dropout (benchmarks/real_clients/cpu/lightning_hf_bert.py), compiled: its
    # loss over the first 3 backwards moved 1.2% with the same seed (Inductor draws dropout's numbers from a
    # stream of its own), and verify called the fix "changes results". The eager runs repeat to 0%.
    base, fixed = {"losses": [0.70, 0.69, 0.71], "random": True}, {"losses": [0.7084, 0.69, 0.71]}
    changed, note = results_verdict([base, dict(base)], [fixed], 0.01, redraws=True)
    assert changed is None and note == ("results not compared: the model draws random numbers in its forward"
                                        " (dropout), and the compiled code draws them from a stream of its own (the"
                                        " loss of the first 3 backwards moved by 1.2%)")
    # Another fix, or a model that draws none, is still judged by it.
    assert results_verdict([base, dict(base)], [fixed], 0.01)[0] is True
    assert results_verdict([{"losses": base["losses"]}] * 2, [fixed], 0.01, redraws=True)[0] is True


@pytest.mark.parametrize("p, random", [(0.1, True), (0.0, False)])
def test_the_probe_sees_a_forward_draw_random_numbers(p: float, random: bool) -> None:
    from roofscope.collectors.inject.probe import ResultProbe
    from roofscope.fixes.injection import Injection

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(p))
    inj = Injection()
    probe = ResultProbe(2, inj)
    probe.install()
    try:   # installing subscribed the probe to the root modules' first calls
        model(torch.ones(4, 8)).sum().backward()
    finally:
        inj.undo()
    assert probe.to_dict()["random"] is random and len(probe.to_dict()["losses"]) == 1


# -- candidates ----------------------------------------------------------------------------------------


def _finding(rank: int, rule: str, saving: float, change: str = "", apply: str | None = None, **more) -> dict:
    fix = {"text": f"fix {rule}", "snippet": ""}
    if apply is not None:
        fix["apply"] = apply
    return {"rank": rank, "rule": rule, "title": rule, "saving_s": saving, "change": change or rule, "fix": fix, **more}


SUMMARY = {"findings": [
    _finding(1, "fusion", 0.004, "torch_compile"),                      # no apply: compile, derived
    _finding(2, "host_syncs", 0.003, apply=""),                        # a source edit
    _finding(3, "cuda_graphs", 0.002, "torch_compile"),                # derived: compile:reduce-overhead
    _finding(4, "tf32", 0.001, "precision", apply="tf32"),
    _finding(5, "small_grid", 0.0, "torch_compile", status="blocked"),  # blocked: left out
], "diagnosis": {"changes": [{"change": "torch_compile", "rules": ["fusion", "cuda_graphs"], "saving_s": 0.005}]}}


def test_the_top_injectable_fixes_and_the_source_edits_above_them():
    chosen = choose(SUMMARY, 2)
    assert [(c.fix, c.rule, c.predicted_s) for c in chosen] == [
        ("compile", "fusion", 0.004), ("", "host_syncs", 0.003), ("compile:reduce-overhead", "cuda_graphs", 0.002)]
    assert [c.fix for c in choose(SUMMARY, 1)] == ["compile"]   # the source edit below the last fix: not listed
    # Findings naming one fix that are all of their change take its combined saving (overlap counted once).
    both = {**SUMMARY, "findings": [_finding(1, "fusion", 0.004, "torch_compile", apply="compile"),
                                    _finding(2, "cuda_graphs", 0.002, "torch_compile", apply="compile:default")]}
    assert [(c.fix, c.rules, c.predicted_s) for c in choose(both, 3)] == [("compile", ["fusion", "cuda_graphs"], 0.005)]


def test_findings_sharing_a_fix_but_not_all_of_their_change_add_across_terms():
    # The UNet on the H200: compile (default) answers fusion (0.179 ms of memory-bound time) and launch_fusion
    # (0.649 ms of host idle); cuda_graphs (reduce-overhead) is the rest of their change. Different terms add:
    # 0.828 ms. Two findings on one term add only up to the term: 0.6 + 0.5 on a host term of 1.0 ms is 1.0.
    f = [_finding(1, "cuda_graphs", 0.002633, "torch_compile", apply="compile:reduce-overhead", binding="host"),
         _finding(2, "launch_fusion", 0.000649, "torch_compile", apply="compile:default", binding="host"),
         _finding(3, "fusion", 0.000179, "torch_compile", apply="compile:default", binding="memory")]
    changes = {"changes": [{"change": "torch_compile", "rules": ["cuda_graphs", "launch_fusion", "fusion"],
                            "saving_s": 0.002812}]}
    chosen = choose({"findings": f, "diagnosis": {**changes, "terms_s": {"host": 0.0099, "memory": 0.0007}}}, 2)
    assert [(c.fix, c.predicted_s) for c in chosen] == [("compile:reduce-overhead", 0.002633),
                                                        ("compile", pytest.approx(0.000828))]
    two = [_finding(1, "a", 0.0006, "x", apply="tf32", binding="host"),
           _finding(2, "b", 0.0005, "y", apply="tf32", binding="host")]
    (c,) = choose({"findings": two, "diagnosis": {"terms_s": {"host": 0.001}}}, 1)
    assert c.predicted_s == pytest.approx(0.001)


def test_fixes_asked_for_take_the_prediction_of_their_findings():
    chosen = choose(SUMMARY, 3, ("tf32", "threads:2", "compile:default"))
    assert [(c.fix, c.rule, c.predicted_s) for c in chosen] == [
        ("tf32", "tf32", 0.001), ("threads:2", "", None), ("compile", "fusion", 0.004)]
    with pytest.raises(NothingToVerify, match="none of the Run's 1 recommendations has a fix roofscope can inject"):
        choose({"findings": [_finding(1, "host_syncs", 0.003, apply="")]}, 3)
    with pytest.raises(NothingToVerify, match="the Run has no recommendation; name fixes to try with --fix SPEC"):
        choose({"findings": []}, 3)


# -- a verified Run's findings ---------------------------------------------------------------------------


def test_a_verified_run_ranks_its_findings_by_the_saving_measured():
    findings = [Finding(rule=r, title=r, binding="memory", saving_s=s, confidence="high", summary="", fix="",
                        change=c, rank=i) for i, (r, s, c) in enumerate(
        [("fusion", 0.004, "torch_compile"), ("host_syncs", 0.003, "host_syncs"),
         ("cuda_graphs", 0.002, "torch_compile"), ("tf32", 0.001, "precision")], 1)]
    d = Diagnosis(findings, {}, 0.01, [], changes=[{"change": "torch_compile", "findings": [1, 3]},
                                                    {"change": "host_syncs", "findings": [2]}])
    doc = Verification(fixes=[
        FixVerdict(rule="fusion", rules=["fusion"], fix="compile", status="mispredicted", reason="r",
                   predicted_s=0.004, realized_s=0.0005),
        FixVerdict(rule="host_syncs", rules=["host_syncs"], fix="", status="not applicable", reason="edit"),
        FixVerdict(rule="cuda_graphs", rules=["cuda_graphs"], fix="compile:reduce-overhead", status="crashed",
                   reason="boom"),
        FixVerdict(rule="tf32", rules=["tf32"], fix="tf32", status="verified", reason="r", realized_s=0.0012),
        FixVerdict(rule="", fix="threads:2", status="slower", reason="r", realized_s=-0.001)])
    block = rank_verified(d, doc)
    # Measured savings where measured (0.5 and 1.2 ms), the prediction for the source edit (3 ms), the crash last.
    assert [(f.rule, f.rank) for f in d.findings] == [("host_syncs", 1), ("tf32", 2), ("fusion", 3), ("cuda_graphs", 4)]
    assert d.changes == [{"change": "torch_compile", "findings": [3, 4]}, {"change": "host_syncs", "findings": [1]}]
    assert [v["finding"] for v in block["fixes"]] == [3, 1, 4, 2, None]
    assert d.findings[2].to_dict()["verify"]["realized_s"] == 0.0005
    assert "verify" not in Finding(rule="x", title="", binding="", saving_s=0, confidence="low", summary="",
                                   fix="").to_dict()   # an unverified finding's JSON is as before
    assert rank_verified(d, None) is None


def test_a_verify_file_that_does_not_read_is_a_one_line_error(tmp_path):
    (tmp_path / "verify.json").write_text(verification_text(Verification(fixes=[
        FixVerdict(rule="", fix="tf32", status="great", reason="")])))
    with pytest.raises(RoofscopeError, match="unknown status 'great'; one of verified, mispredicted"):
        load_verification(tmp_path)
    (tmp_path / "verify.json").write_text('{"schema_version": 9, "fixes": []}')
    with pytest.raises(RoofscopeError, match="verify schema_version 9 is newer than this roofscope reads"):
        load_verification(tmp_path)
    assert load_verification(tmp_path / "none") is None


# -- the command: one-line errors ----------------------------------------------------------------------


def _run_dir(tmp_path: Path, command: list[str] | None = None, source: str = "optimizer", cwd: Path = DATA,
             trace: Path = CPU_TRACE, **more) -> Path:
    meta = new_meta(command or ["roofscope", "run", TRAIN.name], cwd=str(cwd),
                    steps={"requested": {"wait": 1, "warmup": 2, "active": 3}, "source": source}, **more)
    return write_run(tmp_path / "run", meta=meta, trace=trace).path


@pytest.mark.parametrize("case, args, message", [
    ("missing", ["--fix", "tf32"], "no such directory"),
    ("bad spec", ["--fix", "bogus"], "unknown fix 'bogus'"),
    ("no recommendation", [], "nothing to verify: the Run has no recommendation; name fixes to try with --fix SPEC"),
    ("exists", ["--fix", "tf32"], "verify.json already exists; pass --force to overwrite it"),
    ("not run", ["--fix", "tf32"], "this Run was not recorded by `roofscope run`"),
    ("no steps", ["--fix", "tf32"], "verify times the program's own steps, and this Run's program marked none"),
    ("moved", ["--fix", "tf32"], "the Run's script train.py is not in its working directory"),
    ("rank", ["--fix", "tf32"], "this Run is one rank of a distributed job"),
])
def test_bad_input_is_a_one_line_error_before_any_run(tmp_path, capsys, case, args, message):
    run = _run_dir(tmp_path, ["python", "x.py"] if case == "not run" else None,
                   source="none" if case == "no steps" else "optimizer", cwd=tmp_path if case == "moved" else DATA,
                   # an H100 trace no rule finds anything in (the CPU block gets the CPU fusion rule's compile)
                   trace=ROOT / "tests" / "data" / "h100_graph_eager.json.gz" if case == "no recommendation" else CPU_TRACE,
                   **({"distributed": {"rank": 1, "world_size": 2}} if case == "rank" else {}))
    if case == "exists":
        (run / "verify.json").write_text("{}")
    target = tmp_path / "nope" if case == "missing" else run
    assert main(["verify", str(target), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


# -- end to end: real runs of a CPU training loop -------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A Run of train.py made by `roofscope run` (the verify tests below copy it and name their findings)."""
    out = tmp_path_factory.mktemp("verify") / "run"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", "-q", "--settle", "0", "--nvml-hz", "0", "-o", str(out), str(TRAIN), "60"])
    return out, code, err.getvalue()


@pytest.mark.slow
def test_run_verify_tries_a_cpu_programs_top_fixes(tmp_path):
    # `roofscope run --verify` end to end on a CPU program: the CPU rules find channels_last (a conv) and
    # compile (a chain of elementwise ops) in train.py; each is injected and run against the program as it
    # is, alternated, with verify's defaults. Their saving is a fraction of a millisecond against 50 ms
    # sleeps: told apart from nothing by no interval, so "no effect", "slower" or, where the interval of a
    # loaded machine reaches past 1 ms (--precision 0.02 of the step), "undecided"; the losses unchanged.
    out = tmp_path / "run"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", "--verify", "-q", "--settle", "0", "--nvml-hz", "0", "-o", str(out), str(TRAIN), "60"])
    assert code == 0 and (out / "summary.json").exists()
    doc = json.loads((out / "verify.json").read_text())
    fixes = {f["fix"]: f for f in doc["fixes"]}
    # On a machine whose other load leaves this process one core, cpu_threads finds its 2 threads too many and
    # `threads:1` is a third fix (seen at load 2.4 on the 2-core development machine).
    assert {"channels_last", "compile"} <= set(fixes) <= {"channels_last", "compile", "threads:1"}
    for f in fixes.values():
        assert f["status"] in TIMING and f["pairs"] >= 3
        assert f["results"].startswith("the loss of the first 3 backwards within")
    # The Run's summary, rendered again, carries the verdicts beside its findings.
    findings = json.loads((out / "summary.json").read_text())["findings"]
    assert {f["rule"] for f in findings if f.get("verify")} >= {"channels_last", "fusion"}


def _with_findings(recorded, tmp_path: Path, findings: list[dict]) -> Path:
    """A copy of the Run whose summary names these findings, as the analysis of a GPU program would."""
    run = tmp_path / "run"
    shutil.copytree(recorded[0], run)
    summary = json.loads((run / "summary.json").read_text())
    summary["findings"] = findings
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.mark.slow
def test_verify_end_to_end_in_process(recorded, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")   # steady steps on a shared 2-core machine; threads:2 then applies
    run = _with_findings(recorded, tmp_path, [
        _finding(1, "host_syncs", 0.050, apply=""),
        _finding(2, "sleep", 0.045, apply="nap:5"),       # 50 ms sleeps capped at 5 ms: predicted to the number
        _finding(3, "crashy", 0.010, apply="crash"),
        _finding(4, "perturby", 0.010, apply="perturb"),
        _finding(5, "threads", 0.010, apply="threads:2")])
    assert main(["verify", str(run), "--top", "4", "--fix-module", str(TEST_FIXES), "--pairs", "2", "--min-pairs", "2",
                 "--steps", "6"]) == 0
    out = capsys.readouterr().out
    assert "verify: 4 fixes of" in out and "(1 more needs a source edit)" in out and "cost: ~" in out
    assert "  round 1  without a fix" in out and "-> crash: crashed: round 1: RuntimeError: synthetic crash" in out
    doc = json.loads((run / "verify.json").read_text())
    fixes = {f["fix"]: f for f in doc["fixes"]}
    assert [f["fix"] for f in doc["fixes"]] == ["", "nap:5", "crash", "perturb", "threads:2"]
    edit = fixes[""]
    assert (edit["status"], edit["reason"], edit["pairs"]) == (
        "not applicable", "needs a source edit: fix host_syncs", 0)
    nap = fixes["nap:5"]
    assert nap["status"] == "verified" and nap["pairs"] == 2 and nap["predicted_s"] == 0.045
    assert 0.035 < nap["realized_s"] < 0.055 and nap["ci_s"][0] < nap["realized_s"] < nap["ci_s"][1]
    assert nap["applied"] == ["time.sleep capped at 5 ms"] and "within 0%" in nap["results"]
    assert fixes["crash"]["status"] == "crashed" and fixes["crash"]["pairs"] == 0
    assert "synthetic crash in the optimizer" in fixes["crash"]["reason"]
    assert fixes["perturb"]["status"] == "changes results"
    assert "the loss of the first 3 backwards moved by 9.1% (tolerance 1%" in fixes["perturb"]["reason"]
    threads = fixes["threads:2"]
    assert threads["status"] in TIMING and threads["applied"] == ["torch.set_num_threads(2) (was 1)"]
    # The Run's summary and outputs show them: a CPU analysis has no findings to sit beside, so they are listed.
    summary = json.loads((run / "summary.json").read_text())
    assert [v["fix"] for v in summary["verification"]["fixes"]] == [f["fix"] for f in doc["fixes"]]
    assert "Fixes re-run in the program" in out and "Fixes re-run in the program" in (run / "report.html").read_text()
    assert main(["analyze", str(run), "--markdown", "-"]) == 0
    assert "| `nap:5` | verified | saves" in capsys.readouterr().out
    assert main(["verify", str(run), "--fix", "tf32"]) == 2   # never over an existing verify.json without --force
    assert "verify.json already exists" in capsys.readouterr().err


@pytest.mark.slow
def test_a_switch_is_measured_inside_each_of_its_runs(recorded, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = _with_findings(recorded, tmp_path, [_finding(1, "sleep", 0.045, apply="nap_switch:5")])
    assert main(["verify", str(run), "--fix-module", str(TEST_FIXES), "--pairs", "2", "--steps", "4",
                 "--alternate", "2"]) == 0
    out = capsys.readouterr().out
    # Each round: the program as it is (for its results), and one run of 8 timed steps, 4 each way.
    assert out.count("  round 1  ") == 2 and out.count("; turned off in the same run: ") == 2
    (fix,) = json.loads((run / "verify.json").read_text())["fixes"]
    assert fix["within_run"] is True and fix["pairs"] == 2 and fix["status"] == "verified"
    # 50 ms sleeps capped at 5: 45 ms a step, told from the run's own steps with the switch off.
    assert 0.035 < fix["realized_s"] < 0.055 and fix["baseline_s"] >= 0.050
    assert fix["reason"].endswith("; each pair from one run, the fix turned off and on between its steps")
    assert "within 0%" in fix["results"]


@pytest.mark.slow
def test_verify_as_a_subprocess(recorded, tmp_path):
    run = _with_findings(recorded, tmp_path, [])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "roofscope", "verify", str(run), "--fix", "crash", "--fix-module", str(TEST_FIXES),
           "--steps", "5"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    # One round: the program once as it is, once with the fix, which crashed: nothing more to measure.
    assert p.stdout.count("  round 1  ") == 2 and "round 2" not in p.stdout
    (fix,) = json.loads((run / "verify.json").read_text())["fixes"]
    assert (fix["fix"], fix["status"], fix["predicted_s"], fix["pairs"]) == ("crash", "crashed", None, 0)
    assert fix["reason"] == "round 1: RuntimeError: synthetic crash in the optimizer (exit code 1)"
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already exists" in again.stderr


# -- a verified Run, analyzed: a real GPU Run (an H200 GPT step) with a verify.json beside it -----------------


def test_a_real_runs_recommendations_show_their_verdicts_and_rank_by_them(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "data" / "h200_gpt_run", run)
    summary = json.loads((run / "summary.json").read_text())
    # Two compile fixes answer its torch_compile change: CUDA graphs (4.442 ms of host-bound idle) and compiling
    # without them (launch_fusion: 0.897 ms of it). Neither is the whole change: each predicts its own findings'.
    chosen = choose(summary, 3)
    assert [(c.fix, c.rule) for c in chosen] == [("compile:reduce-overhead", "cuda_graphs"), ("compile", "launch_fusion")]
    assert [c.predicted_s for c in chosen] == [pytest.approx(0.0044416), pytest.approx(0.00089650, rel=1e-4)]
    (run / "verify.json").write_text(verification_text(Verification(fixes=[
        FixVerdict(rule="cuda_graphs", rules=["cuda_graphs"], change="torch_compile", fix="compile:reduce-overhead",
                   status="crashed", predicted_s=0.0044416,
                   reason="round 1: RuntimeError: accessing tensor output of CUDAGraphs that has been overwritten"
                          " by a subsequent run (exit code 1)")])))
    assert main(["analyze", str(run), "--json", str(tmp_path / "s.json"), "-q"]) == 0
    s = json.loads((tmp_path / "s.json").read_text())["summary"]
    # The crash sinks the CUDA-graph finding below the ones nothing measured: compiling without graphs
    # (launch_fusion, its own fix) and the host syncs.
    assert [(f["rank"], f["rule"], f.get("verify", {}).get("status")) for f in s["findings"]] == [
        (1, "launch_fusion", None), (2, "host_syncs", None), (3, "cuda_graphs", "crashed")]
    assert [c["findings"] for c in s["diagnosis"]["changes"]] == [[3, 1], [2]]
    assert s["verification"]["fixes"][0]["finding"] == 3
    assert main(["analyze", str(run)]) == 0
    out = capsys.readouterr().out
    assert "     re-run with compile:reduce-overhead: crashed: round 1: RuntimeError:\n       accessing tensor" in out
    assert "Fixes re-run in the program" not in out   # every verdict sits beside its recommendation
    assert main(["analyze", str(run), "--markdown", "-"]) == 0
    assert "| re-run with the fix (roofscope verify) |" in capsys.readouterr().out
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert 'class="tag verify">crashed<' in html and "(roofscope verify):</b> crashed: round 1" in html


def test_runs_warm_up_through_the_runs_cold_start():
    from roofscope.run import load
    from roofscope.verify.runs import cold_start

    # GPT-2 generate() on an H200: the first round's 48 tokens ran at 44 ms, the rest at 6.5 ms. Timed from the
    # 4th step, verify's baseline read 54-58 ms a token and called the static cache 3.82x its prediction; each run
    # now warms up through step 48 (the last cold step in the first half of the Run's 286).
    r = load(ROOT / "tests" / "data" / "h200_gpt2_generate_run")
    assert cold_start(json.loads((r.path / "summary.json").read_text()), r.meta) == 48
    # A cold step late in the Run (a hiccup) is no cold start; no step times, nothing to warm through.
    meta = {"step_times": {"index": list(range(1, 101))}}
    assert cold_start({"step_time": {"cold_steps": [1, 2, 70]}}, meta) == 2
    assert cold_start({}, {}) == 0 and cold_start({"step_time": None}, meta) == 0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_verify_writes_the_rounds_it_completed(recorded, tmp_path, sig):
    # The signal comes once round 1's two runs are done (the program as it is, then with nap:5, which caps each
    # step's 50 ms sleep at 5 ms): verify.json holds that one pair, and the exit says the signal (128 + it).
    run = _with_findings(recorded, tmp_path, [])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "roofscope", "verify", str(run), "--fix", "nap:5", "--fix-module", str(TEST_FIXES),
           "--steps", "5", "--pairs", "5"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    for line in p.stdout:
        seen.append(line)
        if sum("  round 1  " in s for s in seen) == 2:
            p.send_signal(sig)
            break
    out, err = p.communicate(timeout=300)
    assert p.returncode == 128 + sig, err
    assert f"verify: interrupted ({signal.Signals(sig).name}): the verdicts of 1 complete round" in out
    doc = json.loads((run / "verify.json").read_text())
    assert doc["settings"]["interrupted"] == signal.Signals(sig).name
    (fix,) = doc["fixes"]
    # One pair: no interval yet. The realized saving is that pair's: about 45 ms of a 55 ms step.
    assert (fix["fix"], fix["status"], fix["pairs"]) == ("nap:5", "undecided", 1)
    assert fix["reason"] == "only 1 pair measured: no interval"
    assert 0.03 < fix["realized_s"] < 0.06
    assert "Traceback" not in err


def test_the_cost_said_up_front_names_the_compilation_it_leaves_out(monkeypatch, tmp_path):
    # 5 s a run from the Run's own times, 2 fixes: 3 runs a round, 2 rounds at least = 30 s. A compile fix's
    # run also compiles the model (20-28 s a run on the H200 clients), which no Run's step times hold.
    from roofscope.config import VerifySettings
    from roofscope.verify import workflow
    from roofscope.verify.candidates import Candidate

    monkeypatch.setattr(workflow, "estimate_s", lambda meta, settings: 5.0)
    lines: list[str] = []
    chosen = [Candidate("compile:reduce-overhead", "cuda_graphs"), Candidate("tf32", "tf32")]
    trials = workflow._plan(chosen, {}, VerifySettings(pairs=4, min_pairs=2, budget_s=600), lines.append, tmp_path)
    assert [t.cand.fix for t in trials] == ["compile:reduce-overhead", "tf32"]
    (cost,) = [line for line in lines if "cost:" in line]
    assert "2 rounds at least (~30 s)" in cost
    assert cost.endswith("; each run of compile:reduce-overhead also compiles the model, which these times do not hold")
    lines.clear()
    workflow._plan([Candidate("tf32", "tf32")], {}, VerifySettings(), lines.append, tmp_path)
    assert "compiles" not in " ".join(lines)


def test_an_undecided_fix_says_how_far_apart_the_programs_own_runs_were():
    # LoRA on the H200 (2026-11-29): baselines 50.4, 62.0 and 86.1 ms, compile 53.2, 54.0 and 52.1 ms. The
    # differences -2.8, 8.0 and 34.0 ms: mean 13.1 ms, an interval from below 0 to past the step's 2%.
    t = Trial(Candidate("compile", "launch_fusion", predicted_s=0.0095))
    t.pairs = [(0.0504, 0.0532), (0.0620, 0.0540), (0.0861, 0.0521)]
    v = t.verdict(0.02)
    assert v.status == "undecided" and v.realized_s == pytest.approx(0.01307, abs=1e-5)
    assert v.reason.endswith("; without the fix the program ran 50.4 to 86.1 ms/step from one run to the next")


def test_an_undecided_saving_that_follows_the_programs_speed_says_so():
    # HF Trainer BERT-base fp16 on the H200 (2026-11-29), compile turned off and on inside 8 runs. Steps off
    # (ms): 42.177 30.266 29.453 41.899 30.719 29.432 34.587 37.207; on: 34.617 31.369 30.370 32.288 30.941
    # 30.577 32.639 31.730. The four slowest runs saved 7.560, 9.611, 5.477 and 1.948 ms (mean 6.149), the four
    # fastest -1.103, -0.917, -0.222 and -1.145 ms (mean -0.847): compile pays only where the host is the bound.
    off = [42.177, 30.266, 29.453, 41.899, 30.719, 29.432, 34.587, 37.207]
    on = [34.617, 31.369, 30.370, 32.288, 30.941, 30.577, 32.639, 31.730]
    t = Trial(Candidate("compile", "launch_fusion", predicted_s=0.00325), within_run=True)
    t.pairs = [(b / 1e3, f / 1e3) for b, f in zip(off, on)]
    t.apart = [0.033] * 8
    v = t.verdict(0.02)
    assert v.status == "undecided" and v.realized_s == pytest.approx(0.002651, abs=1e-6)
    assert ("; the saving follows the program's own speed (correlation 0.9" in v.reason
            and "): 6.15 ms/step where it ran 34.6-42.2 ms, -0.847 ms/step where it ran 29.4-30.7 ms; with the fix it"
                " ran 30.4-34.6 ms either way; each pair from one run" in v.reason)
    assert "inside its runs it saved" not in v.reason
    # Pairs whose saving does not rise with the step (the LoRA baselines above, the saving spread otherwise) get
    # the old clause: the same steps off, the savings shuffled against them.
    t.pairs = [(b / 1e3, (b - s) / 1e3) for b, s in zip(off, [-1.1, 7.6, 1.9, -0.9, 9.6, 5.5, -0.2, -1.1])]
    assert "follows the program's own speed" not in t.verdict(0.02).reason
