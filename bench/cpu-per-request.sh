#!/usr/bin/env bash
# CPU time per request of nginx and portcullis serving the same config, measured in one run.
#
# Usage: bench/cpu-per-request.sh [options] SCENARIO
#
# Scenarios:
#   static-1k         keepalive connections, GET of a 1 KB file
#   static-0k         keepalive connections, GET of an empty file
#   static-1k-close   one request per connection (Connection: close), 1 KB file
#   static-1k-https   as static-1k over TLS (ECDSA P-256, ECDHE-ECDSA-AES256-GCM-SHA384)
#   tps-ecdsa         one request per connection over TLS, ECDSA P-256 certificate: SSL TPS
#   tps-rsa           one request per connection over TLS, RSA-2048 certificate,
#                     ECDHE-RSA-AES256-GCM-SHA384
#   rp-http           reverse proxy, the seeds' setup: two upstream ports on an nginx file
#                     server (pinned with wrk), least_conn, keepalive pool, 1 KB file
#   rp-https          as rp-http with HTTPS in and HTTPS to the upstreams (ECDSA P-256,
#                     ECDHE-ECDSA-AES256-GCM-SHA384), as seed 000's Appendix D
#
# Options:
#   --only nginx|portcullis   measure one system only (the ratio column then reads "-")
#   --syscalls                also count syscalls per request with strace, in a separate,
#                             shorter wrk run (strace slows the system down, so the CPU
#                             figures never come from that run)
#   --duration TIME           length of the measured wrk run (wrk syntax, default 10s)
#   --tls12                   offer TLS 1.2 only (the seeds' cipher names are TLS 1.2 suites);
#                             the default offers TLS 1.2 and 1.3, and clients choose 1.3
#   --deferred                `listen ... deferred` on the system under test (TCP_DEFER_ACCEPT:
#                             a connection is accepted once its request came)
#   --rounds N                alternate the systems N times (default 3); medians are reported,
#                             the ratio is the median of the per-round ratios
#   --keep                    keep the work directory (config, logs, wrk output) and print it
#   --no-header               print the table rows only, to append to an existing table
#   -h, --help                this text
#
# Environment:
#   NGINX        nginx binary (default: nginx on PATH, else /usr/sbin/nginx)
#   PORTCULLIS   portcullis binary (default: ${CARGO_TARGET_DIR:-target}/release/portcullis)
#
# Method: both systems read the same nginx.conf (one worker, access_log off, the seeds' http
# settings). Each is pinned to CPU 1 and wrk to CPU 0. After a warm-up, utime+stime of every
# process of the system under test (threads and child processes included) is read from
# /proc/PID/stat before and after a fixed-length wrk run and divided by the requests wrk
# completed. Output is one Markdown table row per system on stdout; progress goes to stderr.
set -euo pipefail

readonly SUT_CPU=1
readonly LOAD_CPU=0
readonly WRK_THREADS=1
readonly WRK_CONNECTIONS=50
readonly WARMUP_DURATION=2s
readonly DEFAULT_DURATION=10s
readonly SYSCALL_DURATION=3s
# How long a system may take to accept connections, and to exit after QUIT, in 0.1 s steps.
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
    printf 'cpu-per-request: error: %s\n' "$*" >&2
    exit 1
}

note() {
    printf 'cpu-per-request: %s\n' "$*" >&2
}

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# --- arguments -------------------------------------------------------------------------------

only=""
syscalls=false
duration=$DEFAULT_DURATION
keep=false
header=true
scenario=""
rounds=3
tls_protocols="TLSv1.2 TLSv1.3"
listen_deferred=""

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
    --syscalls)
        syscalls=true
        shift
        ;;
    --duration)
        (($# >= 2)) || die "--duration needs a value, e.g. 10s"
        duration=$2
        shift 2
        ;;
    --duration=*)
        duration=${1#--duration=}
        shift
        ;;
    --tls12)
        tls_protocols="TLSv1.2"
        shift
        ;;
    --deferred)
        listen_deferred=" deferred"
        shift
        ;;
    --keep)
        keep=true
        shift
        ;;
    --rounds)
        (($# >= 2)) || die "--rounds needs a number"
        rounds=$2
        shift 2
        ;;
    --no-header)
        header=false
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    -*)
        die "unknown option $1 (see --help)"
        ;;
    *)
        [[ -z $scenario ]] || die "one scenario at a time (got $scenario and $1)"
        scenario=$1
        shift
        ;;
    esac
done

[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds takes a positive number (got '$rounds')"
[[ -n $scenario ]] || die "no scenario given (see --help)"

case $only in
"") systems=(nginx portcullis) ;;
nginx | portcullis) systems=("$only") ;;
*) die "--only takes nginx or portcullis, not '$only'" ;;
esac

[[ $duration =~ ^[0-9]+[smh]?$ ]] || die "--duration must look like 10s, 1m or 30 (got '$duration')"

# Each scenario is a file to fetch, extra wrk arguments, the certificate of the TLS listener
# (none for plain HTTP) and the upstream's protocol (none: the system serves the file itself).
readonly SCENARIOS="static-1k, static-0k, static-1k-close, static-1k-https, tps-ecdsa, tps-rsa, rp-http or rp-https"
wrk_extra=()
path=/1kb
tls=none
upstream=none
case $scenario in
static-1k) ;;
static-0k) path=/0kb ;;
static-1k-close) wrk_extra=(-H "Connection: close") ;;
static-1k-https) tls=ecdsa ;;
tps-ecdsa)
    tls=ecdsa
    wrk_extra=(-H "Connection: close")
    ;;
tps-rsa)
    tls=rsa
    wrk_extra=(-H "Connection: close")
    ;;
rp-http) upstream=http ;;
rp-https)
    tls=ecdsa
    upstream=https
    ;;
*) die "unknown scenario '$scenario' ($SCENARIOS)" ;;
esac

# --- prerequisites ---------------------------------------------------------------------------

need wrk "install it (apt-get install wrk) or run .ci/run"
need curl "install it (apt-get install curl) or run .ci/run"
need taskset "install util-linux"
if [[ $tls != none || $upstream == https ]]; then
    need openssl "install it (apt-get install openssl) or run .ci/run"
fi
if $syscalls; then
    need strace "install it (apt-get install strace) or drop --syscalls"
fi

nginx_bin=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
portcullis_bin=${PORTCULLIS:-${CARGO_TARGET_DIR:-$repo_root/target}/release/portcullis}
for system in "${systems[@]}"; do
    case $system in
    nginx) [[ -x $nginx_bin ]] || die "nginx not found at $nginx_bin; install it (apt-get install nginx), set NGINX, or use --only portcullis" ;;
    portcullis) [[ -x $portcullis_bin ]] || die "portcullis not found at $portcullis_bin; run 'cargo build --release -p portcullis', set PORTCULLIS, or use --only nginx" ;;
    esac
done

for cpu in $SUT_CPU $LOAD_CPU; do
    taskset -c "$cpu" true 2>/dev/null || die "cannot pin to CPU $cpu: this method needs two CPUs"
done

clk_tck=$(getconf CLK_TCK)

# --- work directory and cleanup --------------------------------------------------------------

work=$(mktemp -d "${TMPDIR:-/tmp}/cpu-per-request.XXXXXX")
# nginx's workers drop to an unprivileged user when started as root: they must read the docroot.
chmod 755 "$work"

# Root PIDs of the systems this script started; cleanup ends them and their descendants.
started=()
# PIDs of the running wrk or strace, if any; cleanup ends them first.
helpers=()

# Prints utime+stime+cutime+cstime, in clock ticks, summed over PID and its descendants.
# /proc/PID/stat of a process covers all of its threads.
cpu_ticks() {
    local total=0 pid rest fields
    for pid in $(process_tree "$1"); do
        { read -r rest <"/proc/$pid/stat"; } 2>/dev/null || continue
        rest=${rest##*) }
        read -ra fields <<<"$rest"
        # Fields after the command name start at stat field 3: utime is field 14, so index 11.
        total=$((total + fields[11] + fields[12] + fields[13] + fields[14]))
    done
    echo "$total"
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
    if [[ -n ${upstream_pid:-} ]]; then
        stop_system "$upstream_pid"
        upstream_pid=""
    fi
    if $keep; then
        note "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the config both systems read ------------------------------------------------------------

port=$(free_port)
taken_ports+="$port "

mkdir -p "$work/html" "$work/logs" "$work/ssl"
# The files are made as the seeds make theirs.
dd if=/dev/urandom of="$work/html/1kb" bs=1024 count=1 status=none
dd if=/dev/urandom of="$work/html/0kb" bs=1024 count=0 status=none
chmod 755 "$work/html" "$work/ssl"
chmod 644 "$work/html/1kb" "$work/html/0kb"
expected_size=$(stat -c %s "$work/html${path}")

# Self-signed certificates as the seeds' (ECDSA P-256 for 000/001, RSA-2048 for 003/004).
make_cert() {
    local kind=$1 newkey
    case $kind in
    ecdsa) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1) ;;
    rsa) newkey=(-newkey rsa:2048) ;;
    esac
    openssl req -x509 "${newkey[@]}" -nodes -days 30 -subj /CN=localhost \
        -keyout "$work/ssl/$kind.key" -out "$work/ssl/$kind.crt" 2>/dev/null ||
        die "openssl could not make the $kind certificate"
    chmod 644 "$work/ssl/$kind.key" "$work/ssl/$kind.crt"
}

# The ssl_* lines of a server block for a certificate kind.
ssl_lines() {
    local cipher
    case $1 in
    ecdsa) cipher=ECDHE-ECDSA-AES256-GCM-SHA384 ;;
    rsa) cipher=ECDHE-RSA-AES256-GCM-SHA384 ;;
    esac
    printf '        ssl_certificate %s;\n        ssl_certificate_key %s;\n        ssl_ciphers %s;\n        ssl_protocols %s;\n' \
        "$work/ssl/$1.crt" "$work/ssl/$1.key" "$cipher" "$tls_protocols"
}

listen_ssl=""
scheme=http
if [[ $tls != none ]]; then
    make_cert "$tls"
    listen_ssl=" ssl"
    scheme=https
fi
if [[ $upstream == https && ! -f $work/ssl/ecdsa.crt ]]; then
    make_cert ecdsa
fi

# The seeds' http settings, shared by the system under test and the upstream file server.
http_settings="    default_type application/octet-stream;
    access_log off;

    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;

    keepalive_timeout 65;
    keepalive_requests 1000000000;"

server_ssl=""
[[ $tls != none ]] && server_ssl=$(ssl_lines "$tls")

if [[ $upstream == none ]]; then
    content="        root $work/html;

        location / {
        }"
else
    upstream_ports=("$(free_port)")
    taken_ports+="${upstream_ports[0]} "
    upstream_ports+=("$(free_port)")
    upstream_listen_ssl=""
    upstream_server_ssl=""
    if [[ $upstream == https ]]; then
        upstream_listen_ssl=" ssl"
        upstream_server_ssl=$(ssl_lines ecdsa)
    fi
    # The seeds' file servers: one nginx, two ports, GET only.
    cat >"$work/upstream.conf" <<EOF
worker_processes 1;
error_log $work/logs/upstream-error.log;
pid $work/logs/upstream.pid;

events {
    worker_connections 4096;
}

http {
$http_settings

    server {
        listen 127.0.0.1:${upstream_ports[0]}$upstream_listen_ssl;
        listen 127.0.0.1:${upstream_ports[1]}$upstream_listen_ssl;
$upstream_server_ssl
        root $work/html;

        location / {
            limit_except GET {
                deny all;
            }
        }
    }
}
EOF
    content="        location / {
            proxy_pass $upstream://file_servers;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }"
fi

upstream_block=""
if [[ $upstream != none ]]; then
    upstream_block="
    upstream file_servers {
        least_conn;
        server 127.0.0.1:${upstream_ports[0]};
        server 127.0.0.1:${upstream_ports[1]};
        keepalive 512;
        keepalive_requests 1000000;
    }"
fi

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
$upstream_block

    server {
        listen 127.0.0.1:$port$listen_ssl$listen_deferred;
$server_ssl
$content
    }
}
EOF

url="$scheme://127.0.0.1:$port$path"

# --- one system ------------------------------------------------------------------------------

# Starts the system pinned to SUT_CPU and waits until it serves the scenario's file.
# Sets `sut_pid`.
start_system() {
    local system=$1 bin
    case $system in
    nginx) bin=$nginx_bin ;;
    portcullis) bin=$portcullis_bin ;;
    esac
    # Both take nginx's flags; `daemon off` keeps the started PID the root of the system.
    taskset -c "$SUT_CPU" "$bin" -p "$work/" -c "$conf" -e "$work/logs/error.log" \
        -g 'daemon off;' </dev/null >"$work/logs/$system.out" 2>&1 &
    sut_pid=$!
    started+=("$sut_pid")

    local i status="" ready=false
    for ((i = 0; i < START_TIMEOUT_TENTHS; i++)); do
        if ! kill -0 "$sut_pid" 2>/dev/null; then
            cat "$work/logs/$system.out" "$work/logs/error.log" >&2 2>/dev/null || true
            die "$system exited during startup (output above)"
        fi
        if status=$(curl -sk -o /dev/null -w '%{http_code} %{size_download}' "$url" 2>/dev/null); then
            ready=true
            break
        fi
        sleep 0.1
    done
    $ready || die "$system did not accept connections on 127.0.0.1:$port"
    [[ $status == "200 $expected_size" ]] ||
        die "$system answered $url with '$status' (status, bytes); expected '200 $expected_size'"
}

# Runs wrk pinned to LOAD_CPU for DURATION; output to FILE. wrk runs in the background so
# that a signal to this script is handled at once rather than when wrk finishes.
run_wrk() {
    local duration=$1 out=$2
    taskset -c "$LOAD_CPU" wrk -t"$WRK_THREADS" -c"$WRK_CONNECTIONS" -d"$duration" --latency \
        "${wrk_extra[@]}" "$url" </dev/null >"$out" 2>&1 &
    helpers+=($!)
    wait $! || {
        cat "$out" >&2
        die "wrk failed"
    }
    helpers=()
}

# Prints the number of requests wrk completed, after checking every answer was a success.
wrk_requests() {
    local out=$1 requests bad
    requests=$(awk '$2 == "requests" && $3 == "in" { print $1 }' "$out")
    [[ $requests =~ ^[0-9]+$ && $requests -gt 0 ]] || {
        cat "$out" >&2
        die "no completed requests in wrk's output"
    }
    bad=$(awk -F: '/Non-2xx or 3xx responses/ { gsub(/ /, "", $2); print $2 }' "$out")
    if [[ -n $bad ]]; then
        cat "$out" >&2
        die "$bad responses were not 2xx/3xx: the figures would not be comparable"
    fi
    echo "$requests"
}

# Counts syscalls of the whole system under test during a separate, shorter wrk run.
# Sets `r_syscalls` to syscalls per request.
count_syscalls() {
    local system=$1 strace_pid attach=() pid calls requests
    for pid in $(process_tree "$sut_pid"); do
        attach+=(-p "$pid")
    done
    strace -c -f -o "$work/logs/$system.strace" "${attach[@]}" 2>"$work/logs/$system.strace.err" &
    strace_pid=$!
    helpers+=("$strace_pid")
    # strace prints nothing when attached; give it time to reach every thread.
    sleep 1
    run_wrk "$SYSCALL_DURATION" "$work/logs/$system.wrk-syscalls"
    kill -INT "$strace_pid" 2>/dev/null || true
    wait "$strace_pid" || true
    helpers=()
    calls=$(awk '$NF == "total" { print $4 }' "$work/logs/$system.strace" 2>/dev/null)
    [[ $calls =~ ^[0-9]+$ ]] || {
        cat "$work/logs/$system.strace.err" >&2
        die "strace produced no syscall summary for $system (is ptrace allowed here?)"
    }
    requests=$(wrk_requests "$work/logs/$system.wrk-syscalls")
    r_syscalls=$(awk -v c="$calls" -v r="$requests" 'BEGIN { printf "%.1f", c / r }')
}

# Measures one system. Sets `r_requests`, `r_rps`, `r_cpu_us` and `r_syscalls`.
measure() {
    local system=$1 before after ticks out
    note "$system: starting ($url)"
    start_system "$system"

    note "$system: warm-up $WARMUP_DURATION"
    run_wrk "$WARMUP_DURATION" "$work/logs/$system.wrk-warmup"

    note "$system: measuring $duration"
    out=$work/logs/$system.wrk
    before=$(cpu_ticks "$sut_pid")
    run_wrk "$duration" "$out"
    after=$(cpu_ticks "$sut_pid")
    ticks=$((after - before))
    ((ticks > 0)) || die "$system used no measurable CPU ($before -> $after ticks): did a process exit?"

    r_requests=$(wrk_requests "$out")
    r_rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$out")
    r_cpu_us=$(awk -v t="$ticks" -v hz="$clk_tck" -v r="$r_requests" \
        'BEGIN { printf "%.2f", t / hz * 1e6 / r }')
    if grep -q 'Socket errors' "$out"; then
        note "$system: wrk reported $(grep 'Socket errors' "$out" | sed 's/^ *//')"
    fi
    note "$system: $r_requests requests, $ticks ticks at $clk_tck Hz"

    r_syscalls="-"
    if $syscalls; then
        note "$system: counting syscalls over $SYSCALL_DURATION"
        count_syscalls "$system"
    fi

    # Systems run one after the other, so the one just measured is the only one started.
    stop_system "$sut_pid"
    started=()
}

# The upstream file server runs for the whole script, pinned with wrk: the seeds' rig puts
# upstreams on machines of their own, and here they must not take the measured CPU.
upstream_pid=""
start_upstream() {
    local i up_url="$upstream://127.0.0.1:${upstream_ports[0]}$path"
    note "upstream file server: nginx on ports ${upstream_ports[*]}"
    taskset -c "$LOAD_CPU" "$nginx_bin" -p "$work/" -c "$work/upstream.conf" \
        -e "$work/logs/upstream-error.log" -g 'daemon off;' </dev/null >"$work/logs/upstream.out" 2>&1 &
    upstream_pid=$!
    for ((i = 0; i < START_TIMEOUT_TENTHS; i++)); do
        kill -0 "$upstream_pid" 2>/dev/null || {
            cat "$work/logs/upstream.out" "$work/logs/upstream-error.log" >&2 2>/dev/null || true
            die "the upstream nginx exited during startup (output above)"
        }
        curl -sk -o /dev/null "$up_url" 2>/dev/null && return
        sleep 0.1
    done
    die "the upstream nginx did not accept connections on 127.0.0.1:${upstream_ports[0]}"
}
if [[ $upstream != none ]]; then
    [[ -x $nginx_bin ]] || die "the upstream file server is nginx, not found at $nginx_bin"
    start_upstream
fi

# --- run and report --------------------------------------------------------------------------

# Rounds alternate the systems, so a slow spell of the machine (it may be shared) falls on
# both alike; each system's figures are the median over the rounds, and so is the ratio, taken
# within each round.
median() {
    tr -s ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A row_requests row_rps row_cpu row_syscalls all_cpu all_requests all_rps round_cpu
ratios=""
for ((round = 1; round <= rounds; round++)); do
    ((rounds == 1)) || note "round $round of $rounds"
    for system in "${systems[@]}"; do
        measure "$system"
        all_requests[$system]="${all_requests[$system]:-} $r_requests"
        all_rps[$system]="${all_rps[$system]:-} $r_rps"
        all_cpu[$system]="${all_cpu[$system]:-} $r_cpu_us"
        [[ $r_syscalls == - ]] || row_syscalls[$system]=$r_syscalls
        round_cpu[$system]=$r_cpu_us
    done
    if [[ -n ${round_cpu[nginx]:-} && -n ${round_cpu[portcullis]:-} ]]; then
        ratios="$ratios $(awk -v a="${round_cpu[portcullis]}" -v b="${round_cpu[nginx]}" 'BEGIN { printf "%.3f", a / b }')"
    fi
    # Only the first round counts syscalls: strace slows the run and the count barely varies.
    syscalls=false
done
for system in "${systems[@]}"; do
    row_requests[$system]=$(echo "${all_requests[$system]}" | median)
    row_rps[$system]=$(echo "${all_rps[$system]}" | median)
    row_cpu[$system]=$(echo "${all_cpu[$system]}" | median)
    note "$system: CPU µs/request per round:${all_cpu[$system]}"
done
[[ -z $ratios ]] || note "portcullis/nginx per round:$ratios"

if $header; then
    echo "| scenario | system | requests | req/s | CPU µs/request | req/s per core | syscalls/request | CPU/request vs nginx |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
fi
for system in "${systems[@]}"; do
    per_core=$(awk -v us="${row_cpu[$system]}" 'BEGIN { printf "%.0f", 1e6 / us }')
    ratio="-"
    if [[ $system == nginx && -n $ratios ]]; then
        ratio="1.00"
    elif [[ $system == portcullis && -n $ratios ]]; then
        ratio=$(echo "$ratios" | median | awk '{ printf "%.2f", $1 }')
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$scenario" "$system" \
        "${row_requests[$system]}" "${row_rps[$system]}" "${row_cpu[$system]}" "$per_core" \
        "${row_syscalls[$system]:--}" "$ratio"
done
