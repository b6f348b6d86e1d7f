#!/usr/bin/env python3
"""Side-by-side ucx_perftest over rc_tm and UCX's own transports.

Runs Debian's stock ucx_perftest (server and client, two processes on this
host) for each test, message size and transport, interleaving transports
within every repetition so they share the machine's noise, and prints the
median of each figure with its ratio to the reference transport measured in
the same run.  Optionally writes a latency/bandwidth plot (PNG).

    perftest_compare.py --module build/src/uct/rc_tm/.libs/libuct_rc_tm.so
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

# UCX_TLS for each transport: only that transport may carry the traffic
TRANSPORTS = {
    "rc_tm": "rc_tm",
    "posix": "posix",
    "tcp":   "tcp",
}

LATENCY_TESTS = ("tag_lat", "tag_sync_lat", "am_lat", "put_lat", "get_lat")


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


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def iterations(test, size, budget):
    """Enough iterations for a stable median within the time budget."""
    per_iter_us = 1.0 + size / 2000.0   # ~2 GB/s worst case
    if test in LATENCY_TESTS:
        per_iter_us *= 2
    return int(max(100, min(100000, budget * 1e6 / per_iter_us)))


def run_pair(args, test, size, tl):
    """One server/client pair; returns (latency_us, bandwidth_MBs) or None."""
    env = dict(os.environ)
    env["UCX_TLS"] = TRANSPORTS[tl]
    env["LD_PRELOAD"] = os.path.abspath(args.module)
    port = free_port()
    n = iterations(test, size, args.budget)
    warmup = max(10, n // 10)
    common = [args.perftest, "-t", test, "-s", str(size), "-n", str(n),
              "-w", str(warmup), "-p", str(port), "-v"]
    server = subprocess.Popen(common, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        client = None
        for _ in range(100):   # until the server listens
            client = subprocess.run([args.perftest, "127.0.0.1"] + common[1:],
                                    env=env, capture_output=True, text=True,
                                    timeout=args.timeout)
            if "Connection refused" not in client.stdout + client.stderr:
                break
            time.sleep(0.05)
        server.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        server.kill()
        sys.stderr.write("\n%s %s %s: timed out\n" % (tl, test, size_name(size)))
        return None
    finally:
        if server.poll() is None:
            server.kill()

    final = [line.strip() for line in client.stdout.splitlines()
             if line.strip()[:1].isdigit()]
    if client.returncode != 0 or not final:
        sys.stderr.write("\n%s %s %s failed:\n%s\n" %
                         (tl, test, size_name(size),
                          (client.stderr or client.stdout)[-2000:]))
        return None
    fields = final[-1].split(",")
    # iterations,50%ile_lat,avg_lat,overall_lat,avg_bw,overall_bw,...
    latency = float(fields[1])
    if test in LATENCY_TESTS:
        bandwidth = size / latency if latency > 0 else 0.0  # B/us = MB/s
    else:
        bandwidth = float(fields[5])
    return latency, bandwidth


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", required=True, help="libuct_rc_tm.so")
    parser.add_argument("--perftest", default="ucx_perftest")
    parser.add_argument("--tests", default="tag_lat,tag_bw,tag_sync_lat")
    parser.add_argument("--sizes", default="8,4k,64k,1m")
    parser.add_argument("--transports", default="rc_tm,posix")
    parser.add_argument("--reference", default="posix",
                        help="ratios are against this transport")
    parser.add_argument("--repeat", type=int, default=5,
                        help="repetitions; medians are reported")
    parser.add_argument("--budget", type=float, default=0.3,
                        help="seconds of traffic per measurement")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--png", help="write a latency/bandwidth plot here")
    args = parser.parse_args()

    tests = args.tests.split(",")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    tls = args.transports.split(",")
    results = {}   # (test, size, tl) -> [(lat, bw)]
    total = len(tests) * len(sizes) * len(tls) * args.repeat
    done = 0
    start = time.time()
    for rep in range(args.repeat):
        for test in tests:
            for size in sizes:
                for tl in tls:
                    done += 1
                    sys.stderr.write("\r[%3d/%d] %-12s %-9s %-6s rep %d  (%.0f s)  " %
                                     (done, total, test, size_name(size), tl,
                                      rep + 1, time.time() - start))
                    sys.stderr.flush()
                    figure = run_pair(args, test, size, tl)
                    if figure is not None:
                        results.setdefault((test, size, tl), []).append(figure)
    sys.stderr.write("\n")

    failed = 0
    print("ucx_perftest, two processes on this host; median of %d runs; "
          "ratio = transport / %s in this run" % (args.repeat, args.reference))
    for test in tests:
        latency_test = test in LATENCY_TESTS
        metric = "latency (us)" if latency_test else "bandwidth (MB/s)"
        print("\n%s: %s" % (test, metric))
        header = "%-9s" % "size" + "".join("%22s" % tl for tl in tls)
        print(header)
        for size in sizes:
            ref = results.get((test, size, args.reference))
            ref_value = None
            if ref:
                ref_value = statistics.median(r[0 if latency_test else 1]
                                              for r in ref)
            row = "%-9s" % size_name(size)
            for tl in tls:
                runs = results.get((test, size, tl))
                if not runs:
                    row += "%22s" % "failed"
                    failed += 1
                    continue
                value = statistics.median(r[0 if latency_test else 1]
                                          for r in runs)
                cell = "%.3f" % value if latency_test else "%.0f" % value
                if ref_value and tl != args.reference:
                    cell += " (%.2fx)" % (value / ref_value)
                row += "%22s" % cell
            print(row)

    if args.png:
        plot(args.png, tests, sizes, tls, results)
        print("\nplot: %s" % args.png)
    return 1 if failed else 0


def plot(path, tests, sizes, tls, results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tests), figsize=(6 * len(tests), 4.5))
    if len(tests) == 1:
        axes = [axes]
    for ax, test in zip(axes, tests):
        latency_test = test in LATENCY_TESTS
        for tl in tls:
            xs, ys = [], []
            for size in sizes:
                runs = results.get((test, size, tl))
                if runs:
                    xs.append(size)
                    ys.append(statistics.median(r[0 if latency_test else 1]
                                                for r in runs))
            ax.plot(xs, ys, marker="o", label=tl)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("latency (us)" if latency_test else "bandwidth (MB/s)")
        ax.set_title(test)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
