"""The recording reader, on the samples the Go writer wrote
(record/testdata/sample*.mcap, which a Go test keeps byte-equal to what the
writer writes) and on damaged copies of them."""

import hashlib
import os
import pathlib
import struct
import tempfile
import unittest

from flybus import mcap

SAMPLES = pathlib.Path(__file__).resolve().parents[2] / "record" / "testdata"


def frame():
    return bytes((i * 7) & 0xFF for i in range(4096))


class ReadSample(unittest.TestCase):
    def test_publications_in_order(self):
        with mcap.open_recording(SAMPLES / "sample.mcap") as rec:
            pubs = [(p.topic, p.topic_sequence, p.replaced, p.retention, p.payload, p.topic_incarnation,
                     [(a.name, a.content_type, bytes(a.data)) for a in p.artifacts], p.log_time) for p in rec]
        self.assertEqual([p[:6] for p in pubs], [
            ("cam.front", 1, 0, "none", {"seq": 1, "width": 32, "height": 32}, "top-1"),
            ("tel", 2, 1, "latest", {"speed": 1.5}, "top-2"),
            ("cam.front", 3, 2, "none", {"seq": 2}, "top-1"),
        ])
        self.assertEqual(pubs[0][6], [("frame", "image/x-rgba", frame())])
        self.assertEqual(pubs[2][6], [("frame", "image/x-rgba", frame()), ("meta", "text/plain", b"hello")])
        self.assertEqual([p[7] - pubs[0][7] for p in pubs], [0, 16_666_667, 33_333_334])

    def test_artifacts_are_memoryviews_with_digests(self):
        rec = mcap.open_recording(SAMPLES / "sample.mcap")
        pub = next(iter(rec))
        art = pub.artifact("frame")
        self.assertIsInstance(art.data, memoryview)
        self.assertTrue(art.data.readonly)
        self.assertEqual(hashlib.sha256(art.data).hexdigest(), art.digest)
        # A view still held keeps the mapping: closing leaves it valid.
        rec.close()
        self.assertEqual(bytes(art.data[:3]), frame()[:3])

    def test_directory_of_parts_and_several_files_read_as_one(self):
        with tempfile.TemporaryDirectory() as d:
            data = (SAMPLES / "sample.mcap").read_bytes()
            for name in ("run-0002.mcap", "run-0001.mcap"):
                pathlib.Path(d, name).write_bytes(data)
            with mcap.open_recording(d) as rec:
                self.assertEqual([os.path.basename(f) for f in rec.files], ["run-0001.mcap", "run-0002.mcap"])
                self.assertEqual(len([p.topic for p in rec]), 6)


class BadInput(unittest.TestCase):
    def read(self, data: bytes):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.mcap")
            with open(path, "wb") as f:
                f.write(data)
            got = []
            with mcap.open_recording(path) as rec:
                try:
                    for p in rec:
                        got.append((p.topic, [bytes(a.data) for a in p.artifacts]))
                except mcap.RecordingError as e:
                    self.assertEqual(e.file, path)
                    self.assertGreaterEqual(e.offset, 0)
                    self.assertLessEqual(e.offset, len(data))
                    return got, e
            return got, None

    def test_not_mcap(self):
        for data in (b"", b"hello, this is not a recording"):
            got, err = self.read(data)
            self.assertEqual(got, [])
            self.assertIn("not an MCAP file", str(err))

    def test_truncated_anywhere_gives_whole_publications_then_an_error(self):
        data = (SAMPLES / "sample.mcap").read_bytes()
        end = data.rindex(b"\x0f" + struct.pack("<Q", 4))  # the data end record
        for cut in range(40, end, 97):
            got, err = self.read(data[:cut])
            self.assertIsNotNone(err, cut)
            self.assertIn("truncated", err.detail)
            for topic, arts in got:
                for a in arts:
                    self.assertIn(a, (frame(), b"hello"))

    def test_crc_mismatch(self):
        data = bytearray((SAMPLES / "sample.mcap").read_bytes())
        i = data.index(b"hello")
        data[i] ^= 0x20
        got, err = self.read(bytes(data))
        self.assertIsNotNone(err)
        self.assertIn("CRC mismatch", err.detail)
        self.assertNotIn(("cam.front", [frame(), b"Hello"]), got)

    def test_zstd_is_refused_clearly(self):
        got, err = self.read((SAMPLES / "sample-zstd.mcap").read_bytes())
        self.assertEqual(got, [])
        self.assertIn("zstd chunk", err.detail)


if __name__ == "__main__":
    unittest.main()
