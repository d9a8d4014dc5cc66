"""An HTTP server whose connections no client can hold for ever: ``octlm serve``'s.

Each connection of :class:`http.server.ThreadingHTTPServer` holds a thread
and a file descriptor until the client is done. A client that never finishes
its request (300 of them held 300 threads) or sends it a byte at a time is
cut off after :data:`REQUEST_SECONDS`; at most :func:`connection_limit`
connections are served at once, and more get 503 at once; and when the
process runs out of file descriptors the server waits a moment before it
accepts again, instead of spinning at full CPU on ``accept``.
"""

from __future__ import annotations

import errno
import io
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer

#: Seconds a client has to send its whole request, and to take each part of the answer.
REQUEST_SECONDS = 10.0
#: Connections served at once, at most; fewer under a low file-descriptor limit (connection_limit).
MAX_CONNECTIONS = 64
#: What a connection past the limit gets before it is closed.
BUSY = b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class DeadlineReader(io.RawIOBase):
    """A socket read as a file that raises ``TimeoutError`` once ``seconds`` have passed since it was made.

    Each read waits at most what is left, so a client that sends a byte now
    and then cannot stretch the deadline.
    """

    def __init__(self, connection: socket.socket, seconds: float) -> None:
        self.connection, self.seconds, self.deadline = connection, seconds, time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no whole request within {self.seconds:g}s")
        self.connection.settimeout(left)
        return self.connection.recv_into(buffer)


def connection_limit() -> int:
    """Connections to serve at once: :data:`MAX_CONNECTIONS`, or half the soft file-descriptor limit when that is lower.

    Each connection holds one descriptor; the other half is left for the
    process's own files, so ``accept`` does not run out first.
    """
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        return MAX_CONNECTIONS
    return MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else max(1, min(MAX_CONNECTIONS, soft // 2))


class PageServer(ThreadingHTTPServer):
    """:class:`ThreadingHTTPServer` that serves at most ``max_connections`` connections at once.

    A connection past the limit gets 503 and is closed at once, so a crowd of
    idle clients costs no threads; those served free their places within
    ``request_seconds``, the time a client has to send its whole request
    (read through :meth:`request_reader`) and to take each part of the answer.
    """

    daemon_threads = True
    # The kernel's queue of connections not yet accepted (socketserver's default is 5): a crowd
    # arriving at once would otherwise see its connects dropped and retried a second later.
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, address, handler, max_connections: int, request_seconds: float = REQUEST_SECONDS) -> None:
        super().__init__(address, handler)
        self.places = threading.BoundedSemaphore(max_connections)
        self.request_seconds = request_seconds
        self._holding: dict[socket.socket, bool] = {}  # the connections holding a place, each given back once

    def request_reader(self, connection: socket.socket) -> io.BufferedReader:
        """``connection`` as the handler's ``rfile``: a file whose reads raise ``TimeoutError`` past
        ``request_seconds``."""
        return io.BufferedReader(DeadlineReader(connection, self.request_seconds))

    def get_request(self):
        try:
            return super().get_request()
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                # The pending connection stays queued and the listening socket readable:
                # accepting again at once would spin until a descriptor frees up.
                time.sleep(0.05)
            raise

    def process_request(self, request, client_address) -> None:
        if not self.places.acquire(blocking=False):
            self._refuse(request)
            return
        self._holding[request] = True
        try:
            super().process_request(request, client_address)
        except BaseException:
            # The thread may have started, even served the request, before this (Ctrl-C inside Thread.start):
            # the place is given back once, by whichever comes first, so Ctrl-C is not lost to a second release.
            self._free(request)
            raise

    def _free(self, request) -> None:
        if self._holding.pop(request, False):  # one atomic pop: the thread and a failed start cannot both win
            self.places.release()

    def _refuse(self, request: socket.socket) -> None:
        """Answer 503 and close, without waiting on the client."""
        try:
            request.setblocking(False)
            # Closing with unread bytes would reset the connection before the client reads the answer.
            while request.recv(65536):
                pass
        except OSError:  # nothing more to read now (or the client is gone)
            pass
        try:
            request.send(BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        # A client that hangs up or stalls mid-answer is the client's business, not a traceback on the terminal.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._free(request)


__all__ = ["BUSY", "MAX_CONNECTIONS", "REQUEST_SECONDS", "DeadlineReader", "PageServer", "connection_limit"]
