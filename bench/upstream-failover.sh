#!/usr/bin/env bash
# Requests lost when an upstream dies under load: nginx and portcullis, the same config.
#
# Usage: bench/upstream-failover.sh [options]
#
# The reverse-proxy setup of cpu-per-request.sh's rp-http (least_conn over two upstream
# ports, keepalive 512, proxy_http_version 1.1, wrk -c50 on a 1 KB file), except that each
# upstream port is its own nginx process, so that one can die alone. Halfway through a wrk
# run the second upstream is killed; the run goes on against the survivor. Every request is
# a GET, which proxy_next_upstream's default (error timeout) may send to the other peer: a
# proxy that retries as it should loses none.
#
# Options:
#   --only nginx|portcullis   run one system only
#   --duration TIME           length of the wrk run, in seconds (default 20); the upstream
#                             dies at half of it
#   --signal NAME             how the upstream dies: KILL (default, a crash: connections
#                             reset) or TERM (nginx's fast stop: connections closed)
#   --keep                    keep the work directory (config, logs, wrk output) and print it
#   --no-header               print the table rows only
#   -h, --help                this text
#
# Environment:
#   NGINX        nginx binary (default: nginx on PATH, else /usr/sbin/nginx)
#   PORTCULLIS   portcullis binary (default: ${CARGO_TARGET_DIR:-target}/release/portcullis)
#
# Output: one Markdown table row per system on stdout (requests completed, non-2xx answers,
# wrk's socket errors by kind, 502s in the system's error log); progress goes to stderr.
set -euo pipefail

readonly SUT_CPU=1
readonly LOAD_CPU=0
readonly WRK_THREADS=1
readonly WRK_CONNECTIONS=50
readonly DEFAULT_DURATION=20
# How long a process may take to accept connections, and to exit after QUIT, in 0.1 s steps.
readonly START_TIMEOUT_TENTHS=100
readonly STOP_TIMEOUT_TENTHS=50
# Ports tried when looking for a free one on 127.0.0.1.
readonly PORT_LOW=20000
readonly PORT_SPAN=30000
readonly PORT_ATTEMPTS=50

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$repo_root/bench/lib.sh"

die() {
    printf 'upstream-failover: error: %s\n' "$*" >&2
    exit 1
}

note() {
    printf 'upstream-failover: %s\n' "$*" >&2
}

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# --- arguments -------------------------------------------------------------------------------

only=""
duration=$DEFAULT_DURATION
signal=KILL
keep=false
header=true

while (($# > 0)); do
    case $1 in
    --only)
        (($# >= 2)) || die "--only needs a value: nginx or portcullis"
        only=$2
        shift 2
        ;;
    --only=*)
        only=${1#--only=}
        shift
        ;;
    --duration)
        (($# >= 2)) || die "--duration needs a number of seconds"
        duration=$2
        shift 2
        ;;
    --duration=*)
        duration=${1#--duration=}
        shift
        ;;
    --signal)
        (($# >= 2)) || die "--signal needs KILL or TERM"
        signal=$2
        shift 2
        ;;
    --signal=*)
        signal=${1#--signal=}
        shift
        ;;
    --keep)
        keep=true
        shift
        ;;
    --no-header)
        header=false
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        die "unknown argument $1 (see --help)"
        ;;
    esac
done

case $only in
"") systems=(nginx portcullis) ;;
nginx | portcullis) systems=("$only") ;;
*) die "--only takes nginx or portcullis, not '$only'" ;;
esac
[[ $duration =~ ^[1-9][0-9]*$ ]] || die "--duration takes a number of seconds (got '$duration')"
((duration >= 4)) || die "--duration must be at least 4 seconds, so the run has two halves"
case $signal in
KILL | TERM) ;;
*) die "--signal takes KILL or TERM, not '$signal'" ;;
esac

# --- prerequisites ---------------------------------------------------------------------------

need wrk "install it (apt-get install wrk) or run .ci/run"
need curl "install it (apt-get install curl) or run .ci/run"
need taskset "install util-linux"

nginx_bin=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
portcullis_bin=${PORTCULLIS:-${CARGO_TARGET_DIR:-$repo_root/target}/release/portcullis}
[[ -x $nginx_bin ]] || die "nginx not found at $nginx_bin (the upstreams are nginx); install it or set NGINX"
for system in "${systems[@]}"; do
    if [[ $system == portcullis && ! -x $portcullis_bin ]]; then
        die "portcullis not found at $portcullis_bin; run 'cargo build --release -p portcullis', set PORTCULLIS, or use --only nginx"
    fi
done
for cpu in $SUT_CPU $LOAD_CPU; do
    taskset -c "$cpu" true 2>/dev/null || die "cannot pin to CPU $cpu: this method needs two CPUs"
done

# --- work directory and cleanup --------------------------------------------------------------

work=$(mktemp -d "${TMPDIR:-/tmp}/upstream-failover.XXXXXX")
# nginx's workers drop to an unprivileged user when started as root: they must read the docroot.
chmod 755 "$work"

# Root PIDs of every server this script started (system and upstreams); cleanup ends them.
started=()
# PID of the running wrk, if any; cleanup ends it first.
helpers=()

# Kills the server started as PID and its workers at once with SIGNAL, as a crash would.
kill_server() {
    local pid=$1 sig=$2 p
    for p in $(process_tree "$pid"); do
        kill "-$sig" "$p" 2>/dev/null || true
    done
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local pid
    for pid in "${helpers[@]}"; do
        kill -INT "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    helpers=()
    for pid in "${started[@]}"; do
        stop_system "$pid"
    done
    started=()
    if $keep; then
        note "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- configs ---------------------------------------------------------------------------------

port=$(free_port)
taken_ports+="$port "
upstream_ports=()
for i in 0 1; do
    upstream_ports+=("$(free_port)")
    taken_ports+="${upstream_ports[$i]} "
done

mkdir -p "$work/html" "$work/logs"
dd if=/dev/urandom of="$work/html/1kb" bs=1024 count=1 status=none
chmod 755 "$work/html"
chmod 644 "$work/html/1kb"

http_settings="    default_type application/octet-stream;
    access_log off;

    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;

    keepalive_timeout 65;
    keepalive_requests 1000000000;"

# One file server per port, each its own process.
for i in 0 1; do
    cat >"$work/upstream$i.conf" <<EOF
worker_processes 1;
error_log $work/logs/upstream$i-error.log;
pid $work/logs/upstream$i.pid;

events {
    worker_connections 4096;
}

http {
$http_settings

    server {
        listen 127.0.0.1:${upstream_ports[$i]};
        root $work/html;
    }
}
EOF
done

conf=$work/nginx.conf
cat >"$conf" <<EOF
worker_processes 1;
error_log $work/logs/error.log;
pid $work/logs/server.pid;

events {
    worker_connections 4096;
}

http {
$http_settings

    upstream file_servers {
        least_conn;
        server 127.0.0.1:${upstream_ports[0]};
        server 127.0.0.1:${upstream_ports[1]};
        keepalive 512;
        keepalive_requests 1000000;
    }

    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://file_servers;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF

url="http://127.0.0.1:$port/1kb"

# --- servers ---------------------------------------------------------------------------------

# Waits until URL answers; PID is the process that must stay alive meanwhile.
wait_ready() {
    local pid=$1 what=$2 check_url=$3 i
    for ((i = 0; i < START_TIMEOUT_TENTHS; i++)); do
        kill -0 "$pid" 2>/dev/null || die "$what exited during startup (see $work/logs)"
        curl -s -o /dev/null "$check_url" 2>/dev/null && return
        sleep 0.1
    done
    die "$what did not accept connections at $check_url"
}

# Starts upstream I pinned with wrk; sets `upstream_pid[I]`.
declare -a upstream_pid
start_upstream() {
    local i=$1
    taskset -c "$LOAD_CPU" "$nginx_bin" -p "$work/" -c "$work/upstream$i.conf" \
        -e "$work/logs/upstream$i-error.log" -g 'daemon off;' </dev/null \
        >"$work/logs/upstream$i.out" 2>&1 &
    upstream_pid[i]=$!
    started+=("${upstream_pid[$i]}")
    wait_ready "${upstream_pid[$i]}" "upstream $i" "http://127.0.0.1:${upstream_ports[$i]}/1kb"
}

# Starts the system under test pinned to SUT_CPU; sets `sut_pid`.
start_system() {
    local system=$1 bin
    case $system in
    nginx) bin=$nginx_bin ;;
    portcullis) bin=$portcullis_bin ;;
    esac
    : >"$work/logs/error.log"
    taskset -c "$SUT_CPU" "$bin" -p "$work/" -c "$conf" -e "$work/logs/error.log" \
        -g 'daemon off;' </dev/null >"$work/logs/$system.out" 2>&1 &
    sut_pid=$!
    started+=("$sut_pid")
    wait_ready "$sut_pid" "$system" "$url"
}

# Prints the number after LABEL on the line of wrk's output that starts with LINE (0 when
# there is no such line: wrk prints its socket errors and non-2xx count only when nonzero).
wrk_field() {
    local out=$1 line=$2 label=$3
    awk -v line="$line" -v label="$label" '
        index($0, line) == 1 && index($0, label) {
            rest = substr($0, index($0, label) + length(label))
            sub(/[ ,].*/, "", rest)
            print rest
            found = 1
        }
        END { if (!found) print 0 }' "$out" | head -1
}

# One system: both upstreams up, wrk for `duration`, upstream 1 killed at half time.
# Prints the table row.
run_system() {
    local system=$1
    local out=$work/logs/$system.wrk wrk_pid requests non2xx errors gateway
    start_upstream 0
    start_upstream 1
    note "$system: starting ($url)"
    start_system "$system"
    note "$system: wrk for ${duration}s; upstream 1 (port ${upstream_ports[1]}) gets SIG$signal at $((duration / 2))s"
    taskset -c "$LOAD_CPU" wrk -t"$WRK_THREADS" -c"$WRK_CONNECTIONS" -d"${duration}s" \
        "$url" </dev/null >"$out" 2>&1 &
    wrk_pid=$!
    helpers+=("$wrk_pid")
    sleep $((duration / 2))
    kill_server "${upstream_pid[1]}" "$signal"
    wait "$wrk_pid" || {
        cat "$out" >&2
        die "wrk failed"
    }
    helpers=()

    requests=$(awk '$2 == "requests" && $3 == "in" { print $1 }' "$out")
    [[ $requests =~ ^[0-9]+$ ]] || {
        cat "$out" >&2
        die "no completed requests in wrk's output"
    }
    non2xx=$(wrk_field "$out" "  Non-2xx or 3xx responses:" "responses: ")
    local kind
    errors=""
    for kind in connect read write timeout; do
        errors+="${errors:+/}$(wrk_field "$out" "  Socket errors:" "$kind ")"
    done
    gateway=$(grep -c 'while \(connecting to\|reading\|sending\).*upstream' "$work/logs/error.log" || true)
    note "$system: $requests requests, $non2xx non-2xx, socket errors connect/read/write/timeout $errors"

    local pid
    for pid in "${started[@]}"; do
        stop_system "$pid"
    done
    started=()
    printf '| upstream-failover (SIG%s) | %s | %s | %s | %s | %s |\n' \
        "$signal" "$system" "$requests" "$non2xx" "$errors" "$gateway"
}

if $header; then
    echo "| scenario | system | requests | non-2xx | socket errors (connect/read/write/timeout) | upstream errors logged |"
    echo "|---|---|---:|---:|---:|---:|"
fi
for system in "${systems[@]}"; do
    run_system "$system"
done
