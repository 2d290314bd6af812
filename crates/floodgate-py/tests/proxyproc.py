"""A real `floodgate proxy` process on loopback for the tests that compare it with the
Python module: a backend answering 200, the proxy in front of it on free ports, its
admin listener answering before a test begins.

The binary is $FLOODGATE_BIN, else target/debug/floodgate (scripts/test-python.sh builds
it with `cargo build --bin floodgate`)."""

import http.client
import http.server
import os
import pathlib
import socket
import subprocess
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = os.environ.get("FLOODGATE_BIN", str(ROOT / "target/debug/floodgate"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Proxy:
    """`floodgate proxy` with `config` (TOML without `listen`, `upstream`, `admin`,
    which are added) in front of a backend: `handler` (an `http.server` request handler
    class), by default one answering 200 at once."""

    def __init__(self, tmp_path, config, handler=_Ok):
        self.backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.backend.serve_forever, daemon=True).start()
        self.port, admin = free_port(), free_port()
        path = tmp_path / "proxy.toml"
        path.write_text(
            f'listen = "127.0.0.1:{self.port}"\n'
            f'upstream = "http://127.0.0.1:{self.backend.server_address[1]}"\n'
            f'admin = "127.0.0.1:{admin}"\n' + config)
        self.stderr_path = tmp_path / "proxy.stderr"
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen([BIN, "proxy", "--config", str(path)],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr)
        end = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/healthz", timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > end:
                    self.stop()
                    raise AssertionError(f"proxy did not start:\n{self.stderr_path.read_text()}")
                time.sleep(0.05)

    def get(self, path="/", headers=None):
        """(status, [(name, value)] lower-cased, body) of GET `path` through the proxy."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            return r.status, [(k.lower(), v) for k, v in r.getheaders()], r.read()
        finally:
            c.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        self.backend.shutdown()
        self.backend.server_close()
