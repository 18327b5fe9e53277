"""Lifecycle sweep (issue 40): every way a profiled script ends, and whether its Run survives it.

Runs ``python -m roofscope run`` on small CPU scripts, each in a process session of its own, and checks
after each: the Run (run.json and a readable trace.json.gz, in the output or the rescue folder named on
stderr) wherever a profile was recorded; the exit code the script's (128 + n for a signal); no traceback of
roofscope's; nothing left behind: no claim or recording in the output, nothing of roofscope's in TMPDIR,
no process of the session alive.

    PYTHONPATH=$PWD python benchmarks/lifecycle_sweep.py [--reps N] [--late N] [--tree DIR] [--only NAME ...]
                                                         [--json FILE]

``--tree DIR`` runs another checkout's roofscope (a checkout of main: the "before" column). The full-disk
cases mount small tmpfs file systems (root, and a kernel that allows it); elsewhere they are skipped and
said so. docs/reliability.md has the figures and how they were taken.

Cases: SIGINT, SIGTERM and SIGHUP at ten points of a run (the script's first line; a wait, a warm-up and an
active step; the boundary that exports the profile; a step after it; the script's last line; then, after the
script: at once, while the Run is written, during the analysis); a SIGINT a random 0-50 ms after the
script's end, ``--late`` times; ``os._exit`` from the main thread and from
another one; a forked child that exits; a child stuck in C code (a mutex locked twice, and torch's
fork-unsafe OpenMP pool) with SIGTERM sent to the whole group as ``timeout`` does; multiprocessing pools
(terminated while their workers spin, and left normally); a full TMPDIR; an output disk with room for the
recorded data but not the report, and one with room for the claim only; ``--force`` over a Run holding the
user's files; SIGKILL after the profile was exported, then the next run into the same folder.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ["--peak-tflops", "1", "--peak-bandwidth", "10", "--settle", "0", "-q"]

# 8 optimizer steps: wait 1, warm-up 2, active 3 (steps 3, 4, 5, exported at the 6th boundary), 2 timed only.
# SWEEP_SIG at SWEEP_POINT: 1 first line, 2 wait step, 3 warm-up step, 4 active step, 5 the exporting boundary,
# 6 a step after the profile, 7 the last line; after the script, from a thread it leaves: 8 at once, 9 as the
# Run is being written (its staging folder appears: this roofscope's inside the Run, an older one's beside
# it), 10 0.2 s after run.json is there (the analysis, held 3 s in by SLOW_FORMULA); 11 (the "late" cases)
# a random 0-50 ms after the script's end, as the 62 tries sent it.
TRAIN = textwrap.dedent('''
    import os, random, signal, sys, threading, time
    import torch
    sig = getattr(signal, os.environ.get("SWEEP_SIG", "SIGINT"))
    point = int(os.environ.get("SWEEP_POINT", "0"))
    mode = os.environ.get("SWEEP_MODE", "")
    def at(p):
        if point == p:
            os.kill(os.getpid(), sig)
    at(1)
    torch.set_num_threads(2)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64)
    for i in range(8):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        at({0: 2, 1: 3, 3: 4, 5: 5, 6: 6}.get(i, -1))
        if mode == "hold" and i == 6:
            print("HOLDING", flush=True)
            time.sleep(600)
    print("LAST", flush=True)
    at(7)
    out = os.environ.get("SWEEP_OUT", "")

    def writing():
        return (any(n.startswith(".roofscope-staging-") for n in os.listdir(out))
                or any(n.startswith("." + os.path.basename(out) + ".") for n in os.listdir(os.path.dirname(out)))
                or os.path.exists(os.path.join(out, "run.json")))

    def later():
        ready = {8: lambda: True, 9: writing, 10: lambda: os.path.exists(os.path.join(out, "run.json")),
                 11: lambda: True}[point]
        while not ready():
            time.sleep(0.0005)
        time.sleep(0.2 if point == 10 else random.uniform(0, 0.05) if point == 11 else 0)
        os.kill(os.getpid(), sig)

    if point >= 8:
        threading.Thread(target=later, daemon=True).start()
    if mode == "osexit":
        os._exit(4)
    if mode == "osexit-thread":
        threading.Thread(target=os._exit, args=(5,)).start()
        time.sleep(600)
''')

# The Linear layers' op made slow in the analysis only (--formulas): point 10's signal lands in it.
SLOW_FORMULA = textwrap.dedent('''
    import time
    import roofscope

    def addmm(bias, a, b, *rest):
        time.sleep(3)
        return 2 * a[0] * a[1] * b[1]

    roofscope.register_formula("aten::addmm", addmm, category="gemm", replace=True)
''')

# Eight optimizer steps, the start of every script but TRAIN (whose steps send its signals).
STEPS = textwrap.dedent('''
    import ctypes, multiprocessing as mp, os, sys, time
    import torch
    torch.set_num_threads(2)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(8):
        model(torch.randn(32, 64)).square().mean().backward()
        opt.step()
''')

STUCK = STEPS + textwrap.dedent('''
    a = torch.randn(256, 256)
    for _ in range(5):
        a @ a                     # the parent's OpenMP pool, busy before the fork
    pid = os.fork()
    if pid == 0:
        if sys.argv[1] == "mutex":
            libc = ctypes.CDLL(None)
            m = ctypes.create_string_buffer(64)
            libc.pthread_mutex_lock(m)
            print("STUCK", flush=True)
            libc.pthread_mutex_lock(m)
        print("STUCK", flush=True)
        for _ in range(10**6):
            a @ a                 # libgomp after fork: the child hangs in the parent's thread pool
        os._exit(0)
    os.waitpid(pid, 0)
''')

POOL = STEPS + textwrap.dedent('''
    def spin(_):
        while True:
            pass

    def square(i):
        time.sleep(0.2)
        return i * i

    ctx = mp.get_context("fork")
    if sys.argv[1] == "terminate":
        pool = ctx.Pool(3)
        pool.map_async(spin, range(3))
        time.sleep(1)
        pool.terminate()
        pool.join()
    else:
        with ctx.Pool(4) as pool:
            print(sum(pool.map(square, range(8))))
''')

FORK = textwrap.dedent('''
    import os, sys
    import torch
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(8):
        model(torch.randn(32, 64)).square().mean().backward()
        opt.step()
        if i == 2:
            pid = os.fork()
            if pid == 0:
                sys.exit(5)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 5
''')


@dataclass
class Outcome:
    case: str
    rc: int | None
    expected_rc: tuple[int, ...]
    run: str | None                     # where the Run is, if any
    lost: bool                          # a profile was recorded (or had to be) and no Run holds it
    leftovers: list[str] = field(default_factory=list)
    processes_left: int = 0
    traceback: bool = False
    seconds: float = 0.0
    note: str = ""

    @property
    def ok(self) -> bool:
        return (self.rc in self.expected_rc and not self.lost and not self.leftovers and not self.processes_left
                and not self.traceback)


class Sweep:
    def __init__(self, tree: Path, work: Path, tries: int = 10) -> None:
        self.tree = tree
        self.tries = tries
        self.work = work
        self.scripts = work / "scripts"
        self.scripts.mkdir(parents=True, exist_ok=True)
        for name, text in (("train.py", TRAIN), ("stuck.py", STUCK), ("pool.py", POOL), ("fork.py", FORK),
                           ("slow_formulas.py", SLOW_FORMULA)):
            (self.scripts / name).write_text(text)
        self.mounts: list[Path] = []
        self.n = 0

    # -- running one case ---------------------------------------------------------------------------

    def _dirs(self, case: str) -> tuple[Path, Path]:
        self.n += 1
        base = self.work / f"{self.n:03d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', case)}"
        (base / "tmp").mkdir(parents=True)
        return base, base / "run"

    def launch(self, args: list[str], base: Path, env: dict[str, str] | None = None,
               tmp: Path | None = None) -> subprocess.Popen:
        full = {**os.environ, "PYTHONPATH": str(self.tree), "TMPDIR": str(tmp or base / "tmp"), **(env or {})}
        # Files, not pipes: a child that outlives its parent would hold a pipe open, and the case with it.
        with open(base / "stdout", "w") as out, open(base / "stderr", "w") as err:
            return subprocess.Popen([sys.executable, "-m", "roofscope", "run", *args], cwd=base, env=full,
                                    stdout=out, stderr=err, text=True, start_new_session=True,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def finish(self, case: str, proc: subprocess.Popen, base: Path, out: Path, expected_rc: tuple[int, ...],
               must_have_run: bool, t0: float, timeout: float = 300, tmp: Path | None = None) -> Outcome:
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        time.sleep(2)             # as long as `timeout -k 2` would give them
        left = _group(proc.pid)
        for pid in left:          # ours: the session this case started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        stderr = (base / "stderr").read_text(errors="replace")
        run = _run_in(out, stderr)
        leftovers = ([p.name for p in out.glob(".roofscope-*") if p.name != ".roofscope-files"] if out.is_dir() else [])
        leftovers += [p.name for p in (tmp or base / "tmp").glob("roofscope-*")
                      if not p.name.startswith("roofscope-rescue")]
        said_nothing = "no trace was recorded" in stderr
        lost = run is None and (must_have_run or not said_nothing)
        tb = "Traceback" in stderr       # none of these scripts raises: any traceback is roofscope's
        return Outcome(case, rc, expected_rc, str(run) if run else None, lost, leftovers, len(left), tb,
                       round(time.monotonic() - t0, 1), _note(stderr))

    def train(self, case: str, sig: str = "", point: int = 0, mode: str = "", expected: tuple[int, ...] = (0,),
              must_have_run: bool = True, extra: list[str] | None = None, out: Path | None = None,
              tmp: Path | None = None) -> Outcome:
        base, default_out = self._dirs(case)
        out = out or default_out
        env = {"SWEEP_SIG": sig or "SIGINT", "SWEEP_POINT": str(point), "SWEEP_MODE": mode, "SWEEP_OUT": str(out)}
        t0 = time.monotonic()
        proc = self.launch(["-o", str(out), *RUN, *(extra or []), str(self.scripts / "train.py")], base, env, tmp)
        return self.finish(case, proc, base, out, expected, must_have_run, t0, tmp=tmp)

    # -- the cases ----------------------------------------------------------------------------------

    def signals(self) -> list[Outcome]:
        found = []
        for sig in ("SIGINT", "SIGTERM", "SIGHUP"):
            code = 128 + getattr(signal, sig)
            for point in range(1, 11):
                # Before the profile was exported (points 1-4) no trace may exist yet; after it, one must.
                slow = ["--formulas", str(self.scripts / "slow_formulas.py")] if point == 10 else []
                found.append(self.train(f"{sig}@{point}", sig, point, expected=(code,), must_have_run=point >= 5,
                                        extra=slow))
        return found

    def late(self) -> list[Outcome]:
        return [self.train(f"SIGINT 0-50 ms after the script, try {i + 1}", "SIGINT", 11, expected=(130,))
                for i in range(self.tries)]

    def exits(self) -> list[Outcome]:
        return [self.train("os._exit(4)", mode="osexit", expected=(4,)),
                self.train("os._exit(5) in a thread", mode="osexit-thread", expected=(5,))]

    def children(self) -> list[Outcome]:
        found = []
        base, out = self._dirs("fork child sys.exit(5)")
        t0 = time.monotonic()
        proc = self.launch(["-o", str(out), *RUN, str(self.scripts / "fork.py")], base)
        found.append(self.finish("fork child sys.exit(5)", proc, base, out, (0,), True, t0))
        for kind in ("mutex", "openmp"):
            case = f"stuck child ({kind}) + SIGTERM to the group"
            base, out = self._dirs(case)
            t0 = time.monotonic()
            proc = self.launch(["-o", str(out), *RUN, str(self.scripts / "stuck.py"), kind], base)
            _wait_line(base, proc, "STUCK", 240)
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGTERM)     # what `timeout` does
            found.append(self.finish(case, proc, base, out, (143,), True, t0, timeout=60))
        for how in ("terminate", "map"):
            case = f"multiprocessing.Pool {how}"
            base, out = self._dirs(case)
            t0 = time.monotonic()
            proc = self.launch(["-o", str(out), *RUN, str(self.scripts / "pool.py"), how], base)
            o = self.finish(case, proc, base, out, (0,), True, t0)
            o.traceback = o.traceback or "Terminated" in o.note
            found.append(o)
        return found

    def disks(self) -> list[Outcome]:
        found = []
        tmp = self._tmpfs("fulltmp", 64, fill_kb=48)
        if tmp is None:
            return [Outcome("full disks", None, (0,), None, False, note="skipped: cannot mount a tmpfs")]
        found.append(self.train("TMPDIR with 16 KiB free", tmp=tmp))
        for size, what in ((200, "room for the data, not the report"), (24, "room for the claim only")):
            disk = self._tmpfs(f"out{size}", size)
            assert disk is not None
            found.append(self.train(f"output disk {size} KiB: {what}", out=disk / "run"))
        return found

    def force(self) -> list[Outcome]:
        base, out = self._dirs("--force over a Run with the user's files")
        first = self.train("first run", out=out)
        (out / "notes.txt").write_text("mine")
        (out / "mydata").mkdir()
        (out / "mydata" / "x").write_text("data")
        o = self.train("--force over a Run with the user's files", out=out, extra=["--force"])
        kept = (out / "notes.txt").is_file() and (out / "mydata" / "x").is_file()
        o.lost = o.lost or not kept
        o.note = ("user's files kept" if kept else "USER'S FILES DELETED") + "; " + o.note
        return [first, o]

    def killed(self) -> list[Outcome]:
        case = "SIGKILL after the export, then a run into the same folder"
        base, out = self._dirs(case)
        t0 = time.monotonic()
        proc = self.launch(["-o", str(out), *RUN, str(self.scripts / "train.py")], base, {"SWEEP_MODE": "hold"})
        _wait_line(base, proc, "HOLDING", 240)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        full = {**os.environ, "PYTHONPATH": str(self.tree), "TMPDIR": str(base / "tmp")}
        again = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *RUN,
                                str(self.scripts / "train.py")], cwd=base, env=full, capture_output=True, text=True,
                               timeout=300)
        # The killed run's trace: in its output's recording (or, before issue 40, in its TMPDIR).
        traces = list(out.rglob("trace.json")) + list((base / "tmp").rglob("trace.json"))
        named = any(str(t) in again.stderr for t in traces)
        # Refused without --force (exit 2), the trace named so the profile can still be analyzed.
        return [Outcome(case, again.returncode, (2,), None, lost=not (traces and named),
                        seconds=round(time.monotonic() - t0, 1),
                        note=("trace named: " if named else "trace NOT named: ") + _note(again.stderr))]

    def _tmpfs(self, name: str, size_kb: int, fill_kb: int = 0) -> Path | None:
        d = self.work / "mnt" / name
        d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(d)],
                                               capture_output=True).returncode != 0:
            return None
        self.mounts.append(d)
        if fill_kb:
            (d / "fill").write_bytes(b"\0" * fill_kb * 1024)
        return d

    def unmount(self) -> None:
        for d in self.mounts:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)


def _group(pgid: int) -> list[int]:
    """The processes still alive in the session a case started (its process group). A zombie is dead: one
    whose parent ended without reaping it waits for an init that reaps (a container may have none)."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True).stdout
    return [int(p) for p, g, st in (line.split() for line in out.splitlines()) if int(g) == pgid and st[0] != "Z"]


def _wait_line(base: Path, proc: subprocess.Popen, marker: str, seconds: float) -> None:
    """Until the case's stdout shows ``marker`` (or its process ended, or ``seconds`` passed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if marker in (base / "stdout").read_text(errors="replace"):
            return
        time.sleep(0.05)


def _run_in(out: Path, stderr: str) -> Path | None:
    """Where the Run was written: the output, or the rescue folder roofscope named."""
    rescue = re.search(r"saved to (\S+) instead", stderr)
    for d in ([Path(rescue.group(1))] if rescue else []) + [out]:
        if (d / "run.json").is_file() and (d / "trace.json.gz").is_file():
            try:
                json.loads(gzip.decompress((d / "trace.json.gz").read_bytes()))
                json.loads((d / "run.json").read_text())
            except (OSError, ValueError):
                return None
            return d
    return None


def _note(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("roofscope:") or "Error" in ln or "Terminated" in ln]
    return " | ".join(ln[:160] for ln in lines[-3:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1, help="repeat the signal cases")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the roofscope checkout to run (default: this one)")
    ap.add_argument("--late", type=int, default=10, help="tries of a SIGINT 0-50 ms after the script's end")
    ap.add_argument("--only", nargs="*", default=["signals", "late", "exits", "children", "disks", "force", "killed"])
    ap.add_argument("--json", type=Path, help="write every outcome here")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))   # the mounts come off on the way out
    work = Path(tempfile.mkdtemp(prefix="lifecycle-sweep-"))
    sweep = Sweep(args.tree.resolve(), work, args.late)
    outcomes: list[Outcome] = []
    try:
        for name in args.only:
            for _ in range(args.reps if name == "signals" else 1):
                for o in getattr(sweep, name)():
                    outcomes.append(o)
                    print(f"{'ok  ' if o.ok else 'FAIL'} {o.case:55s} rc={o.rc} {o.seconds:6.1f}s"
                          f"{' lost' if o.lost else ''}{' left=' + ','.join(o.leftovers) if o.leftovers else ''}"
                          f"{f' processes={o.processes_left}' if o.processes_left else ''}"
                          f"{' traceback' if o.traceback else ''}  {o.note[:200]}", flush=True)
    finally:
        sweep.unmount()
    bad = [o for o in outcomes if not o.ok and not o.note.startswith("skipped")]
    print(f"\n{len(outcomes)} cases: {len(bad)} failed; Runs lost {sum(o.lost for o in outcomes)}, processes left "
          f"{sum(o.processes_left for o in outcomes)}, cases with leftovers {sum(bool(o.leftovers) for o in outcomes)},"
          f" roofscope tracebacks {sum(o.traceback for o in outcomes)}, wrong exit codes "
          f"{sum(o.rc not in o.expected_rc for o in outcomes if not o.note.startswith('skipped'))}")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
