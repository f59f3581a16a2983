// The console's building blocks: elements, API calls, formats, the confirm
// dialog, actions and charts. Every value from the API goes into the page as
// text (text nodes), never as HTML. Paths are relative ('api/...'), so the
// pages work wherever the handler is mounted.

export const main = document.getElementById('main');
/** GET /api/session's answer, once the page has it. */
export const state = { session: undefined };

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export async function api(path, init = {}) {
  const response = await fetch(path, { credentials: 'same-origin', ...init });
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) {
    const error = new Error(body.error ?? `HTTP ${response.status}`);
    Object.assign(error, { status: response.status, body });
    throw error;
  }
  return body;
}

export const post = (path, body) =>
  api(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-csrf-token': state.session.csrfToken },
    body: JSON.stringify(body),
  });

export const num = (n) => Number(n).toLocaleString('en-US');
export const plural = (n, one, many = `${one}s`) => `${num(n)} ${n === 1 ? one : many}`;
const pad = (n) => String(n).padStart(2, '0');

export function time(value) {
  if (value === null || value === undefined) return '—';
  const d = new Date(value);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function age(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3600)} h`;
}

export const eventLink = (id) => h('a', { href: `#/event/${id}`, class: 'mono' }, id.slice(0, 8));
export const aggregateLink = (type, id) =>
  h('a', { href: `#/aggregate/${encodeURIComponent(type)}/${encodeURIComponent(id)}` }, `${type}/${id}`);
export const badge = (state) => h('span', { class: `badge state-${state}` }, state);

export function table(headers, rows, empty) {
  if (rows.length === 0) return h('p', { class: 'muted' }, empty);
  return h(
    'table',
    {},
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headers.map((x) => h('th', {}, x)),
      ),
    ),
    h('tbody', {}, rows),
  );
}

export function render(...children) {
  main.replaceChildren(...children.filter((c) => c !== null && c !== undefined && c !== false));
}

export function showError(error) {
  render(
    h('h1', {}, 'Something went wrong'),
    h('p', { class: 'error' }, error.message),
    error.status === 401
      ? h('p', {}, 'Open the URL the console printed again (it carries the token).')
      : null,
  );
}

// ---- confirm dialog -----------------------------------------------------

export function confirmDialog(title, text, okLabel) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const ok = document.getElementById('confirm-ok');
  const cancel = document.getElementById('confirm-cancel');
  ok.textContent = okLabel;
  return new Promise((resolve) => {
    const done = (answer) => {
      ok.onclick = null;
      cancel.onclick = null;
      dialog.onclose = null;
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    ok.onclick = () => done(true);
    cancel.onclick = () => done(false);
    dialog.onclose = () => done(false);
    dialog.showModal();
  });
}

/**
 * An action as the API runs it: the dry run says how many rows it touches,
 * the operator confirms that count, the action runs on exactly those rows
 * (409: the selection changed, asked again with the new count).
 */
export async function act(name, filter, what, status) {
  const say = (text, cls = '') => {
    status.className = `status ${cls}`;
    status.textContent = text;
  };
  try {
    say('Counting (dry run)…');
    let { count, busy } = await post(`api/actions/${name}`, { ...filter, dryRun: true });
    for (;;) {
      if (count === 0) return say(`Nothing to ${name}: the dry run selects no rows.`);
      const busyNote = busy ? ` (${num(busy)} more are busy: a relay holds their aggregate; left alone)` : '';
      const text = `This will ${name} ${num(count)} ${count === 1 ? what.replace(/dead letters|events/, (w) => w.slice(0, -1)) : what}${busyNote}. The action is audited as ${state.session.actor ?? 'the console'}.`;
      const verb = `${name[0].toUpperCase()}${name.slice(1)} ${num(count)}`;
      if (!(await confirmDialog(`${verb}?`, text, verb))) return say('Cancelled.');
      try {
        const done = await post(`api/actions/${name}`, { ...filter, confirm: count });
        const changed = done.audit?.changed ?? 0;
        say(
          `Done: ${num(changed)} ${name === 'replay' ? 'replayed' : name === 'redrive' ? 'redriven' : 'discarded'} by ${done.audit?.actor}.`,
          'ok',
        );
        return done;
      } catch (error) {
        if (error.status !== 409) throw error;
        ({ count } = error.body);
        busy = 0;
      }
    }
  } catch (error) {
    say(error.message, 'error');
  }
}

// ---- charts ---------------------------------------------------------------

/** Events per minute, one line each for published and dead-lettered; the bucket still filling (the last) is left out. */
export function chart(el, buckets, bucketSeconds) {
  const perMinute = bucketSeconds / 60;
  const series = buckets.slice(0, -1);
  const data = [
    series.map((b) => Date.parse(b.start ?? b.minute) / 1000),
    series.map((b) => b.published / perMinute),
    series.map((b) => b.deadLettered / perMinute),
  ];
  const width = Math.max(320, el.clientWidth - 8);
  const plot = new window.uPlot(
    {
      width,
      height: 190,
      cursor: { drag: { x: false, y: false } },
      legend: { live: false },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [
        { stroke: '#5b6472', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#dde1e6' } },
        { stroke: '#5b6472', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#dde1e6' }, size: 56 },
      ],
      series: [
        {},
        {
          label: 'published / min',
          stroke: '#2e7d5b',
          fill: 'rgba(46,125,91,0.10)',
          width: 1.5,
          points: { show: false },
        },
        { label: 'dead-lettered / min', stroke: '#c0392b', width: 1.5, points: { show: false } },
      ],
    },
    data,
    el,
  );
  return plot;
}
