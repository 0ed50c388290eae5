"""A view still open when its client's connection ends keeps showing its
own artifact's bytes (or zeros), never a later artifact's.

In pool mode the router reuses slot files: if it recycled the slot of a
view whose owner went with a connection's end, the next producer to fill
that slot would write into the bytes the open view maps. Each test here
ends the consumer's connection a different way while its view is open,
has another client publish many later frames of the same size (more than
there are slots), and then reads the kept view.
"""

import hashlib
import os
import socket
import time
import unittest

import flybus

from _router import Router

SIZE = 64 * 1024
LATER = 50  # later frames, each published once the one before is answered


class KeptViewTests:
    """Run in each store mode (the subclasses below)."""

    mode = "pool"

    def router(self):
        r = Router(store_mode=self.mode)
        self.addCleanup(r.stop)
        return r

    def connect(self, router, name):
        c = flybus.connect(router.socket, client_id=f"{name}-{self.mode}", store_root=router.store)
        self.addCleanup(c.close)
        return c

    def publish(self, prod, topic, data):
        with prod.allocate(len(data), "image/x-rgba") as w:
            w.write(data)
            art = w.seal()
        with art:
            prod.publish(topic, {}, attachments={"frame": art})

    def open_view(self, router, topic):
        """A consumer holding an open view of one frame: the consumer, the
        frame's bytes and the view's memoryview. The producer that
        published it has gone."""
        cons = self.connect(router, "kept-cons")
        with flybus.connect(router.socket, client_id=f"kept-first-{self.mode}", store_root=router.store) as prod:
            prod.declare_topic(topic)
            sub = cons.subscribe(topic, mode="bounded")
            data = bytes([249]) + os.urandom(SIZE - 1)
            self.publish(prod, topic, data)
            m = sub.next(timeout=10)
        art = m.artifact("frame")
        m.close()
        v = art.view()
        mv = v.__enter__()
        # Closed when the test is over, after the end it brings about.
        self.addCleanup(art.close)
        self.addCleanup(v.close)
        self.assertEqual(hashlib.sha256(mv).digest(), hashlib.sha256(data).digest())
        return cons, data, mv

    def publish_later_frames(self, router, topic):
        """Another client publishes LATER frames of the same size, each of
        other bytes than the kept one (byte 0 is never 249)."""
        prod = self.connect(router, "kept-later")
        prod.declare_topic(topic)
        for i in range(LATER):
            self.publish(prod, topic, bytes([i % 200]) + os.urandom(SIZE - 1))
        prod.close()

    def assertKept(self, mv, data):
        """The view still shows data, or only zeros; reading it works."""
        self.assertEqual(len(mv), len(data))
        now = bytes(mv)
        if now != bytes(len(now)) and hashlib.sha256(now).digest() != hashlib.sha256(data).digest():
            self.fail(f"the kept view shows another frame's bytes: byte 0 went from {data[0]} to {now[0]}")

    def test_the_programs_own_close(self):
        r = self.router()
        cons, data, mv = self.open_view(r, "kept.close")
        cons.close()
        self.assertKept(mv, data)  # the view's mapping outlives the client
        self.publish_later_frames(r, "kept.close")
        self.assertKept(mv, data)

    def test_a_router_shutdown(self):
        r = self.router()
        cons, data, mv = self.open_view(r, "kept.shutdown")
        r.stop(keep_dir=True)  # SIGTERM
        cons._thread.join(10)  # the reader saw the end
        self.assertFalse(cons._thread.is_alive())
        self.assertKept(mv, data)
        # A new router on the same store root, and frames through it.
        self.publish_later_frames(self.successor(r), "kept.shutdown")
        self.assertKept(mv, data)

    def test_a_router_killed(self):
        r = self.router()
        cons, data, mv = self.open_view(r, "kept.kill")
        r.kill()  # SIGKILL: nothing of the store is cleaned up
        cons._thread.join(10)
        self.assertFalse(cons._thread.is_alive())
        self.assertKept(mv, data)
        self.publish_later_frames(self.successor(r), "kept.kill")
        self.assertKept(mv, data)

    def test_the_connection_lost_while_the_router_lives(self):
        r = self.router()
        cons, data, mv = self.open_view(r, "kept.lost")
        cons._sock.shutdown(socket.SHUT_RDWR)
        cons._thread.join(10)
        self.assertFalse(cons._thread.is_alive())
        with self.assertRaises(flybus.RouterLost):
            cons.publish("kept.lost", {})
        self.assertKept(mv, data)
        self.until_dropped(r, cons.client_id)
        self.publish_later_frames(r, "kept.lost")
        self.assertKept(mv, data)

    def test_a_protocol_close_by_the_router(self):
        r = self.router()
        cons, data, mv = self.open_view(r, "kept.violation")
        # A length prefix over the wire's bound: the router closes the
        # connection (the client is idle, so nothing interleaves).
        cons._sock.sendall(b"\xff\xff\xff\xff")
        cons._thread.join(10)
        self.assertFalse(cons._thread.is_alive())
        self.assertKept(mv, data)
        self.until_dropped(r, cons.client_id)
        self.publish_later_frames(r, "kept.violation")
        self.assertKept(mv, data)

    def until_dropped(self, r, client_id):
        """Waits until the router has dropped client_id's connection (and so
        released what it owned): until the id may connect again."""
        deadline = time.monotonic() + 10
        while True:
            try:
                flybus.connect(r.socket, client_id=client_id).close()
                return
            except flybus.Conflict:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def successor(self, r):
        """A router on r's store root, once r has ended."""
        nxt = Router(store_mode=self.mode, dir=r.dir)
        self.addCleanup(nxt.stop)
        return nxt


class FilesModeTest(KeptViewTests, unittest.TestCase):
    mode = "files"


class PoolModeTest(KeptViewTests, unittest.TestCase):
    mode = "pool"


if __name__ == "__main__":
    unittest.main()
