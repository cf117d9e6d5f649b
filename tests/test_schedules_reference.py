"""Message schedules (`Nats-Schedule`), against jsnb and the reference: what is refused, what a schedule
produces and when, what is left of it afterwards, and schedules that survive a restart."""
import asyncio, base64, calendar, json, time
import pytest
import nats

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']
FAR = '@at 2099-01-01T00:00:00Z'


async def api(nc, subject, body=None):
    return json.loads((await nc.request(subject, json.dumps(body or {}).encode(), timeout=5)).data)


async def pub(nc, subject, data=b'', **hdrs):
    "Publish with headers; the pub ack as (seq) or (err_code, description)."
    r = json.loads((await nc.request(subject, data, headers=hdrs or None, timeout=5)).data)
    return (r['error']['err_code'], r['error']['description']) if 'error' in r else r['seq']


async def get(nc, stream, **req):
    "A stored message through the API: (seq, subject, data, header lines), or the error code."
    r = await api(nc, f'$JS.API.STREAM.MSG.GET.{stream}', req)
    if 'error' in r: return r['error']['err_code']
    m = r['message']
    hdrs = base64.b64decode(m.get('hdrs', '')).decode().split('\r\n')[1:] if m.get('hdrs') else []
    return m['seq'], m['subject'], base64.b64decode(m.get('data', '')), [h for h in hdrs if h]


async def last(nc, stream, subject):
    "The last message on `subject` as `get` gives it, or None while there is none."
    m = await get(nc, stream, last_by_subj=subject)
    return None if isinstance(m, int) else m


async def state(nc, stream):
    st = (await api(nc, f'$JS.API.STREAM.INFO.{stream}', {'subjects_filter': '>'}))['state']
    return {k: st.get(k) for k in ('messages', 'first_seq', 'last_seq', 'num_deleted', 'subjects')}


async def until(pred, timeout=6.0, step=0.05):
    "Wait until `pred()` (async) is true; its last value."
    end = time.monotonic() + timeout
    while True:
        v = await pred()
        if v or time.monotonic() > end: return v
        await asyncio.sleep(step)


def both(start_server, scenario, *flags):
    "Run `scenario(server)` on both servers at once (the waits overlap); {kind: result}."
    async def run():
        servers = {k: start_server(k, '-js', *flags) for k in KINDS}
        res = await asyncio.gather(*(scenario(servers[k]) for k in KINDS))
        return dict(zip(KINDS, res))
    return run()


def same(res):
    ref, ours = res['nats-server'], res['jsnb']
    if isinstance(ref, list) and isinstance(ours, list) and len(ref) == len(ours):
        diffs = [f'step {i}:\n jsnb: {b}\n  ref: {a}' for i, (a, b) in enumerate(zip(ref, ours)) if a != b]
        assert not diffs, '\n'.join(diffs)
    assert ours == ref


# --- what is refused --------------------------------------------------------------------------

CASES = [
    # patterns
    {'Nats-Schedule': 'soon'}, {'Nats-Schedule': '@at'}, {'Nats-Schedule': '@at tomorrow'},
    {'Nats-Schedule': '@at 2099-02-30T00:00:00Z', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@at 2099-01-01t00:00:00z', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@at 2099-01-01T00:00:00', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@at 2099-01-01T24:00:00Z', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@at 2099-01-01T9:00:00,5Z', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@at 2099-01-01T09:00:00+24:00', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@at 2099-01-01T09:00:00.1234567891-05:30', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@at  2099-01-01T00:00:00Z', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@every 999ms', 'Nats-Schedule-Target': 'foo.t'}, {'Nats-Schedule': '@every 1', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@every -5s', 'Nats-Schedule-Target': 'foo.t'}, {'Nats-Schedule': '@every', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@every 1.5h', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@reboot', 'Nats-Schedule-Target': 'foo.t'}, {'Nats-Schedule': '* * * * *', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '0 0 0 30 2 *', 'Nats-Schedule-Target': 'foo.t'}, {'Nats-Schedule': '60 * * * * *', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '* , * * * *', 'Nats-Schedule-Target': 'foo.t'}, {'Nats-Schedule': '0 0 0 , * ,', 'Nats-Schedule-Target': 'foo.t'}, {'Nats-Schedule': '*/0 * * * * *', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '0 0 9 * * 7', 'Nats-Schedule-Target': 'foo.t'}, {'Nats-Schedule': '5-1 * * * * *', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '+5 *-3 3-4/2 1,,15 JAN-feb MON-fri', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '0 0 0 31 2 1', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@weekly', 'Nats-Schedule-Target': 'foo.t'}, {'Nats-Schedule': '@annually', 'Nats-Schedule-Target': 'foo.t'},
    {'Nats-Schedule': '@at 0001-01-01T00:00:00Z', 'Nats-Schedule-Target': 'foo.t'},
    # time zones
    {'Nats-Schedule': '0 0 9 * * *', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': 'Europe/Paris'},
    {'Nats-Schedule': '0 0 9 * * *', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': 'Mars/Olympus'},
    {'Nats-Schedule': '0 0 9 * * *', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': ''},
    {'Nats-Schedule': '0 0 9 * * *', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': 'UTC'},
    {'Nats-Schedule': '0 0 9 * * *', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': '../etc/passwd'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': 'UTC'},
    {'Nats-Schedule': '@every 1h', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': 'Europe/Paris'},
    {'Nats-Schedule': '@hourly', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': 'Local'},
    {'Nats-Schedule': '@daily', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': 'America/New_York'},
    {'Nats-Schedule': '@daily', 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Time-Zone': 'europe/paris'},
    {'Nats-Schedule-Time-Zone': 'Mars/Olympus'}, {'Nats-Schedule-Time-Zone': 'Europe/Paris'},
    # targets, sources, TTLs, rollups
    {'Nats-Schedule': FAR}, {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.s'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'bar.t'}, {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.*'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo..t'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Source': 'foo.t'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Source': 'foo.s'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Source': 'foo.>'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Source': 'bar'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Source': 'foo.data'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-TTL': 'soon'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-TTL': '500ms'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-TTL': '5s'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-TTL': 'never'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Rollup': 'all'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-Rollup': 'sub'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Rollup': 'all'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Rollup': 'SUB'},
    {'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.t', 'Nats-Schedule-TTL': 'soon', 'Nats-Stream-Source': 'X'},
    # Nats-Scheduler / Nats-Schedule-Next from clients
    {'Nats-Scheduler': 'foo.s'}, {'Nats-Schedule-Next': '2099-01-01T00:00:00Z', 'Nats-Scheduler': 'foo.s'},
    {'Nats-Schedule-Next': 'purge'}, {'Nats-Schedule-Next': 'purge', 'Nats-Scheduler': 'foo.*'},
    {'Nats-Schedule-Next': 'purge', 'Nats-Scheduler': 'foo.s'}, {'Nats-Schedule-Next': 'purge', 'Nats-Scheduler': 'foo.data'},
    {'Nats-Schedule-Next': 'purge', 'Nats-Scheduler': 'foo.none'},
    {'Nats-Schedule-Next': '', 'Nats-Scheduler': 'foo.other'},
]


async def refusals(s, storage='memory'):
    nc = await nats.connect(s.url); out = []
    out.append((await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'storage': storage,
                                                           'allow_msg_schedules': True})).get('error'))
    out.append((await api(nc, '$JS.API.STREAM.CREATE.T', {'name': 'T', 'subjects': ['ttl.>'], 'storage': storage,
                                                           'allow_msg_schedules': True, 'allow_msg_ttl': True})).get('error'))
    out.append((await api(nc, '$JS.API.STREAM.CREATE.OFF', {'name': 'OFF', 'subjects': ['off.>'], 'storage': storage})).get('error'))
    out.append(await pub(nc, 'foo.data', b'd'))
    for h in CASES:
        out.append(('S', h, await pub(nc, 'foo.s', b'', **h)))
        th = {k: v.replace('foo.', 'ttl.') for k, v in h.items()}
        out.append(('T', th, await pub(nc, 'ttl.s', b'', **th)))
        oh = {k: v.replace('foo.', 'off.') for k, v in h.items()}
        out.append(('OFF', oh, await pub(nc, 'off.s', b'', **oh)))
    for st in ('S', 'T', 'OFF'): out.append(await state(nc, st))
    for seq in (2, 3, 4): out.append(await get(nc, 'S', seq=seq))
    out.append(await get(nc, 'S', last_by_subj='foo.s'))
    await nc.close()
    return out


async def test_what_is_refused(start_server):
    "Every pattern form, time zone, target, source, TTL and rollup rule: the same pub acks and errors, and the same stored schedules."
    same(await both(start_server, refusals))


async def test_schedules_on_file_streams_refused_alike(start_server):
    same(await both(start_server, lambda s: refusals(s, 'file')))


async def test_cron_field_that_lists_nothing(start_server):
    "A seconds field of only commas never matches: refused by both (the reference searches five years first, about 4 s)."
    async def scenario(s):
        nc = await nats.connect(s.url)
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'allow_msg_schedules': True})
        r = await nc.request('foo.s', b'', headers={'Nats-Schedule': ', * * * * *', 'Nats-Schedule-Target': 'foo.t'}, timeout=60)
        await nc.close()
        return json.loads(r.data)
    same(await both(start_server, scenario))


async def test_config_and_update(start_server):
    "Turning schedules on by an update makes them fire; turning them off, or mixing them with what they exclude, is refused."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        out.append((await api(nc, '$JS.API.STREAM.CREATE.U', {'name': 'U', 'subjects': ['u.>']})).get('error'))
        out.append(await pub(nc, 'u.s', b'', **{'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'u.t'}))
        r = await api(nc, '$JS.API.STREAM.UPDATE.U', {'name': 'U', 'subjects': ['u.>'], 'allow_msg_schedules': True})
        out.append((r.get('error'), r.get('config', {}).get('allow_rollup_hdrs')))
        out.append(await pub(nc, 'u.s', b'now', **{'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'u.t'}))
        out.append(await until(lambda: last(nc, 'U', 'u.t'), 5))
        out.append(await state(nc, 'U'))
        r = await api(nc, '$JS.API.STREAM.UPDATE.U', {'name': 'U', 'subjects': ['u.>'], 'allow_msg_schedules': False})
        out.append(r.get('error'))
        for cfg in [{'discard': 'new'}, {'allow_msg_counter': True}, {'deny_purge': True}, {'sources': [{'name': 'U'}]},
                    {'mirror': {'name': 'U'}, 'subjects': []}]:
            body = dict({'name': 'X', 'subjects': ['x.>'], 'allow_msg_schedules': True}, **cfg)
            out.append((await api(nc, '$JS.API.STREAM.CREATE.X', body)).get('error'))
        await nc.close()
        return out
    same(await both(start_server, scenario))


# --- what a schedule produces -----------------------------------------------------------------

async def one_off(s, storage):
    nc = await nats.connect(s.url); out = []
    await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'storage': storage,
                                              'allow_msg_schedules': True, 'allow_msg_ttl': True})
    out.append(await pub(nc, 'foo.data', b'source data', Header='Source', **{'Nats-Msg-Id': 'src', 'Nats-Scheduler': ''}))
    out.append(await pub(nc, 'foo.prev', b'previous'))
    # a schedule with everything that is stripped, kept or added
    out.append(await pub(nc, 'foo.a', b'hello', **{
        'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'foo.prev', 'Nats-Schedule-TTL': '1h',
        'Nats-Schedule-Rollup': 'sub', 'Nats-Msg-Id': 'X', 'Nats-TTL': '60s', 'Nats-Expected-Stream': 'S',
        'Nats-Expected-Last-Subject-Sequence': '0', 'Nats-Schedule-Extra': 'gone', 'Header': 'Value', 'Nats-Rollup': 'sub'}))
    out.append(await get(nc, 'S', seq=3))
    # sourced from another subject, and a source that has nothing yet
    out.append(await pub(nc, 'foo.b', b'own', **{'Nats-Schedule': '@at 1999-01-01T00:00:00Z',
                                                'Nats-Schedule-Target': 'foo.out', 'Nats-Schedule-Source': 'foo.data'}))
    out.append(await pub(nc, 'foo.c', b'fallback', Header='Fallback', **{'Nats-Schedule': '@at 1999-01-01T00:00:00Z',
                                                'Nats-Schedule-Target': 'foo.out2', 'Nats-Schedule-Source': 'foo.empty'}))
    out.append(await state(nc, 'S'))                     # nothing fired yet: never sooner than a quarter second
    await until(lambda: last(nc, 'S', 'foo.out2'))
    await asyncio.sleep(0.3)
    out.append(await state(nc, 'S'))
    for subj in ('foo.prev', 'foo.out', 'foo.out2'): out.append(await get(nc, 'S', last_by_subj=subj))
    for subj in ('foo.a', 'foo.b', 'foo.c'): out.append(await get(nc, 'S', last_by_subj=subj))
    await nc.close()
    return out


@pytest.mark.parametrize('storage', ['memory', 'file'])
async def test_one_off_schedules(start_server, storage):
    "`@at` schedules: the produced messages (subject, payload, headers, sequences) and what is left of the schedules."
    same(await both(start_server, lambda s: one_off(s, storage)))


async def test_repeating_schedule(start_server):
    "`@every 1s`: copies keep coming, each saying when the next is due, one second apart; the schedule stays until a plain message cancels it."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'allow_msg_schedules': True,
                                                  'allow_msg_ttl': True})
        out.append(await pub(nc, 'foo.sensor', b'21C', Unit='C'))
        out.append(await pub(nc, 'foo.every', b'', **{'Nats-Schedule': '@every 1s', 'Nats-Schedule-Target': 'foo.report',
                                                     'Nats-Schedule-Source': 'foo.sensor', 'Nats-Schedule-TTL': '30s'}))
        async def three():
            st = await state(nc, 'S')
            return (st['subjects'] or {}).get('foo.report', 0) >= 3
        assert await until(three, 6)
        out.append(await pub(nc, 'foo.every', b'stop'))
        copies = []
        for seq in range(3, 6):
            seq_, subj, data, hdrs = await get(nc, 'S', seq=seq)
            nxt = [h for h in hdrs if h.startswith('Nats-Schedule-Next: ')][0][20:]
            copies.append((subj, data, [h for h in hdrs if not h.startswith('Nats-Schedule-Next')], nxt))
        out.append([c[:3] for c in copies])
        nexts = [time.mktime(time.strptime(c[3], '%Y-%m-%dT%H:%M:%SZ')) for c in copies]
        out.append([b - a for a, b in zip(nexts, nexts[1:])])
        before = (await state(nc, 'S'))['subjects']
        await asyncio.sleep(1.6)
        out.append((await state(nc, 'S'))['subjects'] == before)         # cancelled: no more copies
        out.append(await get(nc, 'S', last_by_subj='foo.every'))
        await nc.close()
        return out
    res = await both(start_server, scenario)
    for r in res.values(): r[2] = None                                    # the sequence of the cancelling message depends on timing
    same(res)


async def test_deleting_a_schedule_stops_it(start_server):
    "Deleting the schedule message stops a repeating schedule; a cron schedule on another zone writes its next firing on that zone's clock."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'allow_msg_schedules': True})
        seq = await pub(nc, 'foo.cron', b'tick', **{'Nats-Schedule': '* * * * * *', 'Nats-Schedule-Target': 'foo.out',
                                                    'Nats-Schedule-Time-Zone': 'Asia/Kolkata'})
        m = await until(lambda: last(nc, 'S', 'foo.out'), 5)
        nxt = [h for h in m[3] if h.startswith('Nats-Schedule-Next: ')][0][20:]
        out.append((m[1], m[2], nxt[-6:], len(nxt)))
        out.append((await api(nc, '$JS.API.STREAM.MSG.DELETE.S', {'seq': seq})).get('success'))
        await asyncio.sleep(0.5)
        n = (await state(nc, 'S'))['subjects']['foo.out']
        await asyncio.sleep(1.6)
        out.append((await state(nc, 'S'))['subjects']['foo.out'] == n)
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_cancel_and_replace(start_server):
    "A client cancels a schedule with `Nats-Schedule-Next: purge`; a new schedule on the subject replaces the old; a copy landing on a subject that holds a schedule leaves it."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'allow_msg_schedules': True})
        soon = lambda d: '@at ' + time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + d))
        out.append(await pub(nc, 'foo.x', b'', **{'Nats-Schedule': soon(1.2), 'Nats-Schedule-Target': 'foo.xt'}))
        out.append(await pub(nc, 'foo.cancel', b'', **{'Nats-Schedule-Next': 'purge', 'Nats-Scheduler': 'foo.x'}))
        out.append(await pub(nc, 'foo.y', b'old', **{'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'foo.yt'}))
        out.append(await pub(nc, 'foo.y', b'new', **{'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'foo.yt'}))
        out.append(await pub(nc, 'foo.A', b'a', **{'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'foo.B'}))
        out.append(await pub(nc, 'foo.B', b'b', **{'Nats-Schedule': soon(1.5), 'Nats-Schedule-Target': 'foo.C'}))
        out.append(bool(await until(lambda: last(nc, 'S', 'foo.C'), 5)))
        await asyncio.sleep(1.0)
        out.append(await state(nc, 'S'))
        for subj in ('foo.xt', 'foo.yt', 'foo.B', 'foo.C'): out.append(await get(nc, 'S', last_by_subj=subj))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_consumers_see_scheduled_messages(start_server):
    "A push consumer on the target and a KV-style watcher on `>` receive the produced message like any other."
    async def scenario(s):
        nc = await nats.connect(s.url); js = nc.jetstream(); out = []
        await js.add_stream(name='S', subjects=['foo.>'], allow_msg_schedules=True)
        sub = await js.subscribe('foo.out', ordered_consumer=True)
        await pub(nc, 'foo.s', b'ping', X='1', **{'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'foo.out'})
        m = await sub.next_msg(timeout=5)
        out.append((m.subject, m.data, dict(m.headers or {}), m.metadata.sequence.stream))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_fires_on_time(start_server):
    "The produced message is stored at the schedule's time (not before; within a fraction of a second after), on both servers."
    async def scenario(s):
        nc = await nats.connect(s.url)
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'allow_msg_schedules': True})
        lags = []
        for i in range(3):
            due = int(time.time()) + 2
            at = time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(due)) + '.5Z'
            await pub(nc, f'foo.s{i}', b'', **{'Nats-Schedule': f'@at {at}', 'Nats-Schedule-Target': f'foo.t{i}'})
            m = await until(lambda: last(nc, 'S', f'foo.t{i}'), 5)
            r = await api(nc, '$JS.API.STREAM.MSG.GET.S', {'seq': m[0]})
            stored = r['message']['time']
            secs = calendar.timegm(time.strptime(stored[:19], '%Y-%m-%dT%H:%M:%S'))
            frac = float('0.' + stored[20:-1]) if '.' in stored else 0
            lags.append(secs + frac - (due + 0.5))
        await nc.close()
        return lags
    res = await both(start_server, scenario)
    for kind, lags in res.items():
        assert all(-0.01 <= x < 0.3 for x in lags), (kind, lags)


async def test_restart_keeps_schedules(start_server):
    "File streams: a one-off and a repeating schedule stored before a restart fire after it, and state matches the reference."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'storage': 'file',
                                                  'allow_msg_schedules': True})
        at = '@at ' + time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + 2))
        out.append(await pub(nc, 'foo.once', b'later', K='v', **{'Nats-Schedule': at, 'Nats-Schedule-Target': 'foo.t1'}))
        out.append(await pub(nc, 'foo.rep', b'again', **{'Nats-Schedule': '@every 1s', 'Nats-Schedule-Target': 'foo.t2'}))
        out.append(await pub(nc, 'foo.cancelled', b'', **{'Nats-Schedule': at, 'Nats-Schedule-Target': 'foo.t3'}))
        out.append(await pub(nc, 'foo.cancelled', b'plain'))
        await nc.close()
        await asyncio.get_running_loop().run_in_executor(None, s.restart)
        nc = await nats.connect(s.url)
        m = await until(lambda: last(nc, 'S', 'foo.t1'), 6)
        out.append(m[1:])
        async def reps():
            st = await state(nc, 'S')
            return (st['subjects'] or {}).get('foo.t2', 0) >= 2
        out.append(await until(reps, 6))
        await asyncio.sleep(0.5)
        st = await state(nc, 'S')
        out.append(sorted(k for k in st['subjects']))
        out.append(await get(nc, 'S', last_by_subj='foo.t3'))
        out.append(await get(nc, 'S', last_by_subj='foo.once'))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_schedules_in_atomic_batches(start_server):
    "A schedule inside an atomic batch is checked like a single publish (an invalid one fails the batch) and fires after the commit."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.A', {'name': 'A', 'subjects': ['a.>'], 'allow_atomic': True, 'allow_msg_schedules': True})
        b = lambda bid, n, commit=False: {'Nats-Batch-Id': bid, 'Nats-Batch-Sequence': str(n), **({'Nats-Batch-Commit': '1'} if commit else {})}
        sched = {'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'a.out'}
        async def send(subject, data=b'', **h):
            r = await nc.request(subject, data, headers=h, timeout=5)
            return json.loads(r.data) if r.data else ''
        out.append(await send('a.x', b'1', **b('bad', 1)))
        out.append(await send('a.s', b'', **b('bad', 2, True), **dict(sched, **{'Nats-Schedule-Target': 'a.s'})))
        out.append(await send('a.x', b'1', **b('good', 1)))
        out.append(await send('a.s', b'fired', **b('good', 2, True), **sched))
        out.append(await get(nc, 'A', seq=2))
        out.append(bool(await until(lambda: last(nc, 'A', 'a.out'), 5)))
        await asyncio.sleep(0.3)
        out.append(await state(nc, 'A'))
        out.append(await get(nc, 'A', last_by_subj='a.out'))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_limits_and_transforms_apply_to_copies(start_server):
    "The copy goes through the stream's publish path: a subject transform maps the target, `max_msgs_per_subject` keeps one."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        out.append((await api(nc, '$JS.API.STREAM.CREATE.S', {
            'name': 'S', 'subjects': ['in.>'], 'allow_msg_schedules': True, 'max_msgs_per_subject': 1,
            'subject_transform': {'src': 'in.>', 'dest': 'out.>'}})).get('error'))
        out.append(await pub(nc, 'in.s', b'', **{'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'in.t'}))
        out.append(await pub(nc, 'in.s', b'', **{'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'out.t'}))
        out.append(await pub(nc, 'in.r', b'r', **{'Nats-Schedule': '@every 1s', 'Nats-Schedule-Target': 'out.r'}))
        out.append(await pub(nc, 'in.r', b'r', **{'Nats-Schedule': '@every 1s', 'Nats-Schedule-Target': 'in.rep'}))
        async def two():
            st = await state(nc, 'S')
            return st['last_seq'] >= 5
        out.append(await until(two, 5))
        await pub(nc, 'in.r', b'stop')
        st = await state(nc, 'S')
        out.append((sorted(st['subjects'].items()), st['messages']))
        out.append(await get(nc, 'S', last_by_subj='out.t'))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_schedule_gone_before_due(start_server):
    "A schedule message that expires (its own `Nats-TTL`), is purged, or is pushed out by `max_msgs` never fires; Direct Get reads copies."
    async def scenario(s):
        nc = await nats.connect(s.url); js = nc.jetstream(); out = []
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'allow_msg_schedules': True,
                                                  'allow_msg_ttl': True, 'allow_direct': True, 'max_msgs': 6})
        at = '@at ' + time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + 2))
        out.append(await pub(nc, 'foo.ttl', b'', **{'Nats-Schedule': at, 'Nats-Schedule-Target': 'foo.t1', 'Nats-TTL': '1s'}))
        out.append(await pub(nc, 'foo.purged', b'', **{'Nats-Schedule': at, 'Nats-Schedule-Target': 'foo.t2'}))
        out.append(await pub(nc, 'foo.evicted', b'', **{'Nats-Schedule': at, 'Nats-Schedule-Target': 'foo.t3'}))
        out.append(await pub(nc, 'foo.kept', b'kept', Tag='x', **{'Nats-Schedule': at, 'Nats-Schedule-Target': 'foo.t4'}))
        out.append((await api(nc, '$JS.API.STREAM.PURGE.S', {'filter': 'foo.purged'})).get('purged'))
        for i in range(3): out.append(await pub(nc, f'foo.fill{i}', b''))    # 7 messages stored: the oldest live one goes
        m = await until(lambda: last(nc, 'S', 'foo.t4'), 6)
        out.append(m[1:])
        await asyncio.sleep(0.5)
        out.append(await state(nc, 'S'))
        dm = await js.get_last_msg('S', 'foo.t4', direct=True)
        out.append((dm.subject, dm.data, {k: v for k, v in (dm.headers or {}).items() if k != 'Nats-Time-Stamp'}))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_many_far_schedules_do_not_delay_a_near_one(start_server):
    "Schedules stored every 100 ms for an hour ahead do not push back one due in a second."
    async def scenario(s):
        nc = await nats.connect(s.url)
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['foo.>'], 'allow_msg_schedules': True})
        far = '@at ' + time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + 3600))
        await pub(nc, 'foo.first', b'', **{'Nats-Schedule': far, 'Nats-Schedule-Target': 'foo.msg'})
        due = time.time() + 1
        await pub(nc, 'foo.near', b'', **{'Nats-Schedule': '@at ' + time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(due))
                                        + f'.{int(due % 1 * 1e9):09d}Z', 'Nats-Schedule-Target': 'foo.msg'})
        i, fired = 0, None
        while time.time() < due + 2:
            i += 1
            await pub(nc, f'foo.far{i}', b'', **{'Nats-Schedule': far, 'Nats-Schedule-Target': 'foo.msg'})
            if fired is None and await last(nc, 'S', 'foo.msg'): fired = time.time() - due
            await asyncio.sleep(0.1)
        await nc.close()
        return fired
    res = await both(start_server, scenario)
    for kind, lag in res.items(): assert lag is not None and -0.05 < lag < 0.5, (kind, lag)


async def test_mirrors_and_sources_of_a_scheduling_stream(start_server):
    "A mirror and a sourcing stream copy schedules and their copies, and fire nothing themselves."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.O', {'name': 'O', 'subjects': ['o.>'], 'allow_msg_schedules': True})
        out.append((await api(nc, '$JS.API.STREAM.CREATE.M', {'name': 'M', 'mirror': {'name': 'O'}})).get('error'))
        out.append((await api(nc, '$JS.API.STREAM.CREATE.R', {'name': 'R', 'sources': [{'name': 'O'}],
                                                               'allow_rollup_hdrs': True})).get('error'))
        out.append((await api(nc, '$JS.API.STREAM.CREATE.P', {'name': 'P', 'sources': [{'name': 'O'}]})).get('error'))
        out.append(await pub(nc, 'o.keep', b'', **{'Nats-Schedule': FAR, 'Nats-Schedule-Target': 'o.t'}))
        out.append(await pub(nc, 'o.s', b'once', **{'Nats-Schedule': '@at 2000-01-01T00:00:00Z', 'Nats-Schedule-Target': 'o.t'}))
        out.append(bool(await until(lambda: last(nc, 'O', 'o.t'), 5)))
        async def copied():
            return all([(await state(nc, n))['last_seq'] >= 3 for n in ('M', 'R', 'P')])
        out.append(await until(copied, 10))
        await asyncio.sleep(1.5)
        for n in ('O', 'M', 'R', 'P'): out.append((n, await state(nc, n)))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_work_queue_of_schedules_sourced_elsewhere(start_server):
    "Copies in a work-queue stream sourced (filtered on the target) by another stream leave the pending schedules alone."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.SCHEDULES', {'name': 'SCHEDULES', 'subjects': ['x.>'], 'retention': 'workqueue',
                                                          'allow_msg_schedules': True})
        async def sched(subject, delay):
            at = '@at ' + time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + delay))
            out.append(await pub(nc, subject, b'', **{'Nats-Schedule': at, 'Nats-Schedule-Target': 'x.target'}))
        async def last_seq(n):
            async def ok(): return (await state(nc, 'SCHEDULES'))['last_seq'] == n
            out.append(await until(ok, 5))
        await sched('x.fire-1', 1); await last_seq(2)
        await sched('x.keep-1', 3600); await sched('x.keep-2', 3600)
        await sched('x.fire-2', 1); await last_seq(6)
        out.append((await api(nc, '$JS.API.STREAM.CREATE.TARGET', {
            'name': 'TARGET', 'sources': [{'name': 'SCHEDULES', 'filter_subject': 'x.target'}]})).get('error'))
        async def two(): return (await state(nc, 'TARGET'))['messages'] == 2
        out.append(await until(two, 5))
        await asyncio.sleep(1)
        out.append(await state(nc, 'SCHEDULES'))
        await nc.close()
        return out
    same(await both(start_server, scenario))
