"""Read flybus recordings (MCAP files written by ``flybus record``).

Standard library only. Reads uncompressed recordings (``--compression
none``, the default); a zstd chunk raises RecordingError. The layout is in
docs/recording.md::

    from flybus import mcap

    with mcap.open_recording("run-0001.mcap", "run-0002.mcap") as rec:
        for pub in rec:
            print(pub.topic, pub.topic_sequence, pub.payload)
            for art in pub.artifacts:
                frame = art.data          # a read-only memoryview of the file

A publication's payload is decoded JSON; an artifact's bytes are a
read-only memoryview of the file's mapping: no copy. The mapping stays as
long as any such view is referenced, and is unmapped with the last one (or
at close, when none is left). Bad input (a truncated, corrupt or foreign file, a CRC mismatch)
raises RecordingError naming the file and the offset; a publication is
yielded only whole.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterator

__all__ = ["RecordingError", "Artifact", "Publication", "Recording", "open_recording"]

MAGIC = b"\x89MCAP0\r\n"
_OP_HEADER, _OP_FOOTER, _OP_SCHEMA, _OP_CHANNEL, _OP_MESSAGE, _OP_CHUNK = 1, 2, 3, 4, 5, 6
_OP_DATA_END = 0x0F


class RecordingError(Exception):
    """Bad input at an offset of a file."""

    def __init__(self, file: str, offset: int, detail: str):
        super().__init__(f"{file}: offset {offset}: {detail}")
        self.file, self.offset, self.detail = file, offset, detail


@dataclass
class Artifact:
    name: str
    content_type: str
    digest: str | None
    data: memoryview


@dataclass
class Publication:
    file: str
    offset: int
    log_time: int  # receive time, nanoseconds since the Unix epoch
    topic: str
    topic_incarnation: str | None
    topic_sequence: int
    replaced: int
    retention: str | None
    payload: dict
    artifacts: list[Artifact] = field(default_factory=list)

    def artifact(self, name: str) -> Artifact:
        for a in self.artifacts:
            if a.name == name:
                return a
        raise KeyError(name)


def _files(paths) -> list[str]:
    out = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            parts = sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".mcap"))
            if not parts:
                raise FileNotFoundError(f"{p}: no .mcap files in the directory")
            out.extend(parts)
        else:
            out.append(p)
    if not out:
        raise ValueError("no recording named")
    return out


class _File:
    """One mapped file and its records."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise RecordingError(path, 0, "not an MCAP file: the file is empty")
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.view = memoryview(self.map)
        if bytes(self.view[:8]) != MAGIC:
            self.close()
            raise RecordingError(path, 0, "not an MCAP file: it does not start with the MCAP magic bytes")
        op, start, end = self._record(self.view, 8, 8)
        if op != _OP_HEADER:
            self.close()
            raise RecordingError(path, 8, "the first record is not a header")
        self.data_start = end
        self.channels: dict[int, dict] = {}

    def close(self):
        self.view.release()
        try:
            self.map.close()
        except BufferError:
            pass  # an artifact's view is still held: the mapping goes with the last one

    def _record(self, buf, pos: int, file_off: int):
        """The record at pos of buf: (opcode, content start, content end)."""
        if pos + 9 > len(buf):
            raise RecordingError(self.path, file_off, "truncated: the file ends inside a record (the recording was not finished)")
        op, n = struct.unpack_from("<BQ", buf, pos)
        if n > len(buf) - pos - 9:
            raise RecordingError(self.path, file_off, f"truncated: a record of {n} bytes runs past the end (the recording was not finished)")
        return op, pos + 9, pos + 9 + n

    def _string(self, buf, pos: int, end: int, off: int):
        if pos + 4 > end:
            raise RecordingError(self.path, off, "corrupt: a string runs past its record")
        (n,) = struct.unpack_from("<I", buf, pos)
        if pos + 4 + n > end:
            raise RecordingError(self.path, off, "corrupt: a string runs past its record")
        return bytes(buf[pos + 4 : pos + 4 + n]).decode("utf-8", "replace"), pos + 4 + n

    def _channel(self, buf, start: int, end: int, off: int):
        if start + 4 > end:
            raise RecordingError(self.path, off, "corrupt: a channel record is too short")
        cid, _schema = struct.unpack_from("<HH", buf, start)
        topic, p = self._string(buf, start + 4, end, off)
        encoding, p = self._string(buf, p, end, off)
        if p + 4 > end:
            raise RecordingError(self.path, off, "corrupt: a channel record is too short")
        (mlen,) = struct.unpack_from("<I", buf, p)
        p += 4
        mend = p + mlen
        if mend > end:
            raise RecordingError(self.path, off, "corrupt: a channel's metadata runs past its record")
        meta = {}
        while p < mend:
            k, p = self._string(buf, p, mend, off)
            v, p = self._string(buf, p, mend, off)
            meta[k] = v
        self.channels[cid] = {"id": cid, "topic": topic, "encoding": encoding, "metadata": meta}

    def _message(self, buf, start: int, end: int, off: int):
        if end - start < 22:
            raise RecordingError(self.path, off, "corrupt: a message record is too short")
        cid, seq, log_time, _pub = struct.unpack_from("<HIQQ", buf, start)
        if cid not in self.channels:
            raise RecordingError(self.path, off, f"corrupt: a message on channel {cid}, not defined before it")
        return cid, seq, log_time, buf[start + 22 : end], off

    def messages(self) -> Iterator[tuple]:
        """(channel id, sequence, log time, data, offset) in file order;
        a chunk's messages only once the whole chunk has been checked."""
        buf, pos = self.view, self.data_start
        while True:
            if pos == len(buf):
                raise RecordingError(self.path, pos, "truncated: the file ends without a data end record (the recording was not finished)")
            op, start, end = self._record(buf, pos, pos)
            off, pos = pos, end
            if op == _OP_CHANNEL:
                self._channel(buf, start, end, off)
            elif op == _OP_MESSAGE:
                yield self._message(buf, start, end, off)
            elif op == _OP_CHUNK:
                yield from self._chunk(buf, start, end, off)
            elif op in (_OP_DATA_END, _OP_FOOTER):
                return

    def _chunk(self, buf, start: int, end: int, off: int):
        if end == start:
            raise RecordingError(self.path, off, "truncated: an unfinished chunk (the recording was not finished)")
        if end - start < 40:
            raise RecordingError(self.path, off, "corrupt: a chunk record is too short")
        _t0, _t1, usize, crc = struct.unpack_from("<QQQI", buf, start)
        compression, p = self._string(buf, start + 28, end, off)
        if compression:
            raise RecordingError(self.path, off, f"unsupported: a {compression} chunk; this reader reads uncompressed recordings (record with --compression none, or read with the Go package)")
        if p + 8 > end:
            raise RecordingError(self.path, off, "corrupt: a chunk record is too short")
        (rlen,) = struct.unpack_from("<Q", buf, p)
        recs = buf[p + 8 : end]
        if rlen != len(recs) or usize != rlen:
            raise RecordingError(self.path, off, "corrupt: the chunk's lengths disagree")
        if crc and zlib.crc32(recs) != crc:
            raise RecordingError(self.path, off, f"CRC mismatch: the chunk's records have CRC {zlib.crc32(recs):08x}, the chunk says {crc:08x}")
        out, q = [], 0
        while q < len(recs):
            if q + 9 > len(recs):
                raise RecordingError(self.path, off, "corrupt: a record header cut off inside a chunk")
            op, n = struct.unpack_from("<BQ", recs, q)
            if n > len(recs) - q - 9:
                raise RecordingError(self.path, off, "corrupt: a record runs past its chunk")
            s, e = q + 9, q + 9 + n
            if op == _OP_CHANNEL:
                self._channel(recs, s, e, off)
            elif op == _OP_MESSAGE:
                out.append(self._message(recs, s, e, off))
            q = e
        yield from out


class Recording:
    """The publications of one or more recordings, read in order as one
    stream; directories stand for the .mcap files in them, in name order."""

    def __init__(self, *paths):
        self.files = _files(paths)
        self._open: list[_File] = []
        self.skipped = 0  # messages on channels that are not flybus's

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        files, self._open = self._open, []
        for f in files:
            f.close()

    def __iter__(self) -> Iterator[Publication]:
        for path in self.files:
            f = _File(path)
            self._open.append(f)
            yield from self._publications(f)

    def _publications(self, f: _File) -> Iterator[Publication]:
        it = f.messages()
        for cid, seq, log_time, data, off in it:
            ch = f.channels[cid]
            kind = ch["metadata"].get("flybus.kind")
            if kind == "artifact":
                raise RecordingError(f.path, off, f"an artifact message on {ch['topic']!r} without its publication")
            if kind != "publication":
                self.skipped += 1
                continue
            try:
                env = json.loads(bytes(data))
                topic, arts = env["topic"], env["artifacts"]
                payload = env["payload"]
            except (ValueError, KeyError, TypeError) as e:
                raise RecordingError(f.path, off, f"publication {seq}: not a flybus publication: {e}") from None
            pub = Publication(
                file=f.path, offset=off, log_time=log_time, topic=topic,
                topic_incarnation=env.get("topicIncarnation"), topic_sequence=env.get("topicSequence", 0),
                replaced=env.get("replaced", 0), retention=ch["metadata"].get("flybus.retention"), payload=payload,
            )
            for a in arts:
                nxt = next(it, None)
                if nxt is None:
                    raise RecordingError(f.path, off, f"publication {seq} on {topic}: the file ends before its artifact {a.get('name')}")
                acid, aseq, _, adata, aoff = nxt
                md = f.channels[acid]["metadata"]
                if (md.get("flybus.kind") != "artifact" or md.get("flybus.topic") != topic
                        or md.get("flybus.attachment") != a.get("name") or aseq != seq):
                    raise RecordingError(f.path, aoff, f"publication {seq} on {topic}: artifact {a.get('name')} should follow")
                if len(adata) != a.get("byteLength"):
                    raise RecordingError(f.path, aoff, f"publication {seq} on {topic}: artifact {a.get('name')} has {len(adata)} bytes, not {a.get('byteLength')}")
                pub.artifacts.append(Artifact(a["name"], a.get("contentType") or md.get("flybus.contentType", ""), a.get("digest"), adata))
            yield pub


def open_recording(*paths) -> Recording:
    """Open recordings (files, or directories of split parts) to iterate
    their publications; close it, or use it as a context manager."""
    return Recording(*paths)
