#!/usr/bin/env python3
"""N+1, tested: three portcullis nodes behind a TCP load balancer, one killed under load.

The seeds size a fleet as three nodes, each run at no more than 66% of what it can do, so
that when one fails the other two carry the whole load. This runs that on one machine:
three portcullis nodes (one worker each), each in its own network namespace with its own
address (10.X.N.2, reached over a veth pair), behind HAProxy in TCP mode with health checks
(every 100 ms, down after 2 failures), and wrk through HAProxy at a fixed offered load
(each connection waits --delay-ms between requests). At --kill-at seconds node 2 is killed
with SIGKILL. It reports:

  - requests completed, and the requests lost (wrk's socket errors and non-2xx answers);
  - the time from the kill until HAProxy marked node 2 down (until then a new connection to
    it fails to connect and is sent to another node, `option redispatch`);
  - each survivor's requests per second (its stub_status) and CPU (as a share of one core)
    before and after the kill: with the same offered load both grow by about 3/2; the seeds'
    rule holds when the CPU was under 66% of a node's maximum before, so it stays under
    100% after. The CPU per request gives a node's maximum, and the load the rule allows.

Usage: bench/n-plus-one.py [--duration S] [--kill-at S] [--connections N] [--delay-ms MS]
                           [--json] [--keep]
Environment: PORTCULLIS (default target/release/portcullis), HAPROXY (haproxy on PATH or
/usr/sbin/haproxy), WRK (wrk on PATH). Needs root: it runs in a network namespace of its
own (unshare -n) and makes one per node, with veth pairs, all gone when it ends. All its
traffic stays inside them.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NODES = 3
KILLED = 2
NODE_PORT = 8080
# HAProxy's health checks: every CHECK_MS, a node down after FALL failures.
CHECK_MS = 100
FALL = 2
START_TIMEOUT = 10.0


def die(message):
    print(f"n-plus-one: error: {message}", file=sys.stderr)
    sys.exit(1)


def note(message):
    print(f"n-plus-one: {message}", file=sys.stderr)


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def which(env, name, fallback=None):
    path = os.environ.get(env) or shutil.which(name) or fallback
    if not path or not os.access(path, os.X_OK):
        die(f"{name} not found; install it (.ci/run does) or set {env}")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_connect(addr, port, proc, what):
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            die(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection((addr, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    die(f"{what} did not listen on {addr}:{port}")


def cpu_ns(pid):
    """CPU time of process `pid`, all its threads, in nanoseconds (the scheduler's count,
    finer than the clock ticks of /proc/PID/stat)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def requests(addr):
    """The requests node `addr` has served, from its stub_status."""
    with socket.create_connection((addr, NODE_PORT), timeout=2) as s:
        s.sendall(b"GET /status HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.decode().split("\r\n\r\n", 1)[1].splitlines()[2].split()[2])


def haproxy_status(sock_path):
    """The status of each server of backend `nodes` (UP, DOWN...), from HAProxy's stats
    socket."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock_path)
        s.sendall(b"show stat\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    lines = data.decode().splitlines()
    status = lines[0].lstrip("# ").split(",").index("status")
    servers = {}
    for line in lines[1:]:
        cols = line.split(",")
        if len(cols) > status and cols[0] == "nodes" and cols[1] not in ("BACKEND", ""):
            servers[cols[1]] = cols[status]
    return servers


def parse_wrk(text):
    def number(pattern):
        m = re.search(pattern, text)
        return int(m.group(1)) if m else 0

    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "requests": number(r"(\d+) requests in"),
        "non_2xx": number(r"Non-2xx or 3xx responses: (\d+)"),
        "socket_errors": [int(x) for x in errors.groups()] if errors else [0, 0, 0, 0],
    }


def main():
    p = argparse.ArgumentParser(description="N+1 under load: one of three nodes killed.")
    p.add_argument("--duration", type=float, default=20.0, help="wrk's run, seconds (20)")
    p.add_argument("--kill-at", type=float, default=None, help="seconds into it (half)")
    p.add_argument("--connections", type=int, default=50, help="wrk connections (50)")
    p.add_argument("--delay-ms", type=int, default=10,
                   help="each connection's pause between requests (10: 100/s each)")
    p.add_argument("--json", action="store_true", help="one JSON line on stdout")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args()
    kill_at = args.kill_at if args.kill_at is not None else args.duration / 2
    if not 1.0 <= kill_at <= args.duration - 1.0:
        die("--kill-at must leave a second of the run on each side")
    if os.geteuid() != 0:
        die("needs root, to make network namespaces")
    if os.environ.get("N_PLUS_ONE_NETNS") != "1":
        # All of it (the balancer, wrk, the nodes' namespaces and the veth pairs' host ends)
        # in a network namespace of its own: nothing touches the machine's network.
        os.environ["N_PLUS_ONE_NETNS"] = "1"
        os.execvp("unshare", ["unshare", "-n", sys.executable, *sys.argv])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    portcullis = os.environ.get("PORTCULLIS") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(repo, "target")), "release", "portcullis")
    if not os.access(portcullis, os.X_OK):
        die(f"portcullis not found at {portcullis}; build it or set PORTCULLIS")
    haproxy = which("HAPROXY", "haproxy", "/usr/sbin/haproxy")
    wrk = which("WRK", "wrk")
    ip = which("IP", "ip", "/usr/sbin/ip")

    work = tempfile.mkdtemp(prefix="n-plus-one-")
    # The nodes serve as `user` (nobody) once started: their files must be readable.
    os.chmod(work, 0o755)
    tag = f"np{os.getpid() % 100000}"
    subnet = 100 + os.getpid() % 100
    namespaces, procs = [], []
    try:
        run(ip, "link", "set", "lo", "up")
        os.makedirs(f"{work}/html")
        with open(f"{work}/html/1kb", "wb") as f:
            f.write(b"x" * 1024)
        nodes = []
        for i in range(1, NODES + 1):
            ns, host_if, node_if = f"{tag}-{i}", f"{tag}h{i}", f"{tag}n{i}"
            addr = f"10.{subnet}.{i}.2"
            run(ip, "netns", "add", ns)
            namespaces.append(ns)
            run(ip, "link", "add", host_if, "type", "veth", "peer", "name", node_if)
            run(ip, "link", "set", node_if, "netns", ns)
            run(ip, "addr", "add", f"10.{subnet}.{i}.1/24", "dev", host_if)
            run(ip, "link", "set", host_if, "up")
            run(ip, "netns", "exec", ns, ip, "addr", "add", f"{addr}/24", "dev", node_if)
            run(ip, "netns", "exec", ns, ip, "link", "set", node_if, "up")
            run(ip, "netns", "exec", ns, ip, "link", "set", "lo", "up")
            conf = f"{work}/node{i}.conf"
            with open(conf, "w") as f:
                f.write(f"""worker_processes 1;
daemon off;
pid {work}/node{i}.pid;
error_log {work}/node{i}.error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 100000;
    server {{
        listen {addr}:{NODE_PORT};
        root {work}/html;
        location = /status {{ stub_status; }}
    }}
}}
""")
            # `ip netns exec` runs the server in place of itself: the pid is the server's.
            proc = subprocess.Popen([ip, "netns", "exec", ns, portcullis, "-p", work, "-c", conf],
                                    stdout=subprocess.DEVNULL, stderr=open(f"{work}/node{i}.stderr", "w"))
            procs.append(proc)
            wait_connect(addr, NODE_PORT, proc, f"node {i}")
            nodes.append((addr, proc))
        port = free_port()
        stats = f"{work}/haproxy.sock"
        with open(f"{work}/haproxy.cfg", "w") as f:
            f.write(f"""global
    maxconn 8192
    nbthread 1
    stats socket {stats} level admin
defaults
    mode tcp
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    retries 2
    option redispatch
frontend front
    bind 127.0.0.1:{port}
    default_backend nodes
backend nodes
    balance roundrobin
    default-server check inter {CHECK_MS}ms fall {FALL} rise 2
""")
            for i, (addr, _) in enumerate(nodes, 1):
                f.write(f"    server n{i} {addr}:{NODE_PORT}\n")
        lb = subprocess.Popen([haproxy, "-db", "-f", f"{work}/haproxy.cfg"],
                              stdout=subprocess.DEVNULL, stderr=open(f"{work}/haproxy.log", "w"))
        procs.append(lb)
        wait_connect("127.0.0.1", port, lb, "haproxy")
        deadline = time.monotonic() + START_TIMEOUT
        while any(st != "UP" for st in haproxy_status(stats).values()):
            if time.monotonic() > deadline:
                die("haproxy did not see every node up")
            time.sleep(0.05)
        with open(f"{work}/delay.lua", "w") as f:
            f.write(f"function delay()\n    return {args.delay_ms}\nend\n")
        note(f"wrk -c{args.connections} for {args.duration:g}s through haproxy, node {KILLED} killed at {kill_at:g}s")
        load = subprocess.Popen(
            [wrk, "-t1", f"-c{args.connections}", f"-d{args.duration:g}s", "-s", f"{work}/delay.lua",
             f"http://127.0.0.1:{port}/1kb"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started = time.monotonic()
        survivors = [(addr, proc.pid) for i, (addr, proc) in enumerate(nodes, 1) if i != KILLED]

        def sample():
            """The survivors' CPU time and requests served, with the time."""
            return (time.monotonic(), [cpu_ns(pid) for _, pid in survivors],
                    [requests(addr) for addr, _ in survivors])

        # The first second warms up; the load is measured from then to the kill, and from a
        # second after the kill (the load settled on two) until just before the end.
        time.sleep(1.0)
        before = sample()
        time.sleep(max(0.0, started + kill_at - time.monotonic()))
        at_kill = sample()
        killed = nodes[KILLED - 1][1]
        killed.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        down_ms = None
        while time.monotonic() - killed_at < 10.0:
            if haproxy_status(stats)[f"n{KILLED}"].startswith("DOWN"):
                down_ms = (time.monotonic() - killed_at) * 1000
                break
            time.sleep(0.01)
        time.sleep(max(0.0, killed_at + 1.0 - time.monotonic()))
        after_start = sample()
        time.sleep(max(0.0, started + args.duration - 0.3 - time.monotonic()))
        after_end = sample()
        out, _ = load.communicate()

        def cpu(a, b):
            """Each survivor's CPU between two samples, in % of one core."""
            return [round((nb - na) / 1e9 / (b[0] - a[0]) * 100, 1) for na, nb in zip(a[1], b[1])]

        def served(a, b):
            """Each survivor's requests per second between two samples."""
            return [round((rb - ra) / (b[0] - a[0])) for ra, rb in zip(a[2], b[2])]

        result = parse_wrk(out)
        result.update({
            "duration_s": args.duration,
            "kill_at_s": kill_at,
            "connections": args.connections,
            "offered_rps": round(args.connections * 1000 / max(args.delay_ms, 1)),
            "marked_down_ms": None if down_ms is None else round(down_ms),
            "survivors_cpu_before_pct": cpu(before, at_kill),
            "survivors_cpu_after_pct": cpu(after_start, after_end),
            "survivors_rps_before": served(before, at_kill),
            "survivors_rps_after": served(after_start, after_end),
            "lost": sum(parse_wrk(out)["socket_errors"]) + result["non_2xx"],
        })
        if args.json:
            print(json.dumps(result))
        else:
            print(f"requests: {result['requests']} (offered about {result['offered_rps']}/s)")
            print(f"lost: {result['lost']} (socket errors connect/read/write/timeout "
                  f"{'/'.join(map(str, result['socket_errors']))}, non-2xx {result['non_2xx']})")
            print(f"node {KILLED} marked down by haproxy after: {result['marked_down_ms']} ms")
            print(f"survivors' requests per second before the kill: "
                  f"{result['survivors_rps_before']}, after: {result['survivors_rps_after']}")
            print(f"survivors' CPU, % of one core, before the kill: {result['survivors_cpu_before_pct']}, "
                  f"after: {result['survivors_cpu_after_pct']}")
            # What the seeds' rule makes of it: a node's capacity is one core's worth of
            # requests at the CPU each costs; three nodes at 66% of it lose one and the
            # two left run at 99%.
            us = [c * 1e4 / r for c, r in zip(result["survivors_cpu_after_pct"], result["survivors_rps_after"]) if r]
            if us:
                per = sum(us) / len(us)
                print(f"CPU per request on a node: {per:.1f} us, so one node (one worker) carries about "
                      f"{1e6 / per:,.0f} requests/s at 100% of a core; at the seeds' 66% cap three carry "
                      f"{3 * 0.66e6 / per:,.0f}/s, and the two left after a failure run at 99%")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for ns in namespaces:
            subprocess.run([ip, "netns", "del", ns], stderr=subprocess.DEVNULL)
        if args.keep:
            note(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
