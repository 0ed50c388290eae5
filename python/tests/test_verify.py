"""Artifact.verify against a real router: a sealed file changed behind the
router's back, as its owning user could, no longer verifies."""

import hashlib
import os
import stat
import unittest

import flybus

from _router import Router


def frame_data(size):
    """size deterministic bytes, none of them 0xA5, so a tamper always
    changes them."""
    return bytes(b if b != 0xA5 else 0 for b in (((i * 7) + (i >> 8)) & 0xFF for i in range(size)))


class VerifyTests:
    """Run in each store mode (the subclasses below)."""

    mode = "files"
    clients = 0

    @classmethod
    def setUpClass(cls):
        cls.router = Router(store_mode=cls.mode)

    @classmethod
    def tearDownClass(cls):
        cls.router.stop()

    def setUp(self):
        VerifyTests.clients += 1
        self.c = flybus.connect(self.router.socket, client_id=f"verify-{self.mode}-{VerifyTests.clients}",
                                store_root=self.router.store)
        self.addCleanup(self.c.close)

    def seal(self, data, digest=True):
        with self.c.allocate(len(data), "application/octet-stream") as w:
            w.write(data)
            art = w.seal(digest=hashlib.sha256(data).hexdigest() if digest else None)
        self.addCleanup(art.close)
        return art

    def tamper(self, art, offset):
        """Makes the sealed 0444 file writable again and changes one byte,
        as the user the router runs as could."""
        fd, rel_path = art._open(10)
        os.close(fd)
        path = os.path.join(self.router.store, art.ref["storeId"], rel_path)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o444)
        os.chmod(path, 0o644)
        wfd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(wfd, b"\xa5", offset)
        finally:
            os.close(wfd)

    def test_a_tampered_artifact_fails_verify(self):
        data = frame_data(64 << 10)
        art = self.seal(data)
        art.verify()  # untouched: no error
        with art.view() as mv:  # held across the tamper: pool mode keeps the slot mapped
            self.tamper(art, 1000)
            self.assertEqual(mv[1000], 0xA5, "the test changed another file")
            with self.assertRaises(flybus.DigestMismatch) as cm:
                art.verify()
        e = cm.exception
        self.assertIsInstance(e, flybus.FlybusError)
        self.assertNotIsInstance(e, flybus.NoDigest)
        want = hashlib.sha256(data).hexdigest()
        changed = bytearray(data)
        changed[1000] = 0xA5
        got = hashlib.sha256(changed).hexdigest()
        self.assertEqual((e.artifact_id, e.expected, e.actual), (art.ref["artifactId"], want, got))
        for s in (art.ref["artifactId"], want, got):
            self.assertIn(s, str(e))

    def test_an_artifact_sealed_without_a_digest_cannot_be_verified(self):
        art = self.seal(frame_data(4096), digest=False)
        self.assertIsNone(art.ref["digest"])
        with self.assertRaises(flybus.NoDigest) as cm:
            art.verify()
        self.assertNotIsInstance(cm.exception, flybus.DigestMismatch)
        self.assertIn("sealed without a digest", str(cm.exception))
        self.assertIn(art.ref["artifactId"], str(cm.exception))

    def test_verify_needs_an_open_artifact(self):
        art = self.seal(frame_data(4096))
        art.close()
        with self.assertRaises(ValueError):
            art.verify()


class FilesModeVerifyTests(VerifyTests, unittest.TestCase):
    mode = "files"


class PoolModeVerifyTests(VerifyTests, unittest.TestCase):
    mode = "pool"


if __name__ == "__main__":
    unittest.main()
