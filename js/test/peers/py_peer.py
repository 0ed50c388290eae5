"""The Python peer of the Node client's interop tests: the repository's
flybus package (python/src) in one role against a running router, printing
one JSON object per line so that the Node side waits on what it says.

    py_peer.py consume --socket PATH --store DIR --topic T [--count N] [--client ID] [--await]
    py_peer.py call    --socket PATH --store DIR --target S --method M --payload JSON [--client ID]

consume prints {"ready": true} once subscribed (bounded; with --await it may
subscribe before T is declared, and the line adds "topicIncarnation", null
while it waits), then per message
{"seq", "payload", "bytes", "sha256", "digest"} with the "frame" attachment
read through a view, and at the end {"end": CODE}: "done", SUBSCRIPTION_CLOSED
(with "reason") or a bus error code. call prints {"outcome", "responder"} or
{"error": CODE, "dispatch": D}.
"""

import argparse
import hashlib
import json
import sys

import flybus


def emit(v):
    print(json.dumps(v), flush=True)


def code(e):
    if isinstance(e, flybus.SubscriptionClosed):
        return "SUBSCRIPTION_CLOSED"
    if isinstance(e, flybus.BusError):
        return e.code
    return type(e).__name__


def consume(c, a):
    try:
        sub = c.subscribe(a.topic, mode="bounded", **({"await_topic": True} if a.await_topic else {}))
    except flybus.FlybusError as e:
        emit({"end": code(e), "dispatch": getattr(e, "dispatch", None)})
        return
    emit({"ready": True, "topicIncarnation": sub.topic_incarnation} if a.await_topic else {"ready": True})
    n = 0
    while a.count == 0 or n < a.count:
        try:
            msg = sub.next(timeout=60)
        except flybus.FlybusError as e:
            emit({"end": code(e), "reason": getattr(e, "reason", "")})
            return
        with msg:
            line = {"seq": msg.topic_sequence, "payload": msg.payload}
            if "frame" in msg.attachments:
                with msg.artifact("frame") as art, art.view() as mv:
                    line.update(bytes=len(mv), sha256=hashlib.sha256(mv).hexdigest(), digest=art.ref["digest"])
        emit(line)
        n += 1
    sub.close()
    emit({"end": "done"})


def call(c, a):
    try:
        p = c.call(a.target, a.method, json.loads(a.payload))
        with p.result(timeout=30) as res:
            emit({"outcome": res.outcome, "responder": res.responder["clientId"]})
    except flybus.BusError as e:
        emit({"error": e.code, "dispatch": e.dispatch})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["consume", "call"])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--client", default=None)
    ap.add_argument("--topic", default="")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--target", default="")
    ap.add_argument("--method", default="Echo")
    ap.add_argument("--payload", default="{}")
    ap.add_argument("--await", dest="await_topic", action="store_true")
    a = ap.parse_args()
    with flybus.connect(a.socket, client_id=a.client or "py-" + a.role, store_root=a.store) as c:
        {"consume": consume, "call": call}[a.role](c, a)


if __name__ == "__main__":
    sys.exit(main())
