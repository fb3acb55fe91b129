'use strict';
// The tollgate dashboard: polls GET /api/stats every second, keeps the last
// two minutes of per-second samples, and draws them on canvases. No
// dependencies; every value from the server reaches the page through
// textContent, never as HTML.
(function () {
  const TOKEN_KEY = 'tollgate-admin-token';
  const POLL_MS = 1000;
  const HISTORY = 120;
  const LOCKOUTS_SHOWN = 200;
  const PALETTE = ['#4f9dff', '#f2a93b', '#3ecf8e', '#b392f0', '#f0605d', '#2dd4bf', '#f472b6', '#e2c35b'];
  const OTHER = '#6b7686';
  const BLUE = '#4f9dff', AMBER = '#f2a93b', RED = '#f0605d', PURPLE = '#b392f0';
  const TABLE_SPARK = [140, 22]; // CSS size of the tables' sparklines (style.css)

  // The token: from ?token= (then kept in this tab and taken out of the
  // address bar), else from an earlier load of this tab.
  const query = new URLSearchParams(location.search);
  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  if (query.has('token')) {
    token = query.get('token');
    sessionStorage.setItem(TOKEN_KEY, token);
    query.delete('token');
    const rest = query.toString();
    history.replaceState(null, '', location.pathname + (rest ? '?' + rest : ''));
  }

  const $ = (id) => document.getElementById(id);

  function api(method, path) {
    const headers = { Accept: 'application/json' };
    if (token) headers.Authorization = 'Bearer ' + token;
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), 5000);
    return fetch(path, { method, headers, cache: 'no-store', signal: ctrl.signal })
      .finally(() => clearTimeout(timer))
      .then((r) => {
        if (r.status === 401) {
          // The token changed (a reload of the config): ask again.
          sessionStorage.removeItem(TOKEN_KEY);
          location.replace('/');
          throw new Error('unauthorized');
        }
        return r;
      });
  }

  // ---- formatting ----
  const intFmt = new Intl.NumberFormat('en-US');
  function fmtInt(n) { return n === null || n === undefined ? '–' : intFmt.format(n); }
  function fmtRate(x) {
    if (x === null || x === undefined) return '–';
    if (x === 0) return '0';
    if (x < 10) return x.toFixed(x < 1 ? 2 : 1);
    if (x < 10000) return intFmt.format(Math.round(x));
    return (x / 1000).toFixed(1) + 'k';
  }
  function fmtMs(x) {
    if (x === null || x === undefined) return '–';
    if (x < 1) return x.toFixed(2) + ' ms';
    if (x < 100) return x.toFixed(1) + ' ms';
    if (x < 10000) return Math.round(x) + ' ms';
    return (x / 1000).toFixed(1) + ' s';
  }
  function fmtAxis(x) {
    if (x >= 1e6) return (x / 1e6).toFixed(x % 1e6 ? 1 : 0) + 'M';
    if (x >= 1e3) return (x / 1e3).toFixed(x % 1e3 ? 1 : 0) + 'k';
    if (x > 0 && x < 1) return String(Number(x.toFixed(2)));
    return String(Math.round(x * 10) / 10);
  }
  function fmtDuration(ms) {
    let s = Math.max(0, Math.ceil(ms / 1000));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) return d + 'd ' + h + 'h';
    if (h) return h + 'h ' + String(m).padStart(2, '0') + 'm';
    if (m) return m + 'm ' + String(s).padStart(2, '0') + 's';
    return s + 's';
  }
  function fmtAgo(ms) {
    const s = Math.round(ms / 1000);
    if (s < 60) return s + 's ago';
    if (s < 3600) return Math.floor(s / 60) + 'm ago';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm ago';
    return Math.floor(s / 86400) + 'd ago';
  }
  function fmtTime(iso) {
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleTimeString('en-GB', { hour12: false });
  }

  // ---- DOM helpers ----
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') node.className = v;
      else if (k === 'text') node.textContent = v;
      else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  }
  function setText(node, text) { if (node.textContent !== text) node.textContent = text; }

  let toastTimer = null;
  function toast(text, ok) {
    const t = $('toast');
    t.textContent = text;
    t.className = 'toast ' + (ok ? 'ok' : 'err');
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => t.classList.add('hidden'), 4000);
  }

  // ---- canvas charts ----
  // Size a canvas's backing store to its CSS box; returns its 2D context in
  // CSS pixels, and the box.
  // Table sparklines pass their fixed size, so that drawing a hundred of
  // them between DOM updates does not force a layout each.
  function prepare(canvas, fixed) {
    const dpr = window.devicePixelRatio || 1;
    const w = fixed ? fixed[0] : canvas.clientWidth, h = fixed ? fixed[1] : canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return { ctx, w, h };
  }

  // A round step for four grid lines covering `x`.
  function niceStep(x) {
    if (!(x > 0)) return 0.25;
    const p = Math.pow(10, Math.floor(Math.log10(x)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= x) return m * p;
    return 10 * p;
  }

  // A line chart of `series` ([{label, color, values, dash}]) over the
  // sample times `t` (ms), the last two minutes on the x axis.
  function lineChart(canvas, t, series, opts) {
    const { ctx, w, h } = prepare(canvas);
    const padL = 46, padR = 10, padT = 24, padB = 20;
    const pw = w - padL - padR, ph = h - padT - padB;
    if (pw <= 0 || ph <= 0) return;
    const end = t.length ? t[t.length - 1] : Date.now();
    const start = end - HISTORY * POLL_MS;
    let max = 0;
    for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
    const step = niceStep(max / 4);
    const top = step * 4;
    const x = (ms) => padL + ((ms - start) / (end - start)) * pw;
    const y = (v) => padT + ph - (v / top) * ph;

    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    // Grid and y labels.
    for (let i = 0; i <= 4; i++) {
      const v = step * i, yy = Math.round(y(v)) + 0.5;
      ctx.strokeStyle = i === 0 ? '#394455' : '#222b37';
      ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(padL, yy); ctx.lineTo(w - padR, yy); ctx.stroke();
      ctx.fillStyle = '#8b97a8'; ctx.textAlign = 'right';
      ctx.fillText(opts && opts.format ? opts.format(v) : fmtAxis(v), padL - 6, yy);
    }
    // x labels: seconds before the latest sample.
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    for (let s = 0; s <= HISTORY; s += 30) {
      const xx = x(end - s * 1000);
      ctx.fillStyle = '#8b97a8';
      ctx.fillText(s === 0 ? 'now' : '−' + s + 's', Math.min(Math.max(xx, padL + 12), w - padR - 12), h - padB + 5);
    }
    // Lines.
    for (const s of series) {
      ctx.strokeStyle = s.color; ctx.lineWidth = s.width || 1.6; ctx.lineJoin = 'round';
      ctx.setLineDash(s.dash || []);
      ctx.beginPath();
      let pen = false;
      for (let i = 0; i < t.length; i++) {
        const v = s.values[i];
        if (v === null || v === undefined || t[i] < start) { pen = false; continue; }
        const xx = x(t[i]), yy = y(v);
        if (pen) ctx.lineTo(xx, yy); else ctx.moveTo(xx, yy);
        pen = true;
      }
      ctx.stroke();
      if (s.fill && t.length) {
        ctx.setLineDash([]);
        ctx.lineTo(x(t[t.length - 1]), y(0));
        ctx.lineTo(x(Math.max(t[0], start)), y(0));
        ctx.closePath();
        ctx.globalAlpha = 0.12; ctx.fillStyle = s.color; ctx.fill(); ctx.globalAlpha = 1;
      }
    }
    ctx.setLineDash([]);
    // Legend along the top.
    ctx.textBaseline = 'middle'; ctx.textAlign = 'left';
    let lx = padL;
    for (const s of series) {
      const label = s.label.length > 22 ? s.label.slice(0, 21) + '…' : s.label;
      const width = ctx.measureText(label).width + 26;
      if (lx + width > w - padR) break;
      ctx.fillStyle = s.color; ctx.fillRect(lx, 8, 10, 3);
      ctx.fillStyle = '#c3cbd6'; ctx.fillText(label, lx + 14, 10);
      lx += width;
    }
    if (!t.length || max === 0) {
      ctx.fillStyle = '#56606e'; ctx.textAlign = 'center';
      ctx.fillText(t.length ? 'nothing yet' : 'waiting for the first sample…', padL + pw / 2, padT + ph / 2);
    }
  }

  // A sparkline of the last two minutes.
  function sparkline(canvas, values, color, values2, color2, fixed) {
    const { ctx, w, h } = prepare(canvas, fixed);
    let max = 0;
    for (const v of values) if (v > max) max = v;
    if (values2) for (const v of values2) if (v > max) max = v;
    const n = HISTORY;
    const x = (i, len) => w - ((len - 1 - i) / (n - 1)) * w;
    const y = (v) => h - 2 - (max ? (v / max) * (h - 4) : 0);
    const draw = (vals, col, fill) => {
      if (!vals.length) return;
      ctx.beginPath();
      vals.forEach((v, i) => { const xx = x(i, vals.length), yy = y(v || 0); if (i) ctx.lineTo(xx, yy); else ctx.moveTo(xx, yy); });
      ctx.strokeStyle = col; ctx.lineWidth = 1.3; ctx.stroke();
      if (fill) {
        ctx.lineTo(w, h); ctx.lineTo(x(0, vals.length), h); ctx.closePath();
        ctx.globalAlpha = 0.15; ctx.fillStyle = col; ctx.fill(); ctx.globalAlpha = 1;
      }
    };
    draw(values, color, true);
    if (values2) draw(values2, color2, false);
  }

  // ---- state: the samples seen so far ----
  const state = {
    seq: 0,
    t: [], dt: [],
    total: null, routes: {}, limits: {},
    active: [],
    last: null,
    paused: false,
    failures: 0,
    unlocked: new Map(), // "limit\tkey" -> when, hidden until the server agrees
    sort: { routes: null, limits: null },
  };

  function resetSeries() {
    state.seq = 0; state.t = []; state.dt = []; state.total = null; state.routes = {}; state.limits = {};
  }

  // Append the columns of `incoming` to `into` (creating missing names with
  // empty history), and keep only the names `incoming` has.
  function mergeColumns(into, incoming, len) {
    const out = {};
    for (const [name, cols] of Object.entries(incoming || {})) {
      const have = into[name] || {};
      const merged = {};
      for (const [k, vals] of Object.entries(cols)) {
        const old = have[k] || new Array(len).fill(k.endsWith('_ms') ? null : 0);
        merged[k] = old.concat(vals).slice(-HISTORY);
      }
      out[name] = merged;
    }
    return out;
  }

  function merge(series) {
    if (!series) return;
    const len = state.t.length;
    state.routes = mergeColumns(state.routes, series.routes, len);
    state.limits = mergeColumns(state.limits, series.limits, len);
    state.total = mergeColumns({ all: state.total || {} }, { all: series.total }, len).all;
    state.t = state.t.concat(series.t).slice(-HISTORY);
    state.dt = state.dt.concat(series.interval_ms).slice(-HISTORY);
  }

  const perSecond = (vals) => vals.map((v, i) => (v || 0) * 1000 / (state.dt[i] || 1000));
  const sum = (vals) => vals.reduce((a, b) => a + (b || 0), 0);

  // ---- rendering ----
  function renderHeader(data) {
    const c = data.config;
    const conf = $('conf');
    conf.textContent = '';
    const item = (label, value, cls, title) => {
      const dd = el('dd', { text: value });
      if (cls) dd.className = cls;
      if (title) dd.title = title;
      conf.append(el('div', {}, el('dt', { text: label }), dd));
    };
    item('generation', String(c.generation));
    item('loaded', fmtTime(c.loaded_at) + ' · ' + fmtAgo(data.now_ms - Date.parse(c.loaded_at)), null, c.loaded_at);
    item('config sha256', c.sha256.slice(0, 12), null, c.sha256);
    if (c.last_reload) {
      const ok = c.last_reload.result === 'success';
      item('last reload', (ok ? '✓ ' : '✗ ') + fmtTime(c.last_reload.at), ok ? 'good' : 'bad', c.last_reload.at);
    } else {
      item('last reload', 'none since start');
    }
    item('reloads', fmtInt(c.reloads.success) + ' ok · ' + fmtInt(c.reloads.failure) + ' failed');
    item('store', c.store);
    item('up', fmtAgo(data.now_ms - data.started_ms).replace(' ago', ''));

    const banner = $('banner');
    banner.textContent = '';
    if (data.draining) {
      banner.append(el('strong', { text: 'Draining: ' }), 'this instance is shutting down; /readyz answers 503.');
      banner.classList.remove('hidden');
    } else if (c.last_error) {
      const when = c.last_reload && c.last_reload.result === 'failure' ? ' at ' + fmtTime(c.last_reload.at) : '';
      banner.append(
        el('strong', { text: 'The last reload failed' + when + '; generation ' + c.generation + ' stays in force.' }),
        '\n' + c.last_error);
      banner.classList.remove('hidden');
    } else {
      banner.classList.add('hidden');
    }
  }

  function renderCards(data) {
    const tot = data.total;
    setText($('c-rps'), fmtRate(tot.rps));
    setText($('c-rej'), fmtRate(tot.rejected_ps));
    $('c-rej').className = 'value' + (tot.rejected_ps ? ' amber' : '');
    setText($('c-lock'), fmtRate(tot.locked_out_ps));
    $('c-lock').className = 'value' + (tot.locked_out_ps ? ' red' : '');
    const lk = data.lockouts;
    setText($('c-active'), lk.total === null ? '?' : fmtInt(lk.total));
    const lat = $('c-lat');
    lat.textContent = '';
    lat.append(fmtMs(tot.p50_ms), el('small', { text: ' / ' }), fmtMs(tot.p99_ms));
    const T = state.total || {};
    sparkline($('s-rps'), perSecond(T.requests || []), BLUE);
    sparkline($('s-rej'), perSecond(T.rejected || []), AMBER);
    sparkline($('s-lock'), perSecond(T.locked_out || []), RED);
    sparkline($('s-active'), state.active, PURPLE);
    sparkline($('s-lat'), T.p50_ms || [], BLUE, T.p99_ms || [], PURPLE);
  }

  // The `n` names with the largest sums of `pick(cols)`, and the rest summed.
  function topSeries(table, pick, n) {
    const ranked = Object.entries(table)
      .map(([name, cols]) => ({ name, vals: perSecond(pick(cols)) }))
      .map((s) => ({ ...s, total: sum(s.vals) }))
      .sort((a, b) => b.total - a.total || a.name.localeCompare(b.name));
    const top = ranked.slice(0, n).filter((s, i) => s.total > 0 || i === 0);
    const rest = ranked.slice(top.length).filter((s) => s.total > 0);
    const series = top.map((s, i) => ({ label: s.name || '(no route)', color: PALETTE[i % PALETTE.length], values: s.vals }));
    if (rest.length) {
      const vals = state.t.map((_, i) => rest.reduce((a, s) => a + (s.vals[i] || 0), 0));
      series.push({ label: rest.length + ' more', color: OTHER, values: vals, dash: [4, 3] });
    }
    return series;
  }

  function renderCharts() {
    const T = state.total || {};
    lineChart($('ch-traffic'), state.t, [
      { label: 'requests', color: BLUE, values: perSecond(T.requests || []), fill: true },
      { label: 'rejected', color: AMBER, values: perSecond(T.rejected || []) },
      { label: 'locked out', color: RED, values: perSecond(T.locked_out || []) },
    ]);
    lineChart($('ch-routes'), state.t, topSeries(state.routes, (c) => c.requests, 6));
    lineChart($('ch-limits'), state.t,
      topSeries(state.limits, (c) => c.rejected.map((v, i) => v + (c.locked_out[i] || 0)), 6));
    lineChart($('ch-latency'), state.t, [
      { label: 'p50', color: BLUE, values: T.p50_ms || [] },
      { label: 'p99', color: PURPLE, values: T.p99_ms || [] },
    ], { format: (v) => fmtAxis(v) });
  }

  // Keyed table rows: rows are made once per key and updated in place, so
  // a refresh keeps hover, focus and a pressed button's state.
  function syncRows(tbody, items, key, make, update, emptyText, columns) {
    const rows = tbody._rows || (tbody._rows = new Map());
    const seen = new Set();
    let prev = null;
    for (const item of items) {
      const k = key(item);
      seen.add(k);
      let row = rows.get(k);
      if (!row) { row = make(item); rows.set(k, row); }
      update(row, item);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== row) tbody.insertBefore(row, want);
      prev = row;
    }
    for (const [k, row] of rows) if (!seen.has(k)) { row.remove(); rows.delete(k); }
    let empty = tbody.querySelector('tr.empty');
    if (!items.length && !empty) {
      empty = el('tr', { class: 'empty' }, el('td', { colspan: String(columns), text: emptyText }));
      tbody.append(empty);
    }
    if (items.length && empty) empty.remove();
    else if (empty) setText(empty.firstChild, emptyText);
  }

  function cell(td, text, cls) {
    setText(td, text);
    const want = cls || '';
    if (td.className !== want) td.className = want;
  }

  function sortItems(items, sort) {
    if (!sort) return items;
    const dir = sort.desc ? -1 : 1;
    return items.slice().sort((a, b) => {
      const x = a[sort.key], y = b[sort.key];
      if (typeof x === 'string' || typeof y === 'string') return dir * String(x).localeCompare(String(y));
      return dir * ((x === null ? -1 : x) - (y === null ? -1 : y));
    });
  }

  function renderRoutes(data) {
    const filter = $('route-filter').value.trim().toLowerCase();
    let items = data.routes.map((r) => ({ ...r, limits: r.limits.join(' ') }));
    const all = items.length;
    if (filter) items = items.filter((r) => (r.name || '(no route)').toLowerCase().includes(filter));
    items = sortItems(items, state.sort.routes);
    setText($('routes-count'), filter ? items.length + ' of ' + all : String(all));
    syncRows($('routes').tBodies[0], items, (r) => r.name, () => {
      const tr = el('tr');
      for (let i = 0; i < 11; i++) tr.append(el('td'));
      tr.append(el('td', {}, el('canvas')));
      return tr;
    }, (tr, r) => {
      const td = tr.children;
      cell(td[0], r.name || '(no route)', r.name ? '' : 'dim');
      if (td[1]._v !== r.limits) {
        td[1]._v = r.limits;
        td[1].textContent = '';
        if (!r.limits) td[1].append(el('span', { class: 'muted', text: 'none' }));
        for (const l of r.limits.split(' ').filter(Boolean)) td[1].append(el('span', { class: 'tag', text: l }));
      }
      cell(td[2], fmtRate(r.rps), r.rps ? 'num' : 'num zero');
      cell(td[3], fmtRate(r.rejected_ps), r.rejected_ps ? 'num amber' : 'num zero');
      cell(td[4], fmtRate(r.locked_out_ps), r.locked_out_ps ? 'num red' : 'num zero');
      cell(td[5], fmtMs(r.p50_ms), 'num');
      cell(td[6], fmtMs(r.p99_ms), 'num');
      cell(td[7], fmtInt(r.requests), 'num');
      cell(td[8], fmtInt(r.rejected), r.rejected ? 'num' : 'num zero');
      cell(td[9], fmtInt(r.locked_out), r.locked_out ? 'num' : 'num zero');
      cell(td[10], fmtInt(r.auth_failures), r.auth_failures ? 'num amber' : 'num zero');
      const s = state.routes[r.name];
      if (s) sparkline(td[11].firstChild, perSecond(s.requests), BLUE,
        perSecond(s.rejected.map((v, i) => v + (s.locked_out[i] || 0))), RED, TABLE_SPARK);
    }, filter ? 'No route matches the filter.' : 'No routes.', 12);
  }

  function renderLimits(data) {
    let items = data.limits.map((l) => ({
      ...l,
      allowed: l.decisions.allowed, rejected: l.decisions.rejected, locked_out: l.decisions.locked_out,
      allowed_ps: l.rates.allowed, rejected_ps: l.rates.rejected, locked_out_ps: l.rates.locked_out,
    }));
    items = sortItems(items, state.sort.limits);
    setText($('limits-count'), String(items.length));
    syncRows($('limits').tBodies[0], items, (l) => l.name, () => {
      const tr = el('tr');
      for (let i = 0; i < 10; i++) tr.append(el('td'));
      tr.append(el('td', {}, el('canvas')));
      return tr;
    }, (tr, l) => {
      const td = tr.children;
      cell(td[0], l.name);
      cell(td[1], (l.algorithm || '?') + (l.shadow ? ' (shadow)' : '') + (l.lockout ? ' + lockout' : ''), 'dim');
      cell(td[2], fmtRate(l.allowed_ps), l.allowed_ps ? 'num' : 'num zero');
      cell(td[3], fmtRate(l.rejected_ps), l.rejected_ps ? 'num amber' : 'num zero');
      cell(td[4], fmtRate(l.locked_out_ps), l.locked_out_ps ? 'num red' : 'num zero');
      cell(td[5], fmtInt(l.allowed), 'num');
      cell(td[6], fmtInt(l.rejected), l.rejected ? 'num' : 'num zero');
      cell(td[7], fmtInt(l.locked_out), l.locked_out ? 'num' : 'num zero');
      cell(td[8], fmtInt(l.lockouts), l.lockouts ? 'num' : 'num zero');
      cell(td[9], l.locked_now === null ? '?' : fmtInt(l.locked_now), l.locked_now ? 'num red' : 'num zero');
      const s = state.limits[l.name];
      if (s) sparkline(td[10].firstChild, perSecond(s.allowed), BLUE,
        perSecond(s.rejected.map((v, i) => v + (s.locked_out[i] || 0))), RED, TABLE_SPARK);
    }, 'No limits in this config.', 11);
  }

  function renderLockouts(data) {
    const lk = data.lockouts;
    const select = $('lock-limit');
    const names = data.limits.filter((l) => l.lockout).map((l) => l.name);
    for (const name of Object.keys(lk.by_limit || {})) if (!names.includes(name)) names.push(name);
    const have = Array.from(select.options).slice(1).map((o) => o.value);
    if (have.join('\n') !== names.join('\n')) {
      const keep = select.value;
      while (select.options.length > 1) select.remove(1);
      for (const n of names) select.append(el('option', { value: n, text: n || '(unknown limit)' }));
      select.value = names.includes(keep) ? keep : '';
    }
    for (const opt of Array.from(select.options).slice(1)) {
      const n = (lk.by_limit || {})[opt.value] || 0;
      setText(opt, (opt.value || '(unknown limit)') + ' (' + fmtInt(n) + ')');
    }

    const now = Date.now();
    for (const [k, at] of state.unlocked) if (now - at > 5000) state.unlocked.delete(k);
    const items = lk.items.filter((l) => !state.unlocked.has(l.limit + '\t' + l.key));
    if (lk.error) {
      setText($('lock-count'), '?');
      setText($('lock-note'), 'The limit store did not answer: ' + lk.error);
    } else {
      setText($('lock-count'), fmtInt(lk.total));
      const filtered = $('lock-limit').value || $('lock-key').value.trim();
      let note = '';
      if (lk.matching > lk.shown) {
        note = 'Showing the ' + fmtInt(lk.shown) + ' with the longest time left of ' + fmtInt(lk.matching) +
          (filtered ? ' matching' : '') + '. Filter by limit or key to find others.';
      } else if (filtered) {
        note = fmtInt(lk.matching) + ' of ' + fmtInt(lk.total) + ' match.';
      }
      setText($('lock-note'), note);
    }
    syncRows($('lockouts').tBodies[0], items, (l) => l.limit + '\t' + l.key, (l) => {
      const button = el('button', { type: 'button', class: 'unlock', text: 'Unlock' });
      button.addEventListener('click', () => unlock(l.limit, l.key, button));
      if (!l.known) {
        button.disabled = true;
        button.title = 'No instance recorded who this is; it unlocks when the lock ends.';
      } else {
        button.title = 'DELETE /limits/' + l.limit + '/' + l.key;
        button.setAttribute('aria-label', 'Unlock ' + l.key + ' on ' + l.limit);
      }
      const tr = el('tr', {}, el('td'), el('td', { class: 'key' }), el('td', { class: 'num' }), el('td', { class: 'num' }, button));
      tr.dataset.limit = l.limit;
      tr.dataset.key = l.key;
      return tr;
    }, (tr, l) => {
      const td = tr.children;
      cell(td[0], l.limit || '(unknown)', l.limit ? '' : 'dim');
      cell(td[1], l.key, 'key');
      td[1].title = l.key;
      cell(td[2], fmtDuration(l.remaining_ms), 'num');
    }, lk.error ? '' : (lk.total ? 'No lockout matches the filter.' : 'No client is locked out.'), 4);
  }

  // Per limit, the clients rejected most in the last ten minutes (GET /top),
  // most rejected first across limits.
  function renderTop(data) {
    const items = [];
    const limits = (data.top && data.top.limits) || {};
    for (const [limit, list] of Object.entries(limits)) {
      for (const o of list) items.push({ limit, ...o });
    }
    items.sort((a, b) => b.rejected - a.rejected || a.limit.localeCompare(b.limit) || a.key.localeCompare(b.key));
    setText($('top-count'), items.length ? String(items.length) : '');
    syncRows($('top').tBodies[0], items, (o) => o.limit + '\t' + o.key, (o) => {
      const tr = el('tr');
      for (let i = 0; i < 4; i++) tr.append(el('td'));
      tr.dataset.limit = o.limit;
      tr.dataset.key = o.key;
      return tr;
    }, (tr, o) => {
      const td = tr.children;
      cell(td[0], o.limit);
      cell(td[1], o.key, 'key');
      td[1].title = o.key;
      cell(td[2], fmtInt(o.rejected), 'num');
      cell(td[3], o.error ? fmtInt(o.error) : '', 'num dim');
    }, 'No client was rejected in the last 10 minutes.', 4);
  }

  // The configured consumers (never a key): who may be verified, and how.
  function renderConsumers(data) {
    const items = (data.consumers && data.consumers.consumers) || [];
    setText($('consumers-count'), items.length ? String(items.length) : '');
    syncRows($('consumers').tBodies[0], items, (c) => c.name, () => {
      const tr = el('tr');
      for (let i = 0; i < 5; i++) tr.append(el('td'));
      return tr;
    }, (tr, c) => {
      const td = tr.children;
      cell(td[0], c.name, 'key');
      cell(td[1], c.tenant || '', c.tenant ? '' : 'dim');
      cell(td[2], c.plan || '', c.plan ? '' : 'dim');
      cell(td[3], c.credentials.join(', '), 'dim');
      cell(td[4], fmtInt(c.api_keys), c.api_keys ? 'num' : 'num zero');
    }, 'No consumers in this config.', 5);
  }

  // One row per target: its health, why it is down, since when.
  function renderUpstreams(data) {
    const items = [];
    let up = 0;
    for (const u of data.upstreams || []) {
      const checks = [u.passive && 'passive', u.active && 'active ' + u.active.path].filter(Boolean).join(', ');
      for (const t of u.targets) {
        items.push({ upstream: u.name, checks, ...t });
        if (t.healthy) up++;
      }
    }
    setText($('upstreams-count'), items.length ? up + ' of ' + items.length + ' up' : '');
    syncRows($('upstreams').tBodies[0], items, (t) => t.upstream + '\t' + t.url, (t) => {
      const tr = el('tr');
      for (let i = 0; i < 8; i++) tr.append(el('td'));
      tr.dataset.upstream = t.upstream;
      tr.dataset.target = t.url;
      return tr;
    }, (tr, t) => {
      const td = tr.children;
      cell(td[0], t.upstream);
      cell(td[1], t.url, 'key');
      cell(td[2], t.state, t.healthy ? 'green' : 'red');
      cell(td[3], fmtAgo(data.now_ms - Date.parse(t.since)));
      td[3].title = t.since;
      cell(td[4], t.why || '', 'dim');
      cell(td[5], fmtInt(t.in_flight), t.in_flight ? 'num' : 'num zero');
      cell(td[6], fmtInt(t.weight), 'num');
      cell(td[7], t.checks || 'none', 'dim');
    }, 'No upstreams in this config.', 8);
  }

  async function unlock(limit, key, button) {
    button.disabled = true;
    button.textContent = 'Unlocking…';
    try {
      const r = await api('DELETE', '/limits/' + encodeURIComponent(limit) + '/' + encodeURIComponent(key));
      const body = await r.json().catch(() => ({}));
      if (!r.ok) throw new Error(body.message || body.error || ('HTTP ' + r.status));
      state.unlocked.set(limit + '\t' + key, Date.now());
      const row = button.closest('tr');
      if (row) row.remove();
      const rows = $('lockouts').tBodies[0]._rows;
      if (rows) rows.delete(limit + '\t' + key);
      toast('Unlocked ' + key + ' on ' + limit + '.', true);
      poll();
    } catch (e) {
      button.disabled = false;
      button.textContent = 'Unlock';
      if (e.message !== 'unauthorized') toast('Could not unlock ' + key + ': ' + e.message, false);
    }
  }

  function render(data) {
    renderHeader(data);
    renderCards(data);
    renderCharts();
    renderRoutes(data);
    renderLimits(data);
    renderUpstreams(data);
    renderConsumers(data);
    renderTop(data);
    renderLockouts(data);
  }

  // ---- polling ----
  let timer = null;
  let inFlight = false;
  let again = false;

  function setLive(text, cls) {
    const live = $('live');
    setText(live, text);
    live.className = 'pill ' + (cls || '');
  }

  async function poll() {
    clearTimeout(timer);
    if (inFlight) { again = true; return; }
    inFlight = true;
    const params = new URLSearchParams({ since: String(state.seq), lockouts: String(LOCKOUTS_SHOWN) });
    const limit = $('lock-limit').value, key = $('lock-key').value.trim();
    if (limit) params.set('limit', limit);
    if (key) params.set('key', key);
    try {
      const r = await api('GET', '/api/stats?' + params);
      if (!r.ok) throw new Error('HTTP ' + r.status);
      const data = await r.json();
      if (data.seq < state.seq) {
        // The gateway restarted: start the history again.
        resetSeries();
        again = true;
      } else {
        merge(data.series);
        state.seq = data.seq;
      }
      state.active = state.active.concat([data.lockouts.total || 0]).slice(-HISTORY);
      state.last = data;
      state.failures = 0;
      render(data);
      setLive(state.paused ? 'paused' : 'live', state.paused ? '' : 'live');
    } catch (e) {
      state.failures++;
      if (e.message !== 'unauthorized') setLive('no answer: retrying', 'stale');
    } finally {
      inFlight = false;
      if (again) { again = false; timer = setTimeout(poll, 0); }
      else if (!state.paused) timer = setTimeout(poll, state.failures ? Math.min(POLL_MS * 2 ** state.failures, 10000) : POLL_MS);
    }
  }

  // ---- controls ----
  $('pause').addEventListener('click', () => {
    state.paused = !state.paused;
    $('pause').textContent = state.paused ? 'Resume' : 'Pause';
    if (state.paused) { clearTimeout(timer); setLive('paused', ''); } else poll();
  });
  $('reload').addEventListener('click', async () => {
    const button = $('reload');
    button.disabled = true;
    try {
      const r = await api('POST', '/reload');
      const body = await r.json().catch(() => ({}));
      if (r.ok) toast('Reloaded: generation ' + body.generation + '.', true);
      else toast('Reload failed: ' + (body.error || 'HTTP ' + r.status), false);
    } catch (e) {
      if (e.message !== 'unauthorized') toast('Reload failed: ' + e.message, false);
    } finally {
      button.disabled = false;
      poll();
    }
  });
  $('route-filter').addEventListener('input', () => { if (state.last) renderRoutes(state.last); });
  let keyTimer = null;
  $('lock-key').addEventListener('input', () => { clearTimeout(keyTimer); keyTimer = setTimeout(() => poll(), 250); });
  $('lock-limit').addEventListener('change', () => poll());
  for (const table of ['routes', 'limits']) {
    for (const th of $(table).querySelectorAll('th[data-key]')) {
      th.addEventListener('click', () => {
        const cur = state.sort[table];
        const k = th.dataset.key;
        const textual = k === 'name' || k === 'limits' || k === 'algorithm';
        let next;
        if (!cur || cur.key !== k) next = { key: k, desc: !textual };
        else if (cur.desc !== textual) next = { key: k, desc: !cur.desc };
        else next = null; // third click: back to config order
        state.sort[table] = next;
        for (const other of $(table).querySelectorAll('th')) other.classList.remove('sorted-asc', 'sorted-desc');
        if (next) th.classList.add(next.desc ? 'sorted-desc' : 'sorted-asc');
        if (state.last) (table === 'routes' ? renderRoutes : renderLimits)(state.last);
      });
    }
  }
  let resizeTimer = null;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (state.last) render(state.last); }, 100);
  });

  poll();
})();
