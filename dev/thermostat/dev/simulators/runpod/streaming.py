"""Answers sent as they are made: a pod's engine streaming tokens through the simulated proxy, chunk by chunk.

The simulator's other answers are built whole and sent with a Content-Length (serving.py). A `Streamed` answer
sends its status and headers as soon as they are known (`head`: an engine's answer to the relayed request), then
each chunk the moment it exists (HTTP/1.1 chunked transfer, a flush a chunk), as RunPod's proxy relays an SSE
stream. From the start a watcher on the client's socket calls `abort` when the client goes away, while the engine
computes or streams, so it stops working on an answer nobody reads (vLLM aborts a request whose connection
closed).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler


def _nothing() -> None:
    return None


Head = tuple[int, dict[str, str]]


@dataclass(slots=True, kw_only=True)
class Streamed:
    """An answer whose status and headers come from `head` (it may block) and its body as `chunks`; `abort`
    (from the watcher's thread) makes either end soon.

    A chunk iterator that raises OSError cut its stream short: the connection closes without the last chunk, so
    the client sees a truncated answer rather than a complete one.
    """

    head: Callable[[], Head]
    chunks: Iterator[bytes]
    abort: Callable[[], None] = field(default=_nothing)

    @classmethod
    def now(
        cls, status: int, headers: dict[str, str], chunks: Iterator[bytes], abort: Callable[[], None] = _nothing
    ) -> Streamed:
        """A stream whose status and headers are known already."""
        return cls(head=lambda: (status, headers), chunks=chunks, abort=abort)


class _DisconnectWatch:
    """Calls `abort` once the client's socket reads end-of-file (or fails) before `stop`."""

    def __init__(self, client: socket.socket, abort: Callable[[], None]) -> None:
        self._client, self._abort = client, abort
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="runpod-sim-disconnect-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopped.is_set():
            try:
                readable, _, _ = select.select([self._client], [], [], 0.1)
                if not readable:
                    continue
                gone = not self._client.recv(1, socket.MSG_PEEK)
            except (OSError, ValueError):
                gone = True
            if gone and not self._stopped.is_set():
                self._abort()
            # bytes to read are a next request on the kept-alive connection: not a disconnect, and nothing more
            # this watch can tell apart
            return

    def stop(self) -> None:
        # not joined: the watch ends within its poll, and the connection's next request need not wait for it
        self._stopped.set()


def send_streamed(handler: BaseHTTPRequestHandler, answer: Streamed) -> None:
    """Status and headers once known, then each chunk as `answer.chunks` yields it; a client gone ends it
    quietly."""
    watch = _DisconnectWatch(handler.connection, answer.abort)
    complete = False
    try:
        status, headers = answer.head()
        chunked = "content-length" not in {name.lower() for name in headers} and handler.command != "HEAD"
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        if chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.wfile.flush()
        for chunk in answer.chunks:
            if chunk and handler.command != "HEAD":
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                handler.wfile.flush()
        if chunked:
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        complete = True
    except OSError:
        pass  # the client went away, or the engine cut its answer short: either way this connection is done
    finally:
        watch.stop()
        close = getattr(answer.chunks, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()
        if not complete:
            handler.close_connection = True
