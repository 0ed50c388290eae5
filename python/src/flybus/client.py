"""The client: a program's link to a router over its Unix socket.

A Client made by connect lives as long as its one connection; one made by
dial outlives connection loss and router restarts, over a connection after
another (see dial). Each connection (_Conn) has a reader thread that
decodes every router frame (strictly, see _wire) and hands it over without
running user code: replies complete waiters, deliveries go onto
per-subscription and per-service queues, notices settle calls. Any
violation of the router's side of the contract ends the connection with a
ProtocolError. Every method is safe to call from several threads; every
blocking call takes ``timeout=`` in seconds and raises TimeoutError without
cancelling anything.
"""

import collections
import logging
import os
import random
import secrets
import socket
import threading
import time

from . import _handles, _slots, _wire
from .artifacts import Artifact, ArtifactWriter, Closing, Owning, _Guard
from ._contract import CONTRACT_DIGEST
from .errors import (BusError, ClosedError, FlybusError, NoRouter, ProtocolError, RouterLost, StaleHandle,
                     StoreRootError, SubscriptionClosed)

_log = logging.getLogger("flybus")

_DEFAULT_TIMEOUT = 10.0

# The protocol extensions this client asks for at hello: subscriptions that
# wait for their topic's declaration, and publisher counts.
EXTENSIONS = ("await-topic", "presence")

# The client's own counters, in stats() from zero.
_COUNTERS = ("leaked", "control_errors", "stalled_subscriptions")

# Backoff between dials after a loss, as the Go SDK's: doubling from the
# first to the cap, with jitter so that the clients of one router do not
# all dial in step.
_FIRST_REDIAL = 0.05
_MAX_REDIAL = 2.0

# A router's shutdown closes every subscription with this reason just before
# the connection ends; a reconnecting client moves them to its next one.
_ROUTER_SHUTDOWN = "router-shutdown"

# Refusals at hello that waiting does not cure: dial gives up on them at once.
_FOR_GOOD = ("NOT_AUTHORIZED", "VERSION_MISMATCH", "INVALID_ENVELOPE")


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

    def drain(self):
        """Takes out everything queued, leaving the queue open."""
        with self._cond:
            left = list(self._items)
            self._items.clear()
        return left

    def next(self, timeout):
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self._closed is not None, timeout):
                raise TimeoutError("nothing arrived within the timeout")
            if self._items:
                return self._items.popleft()
            raise self._closed


def _left(deadline):
    """Seconds until deadline (a time.monotonic() value, or None: no end)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _deadline(timeout):
    return None if timeout is None else time.monotonic() + timeout


def connect(path, client_id, store_root=None, client_incarnation=None, timeout=_DEFAULT_TIMEOUT, map_per_view=False,
            track_handles=False, held_warn_after=5.0, logger=None):
    """Connects to the router listening on the Unix socket at path and says
    hello. The router's contract digest must equal this package's. The
    client lives as long as this one connection: once it is lost, every
    command raises RouterLost (dial makes a client that reconnects).

    From a pooled store on Python 3.12 or later, views are slices of a
    mapping the client keeps per slot; map_per_view=True maps every view of
    its own instead (as files mode and older Pythons always do).

    A subscription whose in-flight deliveries the program has all held
    unconsumed for held_warn_after seconds (a message or view it forgot to
    close) gets no more messages: the client logs a warning on its logger
    (logger, by default the "flybus" logger), once until a delivery is
    consumed, and counts it in stats()["stalled_subscriptions"]. 0 turns
    that off. track_handles=True (or FLYBUS_TRACK_HANDLES=1 in the
    environment) has every handle record where the program made it, and the
    warning name those places; it costs a look at the stack per handle.

    store_root, when given, must hold the router's store (a directory named
    its storeId): otherwise connect raises StoreRootError at once, rather
    than the first artifact failing later."""
    c = Client(path, client_id, store_root, client_incarnation, timeout, map_per_view, track_handles,
               held_warn_after, logger, reconnect=False)
    c._start(_deadline(timeout))
    return c


def dial(path, client_id, store_root=None, client_incarnation=None, timeout=_DEFAULT_TIMEOUT, map_per_view=False,
         track_handles=False, held_warn_after=5.0, logger=None):
    """Connects as connect does, and returns a Client that outlives
    connection loss and router restarts, as the Go SDK's client.Dial.

    At start it waits up to timeout seconds for a router to answer (a
    program may start before its router); it raises at once only a refusal
    for good (NotAuthorized, VersionMismatch, StoreRootError, or a
    ProtocolError: a router speaking another contract), and after
    timeout the last attempt's error (NoRouter when nothing listened).

    After a loss (the router stopped, crashed or cut the connection) it
    dials again with backoff (50 ms doubling to 2 s, with jitter), under a
    new client incarnation unless client_incarnation is given, then
    declares the topics it declared (with their retention), registers its
    services (with their limits; each gets a new incarnation) and
    subscribes its subscriptions again with their options and
    await_topic=True, so that a topic whose producer is not back yet is
    waited for. The same Subscription and Service objects go on delivering;
    what a subscription had queued from the lost connection but not handed
    out is dropped.

    Every other handle made on the lost connection (messages, requests,
    results, responders, artifacts, views, writers, pending calls) raises
    StaleHandle when used, and its close sends nothing. Nothing is ever
    sent again on its own: a command in flight at the loss raises RouterLost
    with dispatch "unknown"; a command made while the client reconnects
    waits for the new connection until its timeout, then raises RouterLost,
    not dispatched.

    client.state ("connected", "reconnecting" or "closed") and
    client.wait_state() follow the connection, client.reconnects (also in
    stats()) counts reconnections, and the client logs each loss (warning)
    and reconnection (info) on its logger. close() ends it for good."""
    c = Client(path, client_id, store_root, client_incarnation, timeout, map_per_view, track_handles,
               held_warn_after, logger, reconnect=True)
    c._start(_deadline(timeout))
    return c


def _refused_for_good(err):
    """A refusal at connect that dialling again does not cure: the
    identity, the version or the contract, the envelope, or a store_root
    without the router's store. A full router may clear."""
    return (isinstance(err, (StoreRootError, ProtocolError)) or isinstance(err, BusError) and err.code in _FOR_GOOD)


class Client(Closing):
    """A program's link to a router, made by connect or dial. Use it as a
    context manager, or close it.

    state is "connected", "reconnecting" (a dial client between
    connections) or "closed" (closed by the program, or a connect client
    whose connection ended); wait_state waits for it. reconnects counts the
    reconnections of a dial client. info, extensions and client_incarnation
    are the current connection's."""

    def __init__(self, path, client_id, store_root, client_incarnation, timeout, map_per_view, track_handles,
                 held_warn_after, logger, reconnect):
        self.path, self.client_id, self.store_root = path, client_id, store_root
        self._incarnation = client_incarnation
        self._timeout = timeout
        self._map_per_view = map_per_view
        self._reconnect = reconnect
        self._log = logger or _log
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stats = dict.fromkeys(_COUNTERS, 0)
        self._handles = _handles.HandleTable(track_handles or _handles.tracking_from_env())
        self._watchdog = None
        if held_warn_after and held_warn_after > 0:
            self._watchdog = _handles.Watchdog(held_warn_after, self._stalled, f"flybus-watchdog-{client_id}")
        self._state = "reconnecting"
        self._closed = False
        self._cur = None
        self._last_err = None
        self.reconnects = 0
        # What a dial client restores on each new connection: topic name to
        # (retention, the connection it was last declared on), and the
        # subscriptions and services the program has open.
        self._topics = {}
        self._subs = set()
        self._services = set()
        self._stop = threading.Event()  # set by close: redialling ends
        self._dialling = None  # the socket of a dial under way, for close to cut
        self._restoring = None  # the new connection while it is restored
        self._supervisor = None
        # Slot caches of lost connections, counted in stats() until every
        # mapping they made is gone; then folded into these sums.
        self._past_slots = []
        self._folded = dict.fromkeys(("slot_hits", "slot_maps", "slot_unmaps"), 0)

    def _start(self, deadline):
        try:
            cn = self._redial(deadline, first=True) if self._reconnect else self._open(self._timeout)
        except BaseException:
            if self._watchdog is not None:
                self._watchdog.stop()
            raise
        with self._cond:
            # Lost already, its _conn_lost did not know it as the client's.
            self._cur, self._state = cn, "connected" if cn._lost is None else self._after_loss()
            self._last_err = cn._lost
        if not self._reconnect:
            return
        self._supervisor = threading.Thread(target=self._supervise, name=f"flybus-redial-{self.client_id}",
                                            daemon=True)
        self._supervisor.start()

    # ---- state ---------------------------------------------------------

    @property
    def state(self):
        """"connected", "reconnecting" or "closed"."""
        with self._lock:
            return self._state

    def wait_state(self, state, timeout=None):
        """Waits until state is the client's state and returns it; raises
        TimeoutError, or ClosedError if the client closed while waiting for
        another state."""
        if state not in ("connected", "reconnecting", "closed"):
            raise ValueError(f"state is connected, reconnecting or closed, not {state!r}")
        with self._cond:
            if not self._cond.wait_for(lambda: self._state in (state, "closed"), timeout):
                raise TimeoutError(f"the client did not become {state} within the timeout (it is {self._state})")
            if self._state != state:
                raise ClosedError(f"the client closed while waiting for it to become {state}")
            return state

    @property
    def info(self):
        """The current connection's hello reply (routerId, limits, storeId...)."""
        return self._cur.info

    @property
    def extensions(self):
        """The protocol extensions the current connection's router granted."""
        return self._cur.extensions

    @property
    def client_incarnation(self):
        return self._cur.client_incarnation

    # The current connection's parts, for tests that cut or watch it.
    @property
    def _sock(self):
        return self._cur._sock

    @property
    def _thread(self):
        return self._cur._thread

    @property
    def _slots(self):
        return self._cur._slots

    # ---- connections ---------------------------------------------------

    def _open(self, timeout):
        """Dials the socket and says hello: a new connection."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            if self._closed:
                sock.close()
                raise ClosedError("the client was closed")
            self._dialling = sock
        try:
            try:
                sock.settimeout(timeout)
                sock.connect(self.path)
                sock.settimeout(None)
            except (FileNotFoundError, ConnectionRefusedError) as e:
                sock.close()
                raise NoRouter(f"no router is listening on {self.path} (is flybus serve running, with --listen "
                               f"{self.path}?): {e}") from e
            except BaseException:
                sock.close()
                raise
            return _Conn(self, sock, self._incarnation or f"py-{os.getpid()}-{secrets.token_hex(6)}", timeout,
                         keep=self._reconnect)
        finally:
            with self._lock:
                self._dialling = None

    def _redial(self, deadline, first=False):
        """Dials until a router answers; None once the client is closed.
        first is dial itself, which gives up at deadline (raising the last
        attempt's error) or at a refusal for good."""
        wait, last, attempt = _FIRST_REDIAL, None, 0
        while True:
            if attempt or not first:
                pause = wait / 2 + random.uniform(0, wait / 2)
                if deadline is not None:
                    pause = min(pause, _left(deadline))
                if self._stop.wait(pause):
                    return None
                wait = min(2 * wait, _MAX_REDIAL)
            if first and attempt and _left(deadline) == 0:
                raise last
            attempt += 1
            left = _left(deadline)
            try:
                return self._open(self._timeout if left is None else
                                  left if self._timeout is None else min(left, self._timeout))
            except Exception as e:  # anything a dial or a hello can raise: try again
                if self._stop.is_set():
                    return None
                if first and _refused_for_good(e):
                    raise
                last = e
                if not first:
                    self._log.debug("flybus: client %s could not reconnect yet (%s); trying again in about %.2f s",
                                    self.client_id, e, min(2 * wait, _MAX_REDIAL))

    def _after_loss(self):
        return "reconnecting" if self._reconnect else "closed"

    def _conn_lost(self, cn, err):
        """A connection has ended (its reader or a writer saw it): a dial
        client whose current connection it was starts reconnecting; a
        connect client is closed."""
        with self._cond:
            lost = cn is self._cur and self._state == "connected"
            if lost:
                self._state, self._last_err = self._after_loss(), err
            self._cond.notify_all()
        if lost and self._reconnect:
            self._log.warning("flybus: client %s lost the router (%s); reconnecting", self.client_id, err,
                              extra={"client": self.client_id, "error": str(err)})

    def _supervise(self):
        """A dial client's thread: waits for each loss and replaces the
        connection, until close."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._state != "connected")
                if self._state == "closed":
                    return
                old = self._cur
            old._dispose()
            while True:
                cn = self._redial(None)
                if cn is None:
                    return
                with self._cond:
                    closed = self._closed
                    if not closed:
                        self._restoring = cn
                if closed:
                    cn.close()
                    return
                try:
                    ok = self._restore(cn)
                except Exception as e:  # a bug of ours, not the router's: try afresh on another connection
                    self._log.error("flybus: client %s failed to restore its state after reconnecting: %r",
                                    self.client_id, e)
                    cn._fail(BusError.of("ROUTER_LOST", f"restoring after a reconnect failed: {e!r}", "unknown"))
                    ok = False
                if ok:
                    break
                with self._cond:
                    self._restoring = None
                    if self._closed:
                        return
                cn._dispose()

    def _restore(self, cn):
        """Declares, registers and subscribes again on cn what the program
        still has, then makes cn the client's connection. It loops until
        everything is on cn (a handle made on the lost connection just
        before the loss is restored too). False when cn was lost, or the
        client closed, meanwhile."""
        while True:
            with self._cond:
                if self._closed:
                    return False
                topics = [(name, r) for name, (r, on) in self._topics.items() if on is not cn]
                services = [s for s in self._services if s._conn is not cn]
                subs = [s for s in self._subs if s._conn is not cn]
                if not (topics or services or subs):
                    if self._cur._slots is not None:
                        self._past_slots.append(self._cur._slots)
                    self._cur, self._restoring = cn, None
                    self.reconnects += 1
                    self._state, self._last_err = "connected", None
                    self._cond.notify_all()
                    n = self.reconnects
                    break
            # Topics first, so that subscriptions find them.
            for name, retained in topics:
                try:
                    cn._declare(name, retained, None)
                except FlybusError as e:
                    if not self._refused(cn, e, f"declare topic {name}"):
                        return False
                    with self._lock:
                        if name in self._topics:
                            self._topics[name] = (self._topics[name][0], cn)
            for s in services:
                try:
                    cn._register(s, None)
                except FlybusError as e:
                    if not self._refused(cn, e, f"register {s.name}"):
                        return False
                    self._forget(s)
                    for r in s._queue.close(ClosedError(f"service {s.name} could not be registered again after a "
                                                        f"reconnect: {e}")):
                        r.close()
            for s in subs:
                try:
                    cn._subscribe(s, "await-topic" in cn.extensions, None)
                except FlybusError as e:
                    if not self._refused(cn, e, f"subscribe to {s.topic}"):
                        return False
                    self._forget(s)
                    s._unwatch()
                    err = SubscriptionClosed(f"the subscription to {s.topic} could not be made again after a "
                                             f"reconnect: {e}")
                    err.reason = "not-restored"
                    for m in s._queue.close(err):
                        m.close()
        self._log.info("flybus: client %s reconnected (connection %s, reconnect %d)", self.client_id,
                       cn.info["connectionId"], n, extra={"client": self.client_id, "reconnects": n})
        return True

    def _refused(self, cn, err, what):
        """Whether err is the router's answer (the connection lives and
        restoring goes on without that handle), logged; False when the
        connection was lost."""
        if not isinstance(err, BusError) or isinstance(err, RouterLost) or cn._lost is not None:
            return False
        self._log.warning("flybus: after reconnecting, the router refused to %s: %s", what, err)
        return True

    def _adopt(self, h):
        """Records a dial client's new subscription or service for restoring."""
        with self._lock:
            if not self._closed and not h._closed:
                (self._subs if isinstance(h, Subscription) else self._services).add(h)

    def _forget(self, h):
        with self._lock:
            self._subs.discard(h)
            self._services.discard(h)

    def _declared(self, name, retained, cn):
        with self._lock:
            self._topics[name] = (retained, cn)

    def _connection(self, deadline):
        """The connection for a command: the current one, or while a dial
        client reconnects, the next one, waited for until deadline."""
        with self._cond:
            while True:
                # A loss its _conn_lost has not reported yet is waited for
                # too: it notifies once it has.
                if not self._reconnect or self._state == "connected" and self._cur._lost is None:
                    return self._cur
                if self._closed:
                    raise ClosedError("the client was closed")
                left = _left(deadline)
                if left == 0:
                    raise BusError.of("ROUTER_LOST", f"the client was still reconnecting to the router at the "
                                                     f"command's timeout (lost: {self._last_err}); not sent")
                self._cond.wait(left)

    def _on(self, timeout, fn):
        """fn(connection, timeout) on the connection for a command. A dial
        client's connection lost before the command left is the same as one
        lost before it was chosen: the command waits for the next."""
        if not self._reconnect:
            return fn(self._cur, timeout)
        deadline = _deadline(timeout)
        while True:
            cn = self._connection(deadline)
            try:
                return fn(cn, _left(deadline))
            except StaleHandle as e:
                if e._from is not cn:
                    raise  # a handle the program passed in is stale

    # ---- lifetime ----------------------------------------------------

    def close(self, timeout=5.0):
        """Shuts the write side and waits (up to timeout) until the router has
        closed its side, having released everything this connection held.
        A dial client stops reconnecting, for good. Its subscriptions and
        services then raise ClosedError. Idempotent."""
        with self._cond:
            self._closed = True
            self._state = "closed"
            self._cond.notify_all()
            cur, restoring, dialling = self._cur, self._restoring, self._dialling
            subs, services = list(self._subs), list(self._services)
            self._subs.clear()
            self._services.clear()
        self._stop.set()
        if dialling is not None:
            try:
                dialling.shutdown(socket.SHUT_RDWR)  # a hello under way ends now
            except OSError:
                pass
        if restoring is not None:
            restoring.close(timeout)
        if cur is not None:
            cur.close(timeout)
        _join(self._supervisor, timeout)
        # Between connections they are in no connection's tables.
        closed = ClosedError("the client was closed")
        for s in subs:
            s._unwatch()
            for m in s._queue.close(closed):
                m.close()
        for s in services:
            for r in s._queue.close(closed):
                r.close()
        if self._watchdog is not None:
            self._watchdog.stop()

    def stats(self):
        """Counters of what the client did on the program's behalf, zeros
        included: handles collected unclosed ("leaked"), fire-and-forget
        commands the router refused ("control_errors"), warnings of
        subscriptions stalled by held deliveries ("stalled_subscriptions"),
        reconnections of a dial client ("reconnects"); and, with cached
        slot mappings, the cache's: slots mapped now, views served from it,
        slots mapped and unmapped (over every connection)."""
        with self._lock:
            out = dict(self._stats)
            out["reconnects"] = self.reconnects
            cur = self._cur._slots
            past = list(self._past_slots)
        if cur is None:
            return out
        out.update(cur.stats())
        for cache in past:
            st = cache.stats()
            done = st["slot_maps"] == st["slot_unmaps"]
            with self._lock:
                if done and cache in self._past_slots:
                    self._past_slots.remove(cache)
                    for k in self._folded:
                        self._folded[k] += st[k]
                    continue
            if not done:
                for k in self._folded:
                    out[k] += st[k]
        with self._lock:
            for k, v in self._folded.items():
                out[k] += v
        return out

    def _count(self, key, n=1):
        with self._lock:
            self._stats[key] += n

    def _stalled(self, credits, held_for):
        """The watchdog's warning: credits' subscription has held all its
        in-flight deliveries for held_for seconds. The record also carries
        the parts as attributes (subscription, topic, credits, handles,
        client, and sites or a hint)."""
        if self._closed:
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
        self._log.warning("flybus: subscription %s on topic %s has held all %d in-flight credits unconsumed for %s; "
                          "%d handles are open%s", credits.sub_id, credits.topic, len(held),
                          _handles.go_duration(held_for), open_handles, sites, extra=extra)

    # ---- commands ----------------------------------------------------

    def allocate(self, size, content_type, timeout=_DEFAULT_TIMEOUT):
        """Reserves a staging file of exactly size bytes (zeros until
        written) and returns its writer."""
        return self._on(timeout, lambda cn, t: cn.allocate(size, content_type, t))

    def declare_topic(self, name, retained="none", timeout=_DEFAULT_TIMEOUT):
        """Declares a topic (idempotent); returns {"declared", "topicIncarnation"}.
        A dial client declares it again on each new connection."""
        return self._on(timeout, lambda cn, t: cn._declare(name, retained, t))

    def clear_topic(self, name, timeout=_DEFAULT_TIMEOUT):
        """Releases the topic's retained value; returns whether there was one."""
        return self._on(timeout, lambda cn, t: cn._request("topic.clear", {"name": name}, t)["cleared"])

    def delete_topic(self, name, timeout=_DEFAULT_TIMEOUT):
        """Deletes a topic without subscribers; returns False for a topic
        that did not exist. A dial client no longer declares it after a
        reconnect."""
        with self._lock:
            self._topics.pop(name, None)
        return self._on(timeout, lambda cn, t: cn._request("topic.delete", {"name": name}, t)["deleted"])

    def publish(self, topic, payload, attachments=None, timeout=_DEFAULT_TIMEOUT):
        """Admits one message carrying attachments ({name: Artifact}: fan-out
        adds owners, never bytes); returns a Receipt."""
        return self._on(timeout, lambda cn, t: cn.publish(topic, payload, attachments, t))

    def subscribe(self, topic, mode="latest", queued=None, in_flight=None, replay=False, await_topic=False,
                  timeout=_DEFAULT_TIMEOUT):
        """Subscribes to a topic; returns a Subscription. The topic must be
        declared (NoTopic otherwise) unless await_topic: then the
        subscription waits for the declaration, with topic_incarnation None
        until it comes, and gets every message published after it. Across a
        deletion it waits again for the next declaration. A dial client
        subscribes it again on each new connection, awaiting its topic."""
        if mode not in ("latest", "bounded"):
            raise ValueError(f"mode is latest or bounded, not {mode!r}")

        def on(cn, t):
            if await_topic and "await-topic" not in cn.extensions:
                raise FlybusError("this router did not grant extension await-topic: it cannot wait for a topic")
            lim = cn.info["limits"]
            q = queued if queued is not None else 1 if mode == "latest" else lim["maxBoundedQueued"]
            f = in_flight if in_flight is not None else (lim["maxLatestInFlight"] if mode == "latest"
                                                         else lim["maxBoundedInFlight"])
            sub = Subscription(self, topic, mode, q, f, replay)
            cn._subscribe(sub, await_topic, t)
            return sub

        return self._on(timeout, on)

    def register(self, name, queued=16, in_flight=16, timeout=_DEFAULT_TIMEOUT):
        """Registers a service; returns a Service yielding its requests.
        queued and in_flight bound its calls waiting for dispatch and its
        requests not yet replied to. A dial client registers it again on
        each new connection, where it gets a new incarnation."""
        with self._lock:
            if any(s.name == name for s in self._services):
                raise ValueError(f"service {name} is already registered on this client")
        return self._on(timeout, lambda cn, t: cn._register(Service(self, name, queued, in_flight), t))

    def call(self, target, method, payload, attachments=None, pin=None, timeout=_DEFAULT_TIMEOUT):
        """Admits a call carrying attachments ({name: Artifact}); returns a
        PendingCall. pin, a service incarnation, makes the call reach only
        that one (TARGET_CHANGED otherwise)."""
        return self._on(timeout, lambda cn, t: cn.call(target, method, payload, attachments, pin, t))


class _Conn:
    """One connection to a router: its socket, its reader thread and what
    the router knows of it. Handles made on it belong to it; once it is
    lost they fail (a dial client's with StaleHandle)."""

    def __init__(self, owner, sock, client_incarnation, timeout, keep):
        self._owner = owner
        # keep: the owner moves subscriptions and services on after a loss.
        self._keep = keep
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
        self._handles = owner._handles
        self._watchdog = owner._watchdog
        self._slots = _slots.SlotCache() if _slots.CAN_COUNT_EXPORTS and not owner._map_per_view else None
        self.store_root = owner.store_root
        self.client_id = owner.client_id
        self.client_incarnation = client_incarnation
        hello = {"clientId": self.client_id, "clientIncarnation": client_incarnation, "supportedMajors": [1],
                 "extensions": list(EXTENSIONS)}
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
            _check_store_root(self.store_root, info["storeId"])
        except _wire.WireError as e:
            self._abandon()
            raise ProtocolError(f"the router's hello reply broke the contract: {e}") from None
        except BaseException:
            self._abandon()
            raise
        self.info = info
        # The extensions the router granted: this client uses only those.
        self.extensions = tuple(info["extensions"])
        self._thread = threading.Thread(target=self._read_loop, name=f"flybus-reader-{self.client_id}", daemon=True)
        self._thread.start()

    def _abandon(self):
        """A connection that never came up: nothing of it is kept."""
        self._sock.close()
        if self._slots is not None:
            self._slots.close()

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
        _join(self._thread, timeout)
        self._fail(ClosedError("the client was closed"))
        self._dispose(0)

    def _dispose(self, timeout=5.0):
        """Lets go of what the client holds of a connection that has ended:
        its reader, its socket, its cached slot mappings (views still open
        keep their slot mapped). Its handles stay as they are."""
        _join(self._thread, timeout)
        self._sock.close()
        if self._slots is not None:
            self._slots.close()

    def _stale(self):
        """StaleHandle once a dial client has lost this connection (not
        closed it), else None: handles that work without a round trip ask."""
        with self._lock:
            return self._stale_locked()

    def _stale_locked(self):
        lost = self._lost
        if not self._keep or lost is None or self._closing:
            return None
        e = StaleHandle("this handle belongs to a connection the client has lost (it reconnects on its own; "
                        f"the handle does not come back): {lost.message if isinstance(lost, BusError) else lost}; "
                        "not sent")
        e._from = self
        return e

    def _fail(self, err):
        with self._lock:
            if self._lost is not None:
                return
            if self._closing and not isinstance(err, ProtocolError):
                err = ClosedError("the client was closed")
            self._lost = err
            keep = self._keep and not self._closing
            waiters, self._waiters = self._waiters, {}
            subs, self._subs = self._subs, {}
            services, self._services = self._services, {}
            calls, self._calls = self._calls, {}
        if self._watchdog is not None and not self._keep:
            self._watchdog.stop()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for w in waiters.values():
            w.error = err
            w.done.set()
        for p in calls.values():
            p._finish(None, err)
        if keep:
            # The subscriptions and services move on to the next connection;
            # what they queued from this one is dropped (closing a delivery
            # of a lost connection sends nothing).
            for s in subs.values():
                s._unwatch()
                for m in s._queue.drain():
                    m.close()
            for s in services.values():
                for r in s._queue.drain():
                    r.close()
        else:
            for s in subs.values():
                s._unwatch()
                for m in s._queue.close(err):
                    m.close()
            for s in services.values():
                for r in s._queue.close(err):
                    r.close()
        self._owner._conn_lost(self, err)

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
        stale = self._stale_locked()
        if stale is not None:
            return stale
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
            self._sendall(frame)

    def _sendall(self, frame):
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
        self._owner._count(key, n)

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
            # Sent to callers of a registration that ended; it ends this
            # client's own service only if it names that very registration.
            with self._lock:
                s = self._services.get(body["name"])
                if s is not None and s.incarnation == body["serviceIncarnation"]:
                    del self._services[body["name"]]
                else:
                    s = None
            if s is not None:
                self._owner._forget(s)
                for r in s._queue.close(ClosedError(f"service {body['name']} removed: {body['reason']}")):
                    r.close()
        elif op == "subscription.closed":
            if self._keep and body["reason"] == _ROUTER_SHUTDOWN:
                return  # the connection ends next; the subscription moves on to the next one
            with self._lock:
                s = self._subs.pop(body["subscriptionId"], None)
            if s is not None:
                self._owner._forget(s)
                s._unwatch()
                err = SubscriptionClosed(f"the router closed subscription {s.id} of {s.topic}: {body['reason']}")
                err.reason = body["reason"]
                for m in s._queue.close(err):
                    m.close()
        elif op == "subscription.topic":
            with self._lock:
                s = self._subs.get(body["subscriptionId"])
            if s is not None:
                s._set(topic_incarnation=body["topicIncarnation"])
        elif op == "subscription.publishers":
            with self._lock:
                s = self._subs.get(body["subscriptionId"])
            if s is not None:
                s._set(publishers=body["publishers"])
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

    def _declare(self, name, retained, timeout):
        """Declares a topic; a dial client records it for its next
        connections as the answer is dispatched."""
        then = (lambda v: self._owner._declared(name, retained, self)) if self._keep else None
        return self._request("topic.declare", {"name": name, "retained": retained}, timeout, then=then)

    def publish(self, topic, payload, attachments, timeout):
        atts, done = self._attachments(attachments)
        try:
            v = self._request("publish", {"topic": topic, "payload": _object(payload)}, timeout, attachments=atts)
        finally:
            done()
        return Receipt(int(v["topicSequence"]), int(v["subscribers"]), int(v["replaced"]))

    def _subscribe(self, sub, await_topic, timeout):
        """Subscribes sub (new, or moving on from a lost connection) here."""
        body = {"topic": sub.topic, "mode": sub.mode, "maxQueued": sub.queued, "maxInFlight": sub.in_flight,
                "replayLatest": sub.replay}
        if await_topic:
            body["awaitTopic"] = True
        w = self._watchdog

        def known(v):
            credits = _handles.Credits(sub.in_flight, w.poke if w is not None else None)
            credits.topic, credits.sub_id = sub.topic, v["subscriptionId"]
            sub._credits = credits
            sub.id, sub._conn = v["subscriptionId"], self
            # What the old router said of publishers no longer holds.
            sub._set(topic_incarnation=v["topicIncarnation"], publishers=None)
            with self._lock:
                self._subs[sub.id] = sub
            if w is not None:
                w.watch(credits)
            if self._keep:
                self._owner._adopt(sub)

        # The reader registers the subscription before its first delivery;
        # subscribed after the caller gave up, nobody will read it.
        self._request("subscribe", body, timeout, orphan=lambda v, err: err is None and sub.close(), then=known)
        if sub._closed:  # closed while it was being made again here
            with self._lock:
                if self._subs.get(sub.id) is sub:
                    del self._subs[sub.id]
            self._fire("unsubscribe", {"subscriptionId": sub.id})
        return sub

    # ---- RPC ---------------------------------------------------------

    def _register(self, svc, timeout):
        """Registers svc (new, or moving on from a lost connection) here."""
        with self._lock:
            if svc.name in self._services:
                raise ValueError(f"service {svc.name} is already registered on this client")
            self._services[svc.name] = svc

        def known(v):
            svc.incarnation, svc._conn = v["serviceIncarnation"], self
            if self._keep:
                self._owner._adopt(svc)

        try:
            self._request("service.register", {"name": svc.name, "maxQueued": svc.queued,
                                               "maxInFlight": svc.in_flight}, timeout, then=known)
        except BaseException:
            with self._lock:
                if self._services.get(svc.name) is svc:
                    del self._services[svc.name]
            raise
        if svc._closed:  # closed while it was being registered again here
            self._fire("service.unregister", {"name": svc.name, "serviceIncarnation": svc.incarnation})
            with self._lock:
                if self._services.get(svc.name) is svc:
                    del self._services[svc.name]
        return svc

    def call(self, target, method, payload, attachments, pin, timeout):
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
            self._sendall(frame)
        if not w.done.wait(timeout):
            raise TimeoutError("rpc.call was not answered within the timeout")
        if w.error is not None:
            with self._lock:
                self._calls.pop(p.id, None)
            raise w.error
        p.incarnation = w.value["serviceIncarnation"]
        return p


def _join(thread, timeout):
    # A close may come from the thread itself: a log handler, or a
    # callback the reader runs.
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)


def _check_store_root(store_root, store_id):
    """Raises StoreRootError unless store_root (when given) holds the
    router's store, the directory store_id."""
    if not store_root:
        return
    if not os.path.isdir(os.path.join(store_root, store_id)):
        raise StoreRootError(
            f"store_root {store_root!r} does not hold this router's store {store_id}: pass the directory the "
            f"router was started with (flybus serve --store DIR), which holds {store_id}/", store_root, store_id)


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
        stale = self._client._stale()
        if stale is not None:
            raise stale
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
    drained by next(timeout=) or by iterating until it is closed. A dial
    client moves it from connection to connection (_conn is the one it is
    on now)."""

    def __init__(self, owner):
        self._owner = owner
        self._conn = None
        self._queue = _Queue()
        self._closed = False

    def next(self, timeout=None):
        deadline = _deadline(timeout)
        while True:
            d = self._queue.next(_left(deadline))
            cn = d._client
            if cn._lost is None or cn._stale() is None:
                break
            # Queued by a connection lost just now: dropped, as the rest of its queue.
            d.close()
        d._handed_out()
        return d

    def __iter__(self):
        while True:
            try:
                yield self.next()
            except ClosedError:
                return


class Subscription(_Stream):
    """One topic's messages: iterate, or next(timeout=).

    topic_incarnation is the topic's current incarnation, None while the
    subscription awaits its declaration (subscribe(await_topic=True)).
    publishers is the topic's count of live publishers (open connections
    that published on its current incarnation), as the router last said;
    None before it said. wait_publishers and wait_topic wait for a change
    without polling. A dial client's subscription is made again on each
    new connection (id then changes)."""

    def __init__(self, owner, topic, mode, queued, in_flight, replay):
        super().__init__(owner)
        self.topic, self.mode, self.queued, self.in_flight, self.replay = topic, mode, queued, in_flight, replay
        self.id = self.topic_incarnation = self.publishers = None
        self._credits = None

    def _set(self, **state):
        """The reader records what a reply or notice said, and wakes waiters."""
        with self._queue._cond:
            for k, v in state.items():
                setattr(self, k, v)
            self._queue._cond.notify_all()

    def _wait_state(self, ready, what, timeout):
        with self._queue._cond:
            if not self._queue._cond.wait_for(lambda: ready() or self._queue._closed is not None, timeout):
                raise TimeoutError(f"{what} within the timeout")
            if not ready():
                raise self._queue._closed

    def wait_publishers(self, pred, timeout=None):
        """Waits until pred(publishers) holds for the router's latest count
        and returns the count: wait_publishers(lambda n: n == 0) returns once
        no live publisher is left. Raises TimeoutError, or the subscription's
        end."""
        self._wait_state(lambda: self.publishers is not None and pred(self.publishers),
                         f"the publishers of {self.topic} did not reach the condition", timeout)
        return self.publishers

    def wait_topic(self, timeout=None, declared=True):
        """Waits until the topic is declared and returns its incarnation;
        with declared=False, until it is deleted (and the subscription
        awaits the next declaration)."""
        self._wait_state(lambda: (self.topic_incarnation is not None) == declared,
                         f"{self.topic} was not {'declared' if declared else 'deleted'}", timeout)
        return self.topic_incarnation

    def next(self, timeout=None):
        m = super().next(timeout)
        # The message holds one of the subscription's in-flight credits
        # until its delivery is consumed.
        credits, delivery_id = self._credits, m.delivery_id
        m._guard.after = lambda: credits.give_back(delivery_id)
        credits.take(delivery_id)
        return m

    def _unwatch(self):
        w = self._owner._watchdog
        if w is not None and self._credits is not None:
            w.unwatch(self._credits)

    def close(self, timeout=_DEFAULT_TIMEOUT):
        if self._closed:
            return
        self._closed = True
        self._owner._forget(self)
        self._unwatch()
        cn = self._conn
        if cn is not None:
            with cn._lock:
                if cn._subs.get(self.id) is self:
                    del cn._subs[self.id]
        for m in self._queue.close(ClosedError("subscription closed")):
            m.close()
        if cn is not None:
            try:
                cn._request("unsubscribe", {"subscriptionId": self.id}, timeout)
            except (ClosedError, RouterLost):
                pass  # its connection is gone, and the subscription with it


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
        if self._closed:
            raise ValueError("this request was already closed")
        stale = self._client._stale()
        if stale is not None:
            raise stale
        if not self._cap.add():
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
    """A registered service: iterate its requests, or next(timeout=). A
    dial client registers it again on each new connection, where it gets
    a new incarnation."""

    def __init__(self, owner, name, queued, in_flight):
        super().__init__(owner)
        self.name, self.queued, self.in_flight = name, queued, in_flight
        self.incarnation = None

    def close(self, timeout=_DEFAULT_TIMEOUT):
        if self._closed:
            return
        self._closed = True
        self._owner._forget(self)
        cn = self._conn
        if cn is not None:
            try:
                cn._request("service.unregister", {"name": self.name, "serviceIncarnation": self.incarnation},
                            timeout)
            except (ClosedError, RouterLost):
                pass  # its connection is gone, and the registration with it
            with cn._lock:
                if cn._services.get(self.name) is self:
                    del cn._services[self.name]
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
        """The call's Result (close it), or the BusError that ended the call:
        RouterLost with dispatch "unknown" when the connection was lost
        before the result came."""
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
