#!/usr/bin/env bash
# User-space instructions per request of a portcullis binary, counted by callgrind: a measure
# that the run-to-run spread of CPU time does not touch, for comparing two builds.
#
# Usage: bench/instructions.sh [--seconds N] BINARY DIR URL [WRK_ARG...]
#   BINARY     the portcullis binary
#   DIR        a work directory holding nginx.conf, and upstream.conf when the scenario has
#              upstream servers: `portcullis-bench run --out OUT` leaves one per scenario in
#              OUT/work/SCENARIO, `bench/cpu-per-request.sh --keep` one per run
#   URL        what wrk asks for (the scenario's URL on the port nginx.conf listens on)
#   WRK_ARG    more wrk arguments, e.g. `-s DIR/token.lua` for the JWT scenarios
#   --seconds  length of the longer wrk run (default 10)
#
# Method: BINARY runs under callgrind twice, on CPU 1, with wrk (1 thread, 50 connections) on
# CPU 0: once for 2 seconds of load, once for N. Instructions per request are the difference of
# the two runs' totals over the difference of their requests, which leaves out start-up, the
# stop and the TLS handshakes of wrk's connections. aws-lc's one-time seeding of its random
# generator from jitter entropy (hundreds of millions of instructions at the first handshake,
# varying by millions between runs) is taken out of each total; it is found by its symbol, so
# BINARY must keep its symbols (the release profile does; `image` strips them). Needs valgrind
# and wrk.
set -euo pipefail

seconds=10
if [[ ${1:-} == --seconds ]]; then
    seconds=${2:-}
    shift $(($# < 2 ? 1 : 2))
fi
if (($# < 3)); then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
fi
binary=$(realpath "$1")
dir=$(realpath "$2")
url=$3
shift 3
wrk_args=("$@")
[[ $seconds =~ ^[0-9]+$ ]] && ((seconds > 2)) || { echo "instructions.sh: --seconds must be more than 2" >&2; exit 2; }

die() {
    echo "instructions.sh: $*" >&2
    exit 1
}
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need valgrind "install it (apt-get install valgrind)"
need wrk "install it (apt-get install wrk) or run .ci/run"
need taskset "install util-linux"
[[ -f $dir/nginx.conf ]] || die "no nginx.conf in $dir"
port=$(sed -n 's/.*listen 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$dir/nginx.conf" | head -1)
[[ -n $port ]] || die "no 'listen 127.0.0.1:PORT' in $dir/nginx.conf"
nginx=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}

out=$(mktemp -d)
server=
cleanup() {
    if [[ -n $server ]]; then kill "$server" 2>/dev/null || true; fi
    if [[ -f $dir/upstream.conf && -f $out/upstream-started ]]; then
        "$nginx" -c "$dir/upstream.conf" -p "$dir/" -s quit 2>/dev/null || true
    fi
    rm -rf "$out"
}
trap cleanup EXIT

if [[ -f $dir/upstream.conf ]]; then
    taskset -c 0 "$nginx" -c "$dir/upstream.conf" -p "$dir/" || die "the upstream nginx did not start"
    touch "$out/upstream-started"
fi

# One run under callgrind with wrk for $1 seconds: writes "requests instructions" to $out/$1.
run() {
    local load=$1 file=$out/callgrind.$1
    taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$file" "$binary" -p "$dir/" \
        -c "$dir/nginx.conf" -e "$dir/logs/callgrind-error.log" -g 'daemon off;' \
        2>"$out/valgrind.$load" &
    server=$!
    local tries=0
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        ((++tries < 600)) || die "portcullis did not listen on port $port: $(tail -3 "$out/valgrind.$load")"
        kill -0 "$server" 2>/dev/null || die "portcullis exited: $(tail -3 "$out/valgrind.$load")"
        sleep 0.1
    done
    local requests
    requests=$(taskset -c 0 wrk "${wrk_args[@]}" -t1 -c50 -d"${load}s" "$url" |
        awk '/requests in/ {print $1}')
    kill -QUIT "$server"
    wait "$server" || true
    server=
    local total jitter
    total=$(awk '/^(summary|totals):/ && !seen {print $2; seen = 1}' "$file")
    jitter=$(callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$file" 2>/dev/null |
        awk '/tree_jitter_initialize_once/ && !seen {gsub(",", "", $1); print $1; seen = 1}') ||
        die "callgrind_annotate could not read $file"
    [[ -n $requests ]] || die "wrk reported no requests"
    [[ -n $total ]] || die "no instruction total in callgrind's output"
    echo "$requests $((total - ${jitter:-0}))" >"$out/$load"
}

run 2
run "$seconds"
read -r short_requests short_total <"$out/2"
read -r long_requests long_total <"$out/$seconds"
((long_requests > short_requests)) || die "the longer run made no more requests than the shorter"
echo "$((  (long_total - short_total) / (long_requests - short_requests) )) instructions per request ($short_requests and $long_requests requests)"
