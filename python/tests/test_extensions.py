"""Protocol 1.1 against a real router: the client asks for both
extensions, a subscription may wait for its topic's declaration, it hears
its topic's count of live publishers, and a wrong store_root is refused at
connect."""

import os
import tempfile
import unittest

import flybus

from _router import Router, RouterCase


class ExtensionsTest(RouterCase):
    def test_connect_asks_for_both_extensions(self):
        c = self.client("py-ext")
        self.assertEqual(c.extensions, ("await-topic", "presence"))
        self.assertEqual(c.info["selectedMinor"], 1)
        self.assertTrue(os.path.isdir(os.path.join(self.router.store, c.info["storeId"])))

    def test_subscribe_before_declare_gets_every_message_after_it(self):
        pub, sub = self.client("py-await-pub"), self.client("py-await-sub")
        with sub.subscribe("py.await", mode="bounded", await_topic=True) as s:
            self.assertIsNone(s.topic_incarnation)
            inc = pub.declare_topic("py.await")["topicIncarnation"]
            for i in range(20):
                pub.publish("py.await", {"i": i})
            self.assertEqual(s.wait_topic(timeout=10), inc)
            for i in range(20):
                with s.next(timeout=10) as m:
                    self.assertEqual((m.payload["i"], m.topic_sequence, m.topic_incarnation), (i, i + 1, inc))

    def test_a_declared_topic_needs_no_waiting(self):
        pub, sub = self.client("py-await-pub2"), self.client("py-await-sub2")
        inc = pub.declare_topic("py.await.now", retained="latest")["topicIncarnation"]
        pub.publish("py.await.now", {"n": 0})
        with sub.subscribe("py.await.now", await_topic=True, replay=True) as s:
            self.assertEqual(s.topic_incarnation, inc)
            with s.next(timeout=10) as m:
                self.assertEqual(m.payload, {"n": 0})
        with self.assertRaises(flybus.NoTopic):
            sub.subscribe("py.await.nobody")

    def test_the_subscription_outlives_delete_and_redeclare(self):
        mgr, sub = self.client("py-redeclare-mgr"), self.client("py-redeclare-sub")
        with sub.subscribe("py.redeclare", mode="bounded", await_topic=True) as s:
            first = mgr.declare_topic("py.redeclare")["topicIncarnation"]
            self.assertEqual(s.wait_topic(timeout=10), first)
            self.assertTrue(mgr.delete_topic("py.redeclare"))
            self.assertIsNone(s.wait_topic(timeout=10, declared=False))
            second = mgr.declare_topic("py.redeclare")["topicIncarnation"]
            self.assertNotEqual(first, second)
            self.assertEqual(s.wait_topic(timeout=10), second)
            mgr.publish("py.redeclare", {"n": 1})
            with s.next(timeout=10) as m:
                self.assertEqual((m.payload, m.topic_incarnation, m.topic_sequence), ({"n": 1}, second, 1))

    def test_presence_follows_the_publishers(self):
        p1, p2, sub = self.client("py-pres-1"), self.client("py-pres-2"), self.client("py-pres-sub")
        p1.declare_topic("py.presence")
        with sub.subscribe("py.presence", mode="bounded") as s:
            self.assertEqual(s.wait_publishers(lambda n: True, timeout=10), 0)
            p1.publish("py.presence", {})
            self.assertEqual(s.wait_publishers(lambda n: n == 1, timeout=10), 1)
            p2.publish("py.presence", {})
            self.assertEqual(s.wait_publishers(lambda n: n == 2, timeout=10), 2)
            p1.close()
            self.assertEqual(s.wait_publishers(lambda n: n == 1, timeout=10), 1)
            p2.close()
            self.assertEqual(s.wait_publishers(lambda n: n == 0, timeout=10), 0)
            with self.assertRaises(TimeoutError):
                s.wait_publishers(lambda n: n > 0, timeout=0.05)
        with self.assertRaises(flybus.ClosedError):
            s.wait_publishers(lambda n: n > 0, timeout=10)


class StoreRootTest(unittest.TestCase):
    """connect checks store_root against the router's storeId."""

    @classmethod
    def setUpClass(cls):
        cls.router = Router(store_mode="files")

    @classmethod
    def tearDownClass(cls):
        cls.router.stop()

    def test_a_wrong_store_root_is_refused_at_connect(self):
        wrong = tempfile.mkdtemp(prefix="flybus-py-wrong-")
        self.addCleanup(os.rmdir, wrong)
        with self.assertRaises(flybus.StoreRootError) as cm:
            flybus.connect(self.router.socket, client_id="py-wrong-root", store_root=wrong)
        e = cm.exception
        self.assertIsInstance(e, flybus.FlybusError)
        self.assertIsInstance(e, FileNotFoundError)
        self.assertEqual(e.store_root, wrong)
        self.assertIn(wrong, str(e))
        self.assertIn("--store", str(e))
        self.assertTrue(e.store_id.startswith("store-"))
        with flybus.connect(self.router.socket, client_id="py-right-root", store_root=self.router.store) as c:
            self.assertEqual(c.info["storeId"], e.store_id)

    def test_no_store_root_is_not_checked(self):
        with flybus.connect(self.router.socket, client_id="py-no-root") as c:
            self.assertIsNone(c.store_root)


if __name__ == "__main__":
    unittest.main()
