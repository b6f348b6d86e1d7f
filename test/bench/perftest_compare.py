#!/usr/bin/env python3
"""Side-by-side ucx_perftest over rc_tm and UCX's own transports.

Runs Debian's stock ucx_perftest (server and client, two processes on this
host) for each test, message size and transport, interleaving transports
within every repetition so they share the machine's noise (each repetition,
and each round of the MPI benchmarks, starts with the next transport of the
list, so none always runs first), and prints the
median of each figure with its ratio to the reference transport measured in
the same run: sm by default, what UCX picks on one host when no transport is
named (shared memory, sysv or posix as UCP chooses, with cma single-copy
rendezvous).  Optionally
writes a latency/bandwidth plot (PNG).

With --deep-queue (the build's test/bench/ucp_deep_queue) it then measures
deep posted receive queues through UCP (rc_tm, sm and posix by default, 1k,
16k and 64k receives): a second table, with each transport's ratio to every
one listed after it, and a panel of its own in the plot.

With --overlap (the build's test/bench/mpi_overlap) it measures how much
of one message's transfer overlaps computation on the receiver, through
Open MPI's pml ucx (mpirun -np 2): rc_tm with its software NIC's engine
thread and inline, sm and posix by default, at 8 B, 64 KiB, 1 MiB and 4 MiB;
a table and a panel of its own.  A build of rc_tm without the engine thread
(no UCX_RC_TM_SOFT_PROGRESS in its configuration) prints "thread mode not
available in this build" for rc_tm_thread and runs rc_tm_inline without the
variable (inline is then its only mode).

With --peers (the build's test/bench/mpi_many_peers) it measures the
latency between two ranks while the other ranks of the job, connected to
both, stay idle (mpirun -np 2 and 34 by default, rc_tm and sm): what a
poll costs with many peers; a table.

With --halo (the build's test/bench/mpi_halo) it measures a halo exchange,
the time step of a stencil code, through Open MPI's pml ucx: every rank of a
ring exchanges a halo with both neighbours (nonblocking) around a little
computation, timed per step (mpirun -np 2 and 4, 1 KiB to 256 KiB, rc_tm,
posix and sm by default, interleaved); a table with the ratios to sm.

With --line-pingpong (the build's test/bench/line_pingpong) the header also
says what one cache line costs between two CPUs of this host (its round
trip): how much the CPU charges for what a message must move between the
two processes, which decides how much of a latency is the line and how much
the transports' instructions.

Every cell must succeed: a failed or timed-out run is reported with its
output, its cell prints "failed", and the exit status is 1.

    perftest_compare.py --module build/src/uct/rc_tm/.libs/libuct_rc_tm.so \\
                        --deep-queue build/test/bench/ucp_deep_queue \\
                        --overlap build/test/bench/mpi_overlap \\
                        --peers build/test/bench/mpi_many_peers \\
                        --halo build/test/bench/mpi_halo \\
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

from perftest_common import (CpuUse, Progress, count_name, cpu_model,
                             describe_failure, nproc, parse_size, ratio_label,
                             rotated, run_reporting, short_size_name,
                             size_name)
from perftest_mpi import Halo, ManyPeers, OVERLAP_TRANSPORTS, Overlap

# UCX_TLS for each transport: only that transport may carry the traffic.
# rc_tm_base is rc_tm loaded from --baseline-module (another build of the
# module, e.g. the previous release), measured in the same run.  sm is UCX
# 1.13's alias for its shared-memory transports (posix, sysv, xpmem, knem,
# cma: those this host has), UCX's choice between two processes of one host;
# posix alone copies rendezvous data through its FIFO too.
# rc_verbs is UCX's own rc_verbs (with ud_verbs for wireup: UCX's alias
# rc_v) on the same software NIC as rc_tm, reached through the test
# interposer (--interposer) where test/softnic_dev_node.sh provides the
# device node UCX's ib md looks for: tags matched by UCP's software over
# the device that matches them for rc_tm.
TRANSPORTS = {
    "rc_tm":      "rc_tm",
    "rc_tm_base": "rc_tm",
    "rc_verbs":   "rc_v",
    "sm":         "sm",
    "posix":      "posix",
    "tcp":        "tcp",
}

LATENCY_TESTS = ("tag_lat", "tag_sync_lat", "am_lat", "put_lat", "get_lat",
                 "ucp_put_lat", "stream_lat", "ucp_am_lat")

MIN_ITERS = 50
MAX_ITERS = 100000


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
    if tl == "rc_verbs":
        env["LD_PRELOAD"] = os.path.abspath(args.interposer)
    else:
        env["LD_PRELOAD"] = os.path.abspath(
            args.baseline_module if tl == "rc_tm_base" else args.module)
    return env


def perftest_command(args, tl):
    """ucx_perftest, for rc_verbs where the device node exists."""
    if tl == "rc_verbs":
        return ["sh", DEV_NODE, args.perftest]
    return [args.perftest]


DEV_NODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "softnic_dev_node.sh")


def perftest_has_mpi_mode(perftest):
    """Whether ucx_perftest was built with MPI (Debian 13's is, Debian 12's
    not): then, its stdin not a terminal, it calls MPI_Init and runs as an
    MPI job of one rank unless told -P 0, and refuses a server/client pair
    ("exactly 2 processes in p2p case").  Without MPI, -P is not an option."""
    try:
        out = subprocess.run([perftest, "-h"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "MPI mode" in (out.stdout + out.stderr)


def perftest_args(args, test, size, iters, port):
    return (["-t", test, "-s", str(size), "-n", str(iters),
             "-w", str(max(10, iters // 10)), "-p", str(port)] +
            (["-P", "0"] if args.perftest_mpi_mode else []))


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
    pin = (lambda cpu: ["taskset", "-c", str(cpu)]) if args.pin else \
        (lambda cpu: [])
    server = subprocess.Popen(pin(0) + perftest_command(args, tl) + common,
                              env=env,
                              stdout=server_log, stderr=subprocess.STDOUT)
    client = None
    try:
        while not listening(port):
            if server.poll() is not None or time.time() > deadline:
                break
            time.sleep(0.01)
        while server.poll() is None:
            left = max(1.0, deadline - time.time())
            client = subprocess.run(pin(1) + perftest_command(args, tl) +
                                    ["127.0.0.1"] + common,
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


def median(cell, latency_test):
    return statistics.median(f[0 if latency_test else 1] for f in cell.figures)


def line_round_trip(program):
    """line_pingpong's line ("... round trip X ns"), or why not"""
    if os.cpu_count() < 2:
        return "one CPU: no line between two"
    try:
        out = subprocess.run([program], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        return "%s failed: %s" % (program, err)
    line = out.stdout.strip().splitlines()[-1:] if out.returncode == 0 \
        else []
    if not line or "round trip" not in line[0]:
        return "%s failed:\n%s" % (program, out.stdout + out.stderr)
    return line[0].replace("line_pingpong: ", "")


def print_table(args, tests, sizes, tls, cells, cpu_use, line=None):
    if tests:
        print("ucx_perftest %s, server and client on this host (%d CPUs, "
              "%s), UCX_TLS=<transport>,\nmedian of %d runs; (x) = ratio "
              "to %s measured in the same run" %
              (ucx_version(args), os.cpu_count(), cpu_model(), args.repeat,
               args.reference))
    if line:
        # on a virtual machine it moves when the host moves its CPUs (50
        # and 300 ns round trips on this project's machines, hours apart)
        print("one cache line between two CPUs of this host (test/bench/"
              "line_pingpong), before and after the runs:\n  %s\n  %s" %
              line)
    share = cpu_use.others_share()
    print("other processes used %.0f%% of the CPUs during the runs%s" %
          (100 * share, ": the figures, bandwidth most, are noisy"
           if share > 0.1 else ""))
    failed = 0
    for test in tests:
        latency_test = test in LATENCY_TESTS
        print("\n%s: %s" % (test, "latency (usec), lower is better"
                            if latency_test else
                            "bandwidth (MiB/s), higher is better"))
        rows = []
        for size in sizes:
            ref = cells[(test, size, args.reference)]
            ref_value = median(ref, latency_test) if ref.figures else None
            row = []
            for tl in tls:
                cell = cells[(test, size, tl)]
                if cell.failures or not cell.figures:
                    row.append("failed")
                    failed += 1
                    continue
                value = median(cell, latency_test)
                text = ("%.3f" % value if latency_test and value < 100 else
                        "%.1f" % value if latency_test else "%.0f" % value)
                if ref_value and tl != args.reference:
                    text += " (%.2fx)" % (value / ref_value)
                row.append(text)
            rows.append((size_name(size), row))
        # columns at least two spaces apart, however wide a figure is
        width = max(16, max(len(text) + 2 for text in
                            tls + [t for _, row in rows for t in row]))
        print("%-9s" % "size" + "".join("%*s" % (width, tl) for tl in tls))
        for name, row in rows:
            print("%-9s" % name + "".join("%*s" % (width, t) for t in row))
    return failed


class DeepQueue:
    """ucp_deep_queue's run: N receives posted, N messages sent in reverse
    tag order, ns per message; the transports interleaved in every
    repetition, within one pair of processes that keeps its UCP contexts."""

    def __init__(self, args):
        self.depths = [parse_size(d) for d in args.deep_depths.split(",")]
        self.tls = args.deep_transports.split(",")
        self.repeat = args.deep_repeat
        self.size = args.deep_size
        self.figures = {}   # (depth, tl): [ns per message]
        self.failure = None
        self.command = [args.deep_queue, "-R",
                        "-n", ",".join(str(d) for d in self.depths),
                        "-t", ",".join(TRANSPORTS[tl] for tl in self.tls),
                        "-s", str(self.size), "-r", str(self.repeat)]
        self.timeout = args.deep_timeout
        self.reference = (args.reference if args.reference in self.tls
                          else self.tls[-1])

    def steps(self):
        return len(self.depths) * len(self.tls) * self.repeat

    def run(self, progress):
        """Runs the program, a progress step per measurement (its stderr
        lines); on failure, says why in self.failure."""
        progress.note("deep queues: %s" % " ".join(self.command))
        try:
            returncode, out, other, timed_out = run_reporting(
                self.command, self.timeout,
                lambda rep: progress.step("deep queue " + rep))
        except OSError as err:
            self.failure = "%s: %s" % (self.command[0], err)
            return
        if returncode != 0:
            self.failure = ("timed out after %g s" % self.timeout
                            if timed_out else
                            describe_failure("%s exited with status %d" %
                                             (self.command[0], returncode),
                                             other))
            return
        names = {TRANSPORTS[tl]: tl for tl in self.tls}
        for line in out.splitlines():
            fields = line.split(",")
            if len(fields) == 4 and fields[1] in names:
                self.figures.setdefault((int(fields[0]), names[fields[1]]),
                                        []).append(float(fields[3]))
        for depth in self.depths:
            for tl in self.tls:
                if len(self.figures.get((depth, tl), ())) != self.repeat:
                    self.failure = "no figures for %s at %s receives:\n    %s" \
                        % (tl, count_name(depth), out.strip() or "(no output)")
                    return

    def median(self, depth, tl):
        return statistics.median(self.figures[(depth, tl)])

    def print_table(self):
        """Medians, then each transport's ratio to every one after it."""
        print("\ndeep receive queues (ucp_deep_queue): N receives posted, N "
              "%s messages sent\nin reverse tag order; ns per message, lower "
              "is better; median of %d runs" %
              (size_name(self.size), self.repeat))
        if self.failure:
            print("failed: %s" % self.failure)
            return 1
        pairs = [(a, b) for i, a in enumerate(self.tls)
                 for b in self.tls[i + 1:]]
        names = self.tls + ["%s/%s" % pair for pair in pairs]
        width = max(10, max(len(name) for name in names) + 2)
        print("%-9s" % "receives" + "".join("%*s" % (width, name)
                                             for name in names))
        for depth in self.depths:
            row = "%-9s" % count_name(depth)
            row += "".join("%*.0f" % (width, self.median(depth, tl))
                           for tl in self.tls)
            row += "".join("%*s" % (width, "%.2fx" % (
                self.median(depth, a) / self.median(depth, b)))
                for a, b in pairs)
            print(row)
        return 0


def ucx_version(args):
    # The UCX of the ucx_perftest run: the ucx_info beside it, when there
    # is one (--perftest of another install), else the one in PATH
    info = os.path.join(os.path.dirname(args.perftest), "ucx_info")
    if not (os.path.dirname(args.perftest) and os.path.isfile(info)):
        info = "ucx_info"
    try:
        out = subprocess.run([info, "-v"], capture_output=True,
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
    parser.add_argument("--transports",
                        default="rc_tm,rc_verbs,sm,posix,tcp")
    parser.add_argument("--interposer",
                        help="the build's test/interpose/.libs/"
                             "libsoftnic_verbs.so, for transport rc_verbs")
    parser.add_argument("--reference", default="sm",
                        help="ratios are against this transport")
    parser.add_argument("--repeat", type=int, default=5,
                        help="repetitions; medians are reported")
    parser.add_argument("--budget", type=float, default=0.15,
                        help="seconds of traffic per measurement")
    parser.add_argument("--timeout", type=float, default=30,
                        help="seconds one server/client pair may take")
    parser.add_argument("--pin", action="store_true",
                        help="bind the ucx_perftest server to CPU 0 and the "
                             "client to CPU 1 (taskset): where other "
                             "processes run, a pair that shares a CPU "
                             "measures the scheduler; run the script with "
                             "nice -n -20 too")
    parser.add_argument("--png", help="write a latency/bandwidth plot here")
    parser.add_argument("--deep-queue", metavar="PROGRAM",
                        help="the build's test/bench/ucp_deep_queue (it "
                             "links its own build's module): adds deep "
                             "receive queues")
    parser.add_argument("--deep-depths", default="1k,16k,64k",
                        help="numbers of posted receives")
    parser.add_argument("--deep-transports", default="rc_tm,sm,posix")
    parser.add_argument("--deep-repeat", type=int, default=9,
                        help="deep queue repetitions; medians are reported")
    parser.add_argument("--deep-size", type=int, default=1024,
                        help="deep queue message size")
    parser.add_argument("--deep-timeout", type=float, default=600,
                        help="seconds the deep queue run may take")
    parser.add_argument("--overlap", metavar="PROGRAM",
                        help="the build's test/bench/mpi_overlap: adds the "
                             "overlap of a message with computation (Open "
                             "MPI, pml ucx)")
    parser.add_argument("--overlap-transports",
                        default="rc_tm_thread,rc_tm_inline,sm,posix",
                        help="of %s" % ", ".join(OVERLAP_TRANSPORTS))
    parser.add_argument("--overlap-sizes", default="8,64k,1m,4m")
    parser.add_argument("--overlap-runs", type=int, default=3,
                        help="mpirun runs per transport, interleaved")
    parser.add_argument("--overlap-repeat", type=int, default=5,
                        help="repetitions within a run (at least 5); "
                             "medians over all runs' repetitions")
    parser.add_argument("--overlap-floor", type=float, default=10,
                        help="least compute time (us)")
    parser.add_argument("--overlap-timeout", type=float, default=300,
                        help="seconds one mpirun may take")
    parser.add_argument("--peers", metavar="PROGRAM",
                        help="the build's test/bench/mpi_many_peers: adds "
                             "latency with many idle peers (Open MPI, pml "
                             "ucx)")
    parser.add_argument("--peers-ranks", default="2,34",
                        help="job sizes (ranks 2.. stay idle)")
    parser.add_argument("--peers-transports", default="rc_tm,sm",
                        help="UCX_TLS values (rc_tm_base as for --halo-"
                             "transports); ratios to the last one")
    parser.add_argument("--peers-size", type=int, default=8)
    parser.add_argument("--peers-runs", type=int, default=3,
                        help="mpirun runs per job size and transport")
    parser.add_argument("--peers-repeat", type=int, default=5,
                        help="repetitions within a run")
    parser.add_argument("--peers-timeout", type=float, default=120,
                        help="seconds one mpirun may take")
    parser.add_argument("--halo", metavar="PROGRAM",
                        help="the build's test/bench/mpi_halo: adds a halo "
                             "exchange between 2 and 4 ranks (Open MPI, pml "
                             "ucx)")
    parser.add_argument("--halo-ranks", default="2,4", help="job sizes")
    parser.add_argument("--halo-transports", default="rc_tm,posix,sm",
                        help="UCX_TLS values (rc_tm_base: rc_tm from "
                             "--baseline-module)")
    parser.add_argument("--halo-reference", default="sm",
                        help="ratios are against this one")
    parser.add_argument("--halo-sizes", default="1k,4k,16k,64k,256k")
    parser.add_argument("--halo-cells", type=int, default=4096,
                        help="interior cells each rank updates a step")
    parser.add_argument("--halo-runs", type=int, default=3,
                        help="mpirun runs per job size and transport")
    parser.add_argument("--halo-repeat", type=int, default=5,
                        help="repetitions within a run")
    parser.add_argument("--halo-timeout", type=float, default=300,
                        help="seconds one mpirun may take")
    parser.add_argument("--line-pingpong", metavar="PROGRAM",
                        help="the build's test/bench/line_pingpong: the "
                             "header says what a cache line costs between "
                             "two CPUs")
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    args.perftest_mpi_mode = perftest_has_mpi_mode(args.perftest)

    tests = [test for test in args.tests.split(",") if test]
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
    if ("rc_verbs" in tls) and not (args.interposer and
                                    os.path.isfile(args.interposer)):
        parser.error("transport rc_verbs needs --interposer (the build's "
                     "test/interpose/.libs/libsoftnic_verbs.so)")
    mpi_tls = ((args.halo_transports.split(",") if args.halo else []) +
               (args.peers_transports.split(",") if args.peers else []))
    if ("rc_tm_base" in tls + mpi_tls) and \
            not (args.baseline_module and
                 os.path.isfile(args.baseline_module)):
        parser.error("transport rc_tm_base needs --baseline-module")
    deep = None
    if args.deep_queue:
        for tl in args.deep_transports.split(","):
            if tl not in TRANSPORTS or tl == "rc_tm_base":
                parser.error("unknown deep queue transport %s" % tl)
        if not os.access(args.deep_queue, os.X_OK):
            parser.error("%s not found (build it: make test/bench/"
                         "ucp_deep_queue)" % args.deep_queue)
        if args.deep_repeat < 1:
            parser.error("--deep-repeat must be at least 1")
        deep = DeepQueue(args)
    overlap = None
    if args.overlap:
        for tl in args.overlap_transports.split(","):
            if tl not in OVERLAP_TRANSPORTS:
                parser.error("unknown overlap transport %s (known: %s)" %
                             (tl, ", ".join(OVERLAP_TRANSPORTS)))
        if not os.access(args.overlap, os.X_OK):
            parser.error("%s not found (build it: make test/bench/"
                         "mpi_overlap)" % args.overlap)
        if args.overlap_runs < 1 or args.overlap_repeat < 5:
            parser.error("--overlap-runs must be at least 1, "
                         "--overlap-repeat at least 5")
        overlap = Overlap(args)
    peers = None
    if args.peers:
        if not os.access(args.peers, os.X_OK):
            parser.error("%s is not executable (the build's "
                         "mpi_many_peers)" % args.peers)
        try:
            ranks = [int(n) for n in args.peers_ranks.split(",")]
        except ValueError:
            ranks = []
        if not ranks or min(ranks) < 2 or args.peers_runs < 1 or \
                not 1 <= args.peers_repeat <= 64:
            parser.error("--peers-ranks must list job sizes of 2 or more, "
                         "--peers-runs be at least 1 and --peers-repeat "
                         "1 to 64")
        peers = ManyPeers(args)
    halo = None
    if args.halo:
        if not os.access(args.halo, os.X_OK):
            parser.error("%s is not executable (the build's mpi_halo)" %
                         args.halo)
        try:
            ranks = [int(n) for n in args.halo_ranks.split(",")]
            halo_sizes = [parse_size(s) for s in args.halo_sizes.split(",")]
        except ValueError:
            ranks, halo_sizes = [], []
        if not ranks or min(ranks) < 2 or not halo_sizes or \
                min(halo_sizes) < 1 or args.halo_runs < 1 or \
                args.halo_repeat < 1 or args.halo_cells < 3 or \
                args.halo_reference not in args.halo_transports.split(","):
            parser.error("--halo-ranks must list job sizes of 2 or more, "
                         "--halo-sizes sizes, --halo-runs and --halo-repeat "
                         "be at least 1, --halo-cells at least 3, and "
                         "--halo-reference one of --halo-transports")
        halo = Halo(args)

    sys.stderr.write("each run: UCX_TLS=<transport> LD_PRELOAD=%s\n"
                     "  server: %s -t <test> -s <size> -n <n> -w <n/10> "
                     "-p <port> -v\n  client: %s 127.0.0.1 <same>\n" %
                     (os.path.abspath(args.module), args.perftest,
                      args.perftest))
    cells = {(test, size, tl): Cell(test, size)
             for test in tests for size in sizes for tl in tls}
    progress = Progress(len(cells) * args.repeat +
                        (deep.steps() if deep else 0) +
                        (overlap.steps() if overlap else 0) +
                        (peers.steps() if peers else 0) +
                        (halo.steps() if halo else 0))
    line = line_round_trip(args.line_pingpong) if args.line_pingpong \
        else None
    cpu_use = CpuUse()
    # Other load on the machine stretches every iteration of a busy-polling
    # pair (the two processes wait for each other's time slices): the
    # slowdown seen in the last run shrinks the next runs' iteration counts,
    # so the whole comparison still takes minutes.
    slowdown = 1.0
    for rep in range(args.repeat):
        for test in tests:
            for size in sizes:
                for tl in rotated(tls, rep):
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
    if deep:
        deep.run(progress)
        if deep.failure:
            progress.note("FAILED: deep queues: %s" % deep.failure)
    if overlap:
        overlap.run(progress)
    if peers:
        peers.run(progress)
    if halo:
        halo.run(progress)
    progress.finish()

    if line:
        line = (line, line_round_trip(args.line_pingpong))
    failed = print_table(args, tests, sizes, tls, cells, cpu_use, line)
    deep_failed = deep.print_table() if deep else 0
    overlap_failed = overlap.print_table() if overlap else 0
    peers_failed = peers.print_table() if peers else 0
    halo_failed = halo.print_table() if halo else 0
    if args.png:
        plot(args, tests, sizes, tls, cells, deep, overlap)
        print("\nplot: %s" % os.path.abspath(args.png))
    if failed:
        print("\n%d of %d cells failed" % (failed, len(cells)))
    if deep_failed:
        print("\nthe deep queue run failed")
    if overlap_failed:
        print("\nthe overlap runs failed over %d transport%s" %
              (overlap_failed, "s" if overlap_failed > 1 else ""))
    if peers_failed:
        print("\nthe many-peers runs failed in %d cell%s" %
              (peers_failed, "s" if peers_failed > 1 else ""))
    if halo_failed:
        print("\nthe halo runs failed in %d cell%s" %
              (halo_failed, "s" if halo_failed > 1 else ""))
    return 1 if failed or deep_failed or overlap_failed or peers_failed \
        or halo_failed else 0


PLOT_STYLES = {"rc_tm": ("tab:red", "o", "-"),
               "rc_tm_base": ("tab:orange", "v", ":"),
               "rc_verbs": ("tab:purple", "P", "-."),
               "sm": ("tab:green", "D", "-"),
               "posix": ("tab:blue", "s", "--"),
               "tcp": ("tab:gray", "^", ":")}


def plot_line(top, bottom, tl, xs, ys, ratios):
    color, marker, line = PLOT_STYLES.get(tl, (None, "x", "-"))
    for ax, values in ((top, ys), (bottom, ratios)):
        ax.plot(xs, values, color=color, marker=marker, linestyle=line,
                linewidth=2, label=tl)


def style_axes(top, bottom, xs, xnames, reference):
    from matplotlib.ticker import FuncFormatter
    top.set_yscale("log")
    top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    bottom.set_yscale("log", base=2)
    bottom.yaxis.set_major_formatter(FuncFormatter(ratio_label))
    bottom.axhline(1.0, color="black", linewidth=0.8)
    bottom.set_ylabel("ratio to %s" % reference)
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(xs)
    bottom.set_xticklabels(xnames)
    bottom.minorticks_off()
    for ax in (top, bottom):
        ax.grid(True, which="major", alpha=0.35)


def plot(args, tests, sizes, tls, cells, deep=None, overlap=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deep_shown = deep is not None and not deep.failure
    overlap_tls = [tl for tl in overlap.tls if overlap.shown(tl)] \
        if overlap else []
    columns = len(tests) + (1 if deep_shown else 0) + \
        (1 if overlap_tls else 0)
    if not columns:
        return
    plt.rcParams.update({"font.size": 11})
    fig, axes = plt.subplots(2, columns, figsize=(5.2 * columns, 7.8),
                             sharex="col", squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for col, test in enumerate(tests):
        latency_test = test in LATENCY_TESTS
        top, bottom = axes[0][col], axes[1][col]
        for tl in tls:
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
            plot_line(top, bottom, tl, xs, ys, ratios)
        style_axes(top, bottom, sizes, [short_size_name(s) for s in sizes],
                   args.reference)
        top.set_title("%s: %s" % (test, "latency, lower is better"
                                  if latency_test else
                                  "bandwidth, higher is better"))
        top.set_ylabel("latency (usec)" if latency_test else
                       "bandwidth (MiB/s)")
        bottom.set_xlabel("message size")
        top.legend(loc="upper left" if latency_test else "lower right")
    if deep_shown:
        top, bottom = axes[0][len(tests)], axes[1][len(tests)]
        for tl in deep.tls:
            ys = [deep.median(d, tl) for d in deep.depths]
            plot_line(top, bottom, tl, deep.depths, ys,
                      [y / deep.median(d, deep.reference)
                       for y, d in zip(ys, deep.depths)])
        style_axes(top, bottom, deep.depths,
                   [count_name(d) for d in deep.depths], deep.reference)
        # 1-2-5 steps: the figures may span less than a decade
        values = [deep.median(d, tl) for d in deep.depths for tl in deep.tls]
        top.set_yticks([m * 10 ** e for e in range(1, 7) for m in (1, 2, 5)
                        if min(values) / 2 <= m * 10 ** e <= max(values) * 2])
        top.minorticks_off()
        top.set_title("deep receive queue, %s messages:\n"
                      "ns per message, lower is better" %
                      size_name(deep.size))
        top.set_ylabel("ns per message")
        bottom.set_xlabel("receives posted")
        top.legend(loc="upper left")
    if overlap_tls:
        plot_overlap(axes[0][-1], axes[1][-1], overlap, overlap_tls)
    lines = []
    if tests:
        lines.append("ucx_perftest %s, server and client on one host: rc_tm "
                     "(software TM-SRQ) vs UCX %s; medians of %d runs" %
                     (ucx_version(args),
                      transport_list([t for t in tls if t != "rc_tm"]),
                      args.repeat))
    if deep_shown:
        lines.append("deep receive queues: ucp_deep_queue, medians of %d runs"
                     % deep.repeat)
    if overlap_tls:
        lines.append("overlap: mpi_overlap under Open MPI (pml ucx), 2 ranks "
                     "on %d CPUs, medians of %d" %
                     (nproc(), overlap.runs * overlap.repeat))
    import textwrap
    fig.suptitle("\n".join(textwrap.fill(line, 45 * columns)
                           for line in lines))
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


def plot_overlap(top, bottom, overlap, tls):
    """Overlap (%) on top, the transfer alone (us) below, against size"""
    from matplotlib.ticker import FuncFormatter
    styles = {"rc_tm_thread": ("tab:red", "o", "-"),
              "rc_tm_inline": ("tab:purple", "v", "--")}
    xs = overlap.sizes
    for tl in tls:
        color, marker, line = styles.get(tl) or PLOT_STYLES.get(
            tl, (None, "x", "-"))
        figures = [overlap.medians(tl, size) for size in xs]
        top.plot(xs, [100 * min(1.0, max(0.0, f[3])) for f in figures],
                 color=color, marker=marker, linestyle=line, linewidth=2,
                 label=tl)
        bottom.plot(xs, [f[0] for f in figures], color=color, marker=marker,
                    linestyle=line, linewidth=2, label=tl)
    for tl in overlap.tls:
        if tl in overlap.unavailable:
            top.plot([], [], " ", label="%s: not available" % tl)
    top.set_ylim(-5, 105)
    top.set_ylabel("overlap (%)")
    top.set_title("overlap with computation (MPI):\n"
                  "higher is better")
    top.legend(loc="upper right", fontsize=9)
    bottom.set_yscale("log")
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    bottom.set_ylabel("transfer alone (usec)")
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(xs)
    bottom.set_xticklabels([short_size_name(size) for size in xs])
    bottom.minorticks_off()
    bottom.set_xlabel("message size")
    for ax in (top, bottom):
        ax.grid(True, which="major", alpha=0.35)


def transport_list(names):
    """'sm, posix and tcp'"""
    return (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1
            else "".join(names))


if __name__ == "__main__":
    sys.exit(main())
