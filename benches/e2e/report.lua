-- wrk script for benches/e2e/run: after the run, print wrk's own figures as
-- one JSON line (prefix WRKJSON) so the script need not parse wrk's text.
-- Latencies are in microseconds; `status` counts responses outside 2xx/3xx.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,' ..
    '"write":%d,"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read,
    e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean))
end
