"""The Grafana dashboard (deploy/grafana/floodgate.json) and the Prometheus alert rules
(deploy/prometheus/alerts.yaml) name only metrics and labels floodgate exports: a real
`floodgate proxy` and `floodgate server` (Redis store, a rule with detailed_metric) get
some traffic, a reload, and are scraped; every metric each PromQL expression names must
be in the scrape, with every label its matchers and groupings name, and every value an
`=` matcher asks for. promtool (Prometheus's own parser) checks the rules file and every
panel's expression."""

import http.server
import json
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
import uuid

import grpc
import pytest
import redis
import yaml

from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

import wiring

DASHBOARD = wiring.DEPLOY / "grafana" / "floodgate.json"
ALERTS = wiring.DEPLOY / "prometheus" / "alerts.yaml"

# labels Prometheus adds to every series it scrapes (the target's), not the exporter
TARGET_LABELS = {"job", "instance"}
# Grafana's template variables and PromQL's aggregation words are not metrics
METRIC = re.compile(r"\b(floodgate_[A-Za-z0-9_:]*)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SERIES = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+\S+")
LABEL = re.compile(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"')


def parse_scrape(text):
    """{metric name: {label name: {values}}} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SERIES.match(line)
        assert m, f"not an exposition line: {line!r}"
        labels = out.setdefault(m.group(1), {})
        for k, v in LABEL.findall(m.group(3) or ""):
            labels.setdefault(k, set()).add(v)
    return out


def problems(expr, scrape):
    """What `expr` names that the scrape lacks (empty: everything is there)."""
    found = []
    metrics = METRIC.findall(expr)
    if not metrics:
        return [f"names no floodgate metric: {expr}"]
    names = {name for name, _ in metrics}
    for name, braces in metrics:
        if name not in scrape:
            found.append(f"metric {name} is not exported")
            continue
        for label, op, value in MATCHER.findall(braces):
            if label in TARGET_LABELS:
                continue
            values = scrape[name].get(label)
            if values is None:
                found.append(f"{name} has no label {label}")
            elif "$" in value or op in ("!=", "!~"):
                continue
            elif op == "=" and value not in values:
                found.append(f'{name}{{{label}="{value}"}}: no such value (has {sorted(values)})')
            elif op == "=~" and not any(re.fullmatch(value, v) for v in values):
                found.append(f'{name}{{{label}=~"{value}"}}: matches none of {sorted(values)}')
    for _, labels in GROUPING.findall(expr):
        for label in (x.strip() for x in labels.split(",")):
            if not label or label in TARGET_LABELS:
                continue
            if not any(label in scrape.get(n, {}) for n in names):
                found.append(f"grouping label {label} is on none of {sorted(names)}")
    return found


def dashboard_exprs():
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                out.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))

    walk(dash["panels"])
    return out


def alert_exprs():
    rules = yaml.safe_load(ALERTS.read_text())
    return [(f"alert {r['alert']}", str(r["expr"])) for g in rules["groups"] for r in g["rules"]]


class Backend(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200
        return r.read().decode()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """The proxy's and the server's scrapes, merged, after traffic and a reload."""
    tmp = tmp_path_factory.mktemp("scrape")
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    listen, admin = wiring.free_port(), wiring.free_port()
    proxy_cfg = tmp / "proxy.toml"
    proxy_cfg.write_text(f"""
listen = "127.0.0.1:{listen}"
upstream = "http://127.0.0.1:{backend.server_address[1]}"
admin = "127.0.0.1:{admin}"

[[policy]]
name = "per-ip"
algorithm = "gcra"
rate = "2/s"
burst = 1
key = "ip"

[[policy]]
name = "queued"
algorithm = "leaky-queue"
rate = "100/s"
burst = 5
key = "global"
""")
    proxy = wiring.Process(tmp, "proxy", ["proxy", "--config", str(proxy_cfg)])
    prefix = f"floodgate-test:{uuid.uuid4().hex}:"
    server, doors = wiring.server(tmp, f"""
store:
  type: redis
  redis: {{url: "redis://127.0.0.1:6379", prefix: "{prefix}"}}
domain: edge
descriptors:
  - key: remote_address
    detailed_metric: true
    rate_limit: {{unit: minute, requests_per_unit: 3}}
""")
    try:
        wiring.wait_http(f"http://127.0.0.1:{admin}/healthz")
        codes = []
        for _ in range(6):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{listen}/", timeout=5) as r:
                    codes.append(r.status)
            except urllib.error.HTTPError as e:
                codes.append(e.code)
        assert 200 in codes and 429 in codes, codes
        with grpc.insecure_channel(doors["grpc"]) as channel:
            stub = rls_pb2_grpc.RateLimitServiceStub(channel)
            answers = []
            for _ in range(5):
                req = rls_pb2.RateLimitRequest(domain="edge")
                req.descriptors.add().entries.add(key="remote_address", value="203.0.113.7")
                answers.append(stub.ShouldRateLimit(req, timeout=5).overall_code)
        assert rls_pb2.RateLimitResponse.OVER_LIMIT in answers, answers
        server.proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 10
        while True:
            server_text = scrape(f"http://{doors['http']}/metrics")
            if re.search(r'^floodgate_config_reloads_total\{result="ok"\} [1-9]', server_text, re.M):
                break
            assert time.monotonic() < end, f"no reload counted:\n{server_text}\n{server.log()}"
            time.sleep(0.1)
        proxy_text = scrape(f"http://127.0.0.1:{admin}/metrics")
    finally:
        proxy.stop()
        server.stop()
        backend.shutdown()
        r = redis.Redis()
        for k in r.scan_iter(match=f"{prefix}*"):
            r.delete(k)
    merged = {}
    for text in (proxy_text, server_text):
        for name, labels in parse_scrape(text).items():
            mine = merged.setdefault(name, {})
            for k, v in labels.items():
                mine.setdefault(k, set()).update(v)
    return merged


EXPRS = dashboard_exprs() + alert_exprs()


@pytest.mark.parametrize("where,expr", EXPRS, ids=[w for w, _ in EXPRS])
def test_every_expression_names_exported_metrics_and_labels(scraped, where, expr):
    assert not problems(expr, scraped), f"{where}: {expr}\n" + "\n".join(problems(expr, scraped))


def test_the_check_finds_a_missing_metric_label_or_value(scraped):
    """The check above fails on what it should."""
    assert problems('rate(floodgate_decision_totl[5m])', scraped)
    assert problems('sum by (polcy) (rate(floodgate_decisions_total[5m]))', scraped)
    assert problems('floodgate_decisions_total{outcome="refused"}', scraped)
    assert problems('floodgate_store_up{kind="timeout"}', scraped)
    assert problems('sum(rate(up[5m]))', scraped)
    assert not problems('sum by (job, policy) (rate(floodgate_decisions_total{outcome="rejected"}[5m]))',
                        scraped)


def test_the_dashboard_covers_what_operators_watch():
    exprs = " ".join(e for _, e in dashboard_exprs())
    for needed in ("floodgate_decisions_total", 'outcome="rejected"',
                   "floodgate_descriptor_decisions_total", "topk(",
                   "floodgate_store_errors_total", "floodgate_store_up",
                   "floodgate_redis_circuit_opened_total", "_bucket",
                   "floodgate_config_reloads_total"):
        assert needed in exprs, needed
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    assert {v["name"] for v in dash["templating"]["list"]} >= {"datasource", "job"}


def test_every_alert_has_severity_and_summary():
    rules = yaml.safe_load(ALERTS.read_text())
    names = []
    for g in rules["groups"]:
        for r in g["rules"]:
            names.append(r["alert"])
            assert set(r) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, r
            assert r["labels"]["severity"] in ("critical", "warning"), r
            assert r["annotations"]["summary"], r
    assert len(names) == len(set(names)), names


def promtool(*args):
    exe = shutil.which("promtool")
    assert exe, "promtool is not installed (Debian package prometheus; scripts/setup.sh installs it)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_alert_rules():
    r = promtool("check", "rules", str(ALERTS))
    assert r.returncode == 0, r.stdout + r.stderr


# Grafana's variables, as a query would have them expanded
GRAFANA_VARS = {"$__rate_interval": "1m", "$__range": "1h", "$job": ".*"}


def test_promtool_parses_every_dashboard_expression(tmp_path):
    rules = []
    for i, (where, expr) in enumerate(dashboard_exprs()):
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"{where}: a Grafana variable this test does not expand: {expr}"
        rules.append({"record": f"floodgate:dashboard_expr_{i}", "expr": expr})
    f = tmp_path / "dashboard-rules.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = promtool("check", "rules", str(f))
    assert r.returncode == 0, r.stdout + r.stderr
    # and promtool refuses what is not PromQL
    f.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [
        {"record": "floodgate:bad", "expr": "sum by (policy (rate(floodgate_decisions_total[1m]))"}]}]}))
    assert promtool("check", "rules", str(f)).returncode != 0
