// The console's pages: one plain ES module, no framework, no build. Every
// value from the API goes into the page as text (textContent), never as
// HTML. Paths are relative ('api/...'), so the page works wherever the
// handler is mounted.

const main = document.getElementById('main');
const REFRESH_MS = 10_000;
let session;
/** Bumped on every navigation: a slow answer for a page left behind is dropped. */
let generation = 0;
let refreshTimer;

// ---- small helpers ------------------------------------------------------

function h(tag, attrs = {}, ...children) {
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

async function api(path, init = {}) {
  const response = await fetch(path, { credentials: 'same-origin', ...init });
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) {
    const error = new Error(body.error ?? `HTTP ${response.status}`);
    Object.assign(error, { status: response.status, body });
    throw error;
  }
  return body;
}

const post = (path, body) =>
  api(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-csrf-token': session.csrfToken },
    body: JSON.stringify(body),
  });

const num = (n) => Number(n).toLocaleString('en-US');
const pad = (n) => String(n).padStart(2, '0');

function time(value) {
  if (value === null || value === undefined) return '—';
  const d = new Date(value);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function age(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3600)} h`;
}

const eventLink = (id) => h('a', { href: `#/event/${id}`, class: 'mono' }, id.slice(0, 8));
const aggregateLink = (type, id) =>
  h('a', { href: `#/aggregate/${encodeURIComponent(type)}/${encodeURIComponent(id)}` }, `${type}/${id}`);
const badge = (state) => h('span', { class: `badge state-${state}` }, state);

function table(headers, rows, empty) {
  if (rows.length === 0) return h('p', { class: 'muted' }, empty);
  return h(
    'table',
    {},
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows),
  );
}

function render(...children) {
  main.replaceChildren(...children);
}

function showError(error) {
  render(
    h('h1', {}, 'Something went wrong'),
    h('p', { class: 'error' }, error.message),
    error.status === 401 ? h('p', {}, 'Open the URL the console printed again (it carries the token).') : null,
  );
}

// ---- confirm dialog -----------------------------------------------------

function confirmDialog(title, text, okLabel) {
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
async function act(name, filter, what, status) {
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
      const text = `This will ${name} ${num(count)} ${what}${busyNote}. The action is audited as ${session.actor ?? 'the console'}.`;
      const verb = `${name[0].toUpperCase()}${name.slice(1)} ${num(count)}`;
      if (!(await confirmDialog(`${verb}?`, text, verb))) return say('Cancelled.');
      try {
        const done = await post(`api/actions/${name}`, { ...filter, confirm: count });
        const changed = done.audit?.changed ?? 0;
        say(`Done: ${num(changed)} ${name === 'replay' ? 'replayed' : name === 'redrive' ? 'redriven' : 'discarded'} by ${done.audit?.actor}.`, 'ok');
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

function chart(el, series, bucketSeconds) {
  const perMinute = bucketSeconds / 60;
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
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [
        { stroke: '#5b6472', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#dde1e6' } },
        { stroke: '#5b6472', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#dde1e6' }, size: 56 },
      ],
      series: [
        {},
        { label: 'published / min', stroke: '#2e7d5b', fill: 'rgba(46,125,91,0.10)', width: 1.5, points: { show: false } },
        { label: 'dead-lettered / min', stroke: '#c0392b', width: 1.5, points: { show: false } },
      ],
    },
    data,
    el,
  );
  return plot;
}

// ---- pages ----------------------------------------------------------------

function card(label, value, note, tone = '') {
  return h('div', { class: `card ${tone}` }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value), h('div', { class: 'note' }, note ?? ''));
}

async function overview(gen) {
  const [o, day] = await Promise.all([api('api/overview'), api('api/throughput?window=day')]);
  if (gen !== generation) return;
  const recent = o.perMinute.minutes.slice(-5).reduce((n, m) => n + m.published, 0);
  const waiting = o.waitingForTargets;
  const targets = table(
    ['Target', 'State', 'Waiting events', 'Next try'],
    waiting.targets.map((t) =>
      h('tr', {}, h('td', { class: 'mono' }, t.target), h('td', {}, badge('held')), h('td', { class: 'num' }, num(t.events)), h('td', {}, time(t.nextTryAt))),
    ),
    'No event waits for a target: every target the relay tried lately accepted its events.',
  );
  const hourBox = h('div', { class: 'chart' });
  const dayBox = h('div', { class: 'chart' });
  render(
    h('h1', {}, 'Overview'),
    h(
      'section',
      { class: 'cards', 'data-testid': 'cards' },
      card('Pending', num(o.pending), `${num(o.leased)} leased · ${num(o.backingOff)} backing off`),
      card('Oldest pending', o.pending ? age(o.oldestPendingAgeSeconds) : '—', 'since it was asked to go out', o.oldestPendingAgeSeconds > 300 ? 'warn' : ''),
      card('Dead letters', num(o.deadLetters), h('a', { href: '#/dead-letters' }, 'by cause →'), o.deadLetters > 0 ? 'bad' : ''),
      card('Blocked aggregates', num(o.blockedAggregates), 'held behind a dead letter', o.blockedAggregates > 0 ? 'warn' : ''),
      card('Relays running', num(o.relays.running), `relay slots held now${o.relays.closedSlots ? ` · ${o.relays.closedSlots} closed` : ''}`),
      card('Published', num(recent), 'in the last 5 minutes'),
    ),
    h(
      'section',
      {},
      h('h2', {}, 'Targets'),
      targets,
      h(
        'p',
        { class: 'muted small' },
        'A target is "held" while events wait for it: the relay found it unavailable and backs off the target as a whole, probing it at the next try. The relay keeps its breaker in memory; this is what the rows say.',
        waiting.capped ? ` Counted among the first ${num(waiting.scanned)} backing-off events.` : '',
      ),
    ),
    h(
      'section',
      { class: 'charts' },
      h('div', {}, h('h2', {}, 'Last hour'), h('p', { class: 'muted small' }, 'events per minute'), hourBox),
      h('div', {}, h('h2', {}, 'Last day'), h('p', { class: 'muted small' }, 'events per minute, 15-minute averages', day.series.some((b) => b.estimated) ? ' (estimated past 500 events a quarter hour)' : ''), dayBox),
    ),
    h('p', { class: 'muted small', id: 'updated' }, `Updated ${time(o.at)}; refreshes every ${REFRESH_MS / 1000} s.`),
  );
  chart(hourBox, o.perMinute.minutes, 60);
  chart(dayBox, day.series, day.bucketSeconds);
  main.dataset.ready = 'overview';
  refreshTimer = setTimeout(() => gen === generation && overview(gen).catch(showError), REFRESH_MS);
}

async function deadLetterGroups(gen) {
  const { groups, scanned, capped } = await api('api/dead-letters/groups');
  if (gen !== generation) return;
  render(
    h('h1', {}, 'Dead letters by cause'),
    h('p', { class: 'muted' }, `${num(scanned)} dead letters ${capped ? '(the newest) ' : ''}in ${groups.length} group${groups.length === 1 ? '' : 's'}: event type, target and error class.`),
    table(
      ['Count', 'Event type', 'Target', 'Error class', 'Newest', 'Example'],
      groups.map((g) =>
        h(
          'tr',
          { class: 'group', 'data-group': g.id },
          h('td', { class: 'num' }, h('a', { href: `#/group/${g.id}` }, num(g.count))),
          h('td', {}, h('a', { href: `#/group/${g.id}` }, g.eventType)),
          h('td', { class: 'mono' }, g.target ?? '—'),
          h('td', {}, g.errorClass),
          h('td', {}, time(g.newestDeadLetteredAt)),
          h('td', { class: 'clip' }, g.example),
        ),
      ),
      'No dead letters.',
    ),
  );
  main.dataset.ready = 'dead-letters';
}

async function group(gen, id) {
  const [{ groups }, list] = await Promise.all([api('api/dead-letters/groups'), api(`api/dead-letters?group=${id}&limit=200`)]);
  if (gen !== generation) return;
  const g = groups.find((x) => x.id === id);
  const status = h('p', { class: 'status', role: 'status' });
  const boxes = [];
  const selected = () => boxes.filter((b) => b.checked).map((b) => b.value);
  const rows = list.rows.map((r) => {
    const box = h('input', { type: 'checkbox', value: r.id, 'aria-label': `select ${r.id}` });
    boxes.push(box);
    return h(
      'tr',
      {},
      session.allowActions ? h('td', {}, box) : null,
      h('td', {}, eventLink(r.id)),
      h('td', {}, aggregateLink(r.aggregateType, r.aggregateId)),
      h('td', { class: 'num' }, r.attempts),
      h('td', {}, time(r.deadLetteredAt)),
      h('td', { class: 'num' }, r.redriveCount),
      h('td', { class: 'clip' }, r.lastError ?? ''),
    );
  });
  const refresh = () => route();
  const run = async (name, filter, what) => (await act(name, filter, what, status)) && setTimeout(refresh, 1500);
  const actions = session.allowActions
    ? h(
        'div',
        { class: 'actions' },
        h('button', { type: 'button', class: 'primary', onclick: () => run('redrive', { group: id }, 'dead letters of this group') }, 'Redrive group'),
        h('button', { type: 'button', class: 'danger', onclick: () => run('discard', { group: id }, 'dead letters of this group (never published)') }, 'Discard group'),
        h('button', { type: 'button', onclick: () => selected().length && run('redrive', { ids: selected() }, 'selected dead letters') }, 'Redrive selected'),
        h('button', { type: 'button', onclick: () => selected().length && run('discard', { ids: selected() }, 'selected dead letters (never published)') }, 'Discard selected'),
      )
    : h('p', { class: 'muted small' }, 'Read-only: start the console with --allow-actions to redrive or discard.');
  render(
    h('p', {}, h('a', { href: '#/dead-letters' }, '← Dead letters')),
    h('h1', {}, g ? `${g.eventType}: ${g.errorClass}` : 'Group'),
    g ? h('p', { class: 'muted' }, `${num(g.count)} dead letters${g.target ? ` · target ${g.target}` : ''} · ${time(g.oldestDeadLetteredAt)} to ${time(g.newestDeadLetteredAt)}`) : h('p', { class: 'muted' }, 'This group has no dead letters left.'),
    actions,
    status,
    table(
      [session.allowActions ? '' : null, 'Event', 'Aggregate', 'Attempts', 'Dead-lettered', 'Redriven', 'Last error'].filter((x) => x !== null),
      rows,
      'No dead letters in this group.',
    ),
    list.total > list.rows.length ? h('p', { class: 'muted small' }, `The first ${list.rows.length} of ${num(list.total)}.`) : null,
  );
  main.dataset.ready = 'group';
}

function fields(pairs) {
  return h('dl', { class: 'fields' }, pairs.filter(([, v]) => v !== undefined).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]));
}

async function eventPage(gen, id) {
  const e = await api(`api/events/${id}`);
  if (gen !== generation) return;
  const status = h('p', { class: 'status', role: 'status' });
  const action =
    session.allowActions && e.state === 'dead-letter'
      ? h('button', { type: 'button', class: 'primary', onclick: () => act('redrive', { ids: [e.id] }, 'dead letter', status).then((d) => d && route()) }, 'Redrive')
      : session.allowActions && e.state === 'published'
        ? h('button', { type: 'button', onclick: () => act('replay', { ids: [e.id] }, 'published event', status).then((d) => d && route()) }, 'Replay')
        : null;
  render(
    h('h1', {}, e.eventType, ' ', badge(e.state)),
    h('p', { class: 'mono muted' }, e.id),
    h('div', { class: 'actions' }, action),
    status,
    fields([
      ['Aggregate', aggregateLink(e.aggregateType, e.aggregateId)],
      ['Sequence', e.seq],
      ['Attempts', e.attempts],
      ['Created', time(e.createdAt)],
      ['Retry after', time(e.retryAfter)],
      ['Published', time(e.processedAt)],
      ['First published', time(e.firstProcessedAt)],
      ['Dead-lettered', time(e.deadLetteredAt)],
      ['Redriven', e.redriveCount ? `${e.redriveCount}× (last ${time(e.redrivenAt)})` : '—'],
      ['Replayed', e.replayCount ? `${e.replayCount}× (last ${time(e.replayedAt)})` : '—'],
      ['Discarded', e.discardedAt ? `${time(e.discardedAt)} by ${e.discardedBy ?? '?'}` : '—'],
      ['Delivered to', e.deliveredTargets?.length ? e.deliveredTargets.join(', ') : '—'],
      ['Waiting for', e.waitingFor?.length ? e.waitingFor.join(', ') : '—'],
      ['Payload size', e.payloadBytes === null ? '—' : `${num(e.payloadBytes)} bytes`],
    ]),
    h('h2', {}, 'Last error'),
    h('pre', {}, e.lastError ?? '—'),
    h('h2', {}, 'Headers'),
    h('pre', {}, JSON.stringify(e.headers ?? {}, null, 2)),
    h('h2', {}, 'Payload'),
    e.payloadHidden ? h('p', { class: 'muted', 'data-testid': 'payload-hidden' }, 'Hidden: start the console with --show-payloads to see payloads (they may hold personal data).') : h('pre', { class: 'wrap' }, e.payload ?? '—'),
  );
  main.dataset.ready = 'event';
}

async function timeline(gen, type, id) {
  const t = await api(`api/aggregates/${encodeURIComponent(type)}/${encodeURIComponent(id)}/timeline`);
  if (gen !== generation) return;
  render(
    h('h1', {}, `Aggregate ${type}/${id}`),
    h('p', { class: 'muted small' }, `Its events in order (at most ${t.limit}); published and discarded ones among the newest ${num(t.finishedScope)} finished events.`),
    table(
      ['Seq', 'Event', 'Type', 'State', 'Attempts', 'Created', 'Published', 'Last error'],
      t.events.map((e) =>
        h('tr', {}, h('td', { class: 'num' }, e.seq), h('td', {}, eventLink(e.id)), h('td', {}, e.eventType), h('td', {}, badge(e.state)), h('td', { class: 'num' }, e.attempts), h('td', {}, time(e.createdAt)), h('td', {}, time(e.processedAt)), h('td', { class: 'clip' }, e.lastError ?? '')),
      ),
      'No events found for this aggregate.',
    ),
  );
  main.dataset.ready = 'timeline';
}

function replayPage() {
  const input = (name, label, type = 'text', extra = {}) => h('label', {}, label, h('input', { name, type, ...extra }));
  const form = h(
    'div',
    { class: 'form' },
    input('eventType', 'Event type'),
    input('aggregateType', 'Aggregate type'),
    input('aggregateId', 'Aggregate id'),
    input('publishedAfter', 'Published from', 'datetime-local', { step: 1 }),
    input('publishedBefore', 'Published before', 'datetime-local', { step: 1 }),
    input('limit', 'At most', 'number', { min: 1, value: 100 }),
  );
  const status = h('p', { class: 'status', role: 'status' });
  const filter = () => {
    const out = {};
    for (const el of form.querySelectorAll('input')) {
      if (el.value === '') continue;
      out[el.name] = el.type === 'datetime-local' ? new Date(el.value).toISOString() : el.type === 'number' ? Number(el.value) : el.value;
    }
    return out;
  };
  render(
    h('h1', {}, 'Replay published events'),
    h('p', { class: 'muted' }, 'Sends published events again, oldest first (consumers skip what they processed already unless they handle replays). Recorded in outbox_replays with who asked.'),
    form,
    session.allowActions
      ? h('div', { class: 'actions' }, h('button', { type: 'button', class: 'primary', onclick: () => act('replay', filter(), 'published events', status) }, 'Replay…'))
      : h('p', { class: 'muted small' }, 'Read-only: start the console with --allow-actions to replay.'),
    status,
  );
  main.dataset.ready = 'replay';
}

// ---- routing ----------------------------------------------------------------

async function route() {
  const gen = ++generation;
  clearTimeout(refreshTimer);
  delete main.dataset.ready;
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  for (const a of document.querySelectorAll('nav a')) {
    a.classList.toggle('active', a.dataset.nav === (parts[0] || 'overview') || (parts[0] === 'group' && a.dataset.nav === 'dead-letters'));
  }
  try {
    if (parts[0] === 'dead-letters') await deadLetterGroups(gen);
    else if (parts[0] === 'group' && parts[1]) await group(gen, parts[1]);
    else if (parts[0] === 'event' && parts[1]) await eventPage(gen, parts[1]);
    else if (parts[0] === 'aggregate' && parts.length >= 3) await timeline(gen, parts[1], parts.slice(2).join('/'));
    else if (parts[0] === 'replay') replayPage();
    else await overview(gen);
  } catch (error) {
    if (gen === generation) showError(error);
  }
}

async function start() {
  try {
    session = await api('api/session');
  } catch (error) {
    return showError(error);
  }
  document.getElementById('mode').replaceChildren(
    h('span', { class: `pill ${session.allowActions ? 'live' : ''}` }, session.allowActions ? 'actions allowed' : 'read-only'),
    h('span', { class: 'pill' }, session.showPayloads ? 'payloads shown' : 'payloads hidden'),
    ...(session.schema ? [h('span', { class: 'pill' }, `schema ${session.schema}`)] : []),
  );
  window.addEventListener('hashchange', route);
  await route();
}

start();
