"""flybus: a client of the flybus local message bus.

It speaks the router's wire directly over its Unix socket: RPC, pub/sub
and, through the router's store, immutable file-backed artifacts. Standard
library only.

    import flybus
    with flybus.connect("/run/flybus/bus.sock", client_id="viewer") as c:
        with c.subscribe("camera.front") as sub:
            with sub.next(timeout=5) as msg:
                print(msg.topic_sequence, msg.payload)

flybus.dial takes the same arguments and makes a client that outlives
connection loss and router restarts.
"""

from ._contract import CONTRACT, CONTRACT_DIGEST
from .artifacts import Artifact, ArtifactWriter, DigestMismatch, NoDigest, View
from .client import (Client, Message, PendingCall, Receipt, Request, Responder, Result, Service, Subscription, connect,
                     dial)
from .errors import *  # noqa: F401,F403 (one class per error code)
from .errors import (BusError, ClosedError, FlybusError, NoRouter, ProtocolError, StaleHandle, StoreRootError,
                     SubscriptionClosed, WireError)

__all__ = ["connect", "dial", "Client", "Message", "PendingCall", "Receipt", "Request", "Responder", "Result", "Service",
           "Subscription", "Artifact", "ArtifactWriter", "View", "DigestMismatch", "NoDigest",
           "BusError", "ClosedError", "FlybusError", "NoRouter", "ProtocolError", "StaleHandle", "StoreRootError",
           "SubscriptionClosed", "WireError", "CONTRACT", "CONTRACT_DIGEST"]
