"""A real `flybus serve` for the tests: built once with `go build` from the
repository, started in a temporary directory per test class."""

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import unittest

import flybus

REPO = pathlib.Path(__file__).resolve().parents[2]
_built = None
_lock = threading.Lock()


def flybus_binary():
    """The flybus executable: FLYBUS_BIN if set, else built once into a
    temporary directory."""
    global _built
    with _lock:
        if os.environ.get("FLYBUS_BIN"):
            return os.environ["FLYBUS_BIN"]
        if _built is None:
            out = pathlib.Path(tempfile.mkdtemp(prefix="flybus-py-bin-")) / "flybus"
            subprocess.run(["go", "build", "-o", str(out), "./cmd/flybus"], cwd=REPO, check=True)
            _built = str(out)
        return _built


_built_service = None


def goservice_binary():
    """internal/goservice, the Go service peer, built once."""
    global _built_service
    with _lock:
        if _built_service is None:
            out = pathlib.Path(tempfile.mkdtemp(prefix="flybus-py-bin-")) / "goservice"
            subprocess.run(["go", "build", "-o", str(out), "./internal/goservice"], cwd=REPO, check=True)
            _built_service = str(out)
        return _built_service


class Router:
    """flybus serve --open on a socket in a fresh directory, or, given dir,
    in the directory of a router that has ended: the new one runs on the
    same store root (sweeping what a killed router left there)."""

    def __init__(self, store_mode="pool", dir=None):
        self.mode = store_mode
        self.dir = dir or tempfile.mkdtemp(prefix="flybus-py-")
        os.chmod(self.dir, 0o700)
        self.store = os.path.join(self.dir, "store")
        self.socket = os.path.join(self.dir, "bus.sock")
        if dir is not None and os.path.exists(self.socket):
            os.unlink(self.socket)  # left by a router that was killed
        self.proc = subprocess.Popen(
            [flybus_binary(), "serve", "--open", "--store", self.store, "--store-mode", store_mode,
             "--listen", self.socket, "--log-format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("flybus serve did not start: " + self.proc.stderr.read())
        self.ready = json.loads(line)

    def tool(self, *args, input=None, timeout=30):
        """Runs a flybus tool against this router."""
        return subprocess.run([flybus_binary(), *args], input=input, capture_output=True, text=True, timeout=timeout)

    def go_service(self, name):
        """Starts internal/goservice serving name; returns the process once
        it is registered. Closing its stdin stops it."""
        p = subprocess.Popen([goservice_binary(), "--socket", self.socket, "--store", self.store, "--name", name],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.stdout.readline().strip() != "ready":
            p.kill()
            raise RuntimeError("goservice did not start: " + p.stderr.read())
        return p

    def stop(self, keep_dir=False):
        """Shuts the router down (SIGTERM) and removes its directory, unless
        keep_dir: a successor is to run on the same store root."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.proc.stdout.close()
        self.proc.stderr.close()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def kill(self):
        """Kills the router (SIGKILL): it cleans nothing up. The directory
        stays for a successor; stop() it still to remove it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


class RouterCase(unittest.TestCase):
    """Against a real flybus serve, started once for the class."""

    @classmethod
    def setUpClass(cls):
        cls.router = Router()

    @classmethod
    def tearDownClass(cls):
        cls.router.stop()

    def client(self, name):
        c = flybus.connect(self.router.socket, client_id=name, store_root=self.router.store)
        self.addCleanup(c.close)
        return c
