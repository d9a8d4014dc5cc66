"""A crowd of clients that never finish their request, against octlm's page server under a low file limit; print JSON.

    .venv/bin/python bench/serve_crowd.py [--clients 300] [--file-limit 64] [--seconds 5]

The server (``make_server`` with a one-file page, as ``octlm serve`` makes
it) runs in a child process whose soft RLIMIT_NOFILE is ``--file-limit``;
its request deadline is raised to 60 s so that no client is cut off while
it is measured. The clients connect on loopback, send a request line and
never the end of the headers. Printed: how many connected within 30 s, the
CPU seconds the server used in the next ``--seconds`` (a server spinning on
``accept`` uses them all), and the status of one more request (or
"no answer" after 5 s).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

SERVER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from octlm.export.page_handler import make_server
server = make_server({"index.html": b"page"}, "127.0.0.1", 0)
server.request_seconds = 60.0
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_of_one_request(port: int) -> int | str:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", "/")
        return connection.getresponse().status
    except OSError:
        return "no answer"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=300)
    parser.add_argument("--file-limit", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    child = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(args.file_limit)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    clients = []
    try:
        port = int(child.stdout.readline())
        deadline = time.monotonic() + 30
        for _ in range(args.clients):
            if time.monotonic() > deadline:
                break
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=2)
                clients.append(client)
                client.sendall(b"GET / HTTP/1.1\r\n")
            except OSError:
                pass
        before = cpu_seconds(child.pid)
        time.sleep(args.seconds)
        used = cpu_seconds(child.pid) - before
        status = status_of_one_request(port)
    finally:
        for client in clients:
            client.close()
        child.kill()
        child.wait()
    print(
        json.dumps(
            {
                "clients": args.clients,
                "file_limit": args.file_limit,
                "connected": len(clients),
                "server_cpu_seconds": round(used, 2),
                "seconds": args.seconds,
                "one_more_request": status,
            }
        )
    )


if __name__ == "__main__":
    main()
