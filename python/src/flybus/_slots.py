"""Pool mode's cached slot mappings, and the per-view exporter that makes
them safe to share.

A router whose store runs in pool mode reuses slot files across
generations, and its artifact ids name the slots. A consumer keeps one
read-only mapping per slot it has viewed: a later view of that slot is a
slice of the cached mapping, with no artifact.open round trip, no mmap and
no page faults on pages already mapped.

Sharing a mapping must not weaken the view lifetime rule. Releasing a
memoryview of a shared mapping does not notice the slices and arrays the
program made from it (they hold the mapping, not the view), so each view
hands out a fresh _Exporter instead: an object with the buffer protocol of
Python 3.12 (PEP 688) that counts the buffers taken from it until each is
released. Before 3.12 a class cannot export buffers and every view maps
the slot of its own.

Mappings go when the client closes, when more than MAX slots are cached
(least recently viewed first), and when a slot has not been viewed for
IDLE seconds: the router unlinks idle slots, and a consumer's mapping must
not pin their pages for ever.
"""

import re
import sys
import threading
import time

# A class can export buffers from Python 3.12 (PEP 688).
CAN_COUNT_EXPORTS = sys.version_info >= (3, 12)

MAX = 64
IDLE = 30.0

_SLOT_NAME = re.compile(r"slot-[0-9a-f]{16}\Z")


def is_slot_path(rel_path):
    """Whether rel_path names a pooled store's slot."""
    return _SLOT_NAME.match(rel_path) is not None


class _Exporter:
    """One view's bytes: a read-only slice of a cached slot mapping that
    counts the buffers taken from it (memoryview(exporter), and through it
    every slice and numpy array) until each is released."""

    __slots__ = ("_data", "_live", "_lock", "__weakref__")

    def __init__(self, data):
        self._data, self._live, self._lock = data, 0, threading.Lock()

    def __buffer__(self, flags):
        with self._lock:
            if self._data is None:
                raise ValueError("this view was closed")
            self._live += 1
            return self._data[:]  # read-only: a writable request fails here

    def __release_buffer__(self, view):
        with self._lock:
            self._live -= 1
        view.release()

    def exported(self):
        with self._lock:
            return self._live > 0

    def end(self):
        with self._lock:
            data, self._data = self._data, None
        if data is not None:
            data.release()


class Slot:
    """A cached mapping of one slot file, and how many views use it."""

    __slots__ = ("aid", "map", "mv", "views", "used", "evicted")

    def __init__(self, aid, m):
        self.aid, self.map, self.mv = aid, m, memoryview(m)
        self.views, self.used, self.evicted = 1, time.monotonic(), False

    def export(self, size):
        return _Exporter(self.mv[:size])

    def unmap(self):
        # Every view of it has ended, so nothing is exported from it.
        self.mv.release()
        self.map.close()


class SlotCache:
    def __init__(self):
        self._lock = threading.Lock()
        self._entries = {}
        self._closed = False
        self._timer = None
        self.hits = self.maps = self.unmaps = 0

    def get(self, aid, size):
        """The cached mapping of slot aid with a view counted on it, if it
        holds at least size bytes."""
        with self._lock:
            s = self._entries.get(aid)
            if s is None or len(s.mv) < size:
                return None
            s.views += 1
            s.used = time.monotonic()
            self.hits += 1
            return s

    def put(self, aid, m):
        """Caches a fresh mapping of slot aid with one view counted on it. If
        another thread cached the slot meanwhile, m is unmapped and that one
        used."""
        drop = []
        with self._lock:
            self.maps += 1
            s = Slot(aid, m)
            if self._closed:
                s.evicted = True
                return s
            old = self._entries.get(aid)
            if old is not None and len(old.mv) >= len(s.mv):
                old.views += 1
                old.used = time.monotonic()
                self.unmaps += 1
                drop.append(s)
                s = old
            else:
                if old is not None:
                    drop += self._evict(old)
                self._entries[aid] = s
                while len(self._entries) > MAX:
                    idle = [e for e in self._entries.values() if e.views == 0]
                    if not idle:
                        break  # every cached slot is being viewed
                    drop += self._evict(min(idle, key=lambda e: e.used))
                if self._timer is None:
                    self._arm()
        for d in drop:
            d.unmap()
        return s

    def release(self, s):
        """Ends one view of s."""
        with self._lock:
            s.views -= 1
            last = s.views == 0 and s.evicted
            if last:
                self.unmaps += 1
        if last:
            s.unmap()

    def close(self):
        """Unmaps every slot nobody views; the others go with their last view."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            drop = [d for e in list(self._entries.values()) for d in self._evict(e)]
        for d in drop:
            d.unmap()

    def stats(self):
        with self._lock:
            return {"cached_slots": len(self._entries), "slot_hits": self.hits, "slot_maps": self.maps,
                    "slot_unmaps": self.unmaps}

    def _evict(self, s):
        # Out of the table; unmapped now if nobody views it (by the caller,
        # outside the lock), else with its last view.
        del self._entries[s.aid]
        s.evicted = True
        if s.views == 0:
            self.unmaps += 1
            return [s]
        return []

    def _arm(self):
        self._timer = threading.Timer(IDLE, self._sweep)
        self._timer.daemon = True
        self._timer.start()

    def _sweep(self):
        now = time.monotonic()
        with self._lock:
            drop = [d for e in list(self._entries.values()) if now - e.used >= IDLE for d in self._evict(e)]
            self._timer = None
            if self._entries and not self._closed:
                self._arm()
        for d in drop:
            d.unmap()
