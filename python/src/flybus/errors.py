"""Errors of the flybus client.

A refusal by the router is a BusError carrying the wire's code, message and
dispatch ("not-dispatched", "dispatched" or "unknown": whether the
operation may have reached its target). Every code has a subclass, so a
caller can catch one: ``except flybus.NoTopic``, or compare ``e.code``.
"""

from ._wire import SCHEMA, WireError


class FlybusError(Exception):
    """Anything this package raises of its own."""


class ClosedError(FlybusError):
    """The client was closed, by the program or because the router went away."""


class SubscriptionClosed(ClosedError):
    """The router ended a subscription (reason: "router-shutdown", say)."""

    reason = ""


class NoRouter(FlybusError, ConnectionError):
    """Nothing listens on the socket connect was given: the router may not
    be running, or listens elsewhere."""


class StoreRootError(FlybusError, FileNotFoundError):
    """The store_root given to connect does not hold the router's store (a
    directory named its storeId): it is not the directory the router was
    started with (flybus serve --store DIR). store_root and store_id say
    which."""

    def __init__(self, message, store_root, store_id):
        super().__init__(message)
        self.store_root, self.store_id = store_root, store_id

    def __str__(self):
        return self.args[0]


class ProtocolError(FlybusError):
    """The router sent something the contract forbids; the client closed."""


class BusError(FlybusError):
    """A refusal from the router, or a failure it reported."""

    code = ""

    def __init__(self, code, message, dispatch="not-dispatched"):
        super().__init__(f"{code}: {message}" + (f" ({dispatch})" if dispatch != "not-dispatched" else ""))
        self.code, self.message, self.dispatch = code, message, dispatch

    def not_sent(self):
        """This loss as seen by a command made after it: never sent, so it
        cannot have reached its target."""
        msg = self.message if self.message.endswith("; not sent") else self.message + "; not sent"
        return BusError.of(self.code, msg, "not-dispatched")

    @staticmethod
    def of(code, message, dispatch="not-dispatched"):
        """The subclass instance for code."""
        return _BY_CODE.get(code, BusError)(code, message, dispatch)


def _class_name(code):
    return "".join(p.capitalize() for p in code.split("_"))


_BY_CODE = {}
for _code in SCHEMA.errors:
    _cls = type(_class_name(_code), (BusError,), {"code": _code, "__doc__": f"The router's {_code}."})
    _BY_CODE[_code] = _cls
    globals()[_cls.__name__] = _cls


class StaleHandle(_BY_CODE["ROUTER_LOST"]):
    """A handle made on a connection that a reconnecting client (flybus.dial)
    has since lost: a message, request, result, responder, artifact, view,
    writer or pending call. The client lives on over a new connection, but
    what the old one held is gone with it, so the handle refuses every use
    and its close sends nothing. It is a RouterLost (code ROUTER_LOST,
    dispatch "not-dispatched"): nothing was sent."""

    def __init__(self, message):
        super().__init__("ROUTER_LOST", message, "not-dispatched")

    def not_sent(self):
        return self


__all__ = ["FlybusError", "ClosedError", "SubscriptionClosed", "NoRouter", "StoreRootError", "ProtocolError", "BusError",
           "StaleHandle", "WireError"] + [c.__name__ for c in _BY_CODE.values()]
