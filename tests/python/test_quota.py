"""`floodgate server` as Envoy's Rate Limit Quota Service, driven by a client written from
the protocol's documentation (envoy.service.rate_limit_quota.v3, xds-protos over grpcio)
that acts as Envoy's `rate_limit_quota` filter does: a bucket's first report subscribes
it; an assignment is applied locally (token bucket, requests per time unit, allow or
deny all) until its time to live runs out, then the expired-assignment behaviour; usage
is reported every interval; an abandon action erases the bucket; a lost stream is
opened again and the buckets report anew.

The binary comes from $FLOODGATE_BIN (scripts/test-server-python.sh builds it)."""

import os
import queue
import signal
import subprocess
import threading
import time
import uuid

import grpc
import pytest
import redis

from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc
from envoy.type.v3 import ratelimit_strategy_pb2, ratelimit_unit_pb2

BIN = os.environ.get("FLOODGATE_BIN", "target/debug/floodgate")

# short intervals: each test runs a few report rounds in a few seconds
CONFIG = """
quota:
  unknown_bucket: deny
  domains:
    - domain: envoy
      buckets:
        - match: {name: api}
          rate: 100/s
          burst: 19
          report_interval: 500ms
          assignment_ttl: 2s
        - match: {name: minutes}
          rate: 600/m
          strategy: requests_per_time_unit
          report_interval: 500ms
          assignment_ttl: 2s
"""

ALLOW_ALL = ratelimit_strategy_pb2.RateLimitStrategy.ALLOW_ALL
DENY_ALL = ratelimit_strategy_pb2.RateLimitStrategy.DENY_ALL


class Server:
    def __init__(self, tmp_path, config=CONFIG, name="server"):
        self.config = tmp_path / f"{name}.yaml"
        self.config.write_text(config)
        self.stderr = open(tmp_path / f"{name}.log", "w+")
        self.proc = subprocess.Popen(
            [BIN, "server", "--config", str(self.config),
             "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--resp", "off"],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("floodgate server listening"), (line, self.log())
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        self.grpc, self.http = fields["grpc"], fields["http"]

    def log(self):
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()

    def shares(self, bucket="envoy|name=api"):
        """The server's last division of `bucket` from /metrics: client -> (demand, share)."""
        import urllib.request
        text = urllib.request.urlopen(f"http://{self.http}/metrics", timeout=5).read().decode()
        out = {}
        for line in text.splitlines():
            for metric, i in (("floodgate_quota_demand", 0), ("floodgate_quota_assigned", 1)):
                if line.startswith(metric + "{") and f'bucket="{bucket}"' in line:
                    client = line.split('client="', 1)[1].split('"', 1)[0]
                    out.setdefault(client, [0.0, 0.0])[i] = float(line.rsplit(" ", 1)[1])
        return out

    def reload(self, config):
        self.config.write_text(config)
        self.proc.send_signal(signal.SIGHUP)

    def stop(self):
        self.proc.terminate()
        assert self.proc.wait(timeout=10) == 0, self.log()
        self.stderr.close()


class Filter:
    """The client side of the protocol, as Envoy's rate_limit_quota filter behaves."""

    def __init__(self, target, domain="envoy", no_assignment="allow", expired="reuse"):
        self.target, self.domain = target, domain
        self.no_assignment, self.expired = no_assignment, expired
        self.lock = threading.RLock()
        # bucket key -> {id, allowed, denied, since, assignment, expires, tokens, at}
        self.buckets = {}
        self.actions = 0
        self.connect()

    def connect(self):
        self.channel = grpc.insecure_channel(self.target)
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(self.channel)
        self.outbox = queue.Queue()
        self.first = True
        self.error = None
        self.calls = stub.StreamRateLimitQuotas(iter(self.outbox.get, None))
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()
        # a new stream: every bucket subscribes again by its next report, which carries
        # the usage since the last one sent

    def lose_stream(self):
        """The connection breaks (the server sees the stream reset)."""
        self.channel.close()
        self.reader.join(timeout=5)

    def read(self):
        try:
            for response in self.calls:
                now = time.monotonic()
                with self.lock:
                    for action in response.bucket_action:
                        key = frozenset(action.bucket_id.bucket.items())
                        b = self.buckets.get(key)
                        if b is None:
                            continue
                        self.actions += 1
                        kind = action.WhichOneof("bucket_action")
                        if kind == "abandon_action":
                            # erase the bucket and its usage; stop reporting it
                            del self.buckets[key]
                            continue
                        qa = action.quota_assignment_action
                        strategy = qa.rate_limit_strategy
                        if b["assignment"] != strategy or b["expires"] <= now:
                            b["tokens"] = None  # a new strategy starts afresh
                        b["assignment"] = strategy
                        ttl = qa.assignment_time_to_live.ToTimedelta().total_seconds()
                        b["expires"] = now + ttl if qa.HasField("assignment_time_to_live") else float("inf")
        except grpc.RpcError as e:
            self.error = e

    def allowed_by(self, b, now):
        strategy = b["assignment"]
        if strategy is None:
            return self.no_assignment == "allow"
        if b["expires"] <= now and self.expired != "reuse":
            return self.expired == "allow"
        kind = strategy.WhichOneof("strategy")
        if kind is None:
            return True
        if kind == "blanket_rule":
            return strategy.blanket_rule == ALLOW_ALL
        if kind == "requests_per_time_unit":
            r = strategy.requests_per_time_unit
            unit = {ratelimit_unit_pb2.SECOND: 1, ratelimit_unit_pb2.MINUTE: 60,
                    ratelimit_unit_pb2.HOUR: 3600, ratelimit_unit_pb2.DAY: 86400}[r.time_unit]
            rate, burst = r.requests_per_time_unit / unit, max(1.0, r.requests_per_time_unit / unit)
        else:
            t = strategy.token_bucket
            rate = t.tokens_per_fill.value / t.fill_interval.ToTimedelta().total_seconds()
            burst = t.max_tokens
        if b["tokens"] is None:
            b["tokens"], b["at"] = burst, now
        b["tokens"] = min(burst, b["tokens"] + (now - b["at"]) * rate)
        b["at"] = now
        if b["tokens"] >= 1:
            b["tokens"] -= 1
            return True
        return False

    def hit(self, bucket, n=1):
        """n requests matched into `bucket` (a dict); returns how many were allowed."""
        key = frozenset(bucket.items())
        now = time.monotonic()
        with self.lock:
            b = self.buckets.get(key)
            new = b is None
            if new:
                b = self.buckets[key] = dict(id=dict(bucket), allowed=0, denied=0, since=now,
                                             assignment=None, expires=0.0, tokens=None, at=now)
            passed = 0
            for _ in range(n):
                if self.allowed_by(b, now):
                    passed += 1
            b["allowed"] += passed
            b["denied"] += n - passed
        if new:
            self.report()  # the first request of a bucket subscribes it at once
        return passed

    def report(self, demand=None):
        """One usage report of every bucket (what the filter sends each interval).
        `demand`, when given, sets each bucket's allowed count over the elapsed time."""
        now = time.monotonic()
        msg = rlqs_pb2.RateLimitQuotaUsageReports()
        if self.first:
            msg.domain = self.domain
            self.first = False
        with self.lock:
            for b in self.buckets.values():
                u = msg.bucket_quota_usages.add()
                u.bucket_id.bucket.update(b["id"])
                elapsed = now - b["since"]
                u.time_elapsed.FromNanoseconds(int(elapsed * 1e9))
                if demand is not None:
                    u.num_requests_allowed = round(demand * elapsed)
                else:
                    u.num_requests_allowed, u.num_requests_denied = b["allowed"], b["denied"]
                b["allowed"] = b["denied"] = 0
                b["since"] = now
        self.outbox.put(msg)

    def assignment(self, bucket):
        with self.lock:
            b = self.buckets.get(frozenset(bucket.items()))
            return None if b is None else b["assignment"]

    def wait(self, pred, timeout=5.0):
        """Until pred() holds (bounded)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if pred():
                    return
            time.sleep(0.02)
        raise AssertionError(f"not within {timeout}s; stream error {self.error}")

    def close(self):
        self.outbox.put(None)
        self.channel.close()


def rate_of(strategy):
    kind = strategy.WhichOneof("strategy")
    if kind == "token_bucket":
        t = strategy.token_bucket
        return t.tokens_per_fill.value / t.fill_interval.ToTimedelta().total_seconds()
    if kind == "requests_per_time_unit":
        r = strategy.requests_per_time_unit
        return r.requests_per_time_unit / {ratelimit_unit_pb2.SECOND: 1, ratelimit_unit_pb2.MINUTE: 60}[r.time_unit]
    raise AssertionError(strategy)


API = {"name": "api"}


def rounds(filters, demands, n=3, interval=0.5):
    """n report rounds, every interval, each filter reporting its demand; then the
    assignments each filter holds."""
    for _ in range(n):
        time.sleep(interval)
        before = [f.actions for f in filters]
        for f, d in zip(filters, demands):
            f.report(demand=d)
        for f, b in zip(filters, before):
            f.wait(lambda: f.actions > b)
    return [rate_of(f.assignment(API)) for f in filters]


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()


def test_first_report_subscribes_and_the_assignment_is_enforced(server):
    f = Filter(server.grpc)
    try:
        # before any assignment: the no-assignment behaviour (allow all)
        assert f.hit(API) == 1
        f.wait(lambda: f.buckets[frozenset(API.items())]["assignment"] is not None)
        s = f.assignment(API)
        assert s.WhichOneof("strategy") == "token_bucket"
        # alone in the bucket: the whole limit and the whole burst
        assert rate_of(s) == pytest.approx(100, rel=1e-6)
        assert s.token_bucket.max_tokens == 20
        # enforced locally: a burst of 50 at once passes the bucket's 20 tokens (the
        # first request came before the assignment), not more
        passed = f.hit(API, 50)
        assert 19 <= passed <= 21, passed
        # requests per time unit, in the limit's unit
        f.hit({"name": "minutes"})
        f.wait(lambda: f.buckets[frozenset({"name": "minutes"}.items())]["assignment"] is not None)
        r = f.assignment({"name": "minutes"}).requests_per_time_unit
        assert (r.requests_per_time_unit, r.time_unit) == (600, ratelimit_unit_pb2.MINUTE)
    finally:
        f.close()


def test_skewed_demand_gets_skewed_shares_within_the_limit(server):
    busy, quiet = Filter(server.grpc), Filter(server.grpc)
    try:
        busy.hit(API)
        quiet.hit(API)
        a, b = rounds([busy, quiet], [400, 10])
        # the quiet client gets about its demand (a demand is measured in whole requests
        # per report interval: 10/s over 0.5 s is 5 requests, give or take one), the busy
        # one what it leaves
        assert b == pytest.approx(10, rel=0.25), (a, b)
        assert a == pytest.approx(90, rel=0.05), (a, b)
        # each division sums to the limit, never more; the assignments the clients hold
        # come from two divisions (each got its own at its report): within the slack of
        # demand moving between them
        division = server.shares()
        assert len(division) == 2, division
        assert sum(s for _, s in division.values()) <= 100 * (1 + 1e-9), division
        assert a + b <= 100 * 1.01, (a, b)
        # the admin API shows the same division
        import json
        import urllib.request
        shown = json.load(urllib.request.urlopen(f"http://{server.http}/admin/api/quota", timeout=5))
        bucket = shown["envoy|name=api"]
        assert bucket["limit"] == 100 and bucket["rule"] == "envoy|name=api"
        assert sorted(c["client"] for c in bucket["clients"]) == sorted(division)
        for c in bucket["clients"]:
            assert [c["demand"], c["share"]] == pytest.approx(division[c["client"]])
        # both busy: equal halves
        a, b = rounds([busy, quiet], [400, 400])
        assert a == pytest.approx(50, rel=0.02) and b == pytest.approx(50, rel=0.02), (a, b)
    finally:
        busy.close()
        quiet.close()


def test_a_silent_clients_share_returns_after_its_ttl_and_stream_loss_reconnects(server):
    a, b = Filter(server.grpc), Filter(server.grpc)
    try:
        a.hit(API)
        b.hit(API)
        x, y = rounds([a, b], [400, 400])
        assert x == pytest.approx(50, rel=0.02)
        # b's stream breaks: its last report counts until its assignment_ttl (2 s) is
        # over, then a gets the whole limit
        b.lose_stream()
        x, = rounds([a], [400], n=1)
        assert x == pytest.approx(50, rel=0.02), x
        time.sleep(2.1)
        x, = rounds([a], [400], n=1)
        assert x == pytest.approx(100, rel=0.02), x
        # b reconnects: a new stream, its buckets subscribe again by their next report
        # and get an assignment at once (its earlier one has expired meanwhile)
        assert b.buckets[frozenset(API.items())]["expires"] <= time.monotonic()
        b.connect()
        before = b.actions
        b.report(demand=400)
        b.wait(lambda: b.actions > before)
        assert rate_of(b.assignment(API)) == pytest.approx(50, rel=0.02)
    finally:
        a.close()
        b.close()


def test_unknown_buckets_are_denied_and_a_removed_bucket_is_abandoned(server):
    f = Filter(server.grpc)
    try:
        other = {"name": "unknown"}
        f.hit(other)
        f.wait(lambda: f.buckets[frozenset(other.items())]["assignment"] is not None)
        assert f.assignment(other).blanket_rule == DENY_ALL
        assert f.hit(other) == 0
        f.hit(API)
        f.wait(lambda: f.buckets[frozenset(API.items())]["assignment"] is not None)
        # a reload removes the api bucket: its next report is answered by an abandon
        # action, and the filter forgets it; a changed limit is assigned at once
        server.reload(CONFIG.replace("match: {name: api}", "match: {name: gone}").replace("600/m", "1200/m"))
        deadline = time.monotonic() + 5
        key = frozenset(API.items())
        while key in f.buckets:
            assert time.monotonic() < deadline, server.log()
            f.report()
            time.sleep(0.1)
        minutes = {"name": "minutes"}
        f.hit(minutes)
        f.wait(lambda: f.assignment(minutes) is not None
               and f.assignment(minutes).requests_per_time_unit.requests_per_time_unit == 1200)
    finally:
        f.close()


def test_bad_streams_end_with_a_clear_status(server):
    channel = grpc.insecure_channel(server.grpc)
    stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(channel)
    try:
        # no domain in the first report
        msg = rlqs_pb2.RateLimitQuotaUsageReports()
        msg.bucket_quota_usages.add().bucket_id.bucket["name"] = "api"
        with pytest.raises(grpc.RpcError) as e:
            list(stub.StreamRateLimitQuotas(iter([msg]), timeout=5))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "domain" in e.value.details()
        # a bucket without entries
        msg = rlqs_pb2.RateLimitQuotaUsageReports(domain="envoy")
        msg.bucket_quota_usages.add()
        with pytest.raises(grpc.RpcError) as e:
            list(stub.StreamRateLimitQuotas(iter([msg]), timeout=5))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # more buckets than a stream may report (default 100)
        msg = rlqs_pb2.RateLimitQuotaUsageReports(domain="envoy")
        for i in range(101):
            msg.bucket_quota_usages.add().bucket_id.bucket["name"] = f"b{i}"
        with pytest.raises(grpc.RpcError) as e:
            list(stub.StreamRateLimitQuotas(iter([msg]), timeout=5))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        channel.close()


def test_a_stopping_server_ends_its_streams_so_clients_reconnect(tmp_path):
    s = Server(tmp_path)
    f = Filter(s.grpc)
    f.hit(API)
    f.wait(lambda: f.assignment(API) is not None)
    s.proc.terminate()
    assert s.proc.wait(timeout=30) == 0, s.log()
    f.reader.join(timeout=5)
    # the stream ended with UNAVAILABLE (the filter reconnects), not held to the grace
    assert f.error is not None and f.error.code() == grpc.StatusCode.UNAVAILABLE, f.error
    assert "grace period over" not in s.log(), s.log()
    # the assignment held keeps being enforced until its time to live
    assert f.buckets[frozenset(API.items())]["expires"] > time.monotonic()
    f.close()
    s.stderr.close()


def test_two_replicas_on_one_redis_share_the_limit(tmp_path):
    prefix = f"fgtest-quota-{uuid.uuid4().hex[:8]}:"
    config = CONFIG + f"store: {{type: redis, redis: {{url: 'redis://127.0.0.1:6379', prefix: '{prefix}'}}}}\n"
    one, two = Server(tmp_path, config, "one"), Server(tmp_path, config, "two")
    a, b = Filter(one.grpc), Filter(two.grpc)
    try:
        a.hit(API)
        b.hit(API)
        x, y = rounds([a, b], [400, 400])
        # one division over both replicas' clients: halves summing to the limit
        assert x + y == pytest.approx(100, rel=0.02), (x, y)
        assert x == pytest.approx(50, rel=0.02), (x, y)
        # skewed across replicas
        x, y = rounds([a, b], [400, 10])
        assert x + y <= 100 * 1.01 and y == pytest.approx(10, rel=0.25), (x, y)
        for s in (one, two):
            division = s.shares()
            assert len(division) == 2, division
            assert sum(v for _, v in division.values()) <= 100 * (1 + 1e-9), division
        # every key the replicas wrote carries a time to live
        r = redis.Redis()
        keys = list(r.scan_iter(match=f"{prefix}*"))
        assert keys
        assert all(0 < r.pttl(k) <= 2000 for k in keys)
    finally:
        a.close()
        b.close()
        one.stop()
        two.stop()


def test_the_documented_envoy_yaml_points_its_filter_at_limited_buckets(tmp_path):
    """docs/quota.md: the envoy.yaml parses into Envoy's Bootstrap; its filter's domain is
    the limits file's, and the BucketIds its matchers build for sample requests are each
    limited by a rule of the limits file (sent to a real server running it)."""
    import yaml
    from google.protobuf import json_format

    import wiring
    from envoy.config.bootstrap.v3 import bootstrap_pb2
    from envoy.extensions.filters.http.rate_limit_quota.v3 import rate_limit_quota_pb2 as rlq_pb2
    from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
    from envoy.extensions.filters.network.http_connection_manager.v3 import (
        http_connection_manager_pb2 as hcm_pb2,
    )
    from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
    from envoy.type.matcher.v3 import http_inputs_pb2

    doc = yaml.safe_load(wiring.one_block("quota.md", "envoy-config"))
    boot = json_format.ParseDict(doc, bootstrap_pb2.Bootstrap())
    (listener,) = boot.static_resources.listeners
    hcm = hcm_pb2.HttpConnectionManager()
    assert listener.filter_chains[0].filters[0].typed_config.Unpack(hcm)
    (f,) = [f for f in hcm.http_filters if f.name == "envoy.filters.http.rate_limit_quota"]
    cfg = rlq_pb2.RateLimitQuotaFilterConfig()
    assert f.typed_config.Unpack(cfg)
    (cluster,) = [c for c in boot.static_resources.clusters
                  if c.name == cfg.rlqs_server.envoy_grpc.cluster_name]
    opts = http_protocol_options_pb2.HttpProtocolOptions()
    assert cluster.typed_extension_protocol_options[
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].Unpack(opts)
    assert opts.explicit_http_config.HasField("http2_protocol_options"), "gRPC needs HTTP/2"
    assert cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value == 8081

    limits = wiring.one_block("quota.md", "server-config")
    assert cfg.domain in [d["domain"] for d in yaml.safe_load(limits)["quota"]["domains"]]

    def bucket_of(action, headers):
        settings = rlq_pb2.RateLimitQuotaBucketSettings()
        assert action.typed_config.Unpack(settings)
        assert settings.reporting_interval.ToTimedelta().total_seconds() >= 0.1
        out = {}
        for key, vb in settings.bucket_id_builder.bucket_id_builder.items():
            if vb.WhichOneof("value_specifier") == "string_value":
                out[key] = vb.string_value
            else:
                inp = http_inputs_pb2.HttpRequestHeaderMatchInput()
                assert vb.custom_value.typed_config.Unpack(inp)
                out[key] = headers[inp.header_name]
        return out

    def bucket_for(headers):
        """The BucketId the filter builds for a request (the first matcher whose prefix
        predicate holds, else on_no_match)."""
        for m in cfg.bucket_matchers.matcher_list.matchers:
            p = m.predicate.single_predicate
            inp = http_inputs_pb2.HttpRequestHeaderMatchInput()
            assert p.input.typed_config.Unpack(inp)
            if headers.get(inp.header_name, "").startswith(p.value_match.prefix):
                return bucket_of(m.on_match.action, headers)
        return bucket_of(cfg.bucket_matchers.on_no_match.action, headers)

    api = bucket_for({":path": "/api/orders", "x-tenant": "acme"})
    web = bucket_for({":path": "/index.html", "x-tenant": "acme"})
    assert api == {"name": "api", "tenant": "acme"} and web == {"name": "web"}

    s = Server(tmp_path, limits, "docs")
    f = Filter(s.grpc, domain=cfg.domain)
    try:
        for bucket in (api, web):
            f.hit(bucket)
            f.wait(lambda: f.assignment(bucket) is not None)
            kind = f.assignment(bucket).WhichOneof("strategy")
            assert kind in ("token_bucket", "requests_per_time_unit"), (bucket, kind)
        assert rate_of(f.assignment(api)) == pytest.approx(100, rel=1e-6)
        assert rate_of(f.assignment(web)) == pytest.approx(100, rel=1e-6)
    finally:
        f.close()
        s.stop()
