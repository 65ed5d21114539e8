#!/usr/bin/python3
"""`rdattn watch` on a pseudo-terminal against a real coordinator and worker.

A coordinator (fresh SQLite file, OS-chosen port) and one rdattn-worker with 2 slots, whose
"trainer" is a small Python script written here: it reads the job's RunSpec (job.json), writes
KIND_INIT, a KIND_TRAIN_STEP per step (0.12 s apart), KIND_EVAL at every milestone and
KIND_FINISHED to the events file the worker tails, and exits 0. A sweep of 2 seeds x {block, rd}
(4 jobs of 24 steps) is submitted with `rdattn submit --watch` on a pty (pty.fork, 100 x 40).
The bytes the client writes go through a small terminal emulator (below) that knows only the
escape sequences the table may use, so anything else fails the test. Checks:
  - every complete frame (ended by ESC[J) shows the sweep line, the column header and one row
    per job with a state; some frame shows a job RUNNING with a partly filled bar and an ETA;
  - the final screen holds one sweep line ("SUCCEEDED  4/4 jobs done") and every job SUCCEEDED
    with a full bar: frames were redrawn in place, not appended; no line wrapped;
  - no "UNSPECIFIED" ever, and the jobs read "submitted" before they run;
  - on a 60 x 6 pty the table fits (no wrap, at most 5 lines, a "... more jobs" line);
  - `watch` with stdout a pipe, and `--format text` on the pty: event lines ("submitted",
    "RUNNING -> SUCCEEDED", the sweep's end) with no escape sequence; `--format json` on the pty:
    one JSON object per line; `watch --help` documents --format table|text|json.
Every process is stopped at the end, pass or fail.
"""
import argparse
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from itest import check  # noqa: E402

FAKE_TRAIN = r'''#!/usr/bin/python3
# A stand-in for rdattn-train: events for the job in job.json, no model.
import json, sys, time
args = sys.argv[1:]
job = args[args.index("--job") + 1]
events = args[args.index("--events") + 1]
spec = json.load(open(job))
def find(d, *names):
    for n in names:
        if n in d:
            return d[n]
    return None
s = find(spec, "schedule")
total = int(find(s, "total_tokens", "totalTokens"))
batch = int(find(s, "global_batch_tokens", "globalBatchTokens"))
stop = int(find(s, "stop_at_tokens", "stopAtTokens") or 0)
if stop > 0:
    total = min(total, stop)
milestones = [int(m) for m in (find(s, "milestones_tokens", "milestonesTokens") or [])]
seq = 0
def emit(**e):
    global seq
    seq += 1
    e["seq"] = seq
    with open(events, "a") as f:
        f.write(json.dumps(e) + "\n")
emit(kind="KIND_INIT", param_count="1000", world_size=1)
steps = total // batch
for step in range(1, steps + 1):
    time.sleep(0.12)
    tokens = step * batch
    emit(kind="KIND_TRAIN_STEP", step=str(step), tokens=str(tokens), train_loss=3.0 - step / steps,
         tokens_per_second=batch / 0.12)
    if tokens in milestones or step == steps:
        emit(kind="KIND_EVAL", step=str(step), tokens=str(tokens), milestone_tokens=str(tokens),
             val_nll=2.9 - step / steps)
emit(kind="KIND_FINISHED", step=str(steps), tokens=str(steps * batch))
'''

SWEEP = """name: watch-tty
scales:
  - {name: tiny, preset: tiny}
arms: [block, rd]
seeds: [1, 2]
data:
  train_shards: ["/nonexistent/train_*.bin"]
  val_shards: ["/nonexistent/val.bin"]
  tokenizer: byte
  val_windows: 16
optim: {peak_lr: 0.003, warmup_steps: 2}
schedule:
  total_tokens: 12288
  global_batch_tokens: 512
  micro_batch_sequences: 8
  milestones_tokens: [6144, 12288]
parallel: {world_size: 1, threads_per_rank: 1}
max_attempts: 1
"""

JOBS = ["tiny/s1/block", "tiny/s1/rd", "tiny/s2/block", "tiny/s2/rd"]
STATES = {"submitted", "PENDING", "LEASED", "RUNNING", "SUCCEEDED"}


class Terminal:
    """The part of an ANSI terminal the table uses: text, CR, LF (with scrolling), cursor up
    (ESC[nA, stopping at the top of the screen), home (ESC[H), erase in line (ESC[K), erase below
    (ESC[J) and erase the screen (ESC[2J). Lines wrap at the last column, counted in `wraps` from
    the first escape sequence on (the lines before it are the client's, not the table's); any
    other control sequence is recorded in `unknown`. `frames` holds the screen after each
    ESC[J (the end of a frame)."""

    def __init__(self, cols, rows):
        self.cols, self.rows = cols, rows
        self.buf = [[]]  # every line ever shown: scrollback, then the screen
        self.top = 0  # first line of the screen
        self.r = self.c = 0
        self.wraps = 0
        self.table_started = False
        self.unknown = []
        self.frames = []
        self.pending = ""

    def _down(self):
        self.r += 1
        while len(self.buf) <= self.r:
            self.buf.append([])
        if self.r - self.top >= self.rows:
            self.top = self.r - self.rows + 1

    def _put(self, ch):
        if self.c >= self.cols:
            self.wraps += self.table_started
            self._down()
            self.c = 0
        line = self.buf[self.r]
        while len(line) < self.c:
            line.append(" ")
        if self.c < len(line):
            line[self.c] = ch
        else:
            line.append(ch)
        self.c += 1

    def feed(self, text):
        text = self.pending + text
        self.pending = ""
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\x1b":
                self.table_started = True
                m = re.match(r"\x1b\[([0-9;?]*)([A-Za-z])", text[i:])
                if m is None:
                    if len(text) - i < 16:  # a sequence cut by the read: finish it next time
                        self.pending = text[i:]
                        return
                    self.unknown.append(repr(text[i:i + 8]))
                    i += 1
                    continue
                arg, op = m.group(1), m.group(2)
                if op == "A" and re.fullmatch(r"\d*", arg):
                    self.r = max(self.top, self.r - int(arg or "1"))
                elif op == "K" and arg == "":
                    del self.buf[self.r][self.c:]
                elif op == "J" and arg == "":
                    del self.buf[self.r][self.c:]
                    del self.buf[self.r + 1:]
                    self.frames.append(self.screen())
                elif op == "J" and arg == "2":
                    for k in range(self.top, len(self.buf)):
                        self.buf[k] = []
                elif op == "H" and arg == "":
                    self.r, self.c = self.top, 0
                else:
                    self.unknown.append(repr(m.group(0)))
                i += len(m.group(0))
                continue
            if ch == "\r":
                self.c = 0
            elif ch == "\n":
                self._down()
            elif ch < " " and ch != "\t":
                self.unknown.append(repr(ch))
            else:
                self._put(ch)
            i += 1

    def lines(self):
        """Every line (scrollback and screen), right-trimmed, trailing empty lines dropped."""
        out = ["".join(line).rstrip() for line in self.buf]
        while out and not out[-1]:
            out.pop()
        return out

    def screen(self):
        return ["".join(line).rstrip() for line in self.buf[self.top:]]


def run_pty(argv, env, cols, rows, timeout):
    """Runs argv on a fresh pty of cols x rows; returns (exit code, bytes written to it)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its stdin, stdout and stderr
        try:
            fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    out = b""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the pty
                break
            if not chunk:
                break
            out += chunk
    finally:
        if time.time() >= deadline:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    code = os.waitstatus_to_exitcode(status)
    return code, out


def job_rows(screen):
    """{job: state} of the table rows on a screen."""
    rows = {}
    for line in screen:
        parts = line.split()
        if len(parts) >= 2 and parts[0] in JOBS:
            rows[parts[0]] = parts[1]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    args = ap.parse_args()
    coordinator = os.path.join(args.bin, "coordinator", "rdattn-coordinator")
    worker = os.path.join(args.bin, "worker", "daemon", "rdattn-worker")
    client = os.path.join(args.bin, "client", "rdattn")

    tmp = tempfile.mkdtemp(prefix="rdattn-watch-tty-")
    train = os.path.join(tmp, "fake-train")
    with open(train, "w") as f:
        f.write(FAKE_TRAIN)
    os.chmod(train, 0o755)
    sweep = os.path.join(tmp, "sweep.yaml")
    with open(sweep, "w") as f:
        f.write(SWEEP)
    env = dict(os.environ, HOME=tmp, XDG_CONFIG_HOME=os.path.join(tmp, "xdg"), TERM="xterm", OMP_NUM_THREADS="1")
    for k in ("RDATTN_COORDINATOR", "RDATTN_TOKEN", "RDATTN_TOKEN_FILE", "RDATTN_CONFIG", "COLUMNS", "LINES"):
        env.pop(k, None)

    procs = []
    try:
        coord = subprocess.Popen([coordinator, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "c.db"),
                                  "--heartbeat-seconds", "1", "--lease-seconds", "30"],
                                 stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "coordinator.log"), "w"),
                                 text=True)
        procs.append(coord)
        line = coord.stdout.readline()
        m = re.search(r"listening on (\S+:\d+)", line)
        check(m is not None, "the coordinator prints its OS-chosen address: %r" % line.strip())
        addr = m.group(1)
        procs.append(subprocess.Popen(
            [worker, "--coordinator", addr, "--workdir", os.path.join(tmp, "w"), "--train-binary", train,
             "--slots", "2", "--kind", "cpu", "--threads-per-rank", "1", "--event-poll", "0.05",
             "--lease-wait", "2"],
            stdout=open(os.path.join(tmp, "worker.log"), "w"), stderr=subprocess.STDOUT, env=env))
        rdattn = [client, "--coordinator", addr]

        # 1. submit --watch on a terminal: the live table.
        code, raw = run_pty(rdattn + ["submit", sweep, "--watch"], env, 100, 40, timeout=240)
        text = raw.decode("utf-8", "replace")
        with open(os.path.join(tmp, "tty.out"), "w") as f:
            f.write(text)
        term = Terminal(100, 40)
        term.feed(text)
        final = term.lines()
        print("\n".join(final))
        check(code == 0, "rdattn submit --watch on a pty exits 0 (got %d)" % code)
        sid = re.search(r"(sw-[0-9a-zA-Z-]+)", text).group(1)
        check(not term.unknown, "the table uses only the escape sequences it documents (other: %s)" % term.unknown[:5])
        check(term.wraps == 0, "no line wrapped at 100 columns (%d wraps)" % term.wraps)
        check(len(term.frames) >= 5, "the table was drawn %d times (>= 5) while the sweep ran" % len(term.frames))
        incomplete = [f for f in term.frames
                      if sorted(job_rows(f)) != sorted(JOBS) or set(job_rows(f).values()) - STATES
                      or sum(1 for l in f if l.startswith("sweep " + sid)) != 1
                      or sum(1 for l in f if l.startswith("JOB ")) != 1]
        check(not incomplete, "every frame has one sweep line, one header and a row with a state for each "
              "of the 4 jobs%s" % ("" if not incomplete else ": " + "\n".join(incomplete[0])))
        running = [l for f in term.frames for l in f
                   if re.match(r"tiny/s\d/\w+ +RUNNING +1 +\[#+\.+\] .* \d+(s|m\d\ds) +\S+$", l)]
        check(running, "some frame shows a job RUNNING at attempt 1 with a partly filled bar and an ETA: %r" %
              (running[:1] or [""])[0])
        check(any("submitted" in job_rows(f).values() for f in term.frames),
              "jobs read 'submitted' before a worker has them")
        check(all("UNSPECIFIED" not in l for f in term.frames for l in f), "no frame says UNSPECIFIED")
        sweep_lines = [l for l in final if l.startswith("sweep ")]
        check(len(sweep_lines) == 1 and sum(1 for l in final if l.startswith("JOB ")) == 1,
              "the final screen holds one sweep line and one header: redrawn in place (%d sweep lines)" %
              len(sweep_lines))
        check(re.match(r"sweep %s \(watch-tty\)  SUCCEEDED  4/4 jobs done$" % sid, sweep_lines[0]) is not None,
              "the final sweep line says SUCCEEDED, 4/4 jobs done: %r" % sweep_lines[0])
        rows = job_rows(final)
        check(rows == {j: "SUCCEEDED" for j in JOBS}, "the final screen shows all 4 jobs SUCCEEDED: %s" % rows)
        full = [l for l in final if l.split()[:1] and l.split()[0] in JOBS and re.search(r"\[#+\]", l)
                and "12.3k/12.3k" in l]
        check(len(full) == 4, "... each with a full bar and 12.3k/12.3k tokens")
        check(len(final) <= 3 + 1 + 1 + 4, "nothing but the submit lines and one table on screen (%d lines)" %
              len(final))

        # 2. A small terminal: the table fits it.
        code, raw = run_pty(rdattn + ["watch", sid], env, 60, 6, timeout=60)
        small = Terminal(60, 6)
        small.feed(raw.decode("utf-8", "replace"))
        print("\n".join(small.lines()))
        check(code == 0 and not small.unknown and small.wraps == 0,
              "on a 60 x 6 pty: exit %d, no wrapped line, no other escape" % code)
        last = small.frames[-1] if small.frames else []
        last = [l for l in last if l]
        check(len(last) <= 5 and all(len(l) <= 59 for l in last),
              "... the last frame has %d lines (<= 5) of <= 59 columns" % len(last))
        check(any(l.startswith("... ") and "more jobs" in l for l in last) and last[0].startswith("sweep " + sid),
              "... it starts with the sweep line and counts the jobs that did not fit")

        # 3. Not a terminal: today's event lines, no escape sequence.
        pipe = subprocess.run(rdattn + ["watch", sid], capture_output=True, text=True, timeout=60, env=env)
        print(pipe.stdout[-2000:])
        check(pipe.returncode == 0, "rdattn watch into a pipe exits 0")
        check("\x1b" not in pipe.stdout and "\x1b" not in pipe.stderr, "... and writes no escape sequence")
        out = pipe.stdout.splitlines()
        check(out and out[0].startswith("watching sweep %s (SUCCEEDED, 4 jobs)" % sid), "... it starts with %r" %
              (out[:1] or [""])[0])
        for j in JOBS:
            check("%s  submitted" % j in out, "... %s reads '%s  submitted'" % (j, j))
            check(any(l.startswith("%s  RUNNING -> SUCCEEDED" % j) for l in out), "... %s RUNNING -> SUCCEEDED" % j)
        check("UNSPECIFIED" not in pipe.stdout,
              "... and never UNSPECIFIED %s" % [l for l in out if "UNSPECIFIED" in l])
        check(out[-1].startswith("sweep %s: RUNNING -> SUCCEEDED" % sid), "... and ends with the sweep's end: %r" % out[-1])

        # 4. --format text and json on a terminal.
        code, raw = run_pty(rdattn + ["watch", sid, "--format", "text"], env, 100, 40, timeout=60)
        tty_text = raw.decode("utf-8", "replace").replace("\r\n", "\n")
        check(code == 0 and "\x1b" not in tty_text, "--format text on a pty: exit %d, no escape sequence" % code)
        check([l for l in tty_text.splitlines() if l] == out, "... the same lines as into a pipe")
        code, raw = run_pty(rdattn + ["watch", sid, "--format", "json"], env, 100, 40, timeout=60)
        lines = [l for l in raw.decode().replace("\r\n", "\n").splitlines() if l]
        events = [json.loads(l) for l in lines]
        check(code == 0 and "\x1b" not in raw.decode() and len(events) > 20 and all("seq" in e for e in events),
              "--format json on a pty: %d JSON events, one a line, no escape sequence" % len(events))
        bad = subprocess.run(rdattn + ["watch", sid, "--format", "tabel"], capture_output=True, text=True,
                             timeout=60, env=env)
        check(bad.returncode == 2 and "expected table, text or json" in bad.stderr,
              "--format tabel is a usage error (exit %d: %s)" % (bad.returncode, bad.stderr.strip()))
        helped = subprocess.run([client, "watch", "--help"], capture_output=True, text=True, timeout=60, env=env)
        check(helped.returncode == 0 and "--format table|text|json" in helped.stdout and "table" in helped.stdout,
              "watch --help documents --format table|text|json")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    print("PASS")


if __name__ == "__main__":
    main()
