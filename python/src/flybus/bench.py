"""Python beside Go on the same machine, in one run.

    python3 -m flybus.bench --flybus PATH [--frames N] [--calls N]

For each store mode it starts `flybus serve` with that binary and measures:

- a Python consumer's access to a 1,228,800-byte frame: from the message
  in hand to the view closed, reading one byte of every 64-byte line (as
  the Go harness's consumers do), frames published one at a time; in pool
  mode both with a mapping per view and (Python 3.12 and later) through
  the mapping cached per slot;
- a Python RPC round trip (caller and service are two Python clients),
  back to back;
- the Go figures of the same two things from `flybus perf --embedded`
  run with that binary for two seconds: its fast consumers' access and its
  RPC round trip (which carries a frame to an agent that touches it, so it
  is an upper bound for a bare Go round trip).

p50 / p95 in ms.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from . import _slots, connect

FRAME = 640 * 480 * 4


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def _ms(xs):
    return f"{_pct(xs, 50) * 1e3:.3f} / {_pct(xs, 95) * 1e3:.3f}"


def _python(flybus, mode, frames, calls, map_per_view=False):
    with tempfile.TemporaryDirectory(prefix="flybus-bench-") as d:
        os.chmod(d, 0o700)
        store, sock = os.path.join(d, "store"), os.path.join(d, "bus.sock")
        router = subprocess.Popen([flybus, "serve", "--open", "--store", store, "--store-mode", mode, "--listen", sock],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            router.stdout.readline()
            with connect(sock, "bench-producer", store_root=store) as prod, \
                    connect(sock, "bench-consumer", store_root=store, map_per_view=map_per_view) as cons:
                prod.declare_topic("bench.frames")
                access = []
                pixels = os.urandom(FRAME)
                with cons.subscribe("bench.frames", mode="bounded") as sub:
                    for _ in range(frames):
                        with prod.allocate(FRAME, "image/x-rgba") as w:
                            w.write(pixels)
                            art = w.seal()
                        with art:
                            prod.publish("bench.frames", {}, attachments={"frame": art})
                        msg = sub.next(timeout=10)
                        t0 = time.perf_counter()
                        with msg, msg.artifact("frame") as a, a.view() as mv:
                            mv[::64].tobytes()  # one byte of every line
                        access.append(time.perf_counter() - t0)
                rtt = []
                with cons.register("bench.echo") as svc:
                    def serve():
                        for req in svc:
                            with req:
                                req.reply({})

                    threading.Thread(target=serve, daemon=True).start()
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        prod.call("bench.echo", "M", {}).result(timeout=10).close()
                        rtt.append(time.perf_counter() - t0)
            return access, rtt
        finally:
            router.terminate()
            router.wait(30)


def _go(flybus, mode):
    with tempfile.TemporaryDirectory(prefix="flybus-bench-") as d:
        out = os.path.join(d, "perf.json")
        subprocess.run([flybus, "perf", "--embedded", "--seconds", "2", "--agents", "1", "--store-mode", mode,
                        "--json", out, "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        s = json.load(open(out))["schedules"][0]
        return s["consumerAccess"], s["rpcRoundTrip"]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m flybus.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--flybus", required=True, help="the flybus executable")
    ap.add_argument("--frames", type=int, default=200, help="frames per store mode (default 200)")
    ap.add_argument("--calls", type=int, default=1000, help="RPC round trips per store mode (default 1000)")
    ap.add_argument("--no-go", action="store_true", help="skip the Go figures (flybus perf)")
    args = ap.parse_args(argv)
    print(f"python {sys.version.split()[0]}; p50 / p95 in ms")
    print("| store mode | Python view access | Go view access | Python RPC round trip | Go RPC round trip (with a frame) |")
    print("| --- | --- | --- | --- | --- |")
    rows = [("files", "files", True), ("pool", "pool, a mapping per view", True)]
    if _slots.CAN_COUNT_EXPORTS:
        rows.append(("pool", "pool, the mapping cached per slot", False))
    go = {}  # the Go figures, once per store mode
    for mode, label, per_view in rows:
        access, rtt = _python(args.flybus, mode, args.frames, args.calls, map_per_view=per_view)
        if args.no_go:
            print(f"| {label} | {_ms(access)} | - | {_ms(rtt)} | - |")
            continue
        if mode not in go:
            go[mode] = _go(args.flybus, mode)
        gacc, grtt = go[mode]
        g = lambda h: f"{h['p50Ns'] / 1e6:.3f} / {h['p95Ns'] / 1e6:.3f}"  # noqa: E731
        print(f"| {label} | {_ms(access)} | {g(gacc)} | {_ms(rtt)} | {g(grtt)} |")
    print(f"(Python: {args.frames} frames and {args.calls} calls per row, mean access "
          f"{statistics.mean(access) * 1e3:.3f} ms in the last row)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
