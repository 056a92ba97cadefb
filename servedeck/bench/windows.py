"""The bench windows, timed from the bench flow without touching the client: an ``httpx``
transport (httpx's documented extension point, "Custom transports") that wraps the real one
and notes, for each completion request, when it was sent and when its response stream was
closed (the client closes it after the last chunk). One window per request, in send order, on
this machine's wall clock (``time.time()``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx

__all__ = ["RequestWindows"]


class _TimedStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, on_close) -> None:
        self._inner, self._on_close, self._closed = inner, on_close, False

    def __iter__(self) -> Iterator[bytes]:
        yield from self._inner

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(time.time())
        self._inner.close()


class RequestWindows(httpx.BaseTransport):
    """A transport recording ``(t_send, t_end)`` of every POST to ``paths``.

    Args:
        paths: URL paths whose requests are bench windows (``/v1/chat/completions``).
        inner: the transport that does the work (default: ``httpx.HTTPTransport()``).

    Attributes:
        windows: ``[(t_send, t_end)]`` (epoch seconds); ``t_end`` None while a stream is open.
    """

    def __init__(self, paths: set[str] | frozenset[str], inner: httpx.BaseTransport | None = None) -> None:
        self.paths = frozenset(paths)
        self.inner = inner or httpx.HTTPTransport()
        self.windows: list[list[float | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or request.url.path not in self.paths:
            return self.inner.handle_request(request)
        slot: list[float | None] = [time.time(), None]
        self.windows.append(slot)
        response = self.inner.handle_request(request)

        def closed(t: float) -> None:
            slot[1] = t
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _TimedStream(response.stream, closed)
        return response

    def close(self) -> None:
        self.inner.close()
