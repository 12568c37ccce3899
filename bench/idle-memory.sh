#!/usr/bin/env bash
# Resident memory of nginx and portcullis, one worker each, before, while N connections are
# held, and after the clients close.
#
# Usage: bench/idle-memory.sh [PORTCULLIS_BINARY] [N] [idle|proxy]
#   PORTCULLIS_BINARY  default target/release/portcullis
#   N                  connections, default 10000 (idle) or 9000 (proxy: it needs 2N + 1000
#                      open files, and 20,000 is a common hard limit)
#   idle               (default) N idle keepalive connections: one request each, answered,
#                      then held open
#   proxy              N requests in flight through the proxy: each client sends one request,
#                      which the server proxies to an upstream that reads it and does not
#                      answer; measured once the upstream holds all N, then answered
#
# Prints, per system, the resident memory (KB, master and worker processes summed) before,
# while the connections are held (idle: once every answer is in, and again 4 s later), and
# after they closed.
set -euo pipefail
binary=${1:-target/release/portcullis}
mode=${3:-idle}
if [ "$mode" = proxy ]; then n=${2:-9000}; else n=${2:-10000}; fi
nginx=${NGINX:-/usr/sbin/nginx}
case $mode in idle | proxy) ;; *) echo "idle-memory.sh: mode is idle or proxy, not $mode" >&2; exit 2 ;; esac
dir=$(mktemp -d)
# On any exit: the servers and helpers this script started stop, and the directory goes
# (KEEP=1 keeps it).
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
read -r port upstream_port < <(python3 -c '
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
# A proxying server holds two sockets per request in flight. nginx closes waiting connections
# once fewer than a sixteenth of its worker_connections are free, so it gets more of those.
files=$((2 * n + 1000))
connections=$((files + files / 8))
if [ "$mode" = proxy ]; then
    location="proxy_pass http://127.0.0.1:$upstream_port; proxy_read_timeout 300s;"
else
    location='return 200 "hello";'
fi
cat > "$dir/m.conf" <<CONF
worker_processes 1; daemon off; pid $dir/m.pid; error_log $dir/error.log warn;
worker_rlimit_nofile $files;
events { worker_connections $connections; }
http { access_log off; keepalive_timeout 300s; keepalive_requests 1000;
 server { listen 127.0.0.1:$port; location / { $location } } }
CONF
# The clients: N connections, one request each; "sent" once all are written, then (after a
# line on stdin) "held" once every answer is in, then (after another line) they close.
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
print("sent", flush=True)
sys.stdin.readline()
for s in socks:
    d = b""
    while b"hello" not in d:
        d += s.recv(4096)
print("held", flush=True)
sys.stdin.readline()
PY
# The upstream of proxy mode: reads every request, says "received N" once it has all, and
# answers them all after a line on stdin.
cat > "$dir/upstream.py" <<'PY'
import resource, selectors, socket, sys, threading
n, port = int(sys.argv[1]), int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
listener = socket.create_server(("127.0.0.1", port), backlog=4096)
print("listening", flush=True)
sel = selectors.DefaultSelector()
sel.register(listener, selectors.EVENT_READ)
heads, done = {}, []
while len(done) < n:
    for key, _ in sel.select():
        if key.fileobj is listener:
            c, _ = listener.accept()
            heads[c] = b""
            sel.register(c, selectors.EVENT_READ)
            continue
        c = key.fileobj
        data = c.recv(4096)
        heads[c] += data
        if not data or b"\r\n\r\n" in heads[c]:
            sel.unregister(c)
            done.append(c)
print("received", len(done), flush=True)
sys.stdin.readline()
for c in done:
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
sys.stdin.readline()
PY
rss() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }
# Waits up to two minutes for `word` in file `out`.
wait_for() { for _ in $(seq 240); do grep -q "$1" "$2" && return; sleep 0.5; done; echo "no $1 in $2" >&2; exit 1; }
for b in "$nginx" "$binary"; do
    if [ "$mode" = proxy ]; then
        rm -f "$dir/uf" "$dir/u.out"; mkfifo "$dir/uf"
        python3 "$dir/upstream.py" "$n" "$upstream_port" < "$dir/uf" > "$dir/u.out" 2>&1 &
        up=$!
        exec 4>"$dir/uf"
        wait_for listening "$dir/u.out"
    fi
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
    wait_for sent "$dir/h.out"
    if [ "$mode" = proxy ]; then
        wait_for received "$dir/u.out"
        during=$(sum)
        echo >&4
        echo >&3
        wait_for held "$dir/h.out"
    else
        echo >&3
        wait_for held "$dir/h.out"
        during=$(sum)
        # portcullis parks a connection that has waited one to two seconds, and gives the
        # memory back at the tick after (BENCHMARKS.md, "Memory per idle keepalive
        # connection"): measured again once all have.
        sleep 4
        settled=$(sum)
    fi
    exec 3>&-
    wait $hp
    sleep 1
    after=$(sum)
    what="$n idle connections"
    [ "$mode" = proxy ] && what="$n requests in flight"
    printf '%-12s before %6d KB  with %s %7d KB (%+d, %.2f KB each)' \
        "$(basename "$b")" "$before" "$what" "$during" $((during - before)) \
        "$(echo "($during - $before) / $n" | bc -l)"
    if [ "$mode" = idle ]; then
        printf '  4 s later %7d KB (%+d, %.2f KB each)' "$settled" $((settled - before)) \
            "$(echo "($settled - $before) / $n" | bc -l)"
    fi
    printf '  after %6d KB\n' "$after"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    if [ "$mode" = proxy ]; then
        exec 4>&-
        wait $up || true
    fi
    rm -f "$dir/m.pid"
done
