"""``roofscope verify RUN``: re-run the Run's program with each top fix injected, measure, write verify.json.

Rounds: each runs the program once without a fix and once with each fix still being measured
(runs.py), the order reversed every other round (A B C, C B A, ...) so that drift of the machine
falls on both sides alike. Each fix's pairs (its run against the round's baseline) give its saving
and interval (stats.py); a fix leaves the rounds once it crashed, applied to nothing, changed the
results, or its interval is narrow or decides its status, after ``min_pairs``; the rounds end when
no fix is left, after ``pairs``, or when the next round would pass the budget. Interrupted (Ctrl-C,
SIGTERM, SIGHUP), the rounds stop where they are: the run going on is ended, the verdicts of the rounds
completed are written (nothing when none was), and the command exits 128 + the signal. verify.json is
written atomically, and the Run's summary.json and report.html are rendered again so that they show
the verdicts (counters.rerender). Like counters.py, it collects, analyzes and renders: a workflow
above all three.
"""
from __future__ import annotations

import signal
import statistics
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec

from roofscope.analysis import run as analyze
from roofscope.config import VerifySettings
from roofscope.counters import confirm_recorded_command, rerender
from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write, check_writable
from roofscope.fixes import FIXES, load_modules, parse, switches
from roofscope.reports.phrases import verification_lines
from roofscope.run import load
from roofscope.run.layout import VERIFY_FILE
from roofscope.run.manifest import record
from roofscope.run.verification import FixVerdict, Verification, text
from roofscope.text import duration
from roofscope.verify.candidates import Candidate, choose
from roofscope.verify.runs import Program, cold_start, estimate_s, failed, held, launch
from roofscope.verify.stats import (decided, follows_speed, interval, results_verdict, span_ms, step_time,
                                    timing_status)

ProgramOf = Callable[[dict[str, Any]], Program]   # run.json -> what it ran (commands/verify.recorded_program)


class VerifyError(RoofscopeError):
    """The program cannot be verified as recorded (it fails without any fix, or has too few steps)."""


@dataclass
class Trial:
    """One fix through the rounds."""

    cand: Candidate
    runs: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[tuple[float, float]] = field(default_factory=list)   # (baseline, fix) median step seconds
    ended: tuple[str, str] | None = None     # a status decided before the timing: crashed, not applicable...
    results: str = ""
    measured: bool = False                   # its interval decided (or narrowed): no more rounds
    within_run: bool = False                 # a switch, turned off and on inside each of its runs
    # The rounds' runs without the fix, beside each pair taken inside one run (none where the program ended first)
    apart: list[float] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.ended is None and not self.measured

    def add(self, rnd: int, base: dict[str, Any], rec: dict[str, Any], baselines: list[dict[str, Any]],
            settings: VerifySettings) -> None:
        self.runs.append(rec)
        why = failed(rec)
        if why:
            self.ended = ("crashed", f"round {rnd}: {why}")
            return
        if not any(rec.get("applied", {}).values()):
            self.ended = ("not applicable", _not_applied(rec))
            return
        # A switch's pair is its own run's steps with the fix off and on; else (or when the program ended before
        # the fix was first turned off) the round's baseline and this run.
        off = step_time(rec, fixed=False) if self.within_run else None
        fixed = step_time(rec, fixed=True) if off is not None else step_time(rec)
        if fixed is None:
            self.ended = ("crashed", f"round {rnd}: it ran, but reached none of the timed steps"
                                     f" ({(rec.get('steps') or {}).get('boundaries', 0)} step boundaries)")
            return
        base_s: float = step_time(base)   # type: ignore[assignment]  # checked for every baseline
        if off is not None:
            self.apart.append(base_s)
        self.pairs.append((base_s if off is None else off, fixed))
        changed, note = results_verdict(baselines, self.runs, settings.rtol,
                                        redraws=any(s.name == "compile" for s in parse(self.cand.fix)))
        self.results = note or self.results
        if changed:
            self.ended = ("changes results", note)
            return
        ci = interval([b - f for b, f in self.pairs])
        base_s = statistics.median(b for b, _ in self.pairs)
        self.measured = (len(self.pairs) >= settings.min_pairs
                         and decided(ci, self.cand.predicted_s, base_s, settings.precision))

    def verdict(self, precision: float) -> FixVerdict:
        """``precision``: --precision, the fraction of the baseline's step below which a saving is none."""
        ci = interval([b - f for b, f in self.pairs])
        if self.ended is not None:
            status, reason = self.ended
        elif ci is not None:
            status, reason = timing_status(ci, self.cand.predicted_s,
                                           precision * statistics.median(b for b, _ in self.pairs))
            inside = len(self.apart)
            speed = follows_speed(self.pairs) if status == "undecided" else None
            if speed:   # the host's speed, not the fix, spread the pairs
                reason += speed
            elif status == "undecided" and inside == len(self.pairs):   # why more pairs are needed
                saved = [b - f for b, f in self.pairs]
                reason += f"; inside its runs it saved {span_ms(saved)} ms/step from one run to the next"
            elif status == "undecided":   # the program's own runs disagree
                base = [b for b, _ in self.pairs]
                reason += f"; without the fix the program ran {span_ms(base)} ms/step from one run to the next"
            if inside:
                n = len(self.pairs)
                which = "each pair" if inside == n else f"{inside} of {n} pairs"
                reason += (f"; {which} from one run, the fix turned off and on between its steps"
                           + ("" if inside == n else " (the program ended before the others turned it off)"))
        else:
            n = len(self.pairs)
            status, reason = "undecided", f"only {n} pair{'s' if n != 1 else ''} measured: no interval"
        realized = ci.mean if ci is not None else (self.pairs[0][0] - self.pairs[0][1] if self.pairs else None)
        return FixVerdict(
            rule=self.cand.rule, fix=self.cand.fix, status=status, reason=reason, predicted_s=self.cand.predicted_s,
            realized_s=realized, ci_s=[ci.lo, ci.hi] if ci is not None else None, pairs=len(self.pairs),
            rules=self.cand.rules, change=self.cand.change,
            baseline_s=statistics.median(b for b, _ in self.pairs) if self.pairs else None,
            fixed_s=statistics.median(f for _, f in self.pairs) if self.pairs else None,
            results=self.results, applied=[a for done in (self.runs[-1].get("applied") or {}).values() for a in done]
            if self.runs else [], within_run=bool(self.apart),
            baseline_runs_s=statistics.median(self.apart) if self.apart else None)


def _not_applied(rec: dict[str, Any]) -> str:
    skipped = [f"{name}: {why}" for name, whys in (rec.get("skipped") or {}).items() for why in whys]
    if skipped:
        return "; ".join(skipped)
    names = [n for n in (rec.get("applied") or {}) if n in FIXES and FIXES[n].acts_on]
    return "; ".join(f"the program made no {FIXES[n].acts_on}" for n in names) or "it changed nothing"


def _source_edit(c: Candidate) -> FixVerdict:
    return FixVerdict(rule=c.rule, fix="", status="not applicable", predicted_s=c.predicted_s, rules=c.rules,
                      change=c.change, reason="needs a source edit" + (f": {c.fix_text}" if c.fix_text else ""))


def verify_run(run_dir: str | Path, program_of: ProgramOf, settings: VerifySettings, *, asked: tuple[str, ...] = (),
               fix_modules: tuple[str, ...] = (), force: bool = False, quiet: bool = False,
               yes: bool = False) -> Verification:
    """Verify the Run's fixes (``asked``: these specs instead) and write its verify.json."""
    r = load(run_dir)
    out = check_writable(r.path / VERIFY_FILE, force)
    load_modules(fix_modules)
    for spec in asked:
        parse(spec)
    summary = r.summary() or analyze(r.path).to_dict()
    chosen = choose(summary, settings.top_fixes, asked)
    program = program_of(r.meta)
    confirm_recorded_command(r.meta, yes)
    say = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    cold = cold_start(summary, r.meta)
    if cold > settings.warmup_steps:
        say(f"verify: the Run's first {cold} steps ran cold: each run warms up through them")
        settings = replace(settings, warmup_steps=cold)
    trials = _plan(chosen, r.meta, settings, say, r.path)
    stopped: int | None = None
    with tempfile.TemporaryDirectory(prefix="roofscope-verify-") as tmp, _stoppable():
        try:
            _rounds(trials, program, settings, Path(tmp), fix_modules, say, estimate_s(r.meta, settings))
        except KeyboardInterrupt:
            stopped = signal.SIGINT
        except Stopped as e:
            stopped = e.signum
    if stopped is not None:
        rounds = max((len(t.runs) for t in trials), default=0)
        name = signal.Signals(stopped).name
        if not rounds:
            say(f"verify: interrupted ({name}) before a round was complete: nothing written")
            raise Stopped(stopped)
        say(f"verify: interrupted ({name}): the verdicts of {rounds} complete round{'s' if rounds != 1 else ''}")
    by_fix = {t.cand.fix: t.verdict(settings.precision) for t in trials}
    verdicts = [by_fix[c.fix] if c.fix else _source_edit(c) for c in chosen if not c.fix or c.fix in by_fix]
    doc = Verification(created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       settings={**asdict(settings), "fixes": list(asked), "step_on": program.step_on,
                                 **({"interrupted": signal.Signals(stopped).name} if stopped is not None else {})},
                       fixes=verdicts)
    record(r.path, [VERIFY_FILE])    # listed before written: --force may replace it, as every Run file
    atomic_write(out, text(doc), force=force)
    for w in rerender(r.path):
        print(f"roofscope: warning: {w}", file=sys.stderr)
    for line in verification_lines(msgspec.to_builtins(doc)["fixes"]):
        say(line)
    say(f"wrote:    {out}")
    if stopped is not None:
        raise Stopped(stopped)
    return doc


class Stopped(Exception):
    """verify was interrupted by ``signum``; the command exits 128 + it (verify.json holds what was measured)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _stoppable() -> Iterator[None]:
    """SIGTERM and SIGHUP end the rounds as Ctrl-C does (on the main thread: elsewhere no handler can be set)."""
    def stop(signum: int, frame: Any) -> None:
        raise Stopped(signum)

    sigs = (signal.SIGTERM, signal.SIGHUP) if threading.current_thread() is threading.main_thread() else ()
    old = {sig: signal.signal(sig, stop) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _plan(chosen: list[Candidate], meta: dict[str, Any], settings: VerifySettings, say: Callable[[str], None],
          path: Path) -> list[Trial]:
    """The trials, as many of the chosen fixes as the budget's minimum rounds allow; the cost, said up front."""
    fixes = [c for c in chosen if c.fix]
    inside = [settings.alternate > 0 and switches(parse(c.fix)) for c in fixes]
    run_s = estimate_s(meta, settings)
    # A switch's run times its steps twice over (as many each way): the Run's step times that much more.
    longer = estimate_s(meta, replace(settings, steps=2 * settings.steps))
    extra = (longer - run_s) if run_s is not None and longer is not None else 0.0

    def round_s(n: int) -> float:   # a round of the baseline and the first n fixes
        return run_s * (1 + n) + extra * sum(inside[:n])   # type: ignore[operator]  # run_s known here

    keep = len(fixes)
    while run_s is not None and keep > 1 and round_s(keep) * settings.min_pairs > settings.budget_s:
        keep -= 1
    edits = len(chosen) - len(fixes)
    say(f"verify: {keep} fix{'es' if keep != 1 else ''} of {path}"
        + (f" ({edits} more need{'s' if edits == 1 else ''} a source edit)" if edits else ""))
    say(f"  each round runs the program once without a fix and once with each fix still measured, the order reversed"
        f" every other round; a run: at least {settings.warmup_steps} warm-up steps (until they settle), then"
        f" {settings.steps} timed steps, results compared over the first {settings.compare_steps}")
    if run_s is None:
        say("  cost: unknown until the first round (the Run records no step times)")
    else:
        lo, hi = (round_s(keep) * n for n in (settings.min_pairs, settings.pairs))
        # The Run's times hold no compilation: each run of a compile fix compiles the model again.
        compiling = [c.fix for c in fixes[:keep] if any(n.startswith("compile") for n in c.fix.split(";"))]
        say(f"  cost: ~{duration(run_s)} a run (from the Run's own times): {settings.min_pairs} rounds at least"
            f" (~{duration(lo)}), at most {settings.pairs} (~{duration(hi)}), stopped by --budget-s"
            f" {settings.budget_s:g}" + (f"; each run of {', '.join(compiling)} also compiles the model, which"
                                         " these times do not hold" if compiling else ""))
    for c in fixes[keep:]:
        say(f"  not tried: {c.fix} (the budget covers {keep} fix{'es' if keep != 1 else ''}: raise --budget-s)")
    return [Trial(c, within_run=w) for c, w in zip(fixes[:keep], inside)]


def _rounds(trials: list[Trial], program: Program, settings: VerifySettings, workdir: Path,
            fix_modules: tuple[str, ...], say: Callable[[str], None], run_s: float | None) -> None:
    spent, baselines = 0.0, []
    width = max([len("without a fix")] + [len(t.cand.fix) for t in trials])
    for rnd in range(1, settings.pairs + 1):
        active = [t for t in trials if t.open]
        if not active:
            return
        if rnd > settings.min_pairs and run_s is not None and spent + run_s * (1 + len(active)) > settings.budget_s:
            say(f"  budget: round {rnd} would pass --budget-s {settings.budget_s:g} ({duration(spent)} spent): stopped")
            return
        # Signals are held but while a run goes on: a round ends with its runs, or is counted whole.
        with held():
            order: list[Trial | None] = [None, *active] if rnd % 2 else [*reversed(active), None]
            recs: dict[int, dict[str, Any]] = {}
            for i, t in enumerate(order):
                within = t is not None and t.within_run
                rec = launch(program, t.cand.fix if t else None, settings, workdir, f"round{rnd}-{i}", fix_modules,
                             alternate=within)
                spent += rec["wall_s"]
                took, off = step_time(rec, fixed=True if within else None), step_time(rec, fixed=False)
                say(f"  round {rnd:<2} {t.cand.fix if t else 'without a fix':<{width}}  "
                    + (f"{took * 1e3:10.3f} ms/step" if took is not None and not failed(rec) else f"{'failed':>18}")
                    + f"  ({rec['wall_s']:.1f} s)"
                    + (f"; turned off in the same run: {off * 1e3:.3f} ms/step" if within and off is not None else ""))
                recs[id(t)] = rec
            base = recs[id(None)]
            _check_baseline(base, rnd, settings)
            baselines.append(base)
            run_s = max(rec["wall_s"] for rec in recs.values())
            for t in active:
                t.add(rnd, base, recs[id(t)], baselines, settings)
                if not t.open:
                    v = t.verdict(settings.precision)
                    say(f"  -> {t.cand.fix}: {v.status}: {v.reason}")


def _check_baseline(base: dict[str, Any], rnd: int, settings: VerifySettings) -> None:
    why = failed(base)
    if why is None and step_time(base) is None:
        steps = base.get("steps") or {}
        n, source = steps.get("boundaries", 0), steps.get("source", "none")
        why = ("no step boundary arrived (no optimizer.step(), roofscope.step() or outermost forward without"
               " gradients): record the Run with --step-on" if not n else
               f"it ended after {n} step boundaries ({source}), before any timed step: lower --warmup-steps"
               f" ({settings.warmup_steps}) or --compare-steps ({settings.compare_steps})")
    if why is not None:
        for line in base.get("tail") or []:
            print(f"  | {line}", file=sys.stderr)
        raise VerifyError(f"the program fails without any fix (round {rnd}): {why}")
