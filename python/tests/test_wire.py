import hashlib
import struct
import unittest

from flybus import CONTRACT, CONTRACT_DIGEST, _wire
from _router import flybus_binary
import subprocess


class ContractTest(unittest.TestCase):
    def test_the_package_carries_the_routers_contract(self):
        # The router answers a client in the minor its hello was written in.
        out = subprocess.run([flybus_binary(), "contract", "--minor", str(_wire.MINOR)],
                             capture_output=True, text=True, check=True).stdout
        text, _, last = out.rstrip("\n").rpartition("\n")
        self.assertEqual(CONTRACT, text + "\n")
        self.assertEqual(last, "contractDigest " + CONTRACT_DIGEST)
        self.assertEqual(CONTRACT_DIGEST, hashlib.sha256(CONTRACT.encode()).hexdigest())

    def test_the_schema_reads_every_shape(self):
        s = _wire.SCHEMA
        self.assertEqual(len(s.commands), 19)
        self.assertEqual(sorted(s.deliveries), ["rpc.request", "rpc.result", "topic.message"])
        self.assertIn("QUOTA_EXCEEDED", s.errors)


class StrictJSONTest(unittest.TestCase):
    def refused(self, b):
        with self.assertRaises(_wire.WireError, msg=repr(b)):
            _wire.loads(b)

    def test_refuses_what_go_refuses(self):
        for b in [b'{"a":1,"a":2}', b'{"x":{"a":1,"a":2}}', b'[{"a":[{"b":1,"b":2}]}]', b'{"\\u0061":1,"a":2}',
                  b'{"a":NaN}', b'{"a":Infinity}', b'{"a":-Infinity}', b'\xff\xfe', b'{"a":"\xc3"}',
                  b'{"a":"\\ud800"}', b'[' * 5000 + b']' * 5000, b'{"a":1} x', b"{'a':1}"]:
            self.refused(b)

    def test_depth_bound_is_gos(self):
        # Go's scanner accepts 128 nested containers and refuses 129; so
        # must Python, whatever its own recursion limit (3.13 parses 10,000).
        self.assertIsInstance(_wire.loads(b"[" * 128 + b"]" * 128), list)
        self.assertIsInstance(_wire.loads(b'{"a":' * 127 + b"[]" + b"}" * 127), dict)
        for b in (b"[" * 129 + b"]" * 129, b'{"a":' * 128 + b"[]" + b"}" * 128, b"[" * 32000 + b"]" * 32000):
            self.refused(b)

    def test_accepts_json(self):
        self.assertEqual(_wire.loads('{"a":[1,-2.5,"é",null,true],"b":{"c":"\\ud83d\\ude00"}}'.encode()),
                         {"a": [1, -2.5, "é", None, True], "b": {"c": "\U0001F600"}})


def envelope(**over):
    env = {"protocol": "flybus", "major": 1, "minor": 1, "id": "bus-1", "replyTo": "msg-1", "kind": "reply",
           "op": "topic.clear", "body": {"ok": True, "value": {"cleared": True}}, "attachments": []}
    env.update(over)
    return _wire.dumps(env)


class EnvelopeTest(unittest.TestCase):
    def test_a_good_reply(self):
        env = _wire.decode_router_envelope(envelope())
        self.assertEqual((env["_bus"], env["_replyTo"]), (1, 1))

    def test_every_violation_is_refused(self):
        cases = {
            "major": envelope(major=2),
            "minor 1.0": envelope(minor=0),
            "minor 1.2": envelope(minor=2),
            "float major": envelope(major=1.0),
            "protocol": envelope(protocol="other"),
            "msg id": envelope(id="msg-1"),
            "leading zero": envelope(id="bus-01"),
            "no replyTo": envelope(replyTo=None),
            "command": envelope(kind="command"),
            "unknown op": envelope(op="topic.smash"),
            "extra member": envelope(extra=1),
            "body member": envelope(body={"ok": True, "value": {"cleared": True, "x": 1}}),
            "body type": envelope(body={"ok": True, "value": {"cleared": "yes"}}),
            "both": envelope(body={"ok": True, "value": {"cleared": True}, "error": None}),
            "error code": envelope(body={"ok": False, "error": {"code": "OOPS", "message": "", "dispatch": "unknown"}}),
            "reply attachments": envelope(attachments=[{"name": "a", "ref": {}, "ownerId": "dlv-1"}]),
            "notice replyTo": envelope(kind="notice", op="connection.closing",
                                       body={"code": "ROUTER_LOST", "message": "x"}),
            "u64 as number": envelope(op="publish", body={"ok": True, "value": {"topicSequence": 1, "subscribers": "0",
                                                                                "replaced": "0"}}),
        }
        for name, b in cases.items():
            with self.subTest(name), self.assertRaises(_wire.WireError):
                _wire.decode_router_envelope(b)

    def test_a_delivery_owns_its_attachments(self):
        ref = {"storeId": "store-00000000000000aa", "artifactId": "a-7", "generation": "1", "byteLength": "16",
               "contentType": "image/x-rgba", "digest": None}

        def message(owner):
            return _wire.dumps({"protocol": "flybus", "major": 1, "minor": 1, "id": "bus-3", "replyTo": None,
                                "kind": "delivery", "op": "topic.message",
                                "body": {"deliveryId": "dlv-4", "subscriptionId": "sub-1", "topic": "camera.front",
                                         "topicIncarnation": "top-1", "topicSequence": "9", "replaced": "0",
                                         "payload": {}},
                                "attachments": [{"name": "frame", "ref": ref, "ownerId": owner}]})

        env = _wire.decode_router_envelope(message("dlv-4"))
        self.assertEqual(env["attachments"][0]["ownerId"], "dlv-4")
        for owner in ("dlv-5", "own-4"):  # another delivery's, or the producer's hold
            with self.subTest(owner), self.assertRaises(_wire.WireError):
                _wire.decode_router_envelope(message(owner))

    def test_framing_bounds(self):
        with self.assertRaises(_wire.WireError):
            _wire.frame(b"x" * 65537)

        class Sock:
            def __init__(self, data):
                self.data = data

            def recv(self, n):
                b, self.data = self.data[:n], self.data[n:]
                return b

        for data in [struct.pack("<I", 0), struct.pack("<I", 65537) + b"x", struct.pack("<I", 10) + b"abc", b"\x01\x00"]:
            with self.subTest(data=data[:6]), self.assertRaises(_wire.WireError):
                _wire.FrameReader(Sock(data)).read_frame()
        self.assertIsNone(_wire.FrameReader(Sock(b"")).read_frame())


if __name__ == "__main__":
    unittest.main()
