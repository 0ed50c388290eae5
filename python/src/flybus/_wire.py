"""Frames, strict JSON and the contract's schema.

A frame is a u32 little-endian length and that many bytes of JSON, at
most 65,536. Decoding is as strict as the Go SDK's: invalid UTF-8,
duplicate keys at any depth, NaN and Infinity, non-canonical integers and
any member the contract does not name are refused. The schema is read
from the contract text itself (_contract.CONTRACT), so this module has no
table of its own to drift from it.
"""

import json
import re
import struct

from ._contract import CONTRACT

MAX_ENVELOPE = 65536
MAX_U64 = (1 << 64) - 1
MAX_ATTACHMENTS = 32


class WireError(ValueError):
    """A frame or a body that breaks the contract."""


# ---- framing -------------------------------------------------------------


def frame(payload: bytes) -> bytes:
    if not 0 < len(payload) <= MAX_ENVELOPE:
        raise WireError(f"an envelope of {len(payload)} bytes is outside 1..{MAX_ENVELOPE}")
    return struct.pack("<I", len(payload)) + payload


class FrameReader:
    """Reads whole frames from a socket."""

    def __init__(self, sock):
        self._sock = sock
        self._buf = bytearray()

    def _fill(self, n):
        while len(self._buf) < n:
            chunk = self._sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                return False
            self._buf += chunk
        return True

    def read_frame(self):
        """The next frame's bytes, or None at a clean end of stream."""
        if not self._fill(4):
            if self._buf:
                raise WireError("the stream ended inside a frame's length")
            return None
        (n,) = struct.unpack_from("<I", self._buf)
        if not 0 < n <= MAX_ENVELOPE:
            raise WireError(f"a frame length of {n} is outside 1..{MAX_ENVELOPE}")
        if not self._fill(4 + n):
            raise WireError("the stream ended inside a frame")
        payload = bytes(self._buf[4 : 4 + n])
        del self._buf[: 4 + n]
        return payload


# ---- strict JSON ---------------------------------------------------------


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise WireError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constant(name):
    raise WireError(f"{name} is not JSON")


def _int(s):
    # "-0" parses as the integer 0 in Python; as a float it fails every
    # integer field, as it does in Go.
    return -0.0 if s == "-0" else int(s)


# MAX_DEPTH is the Go scanner's bound: 128 nested containers are accepted,
# 129 are not. Python's own limit depends on its version and its stack.
MAX_DEPTH = 128


def _check_tree(v):
    """Refuses lone surrogates, which \\u escapes can smuggle into a string,
    and nesting deeper than MAX_DEPTH containers."""
    stack = [(v, 0)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, str):
            if any("\ud800" <= c <= "\udfff" for c in x):
                raise WireError("a string holds a lone surrogate")
        elif isinstance(x, dict):
            if d == MAX_DEPTH:
                raise WireError("nested too deeply")
            for k, y in x.items():
                stack.append((k, d))
                stack.append((y, d + 1))
        elif isinstance(x, list):
            if d == MAX_DEPTH:
                raise WireError("nested too deeply")
            stack.extend((y, d + 1) for y in x)


def loads(b: bytes):
    """Parses one JSON text strictly."""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"invalid UTF-8: {e}") from None
    try:
        v = json.loads(s, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_int=_int)
    except RecursionError:
        raise WireError("nested too deeply") from None
    except json.JSONDecodeError as e:
        raise WireError(f"not JSON: {e}") from None
    _check_tree(v)
    return v


def dumps(v) -> bytes:
    """Encodes v as compact JSON; NaN and Infinity are refused."""
    try:
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError as e:
        raise WireError(str(e)) from None


# ---- the schema ----------------------------------------------------------

_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}\Z")
_NAME_BYTE = re.compile(r"[a-z0-9._-]+\Z")
_PRINTABLE = re.compile(r"[\x20-\x7e]+\Z")
_RELPATH_BYTE = re.compile(r"[A-Za-z0-9._-]+\Z")
_HEX = re.compile(r"[0-9a-f]+\Z")
_U64 = re.compile(r"(0|[1-9][0-9]{0,19})\Z")

SERIAL_PREFIX = {
    "MsgId": "msg-", "BusId": "bus-", "ConnId": "conn-", "SvcId": "svc-", "TopicId": "top-",
    "SubId": "sub-", "CallId": "call-", "ArtifactId": "a-", "DeliveryId": "dlv-",
}


def parse_serial(s, prefix):
    """The number of a serial id "<prefix><U64>", or None."""
    if not isinstance(s, str) or not s.startswith(prefix):
        return None
    return parse_u64(s[len(prefix):])


def parse_u64(s):
    if not isinstance(s, str) or not _U64.match(s):
        return None
    n = int(s)
    return n if n <= MAX_U64 else None


def _valid_name(s):
    if not isinstance(s, str) or not 0 < len(s) <= 192 or not _NAME_BYTE.match(s):
        return False
    return all(s.split("."))


def _valid_relpath(s):
    if not isinstance(s, str) or not 0 < len(s) <= 255:
        return False
    return all(p and p[0] != "." and _RELPATH_BYTE.match(p) for p in s.split("/"))


def _tag(s, prefix):
    return isinstance(s, str) and len(s) == len(prefix) + 16 and s.startswith(prefix) and bool(_HEX.match(s[len(prefix):]))


def _text(max_bytes):
    return lambda v: isinstance(v, str) and len(v.encode("utf-8")) <= max_bytes


def _is_int(v, lo=0, hi=MAX_U64):
    return type(v) is int and lo <= v <= hi


_SCALARS = {
    "Id": lambda v: isinstance(v, str) and bool(_ID.match(v)),
    "Name": _valid_name,
    "Method": lambda v: isinstance(v, str) and 0 < len(v) <= 128 and bool(_PRINTABLE.match(v)),
    "ContentType": lambda v: isinstance(v, str) and 0 < len(v) <= 127 and bool(_PRINTABLE.match(v)),
    "Text": _text(1024),  # the longest the router sends: an error message; reasons are 128
    "RelPath": _valid_relpath,
    "U64": lambda v: parse_u64(v) is not None,
    "int": _is_int,
    "bool": lambda v: type(v) is bool,
    "object": lambda v: isinstance(v, dict),
    "Digest": lambda v: isinstance(v, str) and len(v) == 64 and bool(_HEX.match(v)),
    "StoreId": lambda v: _tag(v, "store-"),
    "RouterId": lambda v: _tag(v, "router-"),
    "OwnerId": lambda v: parse_serial(v, "own-") is not None or parse_serial(v, "dlv-") is not None,
}
for _t, _p in SERIAL_PREFIX.items():
    _SCALARS[_t] = (lambda p: lambda v: parse_serial(v, p) is not None)(_p)


def _split_top(s, sep):
    """Splits s at sep outside braces and brackets."""
    out, depth, cur = [], 0, []
    i = 0
    while i < len(s):
        c = s[i]
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        if depth == 0 and s.startswith(sep, i):
            out.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(c)
        i += 1
    out.append("".join(cur))
    return [x.strip() for x in out]


def _parse_fields(s):
    s = s.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise ValueError(f"not an object shape: {s}")
    inner = s[1:-1].strip()
    fields = []
    for part in _split_top(inner, ","):
        if not part:
            continue
        name, typ = part.split(":", 1)
        fields.append((name.strip(), typ.strip()))
    return fields


class Schema:
    """The contract's shapes, read from its text."""

    def __init__(self, text):
        self.named = {}
        self.commands = {}  # op -> (body fields, reply fields)
        self.deliveries = {}
        self.notices = {}
        self.with_attachments = set()
        self.errors = []
        self.dispatch = []
        self.extensions = {}  # name -> the members and notices it adds
        for line in text.splitlines():
            head, _, rest = line.partition(" ")
            if head in ("command", "delivery", "notice"):
                op, _, shape = rest.partition(" ")
                if head == "command":
                    body, _, reply = shape.partition(" -> ")
                    self.commands[op] = (_parse_fields(body), _parse_fields(reply))
                elif head == "delivery":
                    self.deliveries[op] = _parse_fields(shape)
                else:
                    self.notices[op] = _parse_fields(shape)
            elif head == "attachments":
                self.with_attachments = set(rest.split())
            elif head == "errors":
                self.errors = rest.split()
            elif head == "dispatch":
                self.dispatch = rest.split()
            elif head == "extension":
                name, *adds = rest.split()
                self.extensions[name] = adds
            elif head and head[0].isupper() and rest.startswith("{"):
                self.named[head] = _parse_fields(rest)
        self.ops = set(self.commands) | set(self.deliveries) | set(self.notices)

    def check(self, v, typ, path):
        """Raises WireError unless v has type typ (a contract type)."""
        if not self._ok(v, typ, path):
            raise WireError(f"{path}: {_show(v)} is not {typ}")

    def _ok(self, v, typ, path):
        alts = _split_top(typ, "|")
        if len(alts) > 1:
            if "null" in alts and v is None:
                return True
            return any(self._ok(v, a, path) for a in alts if a != "null" and not _is_word(a)) or (
                isinstance(v, str) and v in [a for a in alts if _is_word(a)]
            )
        if typ.startswith("["):
            elem, lo, hi = _array_type(typ)
            if not isinstance(v, list) or not lo <= len(v) <= hi:
                return False
            for i, x in enumerate(v):
                self.check(x, elem, f"{path}[{i}]")
            return True
        if typ.startswith("int "):
            lo, hi = (int(x) for x in typ[4:].split(".."))
            return _is_int(v, lo, hi)
        if typ.startswith('"'):
            return v == typ.strip('"')
        if typ in self.named:
            self.check_object(v, self.named[typ], path)
            return True
        if typ == "ErrorCode":
            return v in self.errors
        if typ == "Dispatch":
            return v in self.dispatch
        if typ == "Op":
            return v in self.ops
        if _is_word(typ) and typ not in _SCALARS:
            return v == typ  # a one-word enum
        return _SCALARS[typ](v)

    def check_object(self, v, fields, path):
        """Checks v against fields; a name written "key?" in the contract is
        an optional member, which may be absent but is never null."""
        if not isinstance(v, dict):
            raise WireError(f"{path}: {_show(v)} is not an object")
        names = [n.rstrip("?") for n, _ in fields]
        for k in v:
            if k not in names:
                raise WireError(f"{path}: unknown member {k!r}")
        for n, t in fields:
            optional = n.endswith("?")
            n = n.rstrip("?")
            if n not in v:
                if optional:
                    continue
                raise WireError(f"{path}: missing member {n!r}")
            self.check(v[n], t, f"{path}.{n}")


def _is_word(t):
    return re.fullmatch(r"[a-z][a-z-]*", t) is not None and t not in ("int", "bool", "object", "null")


def _array_type(t):
    inner = t[1:-1].strip()
    elem, _, rng = inner.rpartition(" ")
    lo, hi = (int(x) for x in rng.split(".."))
    return elem, lo, hi


def _show(v):
    s = json.dumps(v, ensure_ascii=True) if not isinstance(v, float) else repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


SCHEMA = Schema(CONTRACT)

# The version this package speaks: the router's envelopes must carry it.
MAJOR, MINOR = (int(x) for x in CONTRACT.splitlines()[0].split()[-1].split("."))

_ENVELOPE_KEYS = ["protocol", "major", "minor", "id", "replyTo", "kind", "op", "body", "attachments"]


def command(msg_id, op, body, attachments=()):
    """Encodes one client command as a frame."""
    env = {"protocol": "flybus", "major": MAJOR, "minor": MINOR, "id": f"msg-{msg_id}", "replyTo": None,
           "kind": "command", "op": op, "body": body, "attachments": list(attachments)}
    return frame(dumps(env))


def decode_router_envelope(payload):
    """Parses and checks one router envelope; returns it as a dict with the
    router id as an int under "_bus" and, for a reply, the command serial
    under "_replyTo"."""
    env = loads(payload)
    if not isinstance(env, dict):
        raise WireError("an envelope is an object")
    for k in env:
        if k not in _ENVELOPE_KEYS:
            raise WireError(f"envelope: unknown member {k!r}")
    for k in _ENVELOPE_KEYS:
        if k not in env:
            raise WireError(f"envelope: missing member {k!r}")
    if env["protocol"] != "flybus":
        raise WireError("envelope: protocol is not flybus")
    if not (_is_int(env["major"]) and _is_int(env["minor"])) or env["major"] != MAJOR or env["minor"] != MINOR:
        raise WireError(f"router envelope is not version {MAJOR}.{MINOR}")
    bus = parse_serial(env["id"], "bus-")
    if bus is None:
        raise WireError(f"envelope: id {_show(env['id'])} is not a router id (bus-N)")
    env["_bus"] = bus
    kind, op, body, atts = env["kind"], env["op"], env["body"], env["attachments"]
    SCHEMA.check(atts, f"[Attachment 0..{MAX_ATTACHMENTS}]", f"{op} attachments")
    if kind == "reply":
        reply_to = parse_serial(env["replyTo"], "msg-")
        if reply_to is None:
            raise WireError("a reply names no command (replyTo)")
        env["_replyTo"] = reply_to
        if op not in SCHEMA.commands:
            raise WireError(f"a reply to op {_show(op)}, which is no command")
        if atts:
            raise WireError("reply with attachments")
        _check_reply(op, body)
    elif kind in ("delivery", "notice"):
        if env["replyTo"] is not None:
            raise WireError(f"a {kind} with a replyTo")
        table = SCHEMA.deliveries if kind == "delivery" else SCHEMA.notices
        if op not in table:
            raise WireError(f"{kind} with op {_show(op)}")
        if atts and op not in SCHEMA.with_attachments:
            raise WireError(f"{op} with attachments")
        SCHEMA.check_object(body, table[op], op)
        # The recipient owns what a delivery attaches through that delivery.
        for a in atts:
            if a["ownerId"] != body["deliveryId"]:
                raise WireError(f"{op}: attachment {_show(a['name'])} is owned by {_show(a['ownerId'])}, "
                                f"not the delivery {_show(body['deliveryId'])}")
    elif kind == "command":
        raise WireError("router sent a command")
    else:
        raise WireError(f"envelope: kind {_show(kind)}")
    return env


def _check_reply(op, body):
    if not isinstance(body, dict) or type(body.get("ok")) is not bool:
        raise WireError(f"{op} reply: ok is not a boolean")
    if body["ok"]:
        if set(body) != {"ok", "value"}:
            raise WireError(f"{op} reply: ok:true needs exactly ok and value")
        SCHEMA.check_object(body["value"], SCHEMA.commands[op][1], f"{op} reply value")
    else:
        if set(body) != {"ok", "error"}:
            raise WireError(f"{op} reply: ok:false needs exactly ok and error")
        SCHEMA.check_object(body["error"], [("code", "ErrorCode"), ("message", "Text"), ("dispatch", "Dispatch")],
                            f"{op} reply error")
