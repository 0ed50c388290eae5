"""A subscription whose in-flight deliveries the program holds, all of them
unconsumed, is reported: one warning per episode, naming the subscription,
its topic, the credits and the open handles (and, with tracking, where
they were made), counted in stats()["stalled_subscriptions"].

Every wait here is on a log record or a message, never on a sleep: the
bound is short, the timeouts long.
"""

import logging
import os
import re
import sys
import threading
import unittest
from unittest import mock

import flybus

from _router import Router

BOUND = 0.2
WAIT = 20


class Warnings(logging.Handler):
    """The flybus logger's records, for the test to wait on."""

    def __init__(self):
        super().__init__()
        self.records = []
        self._cond = threading.Condition()

    def emit(self, record):
        with self._cond:
            self.records.append(record)
            self._cond.notify_all()

    @property
    def messages(self):
        with self._cond:
            return [r.getMessage() for r in self.records]

    def about(self, sub):
        return [m for m in self.messages if m.startswith(f"flybus: subscription {sub.id} on topic {sub.topic} ")]

    def record_about(self, sub):
        with self._cond:
            return next(r for r in self.records if getattr(r, "subscription", None) == sub.id)

    def wait(self, sub, n=1):
        """The warnings about sub, once there are n."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.about(sub)) >= n, WAIT):
                raise AssertionError(f"no warning #{n} about {sub.id} within {WAIT} s; logged: {self.messages}")
        return self.about(sub)


def here():
    """The caller's "file:line in function", as a warning names a site."""
    f = sys._getframe(1)
    return f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"


class HeldCreditsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.router = Router()

    @classmethod
    def tearDownClass(cls):
        cls.router.stop()

    def setUp(self):
        # Tracking as each test asks, whatever the environment says.
        env = mock.patch.dict(os.environ)
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("FLYBUS_TRACK_HANDLES", None)
        self.log = Warnings()
        logger = logging.getLogger("flybus")
        logger.addHandler(self.log)
        self.addCleanup(logger.removeHandler, self.log)

    def client(self, name, **kw):
        c = flybus.connect(self.router.socket, client_id=name, store_root=self.router.store, **kw)
        self.addCleanup(c.close)
        return c

    def stalled(self, c, prod, topic, in_flight):
        """A subscription of c to topic with in_flight messages taken and
        held; the messages."""
        prod.declare_topic(topic)
        sub = c.subscribe(topic, mode="bounded", in_flight=in_flight)
        self.addCleanup(sub.close)
        for i in range(in_flight):
            prod.publish(topic, {"i": i})
        return sub, [sub.next(timeout=WAIT) for _ in range(in_flight)]

    def test_the_warning_names_the_subscription_once_per_episode(self):
        prod, c = self.client("held-prod"), self.client("held-cons", held_warn_after=BOUND)
        sub, held = self.stalled(c, prod, "held.once", 2)
        (w,) = self.log.wait(sub)
        self.assertRegex(w, rf"^flybus: subscription {sub.id} on topic held\.once has held all 2 in-flight credits "
                            r"unconsumed for \d[0-9.a-z]*s; 2 handles are open$")
        self.assertEqual(c.stats()["stalled_subscriptions"], 1)
        # The parts are the record's attributes too.
        r = self.log.record_about(sub)
        self.assertEqual((r.levelno, r.topic, r.credits, r.handles, r.client), (logging.WARNING, "held.once", 2, 2,
                                                                                  "held-cons"))
        self.assertIn("FLYBUS_TRACK_HANDLES=1", r.hint)
        # A second subscription stalls and is reported while the first
        # stays held: at least one more bound passes, and the first one is
        # not reported again.
        other, _ = self.stalled(c, prod, "held.other", 1)
        (w2,) = self.log.wait(other)
        self.assertIn("all 1 in-flight credits", w2)
        self.assertIn("3 handles are open", w2)
        self.assertEqual(len(self.log.about(sub)), 1)
        self.assertEqual(c.stats()["stalled_subscriptions"], 2)
        # A credit comes back: the episode ends. Taking the next message
        # holds them all again, a new episode, warned of once more.
        prod.publish("held.once", {"i": 2})
        held.pop(0).close()
        held.append(sub.next(timeout=WAIT))
        self.assertEqual(len(self.log.wait(sub, 2)), 2)
        self.assertEqual(c.stats()["stalled_subscriptions"], 3)
        for m in held:
            m.close()
        c.close()  # the watchdog's thread ends with the client
        c._watchdog._thread.join(WAIT)
        self.assertFalse(c._watchdog._thread.is_alive())

    def test_tracked_handles_name_where_they_were_made(self):
        prod, c = self.client("track-prod"), self.client("track-cons", held_warn_after=BOUND, track_handles=True)
        prod.declare_topic("held.track")
        sub = c.subscribe("held.track", mode="bounded", in_flight=1)
        self.addCleanup(sub.close)
        with prod.allocate(4096, "x/y") as w:
            w.write(os.urandom(4096))
            a = w.seal()
        with a:
            prod.publish("held.track", {}, attachments={"frame": a})
        m = sub.next(timeout=WAIT); took = here()  # noqa: E702
        art = m.artifact("frame"); took_art = here()  # noqa: E702
        m.close()  # the artifact still holds the delivery...
        v = art.view(); v.__enter__(); viewed = here()  # noqa: E702
        self.addCleanup(art.close)
        self.addCleanup(v.close)
        (w,) = self.log.wait(sub)
        # ... with the view: those two are named, the closed message not.
        self.assertIn("has held all 1 in-flight credits", w)
        self.assertIn("; 2 handles are open; created at: ", w)
        self.assertIn(f"Artifact at {took_art}", w)
        self.assertIn(f"View at {viewed}", w)
        self.assertNotIn(f"Message at {took}", w)

    def test_the_environment_turns_tracking_on(self):
        prod = self.client("env-prod")
        with mock.patch.dict(os.environ, {"FLYBUS_TRACK_HANDLES": "1"}):
            c = self.client("env-cons", held_warn_after=BOUND)
        sub, held = self.stalled(c, prod, "held.env", 2)
        (w,) = self.log.wait(sub)
        # Both taken on one line of stalled(), named once with a count.
        self.assertRegex(w, rf"; 2 handles are open; created at: Message at {re.escape(__file__)}:[0-9]+ in \S+ "
                            r"\(2 handles\)$")
        for m in held:
            m.close()

    def test_nothing_is_reported_when_the_program_consumes(self):
        prod, c = self.client("fine-prod"), self.client("fine-cons", held_warn_after=BOUND)
        prod.declare_topic("held.fine")
        with c.subscribe("held.fine", mode="bounded", in_flight=1) as sub:
            for i in range(20):
                prod.publish("held.fine", {"i": i})
                with sub.next(timeout=WAIT) as m:  # holds its only credit, briefly
                    self.assertEqual(m.payload, {"i": i})
            with prod.allocate(16, "x/y") as w:
                a = w.seal()
            with a:
                prod.publish("held.fine", {}, attachments={"frame": a})
            with sub.next(timeout=WAIT) as m, m.artifact("frame") as art, art.view() as mv:
                self.assertEqual(bytes(mv), bytes(16))
            # A subscription stalled on purpose, reported a bound later: the
            # watchdog was running all along, and saw nothing held in the
            # first.
            canary, held = self.stalled(c, prod, "held.canary", 1)
            self.log.wait(canary)
            self.assertEqual(self.log.about(sub), [])
            self.assertEqual(c.stats()["stalled_subscriptions"], 1)
            held[0].close()

    def test_a_bound_of_zero_turns_the_check_off(self):
        c = self.client("off-cons", held_warn_after=0)
        self.assertIsNone(c._watchdog)
        self.assertEqual(c.stats()["stalled_subscriptions"], 0)


class StatsTest(unittest.TestCase):
    def test_every_counter_is_there_from_zero(self):
        r = Router()
        self.addCleanup(r.stop)
        with flybus.connect(r.socket, client_id="stats", store_root=r.store) as c:
            st = c.stats()
            for key in ("leaked", "control_errors", "stalled_subscriptions"):
                self.assertEqual(st[key], 0, key)
            if c._slots is not None:
                for key in ("cached_slots", "slot_hits", "slot_maps", "slot_unmaps"):
                    self.assertEqual(st[key], 0, key)


if __name__ == "__main__":
    unittest.main()
