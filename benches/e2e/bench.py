#!/usr/bin/env python3
"""Helpers for benches/e2e/run (standard library only).

    bench.py ports N                   N distinct free TCP ports on 127.0.0.1
    bench.py conns PORT N PATH         open N keep-alive connections, one GET each,
                                       print "ready <open> <failed>", hold them until
                                       SIGTERM or stdin closes
    bench.py redis-calls FILE          sum of `calls` in an INFO commandstats dump,
                                       leaving out the benchmark's own INFO/CONFIG
    bench.py h2load OUTPUT LOG         h2load's text output and --log-file as one
                                       JSON line with wrk's field names
    bench.py summary JSON-LINE          one figure, one progress line
    bench.py pair PHASE RUN A B TRIPS CALLS USEC
                                       one two-gateway figure (two wrk JSON files)
    bench.py report RESULTS.jsonl
                                       the Markdown report: medians, ratios
    bench.py runs [--ratio A/B ...] [--pool] NAME=RESULTS.jsonl ...
                                       several runs' figures as Markdown tables, a row
                                       per run (and scenario): the summary of an
                                       issue's runs in benches/results/; --pool adds
                                       the ratios over every run's rounds together
                                       (runs of one build only)
"""

import json
import os
import re
import signal
import socket
import statistics
import sys


def ports(n):
    socks, out = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        out.append(s.getsockname()[1])
    for s in socks:
        s.close()
    print(" ".join(map(str, out)))


def read_response(sock):
    """Read one HTTP/1.1 response with a Content-Length (or none: empty)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    want = int(m.group(1)) if m else 0
    while len(body) < want:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed inside the body")
        body += chunk
    return status


def conns(port, n, path):
    req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    held, failed, statuses = [], 0, {}
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(req)
            st = read_response(s)
            statuses[st] = statuses.get(st, 0) + 1
            held.append(s)
        except OSError as e:  # includes ConnectionError, timeouts, EMFILE
            failed += 1
            if failed == 1:
                print(f"first failure after {len(held)}: {e}", file=sys.stderr)
    print(f"ready {len(held)} {failed} {json.dumps(statuses)}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.stdin.read()  # held until stdin closes or SIGTERM
    except KeyboardInterrupt:
        pass


# Commands a client sends to run a script; Redis 7 also counts, separately,
# every command the script runs (TIME, MGET, SET...).
SCRIPT_CALLS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


def redis_calls(path):
    """Print: all commands, script calls (round trips), the breakdown."""
    total = trips = usec = 0
    detail = {}
    for line in open(path):
        m = re.match(r"cmdstat_([^:]+):calls=(\d+),usec=(\d+)", line.strip())
        if not m:
            continue
        name, calls = m.group(1), int(m.group(2))
        if name.startswith("info") or name.startswith("config"):
            continue  # the benchmark's own INFO and CONFIG RESETSTAT
        total += calls
        if name in SCRIPT_CALLS:
            trips += calls
            usec += int(m.group(3))  # includes the commands the script ran
        detail[name] = detail.get(name, 0) + calls  # several nodes' dumps add up
    print(total, trips, usec, json.dumps(detail, separators=(",", ":")))


def pair(phase, run, a_path, b_path, trips, calls, usec):
    """Print the JSON line of one two-gateway figure (benches/e2e/run, the
    pair rows): each gateway's wrk figures, their sum, what was admitted
    (2xx) and refused, and Redis's calls per request."""
    figs = [json.loads(open(p).read().strip().splitlines()[-1]) for p in (a_path, b_path)]
    rps = [f["requests"] / (f["duration_us"] / 1e6) for f in figs]
    requests = sum(f["requests"] for f in figs)
    refused = sum(f["status"] for f in figs)
    errors = sum(f["connect"] + f["read"] + f["write"] + f["timeout"] for f in figs)
    trips, calls, usec = int(trips), int(calls), int(usec)
    print(json.dumps({
        "kind": "pair", "phase": phase, "run": int(run),
        "rps": round(sum(rps), 1), "rps_a": round(rps[0], 1), "rps_b": round(rps[1], 1),
        "requests": requests, "admitted": requests - refused, "refused": refused, "errors": errors,
        "redis_trips_per_req": round(trips / requests, 5) if requests else None,
        "redis_per_req": round(calls / requests, 5) if requests else None,
        "redis_usec_per_req": round(usec / requests, 3) if requests else None,
    }, separators=(",", ":")))


def h2load(out_path, log_path):
    """h2load's figures with wrk's field names (see report.lua); the
    percentiles from its per-request log (status -1: a failed stream)."""
    text = open(out_path).read()
    m = re.search(r"finished in ([\d.]+)(ms|s),", text)
    if not m:
        sys.exit(f"no 'finished in' in h2load's output {out_path}")
    dur_us = float(m.group(1)) * (1e3 if m.group(2) == "ms" else 1e6)
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    done, failed, timeout = int(m.group(3)), int(m.group(5)), int(m.group(7))
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    bad = int(m.group(3)) + int(m.group(4))
    m = re.search(r"traffic: .*?\((\d+)\) total", text)
    traffic = int(m.group(1)) if m else 0
    lat = []
    for line in open(log_path):
        f = line.split("\t")
        if len(f) >= 3 and f[1] != "-1":
            lat.append(int(f[2]))
    lat.sort()

    def pct(p):
        if not lat:
            return 0
        i = max(1, min(len(lat), -(-len(lat) * p // 100)))
        return lat[int(i) - 1]

    print(json.dumps({"requests": done, "duration_us": round(dur_us), "bytes": traffic, "connect": 0,
                      "read": 0, "write": 0, "status": bad, "timeout": timeout, "errors": failed,
                      "p50_us": pct(50), "p90_us": pct(90), "p99_us": pct(99), "max_us": lat[-1] if lat else 0,
                      "mean_us": round(sum(lat) / len(lat), 1) if lat else 0}, separators=(",", ":")))


# ---------------------------------------------------------------- report


PHASES = ("max64", "max256", "rate", "rate_lo")
# The TLS and HTTP/2 rows: phase, what it measures, the client.
TLS_PHASES = (
    ("tls64", "TLS keep-alive, HTTP/1.1", "wrk -t1 -c64"),
    ("hs", "new TLS connection per request (full handshake)", "hsload -c{hs_conns}"),
    ("h2", "h2 over TLS (ALPN h2)", "h2load -t1 -c{h2_clients} -m{h2_streams}"),
    ("h2c", "h2c (prior knowledge)", "h2load -t1 -c{h2_clients} -m{h2_streams}"),
)
ERROR_FIELDS = ("connect", "handshake", "read", "write", "timeout", "errors")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=0, unit=""):
    if x is None:
        return "-"
    if nd == 0:
        return f"{x:,.0f}{unit}"
    return f"{x:,.{nd}f}{unit}"


def ms(us):
    return None if us is None else us / 1000.0


def ratio(a, b, nd=2):
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.{nd}f}"


def read_results(results_path):
    """A results file as (meta, {(scenario, phase): [runs]}, [pairs]);
    the run's notes are in meta["notes"]."""
    meta, notes, by, pairs = {}, [], {}, []
    for line in open(results_path):
        if not line.strip():
            continue
        r = json.loads(line)
        if r["kind"] == "meta":
            meta[r["key"]] = r["value"]
        elif r["kind"] == "note":
            notes.append(r["text"])
        elif r["kind"] == "run":
            by.setdefault((r["scenario"], r["phase"]), []).append(r)
        elif r["kind"] == "pair":
            pairs.append(r)
    meta["notes"] = notes
    return meta, by, pairs


def report(results_path):
    meta, by, pairs = read_results(results_path)
    if pairs:
        meta["pairs"] = pairs

    def m(scn, phase, field):
        return med([r.get(field) for r in by.get((scn, phase), [])])

    def total(scn, phase, field):
        return sum(r.get(field) or 0 for r in by.get((scn, phase), []))

    scenarios = meta.get("scenarios", [])  # [[name, label], ...]
    out = []
    w = out.append
    w(f"### End-to-end: {meta['mode']} run, {meta['runs']} run(s) per figure, medians")
    w("")
    w(f"- date: {meta['date']}; commit: `{meta['commit']}`; {meta['version']}")
    w(f"- machine: {meta['cpus']} CPUs, {meta['cpu_model']}; {meta['mem']}; kernel {meta['kernel']}")
    w(f"- tools: {meta['tools']}")
    present = [(n, l) for n, l in scenarios if any(k[0] == n for k in by)]
    cores_only = not present and all(k[0].startswith("cores-") for k in by) and bool(by)
    llm_only = not present and all(k[0].startswith("llm-") for k in by) and bool(by)
    tls_only = not present and not cores_only and not llm_only
    idle_only = tls_only and not by  # --only idle: no timed figure at all
    if llm_only:
        load = "the SSE upstream and clients (benches/tools/sse_bench.rs)"
    elif cores_only:
        load = "wrk, the upstream nginx and Redis"
    elif idle_only:
        load = "the connection helper (python3) and the upstream nginx"
    elif tls_only:
        load = "the clients (wrk, hsload, h2load) and the upstream nginx"
    elif any(n.endswith(("redis", "cluster")) for n, _ in present):
        load = "wrk/oha, upstream nginx and Redis"
    else:
        load = "wrk/oha and the upstream nginx"
    if any(n.startswith("tg-otel-") for n, _ in present):
        load += ", and the OTLP sink (benches/tools/otlp_sink.rs)"
    if cores_only:
        w(f"- pinning: each proxy on CPUs {meta['proxy_cpu']} and {meta['load_cpu']}; {load} on CPU {meta['load_cpu']}")
    else:
        w(f"- pinning: proxy on CPU {meta['proxy_cpu']}; {load} on CPU {meta['load_cpu']}; "
          "one worker process / one thread / one Tokio worker each"
          + (" (except the multi-core rows)" if meta.get("cores_scenarios") else ""))
    w(f"- machine load: loadavg at start {meta['load_start']}, at end {meta.get('load_end', '?')}; "
      f"whole-machine CPU busy during the run {meta.get('busy_pct', '?')}% "
      "(this benchmark itself keeps about one core busy)")
    if idle_only:
        pass
    elif tls_only or cores_only or llm_only:
        w(f"- durations: {meta['dur']} s per figure")
    else:
        w(f"- durations: {meta['dur']} s per throughput figure, {meta['rate_dur']} s per fixed-rate figure")
    w("")
    if present:
        main_tables(w, meta, by, m, total, present)
    else:
        mem_table(w, meta)
    cores_table(w, meta, by)
    tls_tables(w, meta, by, m, total)
    llm_tables(w, meta, by, m)
    pair_table(w, meta)
    notes = meta.get("notes", [])
    if notes:
        w("Observations during this run:")
        w("")
        for n in notes:
            w(f"- {n}")
        w("")
    print("\n".join(out))


def main_tables(w, meta, by, m, total, present):
    def redis_cell(name):
        if m(name, "max64", "redis_per_req") is None:
            return "-"
        fb = sum(total(name, p, "store_fallbacks") for p in PHASES)
        return (f"{fmt(m(name, 'max64', 'redis_trips_per_req'), 3)} / {fmt(m(name, 'max64', 'redis_per_req'), 2)}"
                f" / {fmt(m(name, 'max64', 'redis_usec_per_req'), 1)} ({fb})")

    def lat(name, phase):
        return f"{fmt(ms(m(name, phase, 'p50_us')), 3)} / {fmt(ms(m(name, phase, 'p99_us')), 3)}"

    def added(name, phase):
        r50, r99 = m(name, phase, "p50_us"), m(name, phase, "p99_us")
        d50, d99 = m("direct", phase, "p50_us"), m("direct", phase, "p99_us")
        if name == "direct" or None in (r50, r99, d50, d99):
            return "-"
        return f"{(r50 - d50) / 1000:+.3f} / {(r99 - d99) / 1000:+.3f}"

    w("Throughput (wrk, closed loop: as fast as it goes)")
    w("")
    w("| scenario | req/s 64c | p50 / p99 ms 64c | req/s 256c | p50 / p99 ms 256c | proxy CPU % 64c | "
      "non-2xx | errors | other CPU0 % |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, label in present:
        non2xx = total(name, "max64", "status") + total(name, "max256", "status")
        non2xx += total(name, "rate", "non2xx") + total(name, "rate_lo", "non2xx")
        errs = sum(total(name, p, f) for p in ("max64", "max256") for f in ("connect", "read", "write", "timeout"))
        errs += total(name, "rate", "errors") + total(name, "rate_lo", "errors")
        w("| " + " | ".join([
            label,
            fmt(m(name, "max64", "rps")),
            lat(name, "max64"),
            fmt(m(name, "max256", "rps")),
            lat(name, "max256"),
            fmt(m(name, "max64", "cpu_pct"), 0),
            fmt(non2xx),
            fmt(errs),
            fmt(m(name, "max64", "other_cpu0_pct"), 0),
        ]) + " |")
    w("")
    if meta.get("rate_lo") is not None:
        w(f"Latency at fixed rates (oha, open loop, 64 connections, corrected for coordinated omission) and cost: "
          f"A = {fmt(meta.get('rate'))} req/s (half NGINX's maximum), B = {fmt(meta.get('rate_lo'))} req/s "
          "(half tollgate's)")
    else:
        basis = meta.get("rate_basis")
        w(f"Latency at a fixed rate (oha, open loop, 64 connections, corrected for coordinated omission) and cost: "
          f"A = {fmt(meta.get('rate'))} req/s ("
          + (f"{basis}); no B here" if basis else
             "half tollgate's maximum with 3 memory limits, no auth); no B here; "
             "no fixed-rate figure for the new-token-per-request row (oha sends one header value)"))
    w("")
    w("| scenario | A: p50 / p99 ms | A: added p50 / p99 ms | B: p50 / p99 ms | B: added p50 / p99 ms | "
      "proxy CPU s per 10k req (A) | RSS MiB | Redis per req: calls / cmds / µs (fallbacks) |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, label in present:
        rss = m(name, "max256", "rss_kb")
        w("| " + " | ".join([
            label,
            lat(name, "rate"),
            added(name, "rate"),
            lat(name, "rate_lo"),
            added(name, "rate_lo"),
            fmt(m(name, "rate", "cpu_per_10k"), 3),
            fmt(None if rss is None else rss / 1024, 1),
            redis_cell(name),
        ]) + " |")
    w("")
    w("Columns: `64c`/`256c` = wrk -t1 with that many connections; proxy CPU % = share of its core the proxy used "
      "at 64 connections (well under 100 % means the load core, running wrk, the upstream and Redis, was the limit, "
      "or the proxy was waiting on Redis); non-2xx and errors = totals over every run of every phase (the deny rows "
      "and the forger answer 429 by design, the no-credential row 401; requests oha abandons in flight when its time is up are not counted); other CPU0 % = "
      "CPU 0 time not used by the proxy during the 64-connection run (other processes, interrupts): the noise; "
      "added = latency minus direct's at the same rate; proxy CPU s per 10k = utime+stime of the proxy's processes "
      "during run A per 10,000 requests; RSS = VmRSS of the serving process after the 256-connection run; "
      "Redis per req = script calls (EVALSHA: round trips), every command Redis counted in INFO commandstats "
      "(Redis 7 counts each command a script runs too) and the microseconds Redis spent in the scripts, per request "
      "at 64 connections; fallbacks = store calls that "
      "failed or timed out (50 ms) over every run, decided locally (`on_error: local`).")
    w("")

    def rps(n, c="max64"):
        return m(n, c, "rps")

    w("Ratios (medians; req/s ratios > 1 mean tollgate serves more; latency and CPU ratios < 1 mean tollgate is cheaper):")
    w("")
    w("| ratio | req/s 64c | req/s 256c | p99 64c | CPU / req |")
    w("|---|---:|---:|---:|---:|")

    def rline(label, a, b):
        cpu = ratio(m(a, 'rate', 'cpu_per_10k'), m(b, 'rate', 'cpu_per_10k'))
        if m(a, 'rate', 'cpu_per_10k') is None and m(a, 'max64', 'cpu_per_10k') is not None:
            # No fixed-rate run (--only floor): the CPU per request of the
            # 64-connection runs, both proxies at full load.
            cpu = f"{ratio(m(a, 'max64', 'cpu_per_10k'), m(b, 'max64', 'cpu_per_10k'))} (64c)"
        w(f"| {label} | {ratio(rps(a), rps(b))} | {ratio(rps(a, 'max256'), rps(b, 'max256'))} | "
          f"{ratio(m(a, 'max64', 'p99_us'), m(b, 'max64', 'p99_us'))} | {cpu} |")

    pairs = [
        ("tollgate ÷ NGINX (proxy, no limits)", "tg", "nginx"),
        ("tollgate ÷ HAProxy (proxy, no limits)", "tg", "haproxy"),
        ("tollgate ÷ hyper floor (bare hyper + hyper-util proxy)", "tg", "floor"),
        ("tollgate ÷ hyper floor + the fields tollgate adds", "tg", "floor-h"),
        ("hyper floor + the fields tollgate adds ÷ hyper floor", "floor-h", "floor"),
        ("tollgate 3 limits memory ÷ NGINX 3× limit_req", "tg-lim-mem", "nginx-limreq"),
        ("tollgate 3 limits memory ÷ tollgate unlimited", "tg-lim-mem", "tg"),
        ("tollgate 3 limits Redis ÷ tollgate unlimited", "tg-lim-redis", "tg"),
        ("tollgate 3 limits Redis ÷ 3 limits memory", "tg-lim-redis", "tg-lim-mem"),
        ("tollgate 3 leased limits Redis ÷ 3 limits memory", "tg-lease-redis", "tg-lim-mem"),
        ("tollgate 3 leased limits Redis ÷ 3 exact limits Redis", "tg-lease-redis", "tg-lim-redis"),
        ("tollgate 3 limits Redis Cluster ÷ 3 limits one Redis (same box)", "tg-lim-cluster", "tg-lim-redis"),
        ("tollgate deny cache (memory) ÷ NGINX return 429", "tg-deny-mem", "nginx-429"),
        ("tollgate deny cache (Redis) ÷ NGINX return 429", "tg-deny-redis", "nginx-429"),
        ("tollgate access log ÷ NGINX access log", "tg-log", "nginx-log"),
        ("tollgate access log ÷ tollgate no log", "tg-log", "tg"),
        ("telemetry sample 1.0 ÷ off (spans exported by OTLP/HTTP)", "tg-otel-1", "tg"),
        ("telemetry sample 0.01 ÷ off (spans exported by OTLP/HTTP)", "tg-otel-001", "tg"),
        ("JWT, the same token ÷ no auth (3 limits memory)", "tg-jwt-mem", "tg-lim-mem"),
        ("JWT, a new token per request ÷ no auth (3 limits memory)", "tg-jwt-fresh", "tg-lim-mem"),
        ("API key ÷ no auth (3 limits memory)", "tg-key-mem", "tg-lim-mem"),
        ("locked-out forger (429, deny cache) ÷ no credential (401)", "tg-forger", "tg-401"),
    ]
    for label, a, b in pairs:
        if (a, "max64") in by and (b, "max64") in by:
            rline(label, a, b)
    w("")
    # The machine has slow spells (a run's figure drops by 10-20 % for
    # every proxy alike); the fastest runs are each proxy in a quiet one.
    fast = {n: sorted(r["rps"] for r in by.get((n, "max64"), []) if r.get("rps"))[-3:]
            for n in ("tg", "floor", "floor-h")}
    for floor, label in (("floor", "hyper floor"), ("floor-h", "hyper floor + the fields tollgate adds")):
        if len(fast["tg"]) == 3 and len(fast[floor]) == 3:
            w(f"tollgate ÷ {label}, the three fastest 64-connection runs of each: "
              f"{ratio(med(fast['tg']), med(fast[floor]), 3)} "
              f"({fmt(med(fast['tg']), 0)} ÷ {fmt(med(fast[floor]), 0)} req/s, medians of the three).")
            w("")
    allowed = m("tg-lim-redis", "max64", "redis_per_req")
    denied = m("tg-deny-redis", "max64", "redis_per_req")
    if allowed is not None or denied is not None:
        ta = m("tg-lim-redis", "max64", "redis_trips_per_req")
        td = m("tg-deny-redis", "max64", "redis_trips_per_req")
        w(f"Redis per allowed request (3 limits): {fmt(ta, 4)} script calls, {fmt(allowed, 4)} commands in all; "
          f"per denied request (client locked out, deny cache): {fmt(td, 4)} script calls, {fmt(denied, 4)} commands.")
        det = [r.get("redis_detail") for r in by.get(("tg-lim-redis", "max64"), []) if r.get("redis_detail")]
        if det:
            w(f"Commands seen in one allowed run: `{json.dumps(det[0])}`.")
        tc = m("tg-lim-cluster", "max64", "redis_trips_per_req")
        if tc is not None:
            w(f"On the 3-master cluster, per allowed request (3 limits, on 3 slots): {fmt(tc, 4)} script calls, "
              f"{fmt(m('tg-lim-cluster', 'max64', 'redis_per_req'), 4)} commands in all, over the three nodes.")
        w("")

    leased = m("tg-lease-redis", "max64", "redis_trips_per_req")
    if leased is not None:
        r = ratio(m("tg-lease-redis", "max64", "rps"), m("tg-lim-mem", "max64", "rps"))
        w(f"Leased limits (lease 100, one hot key per limit): {fmt(leased, 4)} script calls per request "
          f"(target <= 0.011: {'met' if leased <= 0.011 else '**not met**'}), "
          f"{fmt(m('tg-lease-redis', 'max64', 'redis_per_req'), 4)} commands in all; "
          f"leased ÷ memory at 64 connections {r} (target >= 0.95).")
        w("")
    otel_section(w, meta, by, m, total)
    auth_section(w, meta, by, m, total)
    mem_table(w, meta)

    rl = meta.get("reload")
    if rl:
        w(f"#### Reload every second ({rl['dur']} s of wrk at 64 connections per figure, medians of {rl['runs']})")
        w("")
        w("| proxy | req/s steady | req/s reloading | ratio | reloads done | non-2xx | socket errors (connect/read/write/timeout) |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        for row in rl["rows"]:
            w(f"| {row['label']} | {fmt(row['rps_steady'])} | {fmt(row['rps_reload'])} | "
              f"{ratio(row['rps_reload'], row['rps_steady'])} | {row['reloads']} | {row['non2xx']} | {row['errors']} |")
        w("")
        for note in rl.get("notes", []):
            w(f"- {note}")
        if rl.get("notes"):
            w("")


# The telemetry rows: sample, and the req/s 64c ratio to telemetry off
# (issue 28) they must reach.
OTEL_ROWS = (("tg-otel-1", "1.0", 0.9), ("tg-otel-001", "0.01", 0.98))


def otel_section(w, meta, by, m, total):
    """Issue 28: span export's cost against the same gateway with telemetry
    off, with its targets, and what became of the spans."""
    rows = [r for r in OTEL_ROWS if (r[0], "max64") in by]
    if not rows or ("tg", "max64") not in by:
        return
    w("#### Span export (issue 28: `telemetry:`, OTLP/HTTP to a local sink)")
    w("")
    w("Every row: the route of \"tollgate, no limits\" (telemetry off), plus `telemetry:` exporting every "
      "recorded trace's spans by OTLP/HTTP (protobuf) to benches/tools/otlp_sink.rs, which counts them, on the load CPU; "
      "`sample` = the share of new traces recorded (wrk sends no traceparent, so every request starts one).")
    w("")
    w("| ratio (medians) | req/s 64c | req/s 256c | p99 64c | capacity by CPU 64c | sink CPU % 64c | "
      "target (req/s 64c) |")
    w("|---|---:|---:|---:|---:|---:|---|")

    def r(a, b, phase="max64", field="rps"):
        return ratio(m(a, phase, field), m(b, phase, field))

    for name, sample, want in rows:
        a, b = m(name, "max64", "rps"), m("tg", "max64", "rps")
        ok = "-" if a is None or not b else ("met" if a / b >= want else "**not met**")
        w(f"| telemetry sample {sample} ÷ off | {r(name, 'tg')} | {r(name, 'tg', 'max256')} | "
          f"{r(name, 'tg', 'max64', 'p99_us')} | {r('tg', name, 'max64', 'cpu_per_10k')} | "
          f"{fmt(m(name, 'max64', 'sink_cpu_pct'), 1)} | >= {want}: {ok} |")
    w("")
    w("Capacity by CPU = telemetry off's proxy CPU per request ÷ this row's (utime + stime over the 64-connection "
      "runs): the req/s ratio the proxy's own work allows. Sink CPU % = the share of the load core the sink "
      "(decoding every batch) took during the 64-connection runs, away from wrk and the upstream.")
    w("")
    spans = meta.get("otel_spans", {})
    w("Spans, from each gateway's `/metrics` after its runs (`tollgate_spans_exported_total`, "
      "`tollgate_spans_dropped_total` by reason; warm-up and start-up checks included):")
    w("")
    w("| row | requests measured | spans exported | exported per measured request | dropped: queue_full | "
      "dropped: export_failed |")
    w("|---|---:|---:|---:|---:|---:|")
    exported_all = dropped_all = 0
    for name, sample, _ in rows:
        c = spans.get(name, {})
        reqs = sum(total(name, p, "requests") for p in PHASES)
        ex, qf, ef = c.get("exported"), c.get("queue_full"), c.get("export_failed")
        exported_all += ex or 0
        dropped_all += (qf or 0) + (ef or 0)
        w(f"| sample {sample} | {fmt(reqs)} | {fmt(ex)} | {fmt(None if ex is None or not reqs else ex / reqs, 3)} | "
          f"{fmt(qf)} | {fmt(ef)} |")
    w("")
    sink = meta.get("otel_sink")
    if sink:
        w(f"The sink received {sink['spans']:,} spans in {sink['batches']:,} export requests from the rows above, "
          f"which counted {exported_all:,} exported before they stopped (the sink's count adds what they still "
          "held and sent as they stopped, and must not be less)"
          + (": it is **less**, a mismatch." if sink["spans"] < exported_all else "."))
    else:
        w("The sink's count is missing (see the observations below).")
    if dropped_all:
        w("")
        w(f"**{dropped_all:,} span(s) dropped**: queue_full = the export queue (4,096 spans) was full when a "
          "request ended (the export task, one batch at a time, fell behind); export_failed = a batch the sink "
          "did not take within 5 s.")
    w("")


# The credential rows: what each must answer (None: 2xx), for the checks.
AUTH_EXPECT = {"tg-jwt-mem": None, "tg-jwt-fresh": None, "tg-key-mem": None, "tg-401": 401, "tg-forger": 429}


def auth_section(w, meta, by, m, total):
    """Issue 24's figures: each credential's cost against 3 memory limits
    without auth, with its target, and the forger's CPU per request."""
    if not any((n, "max64") in by for n in AUTH_EXPECT):
        return
    w("#### Credentials (issue 24: consumers)")
    w("")
    w("Every row: the route and 3 memory limits of \"tollgate, 3 limits, memory store\" (no auth), plus "
      "`auth:`. JWT: one issuer, `keys: [{pem}]`, algorithms [ES256]; the same token on every request (after the "
      "first, a verified-token cache hit) or a new one per request from a pool of "
      f"{meta.get('auth_tokens', '?'):,} distinct tokens, cycled (the cache holds 10,000, so nearly every request "
      "is an ECDSA P-256 verification). API key: header x-api-key, one consumer with one key. No credential: 401 "
      "`unauthorized`. Forger: `failure_limit` with a lockout, the client locked out first, then a new "
      "random-looking bad key per request (wrk; oha sends one): 429 from the deny cache before any key lookup.")
    w("")
    w("| ratio (medians) | req/s 64c | req/s 256c | p99 64c | capacity by CPU 64c | target (req/s 64c; by CPU) |")
    w("|---|---:|---:|---:|---:|---|")

    def r(a, b, phase="max64", field="rps"):
        return ratio(m(a, phase, field), m(b, phase, field))

    def met(x, y, want):
        if x is None or y is None or not y:
            return "-"
        return "met" if x / y >= want else "NOT met"

    def target(a, b, want):
        # Capacity by CPU: requests per CPU-second of the proxy, the row's
        # over the base's (the inverse of the CPU per request ratio).
        return (f">= {want}: {met(m(a, 'max64', 'rps'), m(b, 'max64', 'rps'), want)}; "
                f"{met(m(b, 'max64', 'cpu_per_10k'), m(a, 'max64', 'cpu_per_10k'), want)}")

    for label, a, b, want in (
        ("JWT, the same token ÷ no auth", "tg-jwt-mem", "tg-lim-mem", 0.9),
        ("JWT, a new token per request ÷ no auth", "tg-jwt-fresh", "tg-lim-mem", None),
        ("API key ÷ no auth", "tg-key-mem", "tg-lim-mem", 0.97),
    ):
        if (a, "max64") not in by or (b, "max64") not in by:
            continue
        w(f"| {label} | {r(a, b)} | {r(a, b, 'max256')} | {r(a, b, 'max64', 'p99_us')} | "
          f"{r(b, a, 'max64', 'cpu_per_10k')} | {target(a, b, want) if want else 'reported'} |")
    w("")
    w("Capacity by CPU = the base row's proxy CPU per request ÷ this row's (utime + stime over the 64-connection "
      "runs): the req/s ratio the proxy's own work allows, which the load core and other processes on the proxy "
      "core (\"other CPU0 %\" above) do not move as much as they move req/s.")
    w("")
    if ("tg-forger", "max64") in by and ("tg-401", "max64") in by:
        w("CPU per request, locked-out forger ÷ unauthenticated 401 (proxy utime + stime per 10,000 requests):")
        w("")
        w("| phase | forger s/10k | 401 s/10k | forger ÷ 401 | forger req/s | 401 req/s |")
        w("|---|---:|---:|---:|---:|---:|")
        for phase, what in (("max64", "wrk -c64, as fast as it goes (a new bad key per request)"),
                            ("rate", f"oha -c64 at {fmt(meta.get('rate'))} req/s (one bad key)")):
            if ("tg-forger", phase) not in by:
                continue
            w(f"| {what} | {fmt(m('tg-forger', phase, 'cpu_per_10k'), 3)} | {fmt(m('tg-401', phase, 'cpu_per_10k'), 3)} | "
              f"{r('tg-forger', 'tg-401', phase, 'cpu_per_10k')} | {fmt(m('tg-forger', phase, 'rps'))} | "
              f"{fmt(m('tg-401', phase, 'rps'))} |")
        w("")
    w("CPU per request of every credential row (s per 10,000 requests, wrk -c64), and what each answered:")
    w("")
    w("| row | s/10k 64c | ÷ no auth | answers | as expected | tollgate_auth_total{route=\"bench\"} |")
    w("|---|---:|---:|---|---|---|")
    outcomes = meta.get("auth_outcomes", {})
    for n, want in AUTH_EXPECT.items():
        if (n, "max64") not in by:
            continue
        reqs = sum(total(n, p, "requests") for p in PHASES)
        bad = sum(total(n, p, "status") for p in ("max64", "max256")) + sum(total(n, p, "non2xx") for p in ("rate", "rate_lo"))
        errs = sum(total(n, p, f) for p in PHASES for f in ("connect", "read", "write", "timeout", "errors"))
        ok = (bad == 0 if want is None else bad == reqs) and errs == 0
        ans = "2xx" if want is None else f"{want} (non-2xx by design)"
        oc = ", ".join(f"{k} {v:,}" for k, v in sorted(outcomes.get(n, {}).items())) or "-"
        w(f"| {n} | {fmt(m(n, 'max64', 'cpu_per_10k'), 3)} | {r(n, 'tg-lim-mem', 'max64', 'cpu_per_10k')} | {ans} | "
          f"{'yes' if ok else f'NO: {bad:,} non-2xx, {errs:,} errors of {reqs:,}'} | {oc} |")
    w("")
    w("The outcome counts include the warm-up and the start-up checks; `locked_out` is also the forger's outcome "
      "for the 429s from the deny cache. wrk counts a 4xx as a non-2xx answer, not as an error.")
    w("")


def mem_table(w, meta):
    mem = meta.get("conn_mem")
    if not mem:
        return
    w(f"#### Idle keep-alive connections: memory ({mem['n']:,} connections, one GET each, then idle; fresh processes)")
    w("")
    w("| proxy | RSS before MiB | RSS with the connections MiB | growth per 10,000 connections MiB | bytes per connection | failed |")
    w("|---|---:|---:|---:|---:|---:|")
    for row in mem["rows"]:
        w(f"| {row['label']} | {fmt(row['before_kb'] / 1024, 1)} | {fmt(row['after_kb'] / 1024, 1)} | "
          f"{fmt(row['per10k_kb'] / 1024, 1)} | {fmt(row['per10k_kb'] * 1024 / 10000)} | {row['failed']} |")
    w("")


def llm_tables(w, meta, by, m):
    """Issue 26: SSE through a route with an `llm` cost limit and without."""
    if not any(k[0].startswith("llm-") for k in by):
        return
    plain, cost = "llm-plain", "llm-cost"
    pace = meta.get("sse_pace", "?")

    def rps(n, ph):
        return m(n, ph, "rps")

    def ms(n, ph, f):
        x = m(n, ph, f)
        return None if x is None else x / 1000

    def yes(ok):
        return "met" if ok else "**not met**"

    w(f"#### LLM streaming: SSE through an `llm` cost limit (reserve + settle from the usage) vs the same route without it")
    w("")
    w("| row | request limit | + `llm` cost limit | ratio | target |")
    w("|---|---:|---:|---:|---|")
    for ph, label in [("sse64", "req/s, as fast as it goes (64 conns, the stream in one write)"),
                      ("ssepaced", f"req/s, 256 streams, chunks {pace} ms apart")]:
        a, b = rps(plain, ph), rps(cost, ph)
        r = None if not a or b is None else b / a
        w(f"| {label} | {fmt(a)} | {fmt(b)} | {fmt(r, 2)} | >= 0.9: {yes(r is not None and r >= 0.9)} |")
    a, b = m(plain, "sse64", "cpu_per_10k"), m(cost, "sse64", "cpu_per_10k")
    if a and b:
        w(f"| proxy CPU per request (µs), as fast as it goes | {fmt(a * 100, 1)} | {fmt(b * 100, 1)} | "
          f"{fmt(b / a, 2)} | - |")
    rate = meta.get("sse_rate", "?")
    for f, label in [("ttfb_p50_us", "p50"), ("ttfb_p99_us", "p99"), ("p99_us", "p99 to the last byte")]:
        a, b = ms(plain, "rate_sse", f), ms(cost, "rate_sse", f)
        added = None if a is None or b is None else b - a
        target = f"added <= 1 ms: {yes(added is not None and added <= 1)}" if f == "ttfb_p99_us" else "-"
        name = f"time to first byte {label}" if f.startswith("ttfb") else label
        w(f"| {name} (ms) at {rate} req/s, chunks {pace} ms apart | {fmt(a, 3)} | {fmt(b, 3)} | "
          f"+{fmt(added, 3)} ms | {target} |")
    late = sum(m(n, "rate_sse", "late") or 0 for n in (plain, cost))
    w("")
    if meta.get("llm_settlements"):
        w(f"Settlements on the cost route (`tollgate_cost_settlements_total`): {meta['llm_settlements']}; "
          f"requests sent a whole interval late at the fixed rate: {late}.")
        w("")
    mem = meta.get("llm_mem")
    if not mem:
        return
    rows = {r["name"]: r for r in mem["rows"]}
    n = mem["n"]
    w(f"#### {n:,} open SSE streams: gateway RSS (fresh processes; each stream has its first chunk, the upstream holds the rest)")
    w("")
    w("| route | RSS idle MiB | RSS with the streams MiB | growth per stream KiB | failed |")
    w("|---|---:|---:|---:|---:|")
    for name, label in [(plain, "request limit"), (cost, "+ `llm` cost limit")]:
        r = rows.get(name)
        if r:
            w(f"| {label} | {fmt(r['before_kb'] / 1024, 1)} | {fmt(r['after_kb'] / 1024, 1)} | "
              f"{fmt(r['growth_kb'] / n, 1)} | {r['failed']} |")
    if plain in rows and cost in rows:
        extra = (rows[cost]["growth_kb"] - rows[plain]["growth_kb"]) / n
        w("")
        w(f"The metering's own cost: {fmt(extra, 1)} KiB per open stream beyond the connections' "
          f"(target: within 64 KiB: {yes(extra <= 64)}).")
    w("")


def pair_table(w, meta):
    """Issue 27: two gateways sharing one Redis, 3 leased limits."""
    rows = meta.get("pairs")
    if not rows:
        return
    cap = meta.get("pair_cap")
    w("#### Two gateways sharing one Redis (3 leased limits, lease 100; both on the proxy CPU, wrk -c32 each)")
    w("")
    w("| figure | req/s in all | gateway A | gateway B | Redis script calls / req | admitted | refused | errors |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    for ph, label in [("pair", "3 leased limits (median)"),
                      ("paircap", f"+ a shared budget of {cap:,} an hour (median)" if cap else "capped")]:
        rs = [r for r in rows if r["phase"] == ph]
        if not rs:
            continue
        w(f"| {label} | {fmt(med([r['rps'] for r in rs]))} | {fmt(med([r['rps_a'] for r in rs]))} | "
          f"{fmt(med([r['rps_b'] for r in rs]))} | {fmt(med([r['redis_trips_per_req'] for r in rs]), 4)} | "
          f"{fmt(med([r['admitted'] for r in rs]))} | {fmt(med([r['refused'] for r in rs]))} | "
          f"{sum(r['errors'] for r in rs)} |")
    capped = [r for r in rows if r["phase"] == "paircap"]
    if capped and cap:
        admitted = [r["admitted"] for r in capped]
        over = [a for a in admitted if a > cap]
        w("")
        w(f"The shared budget, each run: admitted {', '.join(f'{a:,}' for a in admitted)} of {cap:,} "
          f"(never more: {'held' if not over else '**over in ' + str(len(over)) + ' run(s)**'}; "
          f"the bound says at least {cap - 2 * 100:,} when more was offered; offered "
          f"{', '.join(format(r['requests'], ',') for r in capped)}).")
    w("")


def spread(xs, nd=0):
    """`median (min-max)` of the values that are there."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    if len(xs) == 1:
        return fmt(xs[0], nd)
    return f"{fmt(statistics.median(xs), nd)} ({fmt(min(xs), nd)}–{fmt(max(xs), nd)})"


def cores_table(w, meta, by):
    scen = meta.get("cores_scenarios")
    if not scen or not any(k[0].startswith("cores-") for k in by):
        return
    runs = max((len(v) for k, v in by.items() if k[0].startswith("cores-")), default=0)
    w(f"#### Multi-core: 1 worker vs 2 ({runs} interleaved run(s) per figure; median (min–max))")
    w("")
    w(f"Each proxy may run on both CPUs ({meta['proxy_cpu']} and {meta['load_cpu']}); wrk -t1, the upstream "
      f"nginx and Redis are on CPU {meta['load_cpu']}, so a second worker shares its core with the load. "
      "Workers: TOKIO_WORKER_THREADS for tollgate and the floor, worker_processes for NGINX. "
      "Requests per CPU-second = requests ÷ the proxy's utime + stime (all its processes) over the run: "
      "the figure to compare; req/s also depends on how much of the load's core the proxy takes.")
    w("")

    def per_cpu_s(r):
        c = r.get("cpu_s")
        return r["requests"] / c if c else None

    def rps(r):
        return r.get("rps")

    for phase, conns in (("max64", 64), ("max256", 256)):
        if not any(k[1] == phase and k[0].startswith("cores-") for k in by):
            continue
        w(f"wrk -c{conns}:")
        w("")
        w("| proxy | workers | req/s | proxy CPU % | requests per CPU-second | per CPU-second, 2 ÷ 1 |")
        w("|---|---:|---:|---:|---:|---:|")
        for name, label, workers in scen:
            rows = by.get((name, phase), [])
            if not rows:
                continue
            ratio_cell = ""
            if workers == 2:
                one = by.get((name[:-1] + "1", phase), [])
                ratio_cell = ratio(med([per_cpu_s(r) for r in rows]), med([per_cpu_s(r) for r in one]))
            w(f"| {label} | {workers} | {spread([rps(r) for r in rows])} | "
              f"{spread([r.get('cpu_pct') for r in rows])} | {spread([per_cpu_s(r) for r in rows])} | {ratio_cell} |")
        w("")


def tls_tables(w, meta, by, m, total):
    tls = meta.get("tls")
    if not tls or not any(k[0] in ("tls-tg", "tls-nginx") for k in by):
        return
    runs = max((len(by.get((n, p), [])) for n in ("tls-tg", "tls-nginx") for p, _, _ in TLS_PHASES), default=0)
    w(f"#### TLS and HTTP/2: tollgate and NGINX ({meta['dur']} s per figure, medians of {runs})")
    w("")
    w(f"One worker each on the proxy core; the same certificate and key ({tls['cert']}); TLS 1.3; both "
      "proxy over HTTP/1.1 to the same upstream (NGINX `return 200`, as in the plain rows). Negotiated, as the clients saw it:")
    w("")
    for n, label in (("tls-tg", "tollgate"), ("tls-nginx", "NGINX")):
        seen = tls.get("seen", {}).get(n)
        if seen:
            w(f"- {label}: hsload (verifying the certificate): {seen['hsload']}; h2load: {seen['h2load']}")
    w("")
    w("| figure | client | tollgate req/s | NGINX req/s | tollgate p50 / p99 ms | NGINX p50 / p99 ms | "
      "proxy CPU µs per req: tollgate / NGINX | proxy CPU %: tollgate / NGINX | errors / non-2xx |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|")

    def lat(n, p):
        return f"{fmt(ms(m(n, p, 'p50_us')), 3)} / {fmt(ms(m(n, p, 'p99_us')), 3)}"

    def us_per_req(n, p):
        c = m(n, p, "cpu_per_10k")
        return None if c is None else c * 100  # s per 10k -> µs per request

    def errs(n, p):
        return sum(total(n, p, f) for f in ERROR_FIELDS)

    shown = []
    for p, what, client in TLS_PHASES:
        if (("tls-tg", p) not in by) and (("tls-nginx", p) not in by):
            continue
        shown.append((p, what))
        client = client.format(**tls)
        w("| " + " | ".join([
            what, f"`{client}`",
            fmt(m("tls-tg", p, "rps")), fmt(m("tls-nginx", p, "rps")),
            lat("tls-tg", p), lat("tls-nginx", p),
            f"{fmt(us_per_req('tls-tg', p), 1)} / {fmt(us_per_req('tls-nginx', p), 1)}",
            f"{fmt(m('tls-tg', p, 'cpu_pct'))} / {fmt(m('tls-nginx', p, 'cpu_pct'))}",
            f"{fmt(errs('tls-tg', p) + errs('tls-nginx', p))} / "
            f"{fmt(total('tls-tg', p, 'status') + total('tls-nginx', p, 'status'))}",
        ]) + " |")
    w("")
    full = sum(total(n, "hs", "full") for n in ("tls-tg", "tls-nginx"))
    resumed = sum(total(n, "hs", "resumed") for n in ("tls-tg", "tls-nginx"))
    if full or resumed:
        w(f"New connections: {fmt(full)} full handshakes and {fmt(resumed)} resumed, over every run "
          "(hsload offers no session to resume).")
        w("")
    w("Ratios tollgate ÷ NGINX (medians; req/s > 1 means tollgate serves more; p99 and CPU per request < 1 mean "
      "tollgate is faster / cheaper):")
    w("")
    w("| figure | req/s | p99 | CPU / req |")
    w("|---|---:|---:|---:|")
    for p, what in shown:
        w(f"| {what} | {ratio(m('tls-tg', p, 'rps'), m('tls-nginx', p, 'rps'))} | "
          f"{ratio(m('tls-tg', p, 'p99_us'), m('tls-nginx', p, 'p99_us'))} | "
          f"{ratio(m('tls-tg', p, 'cpu_per_10k'), m('tls-nginx', p, 'cpu_per_10k'))} |")
    w("")
    other = [r.get("other_cpu0_pct") for n in ("tls-tg", "tls-nginx") for p, _ in shown for r in by.get((n, p), [])]
    other = [x for x in other if x is not None]
    if other:
        w(f"Noise: CPU {meta['proxy_cpu']} time not used by the proxy during these figures (other processes, "
          f"interrupts): median {fmt(med(other), 1)} %, at most {fmt(max(other), 1)} %.")
        w("")
    w("Latency is from the request's send to the end of its response, except for new connections (hsload): "
      "from the TCP connect to the end of the response, handshake included. Proxy CPU % well under 100 means the "
      "load core (the client and the upstream) was the limit, not the proxy; CPU µs per request is then the "
      "firmer comparison. Errors = connect, handshake, read, write, timeouts and failed streams over every run.")
    w("")


def summary(line):
    d = json.loads(line)
    rps = d.get("rps") or d["requests"] / (d["duration_us"] / 1e6)
    bad = d.get("status", d.get("non2xx", 0))
    err = sum(d.get(k, 0) for k in ERROR_FIELDS)
    extra = ""
    if "cpu_pct" in d:
        extra += f" | proxy CPU {d['cpu_pct']:.0f}%, {d['cpu_per_10k']:.3f} s/10k, RSS {d['rss_kb'] / 1024:.1f} MiB"
    if "redis_per_req" in d:
        extra += (f" | Redis {d['redis_trips_per_req']:.3f} calls/req, {d['redis_per_req']:.2f} cmds/req, {d['redis_usec_per_req']:.1f} µs/req,"
                  f" {d.get('store_fallbacks', 0)} fallbacks")
    # The rows that answer 4xx by design say so, rather than look failed.
    want = AUTH_EXPECT.get(d["scenario"]) or (429 if d["scenario"].startswith("tg-deny") else None)
    if want:
        bad = f"{bad} (all {want} by design)" if bad == d["requests"] else f"{bad} of {d['requests']} (want all {want})"
    print(f"  {d['scenario']:<14} {d['phase']:<6} run {d['run']}: {rps:>9,.0f} req/s  "
          f"p50 {d['p50_us'] / 1000:.3f} ms  p99 {d['p99_us'] / 1000:.3f} ms  non-2xx {bad}  errors {err}{extra}")


def runs(args):
    """An issue's runs side by side (the summaries in benches/results/):
    what each run was, then per run and scenario the medians of its
    throughput figures; with `--ratio A/B`, per run, scenario A's figures
    over scenario B's, and with `--pool` over all the runs' rounds too."""
    ratios, files, pool = [], [], False
    while args:
        a = args.pop(0)
        if a == "--ratio":
            ratios.append(args.pop(0).split("/"))
        elif a == "--pool":
            pool = True
        else:
            name, _, path = a.partition("=")
            files.append((name, read_results(path)))
    out = []
    w = out.append

    def m(by, scn, phase, field):
        return med([r.get(field) for r in by.get((scn, phase), [])])

    def cpu_us(by, scn, phase):
        c = m(by, scn, phase, "cpu_per_10k")
        return None if c is None else c * 100

    w("| run | date | commit | mode | runs per figure | loadavg at start / end |")
    w("|---|---|---|---|---:|---|")
    for name, (meta, _, _) in files:
        w(f"| {name} | {meta.get('date', '?')} | `{meta.get('commit', '?')}` | {meta.get('mode', '?')} | "
          f"{meta.get('runs', '?')} × {meta.get('dur', '?')} s | {meta.get('load_start', '?')} / {meta.get('load_end', '?')} |")
    w("")
    if ratios:
        w("| run | ratio | req/s 64c (medians) | the three fastest 64c runs of each | req/s 256c | CPU per request 64c |")
        w("|---|---|---:|---:|---:|---:|")
        pooled = {}
        for _, (_, by, _) in files:
            for key, rs in by.items():
                pooled.setdefault(key, []).extend(rs)
        rows = files + ([("all, pooled", ({}, pooled, []))] if pool and len(files) > 1 else [])
        for name, (meta, by, _) in rows:
            for a, b in ratios:
                if (a, "max64") not in by or (b, "max64") not in by:
                    continue
                fast = [med(sorted(r["rps"] for r in by[(n, "max64")] if r.get("rps"))[-3:]) for n in (a, b)]
                w(f"| {name} | {a} ÷ {b} | {ratio(m(by, a, 'max64', 'rps'), m(by, b, 'max64', 'rps'), 3)} | "
                  f"{ratio(fast[0], fast[1], 3)} | {ratio(m(by, a, 'max256', 'rps'), m(by, b, 'max256', 'rps'), 3)} | "
                  f"{ratio(cpu_us(by, a, 'max64'), cpu_us(by, b, 'max64'))} |")
        w("")
    if any(p == "max64" for _, (_, by, _) in files for _, p in by):
        w("Medians over each run's rounds (wrk -t1; CPU = the proxy's utime + stime per request; "
          "Redis = script calls and Redis's µs per request):")
        w("")
        w("| run | scenario | req/s 64c | req/s 256c | p99 ms 64c | CPU µs per request 64c | Redis calls / µs per request 64c |")
        w("|---|---|---:|---:|---:|---:|---:|")
    for name, (meta, by, _) in files:
        labels = dict(meta.get("scenarios", []))
        labels.update((n, f"{label}, {k} worker(s) on both CPUs") for n, label, k in meta.get("cores_scenarios", []))
        order = [n for n, _ in meta.get("scenarios", [])]
        for scn in sorted({s for s, p in by if p == "max64"},
                          key=lambda s: (order.index(s) if s in order else len(order), s)):
            calls = m(by, scn, "max64", "redis_trips_per_req")
            redis = "-" if calls is None else f"{fmt(calls, 4)} / {fmt(m(by, scn, 'max64', 'redis_usec_per_req'), 1)}"
            w(f"| {name} | {labels.get(scn, scn)} | {fmt(m(by, scn, 'max64', 'rps'))} | {fmt(m(by, scn, 'max256', 'rps'))} | "
              f"{fmt(ms(m(by, scn, 'max64', 'p99_us')), 3)} | {fmt(cpu_us(by, scn, 'max64'), 1)} | {redis} |")
    if out[-1]:
        w("")
    other = [(name, scn, phase, rs) for name, (_, by, _) in files for (scn, phase), rs in sorted(by.items())
             if phase not in ("max64", "max256", "rate", "rate_lo")]
    if other:
        w("TLS, HTTP/2 and LLM streaming figures (medians):")
        w("")
        w("| run | scenario | figure | req/s | p50 / p99 ms | CPU µs per request |")
        w("|---|---|---|---:|---:|---:|")
        for name, scn, phase, rs in other:
            cpu = med([r.get("cpu_per_10k") for r in rs])
            w(f"| {name} | {scn} | {phase} | {fmt(med([r.get('rps') for r in rs]))} | "
              f"{fmt(ms(med([r.get('p50_us') for r in rs])), 3)} / {fmt(ms(med([r.get('p99_us') for r in rs])), 3)} | "
              f"{fmt(None if cpu is None else cpu * 100, 1)} |")
        w("")
    if any("conn_mem" in meta or "reload" in meta for _, (meta, _, _) in files):
        w("Idle keep-alive connections (bytes of RSS each) and reloading every second (req/s reloading ÷ steady):")
        w("")
        w("| run | proxy | bytes per idle connection | reload ÷ steady |")
        w("|---|---|---:|---:|")
        for name, (meta, _, _) in files:
            idle = {r["label"]: r for r in (meta.get("conn_mem") or {}).get("rows", [])}
            n = (meta.get("conn_mem") or {}).get("n") or 1
            reload = {r["label"].split(" (")[0]: r for r in (meta.get("reload") or {}).get("rows", [])}
            for label in dict.fromkeys(list(idle) + list(reload)):
                i, r = idle.get(label), reload.get(label)
                w(f"| {name} | {label} | {fmt(None if i is None else i['per10k_kb'] * 1024 / n)} | "
                  f"{'-' if r is None else ratio(r['rps_reload'], r['rps_steady'])} |")
        w("")
    if any(pairs for _, (_, _, pairs) in files):
        w("Two gateways sharing one Redis (medians):")
        w("")
        w("| run | figure | req/s in all | Redis calls per request | admitted | refused |")
        w("|---|---|---:|---:|---:|---:|")
        for name, (_, _, pairs) in files:
            for phase in sorted({p["phase"] for p in pairs}):
                ps = [p for p in pairs if p["phase"] == phase]
                w(f"| {name} | {phase} | {fmt(med([p.get('rps') for p in ps]))} | "
                  f"{fmt(med([p.get('redis_trips_per_req') for p in ps]), 4)} | "
                  f"{', '.join(fmt(p.get('admitted')) for p in ps)} | {fmt(med([p.get('refused') for p in ps]))} |")
        w("")
    print("\n".join(out))


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "ports":
        ports(int(sys.argv[2]))
    elif cmd == "conns":
        conns(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "/")
    elif cmd == "h2load":
        h2load(sys.argv[2], sys.argv[3])
    elif cmd == "summary":
        summary(sys.argv[2])
    elif cmd == "redis-calls":
        redis_calls(sys.argv[2])
    elif cmd == "pair":
        pair(*sys.argv[2:9])
    elif cmd == "report":
        report(sys.argv[2])
    elif cmd == "runs":
        runs(sys.argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
