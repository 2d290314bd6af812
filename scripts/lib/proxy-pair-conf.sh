# Sourced by the proxy benchmark scripts: floodgate proxy and HAProxy in front of two
# backend servers balanced round robin, configured alike in every comparison (one
# per-client limit of RATE/s with BURST; nginx's is scripts/lib/nginx-limit-req.sh).
#
#   floodgate_pair_conf FILE LISTEN BACKEND1 BACKEND2 RATE_PER_S BURST
#       writes a floodgate proxy config: group "pair", a leaky-queue policy keyed by
#       client IP (nodelay), one route "/" to the group
#   haproxy_pair_conf FILE BIND BACKEND1 BACKEND2 RATE_PER_S BURST THREADS
#       writes an HAProxy config: a stick table of request rates over 1 s, a 429 past
#       RATE + BURST in the last second (the nearest a stick table comes to limit_req's
#       burst), `http-reuse always`; BIND may carry options (e.g. "ADDR ssl crt FILE")
floodgate_pair_conf() {
  local file=$1 listen=$2 b1=$3 b2=$4 rate=$5 burst=$6
  cat >"$file" <<TOML
listen = "$listen"

[upstreams.pair]
servers = ["http://$b1", "http://$b2"]
balance = "round-robin"

[[policy]]
name = "per-ip"
algorithm = "leaky-queue"
rate = "$rate/s"
burst = $burst
nodelay = true
key = "ip"

[[route]]
prefix = "/"
policies = ["per-ip"]
upstream = "pair"
TOML
}

haproxy_pair_conf() {
  local file=$1 bind=$2 b1=$3 b2=$4 rate=$5 burst=$6 threads=$7
  cat >"$file" <<HAP
global
  nbthread $threads
  maxconn 8192
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend fe
  bind $bind
  stick-table type ip size 100k expire 10s store http_req_rate(1s)
  http-request track-sc0 src
  http-request deny deny_status 429 if { sc_http_req_rate(0) gt $((rate + burst)) }
  default_backend be
backend be
  balance roundrobin
  server s1 $b1
  server s2 $b2
HAP
}
