"""Real servers on loopback for the middleware tests: uvicorn (ASGI) and werkzeug's
development server (WSGI), each in a thread of the test process on a free port, and the
test's own Redis key prefix on the shared Redis (deleted afterwards), and a redis-server
of the test's own (for the tests that stop or pause it)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
import uuid

import pytest

REDIS_URL = "redis://127.0.0.1:6379"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def uvicorn_server(app):
    """`app` served by a real uvicorn on a free loopback port; yields the base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped before it started"
        assert time.monotonic() < deadline, "uvicorn did not start within 20 s"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@contextlib.contextmanager
def wsgi_server(app):
    """`app` served by werkzeug's threaded WSGI server on a free loopback port; yields
    the base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=15)


@contextlib.contextmanager
def redis_prefix():
    """A key prefix of this test's own on the shared Redis; its keys are deleted at the end."""
    prefix = f"fgpymw-{uuid.uuid4().hex[:12]}:"
    try:
        yield prefix
    finally:
        if shutil.which("redis-cli"):
            cli = ["redis-cli", "-h", "127.0.0.1", "-p", "6379"]
            keys = subprocess.run([*cli, "--scan", "--pattern", f"{prefix}*"],
                                  capture_output=True, text=True, timeout=10).stdout.split()
            if keys:
                subprocess.run([*cli, "DEL", *keys], capture_output=True, timeout=10)


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of the test's own on a free port: (process, url); killed at the end."""
    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)
    yield proc, f"redis://127.0.0.1:{port}"
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
