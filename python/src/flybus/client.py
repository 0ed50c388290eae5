"""The client: one connection to a router over its Unix socket.

A reader thread decodes every router frame (strictly, see _wire) and hands
it over without running user code: replies complete waiters, deliveries go
onto per-subscription and per-service queues, notices settle calls. Any
violation of the router's side of the contract closes the client with a
ProtocolError. Every method is safe to call from several threads; every
blocking call takes ``timeout=`` in seconds and raises TimeoutError without
cancelling anything.
"""

import collections
import logging
import os
import secrets
import socket
import threading

from . import _handles, _slots, _wire
from .artifacts import Artifact, ArtifactWriter, Closing, Owning, _Guard
from ._contract import CONTRACT_DIGEST
from .errors import BusError, ClosedError, FlybusError, NoRouter, ProtocolError, SubscriptionClosed

_log = logging.getLogger("flybus")

_DEFAULT_TIMEOUT = 10.0

# The client's own counters, in stats() from zero.
_COUNTERS = ("leaked", "control_errors", "stalled_subscriptions")


class _Waiter:
    __slots__ = ("op", "done", "value", "error", "orphan", "then")

    def __init__(self, op, then=None):
        self.op, self.done, self.value, self.error, self.orphan = op, threading.Event(), None, None, None
        # then runs in the reader on success, before any later frame is
        # dispatched: a subscription is known before its first delivery.
        self.then = then


class _Queue:
    """A queue a reader fills and the program drains, closed with a reason."""

    def __init__(self):
        self._items = collections.deque()
        self._cond = threading.Condition()
        self._closed = None

    def push(self, item):
        with self._cond:
            if self._closed is not None:
                return False
            self._items.append(item)
            self._cond.notify()
            return True

    def close(self, err):
        with self._cond:
            if self._closed is None:
                self._closed = err
            left = list(self._items)
            self._items.clear()
            self._cond.notify_all()
        return left

    def next(self, timeout):
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self._closed is not None, timeout):
                raise TimeoutError("nothing arrived within the timeout")
            if self._items:
                return self._items.popleft()
            raise self._closed


def connect(path, client_id, store_root=None, client_incarnation=None, timeout=_DEFAULT_TIMEOUT, map_per_view=False,
            track_handles=False, held_warn_after=5.0):
    """Connects to the router listening on the Unix socket at path and says
    hello. The router's contract digest must equal this package's.

    From a pooled store on Python 3.12 or later, views are slices of a
    mapping the client keeps per slot; map_per_view=True maps every view of
    its own instead (as files mode and older Pythons always do).

    A subscription whose in-flight deliveries the program has all held
    unconsumed for held_warn_after seconds (a message or view it forgot to
    close) gets no more messages: the client logs a warning on the
    "flybus" logger, once until a delivery is consumed, and counts it in
    stats()["stalled_subscriptions"]. 0 turns that off. track_handles=True
    (or FLYBUS_TRACK_HANDLES=1 in the environment) has every handle record
    where the program made it, and the warning name those places; it costs
    a look at the stack per handle."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.settimeout(None)
    except (FileNotFoundError, ConnectionRefusedError) as e:
        sock.close()
        raise NoRouter(f"no router is listening on {path} (is flybus serve running, with --listen {path}?): {e}") from e
    except BaseException:
        sock.close()
        raise
    return Client(sock, client_id, store_root, client_incarnation, timeout, map_per_view,
                  track_handles=track_handles, held_warn_after=held_warn_after)


class Client(Closing):
    """A connection to a router. Use it as a context manager, or close it."""

    def __init__(self, sock, client_id, store_root, client_incarnation, timeout, map_per_view=False, *,
                 track_handles=False, held_warn_after=5.0):
        self._sock = sock
        self._reader = _wire.FrameReader(sock)
        self._lock = threading.Lock()
        self._wlock = threading.Lock()
        self._next_msg = 0
        self._next_call = 0
        self._last_bus = 0
        self._waiters = {}
        self._subs = {}
        self._services = {}
        self._calls = {}
        self._lost = None
        self._closing = False
        self._closed_code = None
        self._stats = dict.fromkeys(_COUNTERS, 0)
        self._handles = _handles.HandleTable(track_handles or _handles.tracking_from_env())
        self._watchdog = None
        if held_warn_after and held_warn_after > 0:
            self._watchdog = _handles.Watchdog(held_warn_after, self._stalled, f"flybus-watchdog-{client_id}")
        self._slots = _slots.SlotCache() if _slots.CAN_COUNT_EXPORTS and not map_per_view else None
        self.store_root = store_root
        self.client_id = client_id
        self.client_incarnation = client_incarnation or f"py-{os.getpid()}-{secrets.token_hex(6)}"
        hello = {"clientId": client_id, "clientIncarnation": self.client_incarnation, "supportedMajors": [1]}
        # The hello is read here, before the reader starts.
        try:
            self._write(self._command_frame("bus.hello", hello, _Waiter("bus.hello"), register=False))
            sock.settimeout(timeout)
            payload = self._reader.read_frame()
            sock.settimeout(None)
            if payload is None:
                raise ClosedError("the router closed the connection during hello")
            env = _wire.decode_router_envelope(payload)
            if env["kind"] != "reply" or env["op"] != "bus.hello" or env["_replyTo"] != 1:
                raise ProtocolError(f"the router answered hello with {env['kind']} {env['op']}")
            self._last_bus = env["_bus"]
            body = env["body"]
            if not body["ok"]:
                e = body["error"]
                raise BusError.of(e["code"], e["message"], e["dispatch"])
            info = body["value"]
            if info["contractDigest"] != CONTRACT_DIGEST:
                raise ProtocolError(f"the router's contract digest {info['contractDigest']} is not this package's "
                                    f"{CONTRACT_DIGEST}: they speak different versions of the wire")
            if info["selectedMajor"] != 1:
                raise ProtocolError(f"the router selected major {info['selectedMajor']}")
        except _wire.WireError as e:
            sock.close()
            raise ProtocolError(f"the router's hello reply broke the contract: {e}") from None
        except BaseException:
            sock.close()
            raise
        self.info = info
        self._thread = threading.Thread(target=self._read_loop, name=f"flybus-reader-{client_id}", daemon=True)
        self._thread.start()

    # ---- lifetime ----------------------------------------------------

    def close(self, timeout=5.0):
        """Shuts the write side and waits (up to timeout) until the router has
        closed its side, having released everything this connection held.
        Idempotent."""
        with self._lock:
            first = not self._closing
            self._closing = True
        if first and self._lost is None:
            try:
                with self._wlock:
                    self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        self._thread.join(timeout)
        self._fail(ClosedError("the client was closed"))
        self._sock.close()
        if self._slots is not None:
            self._slots.close()  # views still open keep their slot mapped

    def stats(self):
        """Counters of what the client did on the program's behalf, zeros
        included: handles collected unclosed ("leaked"), fire-and-forget
        commands the router refused ("control_errors"), warnings of
        subscriptions stalled by held deliveries ("stalled_subscriptions");
        and, with cached slot mappings, the cache's: slots mapped now, views
        served from it, slots mapped and unmapped."""
        with self._lock:
            out = dict(self._stats)
        if self._slots is not None:
            out.update(self._slots.stats())
        return out

    def _fail(self, err):
        with self._lock:
            if self._lost is not None:
                return
            if self._closing and not isinstance(err, ProtocolError):
                err = ClosedError("the client was closed")
            self._lost = err
            waiters, self._waiters = self._waiters, {}
            subs, self._subs = self._subs, {}
            services, self._services = self._services, {}
            calls, self._calls = self._calls, {}
        if self._watchdog is not None:
            self._watchdog.stop()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for w in waiters.values():
            w.error = err
            w.done.set()
        for s in subs.values():
            s._queue.close(err)
        for s in services.values():
            s._queue.close(err)
        for p in calls.values():
            p._finish(None, err)

    # ---- writing -----------------------------------------------------

    def _command_frame(self, op, body, waiter, register=True, attachments=()):
        with self._lock:
            if self._lost is not None:
                raise self._not_sent()
            self._next_msg += 1
            n = self._next_msg
            if register:
                self._waiters[n] = waiter
        return _wire.command(n, op, body, attachments)

    def _not_sent(self):
        """The loss, for a command made after it (called under _lock)."""
        lost = self._lost
        return lost.not_sent() if isinstance(lost, BusError) else lost

    def _write(self, data):
        with self._wlock:
            self._sock.sendall(data)

    def _send(self, op, body, waiter, attachments=()):
        """Queues op and writes it; command ids increase in write order
        because both happen under the write lock."""
        with self._wlock:
            frame = self._command_frame(op, body, waiter, attachments=attachments)
            try:
                self._sock.sendall(frame)
            except OSError as e:
                # The router went away, as when the reader sees it first;
                # _fail makes it ClosedError once the program is closing.
                self._fail(BusError.of("ROUTER_LOST", f"writing to the router failed: {e}", "unknown"))
                raise self._lost from None

    def _request(self, op, body, timeout=_DEFAULT_TIMEOUT, orphan=None, attachments=(), then=None):
        """Sends op and waits for its value. orphan takes an answer that
        comes after the timeout; then runs on the reader thread as the
        answer is dispatched, before any later frame."""
        w = _Waiter(op, then=then)
        self._send(op, body, w, attachments)
        if not w.done.wait(timeout):
            with self._lock:
                if not w.done.is_set():
                    w.orphan = orphan
                    raise TimeoutError(f"{op} was not answered within {timeout} s")
        if w.error is not None:
            raise w.error
        return w.value

    def _fire(self, op, body):
        """Sends a command whose answer only matters as a refusal."""
        w = _Waiter(op)
        w.orphan = lambda value, err: err is not None and self._count("control_errors")
        try:
            self._send(op, body, w)
        except FlybusError:
            pass  # the connection is gone: the router released everything

    def _count(self, key, n=1):
        with self._lock:
            self._stats[key] += n

    def _stalled(self, credits, held_for):
        """The watchdog's warning: credits' subscription has held all its
        in-flight deliveries for held_for seconds. The record also carries
        the parts as attributes (subscription, topic, credits, handles,
        client, and sites or a hint)."""
        if self._lost is not None:
            return
        with credits.lock:
            held = set(credits.held)
        # Counted first: a handler that sees the record finds it counted.
        self._count("stalled_subscriptions")
        open_handles = self._handles.count()
        extra = {"subscription": credits.sub_id, "topic": credits.topic, "credits": len(held),
                 "handles": open_handles, "client": self.client_id}
        sites = ""
        if self._handles.track:
            extra["sites"] = "; ".join(self._handles.sites(held))
            sites = "; created at: " + (extra["sites"] or "an unknown place")
        else:
            extra["hint"] = (f"set {_handles.ENV_TRACK}=1 (or connect(track_handles=True)) to log where the "
                             "handles holding them were made")
        _log.warning("flybus: subscription %s on topic %s has held all %d in-flight credits unconsumed for %s; "
                     "%d handles are open%s", credits.sub_id, credits.topic, len(held),
                     _handles.go_duration(held_for), open_handles, sites, extra=extra)

    # ---- reading -----------------------------------------------------

    def _read_loop(self):
        try:
            while True:
                payload = self._reader.read_frame()
                if payload is None:
                    code = self._closed_code
                    if code is not None and code[0] != "ROUTER_LOST" or self._closing:
                        self._fail(ClosedError(f"the router closed the connection: {code}" if code else "closed"))
                    else:
                        self._fail(BusError.of("ROUTER_LOST", code[1] if code else "the router closed the connection",
                                               "unknown"))
                    return
                env = _wire.decode_router_envelope(payload)
                if env["_bus"] <= self._last_bus:
                    raise _wire.WireError("router envelope ids must increase")
                self._last_bus = env["_bus"]
                self._dispatch(env)
        except _wire.WireError as e:
            self._fail(ProtocolError(f"the client refused a frame from the router: {e}"))
        except OSError as e:
            self._fail(BusError.of("ROUTER_LOST", f"reading from the router failed: {e}", "unknown"))

    def _dispatch(self, env):
        kind, op, body = env["kind"], env["op"], env["body"]
        if kind == "reply":
            with self._lock:
                w = self._waiters.pop(env["_replyTo"], None)
            if w is None:
                raise _wire.WireError(f"reply to unknown command msg-{env['_replyTo']}")
            if w.op != op:
                # Out of the table already: the failure would not find it.
                w.error = ProtocolError(f"the client refused a frame from the router: reply op {op} answers a {w.op}")
                w.done.set()
                raise _wire.WireError(f"reply op {op} answers a {w.op}")
            if body["ok"]:
                w.value = body["value"]
                if w.then is not None:
                    w.then(w.value)
            else:
                e = body["error"]
                w.error = BusError.of(e["code"], e["message"], e["dispatch"])
            with self._lock:
                orphan = w.orphan
                w.done.set()
            if orphan is not None:
                orphan(w.value, w.error)
        elif op == "topic.message":
            self._queue_delivery(self._subs, body["subscriptionId"], Message(self, body, env["attachments"]))
        elif op == "rpc.request":
            self._queue_delivery(self._services, body["target"], Request(self, body, env["attachments"]))
        elif op == "rpc.result":
            with self._lock:
                p = self._calls.pop(body["callId"], None)
            res = Result(self, body, env["attachments"])
            if p is None:
                res.close()
            else:
                p._finish(res, None)
        elif op == "call.failed":
            with self._lock:
                p = self._calls.pop(body["callId"], None)
            if p is not None:
                p._finish(None, BusError.of(body["code"], body["message"], body["dispatch"]))
        elif op == "route.removed":
            with self._lock:
                s = self._services.pop(body["name"], None)
            if s is not None:
                for r in s._queue.close(ClosedError(f"service {body['name']} removed: {body['reason']}")):
                    r.close()
        elif op == "subscription.closed":
            with self._lock:
                s = self._subs.pop(body["subscriptionId"], None)
            if s is not None:
                s._unwatch()
                err = SubscriptionClosed(f"the router closed subscription {s.id} of {s.topic}: {body['reason']}")
                err.reason = body["reason"]
                for m in s._queue.close(err):
                    m.close()
        elif op == "connection.closing":
            self._closed_code = (body["code"], body["message"])

    def _queue_delivery(self, streams, key, d):
        """Hands a delivery to its subscription or service; one that has gone
        (or whose queue has closed) gets the delivery consumed at once."""
        with self._lock:
            stream = streams.get(key)
        if stream is None or not stream._queue.push(d):
            d.close()

    def _consume(self, delivery_id):
        self._fire("delivery.consumed", {"deliveryIds": [delivery_id]})

    def _hold_guard(self, owner):
        return _Guard(owner, lambda: self._fire("artifact.release", {"ownerIds": [owner]}))

    def _store_root(self):
        if not self.store_root:
            raise FlybusError("artifacts need store_root, the directory the router keeps its store under "
                              "(flybus serve --store DIR)")
        return self.store_root

    # ---- artifacts ---------------------------------------------------

    def allocate(self, size, content_type, timeout=_DEFAULT_TIMEOUT):
        """Reserves a staging file of exactly size bytes (zeros until
        written) and returns its writer."""
        self._store_root()
        if size < 0:
            raise ValueError(f"negative artifact size {size}")

        def orphan(v, err):  # granted after the caller gave up: give it back
            if err is None:
                self._fire("artifact.release", {"ownerIds": [v["ownerId"]]})

        v = self._request("artifact.allocate", {"byteLength": str(size), "contentType": content_type}, timeout, orphan)
        try:
            return ArtifactWriter(self, v, size, content_type)
        except OSError:
            self._fire("artifact.release", {"ownerIds": [v["ownerId"]]})
            raise

    def _attachments(self, attachments):
        """The wire form of {name: Artifact}, each artifact's owner held for
        the admission; returns it and the function that lets go."""
        held, out = [], []
        try:
            for name, a in (attachments or {}).items():
                if not isinstance(a, Artifact):
                    raise TypeError(f"attachment {name!r} is not an Artifact")
                a._take()
                held.append(a)
                out.append({"name": name, "ref": a.ref, "ownerId": a.owner})
        except BaseException:
            for a in held:
                a._guard.drop()
            raise
        return out, lambda: [a._guard.drop() for a in held]

    # ---- pub/sub -----------------------------------------------------

    def declare_topic(self, name, retained="none", timeout=_DEFAULT_TIMEOUT):
        """Declares a topic (idempotent); returns {"declared", "topicIncarnation"}."""
        return self._request("topic.declare", {"name": name, "retained": retained}, timeout)

    def clear_topic(self, name, timeout=_DEFAULT_TIMEOUT):
        return self._request("topic.clear", {"name": name}, timeout)["cleared"]

    def delete_topic(self, name, timeout=_DEFAULT_TIMEOUT):
        return self._request("topic.delete", {"name": name}, timeout)["deleted"]

    def publish(self, topic, payload, attachments=None, timeout=_DEFAULT_TIMEOUT):
        """Admits one message carrying attachments ({name: Artifact}: fan-out
        adds owners, never bytes); returns a Receipt."""
        atts, done = self._attachments(attachments)
        try:
            v = self._request("publish", {"topic": topic, "payload": _object(payload)}, timeout, attachments=atts)
        finally:
            done()
        return Receipt(int(v["topicSequence"]), int(v["subscribers"]), int(v["replaced"]))

    def subscribe(self, topic, mode="latest", queued=None, in_flight=None, replay=False, timeout=_DEFAULT_TIMEOUT):
        """Subscribes to a declared topic; returns a Subscription."""
        if mode not in ("latest", "bounded"):
            raise ValueError(f"mode is latest or bounded, not {mode!r}")
        lim = self.info["limits"]
        if queued is None:
            queued = 1 if mode == "latest" else lim["maxBoundedQueued"]
        if in_flight is None:
            in_flight = lim["maxLatestInFlight"] if mode == "latest" else lim["maxBoundedInFlight"]
        sub = Subscription(self, topic, in_flight)
        body = {"topic": topic, "mode": mode, "maxQueued": queued, "maxInFlight": in_flight, "replayLatest": replay}

        def known(v):
            sub.id, sub.topic_incarnation = v["subscriptionId"], v["topicIncarnation"]
            sub._credits.sub_id = sub.id
            with self._lock:
                self._subs[sub.id] = sub
            if self._watchdog is not None:
                self._watchdog.watch(sub._credits)

        # The reader registers the subscription before its first delivery;
        # subscribed after the caller gave up, nobody will read it.
        self._request("subscribe", body, timeout, orphan=lambda v, err: err is None and sub.close(), then=known)
        return sub

    # ---- RPC ---------------------------------------------------------

    def register(self, name, queued=16, in_flight=16, timeout=_DEFAULT_TIMEOUT):
        """Registers a service; returns a Service yielding its requests.
        queued and in_flight bound its calls waiting for dispatch and its
        requests not yet replied to."""
        svc = Service(self, name)
        with self._lock:
            if name in self._services:
                raise ValueError(f"service {name} is already registered on this client")
            self._services[name] = svc
        try:
            v = self._request("service.register", {"name": name, "maxQueued": queued, "maxInFlight": in_flight},
                              timeout)
        except BaseException:
            with self._lock:
                self._services.pop(name, None)
            raise
        svc.incarnation = v["serviceIncarnation"]
        return svc

    def call(self, target, method, payload, attachments=None, pin=None, timeout=_DEFAULT_TIMEOUT):
        """Admits a call carrying attachments ({name: Artifact}); returns a
        PendingCall. pin, a service incarnation, makes the call reach only
        that one (TARGET_CHANGED otherwise)."""
        atts, done = self._attachments(attachments)
        try:
            return self._call(target, method, payload, atts, pin, timeout)
        finally:
            done()

    def _call(self, target, method, payload, atts, pin, timeout):
        p = PendingCall(self)
        body = {"callId": "", "target": target, "expectedIncarnation": pin, "method": method,
                "payload": _object(payload)}
        w = _Waiter("rpc.call")
        with self._wlock:
            with self._lock:
                if self._lost is not None:
                    raise self._not_sent()
                self._next_call += 1
                p.id = body["callId"] = f"call-{self._next_call}"
                self._calls[p.id] = p
            frame = self._command_frame("rpc.call", body, w, attachments=atts)
            self._sock.sendall(frame)
        if not w.done.wait(timeout):
            raise TimeoutError("rpc.call was not answered within the timeout")
        if w.error is not None:
            with self._lock:
                self._calls.pop(p.id, None)
            raise w.error
        p.incarnation = w.value["serviceIncarnation"]
        return p


def _object(payload):
    if not isinstance(payload, dict):
        raise TypeError(f"a payload is a JSON object (a dict), not {type(payload).__name__}")
    return payload


Receipt = collections.namedtuple("Receipt", "topic_sequence subscribers replaced")


class _Delivery(Owning):
    """A delivery the program holds. It is consumed once this handle and
    every artifact taken from it are closed."""

    def __init__(self, client, delivery_id, attachments):
        self._client, self.delivery_id = client, delivery_id
        self._attachments = attachments
        self._guard = _Guard(delivery_id, lambda: client._consume(delivery_id))
        # Counted open once the program has it (_handed_out).
        self._own(client, type(self).__name__, self._release_fn(), delivery_id, opened=False)

    def _handed_out(self):
        self._client._handles.open(self._handle)

    def _release_fn(self):
        return self._guard.drop

    @property
    def attachments(self):
        return [a["name"] for a in self._attachments]

    def artifact(self, name):
        """The attached artifact name, sharing this delivery: take it before
        closing the delivery, close it when done."""
        if self._closed:
            raise ValueError("this delivery was already closed")
        for a in self._attachments:
            if a["name"] == name:
                if not self._guard.add():
                    raise ValueError("this delivery was already closed")
                return Artifact(self._client, a["ref"], self._guard)
        raise KeyError(f"no attachment {name!r} (it carries {self.attachments})")


class Message(_Delivery):
    def __init__(self, client, body, attachments):
        super().__init__(client, body["deliveryId"], attachments)
        self.topic = body["topic"]
        self.topic_incarnation = body["topicIncarnation"]
        self.topic_sequence = int(body["topicSequence"])
        self.replaced = int(body["replaced"])
        self.payload = body["payload"]
        self.subscription_id = body["subscriptionId"]


class _Stream(Closing):
    """What a subscription and a service share: a queue the reader fills,
    drained by next(timeout=) or by iterating until it is closed."""

    def __init__(self, client):
        self._client = client
        self._queue = _Queue()
        self._closed = False

    def next(self, timeout=None):
        d = self._queue.next(timeout)
        d._handed_out()
        return d

    def __iter__(self):
        while True:
            try:
                yield self.next()
            except ClosedError:
                return


class Subscription(_Stream):
    """One topic's messages: iterate, or next(timeout=)."""

    def __init__(self, client, topic, in_flight):
        super().__init__(client)
        self.topic = topic
        self.id = self.topic_incarnation = None
        w = client._watchdog
        self._credits = _handles.Credits(in_flight, w.poke if w is not None else None)
        self._credits.topic = topic

    def next(self, timeout=None):
        m = super().next(timeout)
        # The message holds one of the subscription's in-flight credits
        # until its delivery is consumed.
        credits, delivery_id = self._credits, m.delivery_id
        m._guard.after = lambda: credits.give_back(delivery_id)
        credits.take(delivery_id)
        return m

    def _unwatch(self):
        if self._client._watchdog is not None:
            self._client._watchdog.unwatch(self._credits)

    def close(self, timeout=_DEFAULT_TIMEOUT):
        if self._closed:
            return
        self._closed = True
        self._unwatch()
        with self._client._lock:
            self._client._subs.pop(self.id, None)
        for m in self._queue.close(ClosedError("subscription closed")):
            m.close()
        try:
            self._client._request("unsubscribe", {"subscriptionId": self.id}, timeout)
        except ClosedError:
            pass


class _ReplyCap:
    """A request's reply capability, shared by the Request and its
    Responders: one reply at most; the last of them to close without a
    reply releases the call (its caller sees CALL_GONE, dispatched)."""

    def __init__(self, client, call_id, delivery_id):
        self._client, self.call_id, self.delivery_id = client, call_id, delivery_id
        self._lock = threading.Lock()
        self._replied = False
        self._refs = _Guard(None, self._last_gone)

    def add(self):
        return self._refs.add()

    def drop(self):
        self._refs.drop()

    def _last_gone(self):
        with self._lock:
            replied = self._replied
        if not replied:
            self._client._fire("rpc.responder.release", {"callId": self.call_id, "requestDeliveryId": self.delivery_id})

    def reply(self, outcome, attachments, timeout):
        atts, done = self._client._attachments(attachments)
        try:
            v = self._client._request("rpc.reply", {"callId": self.call_id, "requestDeliveryId": self.delivery_id,
                                                    "outcome": _object(outcome)}, timeout, attachments=atts)
        finally:
            done()
        with self._lock:
            self._replied = True
        return v["routed"]


class Request(_Delivery):
    """A call delivered to a service. Closing it consumes the request."""

    def __init__(self, client, body, attachments):
        self._cap = _ReplyCap(client, body["callId"], body["deliveryId"])
        super().__init__(client, body["deliveryId"], attachments)
        self.call_id = body["callId"]
        self.method = body["method"]
        self.payload = body["payload"]
        self.caller = body["caller"]
        self.target = body["target"]
        self.service_incarnation = body["serviceIncarnation"]

    def _release_fn(self):
        # Closing the request, or collecting it unclosed, lets go of both:
        # the reply capability first, then the delivery.
        guard, cap = self._guard, self._cap
        return lambda: (cap.drop(), guard.drop())

    def reply(self, outcome, attachments=None, timeout=_DEFAULT_TIMEOUT):
        """Answers the call, with attachments ({name: Artifact}); returns
        whether the result was routed to a caller."""
        if self._closed:
            raise ValueError("this request was already closed; reply through a Responder taken before")
        return self._cap.reply(outcome, attachments, timeout)

    def responder(self):
        """A handle that can reply after the Request is closed (its delivery
        consumed, the service's credit returned). Close it when done."""
        if self._closed or not self._cap.add():
            raise ValueError("this request was already closed")
        return Responder(self._cap)

    def close(self):
        """Consumes the request; if neither it nor a Responder replied, the
        last of them to close releases the call."""
        super().close()


class Responder(Owning):
    """Replies to a request after the Request itself was closed."""

    def __init__(self, cap):
        self._cap = cap
        self.call_id = cap.call_id
        self._own(cap._client, "Responder", cap.drop, cap.delivery_id)

    def reply(self, outcome, attachments=None, timeout=_DEFAULT_TIMEOUT):
        if self._closed:
            raise ValueError("this responder was already closed")
        return self._cap.reply(outcome, attachments, timeout)


class Service(_Stream):
    """A registered service: iterate its requests, or next(timeout=)."""

    def __init__(self, client, name):
        super().__init__(client)
        self.name = name
        self.incarnation = None

    def close(self, timeout=_DEFAULT_TIMEOUT):
        if self._closed:
            return
        self._closed = True
        try:
            self._client._request("service.unregister", {"name": self.name, "serviceIncarnation": self.incarnation},
                                  timeout)
        except ClosedError:
            pass
        with self._client._lock:
            self._client._services.pop(self.name, None)
        for r in self._queue.close(ClosedError(f"service {self.name} closed")):
            r.close()


class Result(_Delivery):
    def __init__(self, client, body, attachments):
        super().__init__(client, body["deliveryId"], attachments)
        self.outcome = body["outcome"]
        self.responder = body["responder"]
        self.service_incarnation = body["serviceIncarnation"]


class PendingCall:
    """An admitted call. result(timeout=) may be called again after a timeout."""

    def __init__(self, client):
        self._client = client
        self.id = self.incarnation = None
        self._done = threading.Event()
        self._finished = threading.Lock()  # the reader and cancel() may both finish
        self._result = self._error = None

    def _finish(self, result, error):
        with self._finished:
            first = not self._done.is_set()
            if first:
                self._result, self._error = result, error
                self._done.set()
        if not first and result is not None:
            result.close()  # a second outcome: nobody will take it

    def result(self, timeout=None):
        """The call's Result (close it), or the BusError that ended the call."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.id} has no result yet")
        if self._error is not None:
            raise self._error
        self._result._handed_out()
        return self._result

    def cancel(self, timeout=_DEFAULT_TIMEOUT):
        """Asks the router to cancel; returns its state: "cancelled-before-dispatch",
        "execution-unknown", "completed" or "call-gone". Unless it completed,
        the call ends here: result() raises CallGone (not dispatched only
        when it was cancelled before dispatch)."""
        state = self._client._request("rpc.cancel", {"callId": self.id}, timeout)["state"]
        if state != "completed":
            with self._client._lock:
                if self._client._calls.get(self.id) is self:
                    del self._client._calls[self.id]
            dispatch = "not-dispatched" if state == "cancelled-before-dispatch" else "unknown"
            self._finish(None, BusError.of("CALL_GONE", "call cancelled: " + state, dispatch))
        return state
