"""The wiring operators copy (docs/envoy.md, deploy/kubernetes/) holds: the Envoy file is a
valid Envoy `Bootstrap` whose routes produce only descriptors the limits file limits (sent
to a real `floodgate server`), and the Kubernetes manifests validate against the
Kubernetes API schemas and carry configs floodgate accepts."""

import re

import grpc
import kubernetes_validate
import pytest
import yaml
from google.protobuf import json_format

# typed_config Any fields resolve through the default pool: import their types
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.config.core.v3 import config_source_pb2
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

import wiring

KUBERNETES_VERSION = "1.37.0"

# what a request brings, for the actions that read it
CLIENT_ADDRESS = "203.0.113.7"
REQUEST_HEADERS = {"x-tenant": "acme", "x-user": "alice", ":path": "/api/orders"}


def bootstrap():
    doc = yaml.safe_load(wiring.one_block("envoy.md", "envoy-config"))
    return json_format.ParseDict(doc, bootstrap_pb2.Bootstrap())


def limits():
    return yaml.safe_load(wiring.one_block("envoy.md", "server-config"))


def unpack(any_msg, cls):
    msg = cls()
    assert any_msg.Unpack(msg), f"{any_msg.type_url} is not {cls.DESCRIPTOR.full_name}"
    return msg


def connection_managers(b):
    for listener in b.static_resources.listeners:
        for chain in listener.filter_chains:
            for f in chain.filters:
                if f.name == "envoy.filters.network.http_connection_manager":
                    yield unpack(f.typed_config, hcm_pb2.HttpConnectionManager)


def ratelimit_filter(hcm):
    found = [f for f in hcm.http_filters if f.name == "envoy.filters.http.ratelimit"]
    assert len(found) == 1, [f.name for f in hcm.http_filters]
    return unpack(found[0].typed_config, rate_limit_pb2.RateLimit)


def entry(action):
    """The (key, value) one route action adds to its descriptor, for the sample request;
    None when the request lacks what it reads (Envoy then sends no descriptor)."""
    kind = action.WhichOneof("action_specifier")
    if kind == "remote_address":
        return ("remote_address", CLIENT_ADDRESS)
    if kind == "request_headers":
        h = action.request_headers
        value = REQUEST_HEADERS.get(h.header_name)
        return None if value is None else (h.descriptor_key, value)
    if kind == "generic_key":
        g = action.generic_key
        return (g.descriptor_key or "generic_key", g.descriptor_value)
    if kind == "header_value_match":
        m = action.header_value_match
        return (m.descriptor_key or "header_match", m.descriptor_value)
    if kind == "destination_cluster":
        return None  # filled by the caller, which knows the route's cluster
    raise AssertionError(f"the test cannot produce the descriptor entry of a {kind} action")


def route_descriptors(b):
    """[(route prefix, [(key, value), ...])] for every rate_limits entry of every route."""
    out = []
    for hcm in connection_managers(b):
        for vh in hcm.route_config.virtual_hosts:
            for r in vh.routes:
                for rl in r.route.rate_limits:
                    entries = []
                    for a in rl.actions:
                        if a.WhichOneof("action_specifier") == "destination_cluster":
                            entries.append(("destination_cluster", r.route.cluster))
                            continue
                        e = entry(a)
                        if e is None:
                            entries = None
                            break
                        entries.append(e)
                    if entries:
                        out.append((r.match.prefix, entries))
    return out


def test_envoy_yaml_is_an_envoy_bootstrap():
    b = bootstrap()
    # ParseDict refuses unknown fields and unresolvable Any types; check what it leaves open
    clusters = {c.name: c for c in b.static_resources.clusters}
    hcms = list(connection_managers(b))
    assert hcms, "no http_connection_manager in the Envoy file"
    for hcm in hcms:
        names = [f.name for f in hcm.http_filters]
        assert names[-1] == "envoy.filters.http.router", names
        rl = ratelimit_filter(hcm)
        assert rl.domain == limits()["domain"]
        svc = rl.rate_limit_service
        assert svc.transport_api_version == config_source_pb2.ApiVersion.V3
        cluster = clusters[svc.grpc_service.envoy_grpc.cluster_name]
        opts = unpack(
            cluster.typed_extension_protocol_options[
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"],
            http_protocol_options_pb2.HttpProtocolOptions)
        assert opts.explicit_http_config.HasField("http2_protocol_options"), \
            "the rate limit service cluster must speak HTTP/2 (gRPC)"
        for vh in hcm.route_config.virtual_hosts:
            for r in vh.routes:
                assert r.route.cluster in clusters, r.route.cluster
    assert route_descriptors(b), "no route has rate_limits"
    # a proto3 bool has no presence: the choice is checked in the file as written
    doc = yaml.safe_load(wiring.one_block("envoy.md", "envoy-config"))
    hcm_doc = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    (rl_doc,) = [f for f in hcm_doc["typed_config"]["http_filters"]
                 if f["name"] == "envoy.filters.http.ratelimit"]
    assert "failure_mode_deny" in rl_doc["typed_config"], "failure_mode_deny is not written out"


def test_envoy_yaml_refuses_a_misspelt_field():
    """The parse above is strict: a field Envoy does not know fails it."""
    doc = yaml.safe_load(wiring.one_block("envoy.md", "envoy-config"))
    doc["static_resources"]["clusters"][0]["conect_timeout"] = "1s"
    with pytest.raises(json_format.ParseError, match="conect_timeout"):
        json_format.ParseDict(doc, bootstrap_pb2.Bootstrap())


def test_every_route_descriptor_is_limited_by_the_limits_file(tmp_path):
    descriptors = route_descriptors(bootstrap())
    domain = limits()["domain"]
    proc, doors = wiring.server(tmp_path, wiring.one_block("envoy.md", "server-config"))
    try:
        with grpc.insecure_channel(doors["grpc"]) as channel:
            stub = rls_pb2_grpc.RateLimitServiceStub(channel)
            for prefix, entries in descriptors:
                req = rls_pb2.RateLimitRequest(domain=domain)
                d = req.descriptors.add()
                for k, v in entries:
                    d.entries.add(key=k, value=v)
                resp = stub.ShouldRateLimit(req, timeout=5)
                (status,) = resp.statuses
                assert status.HasField("current_limit"), (
                    f"route {prefix}: descriptor {entries} matches no rule of the limits file "
                    f"(answered {status})")
                assert status.code == rls_pb2.RateLimitResponse.OK, (prefix, entries, status)
            # and a descriptor no rule names is told apart: OK with no limit
            req = rls_pb2.RateLimitRequest(domain=domain)
            req.descriptors.add().entries.add(key="no_such_key", value="x")
            (status,) = stub.ShouldRateLimit(req, timeout=5).statuses
            assert not status.HasField("current_limit"), status
    finally:
        proc.stop()


def rule_paths(rules, prefix=()):
    """Every rule path of the limits file that carries a limit: ((key, value or None), ...)."""
    for r in rules:
        path = (*prefix, (r["key"], r.get("value")))
        if "rate_limit" in r or "rate_limits" in r:
            yield path
        yield from rule_paths(r.get("descriptors", []), path)


def reaches(entries, path):
    return len(entries) == len(path) and all(
        k == rk and (rv is None or rv == v or (rv.endswith("*") and v.startswith(rv[:-1])))
        for (k, v), (rk, rv) in zip(entries, path))


def test_every_rule_of_the_limits_file_is_reached_by_a_route():
    """The other way round: no rule of the limits file is dead for this Envoy file."""
    descriptors = [entries for _, entries in route_descriptors(bootstrap())]
    paths = list(rule_paths(limits()["descriptors"]))
    assert paths
    for path in paths:
        assert any(reaches(e, path) for e in descriptors), (
            f"no route's rate_limits produce a descriptor for the rule {path}")


# --- Kubernetes ---

def manifests():
    files = sorted((wiring.DEPLOY / "kubernetes").glob("*.yaml"))
    assert files, "deploy/kubernetes/ has no manifests"
    return [(f.name, doc) for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]


def by_kind(kind):
    return [(f, d) for f, d in manifests() if d["kind"] == kind]


@pytest.mark.parametrize("name,doc", manifests(),
                         ids=lambda v: v if isinstance(v, str) else v["kind"] + "/" + v["metadata"]["name"])
def test_manifest_validates_against_the_kubernetes_schemas(name, doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validate_refuses_a_wrong_manifest():
    """The validation above fails on what it should: a misspelt field, a wrong type."""
    (_, dep), *_ = by_kind("Deployment")
    bad = yaml.safe_load(yaml.safe_dump(dep))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)
    bad = yaml.safe_load(yaml.safe_dump(dep))
    bad["spec"]["template"]["spec"]["containerz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_the_server_has_its_deployment_service_configmap_and_disruption_budget():
    server = [d for f, d in manifests() if f == "server.yaml"]
    assert {d["kind"] for d in server} >= {
        "Deployment", "Service", "ConfigMap", "PodDisruptionBudget"}
    dep = next(d for d in server if d["kind"] == "Deployment")
    svc = next(d for d in server if d["kind"] == "Service")
    pdb = next(d for d in server if d["kind"] == "PodDisruptionBudget")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    for selector in (svc["spec"]["selector"], pdb["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items(), (selector, labels)
    # the Service is the address envoy.yaml's rate_limit_service cluster names
    b = bootstrap()
    rls = next(c for c in b.static_resources.clusters if c.name == "rate_limit_service")
    addr = rls.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert addr.address == svc["metadata"]["name"]
    assert addr.port_value in {p["port"] for p in svc["spec"]["ports"]}


def mounted_configs(pod_spec, container):
    """{path inside the container: the ConfigMap text mounted there} for `container`."""
    configmaps = {d["metadata"]["name"]: d for _, d in by_kind("ConfigMap")}
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    out = {}
    for m in container.get("volumeMounts", []):
        cm = volumes[m["name"]].get("configMap")
        if cm is None:
            continue
        for key, text in configmaps[cm["name"]]["data"].items():
            out[f"{m['mountPath'].rstrip('/')}/{key}"] = text
    return out


def floodgate_containers():
    for f, d in by_kind("Deployment"):
        spec = d["spec"]["template"]["spec"]
        for c in spec["containers"]:
            if c["image"].split("/")[-1].startswith("floodgate:"):
                yield f, spec, c


def test_the_floodgate_containers_run_configs_floodgate_accepts(tmp_path):
    seen = set()
    for f, spec, c in floodgate_containers():
        args = c["args"]
        sub = args[0]
        config_path = args[args.index("--config") + 1]
        configs = mounted_configs(spec, c)
        assert config_path in configs, f"{f}: {c['name']} reads {config_path}, mounted: {list(configs)}"
        local = tmp_path / f"{sub}-{config_path.rsplit('/', 1)[-1]}"
        local.write_text(configs[config_path])
        check = ["--check"] if sub == "server" else ["--check-config"]
        r = wiring.subprocess.run([wiring.BIN, sub, "--config", str(local), *check],
                                  capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{f}: {sub} refuses its ConfigMap: {r.stderr}"
        seen.add(sub)
    assert seen == {"server", "proxy"}, seen


def test_the_server_configmap_holds_the_books_rules():
    """deploy/kubernetes/server.yaml serves the rules docs/envoy.md checks against envoy.yaml."""
    f, spec, c = next(x for x in floodgate_containers() if x[2]["args"][0] == "server")
    args = c["args"]
    served = yaml.safe_load(mounted_configs(spec, c)[args[args.index("--config") + 1]])
    book = limits()
    assert (served["domain"], served["descriptors"]) == (book["domain"], book["descriptors"])
    # Envoy waits longer than the server waits for Redis: a Redis fault reaches Envoy as
    # the fault policy's answer, not as a failed call
    m = re.fullmatch(r"(\d+)ms", served["store"]["redis"]["timeout"])
    redis_ms = int(m.group(1))
    for hcm in connection_managers(bootstrap()):
        rl = ratelimit_filter(hcm)
        assert rl.timeout.ToMilliseconds() > redis_ms, (rl.timeout, redis_ms)
        assert rl.rate_limit_service.grpc_service.timeout.ToMilliseconds() > redis_ms


def test_a_broken_configmap_is_refused_by_the_check(tmp_path):
    """The check above can fail: a misspelt field in the server's limits is refused."""
    f, spec, c = next(x for x in floodgate_containers() if x[2]["args"][0] == "server")
    args = c["args"]
    text = mounted_configs(spec, c)[args[args.index("--config") + 1]]
    bad = tmp_path / "limits.yaml"
    bad.write_text(text.replace("requests_per_unit", "requests_per_unt", 1))
    r = wiring.subprocess.run([wiring.BIN, "server", "--config", str(bad), "--check"],
                              capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "requests_per_unt" in r.stderr, r.stderr
