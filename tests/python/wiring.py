"""What the wiring tests share: the book's blocks by info string, and a `floodgate server`
or `floodgate proxy` process on loopback ports of its own.

The binary comes from $FLOODGATE_BIN (scripts/test-server-python.sh builds it).
"""

import os
import pathlib
import re
import socket
import subprocess
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DEPLOY = ROOT / "deploy"
BIN = os.environ.get("FLOODGATE_BIN", str(ROOT / "target/debug/floodgate"))
BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)


def blocks(page, tag):
    """The bodies of the fenced blocks of docs/`page` whose info string has `tag`."""
    text = (DOCS / page).read_text()
    return [m.group(2) for m in BLOCK.finditer(text) if tag in m.group(1).split(",")]


def one_block(page, tag):
    found = blocks(page, tag)
    assert len(found) == 1, f"docs/{page}: {len(found)} blocks tagged {tag}, expected one"
    return found[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A floodgate process; `log()` is its stderr so far."""

    def __init__(self, tmp_path, name, args):
        self.stderr_path = tmp_path / f"{name}.stderr"
        self.stderr = open(self.stderr_path, "w+")
        self.proc = subprocess.Popen([BIN, *args], stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)

    def log(self):
        self.stderr.flush()
        return self.stderr_path.read_text()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


def server(tmp_path, config_text, name="limits.yaml"):
    """`floodgate server` on the config text, every door on a free loopback port;
    returns (process, {door: address})."""
    config = tmp_path / name
    config.write_text(config_text)
    p = Process(tmp_path, "server", [
        "server", "--config", str(config),
        "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
    line = p.proc.stdout.readline()
    assert line.startswith("floodgate server listening"), (line, p.log())
    doors = dict(w.split("=", 1) for w in line.split() if "=" in w)
    return p, doors


def wait_http(url, deadline_s=20):
    """Waits until `url` answers 200 (a listener that is up)."""
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise AssertionError(f"{url} did not answer 200 within {deadline_s} s: {last}")
