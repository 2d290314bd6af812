#!/usr/bin/env python3
"""Drive pairs of calls the Redis store sends (reserve then settle, acquire then release)
at one redis-server, pipelined, through the module's commands or the store's scripts, and
print the server's own time per call of each command (INFO commandstats usec_per_call).

    redis-pairs.py PORT PAIRS SETTLE_SHA INFLIGHT_SHA

Reserve and settle: a fixed window of 10^9 per hour (never denied), estimate 2, actual 1
(one unit refunded, in the window charged), at the caller's instant, as the store sends
them in `time = "caller"` mode; 1000 keys. Acquire and release: up to 10^6 leases per
key of 60 s, at the server's clock; each lease released by the next call.
"""
import socket
import sys
import time


def resp(*words):
    out = [b"*%d\r\n" % len(words)]
    for w in words:
        w = w if isinstance(w, bytes) else str(w).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(w), w))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.s.recv(1 << 16)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(1 << 16)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        return rest

    def call(self, *words):
        self.s.sendall(resp(*words))
        return self.reply()

    def pipeline(self, cmds):
        self.s.sendall(b"".join(cmds))
        return [self.reply() for _ in cmds]


def stats(c):
    info = c.call("INFO", "commandstats").decode()
    out = {}
    for line in info.splitlines():
        if line.startswith("cmdstat_"):
            name, fields = line[len("cmdstat_"):].split(":", 1)
            f = dict(kv.split("=") for kv in fields.split(","))
            out[name] = (int(f["calls"]), float(f["usec_per_call"]))
    return out


def run(c, pairs, make):
    c.call("CONFIG", "RESETSTAT")
    batch = 200
    for start in range(0, pairs, batch):
        cmds = []
        for i in range(start, min(pairs, start + batch)):
            cmds.extend(make(i))
        for r in c.pipeline(cmds):
            if isinstance(r, list) and r and r[0] == -1:
                raise RuntimeError("an acquire found its id held")
    return stats(c)


def main():
    port, pairs, settle_sha, inflight_sha = sys.argv[1:5]
    port, pairs = int(port), int(pairs)
    c = Conn(port)
    fw = ("2", "2", "0", "1000000000", "3600000000000")  # alg, estimate, pad, limit, W

    def now():
        t = time.time_ns()
        return str(t // 10**9), str(t % 10**9)

    def module_settle(i):
        key = "ms:%d" % (i % 1000)
        s, n = now()
        return [
            resp("FG.RESERVE", key, fw[0], fw[1], fw[2], fw[3], fw[4], 0, 0, s, n),
            resp("FG.SETTLE", key, fw[0], fw[1], fw[2], fw[3], fw[4], 0, 0, s, n, 1, s, n),
        ]

    def script_settle(i):
        key = "ss:%d" % (i % 1000)
        s, n = now()
        head = ("EVALSHA", settle_sha, 1, key)
        return [
            resp(*head, "reserve", s, n, fw[0], fw[2], fw[1], 0, 0, 0, fw[3], fw[4]),
            resp(*head, "settle", s, n, fw[0], fw[2], fw[1], s, n, 1, fw[3], fw[4]),
        ]

    def module_lease(i):
        key = "ml:%d" % (i % 1000)
        return [
            resp("FG.ACQUIRE", key, i, 1000000, 60000000, 0, "redis"),
            resp("FG.RELEASE", key, i, "redis"),
        ]

    def script_lease(i):
        key = "sl:%d" % (i % 1000)
        head = ("EVALSHA", inflight_sha, 1, key)
        return [
            resp(*head, "acquire", "redis", i, 1000000, 60000000, 0),
            resp(*head, "release", "redis", i, 1000000, 0, 0),
        ]

    rows = []
    for label, make, names in [
        ("reserve + settle, module (FG.RESERVE + FG.SETTLE)", module_settle, ["fg.reserve", "fg.settle"]),
        ("reserve + settle, settle script (2 EVALSHA)", script_settle, ["evalsha"]),
        ("acquire + release, module (FG.ACQUIRE + FG.RELEASE)", module_lease, ["fg.acquire", "fg.release"]),
        ("acquire + release, in-flight script (2 EVALSHA)", script_lease, ["evalsha"]),
    ]:
        st = run(c, pairs, make)
        parts = [(n, st[n][0], st[n][1]) for n in names]
        per_pair = sum(calls * us for _, calls, us in parts) / pairs
        rows.append((label, parts, per_pair))
    for k in range(0, 4, 2):
        (ml, mparts, mp), (sl, sparts, sp) = rows[k], rows[k + 1]
        for label, parts, p in ((ml, mparts, mp), (sl, sparts, sp)):
            detail = ", ".join("%s %.2f" % (n, us) for n, _, us in parts)
            print("%-52s %7.2f us/pair  (%s)  %.2fx the module" % (label, p, detail, p / mp))


if __name__ == "__main__":
    main()
