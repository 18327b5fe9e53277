"""Recommendations for CPU runs (analyzers/diagnose/cpu.py) on real Runs of a small CNN, the facts the
collectors record for them (run.json's ``cpu`` and ``program``), and the CPU-only trace of a GPU job.

The Runs in tests/data/cpu_cnn_runs were recorded on this project's 2-core development machine (AMD EPYC,
torch 2.13 CPU) on 2026-11-28, with other engineers' tests running beside them (load average 6.5-6.8):

    roofscope run -o threads2 benchmarks/real_clients/cpu_cnn.py --threads 2 --steps 16
    roofscope run -o threads1 benchmarks/real_clients/cpu_cnn.py --threads 1 --steps 16
    roofscope run -o threads1_channels_last benchmarks/real_clients/cpu_cnn.py --threads 1 --steps 16 --channels-last
    roofscope run -o threads1_loading benchmarks/real_clients/cpu_cnn.py --threads 1 --decode 4 --steps 14

and on 2026-11-29 (load 2.2-2.7), with diffusers 0.42 installed beside torch (the profile caught one step of
3.46 s beside two of 0.25 s):

    roofscope run -o diffusers_unet benchmarks/real_clients/cpu/diffusers_unet_cpu.py --steps 24

and hf_bert_dropout (2026-11-29, transformers 5.24): `roofscope run benchmarks/real_clients/cpu/hf_trainer_tiny_bert.py`
(HF Trainer, a random-init 4-layer BERT, dropout 0.1); hf_resnet_busy (2026-11-29, load 1.8-2.4, another
session's benchmarks on both cores): `roofscope run benchmarks/real_clients/cpu/hf_resnet_cpu.py --steps 30`
(transformers' ResNetForImageClassification, random-init, small).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import pandas as pd

from roofscope.analysis import run
from roofscope.analyzers.diagnose.base import outlier_steps
from roofscope.reports.console import render_summary
from roofscope.analyzers.diagnose.inputs import CpuFacts
from roofscope.collectors.metadata import cpu_facts, cpu_snapshot

from .conftest import external

RUNS = Path(__file__).parent / "data" / "cpu_cnn_runs"
ROOT = Path(__file__).resolve().parents[1]


def _findings(r) -> dict:
    return {f.rule: f for f in r.diagnosis.findings}


def _own(r) -> float:
    return r.to_dict()["step_time"]["unprofiled_median_s"]


def test_two_threads_on_a_busy_two_core_machine_are_told_to_use_one() -> None:
    two, one = run(RUNS / "threads2"), run(RUNS / "threads1")
    f = _findings(two)["cpu_threads"]
    # 2 threads, 2 cores, load 6.67: over the profiled steps the process ran 2.06 s of CPU in 6.43 s and its
    # threads waited 10.73 s for a core (84% of their runnable time): no core is free beyond the first.
    assert f.apply == "threads:1" and f.kind == "fix" and f.status == "ok"
    assert f.figures["wait_share"] == pytest.approx(10.727 / (10.727 + 2.060), abs=1e-3)
    assert f.snippet.startswith("torch.set_num_threads(1)")
    # Predicted against realized, in the program's own step time: 2 threads 1.712 s, 1 thread 0.854 s.
    realized = _own(two) - _own(one)
    assert realized == pytest.approx(0.858, abs=0.002)
    assert 0.5 <= realized / f.saving_s <= 1.5
    assert two.diagnosis.findings[0].rule == "cpu_threads"


def test_four_threads_on_two_quiet_cores_are_told_to_use_two() -> None:
    r = run(RUNS / "threads4")
    f = _findings(r)["cpu_threads"]
    # `cpu_cnn.py --threads 4` on the 2-core machine at load 0.6: over the profiled window the process ran
    # 0.824 s of CPU in 0.468 s (1.76 cores busy). Two threads that never wait do that in 0.88 of the time;
    # one thread in 1.76 of it (slower): threads:2 saves 146.41 ms x (1 - 1.7589 / 2) = 17.65 ms of the own step.
    # (The rule's earlier model, d/T - c (1/N - 1/T) at the 1 core left by the load average, claimed nothing.)
    assert f.apply == "threads:2" and f.title == "4 threads on 2 cores: use 2"
    assert f.figures["busy_cores"] == pytest.approx(0.823662 / 0.468287, rel=1e-6)
    assert f.saving_s == pytest.approx(_own(r) * (1 - 0.823662 / 0.468287 / 2), rel=1e-6)
    assert f.saving_s == pytest.approx(0.01765, abs=1e-5)
    # `roofscope verify` of it on the same machine (2026-11-29, the switch turned off and on inside each run,
    # 4 pairs): saved 24.0 ms [4.8, 43.1], 1.36x; threads:1 cost 70.2 ms [63.2, 77.2] more (not named).
    assert 0.5 <= 0.0240 / f.saving_s <= 1.5


def test_one_thread_on_a_busy_machine_is_told_the_machine_is_busy_and_no_more() -> None:
    f = _findings(run(RUNS / "threads1"))["cpu_threads"]
    assert f.kind == "advice" and f.saving_s == 0.0 and f.apply == ""
    assert "waited 67% of their runnable time" in f.summary


def test_channels_last_for_the_cnn_and_not_once_it_has_it() -> None:
    nchw, nhwc = run(RUNS / "threads1"), run(RUNS / "threads1_channels_last")
    f = _findings(nchw)["channels_last"]
    assert f.apply == "channels_last" and "memory_format=torch.channels_last" in f.snippet
    # 6 convolutions forward, 6 backward and 3 max-pools a step take NCHW inputs (15 ops).
    assert f.summary.startswith("15 convolution/pooling ops/step take NCHW inputs")
    assert "channels_last" not in _findings(nhwc)
    # Same machine, same load, one thread: the profiled steps ran 815.7 ms (NCHW) and 685.5 ms
    # (channels_last), 130 ms apart; the prediction, in the profiled step, is within 0.5-1.5x of that.
    # (The unprofiled steps, 854 and 564 ms, moved with the neighbours' load as much as with the layout.)
    profiled = f.figures["profiled_saving_s"]
    gap = nchw.to_dict()["step_time"]["profiled_median_s"] - nhwc.to_dict()["step_time"]["profiled_median_s"]
    assert gap == pytest.approx(0.130, abs=0.002)
    assert 0.5 <= gap / profiled <= 1.5


def test_cpu_fusion_names_the_models_chains_and_compiles_the_root_module() -> None:
    f = _findings(run(RUNS / "threads1"))["fusion"]
    assert f.apply == "compile:default"
    assert f.snippet == "model = torch.compile(model)   # your SmallCNN"
    assert "aten::threshold_backward" in f.summary   # a backward chain: the model's, not the optimizer's
    assert 0 < f.saving_pct < 0.2


def test_a_dataloader_without_workers_needs_a_free_core_for_one() -> None:
    # --decode 4: each sample resized 4x up and back in the main process, 1.14 s of the step; the machine
    # (load average 10.1 on 2 cores) leaves no core for a worker: blocked, no saving claimed.
    loading = RUNS / "threads1_loading"
    f = _findings(run(loading))["dataloader"]
    assert f.status == "blocked" and f.saving_s == 0.0 and f.apply == ""
    assert [b["kind"] for b in f.blockers] == ["no_free_core"]
    load = f.figures["unblocked_saving_s"]
    assert load == pytest.approx(1.1376, abs=1e-3)
    assert "the machine's other load leaves this process no core free" in f.fix
    # The same Run on a quiet 8-core machine (load 1.0): workers build the batches meanwhile. The profiled step,
    # 3.108 s, less the loading is 1.970 s of compute, longer than the 1.138 s one worker takes to build a
    # batch, and the process's CPU work spread over 8 cores is 0.065 s: one worker keeps up, and the step
    # becomes its compute (saving the whole loading).
    meta = json.loads((loading / "run.json").read_text())
    meta["cpu"] = {**meta["cpu"], "cores": 8, "affinity": 8, "load_avg": [1.0, 1.0, 1.0]}
    quiet = _findings(run(loading, run_meta=meta))["dataloader"]
    assert quiet.status == "ok" and quiet.apply == "dataloader:workers=1"
    assert quiet.snippet == "DataLoader(dataset, batch_size=B, num_workers=1)"
    assert quiet.figures["profiled_saving_s"] == pytest.approx(load)
    assert quiet.figures["spread_step_s"] == pytest.approx(0.0652, abs=1e-4)


def test_a_worker_pays_where_the_loading_leaves_a_core_idle_though_the_step_has_a_thread_per_core() -> None:
    # An HF Trainer BERT on 2 threads and 2 cores whose dataset does 10 ms of Python per sample
    # (benchmarks/real_clients/cpu/hf_trainer_tiny_bert.py --item-ms 10 --steps 40): while the main process
    # builds a batch (161.4 ms a step), one core idles. The rule said "no free core" (2 threads on 2 cores);
    # in plain runs a worker saved 105, 74 and 15 ms a step (docs/validation.md).
    f = _findings(run(RUNS / "hf_bert_loading"))["dataloader"]
    assert f.status == "ok" and f.apply == "dataloader:workers=1"
    assert f.snippet == "TrainingArguments(..., dataloader_num_workers=1)"
    # The process kept 2.886 / 1.7345 = 1.664 cores busy over the profiled steps: its CPU work, spread over
    # the 2 free cores, takes 1.664 x 554.0 / 2 = 461.0 ms of the 554.0 ms profiled step, longer than the
    # 392.6 ms of compute: the step becomes 461.0 ms, 93.1 ms saved, 87.1 ms at the own step of 518.2 ms.
    assert f.figures["step_threads"] == pytest.approx(2.88601 / 1.734467, rel=1e-6)
    assert f.figures["spread_step_s"] == pytest.approx(0.46095, abs=1e-5)
    assert f.figures["profiled_saving_s"] == pytest.approx(0.09310, abs=1e-5)
    assert f.saving_s == pytest.approx(0.08708, abs=1e-5)


def test_the_program_is_named_from_the_run() -> None:
    p = run(RUNS / "threads2").diagnosis.program
    assert p["kind"] == "training_loop" and p["root_module"] == "SmallCNN" and p["optimizer"] == "SGD"
    assert p["dataloader"] == "workers=0" and p["forwards_per_step"] == 1.0


# -- what the collectors record ------------------------------------------------------------------

def test_cpu_facts_over_a_window_of_busy_threads() -> None:
    start = cpu_snapshot()
    x = sum(i * i for i in range(300_000))   # ~30 ms of one thread's CPU time
    facts = cpu_facts(start)
    assert x > 0
    w = facts["window"]
    assert 0 < w["cpu_s"] and w["wall_s"] > 0 and facts["torch_threads"] >= 1
    assert facts["affinity"] is None or 1 <= facts["affinity"] <= facts["cores"]
    c = CpuFacts.of(facts)
    assert c.threads == facts["torch_threads"] and c.cpu_s == w["cpu_s"]


def test_cores_free_subtracts_the_other_load() -> None:
    # 2 cores, load 6.67; the process itself had (2.06 + 10.73) / 6.43 = 1.99 threads runnable: 4.68 others.
    c = CpuFacts(cores=2, affinity=2, threads=2, load1=6.67, wall_s=6.43, cpu_s=2.06, run_delay_s=10.73)
    assert c.cores_free == 0.0
    quiet = CpuFacts(cores=8, affinity=4, threads=8, load1=1.0, wall_s=1.0, cpu_s=1.0, run_delay_s=0.0)
    assert quiet.cores_free == 4.0   # the affinity mask bounds it


def test_roofscope_run_records_the_program_and_cpu_blocks(tmp_path: Path) -> None:
    script = tmp_path / "tiny.py"
    script.write_text(
        "import torch\n"
        "class Tiny(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__(); self.l = torch.nn.Linear(8, 8)\n"
        "    def forward(self, x):\n        return self.l(x).relu()\n"
        "m = Tiny(); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(8):\n"
        "    for _ in range(2):\n        m(torch.randn(4, 8)).sum().backward()\n"
        "    opt.step(); opt.zero_grad()\n")
    out = tmp_path / "run"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), "--no-report", str(script)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    meta = json.loads((out / "run.json").read_text())
    prog = meta["program"]
    assert prog["root_module"] == "Tiny" and prog["root_package"] == "__main__" and prog["wrappers"] == []
    # 2 forwards per optimizer step, 8 steps: 16 forwards of the root module, no generate() among them.
    assert prog["forwards"] == 16 and prog["generate_calls"] == 0
    assert set(prog["backends"]) == {"cudnn_benchmark", "float32_matmul_precision", "cudnn_allow_tf32"}
    cpu = meta["cpu"]
    assert cpu["torch_threads"] >= 1 and cpu["window"]["wall_s"] > 0 and cpu["window"]["cpu_s"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["diagnosis"]["program"]["forwards_per_step"] == 2.0


# -- the CPU-only trace of a GPU job --------------------------------------------------------------

def test_a_gpu_jobs_cpu_side_is_named_and_not_judged_against_cpu_roofs() -> None:
    # HTA's rank_non_gpu: a GPU training job's host ops only (record_stream, NCCL, fbgemm's GPU
    # embedding op, FusedAdam). Judged against this machine's CPU it showed "MFU 308%".
    r = run(external("hta/rank_non_gpu/rank_non_gpu.json.gz"))
    s = r.to_dict()
    assert s["cpu_only"] and "aten::record_stream x48" in s["gpu_job_host_only"]
    assert s["ceilings"]["source"] == "none" and "CPU-only trace of a GPU job" in s["ceilings"]["notes"][0]
    assert s["metrics"].get("mfu") is None and s["metrics"].get("hfu") is None
    assert s["findings"] == []
    assert all("CPU-only trace of a GPU job" in x["reason"] for x in s["diagnosis"]["skipped"])


def test_a_cpu_jobs_trace_is_not_taken_for_a_gpu_jobs() -> None:
    for path in (Path(__file__).parent / "data" / "cpu_block.json.gz", RUNS / "threads1",
                 external("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")):
        assert run(path).to_dict()["gpu_job_host_only"] is None, path


def test_a_profiled_step_far_slower_than_the_others_is_left_out_of_the_estimates() -> None:
    r = run(RUNS / "diffusers_unet")
    d = r.diagnosis
    # Steps 13, 14, 15 took 3,464, 265 and 246 ms: step 13 is 13x the median. Counted, its ops made the
    # chains 265 ms "a step" and fusion promised 138 ms of the 258 ms own step; compile saved 8-20 ms a step
    # inside runs. Over steps 14 and 15: chains of 25.8 ms a step, saving 13.4 ms. The unprofiled steps ran
    # 225 ms to 1.13 s (10th and 90th percentiles: 5.0x): the machine set their 258.1 ms median, so the saving
    # is not scaled up to it (it would be 13.6 ms).
    assert d.outlier_steps == [13] and r.to_dict()["diagnosis"]["outlier_steps"] == [13]
    f = _findings(r)
    assert f["fusion"].figures["chain_time_s"] == pytest.approx(0.02583, rel=1e-3)
    assert f["fusion"].saving_s == pytest.approx(0.01341, rel=1e-2)
    # The terms are those of the typical steps: they add up to the own step (258.1 ms), not to 1.25 s.
    assert sum(d.terms.values()) == pytest.approx(d.step_s, rel=1e-6) and d.step_s == pytest.approx(0.2581, rel=1e-3)
    assert "Step 13 ran over 3x the median profiled step" in render_summary(r)


def test_outlier_steps_are_few_and_far_slower() -> None:
    assert outlier_steps(pd.Series([3.464, 0.265, 0.246], index=[13, 14, 15])) == [13]
    assert outlier_steps(pd.Series([0.70, 0.265, 0.246], index=[13, 14, 15])) == []   # 2.6x the median 0.265
    assert outlier_steps(pd.Series([3.4, 0.26], index=[1, 2])) == []                    # two steps: no median


def test_a_dropouts_ops_end_the_cpu_fusion_chains_and_the_fix_says_why() -> None:
    f = _findings(run(RUNS / "hf_bert_dropout"))["fusion"]
    # 4 layers x 3 dropouts (attention probabilities, attention output, feed-forward output), the embeddings'
    # and the classifier's: 14 masks a step. Their scale and mask multiplies leave the chains: 201 ops in 53
    # chains before, 168 now; 33.2 ms of chains before, 29.3 ms now; the saving 18.7 -> 14.2 ms.
    assert f.figures["dropouts_per_step"] == 14
    assert f.figures["chain_time_s"] == pytest.approx(0.02926, rel=1e-3)
    assert f.saving_s == pytest.approx(0.01422, rel=1e-2)
    # The 42 outermost aten::dropout calls of the 3 profiled steps took 171.97 ms: 57.32 ms a step eager.
    assert f.figures["dropout_s"] == pytest.approx(0.05732, rel=1e-3)
    assert "draws 14 dropout masks a step (57.323 ms/step eager), left out of the chains" in f.fix
    assert "roofscope verify" in f.fix
    # Compile goes with fallback_random, applied and written: the masks drawn as eager draws them.
    assert f.apply == "compile:default;fallback_random"
    assert f.snippet.startswith("torch._inductor.config.fallback_random = True")
    # A model without dropout is told nothing of it.
    plain = _findings(run(RUNS / "threads1"))["fusion"]
    assert "dropouts_per_step" not in plain.figures and "dropout" not in plain.fix


def test_savings_are_not_scaled_up_to_an_own_step_the_machine_set() -> None:
    # transformers' small ResNet recorded while another session's benchmarks held the cores: its unprofiled
    # steps took 37 ms to 1.25 s (10th and 90th percentiles, 34x), median 424.2 ms; the profiled ones 81.0 ms.
    # Scaled up by 424.2 / 81.0 = 5.24, channels_last promised 35.5 ms; verify then saved 2.98 ms [1.14, 4.82]
    # at the program's quiet speed (15-17 ms a step). Now the ops' savings stay as profiled: 15% of the
    # convolutions' and 80% of max-pooling's time, 6.77 ms; the rest of the 424.2 ms step is host.
    d = run(RUNS / "hf_resnet_busy").diagnosis
    f = {x.rule: x for x in d.findings}
    assert d.step_s == pytest.approx(0.4242, rel=1e-3)
    assert f["channels_last"].saving_s == pytest.approx(0.006773, rel=1e-3)
    assert "profiled_saving_s" not in f["channels_last"].figures
    assert sum(d.terms.values()) == pytest.approx(d.step_s, rel=1e-6)
    assert d.terms["host"] == pytest.approx(0.4242 - 0.0836, rel=1e-2)
    # Its threads waited 33% of their runnable time for a core, and one thread would not do better (the process
    # kept 1.17 cores busy): the machine was busy, which the advice says, with the steps' spread.
    busy = f["cpu_threads"]
    assert busy.kind == "advice" and busy.saving_s == 0.0 and busy.title.startswith("Busy machine")
    assert "its steps without the profiler ran 34.0x apart" in busy.summary and "roofscope verify" in busy.fix
