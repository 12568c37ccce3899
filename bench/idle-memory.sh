#!/usr/bin/env bash
# Resident memory of nginx and portcullis, one worker each, idle and with N idle keepalive
# connections (one request each, then held open), and after the clients close.
#
# Usage: bench/idle-memory.sh [PORTCULLIS_BINARY] [N]
#   PORTCULLIS_BINARY  default target/release/portcullis
#   N                  connections, default 10000 (client and server each need N open files)
#
# Prints, per system, the resident memory (KB, master and worker processes summed) before,
# while the connections are held, and after they closed.
set -euo pipefail
binary=${1:-target/release/portcullis}
n=${2:-10000}
nginx=${NGINX:-/usr/sbin/nginx}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$dir/m.conf" <<CONF
worker_processes 1; daemon off; pid $dir/m.pid; error_log $dir/error.log warn;
worker_rlimit_nofile $((n + 1000));
events { worker_connections $((n + 500)); }
http { access_log off; keepalive_timeout 300s; keepalive_requests 1000;
 server { listen 127.0.0.1:$port; location / { return 200 "hello"; } } }
CONF
cat > "$dir/hold.py" <<'PY'
import resource, socket, sys
n, port = int(sys.argv[1]), int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    socks.append(s)
for s in socks:
    d = b""
    while b"hello" not in d:
        d += s.recv(4096)
print("held", flush=True)
sys.stdin.readline()
PY
rss() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }
for b in "$nginx" "$binary"; do
    "$b" -p "$dir" -c "$dir/m.conf" > "$dir/out.log" 2>&1 &
    for _ in $(seq 50); do [ -s "$dir/m.pid" ] && break; sleep 0.1; done
    sleep 0.5
    pid=$(cat "$dir/m.pid")
    pids="$pid $(pgrep -P "$pid" || true)"
    sum() { t=0; for p in $pids; do t=$((t + $(rss "$p"))); done; echo $t; }
    before=$(sum)
    rm -f "$dir/f" "$dir/h.out"; mkfifo "$dir/f"
    python3 "$dir/hold.py" "$n" "$port" < "$dir/f" > "$dir/h.out" 2>&1 &
    hp=$!
    exec 3>"$dir/f"
    for _ in $(seq 240); do grep -q held "$dir/h.out" && break; sleep 0.5; done
    during=$(sum)
    exec 3>&-
    wait $hp
    sleep 1
    after=$(sum)
    printf '%-40s before %6d KB  with %d connections %6d KB (%+d, %.2f KB each)  after %6d KB\n' \
        "$(basename "$b")" "$before" "$n" "$during" $((during - before)) \
        "$(echo "($during - $before) / $n" | bc -l)" "$after"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -f "$dir/m.pid"
done
