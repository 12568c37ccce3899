# shellcheck shell=bash
# Helpers shared by the bench scripts; sourced, not run. The sourcing script defines die,
# STOP_TIMEOUT_TENTHS, PORT_LOW, PORT_SPAN and PORT_ATTEMPTS.

# Fails with a hint unless the command $1 is on PATH; $2 says how to get it.
need() {
    command -v "$1" >/dev/null 2>&1 || die "$1 not found; $2"
}

# Prints PID and every descendant of PID, one per line.
process_tree() {
    local root=$1 stat rest pid ppid
    local -A children=()
    for stat in /proc/[0-9]*/stat; do
        # A process may exit between the glob and the read: skip it.
        { read -r rest <"$stat"; } 2>/dev/null || continue
        pid=${stat#/proc/}
        pid=${pid%/stat}
        # The command name in parentheses may contain spaces: fields start after the last ')'.
        rest=${rest##*) }
        read -r _ ppid _ <<<"$rest"
        children[$ppid]+=" $pid"
    done
    local queue=("$root")
    while ((${#queue[@]} > 0)); do
        pid=${queue[0]}
        queue=("${queue[@]:1}")
        echo "$pid"
        # shellcheck disable=SC2206 # the list is space-separated PIDs by construction
        queue+=(${children[$pid]:-})
    done
}

# Ends the system started as PID: QUIT (graceful stop, as in nginx), then KILL for whatever
# of its process tree is left after the timeout.
stop_system() {
    local pid=$1 tree i p
    tree=$(process_tree "$pid")
    kill -QUIT "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT_TENTHS; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    for p in $tree; do
        kill -KILL "$p" 2>/dev/null || true
    done
    wait "$pid" 2>/dev/null || true
}

port_free() {
    # A refused connection means nothing listens there.
    ! (: <>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Prints a port on 127.0.0.1 that nothing listens on and that is not in taken_ports (the
# caller adds each port it uses there).
taken_ports=" "
free_port() {
    local i candidate
    for ((i = 0; i < PORT_ATTEMPTS; i++)); do
        candidate=$((PORT_LOW + RANDOM % PORT_SPAN))
        if [[ $taken_ports != *" $candidate "* ]] && port_free "$candidate"; then
            echo "$candidate"
            return
        fi
    done
    die "no free port found on 127.0.0.1"
}
