"""octlm serve and octlm export-web: what they serve, what they refuse, what they write."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.cli import main
from octlm.errors import OctlmError
from octlm.export.page_handler import host_name, is_loopback, make_server, resolve_path
from octlm.export.page_server import BUSY, MAX_CONNECTIONS
from octlm.export.web import PAGE_FILES, RUN_DATA, export_site, site_files


def parse_run_data(script: bytes) -> dict:
    text = script.decode("utf-8")
    prefix = "window.OCTLM_RUN = "
    assert text.startswith(prefix) and text.rstrip().endswith(";")
    return json.loads(text[len(prefix) :].rstrip().rstrip(";"))


def unpack(packed: dict) -> np.ndarray:
    raw = base64.b64decode(packed["float32_base64"])
    return np.frombuffer(raw, dtype="<f4").reshape(packed["rows"], packed["cols"])


@pytest.fixture(scope="module")
def served(trained_run):
    """A server on a free loopback port, in this process, serving the trained run."""
    from octlm.export.web import load_view

    files = site_files(load_view(trained_run))
    server = make_server(files, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], files
    server.shutdown()
    server.server_close()


def request(port: int, path: str, method: str = "GET", host: str | None = None) -> tuple[int, dict, bytes]:
    """Send ``path`` exactly as given (no client-side normalisation of '..')."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    connection.putheader("Host", host or f"127.0.0.1:{port}")
    connection.endheaders()
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), body


def test_serves_the_page_and_the_run(served, trained_run):
    port, files = served
    status, headers, body = request(port, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="run-data.js"></script>' in body and b'<script src="app.js"></script>' in body
    for name in ("app.js", "app.css", RUN_DATA):
        status, headers, body = request(port, f"/{name}?v=1")
        assert status == 200 and body == files[name]
    assert "default-src 'none'" in headers["Content-Security-Policy"] and headers["X-Content-Type-Options"] == "nosniff"
    status, _, body = request(port, "/index.html", method="HEAD")
    assert status == 200 and body == b""


def test_run_data_is_the_run(served, trained_run):
    """The data the page gets, against the run loaded independently."""
    from octlm.run.load import load_run

    port, _ = served
    _, _, body = request(port, f"/{RUN_DATA}")
    view = parse_run_data(body)
    model, tokenizer = load_run(trained_run)
    table = model.token_embedding.weight.detach().numpy()
    assert np.array_equal(unpack(view["embedding"]), table)
    assert np.array_equal(unpack(view["positions"]), model.position_embedding.weight.detach().numpy())
    assert view["positions"]["source"] == "learned"
    assert view["tokens"] == [tokenizer.token_str(i) for i in range(tokenizer.vocab_size)]
    manifest = json.loads((trained_run / "manifest.json").read_text())
    assert sum(view["counts"]) == manifest["tokens"]["train"]["count"]
    records = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    assert [s for s, _ in view["loss"]["train"]] == [r["step"] for r in records if r["kind"] == "train"]
    last_eval = [r for r in records if r["kind"] == "eval"][-1]
    assert view["summary"]["val_bpb"] == pytest.approx(last_eval["val_bpb"])
    assert len(view["pca"]["x"]) == tokenizer.vocab_size


@pytest.mark.parametrize(
    "path",
    [
        "/../pyproject.toml",
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/..%2f..%2fetc%2fpasswd",
        "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
        "//etc/passwd",
        "/..\\..\\etc\\passwd",
        "/..%5c..%5cetc%5cpasswd",
        "/index.html%00.js",
        "/./index.html/..",
        "/web_dist/app.js",
        "/model.safetensors",
        "/config.json",
        "/tokenizer.json",
        "/metrics.jsonl",
        "/__init__.py",
        "/web.py",
        "http://127.0.0.1/../../etc/passwd",
        "/%252e%252e/etc/passwd",
    ],
)
def test_refuses_paths_outside_the_page(served, path):
    port, _ = served
    status, _, body = request(port, path)
    assert status == 404, (path, status)
    assert b"root:" not in body and b"[project]" not in body


def test_refuses_other_methods_and_hosts(served):
    port, _ = served
    assert request(port, "/", method="POST")[0] == 501
    assert request(port, "/", method="PUT")[0] == 501
    # A DNS-rebinding page would send its own host name.
    assert request(port, "/", host="attacker.example:8000")[0] == 421
    assert request(port, "/", host=f"localhost:{port}")[0] == 200


@given(st.text(alphabet=st.sampled_from(list("./\\%2eEfcFC5 ab0x")), max_size=24))
def test_resolve_path_never_leaves_the_table(path):
    name = resolve_path("/" + path)
    if name is not None:
        assert "/" not in name and "\\" not in name and name not in (".", "..") and "\x00" not in name


def test_resolve_path_examples():
    assert resolve_path("/") == "index.html"
    assert resolve_path("/?x=1") == "index.html"
    assert resolve_path("/app.js#top") == "app.js"
    assert resolve_path("/a/b") is None and resolve_path("/..") is None and resolve_path("relative") is None


def test_loopback_and_host_names():
    assert is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")
    assert (
        host_name("127.0.0.1:8000") == "127.0.0.1"
        and host_name("[::1]:80") == "[::1]"
        and host_name("LocalHost") == "localhost"
    )


def test_busy_port_is_one_clear_error(trained_run):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(OctlmError, match=f"cannot listen on 127.0.0.1:{port}.*--port"):
            make_server({"index.html": b""}, "127.0.0.1", port)


@pytest.mark.slow
def test_serve_command_binds_loopback_and_stops_on_ctrl_c(trained_run):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "octlm", "serve", "--run", str(trained_run), "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "serving" and first["host"] == "127.0.0.1"
        assert first["url"] == f"http://127.0.0.1:{first['port']}/"
        assert request(first["port"], "/")[0] == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {"event": "result", "url": first["url"], "stopped": True}


def test_serve_missing_run_is_one_line(tmp_path, capsys):
    assert main(["serve", "--run", str(tmp_path / "nope"), "--port", "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such run folder" in err[0]


def test_export_web_writes_a_page_with_the_data(trained_run, tmp_path, capsys):
    out = tmp_path / "page"
    assert main(["export-web", "--run", str(trained_run), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert sorted(p.name for p in out.iterdir()) == sorted([*PAGE_FILES, RUN_DATA]) == result["files"]
    assert result["url"].startswith("file://") and result["url"].endswith("/page/index.html")
    html = (out / "index.html").read_text()
    # Classic scripts only: module scripts and fetch() do not work from file://.
    assert 'type="module"' not in html and "run-data.js" in html
    view = parse_run_data((out / RUN_DATA).read_bytes())
    assert view["model"]["vocab_size"] == 300
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging folder left behind"
    assert oct((out / "index.html").stat().st_mode & 0o777) == "0o644"


def test_export_web_refuses_to_clobber(trained_run, tmp_path, capsys):
    out = tmp_path / "page"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):  # the refusal names no flag that cannot help
        assert main(["export-web", "--run", str(trained_run), "--out", str(out), *extra]) == 1
        err = capsys.readouterr().err
        assert "not an exported page" in err and "add --overwrite" not in err
        assert (out / "notes.txt").read_text() == "mine"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["export-web", "--run", str(trained_run), "--out", str(a_file)]) == 1
    assert "not a folder" in capsys.readouterr().err


def test_export_web_overwrite_replaces_an_export(trained_run, tmp_path):
    out = tmp_path / "page"
    export_site({"index.html": b"old", RUN_DATA: b"old", "stale.js": b"x"}, out)
    assert main(["export-web", "--run", str(trained_run), "--out", str(out), "--overwrite", "--quiet"]) == 0
    assert not (out / "stale.js").exists() and (out / "index.html").read_bytes() != b"old"


def test_missing_built_page_is_a_clear_error(tmp_path):
    from octlm.export.web import page_files

    with pytest.raises(OctlmError, match="npm run build"):
        page_files(tmp_path)


def test_run_data_escapes_script_end():
    from octlm.export.web import run_data_script

    script = run_data_script({"tokens": ["</script><script>alert(1)</script>"]})
    assert b"</script>" not in script
    assert parse_run_data(script)["tokens"] == ["</script><script>alert(1)</script>"]


def test_built_page_is_package_data():
    from octlm.export.web import WEB_DIST

    assert WEB_DIST == Path(__import__("octlm").__file__).parent / "web_dist"
    for name in PAGE_FILES:
        assert (WEB_DIST / name).stat().st_size > 0


def test_the_page_without_javascript_says_it_needs_it():
    """The page is all script: with JavaScript off, one paragraph says so, and that it fetches nothing."""
    from octlm.export.web import WEB_DIST

    html = (WEB_DIST / "index.html").read_text(encoding="utf-8")
    noscript = html[html.index("<noscript>") : html.index("</noscript>")]
    assert "<p>" in noscript and "needs JavaScript" in noscript
    assert "entirely in the browser" in noscript and "nothing is fetched" in noscript


def wait_for_close(client: socket.socket, seconds: float) -> bytes:
    """Read ``client`` until the server closes it (what it sent), or fail after ``seconds``."""
    client.settimeout(0.2)
    received, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = client.recv(4096)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    pytest.fail(f"the server kept a connection open for {seconds:g}s")


@pytest.mark.slow
def test_idle_and_slow_clients_are_cut_off_and_the_server_keeps_answering():
    """Clients that never finish their headers, or send them a byte at a time, hold neither a thread nor a place for
    long."""
    server = make_server({"index.html": b"page"}, "127.0.0.1", 0)
    server.request_seconds = 1.0
    threads_before = threading.active_count()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        slow = socket.create_connection(("127.0.0.1", port), timeout=5)
        idle = []
        for _ in range(MAX_CONNECTIONS + 36):  # more than the server serves at once
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            client.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the empty line that ends the headers
            idle.append(client)
        started = time.monotonic()
        assert threading.active_count() - threads_before <= MAX_CONNECTIONS + 1  # the serving thread
        assert request(port, "/")[0] in (200, 503)  # answered at once, even with every place taken
        for _ in range(15):  # a byte every 0.2 s: never idle, never done
            try:
                slow.sendall(b"G")
            except OSError:
                break
            time.sleep(0.2)
        wait_for_close(slow, 5.0)
        assert time.monotonic() - started < 3.0
        # Past the places, a 503 (or a reset, when the request came in after it); the others end once their time is up.
        assert {wait_for_close(client, 5.0) for client in idle} <= {b"", BUSY}
        assert request(port, "/") == (200, request(port, "/")[1], b"page")
    finally:
        server.shutdown()
        server.server_close()


#: A server in a process whose file-descriptor limit is argv[1]; it prints its port.
LOW_LIMIT_SERVER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from octlm.export.page_handler import make_server
server = make_server({"index.html": b"page"}, "127.0.0.1", 0)
server.request_seconds = 1.0
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.mark.slow
def test_a_low_file_limit_does_not_stop_the_server():
    """300 idle clients against a server allowed 64 file descriptors: it answers throughout, and serves again once they
    are cut off."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    child = subprocess.Popen(
        [sys.executable, "-c", LOW_LIMIT_SERVER, "64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    clients, unanswered = [], 0
    try:
        port = int(child.stdout.readline())
        deadline = time.monotonic() + 60
        for _ in range(300):  # bounded in count and time
            if time.monotonic() > deadline:
                break
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=5)
            except TimeoutError:  # the server stopped accepting
                unanswered += 1
                continue
            clients.append(client)
            try:
                client.sendall(b"GET / HTTP/1.1\r\n")
            except OSError:  # refused at once: no place left
                pass
        assert unanswered == 0 and len(clients) == 300
        assert request(port, "/")[0] in (200, 503)
        until = time.monotonic() + 10
        while request(port, "/")[0] != 200:
            assert time.monotonic() < until, "the server did not serve again once the idle clients were cut off"
            time.sleep(0.2)
        assert child.poll() is None
    finally:
        for client in clients:
            client.close()
        child.kill()
        _, err = child.communicate(timeout=20)
    assert "Traceback" not in err


def test_ctrl_c_while_a_connection_thread_starts_stops_the_server(monkeypatch):
    """Ctrl-C that lands while the main thread still waits in Thread.start(), the connection's thread already done.

    Before, both the thread and the failed start gave back the connection's place; the second
    release raised ValueError, which socketserver reports and carries on from, swallowing the
    KeyboardInterrupt: `octlm serve` kept serving (seen once as test_serve_command_binds_loopback_and_stops_on_ctrl_c
    timing out under load).
    """
    server = make_server({"index.html": b"page"}, "127.0.0.1", 0)
    original_start = threading.Thread.start

    def start_then_interrupt(thread):
        original_start(thread)
        thread.join()  # the request is served and its place given back
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
    client = socket.create_connection(server.server_address)
    try:
        client.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        with pytest.raises(KeyboardInterrupt):
            server._handle_request_noblock()
    finally:
        client.close()
        server.server_close()
    places = [server.places.acquire(blocking=False) for _ in range(MAX_CONNECTIONS + 1)]
    assert places.count(True) == server.places._initial_value  # every place free, none given back twice


#: What the page says in place of a run or a study when neither is given: the commands that fill it.
HOW_TO_FILL = ("octlm train --out runs/stdlib", "octlm serve --run runs/stdlib", "octlm serve --study DIR")


@pytest.mark.slow
def test_serve_without_a_run_or_a_study_serves_the_playgrounds_alone():
    proc = subprocess.Popen(
        [sys.executable, "-m", "octlm", "serve", "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        first = json.loads(proc.stdout.readline() or "{}")
        assert first.get("event") == "serving", proc.stderr.read() if proc.poll() is not None else first
        assert first["run"] is None and first["study"] is None
        status, _, html = request(first["port"], "/")
        assert status == 200 and b'<script src="app.js"></script>' in html and b"run-data.js" in html
        status, _, data = request(first["port"], f"/{RUN_DATA}")
        assert status == 200 and b"OCTLM_RUN" not in data and b"OCTLM_STUDY" not in data
        app = request(first["port"], "/app.js")[2].decode()
        assert "sinusoidal-map" in app and all(command in app for command in HOW_TO_FILL)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err


def test_export_web_without_a_run_or_a_study_writes_the_playgrounds(tmp_path, capsys):
    out = tmp_path / "page"
    assert main(["export-web", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert sorted(p.name for p in out.iterdir()) == sorted([*PAGE_FILES, RUN_DATA]) == result["files"]
    assert b"OCTLM_RUN" not in (out / RUN_DATA).read_bytes()
    assert all(command in (out / "app.js").read_text() for command in HOW_TO_FILL)


@pytest.mark.parametrize("command", ["serve", "export-web"])
def test_help_says_the_playgrounds_need_neither_flag(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split()).lower()
    assert "without --run or --study" in text and f"octlm {command} --run" in text
