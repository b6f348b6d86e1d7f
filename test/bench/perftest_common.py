"""What perftest_compare.py and its MPI benchmarks (perftest_mpi.py) share:
sizes and their names, running a benchmark program with its progress
reported, the progress line, and what else the CPUs did meanwhile."""

import os
import subprocess
import sys
import threading
import time


def parse_size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().rstrip("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def size_name(size):
    for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return "%d %s" % (size // factor, unit)
    return "%d B" % size


def short_size_name(size):
    """8, 4K, 4M: axis labels"""
    return size_name(size).replace(" B", "").replace(" KiB", "K").replace(
        " MiB", "M")


def count_name(count):
    """1k, 16k, 64k: numbers of posted receives"""
    return "%dk" % (count // 1024) if count >= 1024 and count % 1024 == 0 \
        else "%d" % count


def ratio_label(value, _pos=None):
    """1/8, 1/2, 1, 2, 8: ratio axis labels"""
    if value >= 1:
        return "%g" % value
    return "1/%g" % (1 / value)


def rotated(items, turn):
    """items from position turn (mod their number) on: each round of an
    interleaved comparison starts with another transport, so none always
    runs first or always right after the same one."""
    items = list(items)
    turn = turn % len(items) if items else 0
    return items[turn:] + items[:turn]


def describe_failure(what, text):
    lines = [l for l in text.splitlines() if l.strip()]
    return "%s:\n    %s" % (what, "\n    ".join(lines[-12:]) or "(no output)")


def run_reporting(command, timeout, on_rep, stdin=None):
    """Runs command; each stderr line starting with "rep " goes to on_rep.
    Returns (returncode, stdout, other stderr lines, timed out), or raises
    OSError when it cannot start.  stdout is a few kB written at the end:
    reading stderr to its end first cannot block the program."""
    proc = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    other = []
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stderr:
            if line.startswith("rep "):
                on_rep(line.strip())
            elif line.strip():
                other.append(line)
        out = proc.stdout.read()
        proc.wait()
    finally:
        timed_out = not timer.is_alive()
        timer.cancel()
    return (proc.returncode, out, "".join(other),
            timed_out and proc.returncode < 0)


class Progress:
    """One updating line on a terminal, a line per step otherwise."""

    def __init__(self, total):
        self.total = total
        self.done = 0
        self.start = time.time()
        self.tty = sys.stderr.isatty()

    def step(self, text):
        self.done += 1
        line = "[%3d/%d %3.0f s] %s" % (self.done, self.total,
                                        time.time() - self.start, text)
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def note(self, text):
        sys.stderr.write(("\n" if self.tty else "") + text + "\n")
        sys.stderr.flush()

    def finish(self):
        if self.tty:
            sys.stderr.write("\n")
        sys.stderr.write("measured in %.0f s\n" % (time.time() - self.start))


class CpuUse:
    """How much of the CPUs other processes used while we measured: the
    pair busy-polls, so their load shows in the figures (most in bandwidth,
    an average over the run, where latency is a median)."""

    def __init__(self):
        self.start = self.sample()

    @staticmethod
    def sample():
        busy = 0.0
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:9]]
            # user nice system idle iowait irq softirq steal
            busy = (sum(fields[0:3]) + sum(fields[5:8])) / \
                os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError):
            pass
        t = os.times()
        ours = t.user + t.system + t.children_user + t.children_system
        return time.time(), busy, ours

    def others_share(self):
        now = self.sample()
        wall = now[0] - self.start[0]
        others = (now[1] - self.start[1]) - (now[2] - self.start[2])
        return min(1.0, max(0.0, others / (wall * (os.cpu_count() or 1)))) \
            if wall > 0 else 0.0


def cpu_model():
    """The CPU's model name (/proc/cpuinfo): figures of one machine kind
    differ from CPU to CPU"""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU model unknown"


def nproc():
    """CPUs this process may run on, as nproc(1) counts them"""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def time_text(us):
    return "%.2f" % us if us < 10 else "%.1f" % us if us < 100 else \
        "%.0f" % us
