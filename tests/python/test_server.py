"""`floodgate server` driven by independent clients: Envoy's own generated API
(xds-protos) over grpcio, redis-py on the RESP port, and curl on the HTTP API.

The binary comes from $FLOODGATE_BIN (scripts/test-server-python.sh builds it).
"""

import json
import os
import re
import subprocess
import time

import grpc
import pytest
import redis

from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

BIN = os.environ.get("FLOODGATE_BIN", "target/debug/floodgate")

CONFIG = """
headers: {retry_after_jitter: 0s}
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: tenant
        descriptors:
          - key: user
            rate_limits:
              - {requests_per_unit: 10, unit: minute, name: per-minute}
              - {requests_per_unit: 2, window: 30s, algorithm: sliding-log, name: per-30s}
      - key: shadow
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
"""

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
MINUTE = rls_pb2.RateLimitResponse.RateLimit.MINUTE


class Server:
    def __init__(self, tmp_path, config=CONFIG):
        self.config = tmp_path / "limits.yaml"
        self.config.write_text(config)
        self.stderr = open(tmp_path / "stderr.log", "w+")
        self.proc = subprocess.Popen(
            [BIN, "server", "--config", str(self.config),
             "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--resp", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("floodgate server listening"), (line, self.log())
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        self.grpc, self.http, self.resp = fields["grpc"], fields["http"], fields["resp"]
        self.channel = grpc.insecure_channel(self.grpc)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)

    def log(self):
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()

    def check(self, descriptors, domain="edge", hits=0):
        req = rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits)
        for entries in descriptors:
            d = req.descriptors.add()
            for k, v in entries:
                d.entries.add(key=k, value=v)
        return self.stub.ShouldRateLimit(req, timeout=5)

    def stop(self):
        self.channel.close()
        self.proc.terminate()
        assert self.proc.wait(timeout=10) == 0, self.log()
        self.stderr.close()


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()


def headers(resp):
    return {h.key: h.value for h in resp.response_headers_to_add}


def test_should_rate_limit_codes_statuses_and_headers(server):
    for remaining in (2, 1, 0):
        r = server.check([[("remote_address", "10.0.0.1")]])
        assert r.overall_code == OK
        (s,) = r.statuses
        assert s.code == OK
        assert s.current_limit.requests_per_unit == 3
        assert s.current_limit.unit == MINUTE
        assert s.current_limit.name == "remote_address"
        assert s.limit_remaining == remaining
        assert 0 < s.duration_until_reset.ToTimedelta().total_seconds() <= 60
        h = headers(r)
        assert h["RateLimit-Policy"] == '"remote_address";q=3;w=60;floodgate-capacity=3'
        # over the next minute at 3/min: 3, less how far the calls at once put the key
        # ahead of a steady client (all but the last one sent)
        assert h["RateLimit"] == '"remote_address";r=%d;t=60' % (remaining + 1)
        assert "Retry-After" not in h
    r = server.check([[("remote_address", "10.0.0.1")]])
    assert r.overall_code == OVER and r.statuses[0].code == OVER
    # GCRA 3/min: one request per 20 s comes back; no jitter configured.
    assert headers(r)["Retry-After"] == "20"
    # another value has its own counter
    assert server.check([[("remote_address", "10.0.0.2")]]).overall_code == OK


def test_hits_addend_is_the_cost(server):
    r = server.check([[("remote_address", "h")]], hits=2)
    assert r.statuses[0].limit_remaining == 1
    req = rls_pb2.RateLimitRequest(domain="edge", hits_addend=1)
    d = req.descriptors.add()
    d.entries.add(key="remote_address", value="h")
    d.hits_addend.value = 0  # a descriptor's own hits_addend: 0 peeks
    r = server.stub.ShouldRateLimit(req, timeout=5)
    assert (r.overall_code, r.statuses[0].limit_remaining) == (OK, 1)
    r = server.check([[("remote_address", "h")]], hits=2)
    assert r.overall_code == OVER


def test_nested_several_limits_all_or_nothing_and_shadow(server):
    nested = [("tenant", "acme"), ("user", "bob")]
    assert server.check([nested]).overall_code == OK
    assert server.check([nested]).overall_code == OK
    r = server.check([[("remote_address", "n")], nested])
    assert r.overall_code == OVER
    assert [s.code for s in r.statuses] == [OK, OVER]
    assert r.statuses[1].current_limit.name == "per-30s"
    assert r.statuses[0].limit_remaining == 3, "the other descriptor was not charged"
    # two admitted at once put per-minute one ahead (9 over the next minute); charged for
    # the denied request too, it would be two ahead (8)
    assert "per-minute\";r=9;" in headers(r)["RateLimit"]
    # a descriptor no rule matches: OK with no limit
    r = server.check([[("tenant", "acme")]])
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    for _ in range(3):
        r = server.check([[("shadow", "s")]])
        assert r.overall_code == OK and r.statuses[0].limit_remaining == 0


def test_bad_requests_get_clear_errors_and_the_service_stays_up(server):
    with pytest.raises(grpc.RpcError) as e:
        server.check([[("a", "b")]], domain="nope")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert e.value.details() == 'unknown domain "nope"; configured domains: edge'
    with pytest.raises(grpc.RpcError) as e:
        server.check([])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "the descriptor list must not be empty"
    with pytest.raises(grpc.RpcError) as e:
        server.check([[("remote_address", str(i))] for i in range(1000)])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "1000 descriptors is more than the maximum of 64" in e.value.details()
    raw = server.channel.unary_unary(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        request_serializer=None, response_deserializer=None)
    for garbage in (b"\xff\xff\xff\xff", b"\x0a\x20a", b"\x12\x05\x0a"):
        with pytest.raises(grpc.RpcError) as e:
            raw(garbage, timeout=5)
        assert e.value.code() == grpc.StatusCode.INTERNAL
        assert "decode" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        raw(b"\x0a\x04edge" + b"\x12\x00" * 600_000, timeout=5)  # 1.2 MB
    assert e.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert server.check([[("remote_address", "still")]]).overall_code == OK


@pytest.mark.parametrize("protocol", [3, 2])
def test_redis_py_gets_redis_cells_answers(server, protocol):
    host, port = server.resp.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port), socket_timeout=5, protocol=protocol)
    assert r.ping() is True
    assert r.execute_command("CL.THROTTLE", "k", 15, 30, 60) == [0, 16, 15, -1, 2]
    # microseconds later: 3.99... s to full capacity, truncated as redis-cell truncates
    assert r.execute_command("CL.THROTTLE", "k", 15, 30, 60) == [0, 16, 14, -1, 3]
    assert r.execute_command("CL.THROTTLE", "fresh", 15, 30, 60, 0) == [0, 16, 16, -1, 0]
    assert r.execute_command("CL.THROTTLE", "big", 4, 1, 1, 6) == [1, 5, 5, -1, 0]
    with pytest.raises(redis.ResponseError, match="Usage: CL.THROTTLE"):
        r.execute_command("CL.THROTTLE", "k", 15)
    with pytest.raises(redis.ResponseError, match='count must be an integer, got "3o"'):
        r.execute_command("CL.THROTTLE", "k", 15, "3o", 60)
    with pytest.raises(redis.ResponseError, match="zero rates are not supported"):
        r.execute_command("CL.THROTTLE", "k", 15, 0, 60)
    pipe = r.pipeline(transaction=False)
    for _ in range(3):
        pipe.execute_command("CL.THROTTLE", "p", 1, 1, 60)
    assert [x[0] for x in pipe.execute()] == [0, 0, 1]
    r.close()


def curl(*args):
    out = subprocess.run(["curl", "-s", "--max-time", "5", *args],
                         capture_output=True, text=True, check=True)
    return out.stdout


def test_http_api_with_curl(server):
    url = "http://%s/v1/check" % server.http
    body = json.dumps({"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "c"}]]})
    json_ct = ("-H", "content-type: application/json")
    for remaining in (2, 1, 0):
        out = curl("-X", "POST", url, *json_ct, "-d", body)
        j = json.loads(out)
        assert (j["allowed"], j["remaining"], j["limit"]) == (True, remaining, 3)
    out = curl("-i", "-X", "POST", url, *json_ct, "-d", body)
    head, payload = out.split("\n\n", 1)  # text mode turned CRLF into LF
    assert head.startswith("HTTP/1.1 429")
    assert re.search(r"(?im)^retry-after: 20$", head)
    assert json.loads(payload)["headers"]["Retry-After"] == "20"
    out = curl("-i", "-X", "POST", url, *json_ct, "-d", '{"domain": ')
    assert out.startswith("HTTP/1.1 400") and "invalid JSON" in out
    out = curl("-i", "-X", "POST", url, "-d", body)  # curl's -d sends a form type
    assert out.startswith("HTTP/1.1 415") and "application/json" in out
    metrics = curl("http://%s/metrics" % server.http)
    assert 'floodgate_descriptor_decisions_total{domain="edge",descriptor="remote_address",outcome="rejected"} 1' in metrics


def test_reload_on_file_change_keeps_counters(server):
    server.check([[("remote_address", "r")]])
    server.config.write_text(CONFIG.replace("requests_per_unit: 3}", "requests_per_unit: 30}", 1))
    deadline = time.time() + 10
    while time.time() < deadline:
        r = server.check([[("remote_address", "probe")]], hits=1)
        if r.statuses[0].current_limit.requests_per_unit == 30:
            break
        time.sleep(0.05)
    else:
        pytest.fail("not reloaded: " + server.log())
    # 'r' kept its state: GCRA at 30/min after 1 hit at 3/min is not back to 29 remaining
    r = server.check([[("remote_address", "r")]])
    assert r.statuses[0].limit_remaining < 28


# Limitador's example limits file (limitador-server/examples/limits.yaml), as it is.
LIMITADOR = open(os.path.join(os.path.dirname(__file__), "..", "..", "crates",
                              "floodgate-server", "tests", "limitador",
                              "examples-limits.yaml")).read()


def test_limitador_limits_file_answers_should_rate_limit(tmp_path):
    s = Server(tmp_path, config=LIMITADOR)
    try:
        def post(user, *extra):
            return s.check([[("req.method", "POST"), *extra, ("user_id", user)]],
                           domain="test_namespace")

        for _ in range(5):
            assert post("alice").overall_code == OK
        r = post("alice")
        assert r.overall_code == OVER
        assert r.statuses[0].code == OVER
        assert r.statuses[0].current_limit.requests_per_unit == 5
        # entries in another order, beside others: the same counter
        r = s.check([[("user_id", "alice"), ("x", "1"), ("req.method", "POST")]],
                    domain="test_namespace")
        assert r.overall_code == OVER
        assert post("bob").overall_code == OK
        r = s.check([[("req.method", "GET"), ("user_id", "alice")]], domain="test_namespace")
        assert r.overall_code == OK
        assert "2 Limitador limits as fixed windows" in s.log()
    finally:
        s.stop()
