'use strict';
// The dashboard in a real browser: starts the tollgate binary (with an admin
// token) in front of a small upstream, sends traffic, opens the dashboard in
// headless Chromium (Debian's, driven by playwright-core; no browser is
// downloaded), checks the upstream table shows a dead target down, waits
// for a lockout the test caused (and its client in the top offenders
// table, as GET /top counts it), unlocks it with the page's button, and
// checks the client is allowed again. Screenshots go to
// target/ (target/dashboard.png, target/dashboard-unlocked.png).
//
// Environment: TOLLGATE_BIN (default target/debug/tollgate), CHROMIUM
// (default /usr/bin/chromium), SCREENSHOT_DIR (default target/),
// DASHBOARD_WARMUP_MS (default 6000; 100000 for docs/dashboard.png).
// Run by tests/run as `node --test tests/browser/`.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const { chromium } = require('playwright-core');

const ROOT = path.resolve(__dirname, '..', '..');
const TARGET = process.env.CARGO_TARGET_DIR || path.join(ROOT, 'target');
const BIN = process.env.TOLLGATE_BIN || path.join(TARGET, 'debug', 'tollgate');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.SCREENSHOT_DIR || TARGET;
const TOKEN = 'browser-test-token';
// How long the charts fill before the screenshot (longer for docs/dashboard.png).
const WARMUP_MS = Number(process.env.DASHBOARD_WARMUP_MS || 6000);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts the gateway (its listeners on port 0) and reads the addresses it
// bound from its start-up log on stdout: `listening` (`local`) and `admin
// listening` (`addr`). Info lines only from those two modules, so stdout
// stays quiet; it is read to the end all the same. `logs` gathers the output
// for error messages.
function startGateway(configPath, logs) {
  const gw = spawn(BIN, ['-c', configPath], {
    env: { ...process.env, TOLLGATE_LOG: 'warn,tollgate::server=info,tollgate::admin=info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  gw.stderr.on('data', (d) => logs.push(String(d)));
  const bound = new Promise((resolve, reject) => {
    const addrs = {};
    readline.createInterface({ input: gw.stdout }).on('line', (line) => {
      logs.push(line + '\n');
      let v;
      try { v = JSON.parse(line); } catch (_) { return; }
      if (v.message === 'listening') addrs.listen = v.local;
      if (v.message === 'admin listening') addrs.admin = v.addr;
      if (addrs.listen && addrs.admin) resolve(addrs);
    });
    gw.on('exit', (code, signal) => reject(new Error(`tollgate exited (${code ?? signal}) during start-up`)));
  });
  const deadline = sleep(15000).then(() => { throw new Error('no listening lines within 15 s'); });
  return { gw, bound: Promise.race([bound, deadline]) };
}

// An upstream that answers after a short, path-dependent delay, so the
// latency chart has something to show.
function startUpstream() {
  const server = http.createServer((req, res) => {
    const slow = req.url.startsWith('/orders') ? 40 : req.url.startsWith('/search') ? 15 : 4;
    const delay = slow * (0.5 + Math.random()) + (Math.random() < 0.02 ? slow * 4 : 0);
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ path: req.url }));
    }, delay);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function config(upstream) {
  return `
server:
  listen: ["127.0.0.1:0"]
admin:
  listen: "127.0.0.1:0"
  token: "${TOKEN}"
upstreams:
  app:
    # The second target refuses connections: active health takes it down.
    targets: ["http://127.0.0.1:${upstream}", "http://127.0.0.1:1"]
    health:
      active: { interval: 500ms, timeout: 200ms, unhealthy: 1 }
limits:
  per_client:
    algorithm: token_bucket
    rate: 40/s
    burst: 60
    key: client_ip
  search:
    algorithm: sliding_window
    limit: 8
    window: 1s
    key: client_ip
  login:
    algorithm: fixed_window
    limit: 3
    window: 1m
    key: "header:x-user"
    lockout: { duration: 15m, escalate: 2 }
routes:
  - name: hello
    match: { exact: /hello }
    respond: { status: 200, body: "hello\\n", headers: { content-type: text/plain } }
    limits:
      - { name: hello_ip, algorithm: fixed_window, limit: 5, window: 1m, key: client_ip, lockout: { duration: 10m } }
  - name: users
    match: { path: /users }
    upstream: app
    limits: [per_client]
  - name: orders
    match: { path: /orders }
    upstream: app
    limits: [per_client]
  - name: search
    match: { path: /search }
    upstream: app
    limits: [search]
  - name: login
    match: { exact: /login }
    upstream: app
    limits: [login]
`;
}

async function get(base, p, headers) {
  const r = await fetch(base + p, { headers: headers || {} });
  const text = await r.text();
  return { status: r.status, text };
}

async function waitFor(what, fn, timeoutMs) {
  const deadline = Date.now() + (timeoutMs || 15000);
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (_) { /* not yet */ }
    if (Date.now() > deadline) throw new Error('timed out waiting for ' + what);
    await sleep(50);
  }
}

// Background traffic until `stop` is set: steady requests on three routes,
// bursts on /search (some rejected), and logins that lock users out.
function traffic(base) {
  const ctl = { stop: false, sent: 0 };
  const users = ['alice', 'bob', 'carol', 'dave', 'erin', 'mallory', 'trent'];
  ctl.done = (async () => {
    let tick = 0;
    while (!ctl.stop) {
      const batch = [];
      for (let i = 0; i < 3; i++) batch.push(get(base, '/users/' + i));
      if (tick % 2 === 0) batch.push(get(base, '/orders/' + tick));
      if (tick % 10 < 4) for (let i = 0; i < 4; i++) batch.push(get(base, '/search?q=' + i));
      if (tick % 2 === 0) {
        const user = users[(tick / 2) % users.length];
        batch.push(get(base, '/login', { 'x-user': user }));
      }
      ctl.sent += batch.length;
      await Promise.allSettled(batch);
      tick++;
      await sleep(60);
    }
  })();
  return ctl;
}

test('the dashboard shows a lockout, and its Unlock button lifts it', { timeout: 90000 + WARMUP_MS }, async () => {
  assert.ok(fs.existsSync(BIN), `the tollgate binary is missing at ${BIN} (cargo build first)`);
  assert.ok(fs.existsSync(CHROMIUM), `Chromium is missing at ${CHROMIUM} (apt-get install chromium)`);

  // Everything the test starts is stopped in `finally`, each step with a
  // deadline, so a browser that will not close cannot hang tests/run.
  const cleanup = [];
  try {
    await run(cleanup);
  } finally {
    for (const step of cleanup.reverse()) {
      await Promise.race([Promise.resolve().then(step).catch(() => {}), sleep(5000)]);
    }
  }
});

async function run(cleanup) {
  const upstream = await startUpstream();
  cleanup.push(() => { upstream.closeAllConnections(); upstream.close(); });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tollgate-browser-'));
  cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const configPath = path.join(dir, 'gateway.yaml');
  fs.writeFileSync(configPath, config(upstream.address().port));

  const logs = [];
  const { gw, bound } = startGateway(configPath, logs);
  cleanup.push(() => gw.kill('SIGKILL'));
  const { listen, admin } = await bound.catch((e) => { throw new Error(e.message + '\n' + logs.join('')); });
  const base = `http://${listen}`;
  const adminBase = `http://${admin}`;
  await waitFor('GET /readyz = 200', async () => (await get(adminBase, '/readyz')).status === 200)
    .catch((e) => { throw new Error(e.message + '\n' + logs.join('')); });

  // The admin API wants the token.
  assert.equal((await get(adminBase, '/api/stats')).status, 401);

  const load = traffic(base);
  cleanup.push(() => { load.stop = true; return load.done; });

  // Playwright gives the browser a fresh --user-data-dir of its own (a
  // temporary profile, removed on close).
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  cleanup.push(async () => {
    await Promise.race([browser.close(), sleep(5000)]);
    const proc = browser.process();
    if (proc && proc.exitCode === null) proc.kill('SIGKILL');
  });
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });

  const problems = [];
  const watch = (page) => {
    page.on('pageerror', (e) => problems.push('page error: ' + e.message));
    page.on('console', (m) => {
      // The login page's 401 is expected; anything else (a CSP violation,
      // a script error) is a bug.
      if (m.type() === 'error' && !/401/.test(m.text())) problems.push('console: ' + m.text());
    });
  };

  // Without the token: the login form, which leads to the dashboard.
  const page = await context.newPage();
  watch(page);
  const first = await page.goto(adminBase + '/');
  assert.equal(first.status(), 401);
  await page.fill('input[name=token]', TOKEN);
  await page.click('button[type=submit]');
  await page.waitForFunction(() => document.getElementById('live').textContent === 'live', null, { timeout: 10000 });
  // The token left the address bar.
  assert.equal(new URL(page.url()).search, '');

  // Upstream health: the target that refuses is down, the other up.
  const target = (url) => page.locator(`#upstreams tr[data-upstream="app"][data-target="${url}"] td`).nth(2);
  await page.waitForFunction(() => {
    const row = document.querySelector('#upstreams tr[data-target="http://127.0.0.1:1"]');
    return row && row.children[2].textContent === 'down';
  }, null, { timeout: 10000 });
  assert.equal(await target(`http://127.0.0.1:${upstream.address().port}`).textContent(), 'up');

  // Get this client locked out of /hello (5 a minute, then a 10 min lockout).
  let lockedOut = false;
  for (let i = 0; i < 12 && !lockedOut; i++) {
    const r = await get(base, '/hello');
    lockedOut = r.status === 429 && JSON.parse(r.text).error === 'locked_out';
  }
  assert.ok(lockedOut, 'the client was never locked out of /hello');

  const row = page.locator('#lockouts tr[data-limit="hello_ip"][data-key="127.0.0.1"]');
  await row.waitFor({ state: 'visible', timeout: 10000 });
  assert.match(await row.locator('td').nth(2).textContent(), /^(9m|10m) /);

  // Top offenders: this client, as GET /top counts its rejections by
  // hello_ip (it sends no more there, so the count holds still).
  const auth = { Authorization: 'Bearer ' + TOKEN };
  const top = JSON.parse((await get(adminBase, '/top', auth)).text);
  const mine = (top.limits.hello_ip || []).find((o) => o.key === '127.0.0.1');
  assert.ok(mine && mine.rejected >= 1, 'GET /top: ' + JSON.stringify(top));
  const topRow = page.locator('#top tr[data-limit="hello_ip"][data-key="127.0.0.1"]');
  await topRow.waitFor({ state: 'visible', timeout: 10000 });
  await page.waitForFunction((n) => {
    const r = document.querySelector('#top tr[data-limit="hello_ip"][data-key="127.0.0.1"]');
    return r && r.children[2].textContent === String(n);
  }, mine.rejected, { timeout: 10000 });

  // Give the charts some seconds of traffic, then take the picture.
  await page.waitForFunction(() => {
    const c = document.getElementById('c-rps').textContent;
    return c !== '–' && c !== '0';
  }, null, { timeout: 10000 });
  await sleep(WARMUP_MS);
  await page.waitForSelector('#routes tbody tr >> text=hello');
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, 'dashboard.png'), fullPage: true });

  // The page's numbers are the server's.
  const hello = await page.locator('#routes tbody tr', { hasText: 'hello_ip' }).locator('td').nth(7).textContent();
  assert.ok(Number(hello.replace(/,/g, '')) >= 6, `hello requests shown: ${hello}`);

  // Unlock from the page.
  await row.locator('button.unlock').click();
  await row.waitFor({ state: 'detached', timeout: 5000 });
  await page.locator('#toast', { hasText: 'Unlocked 127.0.0.1 on hello_ip' }).waitFor({ timeout: 5000 });
  const lockouts = JSON.parse((await get(adminBase, '/lockouts?limit=hello_ip', auth)).text);
  assert.equal(lockouts.count, 0, JSON.stringify(lockouts));
  const again = await get(base, '/hello');
  assert.equal(again.status, 200, 'the unlocked client is allowed again: ' + again.text);
  // And it does not come back on the next polls.
  await sleep(1500);
  assert.equal(await row.count(), 0);
  await page.screenshot({ path: path.join(SHOTS, 'dashboard-unlocked.png'), fullPage: false });

  // A reload of the page keeps working (the tab kept the token).
  await page.reload();
  await page.waitForFunction(() => document.getElementById('live').textContent === 'live', null, { timeout: 10000 });

  assert.deepEqual(problems, []);
}
