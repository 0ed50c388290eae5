import os
import subprocess
import sys
import unittest

from ._router import REPO, flybus_binary


class FramesExampleTest(unittest.TestCase):
    def test_frames_example_in_both_store_modes(self):
        for mode in ("files", "pool"):
            with self.subTest(mode):
                out = subprocess.run([sys.executable, os.path.join(REPO, "python", "examples", "frames.py"),
                                      "--flybus", flybus_binary(), "--store-mode", mode],
                                     capture_output=True, text=True, timeout=120)
                self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
                self.assertIn("python viewer: 60 frames seen, 60 digests matched", out.stdout)
                self.assertIn("go subscriber: 60 frames saved, 60 digests matched", out.stdout)
                self.assertIn("router: 60 artifacts collected, 0 left", out.stdout)


class BenchTest(unittest.TestCase):
    def test_the_bench_runs(self):
        out = subprocess.run([sys.executable, "-m", "flybus.bench", "--flybus", flybus_binary(), "--frames", "3",
                              "--calls", "5", "--no-go"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": os.path.join(REPO, "python", "src")})
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("| files |", out.stdout)
        self.assertIn("| pool |", out.stdout)


if __name__ == "__main__":
    unittest.main()
