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

__all__ = ["FlybusError", "ClosedError", "SubscriptionClosed", "NoRouter", "ProtocolError", "BusError", "WireError"] + [c.__name__ for c in _BY_CODE.values()]
