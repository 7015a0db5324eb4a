# Sourced by the scripts that measure a proxy in front of an embedded upstream
# (gateway_instructions.sh, idle_connection_memory.sh): a scratch folder, the processes to stop
# on exit, free ports, and the nginx configuration `sluice-bench gateway-overhead` uses.
# The sourcing script sets `out` (its scratch folder) first.

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_http() {
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$1/" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "nothing answered on port $1" >&2
    exit 1
}

# Starts an embedded node of sluice binary $1 (release) as the upstream on a free port: sets
# `up_port`, and the node's pid is pids[0].
start_upstream() {
    up_port="$(free_port)"
    "$1" serve -E "http.port=$up_port" -E transport.port=0 -E "path.data=$out/upstream" \
        -E node.name=upstream > "$out/upstream.log" 2>&1 &
    pids+=($!)
    wait_http "$up_port"
}

# Writes to $1/nginx.conf one nginx process listening on 127.0.0.1:$2 and proxying to the
# upstream on port $3 with upstream keep-alive, as `sluice-bench gateway-overhead` configures it
# (with room for tens of thousands of connections).
nginx_conf() {
    mkdir -p "$1"
    cat > "$1/nginx.conf" <<CONF
user root root;
worker_processes 1;
master_process off;
worker_rlimit_nofile 65536;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 65536; }
http {
  access_log off;
  client_body_temp_path $1/body; proxy_temp_path $1/proxy; fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi; scgi_temp_path $1/scgi;
  limit_conn_zone \$server_name zone=perserver:1m;
  upstream search { server 127.0.0.1:$3; keepalive 64; }
  server {
    listen 127.0.0.1:$2 backlog=65535;
    limit_conn perserver 60000;
    location / { proxy_pass http://search; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
}
