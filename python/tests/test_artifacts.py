import gc
import hashlib
import os
import pickle
import tempfile
import unittest

import flybus

from _router import Router


class ArtifactTests:
    """Run in each store mode (the subclasses below)."""

    mode = "files"

    @classmethod
    def setUpClass(cls):
        cls.router = Router(store_mode=cls.mode)

    @classmethod
    def tearDownClass(cls):
        cls.router.stop()

    def client(self, name):
        c = flybus.connect(self.router.socket, client_id=f"{name}-{self.mode}", store_root=self.router.store)
        self.addCleanup(c.close)
        return c

    def producer_and_consumer(self, prod_id, cons_id, topic):
        """Two clients of the router; the first has declared topic."""
        prod, cons = self.client(prod_id), self.client(cons_id)
        prod.declare_topic(topic)
        return prod, cons

    def produce(self, c, data, digest=True):
        with c.allocate(len(data), "image/x-rgba") as w:
            w.write_at(data[:100], 0)
            w.write_at(data[100:], 100)
            return w.seal(digest=hashlib.sha256(data).hexdigest() if digest else None)

    def publish_frame(self, prod, topic, data, payload=None):
        """Publishes data as the artifact "frame" of one message on topic."""
        with self.produce(prod, data) as a:
            prod.publish(topic, payload or {}, attachments={"frame": a})

    def test_a_python_frame_read_through_a_python_view(self):
        prod, cons = self.producer_and_consumer("py-prod", "py-cons", "py.frames")
        data = os.urandom(640 * 480 * 4)
        with cons.subscribe("py.frames", mode="bounded") as sub:
            for i in range(3):
                self.publish_frame(prod, "py.frames", data, {"i": i})
                with sub.next(timeout=10) as m:
                    art = m.artifact("frame")
                with art:
                    self.assertEqual(art.ref["digest"], hashlib.sha256(data).hexdigest())
                    with art.view() as mv:
                        self.assertTrue(mv.readonly)
                        self.assertEqual(hashlib.sha256(mv).digest(), hashlib.sha256(data).digest())

    def test_a_view_cannot_outlive_its_artifact(self):
        prod, cons = self.producer_and_consumer("py-prod2", "py-cons2", "py.keep")
        data = os.urandom(8192)
        with cons.subscribe("py.keep", mode="bounded") as sub:
            self.publish_frame(prod, "py.keep", data)
            m = sub.next(timeout=10)
            art = m.artifact("frame")
            m.close()
            art.close()  # the delivery is consumed: a view of it is refused
            with self.assertRaises(ValueError):
                art.view().__enter__()
        with cons.subscribe("py.keep", mode="bounded") as sub:
            self.publish_frame(prod, "py.keep", data)
            with sub.next(timeout=10) as m, m.artifact("frame") as art:
                v = art.view()
                mv = v.__enter__()
                kept = mv[10:20]
                with self.assertRaises(BufferError):
                    v.close()
                self.assertEqual(bytes(kept), data[10:20])  # still mapped, still owned
                del kept
                v.close()
                # What numpy.frombuffer(mv) does: hold an export of the view.
                v = art.view()
                held = pickle.PickleBuffer(v.__enter__())
                with self.assertRaises(BufferError):
                    v.close()
                self.assertEqual(bytes(held.raw()[:4]), data[:4])
                held.release()
                v.close()

    def cached(self, c):
        """Whether c's pool-mode views slice a cached slot mapping."""
        return self.mode == "pool" and c._slots is not None

    def test_views_of_a_slot_share_one_mapping(self):
        prod, cons = self.client("py-slots-prod"), self.client("py-slots-cons")
        per_view = flybus.connect(self.router.socket, client_id=f"py-slots-own-{self.mode}",
                                  store_root=self.router.store, map_per_view=True)
        self.addCleanup(per_view.close)
        prod.declare_topic("py.slots")
        frames = [os.urandom(64 * 1024) for _ in range(12)]
        with cons.subscribe("py.slots", mode="bounded") as sub, per_view.subscribe("py.slots", mode="bounded") as own:
            for data in frames:
                self.publish_frame(prod, "py.slots", data)
                for s in (sub, own):
                    with s.next(timeout=10) as m, m.artifact("frame") as art, art.view() as mv:
                        self.assertEqual(hashlib.sha256(mv).digest(), hashlib.sha256(data).digest())
        self.assertNotIn("slot_hits", per_view.stats())
        st = cons.stats()
        if not self.cached(cons):
            self.assertEqual(st.get("slot_maps", 0), 0)
            return
        # The producer reuses a few slots; every later view of one is a hit.
        self.assertEqual(st["slot_maps"] + st["slot_hits"], len(frames), st)
        self.assertGreater(st["slot_hits"], 0, st)
        self.assertEqual(st["cached_slots"], st["slot_maps"], st)
        cons.close()
        self.assertEqual(cons.stats()["cached_slots"], 0)
        self.assertEqual(cons.stats()["slot_unmaps"], st["slot_maps"])

    def test_every_way_of_keeping_a_views_bytes_is_seen(self):
        prod, cons = self.producer_and_consumer("py-keep-prod", "py-keep-cons", "py.keep-all")
        data = os.urandom(16384)
        keepers = [lambda mv: mv[1:9], lambda mv: mv[1:9][2:4], lambda mv: memoryview(mv),
                   lambda mv: pickle.PickleBuffer(mv), lambda mv: mv.cast("I")]
        with cons.subscribe("py.keep-all", mode="bounded") as sub:
            for keep in keepers:
                self.publish_frame(prod, "py.keep-all", data)
                with sub.next(timeout=10) as m, m.artifact("frame") as art:
                    v = art.view()
                    kept = keep(v.__enter__())
                    with self.assertRaises(BufferError):
                        v.close()
                    with self.assertRaises(BufferError):
                        v.close()  # and again, while it is still kept
                    del kept
                    v.close()
                    v.close()  # idempotent once it has succeeded

    def test_a_forgotten_view_is_released_only_after_its_last_slice(self):
        prod, cons = self.producer_and_consumer("py-forget-prod", "py-forget-cons", "py.forget")
        data = os.urandom(8192)
        with cons.subscribe("py.forget", mode="bounded") as sub:
            self.publish_frame(prod, "py.forget", data)
            with sub.next(timeout=10) as m:
                art = m.artifact("frame")
            v = art.view()
            kept = v.__enter__()[100:200]
            art.close()
            del v
            gc.collect()
            if self.cached(cons):
                # The safety net waits for the slice: the slot stays owned.
                self.assertEqual(cons.stats().get("leaked", 0), 0)
                self.assertEqual(bytes(kept), data[100:200])
            del kept
            gc.collect()
            self.assertEqual(cons.stats().get("leaked", 0), 1)

    def test_a_writer_abandoned_and_a_buffer_fill(self):
        c = self.client("py-writer")
        with c.allocate(4096, "x/y") as w:
            w.write(b"never sealed")
        w = c.allocate(4096, "x/y")
        buf = w.buffer()
        buf[:5] = b"hello"
        with self.assertRaises(BufferError):  # the buffer is still held: the seal refuses
            w.seal()
        buf.release()
        w.close()
        w2 = c.allocate(16, "x/y")
        b2 = w2.buffer()
        b2[:3] = b"abc"
        b2.release()
        with w2.seal() as a:
            self.assertEqual(a.read_all()[:3], b"abc")
            with a.retain() as held:
                self.assertEqual(held.ref, a.ref)

    def test_a_seal_without_waiting_is_published_at_once(self):
        prod, cons = self.producer_and_consumer("py-nowait-prod", "py-nowait-cons", "py.nowait")
        data = os.urandom(64 * 1024)
        digest = hashlib.sha256(data).hexdigest()
        with cons.subscribe("py.nowait", mode="bounded") as sub:
            w = prod.allocate(len(data), "x/y")
            w.write(data)
            with w.seal(digest=digest, wait=False) as a:
                # No answer awaited: the router seals before the publish.
                prod.publish("py.nowait", {"n": 1}, attachments={"frame": a})
                self.assertEqual(a.sealed()["digest"], digest)
            with sub.next(timeout=10) as m, m.artifact("frame") as got:
                self.assertEqual(got.read_all(), data)
        # A refused seal: sealed() raises it, a publish naming it is refused,
        # and closing the artifact releases the writer's id.
        w = prod.allocate(16, "x/y")
        w.write(b"x" * 16)
        a = w.seal(digest="0" * 64, wait=False)
        with self.assertRaises(flybus.BusError) as cm:
            a.sealed()
        self.assertEqual(cm.exception.code, "ARTIFACT_MISMATCH")
        with self.assertRaises(flybus.BusError):
            prod.publish("py.nowait", {"n": 2}, attachments={"frame": a})
        a.close()

    def test_a_go_producers_frame_in_python(self):
        cons = self.client("py-from-go")
        cons.declare_topic("py.go-frames")
        data = os.urandom(100_000)
        with tempfile.NamedTemporaryFile() as f, cons.subscribe("py.go-frames", mode="bounded") as sub:
            f.write(data)
            f.flush()
            out = self.router.tool("pub", self.router.socket, "py.go-frames", "{}", "--artifact", f"frame={f.name}",
                                   "--store", self.router.store)
            self.assertEqual(out.returncode, 0, out.stderr)
            with sub.next(timeout=10) as m, m.artifact("frame") as art:
                self.assertEqual(art.digest(), hashlib.sha256(data).hexdigest())

    def test_a_python_frame_saved_by_a_go_subscriber(self):
        prod = self.client("py-to-go")
        prod.declare_topic("py.to-go", retained="latest")
        data = os.urandom(50_000)
        self.publish_frame(prod, "py.to-go", data, {"from": "python"})
        with tempfile.TemporaryDirectory() as d:
            out = self.router.tool("sub", self.router.socket, "py.to-go", "--replay", "--count", "1",
                                   "--save-artifacts", d, "--store", self.router.store)
            self.assertEqual(out.returncode, 0, out.stderr)
            saved = os.listdir(d)
            self.assertEqual(len(saved), 1, saved)
            with open(os.path.join(d, saved[0]), "rb") as f:
                self.assertEqual(f.read(), data)
        prod.clear_topic("py.to-go")


    def test_a_go_service_called_from_python_with_frames_both_ways(self):
        c = self.client("py-to-go-svc")
        svc = self.router.go_service(f"go.frames.{self.mode}")
        try:
            p = c.call(f"go.frames.{self.mode}", "Echo", {"x": [1, "two"]})
            with p.result(timeout=10) as res:
                self.assertEqual(res.outcome, {"got": {"x": [1, "two"]}, "by": "go"})
            data = os.urandom(300_000)
            with self.produce(c, data) as a:
                p = c.call(f"go.frames.{self.mode}", "Digest", {}, attachments={"frame": a})
            with p.result(timeout=10) as res:
                self.assertEqual(res.outcome, {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
                with res.artifact("frame") as back, back.view() as mv:
                    self.assertEqual(bytes(mv), data[::-1])
        finally:
            svc.stdin.close()
            svc.wait(20)
            svc.stdout.close()
            svc.stderr.close()


class FilesModeTest(ArtifactTests, unittest.TestCase):
    mode = "files"


class PoolModeTest(ArtifactTests, unittest.TestCase):
    mode = "pool"


if __name__ == "__main__":
    unittest.main()
