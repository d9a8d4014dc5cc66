"""What ``octlm serve`` answers, and to whom: the page's request handler and the bound server.

The server is the standard library's :class:`http.server.ThreadingHTTPServer`
with a handler that answers only from a fixed table of in-memory files made
at start-up: a request path is never joined to a filesystem path, so no
``..``, encoded or absolute path can reach anything else on disk. On a
loopback address, a request must name a loopback ``Host``; every answer
carries :data:`SECURITY_HEADERS`. How long a connection may last is
:mod:`octlm.export.page_server`'s.
"""

from __future__ import annotations

import ipaddress
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

from octlm.errors import OctlmError
from octlm.export.page_server import PageServer, connection_limit

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}

# The page needs nothing from elsewhere; forbid it, so a token string shown on
# the page can never make the browser reach out.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_path(raw_path: str) -> str | None:
    """The file name a request path asks for, or ``None`` when it names nothing served.

    ``/`` is ``index.html``; the query string and fragment are ignored. Only
    a bare name of the served table qualifies: anything with a further ``/``,
    a backslash, ``..`` or a NUL, even percent-encoded, is refused.
    """
    path = unquote(urlsplit(raw_path).path)
    if path in ("", "/"):
        return "index.html"
    if not path.startswith("/"):
        return None
    name = path[1:]
    if not name or "/" in name or "\\" in name or "\x00" in name or name in (".", ".."):
        return None
    return name


def host_name(header: str) -> str:
    """The host part of a ``Host`` header, lower-cased, without the port: ``[::1]:80`` -> ``[::1]``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if ":" in header else header


def make_handler(files: dict[str, bytes], allowed_hosts: set[str] | None):
    """A request handler class answering GET and HEAD from ``files`` only.

    ``allowed_hosts``: when set, a request whose ``Host`` header names another
    host gets 421, which stops a DNS-rebinding page elsewhere from reading the
    run through a loopback server.
    """

    class PageHandler(BaseHTTPRequestHandler):
        server_version = "octlm"
        sys_version = ""

        def setup(self) -> None:
            super().setup()
            # handle_one_request drops the connection when the reader's deadline passes.
            self.rfile = self.server.request_reader(self.connection)

        def do_GET(self) -> None:
            self._answer(send_body=True)

        def do_HEAD(self) -> None:
            self._answer(send_body=False)

        def _answer(self, send_body: bool) -> None:
            if allowed_hosts is not None and host_name(self.headers.get("Host") or "") not in allowed_hosts:
                return self._error(HTTPStatus.MISDIRECTED_REQUEST, "unknown Host header", send_body)
            name = resolve_path(self.path)
            if name is None or name not in files:
                return self._error(HTTPStatus.NOT_FOUND, "not found", send_body)
            content_type = CONTENT_TYPES.get(Path(name).suffix, "application/octet-stream")
            self._send(HTTPStatus.OK, content_type, files[name], send_body)

        def _error(self, status: HTTPStatus, text: str, send_body: bool) -> None:
            self._send(status, "text/plain; charset=utf-8", f"{status.value} {text}\n".encode(), send_body)

        def _send(self, status: HTTPStatus, content_type: str, body: bytes, send_body: bool) -> None:
            self.connection.settimeout(self.server.request_seconds)  # a client that stops reading is dropped
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in SECURITY_HEADERS.items():
                self.send_header(key, value)
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:
            # Quiet by default: the terminal shows the URL and errors, not every request.
            return

    return PageHandler


def make_server(files: dict[str, bytes], host: str = "127.0.0.1", port: int = 8000) -> PageServer:
    """Bind a :class:`PageServer` serving ``files`` on ``host:port`` (port 0: a free one), :func:`connection_limit`
    connections at once.

    On a loopback host, requests must name a loopback ``Host``.

    Raises:
        OctlmError: when the address cannot be bound (in use, not this machine's).
    """
    allowed = None
    if is_loopback(host):
        allowed = {"127.0.0.1", "localhost", "[::1]", host.lower() if ":" not in host else f"[{host.strip('[]')}]"}
    if not 0 <= port <= 65535:
        raise OctlmError(f"--port {port}: must be between 0 and 65535 (0 picks a free port)")
    server_class = PageServer
    if ":" in host:

        class V6Server(PageServer):
            address_family = socket.AF_INET6

        server_class = V6Server
    try:
        return server_class((host.strip("[]"), port), make_handler(files, allowed), connection_limit())
    except OSError as err:
        import errno

        if err.errno == errno.EADDRINUSE and port:
            hint = "another program listens there; pick another with --port, or --port 0 for a free one"
        elif err.errno in (errno.EACCES, errno.EPERM) and port:
            hint = (
                f"ports below 1024 need root; pick --port {port + 8000 if port < 1024 else 8000}, "
                "or --port 0 for a free one"
            )
        else:
            hint = f"check --host {host}: it must be an address of this machine (127.0.0.1 by default)"
        raise OctlmError(f"cannot listen on {host}:{port} ({err.strerror or err}); {hint}") from None


__all__ = [
    "CONTENT_TYPES",
    "SECURITY_HEADERS",
    "host_name",
    "is_loopback",
    "make_handler",
    "make_server",
    "resolve_path",
]
