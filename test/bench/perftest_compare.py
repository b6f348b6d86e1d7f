#!/usr/bin/env python3
"""Side-by-side ucx_perftest over rc_tm and UCX's own transports.

Runs Debian's stock ucx_perftest (server and client, two processes on this
host) for each test, message size and transport, interleaving transports
within every repetition so they share the machine's noise, and prints the
median of each figure with its ratio to the reference transport measured in
the same run.  Optionally writes a latency/bandwidth plot (PNG).

Every cell must succeed: a failed or timed-out run is reported with its
output, its cell prints "failed", and the exit status is 1.

    perftest_compare.py --module build/src/uct/rc_tm/.libs/libuct_rc_tm.so \\
                        --png perftest.png
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# UCX_TLS for each transport: only that transport may carry the traffic.
# rc_tm_base is rc_tm loaded from --baseline-module (another build of the
# module, e.g. the previous release), measured in the same run.
TRANSPORTS = {
    "rc_tm":      "rc_tm",
    "rc_tm_base": "rc_tm",
    "posix":      "posix",
    "tcp":        "tcp",
}

LATENCY_TESTS = ("tag_lat", "tag_sync_lat", "am_lat", "put_lat", "get_lat",
                 "ucp_put_lat", "stream_lat", "ucp_am_lat")

MIN_ITERS = 50
MAX_ITERS = 100000


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


def ratio_label(value, _pos=None):
    """1/8, 1/2, 1, 2, 8: ratio axis labels"""
    if value >= 1:
        return "%g" % value
    return "1/%g" % (1 / value)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port):
    """Whether a socket of this host listens on the TCP port (/proc/net)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)
                for line in lines:
                    fields = line.split()
                    if (fields[3] == "0A" and
                            int(fields[1].rsplit(":", 1)[1], 16) == port):
                        return True
        except OSError:
            continue
    return False


class Cell:
    """One (test, size, transport): its figures and its cost per iteration."""

    def __init__(self, test, size):
        self.figures = []   # [(latency_us, bandwidth_MiBs)]
        self.failures = 0
        self.per_iter_us = None   # the least measured so far
        # A first guess (~2 GB/s, 1 us per message) until the first run
        # measures the real cost; that first run gets a quarter of the budget.
        self.guess_us = 4 * (1.0 + size / 2000.0)
        if test in LATENCY_TESTS:
            self.guess_us *= 2

    def iterations(self, budget, slowdown):
        per_iter_us = self.per_iter_us or self.guess_us
        iters = budget * 1e6 / (per_iter_us * slowdown)
        return int(max(MIN_ITERS, min(MAX_ITERS, iters)))

    def measured(self, per_iter_us):
        """Records a run's cost per iteration; returns how much slower it was
        than this cell's fastest run (the machine's current slowdown)."""
        previous = self.per_iter_us
        if per_iter_us <= 0:
            return 1.0
        self.per_iter_us = min(previous or per_iter_us, per_iter_us)
        return per_iter_us / previous if previous else 1.0


def perftest_env(args, tl):
    env = dict(os.environ)
    env["UCX_TLS"] = TRANSPORTS[tl]
    env["LD_PRELOAD"] = os.path.abspath(
        args.baseline_module if tl == "rc_tm_base" else args.module)
    return env


def perftest_args(args, test, size, iters, port):
    return ["-t", test, "-s", str(size), "-n", str(iters),
            "-w", str(max(10, iters // 10)), "-p", str(port)]


def describe_failure(what, text):
    lines = [l for l in text.splitlines() if l.strip()]
    return "%s:\n    %s" % (what, "\n    ".join(lines[-12:]) or "(no output)")


def run_pair(args, test, size, tl, iters):
    """run_pair_once, again on another port when the one picked was taken
    meanwhile (free_port only finds a port that was free)."""
    for _ in range(3):
        figure, why = run_pair_once(args, test, size, tl, iters)
        if figure is not None or "Address already in use" not in why:
            break
    return figure, why


def run_pair_once(args, test, size, tl, iters):
    """One server/client pair on this host.

    Returns ((latency_us, bandwidth_MiBs, per_iter_us), None) or
    (None, why it failed)."""
    env = perftest_env(args, tl)
    port = free_port()
    common = perftest_args(args, test, size, iters, port) + ["-v"]
    deadline = time.time() + args.timeout
    # the server's output goes to a file: a pipe read only at the end could
    # fill up and block it
    server_log = tempfile.TemporaryFile(mode="w+")
    server = subprocess.Popen([args.perftest] + common, env=env,
                              stdout=server_log, stderr=subprocess.STDOUT)
    client = None
    try:
        while not listening(port):
            if server.poll() is not None or time.time() > deadline:
                break
            time.sleep(0.01)
        while server.poll() is None:
            left = max(1.0, deadline - time.time())
            client = subprocess.run([args.perftest, "127.0.0.1"] + common,
                                    env=env, capture_output=True, text=True,
                                    timeout=left)
            # a refused connection: the server is not listening yet
            if ("Connection refused" not in client.stdout + client.stderr or
                    time.time() > deadline):
                break
            time.sleep(0.05)
        server.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        return None, "timed out after %.0f s" % args.timeout
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server_log.seek(0)
        server_out = server_log.read()
        server_log.close()

    if server.returncode != 0:
        return None, describe_failure("server exited with status %d" %
                                      server.returncode, server_out)
    if client is None:
        return None, "server exited before the client ran"
    final = [line.strip() for line in client.stdout.splitlines()
             if line.strip()[:1].isdigit()]
    if client.returncode != 0 or not final:
        return None, describe_failure("client exited with status %d" %
                                      client.returncode,
                                      client.stdout + client.stderr)
    # iterations,50%ile_lat,avg_lat,overall_lat,avg_bw,overall_bw,... in
    # usec and MiB/s; a latency test's figures are for half a round trip
    fields = [float(f) for f in final[-1].split(",")[:8]]
    if int(fields[0]) != iters:
        return None, "client ran %d iterations instead of %d" % (fields[0],
                                                                 iters)
    if test in LATENCY_TESTS:
        latency = fields[1]
        bandwidth = size / latency / 1.048576 if latency > 0 else 0.0
        per_iter_us = 2 * fields[3]
    else:
        latency = fields[1]
        bandwidth = fields[5]
        per_iter_us = fields[3]
    return (latency, bandwidth, per_iter_us), None


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


def median(cell, latency_test):
    return statistics.median(f[0 if latency_test else 1] for f in cell.figures)


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
        return max(0.0, others / (wall * (os.cpu_count() or 1))) \
            if wall > 0 else 0.0


def print_table(args, tests, sizes, tls, cells, cpu_use):
    print("ucx_perftest %s, server and client on this host (%d CPUs), "
          "UCX_TLS=<transport>,\nmedian of %d runs; (x) = ratio to %s "
          "measured in the same run" %
          (ucx_version(args), os.cpu_count(), args.repeat, args.reference))
    share = cpu_use.others_share()
    print("other processes used %.0f%% of the CPUs during the runs%s" %
          (100 * share, ": the figures, bandwidth most, are noisy"
           if share > 0.1 else ""))
    width = max(16, max(len(tl) for tl in tls) + 2)
    failed = 0
    for test in tests:
        latency_test = test in LATENCY_TESTS
        print("\n%s: %s" % (test, "latency (usec), lower is better"
                            if latency_test else
                            "bandwidth (MiB/s), higher is better"))
        print("%-9s" % "size" + "".join("%*s" % (width, tl) for tl in tls))
        for size in sizes:
            ref = cells[(test, size, args.reference)]
            ref_value = median(ref, latency_test) if ref.figures else None
            row = "%-9s" % size_name(size)
            for tl in tls:
                cell = cells[(test, size, tl)]
                if cell.failures or not cell.figures:
                    row += "%*s" % (width, "failed")
                    failed += 1
                    continue
                value = median(cell, latency_test)
                text = ("%.3f" % value if latency_test and value < 100 else
                        "%.1f" % value if latency_test else "%.0f" % value)
                if ref_value and tl != args.reference:
                    text += " (%.2fx)" % (value / ref_value)
                row += "%*s" % (width, text)
            print(row)
    return failed


def ucx_version(args):
    try:
        out = subprocess.run(["ucx_info", "-v"], capture_output=True,
                             text=True, timeout=10).stdout
        for word in out.split():
            if word[:1].isdigit() and word.count(".") == 2:
                return word
    except (OSError, subprocess.SubprocessError):
        pass
    return "(version unknown)"


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", required=True, help="libuct_rc_tm.so")
    parser.add_argument("--baseline-module",
                        help="another libuct_rc_tm.so, measured as transport "
                             "rc_tm_base")
    parser.add_argument("--perftest", default="ucx_perftest")
    parser.add_argument("--tests", default="tag_lat,tag_bw,tag_sync_lat")
    parser.add_argument("--sizes",
                        default="8,64,512,4k,16k,64k,256k,1m,4m")
    parser.add_argument("--transports", default="rc_tm,posix,tcp")
    parser.add_argument("--reference", default="posix",
                        help="ratios are against this transport")
    parser.add_argument("--repeat", type=int, default=5,
                        help="repetitions; medians are reported")
    parser.add_argument("--budget", type=float, default=0.15,
                        help="seconds of traffic per measurement")
    parser.add_argument("--timeout", type=float, default=30,
                        help="seconds one server/client pair may take")
    parser.add_argument("--png", help="write a latency/bandwidth plot here")
    args = parser.parse_args()

    tests = args.tests.split(",")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    tls = args.transports.split(",")
    for tl in tls:
        if tl not in TRANSPORTS:
            parser.error("unknown transport %s (known: %s)" %
                         (tl, ", ".join(TRANSPORTS)))
    if args.reference not in tls:
        parser.error("the reference %s is not among the transports" %
                     args.reference)
    if not os.path.isfile(args.module):
        parser.error("module %s not found (build it first)" % args.module)
    if ("rc_tm_base" in tls) and not (args.baseline_module and
                                      os.path.isfile(args.baseline_module)):
        parser.error("transport rc_tm_base needs --baseline-module")

    sys.stderr.write("each run: UCX_TLS=<transport> LD_PRELOAD=%s\n"
                     "  server: %s -t <test> -s <size> -n <n> -w <n/10> "
                     "-p <port> -v\n  client: %s 127.0.0.1 <same>\n" %
                     (os.path.abspath(args.module), args.perftest,
                      args.perftest))
    cells = {(test, size, tl): Cell(test, size)
             for test in tests for size in sizes for tl in tls}
    progress = Progress(len(cells) * args.repeat)
    cpu_use = CpuUse()
    # Other load on the machine stretches every iteration of a busy-polling
    # pair (the two processes wait for each other's time slices): the
    # slowdown seen in the last run shrinks the next runs' iteration counts,
    # so the whole comparison still takes minutes.
    slowdown = 1.0
    for rep in range(args.repeat):
        for test in tests:
            for size in sizes:
                for tl in tls:
                    cell = cells[(test, size, tl)]
                    iters = cell.iterations(args.budget, slowdown)
                    progress.step("run %d/%d  %-12s %-8s %-6s n=%d" %
                                  (rep + 1, args.repeat, test,
                                   size_name(size), tl, iters))
                    figure, why = run_pair(args, test, size, tl, iters)
                    if why and why.startswith("timed out") and \
                            iters > MIN_ITERS:
                        iters = max(MIN_ITERS, iters // 20)
                        progress.note("%s %s over %s %s: again with n=%d" %
                                      (test, size_name(size), tl, why, iters))
                        figure, why = run_pair(args, test, size, tl, iters)
                    if figure is None:
                        cell.failures += 1
                        progress.note("FAILED: %s %s over %s: %s" %
                                      (test, size_name(size), tl, why))
                        continue
                    cell.figures.append(figure[:2])
                    slowdown = max(1.0, min(1000.0,
                                            cell.measured(figure[2])))
    progress.finish()

    failed = print_table(args, tests, sizes, tls, cells, cpu_use)
    if args.png:
        plot(args, tests, sizes, tls, cells)
        print("\nplot: %s" % os.path.abspath(args.png))
    if failed:
        print("\n%d of %d cells failed" % (failed, len(cells)))
    return 1 if failed else 0


def plot(args, tests, sizes, tls, cells):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plt.rcParams.update({"font.size": 11})
    fig, axes = plt.subplots(2, len(tests), figsize=(5.2 * len(tests), 7.6),
                             sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    styles = {"rc_tm": ("tab:red", "o", "-"),
              "rc_tm_base": ("tab:orange", "v", ":"),
              "posix": ("tab:blue", "s", "--"),
              "tcp": ("tab:gray", "^", ":")}
    for col, test in enumerate(tests):
        latency_test = test in LATENCY_TESTS
        top, bottom = axes[0][col], axes[1][col]
        for tl in tls:
            color, marker, line = styles.get(tl, (None, "x", "-"))
            xs, ys, ratios = [], [], []
            for size in sizes:
                cell = cells[(test, size, tl)]
                ref = cells[(test, size, args.reference)]
                if not cell.figures:
                    continue
                xs.append(size)
                ys.append(median(cell, latency_test))
                ratios.append(ys[-1] / median(ref, latency_test)
                              if ref.figures else float("nan"))
            top.plot(xs, ys, color=color, marker=marker, linestyle=line,
                     linewidth=2, label=tl)
            bottom.plot(xs, ratios, color=color, marker=marker,
                        linestyle=line, linewidth=2, label=tl)
        top.set_yscale("log")
        top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
        top.set_title("%s: %s" % (test, "latency, lower is better"
                                  if latency_test else
                                  "bandwidth, higher is better"))
        top.set_ylabel("latency (usec)" if latency_test else
                       "bandwidth (MiB/s)")
        bottom.set_yscale("log", base=2)
        bottom.yaxis.set_major_formatter(FuncFormatter(ratio_label))
        bottom.axhline(1.0, color="black", linewidth=0.8)
        bottom.set_ylabel("ratio to %s" % args.reference)
        bottom.set_xlabel("message size")
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(sizes)
        bottom.set_xticklabels([short_size_name(s) for s in sizes])
        bottom.minorticks_off()
        for ax in (top, bottom):
            ax.grid(True, which="major", alpha=0.35)
        top.legend(loc="upper left" if latency_test else "lower right")
    fig.suptitle("ucx_perftest %s, server and client on one host: rc_tm "
                 "(software TM-SRQ) vs UCX posix and tcp; medians of %d runs"
                 % (ucx_version(args), args.repeat))
    fig.tight_layout()
    fig.savefig(args.png, dpi=90)
    try:
        # a few solid colours: a palette of 64 keeps the file small
        from PIL import Image
        with Image.open(args.png) as image:
            small = image.convert("RGB").quantize(colors=64)
        small.save(args.png, optimize=True)
    except ImportError:
        pass


if __name__ == "__main__":
    sys.exit(main())
