"""Artifacts: immutable bytes in the router's store, read through mappings.

A producer allocates a staging file, fills it (write, write_at, or the
writable buffer()) and seals it; the router proves no writer is left
before the bytes count as immutable. A consumer takes an Artifact from a
message, request or result (sharing that delivery: the delivery is
consumed once the message and every artifact taken from it are closed)
and reads it through view(), a read-only memoryview of a mapping that
cannot outlive the artifact: leaving the view while the program still
holds a slice of it, or an array made from it, raises BufferError and
keeps the artifact owned.

A view stays mapped until the program closes it, also after its client
has closed or lost its connection: the router keeps the bytes it shows
(files mode unlinks the file, pool mode retires the slot rather than
reusing it), so it never shows a later artifact's bytes.

In files mode every view maps the file of its own. In pool mode, from
Python 3.12, a view is a slice of a mapping the client keeps per slot
(_slots.py says how that stays safe); before 3.12 it maps the slot of its
own. Files are opened beneath the store root without following a symbolic
link.

Artifact.verify() checks, when the program asks, that the bytes still hash
to the digest they were sealed with: the seal keeps earlier writers out,
but a program running as the router's user, or root, can still change a
sealed file (docs/integrity.md).
"""

import hashlib
import logging
import mmap
import os
import threading
import weakref

from . import _slots
from .errors import FlybusError

_log = logging.getLogger("flybus")


class DigestMismatch(FlybusError):
    """An artifact's bytes no longer hash to the digest it was sealed with:
    they were changed after the seal. artifact_id, expected (the sealed
    digest) and actual (what the bytes hash to now) say which and how."""

    def __init__(self, artifact_id, generation, expected, actual):
        super().__init__(f"the bytes of {artifact_id} (generation {generation}) changed after its seal: "
                         f"they hash to sha256 {actual}, it was sealed with {expected}")
        self.artifact_id, self.expected, self.actual = artifact_id, expected, actual


class NoDigest(FlybusError):
    """The artifact was sealed without a digest: there is nothing to verify
    its bytes against."""

    def __init__(self, artifact_id, generation):
        super().__init__(f"{artifact_id} (generation {generation}) was sealed without a digest: "
                         "there is nothing to verify its bytes against")
        self.artifact_id = artifact_id


def watch(client, handle, what, release):
    """The safety net of a handle the program forgets to close: when it is
    collected unclosed, release (which must not refer to the handle) gives
    back what it held, counted in client.stats()["leaked"]. Correctness
    never depends on it: collection may come late or not at all."""
    return weakref.finalize(handle, _leaked, client, what, release)


def _leaked(client, what, release):
    if client._lost is not None:
        # The connection has ended and the router released everything:
        # release sends nothing now, and frees only what is local (a
        # descriptor, a mapping, the handle's count).
        release()
        return
    _log.warning("flybus: a %s was garbage-collected without close; released what it held", what)
    client._count("leaked")
    release()


class Closing:
    """A handle that is its own context manager: leaving the block closes it."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Owning(Closing):
    """A handle on something the router keeps for it (a delivery, a hold, a
    reply capability): close releases it once, whichever thread closes and
    however often, and watch() releases it if the program forgets. It
    counts among the client's open handles under owner (the id of what it
    holds) from now, or, unless opened, from when the program gets it
    (self._handle is then opened)."""

    def _own(self, client, what, release, owner, opened=True):
        self._closed = False
        self._lock = threading.Lock()
        handles = client._handles
        h = self._handle = handles.new(what, owner, opened)
        self._release = lambda: (handles.close(h), release())
        self._net = watch(client, self, what, self._release)

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._net.detach()
        self._release()


class _Guard:
    """One owner on the router (a delivery or a hold) shared by handles; the
    last handle to let go releases it."""

    def __init__(self, owner, release):
        self.owner, self._release = owner, release
        self._refs = 1
        self._lock = threading.Lock()
        # Called after the release, if set: a subscription's credit coming
        # back (set before the program can drop the last handle).
        self.after = None

    def add(self):
        with self._lock:
            if self._refs == 0:
                return False
            self._refs += 1
            return True

    def drop(self):
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._release()
            if self.after is not None:
                self.after()


def _open_beneath(root, store_id, rel_path, flags):
    """Opens store_id/rel_path under root one component at a time with
    O_NOFOLLOW; the result must be a regular file."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        parts = [store_id] + rel_path.split("/")
        for part in parts[:-1]:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nfd
        f = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    import stat

    if not stat.S_ISREG(os.fstat(f).st_mode):
        os.close(f)
        raise OSError(f"{store_id}/{rel_path} is not a regular file")
    os.set_blocking(f, True)
    return f


class ArtifactWriter(Closing):
    """A staging file being filled. Seal it, or leave its context (or close
    it) to abandon it."""

    def __init__(self, client, value, size, content_type):
        self._client = client
        self.artifact_id = value["artifactId"]
        self.generation = value["generation"]
        self.owner = value["ownerId"]
        self.size, self.content_type = size, content_type
        loc = value["writeLocation"]
        self._store_id = loc["storeId"]
        self._fd = _open_beneath(client._store_root(), loc["storeId"], loc["relativePath"], os.O_RDWR)
        self._map = None
        self._off = 0
        self._done = False
        self._lock = threading.Lock()
        fd, owner = self._fd, self.owner
        handles = client._handles
        h = self._handle = handles.new("ArtifactWriter", owner)
        self._net = watch(client, self, "ArtifactWriter", lambda: (
            handles.close(h), os.close(fd), client._fire("artifact.release", {"ownerIds": [owner]})))

    def _live(self):
        self._check_done()
        stale = self._client._stale()
        if stale is not None:
            raise stale

    def _check_done(self):
        if self._done:
            raise ValueError("this artifact writer was already sealed or closed")

    def write(self, data):
        with self._lock:
            n = self._write_at(data, self._off)
            self._off += n
            return n

    def write_at(self, data, offset):
        with self._lock:
            return self._write_at(data, offset)

    def _write_at(self, data, offset):
        self._live()
        if not 0 <= offset <= self.size or offset + len(data) > self.size:
            raise ValueError(f"a write of {len(data)} bytes at {offset} is outside the artifact's {self.size}")
        return os.pwrite(self._fd, data, offset)

    def buffer(self):
        """A writable memoryview of the staging file, valid until seal."""
        with self._lock:
            self._live()
            if self._map is None:
                self._map = mmap.mmap(self._fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            return memoryview(self._map)

    def _end(self):
        with self._lock:
            self._check_done()
            if self._map is not None:
                self._map.close()  # BufferError while the program holds the buffer: it must let go first
                self._map = None
            self._done = True
            self._net.detach()
            self._client._handles.close(self._handle)
            os.close(self._fd)

    def seal(self, digest=None, timeout=10.0, wait=True):
        """Makes the bytes immutable; returns the Artifact, held by the
        writer's id. digest, 64 lowercase hex digits of SHA-256, has the
        router check the bytes (ARTIFACT_MISMATCH).

        wait=False sends the seal and returns at once, as Go's NoWait: the
        Artifact can be attached to a publish or a call straight away (the
        router seals before it handles the next command, and refuses that
        command if the seal was refused); artifact.sealed() waits for the
        router's answer and raises its refusal."""
        with self._lock:
            self._live()
        self._end()
        c = self._client
        body = {"artifactId": self.artifact_id, "generation": self.generation, "ownerId": self.owner, "digest": digest}
        if not wait:
            from .client import _Waiter  # client imports this module

            w = _Waiter("artifact.seal")
            ref = {"storeId": self._store_id, "artifactId": self.artifact_id, "generation": self.generation,
                   "byteLength": str(self.size), "contentType": self.content_type, "digest": digest}
            # The artifact's hold is the writer's id whatever the answer:
            # after a refusal its close releases that id.
            a = Artifact(c, ref, c._hold_guard(self.owner))
            try:
                c._send("artifact.seal", body, w)
            except Exception:
                a.close()
                raise
            a._seal = w
            return a
        try:
            v = c._request("artifact.seal", body, timeout)
        except Exception:
            c._fire("artifact.release", {"ownerIds": [self.owner]})
            raise
        return Artifact(c, v["ref"], c._hold_guard(v["ownerId"]))

    def close(self):
        """Abandons an unsealed writer; a no-op after seal."""
        with self._lock:
            if self._done:
                return
        self._end()
        self._client._fire("artifact.release", {"ownerIds": [self.owner]})


class Artifact(Owning):
    """A read-only handle on an immutable artifact."""

    def __init__(self, client, ref, guard):
        self._client, self.ref, self._guard = client, ref, guard
        self._seal = None  # a seal sent with wait=False, until sealed() saw its answer
        self._own(client, "Artifact", guard.drop, guard.owner)

    def sealed(self, timeout=10.0):
        """The router's ref once the seal is answered: at once for an
        artifact sealed with waiting or delivered; after seal(wait=False),
        waits for the answer and raises the seal's refusal."""
        w = self._seal
        if w is None:
            return self.ref
        if not w.done.wait(timeout):
            raise TimeoutError(f"the seal of {self.ref['artifactId']} was not answered within {timeout} s")
        if w.error is not None:
            raise w.error
        self.ref, self._seal = w.value["ref"], None
        return self.ref

    @property
    def owner(self):
        return self._guard.owner

    @property
    def size(self):
        return int(self.ref["byteLength"])

    def _take(self):
        if self._closed:
            raise ValueError("this artifact was already closed")
        stale = self._client._stale()
        if stale is not None:
            raise stale
        if not self._guard.add():
            raise ValueError("this artifact was already closed")

    def _open(self, timeout):
        """A descriptor of the artifact's file, and its path in the store."""
        c = self._client
        v = c._request("artifact.open", {"ref": self.ref, "ownerId": self.owner}, timeout)
        loc = v["readLocation"]
        return _open_beneath(c._store_root(), loc["storeId"], loc["relativePath"], os.O_RDONLY), loc["relativePath"]

    def retain(self, timeout=10.0):
        """An independent hold on the artifact, which outlives this handle."""
        self._take()
        try:
            v = self._client._request("artifact.retain", {"ref": self.ref, "ownerId": self.owner}, timeout)
        finally:
            self._guard.drop()
        return Artifact(self._client, self.ref, self._client._hold_guard(v["ownerId"]))

    def read_all(self, timeout=10.0):
        """A copy of the bytes."""
        self._take()
        try:
            fd, _ = self._open(timeout)
            try:
                if os.fstat(fd).st_size != self.size:
                    raise OSError(f"{self.ref['artifactId']}'s file does not hold its {self.size} bytes")
                return os.pread(fd, self.size, 0) if self.size else b""
            finally:
                os.close(fd)
        finally:
            self._guard.drop()

    def view(self, timeout=10.0):
        """A context manager yielding a read-only memoryview of the bytes."""
        return View(self, timeout)

    def digest(self, timeout=10.0):
        """The SHA-256 of the bytes, read through a view."""
        with self.view(timeout) as mv:
            return hashlib.sha256(mv).hexdigest()

    def verify(self, timeout=10.0):
        """Checks that the bytes still hash to the digest the artifact was
        sealed with (ref["digest"]); raises DigestMismatch if they do not,
        NoDigest if it was sealed without one.

        The seal proves that nothing which had the file open can write it
        afterwards, but a program running as the router's user, or root,
        can still make a sealed file writable and change it. verify detects
        that as of the moment it runs; the bytes may change again after it
        returns. It hashes every byte through a view, about 0.75 ms for a
        1.2 MB frame on a CPU with SHA instructions: for tests, hosts where
        not every program of that user is trusted, and debugging (see
        docs/integrity.md)."""
        want = self.ref.get("digest")
        if not want:
            raise NoDigest(self.ref["artifactId"], self.ref["generation"])
        got = self.digest(timeout)
        if got != want:
            raise DigestMismatch(self.ref["artifactId"], self.ref["generation"], want, got)


class View:
    """A read-only mapping of an artifact, holding its owner until closed."""

    def __init__(self, artifact, timeout):
        self._artifact, self._timeout = artifact, timeout
        self._map = self._mv = self._slot = self._exp = None
        self._net = self._handle = None

    def __enter__(self):
        a = self._artifact
        a._take()
        try:
            if a.size == 0:
                self._mv = memoryview(b"")
                self._handle = a._client._handles.new("View", a.owner)
                return self._mv
            cache = a._client._slots
            if cache is not None:
                s = cache.get(a.ref["artifactId"], a.size)
                if s is not None:
                    return self._cached(cache, s)
            fd, rel_path = a._open(self._timeout)
            try:
                if cache is not None and _slots.is_slot_path(rel_path):
                    if os.fstat(fd).st_size < a.size:
                        raise OSError(f"{a.ref['artifactId']}'s slot does not hold its {a.size} bytes")
                    # The whole slot, so that a later, larger generation
                    # fits the same mapping.
                    m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
                    return self._cached(cache, cache.put(a.ref["artifactId"], m))
                self._map = mmap.mmap(fd, a.size, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                os.close(fd)  # the mapping keeps the pages
        except BaseException:
            a._guard.drop()
            raise
        self._mv = memoryview(self._map)
        m, g = self._map, a._guard
        handles = a._client._handles
        h = self._handle = handles.new("View", g.owner)
        self._net = watch(a._client, self, "View", lambda: (handles.close(h), _unmap(m), g.drop()))
        return self._mv

    def _cached(self, cache, s):
        a = self._artifact
        self._slot, self._exp = s, s.export(a.size)
        self._mv = memoryview(self._exp)
        # The safety net watches the exporter, not the view: it is collected
        # only once nothing the program made from the view is left.
        exp, g = self._exp, a._guard
        handles = a._client._handles
        h = self._handle = handles.new("View", g.owner)
        self._net = watch(a._client, exp, "View", lambda: (handles.close(h), cache.release(s), g.drop()))
        return self._mv

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Unmaps (or lets go of the cached slot mapping) and lets go of the
        artifact. While the program still holds bytes exported from the
        view, raises BufferError and keeps both: a pointer into the mapping
        never outlives its artifact."""
        if self._mv is None:
            return
        try:
            # Each refuses while something holds the bytes: release() an
            # export of the view itself (numpy.frombuffer(mv)); close() a
            # slice, an export of the mapping; the exporter counts both.
            self._mv.release()
            if self._exp is not None:
                if self._exp.exported():
                    raise BufferError
                self._exp.end()
            elif self._map is not None:
                self._map.close()
        except BufferError:
            raise BufferError("the view's bytes are still referenced (a slice of it, or an array made from it): "
                              "drop them, then close the view again; the artifact stays owned meanwhile") from None
        if self._net is not None:
            self._net.detach()
        if self._handle is not None:
            self._artifact._client._handles.close(self._handle)
        if self._slot is not None:
            self._artifact._client._slots.release(self._slot)
        self._mv = self._map = self._slot = self._exp = self._handle = None
        self._artifact._guard.drop()


def _unmap(m):
    try:
        m.close()
    except BufferError:
        pass  # something still exports its bytes: the mapping stays until that goes
