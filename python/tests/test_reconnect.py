"""flybus.dial against a real `flybus serve` that is killed and started
again: clients that outlive their router, as the Go SDK's client.Dial.

Every wait is on an event (wait_state, a queue read or a log record with a
timeout); nothing sleeps and hopes."""

import gc
import hashlib
import logging
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
import unittest

import flybus

from _router import Router

WAIT = 30


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def fds_before():
    """The descriptors open now, once earlier tests' garbage is collected."""
    gc.collect()
    return open_fds()


def flybus_threads():
    return {t for t in threading.enumerate() if t.name.startswith("flybus-")}


class Records(logging.Handler):
    """A logger's records, waited for on a condition."""

    def __init__(self, name):
        super().__init__(logging.DEBUG)
        self.records = []
        self.cond = threading.Condition()
        self.logger = logging.getLogger(name)
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record):
        with self.cond:
            self.records.append(record)
            self.cond.notify_all()

    def wait(self, pred, n=1, timeout=WAIT):
        """The first n records pred accepts, once there are n of them."""
        with self.cond:
            if not self.cond.wait_for(lambda: len([r for r in self.records if pred(r)]) >= n, timeout):
                raise AssertionError(f"no {n} such log records in {[r.getMessage() for r in self.records]}")
            return [r for r in self.records if pred(r)][:n]

    def remove(self):
        self.logger.removeHandler(self)


def said(client_id, words):
    return lambda r: words in r.getMessage() and f"client {client_id} " in r.getMessage()


class Bus:
    """A router that can be killed and started again on the same socket
    and store, as a supervisor would."""

    def __init__(self, mode):
        self.mode = mode
        self.router = Router(store_mode=mode)
        self.dir, self.socket, self.store = self.router.dir, self.router.socket, self.router.store

    def kill(self):
        self.router.kill()
        self.router.stop(keep_dir=True)  # its pipes

    def start(self):
        self.router = Router(store_mode=self.mode, dir=self.dir)

    def stop(self):
        self.router.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Scenario:
    """Frames with a sha256 in their payload and the bytes in an artifact."""

    SIZE = 64 * 1024

    def __init__(self, test):
        self.t = test

    def publish(self, prod, n):
        data = hashlib.sha256(str(n).encode()).digest() * (self.SIZE // 32)
        digest = hashlib.sha256(data).hexdigest()
        with prod.allocate(len(data), "application/octet-stream", timeout=WAIT) as w:
            w.write(data)
            a = w.seal(digest=digest, timeout=WAIT)
        with a:
            prod.publish("frames", {"n": n, "sha256": digest}, attachments={"frame": a}, timeout=WAIT)

    def receive(self, sub, first, last):
        for n in range(first, last + 1):
            with sub.next(timeout=WAIT) as m, m.artifact("frame") as art:
                self.t.assertEqual(m.payload["n"], n)
                with art.view() as mv:
                    self.t.assertEqual(hashlib.sha256(mv).hexdigest(), m.payload["sha256"])
                    self.t.assertEqual(len(mv), self.SIZE)


class RestartTest(unittest.TestCase):
    """A producer, two consumers, a service and its caller, all dial
    clients, through a SIGKILL of the router and a new one on the same
    socket and store."""

    def test_pool(self):
        self.restart("pool")

    def test_files(self):
        self.restart("files")

    def restart(self, mode):
        fds, threads = fds_before(), flybus_threads()
        log = Records(f"flybus.test.restart.{mode}")
        self.addCleanup(log.remove)
        bus = Bus(mode)
        self.addCleanup(bus.stop)
        clients = {}
        for name in ("prod", "cons1", "cons2", "svc", "caller"):
            c = flybus.dial(bus.socket, client_id=f"{mode}-{name}", store_root=bus.store, timeout=WAIT,
                            logger=log.logger)
            self.addCleanup(c.close)
            clients[name] = c
        prod, cons1, cons2, svc_c, caller = clients.values()
        frames = Scenario(self)

        self.assertEqual(prod.state, "connected")
        prod.declare_topic("frames")
        s1 = cons1.subscribe("frames", mode="bounded")
        s2 = cons2.subscribe("frames", mode="bounded")
        svc = svc_c.register("echo", queued=4, in_flight=4)
        blocked, serve_errors = queue.Queue(), []

        def serve():
            try:
                for req in svc:
                    if req.method == "block":
                        blocked.put((req, req.responder()))  # kept open by the test, never answering
                        continue
                    with req:
                        req.reply({"n": req.payload["n"] + 1})
            except Exception as e:  # reported by the test
                serve_errors.append(e)

        server = threading.Thread(target=serve, daemon=True)
        server.start()

        frames.publish(prod, 1)
        frames.receive(s1, 1, 1)
        frames.receive(s2, 1, 1)
        with caller.call("echo", "inc", {"n": 1}).result(timeout=WAIT) as res:
            self.assertEqual(res.outcome, {"n": 2})
        first_conn = svc_c.info["connectionId"], svc_c.client_incarnation

        # Kept across the loss: a message and an artifact of it, a result, an
        # unsealed writer, a sealed artifact, a call in flight, its request
        # and a responder.
        kept_res = caller.call("echo", "inc", {"n": 2}).result(timeout=WAIT)
        frames.publish(prod, 2)
        kept = s1.next(timeout=WAIT)
        kept_art = kept.artifact("frame")
        writer = prod.allocate(16, "x/y")
        with prod.allocate(16, "x/y") as w:
            sealed = w.seal()
        in_flight = caller.call("echo", "block", {})
        req, resp = blocked.get(timeout=WAIT)

        bus.kill()
        for c in clients.values():
            c.wait_state("reconnecting", timeout=WAIT)
            self.assertEqual(c.state, "reconnecting")
            log.wait(said(c.client_id, "lost the router"))

        # In flight at the loss: its outcome is unknown.
        with self.assertRaises(flybus.RouterLost) as cm:
            in_flight.result(timeout=WAIT)
        self.assertEqual(cm.exception.dispatch, "unknown")
        self.assertNotIsInstance(cm.exception, flybus.StaleHandle)
        # Made while reconnecting: it waits for the connection, then was
        # never sent.
        with self.assertRaises(flybus.RouterLost) as cm:
            caller.call("echo", "inc", {"n": 0}, timeout=0.2)
        self.assertEqual(cm.exception.dispatch, "not-dispatched")
        self.assertNotIsInstance(cm.exception, flybus.StaleHandle)
        self.assertIn("not sent", str(cm.exception))
        # Handles of the lost connection refuse, with a typed error.
        uses = {
            "a message": lambda: kept.artifact("frame"),
            "a result": lambda: kept_res.artifact("frame"),
            "a request": lambda: req.reply({"n": 0}),
            "a request's responder": lambda: req.responder(),
            "an artifact's view": lambda: kept_art.view().__enter__(),
            "an artifact's bytes": lambda: sealed.read_all(),
            "an artifact retained": lambda: sealed.retain(),
            "a writer's write": lambda: writer.write(b"x"),
            "a writer's seal": lambda: writer.seal(),
            "a responder": lambda: resp.reply({"n": 0}),
            "a pending call's cancel": lambda: in_flight.cancel(),
        }
        for what, use in uses.items():
            with self.subTest(what), self.assertRaises(flybus.StaleHandle) as cm:
                use()
            e = cm.exception
            self.assertIsInstance(e, flybus.BusError)
            self.assertIsInstance(e, flybus.RouterLost)
            self.assertEqual((e.code, e.dispatch), ("ROUTER_LOST", "not-dispatched"))

        bus.start()
        for c in clients.values():
            c.wait_state("connected", timeout=WAIT)
            log.wait(said(c.client_id, "reconnected"))
        self.assertEqual(prod.info["routerId"], bus.router.ready["routerId"])
        self.assertNotEqual(svc_c.client_incarnation, first_conn[1])

        # An artifact of the lost connection attached to a new publish.
        with self.assertRaises(flybus.StaleHandle):
            prod.publish("frames", {}, attachments={"frame": sealed})
        # Closing them sends nothing (and nothing is counted refused).
        for h in (kept_art, kept, kept_res, writer, sealed, req, resp):
            h.close()

        # Every frame published once all are back reaches both consumers;
        # what s2 had queued from the lost connection (frame 2) is gone.
        for n in range(3, 13):
            frames.publish(prod, n)
        frames.receive(s1, 3, 12)
        frames.receive(s2, 3, 12)
        self.assertIsNotNone(s1.topic_incarnation)
        # The service answers under its new registration.
        with caller.call("echo", "inc", {"n": 41}).result(timeout=WAIT) as res:
            self.assertEqual(res.outcome, {"n": 42})
            self.assertEqual(res.service_incarnation, svc.incarnation)

        for c in clients.values():
            st = c.stats()
            self.assertEqual(c.reconnects, 1, c.client_id)
            self.assertEqual((st["reconnects"], st["leaked"], st["control_errors"]), (1, 0, 0), c.client_id)

        s1.close()
        s2.close()
        svc.close()
        server.join(WAIT)
        self.assertFalse(server.is_alive())
        self.assertEqual(serve_errors, [])
        for c in clients.values():  # every handle, of either connection, was closed
            self.assertEqual(c._handles.count(), 0, c.client_id)
        for c in clients.values():
            c.close()
            self.assertEqual(c.state, "closed")
            if c._watchdog is not None and c._watchdog._thread is not None:
                c._watchdog._thread.join(WAIT)
        for t in flybus_threads() - threads:
            t.join(WAIT)
            self.assertFalse(t.is_alive(), t.name)
        for c in clients.values():
            st = c.stats()
            self.assertEqual((st["leaked"], st.get("cached_slots", 0)), (0, 0), c.client_id)
            if "slot_maps" in st:
                self.assertEqual(st["slot_maps"], st["slot_unmaps"], c.client_id)
        bus.stop()
        self.assertEqual(open_fds(), fds)


class CutTest(unittest.TestCase):
    """The connection ends while the router lives, or the router shuts down
    cleanly: the subscription goes on through the same handle."""

    def setUp(self):
        self.log = Records("flybus.test.cut")
        self.addCleanup(self.log.remove)
        self.bus = Bus("pool")
        self.addCleanup(self.bus.stop)

    def dial(self, name):
        c = flybus.dial(self.bus.socket, client_id=name, store_root=self.bus.store, timeout=WAIT,
                        logger=self.log.logger)
        self.addCleanup(c.close)
        return c

    def test_a_cut_connection(self):
        prod, cons = self.dial("cut-prod"), self.dial("cut-cons")
        prod.declare_topic("cut", retained="latest")
        with cons.subscribe("cut", mode="bounded", replay=True) as s:
            prod.publish("cut", {"n": 1})
            with s.next(timeout=WAIT) as m:
                self.assertEqual(m.payload, {"n": 1})
            cons._sock.shutdown(socket.SHUT_RDWR)
            self.log.wait(said("cut-cons", "reconnected"))
            cons.wait_state("connected", timeout=WAIT)
            # Made again with replay: the retained value comes once more.
            with s.next(timeout=WAIT) as m:
                self.assertEqual(m.payload, {"n": 1})
            prod.publish("cut", {"n": 2})
            with s.next(timeout=WAIT) as m:
                self.assertEqual(m.payload, {"n": 2})
        self.assertEqual((cons.reconnects, prod.reconnects), (1, 0))

    def test_a_router_shutdown(self):
        prod, cons = self.dial("term-prod"), self.dial("term-cons")
        prod.declare_topic("term")
        with cons.subscribe("term", mode="bounded") as s:
            self.bus.router.stop(keep_dir=True)  # SIGTERM: the router closes every subscription first
            cons.wait_state("reconnecting", timeout=WAIT)
            self.bus.start()
            for c in (prod, cons):
                c.wait_state("connected", timeout=WAIT)
            self.assertEqual(s.wait_topic(timeout=WAIT), prod.declare_topic("term")["topicIncarnation"])
            prod.publish("term", {"n": 1})
            with s.next(timeout=WAIT) as m:
                self.assertEqual(m.payload, {"n": 1})


class StartTest(unittest.TestCase):
    """dial at start: it waits for the router, and gives up at once only on
    a refusal for good."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flybus-py-late-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.socket = os.path.join(self.dir, "bus.sock")

    def test_a_router_that_starts_late(self):
        # Something that hangs up on every hello holds the socket first: the
        # dial's attempts are seen, then the real router takes its place.
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ls.bind(self.socket)
        ls.listen(8)
        attempts = queue.Queue()

        def hang_up():
            while True:
                try:
                    conn, _ = ls.accept()
                except OSError:
                    return
                conn.close()
                attempts.put(1)

        threading.Thread(target=hang_up, daemon=True).start()
        out = queue.Queue()

        def consumer():
            try:
                c = flybus.dial(self.socket, client_id="late-cons", timeout=WAIT)
                out.put(c)
                s = c.subscribe("late", mode="bounded", await_topic=True)
                out.put(s)
            except Exception as e:  # reported by the test
                out.put(e)

        threading.Thread(target=consumer, daemon=True).start()
        for _ in range(2):
            attempts.get(timeout=WAIT)  # refused twice: it goes on trying
        ls.close()
        os.unlink(self.socket)
        bus = Router(dir=self.dir)
        self.addCleanup(bus.stop)
        c = out.get(timeout=WAIT)
        self.assertIsInstance(c, flybus.Client)
        self.addCleanup(c.close)
        self.assertEqual((c.state, c.reconnects), ("connected", 0))
        s = out.get(timeout=WAIT)
        self.assertIsInstance(s, flybus.Subscription)
        with flybus.dial(bus.socket, client_id="late-prod") as prod:
            prod.declare_topic("late")
            prod.publish("late", {"n": 1})
            with s.next(timeout=WAIT) as m:
                self.assertEqual(m.payload, {"n": 1})
        s.close()

    def test_nothing_listening_until_the_timeout(self):
        with self.assertRaises(flybus.NoRouter) as cm:
            flybus.dial(self.socket, client_id="late-none", timeout=0.3)
        self.assertIn(self.socket, str(cm.exception))

    def test_a_refusal_for_good_fails_at_once(self):
        bus = Router(store_mode="files")
        self.addCleanup(bus.stop)
        start = time.monotonic()
        with self.assertRaises(flybus.StoreRootError):
            flybus.dial(bus.socket, client_id="late-wrong-root", store_root=self.dir, timeout=WAIT)
        # Well before the timeout: it did not wait for a cure.
        self.assertLess(time.monotonic() - start, WAIT / 2)


class CloseTest(unittest.TestCase):
    def test_close_while_reconnecting(self):
        fds, threads = fds_before(), flybus_threads()
        log = Records("flybus.test.close")
        self.addCleanup(log.remove)
        bus = Bus("pool")
        self.addCleanup(bus.stop)
        c = flybus.dial(bus.socket, client_id="close-cons", store_root=bus.store, timeout=WAIT,
                        logger=log.logger)
        self.addCleanup(c.close)
        c.declare_topic("close")
        s = c.subscribe("close", mode="bounded")
        svc = c.register("close.svc")
        bus.kill()
        c.wait_state("reconnecting", timeout=WAIT)
        outcomes = queue.Queue()

        def wait_on(name, fn):
            def run():
                try:
                    fn()
                    outcomes.put((name, None))
                except Exception as e:  # what the test looks at
                    outcomes.put((name, e))
            threading.Thread(target=run, daemon=True).start()

        wait_on("next", lambda: s.next(timeout=WAIT))
        wait_on("request", lambda: svc.next(timeout=WAIT))
        wait_on("publish", lambda: c.publish("close", {}, timeout=WAIT))
        wait_on("wait_state", lambda: c.wait_state("connected", timeout=WAIT))
        c.close()
        self.assertEqual(c.state, "closed")
        got = dict(outcomes.get(timeout=WAIT) for _ in range(4))
        for name, e in got.items():
            with self.subTest(name):
                self.assertIsInstance(e, flybus.ClosedError)
        with self.assertRaises(flybus.ClosedError):
            c.publish("close", {})
        self.assertEqual(c.wait_state("closed", timeout=0), "closed")
        s.close()
        svc.close()
        c.close()  # again: nothing more to do
        for t in flybus_threads() - threads:
            t.join(WAIT)
            self.assertFalse(t.is_alive(), t.name)
        # It gave up for good: a router back on the socket sees no client.
        bus.start()
        self.assertEqual((c.state, c.reconnects), ("closed", 0))
        self.assertEqual([r for r in log.records if "reconnected" in r.getMessage()], [])
        bus.stop()
        self.assertEqual(open_fds(), fds)


if __name__ == "__main__":
    unittest.main()
