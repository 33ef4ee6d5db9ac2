"""Transports with TCP_NODELAY.

httpx writes a request's head and body in two writes. Without TCP_NODELAY
(httpcore before 1.0 does not set it), Nagle holds the body back until the
server acknowledges the head, which a delayed ACK puts off ~40 ms: each
call with a body cost 20-40 ms more than the server took (measured:
lease + exec + end 49 ms over the floor before, ~3 ms after).
"""

from __future__ import annotations

import socket

import httpx


def _nodelay(stream):
    sock = stream.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return stream


def sync_transport() -> httpx.HTTPTransport:
    t = httpx.HTTPTransport()
    try:
        from httpcore.backends.sync import SyncBackend

        class NoDelay(SyncBackend):
            def connect_tcp(self, *a, **kw):
                return _nodelay(super().connect_tcp(*a, **kw))

        t._pool._network_backend = NoDelay()
    except (ImportError, AttributeError):
        pass  # httpcore >= 1.0 sets TCP_NODELAY itself
    return t


def async_transport() -> httpx.AsyncHTTPTransport:
    t = httpx.AsyncHTTPTransport()
    try:
        from httpcore.backends.auto import AutoBackend

        class NoDelay(AutoBackend):
            async def connect_tcp(self, *a, **kw):
                return _nodelay(await super().connect_tcp(*a, **kw))

        t._pool._network_backend = NoDelay()
    except (ImportError, AttributeError):
        pass
    return t
