#!/usr/bin/env python3
"""Sixty 640x480 RGBA frames from Python to a Python and a Go subscriber.

Starts `flybus serve` with the given binary in a temporary directory, has
a Python camera publish the frames (each sealed with its SHA-256), a
Python viewer read every one through a view and a Go subscriber
(`flybus sub --save-artifacts`) save them, checks every digest on both
sides, and prints one line per step. Exits 0 when every frame arrived
whole on both sides and the router collected every artifact.

    python3 python/examples/frames.py --flybus /tmp/flybus [--store-mode files]
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import flybus  # noqa: E402

WIDTH, HEIGHT = 640, 480


def frame(seq):
    """A frame whose bytes depend on its sequence number."""
    row = bytes((seq * 7 + x) % 256 for x in range(WIDTH * 4))
    return seq.to_bytes(8, "little") + (row * HEIGHT)[8:]


def metric(addr, name):
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise KeyError(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flybus", required=True, help="the flybus executable to run the router with")
    ap.add_argument("--frames", type=int, default=60, help="how many frames (default 60)")
    ap.add_argument("--store-mode", default="pool", choices=["files", "pool"],
                    help="the router's store mode (default pool)")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="flybus-frames-") as d:
        os.chmod(d, 0o700)
        store, sock, saved = os.path.join(d, "store"), os.path.join(d, "bus.sock"), os.path.join(d, "saved")
        router = subprocess.Popen([args.flybus, "serve", "--open", "--store", store, "--store-mode", args.store_mode,
                                   "--listen", sock, "--metrics", "127.0.0.1:0", "--log-format", "json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            addr = None
            while addr is None:
                line = router.stderr.readline()
                if not line:
                    raise SystemExit("flybus serve did not start")
                rec = json.loads(line)
                addr = rec.get("addr") if rec.get("msg") == "metrics listening" else None
            json.loads(router.stdout.readline())  # the ready line
            print(f"router: up, store mode {args.store_mode}")
            with flybus.connect(sock, client_id="py-camera", store_root=store) as cam, \
                    flybus.connect(sock, client_id="py-viewer", store_root=store) as viewer:
                cam.declare_topic("camera.frames")
                sub = viewer.subscribe("camera.frames", mode="bounded")
                go = subprocess.Popen([args.flybus, "sub", sock, "camera.frames", "--bounded", "--count", str(args.frames),
                                       "--save-artifacts", saved, "--store", store],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                go.stderr.readline()  # "subscribed to camera.frames (sub-N)"
                print("go subscriber: subscribed")
                digests, matched = {}, 0
                for seq in range(1, args.frames + 1):
                    pixels = frame(seq)
                    digests[seq] = hashlib.sha256(pixels).hexdigest()
                    with cam.allocate(len(pixels), "image/x-rgba") as w:
                        w.write(pixels)
                        art = w.seal(digest=digests[seq])
                    with art:
                        cam.publish("camera.frames", {"seq": seq, "width": WIDTH, "height": HEIGHT},
                                    attachments={"frame": art})
                    with sub.next(timeout=10) as msg, msg.artifact("frame") as a, a.view() as mv:
                        matched += hashlib.sha256(mv).hexdigest() == digests[msg.payload["seq"]]
                print(f"python camera: published {args.frames} frames of {WIDTH}x{HEIGHT} RGBA")
                print(f"python viewer: {args.frames} frames seen, {matched} digests matched")
                ok &= matched == args.frames
                go.wait(60)
                go_matched = 0
                for name in os.listdir(saved):
                    seq = int(name.split("-")[0])
                    with open(os.path.join(saved, name), "rb") as f:
                        go_matched += hashlib.sha256(f.read()).hexdigest() == digests.get(seq)
                print(f"go subscriber: {len(os.listdir(saved))} frames saved, {go_matched} digests matched")
                ok &= go_matched == args.frames and go.returncode == 0
                sub.close()
            left, collected = metric(addr, "flybus_artifacts"), metric(addr, "flybus_collected_total")
            print(f"router: {int(collected)} artifacts collected, {int(left)} left")
            ok &= left == 0 and collected >= args.frames
        finally:
            router.terminate()
            router.wait(30)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
