import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

from _router import REPO, flybus_binary


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
        self.assertIn("| pool, a mapping per view |", out.stdout)
        if sys.version_info >= (3, 12):
            self.assertIn("| pool, the mapping cached per slot |", out.stdout)


@unittest.skipUnless(importlib.util.find_spec("setuptools"), "this interpreter has no setuptools to build with")
class PackagingTest(unittest.TestCase):
    """What `pip install ./python` installs: the source distribution its
    build backend makes from pyproject.toml. (A wheel needs the wheel
    package, which these machines cannot download.)"""

    def test_the_sdist_holds_the_whole_package(self):
        with tempfile.TemporaryDirectory() as out:
            # Built from a copy: the backend writes its egg-info beside the sources.
            src = os.path.join(out, "python")
            shutil.copytree(os.path.join(REPO, "python"), src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            build = subprocess.run([sys.executable, "-c", f"import setuptools.build_meta as b; print(b.build_sdist({out!r}))"],
                                   cwd=src, capture_output=True, text=True, timeout=120)
            self.assertEqual(build.returncode, 0, build.stdout + build.stderr)
            name = build.stdout.split()[-1]
            with tarfile.open(os.path.join(out, name)) as t:
                t.extractall(out, filter="data") if hasattr(tarfile, "data_filter") else t.extractall(out)
            top = os.path.join(out, name[: -len(".tar.gz")])
            want = sorted(f for f in os.listdir(os.path.join(REPO, "python", "src", "flybus")) if f.endswith(".py"))
            self.assertEqual(sorted(f for f in os.listdir(os.path.join(top, "src", "flybus")) if f.endswith(".py")), want)
            # The extracted package imports on its own, contract included.
            probe = subprocess.run([sys.executable, "-c", "import flybus; print(flybus.__file__, flybus.CONTRACT_DIGEST)"],
                                   cwd=out, env={**os.environ, "PYTHONPATH": os.path.join(top, "src")},
                                   capture_output=True, text=True, timeout=60)
            self.assertEqual(probe.returncode, 0, probe.stderr)
            self.assertTrue(probe.stdout.startswith(os.path.join(top, "src", "flybus")), probe.stdout)


if __name__ == "__main__":
    unittest.main()
