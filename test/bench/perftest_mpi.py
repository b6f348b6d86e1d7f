"""The MPI benchmarks of perftest_compare.py, under Open MPI's mpirun with
pml ucx: the overlap of a message with computation (test/bench/mpi_overlap),
latency with many idle peers (test/bench/mpi_many_peers) and a halo
exchange (test/bench/mpi_halo)."""

import os
import statistics
import subprocess
import textwrap

from perftest_common import (CpuUse, describe_failure, nproc, parse_size,
                             rotated, run_reporting, size_name, time_text)


def mpirun_command(mpirun, module, ucx_tls, ranks, extra_env=()):
    """mpirun of ranks processes of this host over pml ucx with one
    transport (UCX_TLS), the module preloaded: as test/mpi runs them"""
    cmd = [mpirun, "--mca", "pml", "ucx",
           "--mca", "pml_ucx_tls", "any",
           "--mca", "pml_ucx_devices", "any",
           "--mca", "btl", "self", "--mca", "mpi_yield_when_idle", "1",
           "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["-x", "LD_PRELOAD=" + module, "-x", "UCX_TLS=" + ucx_tls]
    for var in extra_env:
        cmd += ["-x", var]
    return cmd + ["-np", str(ranks)]


def module_and_tls(tl, module, baseline):
    """The module to preload and UCX_TLS for transport tl: rc_tm_base is
    rc_tm from the baseline module, as in the perftest runs"""
    if tl == "rc_tm_base":
        return os.path.abspath(baseline), "rc_tm"
    return module, tl


def mpirun_failure(returncode, timed_out, timeout, text):
    """Why an mpirun that ended with returncode failed, or None"""
    if returncode == 0:
        return None
    return ("timed out after %g s" % timeout if timed_out else
            describe_failure("mpirun exited with status %d" % returncode,
                             text))


# The overlap benchmark's transports: UCX_TLS, and the software NIC's
# progress mode (UCX_RC_TM_SOFT_PROGRESS) where rc_tm has one.  sm under
# Open MPI's pml ucx on one host: sysv shared memory for eager messages,
# cma's single copy for rendezvous; posix alone copies everything through
# its FIFO.
OVERLAP_TRANSPORTS = {
    "rc_tm_thread": ("rc_tm", "thread"),
    "rc_tm_inline": ("rc_tm", "inline"),
    "sm":           ("sm", None),
    "posix":        ("posix", None),
    "tcp":          ("tcp", None),
}


SOFT_PROGRESS = "UCX_RC_TM_SOFT_PROGRESS"


NOT_AVAILABLE = "thread mode not available in this build"


def soft_progress_known(module):
    """Whether the module's UCX configuration has UCX_RC_TM_SOFT_PROGRESS
    (the software NIC's engine thread); None when ucx_info could not say."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = os.path.abspath(module)
    try:
        out = subprocess.run(["ucx_info", "-c"], env=env, capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return any(line.startswith(SOFT_PROGRESS + "=")
               for line in out.stdout.splitlines())


class Overlap:
    """mpi_overlap under mpirun -np 2 (pml ucx), once per transport in each
    of --overlap-runs rounds, transports interleaved; each run measures
    --overlap-repeat batches per size.  Figures: transfer alone, compute
    alone, transfer overlapped with compute (us), per repetition."""

    def __init__(self, args):
        self.program = os.path.abspath(args.overlap)
        self.module = os.path.abspath(args.module)
        self.tls = args.overlap_transports.split(",")
        self.sizes = [parse_size(s) for s in args.overlap_sizes.split(",")]
        self.runs = args.overlap_runs
        self.repeat = args.overlap_repeat
        self.floor = args.overlap_floor
        self.timeout = args.overlap_timeout
        self.mpirun = args.mpirun
        self.figures = {}       # (tl, size): [(transfer, compute, total)]
        self.failures = {}      # tl: why (the first failed run)
        self.unavailable = {}   # tl: why it was not run
        self.notes = []
        self.others = None      # other processes' share of the CPUs
        self.soft_progress = True
        known = soft_progress_known(args.module)
        if not known:
            self.no_soft_progress("no %s in ucx_info -c with the module" %
                                  SOFT_PROGRESS if known is False else
                                  "ucx_info -c with the module failed")

    def no_soft_progress(self, why):
        """This build has no engine thread: thread mode is not run, inline
        runs without the variable (the software NIC's only mode)."""
        self.soft_progress = False
        for tl in self.tls:
            if OVERLAP_TRANSPORTS[tl][1] == "thread":
                self.unavailable[tl] = why
        if any(OVERLAP_TRANSPORTS[tl][1] == "inline" for tl in self.tls):
            self.notes.append("rc_tm_inline: %s unset (%s):\nthe software "
                              "NIC progresses inline, its only mode" %
                              (SOFT_PROGRESS, why))

    def run_tls(self):
        return [tl for tl in self.tls if tl not in self.unavailable]

    def steps(self):
        return len(self.run_tls()) * self.runs * len(self.sizes) * \
            self.repeat

    def command(self, tl):
        ucx_tls, mode = OVERLAP_TRANSPORTS[tl]
        env = ["%s=%s" % (SOFT_PROGRESS, mode)] \
            if mode and self.soft_progress else []
        cmd = mpirun_command(self.mpirun, self.module, ucx_tls, 2, env)
        cmd += [self.program, "-R", "-r", str(self.repeat),
                "-f", "%g" % self.floor,
                "-s", ",".join(str(size) for size in self.sizes)]
        return cmd

    def run(self, progress):
        example = self.command(self.run_tls()[0] if self.run_tls()
                               else self.tls[0])
        progress.note("overlap: %s (per transport UCX_TLS and %s)" %
                      (" ".join(example), SOFT_PROGRESS))
        for note in self.notes:
            progress.note(note)
        for tl, why in self.unavailable.items():
            progress.note("%s: %s (%s)" % (tl, NOT_AVAILABLE, why))
        cpu_use = CpuUse()
        for run in range(self.runs):
            for tl in rotated(self.run_tls(), run):
                if tl in self.failures or tl in self.unavailable:
                    continue
                why = self.run_one(tl, run, progress)
                if why:
                    self.failures[tl] = why
                    progress.note("FAILED: overlap over %s: %s" % (tl, why))
        self.others = cpu_use.others_share()

    def run_one(self, tl, run, progress):
        """One mpirun; returns why it failed, or None."""
        try:
            returncode, out, other, timed_out = run_reporting(
                self.command(tl), self.timeout,
                lambda rep: progress.step("overlap run %d/%d  %-12s %s" %
                                          (run + 1, self.runs, tl, rep)),
                stdin=subprocess.DEVNULL)
        except OSError as err:
            return "%s: %s" % (self.mpirun, err)
        text = out + other
        if self.soft_progress and OVERLAP_TRANSPORTS[tl][1] and \
                "unused env variable" in text and SOFT_PROGRESS in text:
            # the variable reached UCX, which does not know it: this run's
            # figures are not those of the mode asked for
            self.no_soft_progress("UCX warned that %s is unused" %
                                  SOFT_PROGRESS)
            progress.note("%s: %s (%s)" % (tl, NOT_AVAILABLE,
                                           self.unavailable.get(tl) or
                                           "inline again without it"))
            if OVERLAP_TRANSPORTS[tl][1] == "thread":
                progress.total -= (self.runs - run - 1) * len(self.sizes) * \
                    self.repeat
                return None
            progress.total += len(self.sizes) * self.repeat
            return self.run_one(tl, run, progress)
        why = mpirun_failure(returncode, timed_out, self.timeout, text)
        if why:
            return why
        rows = {}
        for line in out.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split(",")
            try:
                size, rep = int(fields[0]), int(fields[1])
                values = tuple(float(f) for f in fields[2:])
            except (ValueError, IndexError):
                return describe_failure("a line mpi_overlap -R does not "
                                        "print: %r" % line, text)
            if (len(values) != 3 or size not in self.sizes or
                    not 1 <= rep <= self.repeat or (size, rep) in rows or
                    min(values) <= 0):
                return describe_failure("a line mpi_overlap -R does not "
                                        "print: %r" % line, text)
            rows[(size, rep)] = values
        if len(rows) != len(self.sizes) * self.repeat or \
                "# mpi_overlap: OK" not in out:
            return describe_failure("mpi_overlap printed %d of %d figures" %
                                    (len(rows), len(self.sizes) *
                                     self.repeat), text)
        for (size, _), values in sorted(rows.items()):
            self.figures.setdefault((tl, size), []).append(values)
        return None

    def medians(self, tl, size):
        """(transfer, compute, total, overlap) from the medians"""
        rows = self.figures[(tl, size)]
        transfer, compute, total = (statistics.median(r[i] for r in rows)
                                    for i in range(3))
        return transfer, compute, total, \
            (transfer + compute - total) / transfer

    def shown(self, tl):
        return tl not in self.unavailable and tl not in self.failures and \
            all((tl, size) in self.figures for size in self.sizes)

    def print_table(self):
        print("\n" + textwrap.fill(
            "overlap of one message with computation on the receiver "
            "(test/bench/mpi_overlap, Open MPI pml ucx, 2 ranks): the "
            "receiver posts MPI_Irecv, the sender MPI_Isend, the receiver "
            "computes max(1.25\0x\0transfer,\0%g\0us) without MPI calls, then "
            "MPI_Wait; overlap = (transfer + compute - total) / transfer, 0 "
            "to 100 %% (raw value after it); medians of %d (%d run%s of %d "
            "repetitions); this host: %d CPUs (nproc): two ranks busy-poll "
            "on them, and in thread mode each rank's engine thread too" %
            (self.floor, self.runs * self.repeat, self.runs,
             "s" if self.runs > 1 else "", self.repeat, nproc()),
            79).replace("\0", " "))
        if self.others is not None:
            print("other processes used %.0f%% of the CPUs during these runs%s"
                  % (100 * self.others, "" if self.others <= 0.1 else
                     ":\nthe figures are not to be trusted: a rank waiting "
                     "for a message yields its core\n(mpi_yield_when_idle), "
                     "a computing one does not, so the transfer alone loses\n"
                     "time slices to other processes that the overlapped one "
                     "keeps"))
        for note in self.notes:
            print(note)
        cells = {}
        for tl in self.tls:
            for size in self.sizes:
                if tl in self.unavailable:
                    cells[(tl, size)] = ("not available",) * 2
                elif not self.shown(tl):
                    cells[(tl, size)] = ("failed",) * 2
                else:
                    t, c, x, ov = self.medians(tl, size)
                    cells[(tl, size)] = (
                        "%.0f%% (%.2f)" % (100 * min(1.0, max(0.0, ov)), ov),
                        "%s/%s/%s" % (time_text(t), time_text(c),
                                      time_text(x)))
        width = max(14, max(len(text) + 2 for text in
                            self.tls + [t for cell in cells.values()
                                        for t in cell]))
        for index, title in ((0, "overlap, higher is better"),
                             (1, "transfer/compute/total (us)")):
            print("\n%s" % title)
            print("%-9s" % "size" + "".join("%*s" % (width, tl)
                                             for tl in self.tls))
            for size in self.sizes:
                print("%-9s" % size_name(size) +
                      "".join("%*s" % (width, cells[(tl, size)][index])
                              for tl in self.tls))
        for tl, why in self.unavailable.items():
            print("%s: %s (%s)" % (tl, NOT_AVAILABLE, why))
        for tl, why in self.failures.items():
            print("%s failed: %s" % (tl, why))
        return len(self.failures)


class ManyPeers:
    """mpi_many_peers under mpirun -np N (pml ucx) for each N of
    --peers-ranks: the half round trip between ranks 0 and 1 while the
    other N - 2, connected to both, stay idle.  --peers-runs rounds, in
    each every (N, transport) once, interleaved; each run gives
    --peers-repeat repetitions; medians over all of them, and each
    transport's ratio to the last one listed."""

    def __init__(self, args):
        self.program = os.path.abspath(args.peers)
        self.module = os.path.abspath(args.module)
        self.baseline = args.baseline_module
        self.tls = args.peers_transports.split(",")
        self.ranks = [int(n) for n in args.peers_ranks.split(",")]
        self.size = args.peers_size
        self.runs = args.peers_runs
        self.repeat = args.peers_repeat
        self.timeout = args.peers_timeout
        self.mpirun = args.mpirun
        self.figures = {}       # (ranks, tl): [us]
        self.failures = {}      # (ranks, tl): why (the first failed run)

    def steps(self):
        return self.runs * len(self.ranks) * len(self.tls)

    def command(self, ranks, tl):
        module, ucx_tls = module_and_tls(tl, self.module, self.baseline)
        return mpirun_command(self.mpirun, module, ucx_tls, ranks) + \
            [self.program, "-R", "-r", str(self.repeat),
             "-s", str(self.size)]

    def run(self, progress):
        progress.note("many peers: %s" % " ".join(
            self.command(self.ranks[-1], self.tls[0])))
        for run in range(self.runs):
            for ranks in self.ranks:
                for tl in rotated(self.tls, run):
                    progress.step("many peers run %d/%d  %d ranks  %s" %
                                  (run + 1, self.runs, ranks, tl))
                    if (ranks, tl) in self.failures:
                        continue
                    why = self.run_one(ranks, tl)
                    if why:
                        self.failures[(ranks, tl)] = why
                        progress.note("FAILED: many peers, %d ranks over "
                                      "%s: %s" % (ranks, tl, why))

    def run_one(self, ranks, tl):
        """One mpirun; returns why it failed, or None."""
        try:
            returncode, out, other, timed_out = run_reporting(
                self.command(ranks, tl), self.timeout, lambda rep: None,
                stdin=subprocess.DEVNULL)
        except OSError as err:
            return "%s: %s" % (self.mpirun, err)
        text = out + other
        why = mpirun_failure(returncode, timed_out, self.timeout, text)
        if why:
            return why
        figures = []
        for line in out.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            try:
                n, rep, us = line.split(",")
                n, rep, us = int(n), int(rep), float(us)
            except ValueError:
                n, rep, us = 0, 0, 0.0
            if n != ranks or rep != len(figures) + 1 or us <= 0:
                return describe_failure("a line mpi_many_peers -R does not "
                                        "print: %r" % line, text)
            figures.append(us)
        if len(figures) != self.repeat or \
                "# mpi_many_peers: OK" not in out:
            return describe_failure("mpi_many_peers printed %d of %d "
                                    "figures" % (len(figures), self.repeat),
                                    text)
        self.figures.setdefault((ranks, tl), []).extend(figures)
        return None

    def median(self, ranks, tl):
        if (ranks, tl) in self.failures or (ranks, tl) not in self.figures:
            return None
        return statistics.median(self.figures[(ranks, tl)])

    def print_table(self):
        reference = self.tls[-1]
        print("\n" + textwrap.fill(
            "many peers (test/bench/mpi_many_peers, Open MPI pml ucx): "
            "half round trip of %s between ranks 0 and 1 while the other "
            "ranks, each connected to both, wait without MPI calls (us, "
            "lower is better); medians of %d (%d run%s of %d); (x) = ratio "
            "to %s; this host: %d CPUs (nproc)" %
            (size_name(self.size), self.runs * self.repeat, self.runs,
             "s" if self.runs > 1 else "", self.repeat, reference, nproc()),
            79))
        width = 16
        print("%-9s" % "ranks" + "".join("%*s" % (width, tl)
                                          for tl in self.tls))
        for ranks in self.ranks:
            ref = self.median(ranks, reference)
            row = "%-9d" % ranks
            for tl in self.tls:
                us = self.median(ranks, tl)
                if us is None:
                    text = "failed"
                elif tl == reference or not ref:
                    text = "%.3f" % us
                else:
                    text = "%.3f (%.2fx)" % (us, us / ref)
                row += "%*s" % (width, text)
            print(row)
        for (ranks, tl), why in self.failures.items():
            print("%d ranks over %s failed: %s" % (ranks, tl, why))
        return len(self.failures)


class Halo:
    """mpi_halo under mpirun -np N (pml ucx) for each N of --halo-ranks: a
    halo exchange with both neighbours of a ring and a little computation,
    timed per step (the slowest rank's).  --halo-runs rounds, in each every
    (N, transport) once, interleaved; each run gives --halo-repeat
    repetitions per size; medians over all of them, and each transport's
    ratio to --halo-reference."""

    def __init__(self, args):
        self.program = os.path.abspath(args.halo)
        self.module = os.path.abspath(args.module)
        self.baseline = args.baseline_module
        self.tls = args.halo_transports.split(",")
        self.reference = args.halo_reference
        self.ranks = [int(n) for n in args.halo_ranks.split(",")]
        self.sizes = [parse_size(s) for s in args.halo_sizes.split(",")]
        self.runs = args.halo_runs
        self.repeat = args.halo_repeat
        self.cells = args.halo_cells
        self.timeout = args.halo_timeout
        self.mpirun = args.mpirun
        self.figures = {}       # (ranks, tl, size): [us]
        self.failures = {}      # (ranks, tl): why (the first failed run)
        self.others = None

    def steps(self):
        return self.runs * len(self.ranks) * len(self.tls) * \
            len(self.sizes) * self.repeat

    def command(self, ranks, tl):
        module, ucx_tls = module_and_tls(tl, self.module, self.baseline)
        return mpirun_command(self.mpirun, module, ucx_tls, ranks) + \
            [self.program, "-R", "-r", str(self.repeat),
             "-c", str(self.cells),
             "-s", ",".join(str(size) for size in self.sizes)]

    def run(self, progress):
        progress.note("halo: %s (per transport UCX_TLS, per job size -np)" %
                      " ".join(self.command(self.ranks[-1], self.tls[0])))
        cpu_use = CpuUse()
        for run in range(self.runs):
            for ranks in self.ranks:
                for tl in rotated(self.tls, run):
                    if (ranks, tl) in self.failures:
                        continue
                    why = self.run_one(ranks, tl, run, progress)
                    if why:
                        self.failures[(ranks, tl)] = why
                        progress.note("FAILED: halo, %d ranks over %s: %s" %
                                      (ranks, tl, why))
        self.others = cpu_use.others_share()

    def run_one(self, ranks, tl, run, progress):
        """One mpirun; returns why it failed, or None."""
        try:
            returncode, out, other, timed_out = run_reporting(
                self.command(ranks, tl), self.timeout,
                lambda rep: progress.step("halo run %d/%d  %d ranks  %-6s %s"
                                          % (run + 1, self.runs, ranks, tl,
                                             rep)),
                stdin=subprocess.DEVNULL)
        except OSError as err:
            return "%s: %s" % (self.mpirun, err)
        text = out + other
        why = mpirun_failure(returncode, timed_out, self.timeout, text)
        if why:
            return why
        rows = {}
        for line in out.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            try:
                size, rep, us = line.split(",")
                size, rep, us = int(size), int(rep), float(us)
            except ValueError:
                size, rep, us = 0, 0, 0.0
            if size not in self.sizes or not 1 <= rep <= self.repeat or \
                    (size, rep) in rows or us <= 0:
                return describe_failure("a line mpi_halo -R does not print: "
                                        "%r" % line, text)
            rows[(size, rep)] = us
        if len(rows) != len(self.sizes) * self.repeat or \
                "# mpi_halo: OK" not in out:
            return describe_failure("mpi_halo printed %d of %d figures" %
                                    (len(rows), len(self.sizes) *
                                     self.repeat), text)
        for (size, _), us in sorted(rows.items()):
            self.figures.setdefault((ranks, tl, size), []).append(us)
        return None

    def median(self, ranks, tl, size):
        if (ranks, tl) in self.failures or \
                (ranks, tl, size) not in self.figures:
            return None
        return statistics.median(self.figures[(ranks, tl, size)])

    def print_table(self):
        print("\n" + textwrap.fill(
            "halo exchange (test/bench/mpi_halo, Open MPI pml ucx): each "
            "step every rank of a ring posts MPI_Irecv and MPI_Isend of a "
            "halo with both neighbours, updates %d interior cells, then "
            "MPI_Waitall; time of a step (the slowest rank's; us, lower is "
            "better), medians of %d (%d run%s of %d); (x) = ratio to %s in "
            "the same runs; this host: %d CPUs (nproc)" %
            (self.cells, self.runs * self.repeat, self.runs,
             "s" if self.runs > 1 else "", self.repeat, self.reference,
             nproc()), 79))
        if self.others is not None:
            print("other processes used %.0f%% of the CPUs during these runs"
                  "%s" % (100 * self.others, "" if self.others <= 0.1 else
                          ": the figures are noisy"))
        width = 17
        for ranks in self.ranks:
            print("\n%d ranks" % ranks)
            print("%-9s" % "size" + "".join("%*s" % (width, tl)
                                             for tl in self.tls))
            for size in self.sizes:
                ref = self.median(ranks, self.reference, size)
                row = "%-9s" % size_name(size)
                for tl in self.tls:
                    us = self.median(ranks, tl, size)
                    if us is None:
                        text = "failed"
                    elif tl == self.reference or not ref:
                        text = "%.2f" % us
                    else:
                        text = "%.2f (%.2fx)" % (us, us / ref)
                    row += "%*s" % (width, text)
                print(row)
        for (ranks, tl), why in self.failures.items():
            print("%d ranks over %s failed: %s" % (ranks, tl, why))
        return len(self.failures)
