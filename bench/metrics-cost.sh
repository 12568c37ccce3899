#!/usr/bin/env bash
# What counting for Prometheus costs a proxied request: portcullis's CPU time per request as a
# reverse proxy (wrk -> portcullis -> an nginx file server, a keepalive pool, 1 KB), without
# the metrics (a) and with `status_zone` and a `prometheus_metrics` location scraped once a
# second (b), alternating a and b for a few rounds.
#
# Usage: bench/metrics-cost.sh [ROUNDS] [SECONDS]     (defaults: 3 rounds of 8 s)
#
# Environment: PORTCULLIS (default target/release/portcullis), NGINX (default /usr/sbin/nginx).
# portcullis is pinned to CPU 1, wrk and the file server to CPU 0; utime+stime of portcullis
# is read from /proc before and after the wrk run and divided by the requests wrk completed.
set -euo pipefail

rounds=${1:-3}
seconds=${2:-8}
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
portcullis=${PORTCULLIS:-$repo_root/target/release/portcullis}
nginx=${NGINX:-/usr/sbin/nginx}
work=$(mktemp -d)
trap 'kill $(cat "$work"/up/n.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
readonly UP_PORT=19081 PROXY_PORT=19080

mkdir -p "$work/up/html" "$work/up/logs" "$work/a/logs" "$work/b/logs"
head -c 1024 /dev/zero | tr '\0' x > "$work/up/html/1kb"
cat > "$work/up/n.conf" <<CONF
worker_processes 1; daemon off; pid $work/up/n.pid; error_log $work/up/e.log;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:$UP_PORT; root $work/up/html; } }
CONF
for variant in a b; do
    zone="" metrics=""
    if [[ $variant == b ]]; then
        zone="status_zone front;"
        metrics="location = /metrics { prometheus_metrics; }"
    fi
    cat > "$work/$variant/n.conf" <<CONF
worker_processes 1; daemon off; pid $work/$variant/p.pid; error_log $work/$variant/e.log;
events { worker_connections 1024; }
http {
  access_log off;
  upstream back { server 127.0.0.1:$UP_PORT; keepalive 32; }
  server {
    listen 127.0.0.1:$PROXY_PORT; $zone
    location / { proxy_pass http://back; proxy_http_version 1.1; proxy_set_header Connection ""; }
    $metrics
  }
}
CONF
done

taskset -c 0 "$nginx" -p "$work/up" -c "$work/up/n.conf" &
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() {
    local variant=$1 pid scraper="" t0 t1 out requests
    taskset -c 1 "$portcullis" -p "$work/$variant" -c "$work/$variant/n.conf" &
    pid=$!
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$PROXY_PORT/1kb" && break
        sleep 0.1
    done
    taskset -c 0 wrk -t1 -c50 -d2s "http://127.0.0.1:$PROXY_PORT/1kb" > /dev/null
    if [[ $variant == b ]]; then
        (while true; do curl -s -o /dev/null "http://127.0.0.1:$PROXY_PORT/metrics"; sleep 1; done) &
        scraper=$!
    fi
    t0=$(cpu "$pid")
    out=$(taskset -c 0 wrk -t1 -c50 -d"${seconds}s" "http://127.0.0.1:$PROXY_PORT/1kb")
    t1=$(cpu "$pid")
    [[ -z $scraper ]] || kill "$scraper"
    kill "$pid"
    wait "$pid" 2> /dev/null || true
    requests=$(awk '/requests in/ {print $1}' <<< "$out")
    printf '%s %d requests, %s µs CPU per request\n' "$variant" "$requests" \
        "$(echo "scale=2; ($t1 - $t0) * 1000000 / $ticks / $requests" | bc)"
}

for _ in $(seq "$rounds"); do
    run a
    run b
done
