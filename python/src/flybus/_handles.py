"""What the client knows of the handles the program holds, so that a
forgotten one is reported instead of silently stalling a subscription.

Every owning handle (a message, request or result once the program has it,
an artifact, a view, a writer, a responder) is open from when the program
gets it until it is closed or collected. HandleTable counts them; with
tracking on (connect(track_handles=True), or FLYBUS_TRACK_HANDLES=1 in the
environment) it also keeps each open handle's creation site, the first
frame outside this package.

The router sends a subscription at most its maxInFlight deliveries that
are not yet consumed. When the program holds all of them unconsumed (a
message or a view it forgot to close), the subscription goes silent
without an error. Credits counts the deliveries the program holds per
subscription; the Watchdog thread logs one warning per episode in which a
subscription has held all of them longer than the bound. An episode ends
when a delivery is consumed. Per delivery this is a few constant-time
updates; the watchdog sleeps until a subscription fills up and then until
the deadline of the one that filled first.
"""

import os
import sys
import threading
import time

ENV_TRACK = "FLYBUS_TRACK_HANDLES"

_PACKAGE_DIR = os.path.dirname(__file__) + os.sep

_PENDING, _OPEN, _DONE = 0, 1, 2

# A warning names at most this many places where handles were made.
_MAX_SITES = 5


def tracking_from_env():
    return os.environ.get(ENV_TRACK) == "1"


def caller_site():
    """The "file:line in function" of the nearest caller outside this package."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
        f = f.f_back
    if f is None:
        return "an unknown place"
    return f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"


class Handle:
    """One handle's entry: pending until the program has the handle, then
    open until it is closed or collected, then done."""

    __slots__ = ("what", "owner", "site", "state")

    def __init__(self, what, owner):
        self.what, self.owner, self.site, self.state = what, owner, None, _PENDING


class HandleTable:
    """The client's open handles: how many, and where each was made when
    tracking."""

    def __init__(self, track):
        self.track = track
        self._lock = threading.Lock()
        self._count = 0
        self._live = set() if track else None

    def new(self, what, owner, opened=True):
        """An entry for a handle; open now unless the program gets the
        handle later (a delivery queued for it): open() then."""
        h = Handle(what, owner)
        if opened:
            self.open(h)
        return h

    def open(self, h):
        site = caller_site() if self.track else None
        with self._lock:
            if h.state != _PENDING:
                return
            h.state, h.site = _OPEN, site
            self._count += 1
            if self._live is not None:
                self._live.add(h)

    def close(self, h):
        with self._lock:
            was, h.state = h.state, _DONE
            if was == _OPEN:
                self._count -= 1
                if self._live is not None:
                    self._live.discard(h)

    def count(self):
        with self._lock:
            return self._count

    def sites(self, owners):
        """Where the open handles of owners (ids of deliveries and holds)
        were made: "what at site", the places with the most handles first,
        at most _MAX_SITES of them."""
        if self._live is None:
            return []
        counted = {}
        with self._lock:
            for h in self._live:
                if h.owner in owners:
                    key = f"{h.what} at {h.site}"
                    counted[key] = counted.get(key, 0) + 1
        places = sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))
        out = [k if n == 1 else f"{k} ({n} handles)" for k, n in places[:_MAX_SITES]]
        if len(places) > _MAX_SITES:
            out.append(f"and {sum(n for _, n in places[_MAX_SITES:])} more handles elsewhere")
        return out


class Credits:
    """A subscription's deliveries the program holds unconsumed, and since
    when they have been all of its maxInFlight."""

    __slots__ = ("limit", "sub_id", "topic", "held", "full_since", "warned", "lock", "_poke")

    def __init__(self, limit, poke):
        self.limit, self._poke = limit, poke
        self.sub_id = self.topic = None
        self.held = set()
        self.full_since = None
        self.warned = False
        self.lock = threading.Lock()

    def take(self, delivery_id):
        """The program has delivery_id."""
        with self.lock:
            self.held.add(delivery_id)
            filled = self.full_since is None and len(self.held) >= self.limit
            if filled:
                self.full_since, self.warned = time.monotonic(), False
        if filled and self._poke is not None:
            self._poke()

    def give_back(self, delivery_id):
        """delivery_id was consumed: its credit is back, the episode over."""
        with self.lock:
            self.held.discard(delivery_id)
            if len(self.held) < self.limit:
                self.full_since = None


class Watchdog:
    """A thread that calls warn(credits, held_for) once per episode in
    which a watched subscription has held all its credits for after
    seconds. Started with the first subscription, stopped with the client."""

    def __init__(self, after, warn, name):
        self.after, self._warn, self._name = after, warn, name
        self._cond = threading.Condition()
        self._watched = set()
        self._idle = False  # waiting with no deadline: a fill must wake it
        self._stopped = False
        self._thread = None

    def watch(self, credits):
        with self._cond:
            if self._stopped:
                return
            self._watched.add(credits)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def unwatch(self, credits):
        with self._cond:
            self._watched.discard(credits)

    def poke(self):
        """A subscription has just filled up."""
        with self._cond:
            if self._idle:
                self._idle = False
                self._cond.notify()

    def stop(self):
        with self._cond:
            self._stopped = True
            self._watched.clear()
            self._cond.notify()

    def _run(self):
        while True:
            with self._cond:
                if self._stopped:
                    return
                due, wake = self._scan(time.monotonic())
                if not due:
                    # Every subscription that fills after this scan has a
                    # later deadline than wake: only an idle wait needs poking.
                    self._idle = wake is None
                    self._cond.wait(None if wake is None else max(0.0, wake - time.monotonic()))
                    self._idle = False
                    continue
            for credits, held_for in due:
                self._warn(credits, held_for)

    def _scan(self, now):
        """The subscriptions due a warning now (marked warned), and when the
        next one falls due."""
        due, wake = [], None
        for c in self._watched:
            with c.lock:
                if c.full_since is None or c.warned:
                    continue
                at = c.full_since + self.after
                if at <= now:
                    c.warned = True
                    due.append((c, now - c.full_since))
                elif wake is None or at < wake:
                    wake = at
        return due, wake


def go_duration(seconds):
    """seconds as Go prints a time.Duration rounded to the millisecond:
    "200ms", "5.001s", "1m30s"."""
    ms = max(0, round(seconds * 1000))
    if ms < 1000:
        return f"{ms}ms"
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + s
