// The console's pages and their routing (#/, #/dead-letters, #/group/<id>,
// #/event/<id>, #/aggregate/<type>/<id>, #/replay): a plain ES module, no
// framework, no build.

import {
  act,
  age,
  aggregateLink,
  api,
  badge,
  chart,
  eventLink,
  h,
  main,
  num,
  plural,
  render,
  showError,
  state,
  table,
  time,
} from './ui.js';

const REFRESH_MS = 10_000;
let session;
/** Bumped on every navigation: a slow answer for a page left behind is dropped. */
let generation = 0;
let refreshTimer;
/** What the last action did, shown on the page it re-renders. */
let flash;

/** The page's status line; it carries the last action's outcome once. */
function statusLine() {
  const line = h('p', { class: `status ${flash ? 'ok' : ''}`, role: 'status' }, flash ?? '');
  flash = undefined;
  return line;
}

/** Runs an action from a page; once done, the page is drawn again with the outcome. */
async function actThenReload(name, filter, what, status) {
  const done = await act(name, filter, what, status);
  if (done) {
    flash = status.textContent;
    await route();
  }
}

// ---- pages ----------------------------------------------------------------

function card(label, value, note, tone = '') {
  return h(
    'div',
    { class: `card ${tone}` },
    h('div', { class: 'label' }, label),
    h('div', { class: 'value' }, value),
    h('div', { class: 'note' }, note ?? ''),
  );
}

async function overview(gen) {
  const [o, day] = await Promise.all([api('api/overview'), api('api/throughput?window=day')]);
  if (gen !== generation) return;
  const recent = o.perMinute.minutes.slice(-5).reduce((n, m) => n + m.published, 0);
  const waiting = o.waitingForTargets;
  const targets = table(
    ['Target', 'State', 'Waiting events', 'Next try'],
    waiting.targets.map((t) =>
      h(
        'tr',
        {},
        h('td', { class: 'mono' }, t.target),
        h('td', {}, badge('held')),
        h('td', { class: 'num' }, num(t.events)),
        h('td', { class: 'when' }, time(t.nextTryAt)),
      ),
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
      card(
        'Oldest pending',
        o.pending ? age(o.oldestPendingAgeSeconds) : '—',
        'since it was asked to go out',
        o.oldestPendingAgeSeconds > 300 ? 'warn' : '',
      ),
      card(
        'Dead letters',
        num(o.deadLetters),
        h('a', { href: '#/dead-letters' }, 'by cause →'),
        o.deadLetters > 0 ? 'bad' : '',
      ),
      card(
        'Blocked aggregates',
        num(o.blockedAggregates),
        'held behind a dead letter',
        o.blockedAggregates > 0 ? 'warn' : '',
      ),
      card(
        'Relays running',
        num(o.relays.running),
        `relay slots held now${o.relays.closedSlots ? ` · ${o.relays.closedSlots} closed` : ''}`,
      ),
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
      h(
        'div',
        {},
        h('h2', {}, 'Last day'),
        h(
          'p',
          { class: 'muted small' },
          'events per minute, 15-minute averages',
          day.series.some((b) => b.estimated) ? ' (estimated past 500 events a quarter hour)' : '',
        ),
        dayBox,
      ),
    ),
    h(
      'p',
      { class: 'muted small', id: 'updated' },
      `Updated ${time(o.at)}; refreshes every ${REFRESH_MS / 1000} s.`,
    ),
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
    h(
      'p',
      { class: 'muted' },
      `${plural(scanned, 'dead letter')} ${capped ? '(the newest) ' : ''}in ${plural(groups.length, 'group')}, by event type, target and error class.`,
    ),
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
          h('td', { class: 'when' }, time(g.newestDeadLetteredAt)),
          h('td', { class: 'clip' }, g.example),
        ),
      ),
      'No dead letters.',
    ),
  );
  main.dataset.ready = 'dead-letters';
}

async function group(gen, id) {
  const [{ groups }, list] = await Promise.all([
    api('api/dead-letters/groups'),
    api(`api/dead-letters?group=${id}&limit=200`),
  ]);
  if (gen !== generation) return;
  const g = groups.find((x) => x.id === id);
  const status = statusLine();
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
      h('td', { class: 'when' }, time(r.deadLetteredAt)),
      h('td', { class: 'num' }, r.redriveCount),
      h('td', { class: 'clip' }, r.lastError ?? ''),
    );
  });
  const run = (name, filter, what) => actThenReload(name, filter, what, status);
  const actions = session.allowActions
    ? h(
        'div',
        { class: 'actions' },
        h(
          'button',
          {
            type: 'button',
            class: 'primary',
            onclick: () => run('redrive', { group: id }, 'dead letters of this group'),
          },
          'Redrive group',
        ),
        h(
          'button',
          {
            type: 'button',
            class: 'danger',
            onclick: () => run('discard', { group: id }, 'dead letters of this group (never published)'),
          },
          'Discard group',
        ),
        h(
          'button',
          {
            type: 'button',
            onclick: () => selected().length && run('redrive', { ids: selected() }, 'selected dead letters'),
          },
          'Redrive selected',
        ),
        h(
          'button',
          {
            type: 'button',
            onclick: () =>
              selected().length &&
              run('discard', { ids: selected() }, 'selected dead letters (never published)'),
          },
          'Discard selected',
        ),
      )
    : h(
        'p',
        { class: 'muted small' },
        'Read-only: start the console with --allow-actions to redrive or discard.',
      );
  render(
    h('p', {}, h('a', { href: '#/dead-letters' }, '← Dead letters')),
    h('h1', {}, g ? `${g.eventType}: ${g.errorClass}` : 'Group'),
    g
      ? h(
          'p',
          { class: 'muted' },
          `${plural(g.count, 'dead letter')}${g.target ? ` · target ${g.target}` : ''} · ${time(g.oldestDeadLetteredAt)} to ${time(g.newestDeadLetteredAt)}`,
        )
      : h('p', { class: 'muted' }, 'This group has no dead letters left.'),
    actions,
    status,
    table(
      [
        session.allowActions ? '' : null,
        'Event',
        'Aggregate',
        'Attempts',
        'Dead-lettered',
        'Redriven',
        'Last error',
      ].filter((x) => x !== null),
      rows,
      'No dead letters in this group.',
    ),
    list.total > list.rows.length
      ? h('p', { class: 'muted small' }, `The first ${list.rows.length} of ${num(list.total)}.`)
      : null,
  );
  main.dataset.ready = 'group';
}

function fields(pairs) {
  return h(
    'dl',
    { class: 'fields' },
    pairs.filter(([, v]) => v !== undefined).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]),
  );
}

async function eventPage(gen, id) {
  const e = await api(`api/events/${id}`);
  if (gen !== generation) return;
  const status = statusLine();
  const action =
    session.allowActions && e.state === 'dead-letter'
      ? h(
          'button',
          {
            type: 'button',
            class: 'primary',
            onclick: () => actThenReload('redrive', { ids: [e.id] }, 'dead letter', status),
          },
          'Redrive',
        )
      : session.allowActions && e.state === 'published'
        ? h(
            'button',
            {
              type: 'button',
              onclick: () => actThenReload('replay', { ids: [e.id] }, 'published event', status),
            },
            'Replay',
          )
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
    e.payloadHidden
      ? h(
          'p',
          { class: 'muted', 'data-testid': 'payload-hidden' },
          'Hidden: start the console with --show-payloads to see payloads (they may hold personal data).',
        )
      : h('pre', { class: 'wrap' }, e.payload ?? '—'),
  );
  main.dataset.ready = 'event';
}

async function timeline(gen, type, id) {
  const t = await api(`api/aggregates/${encodeURIComponent(type)}/${encodeURIComponent(id)}/timeline`);
  if (gen !== generation) return;
  render(
    h('h1', {}, `Aggregate ${type}/${id}`),
    h(
      'p',
      { class: 'muted small' },
      `Its events in order (at most ${t.limit}); published and discarded ones among the newest ${num(t.finishedScope)} finished events.`,
    ),
    table(
      ['Seq', 'Event', 'Type', 'State', 'Attempts', 'Created', 'Published', 'Last error'],
      t.events.map((e) =>
        h(
          'tr',
          {},
          h('td', { class: 'num' }, e.seq),
          h('td', {}, eventLink(e.id)),
          h('td', {}, e.eventType),
          h('td', {}, badge(e.state)),
          h('td', { class: 'num' }, e.attempts),
          h('td', { class: 'when' }, time(e.createdAt)),
          h('td', { class: 'when' }, time(e.processedAt)),
          h('td', { class: 'clip' }, e.lastError ?? ''),
        ),
      ),
      'No events found for this aggregate.',
    ),
  );
  main.dataset.ready = 'timeline';
}

function replayPage() {
  const input = (name, label, type = 'text', extra = {}) =>
    h('label', {}, label, h('input', { name, type, ...extra }));
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
  const status = statusLine();
  const filter = () => {
    const out = {};
    for (const el of form.querySelectorAll('input')) {
      if (el.value === '') continue;
      out[el.name] =
        el.type === 'datetime-local'
          ? new Date(el.value).toISOString()
          : el.type === 'number'
            ? Number(el.value)
            : el.value;
    }
    return out;
  };
  render(
    h('h1', {}, 'Replay published events'),
    h(
      'p',
      { class: 'muted' },
      'Sends published events again, oldest first (consumers skip what they processed already unless they handle replays). Recorded in outbox_replays with who asked.',
    ),
    form,
    session.allowActions
      ? h(
          'div',
          { class: 'actions' },
          h(
            'button',
            {
              type: 'button',
              class: 'primary',
              onclick: () => act('replay', filter(), 'published events', status),
            },
            'Replay…',
          ),
        )
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
    a.classList.toggle(
      'active',
      a.dataset.nav === (parts[0] || 'overview') ||
        (parts[0] === 'group' && a.dataset.nav === 'dead-letters'),
    );
  }
  try {
    if (parts[0] === 'dead-letters') await deadLetterGroups(gen);
    else if (parts[0] === 'group' && parts[1]) await group(gen, parts[1]);
    else if (parts[0] === 'event' && parts[1]) await eventPage(gen, parts[1]);
    else if (parts[0] === 'aggregate' && parts.length >= 3)
      await timeline(gen, parts[1], parts.slice(2).join('/'));
    else if (parts[0] === 'replay') replayPage();
    else await overview(gen);
  } catch (error) {
    if (gen === generation) showError(error);
  }
}

async function start() {
  try {
    session = await api('api/session');
    state.session = session;
  } catch (error) {
    return showError(error);
  }
  document
    .getElementById('mode')
    .replaceChildren(
      h(
        'span',
        { class: `pill ${session.allowActions ? 'live' : ''}` },
        session.allowActions ? 'actions allowed' : 'read-only',
      ),
      h('span', { class: 'pill' }, session.showPayloads ? 'payloads shown' : 'payloads hidden'),
      ...(session.schema ? [h('span', { class: 'pill' }, `schema ${session.schema}`)] : []),
    );
  window.addEventListener('hashchange', route);
  await route();
}

start();
