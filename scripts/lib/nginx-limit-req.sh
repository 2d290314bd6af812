# Sourced by the benchmark scripts: nginx with limit_req in front of a backend, configured
# alike in every comparison (limit_req_status 429, keepalive upstream, X-Forwarded-For).
#
#   nginx_limit_req_conf DIR LISTEN BACKEND RATE_PER_S BURST WORKERS
#
# writes DIR/nginx.conf for `nginx -p DIR -c DIR/nginx.conf` (foreground, own prefix and
# temp paths: the system service is never touched). WORKERS=1 runs one process
# (master_process off), as callgrind needs.
nginx_limit_req_conf() {
  local dir=$1 listen=$2 backend=$3 rate=$4 burst=$5 workers=$6 master=""
  [ "$workers" = 1 ] && master="master_process off;"
  mkdir -p "$dir/logs"
  cat >"$dir/nginx.conf" <<NGX
worker_processes $workers;
$master
daemon off;
pid $dir/nginx.pid;
error_log $dir/logs/error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  # keep connections open as floodgate does (nginx closes after 1000 requests by default)
  keepalive_requests 1000000;
  client_body_temp_path $dir/body; proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fcgi; uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=${rate}r/s;
  limit_req_status 429;
  upstream backend { server $backend; keepalive 128; keepalive_requests 1000000; }
  server {
    listen $listen;
    location / {
      limit_req zone=perip burst=$burst nodelay;
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
NGX
}

# Wait until HOST:PORT accepts connections (10 s at most).
wait_port() {
  for _ in $(seq 200); do (echo >/dev/tcp/${1%:*}/${1#*:}) 2>/dev/null && return 0; sleep 0.05; done
  echo "no listener on $1" >&2
  exit 1
}
