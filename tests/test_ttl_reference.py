"""Per-message TTL and subject delete markers, against jsnb and the reference."""
import asyncio, json
import pytest
import nats

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']


async def api(nc, subject, body):
    return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data)


async def pub(nc, subject, data=b'', **hdrs):
    r = await nc.request(subject, data, headers=hdrs or None, timeout=5)
    return json.loads(r.data)


def strip(d):
    if isinstance(d, dict): return {k: strip(v) for k, v in d.items() if k not in ('created', 'ts', 'first_ts', 'last_ts')}
    return d


async def ttl_scenario(s):
    nc = await nats.connect(s.url); out = []
    out.append(strip(await api(nc, '$JS.API.STREAM.CREATE.OFF', {'name': 'OFF', 'subjects': ['off.>']})))
    for v in ['5', '0', 'abc', 'never', '1h']: out.append(('off', v, await pub(nc, 'off.a', b'x', **{'Nats-TTL': v})))
    out.append(strip(await api(nc, '$JS.API.STREAM.CREATE.ON', {'name': 'ON', 'subjects': ['on.>'], 'allow_msg_ttl': True})))
    for v in ['1', '1s', '2', 'never', '0', '500ms', '-1', 'abc', '1m30s', '1.5s']:
        out.append(('on', v, await pub(nc, 'on.a', b'x', **{'Nats-TTL': v})))
    m = json.loads((await nc.request('$JS.API.STREAM.MSG.GET.ON', b'{"seq": 1}', timeout=5)).data)['message']
    out.append(('header kept', m.get('hdrs')))
    out.append(strip(await api(nc, '$JS.API.STREAM.UPDATE.OFF', {'name': 'OFF', 'subjects': ['off.>'], 'allow_msg_ttl': True})))
    out.append(strip(await api(nc, '$JS.API.STREAM.UPDATE.OFF', {'name': 'OFF', 'subjects': ['off.>'], 'allow_msg_ttl': False})))
    await asyncio.sleep(3.5)                     # the 1 s, 2 s and 1.5 s messages are gone (loose: expiry runs about every second)
    si = json.loads((await nc.request('$JS.API.STREAM.INFO.ON', b'', timeout=5)).data)
    out.append(('after expiry', si['state']['messages']))
    await nc.close()
    return out


async def test_ttl_headers_and_expiry(start_server):
    res = [await ttl_scenario(start_server(k, '-js')) for k in KINDS]
    for a, b in zip(res[0], res[1]): assert b == a, f'\n jsnb: {b}\n  ref: {a}'


async def marker_scenario(s):
    nc = await nats.connect(s.url); js = nc.jetstream(); out = []
    out.append(strip(await api(nc, '$JS.API.STREAM.CREATE.M', {'name': 'M', 'subjects': ['m.>'], 'max_age': 1_000_000_000,
                                                               'subject_delete_marker_ttl': 1_000_000_000})))
    out.append(strip(await api(nc, '$JS.API.STREAM.CREATE.BADSDM', {'name': 'BADSDM', 'subjects': ['b.>'], 'subject_delete_marker_ttl': 500_000_000})))
    await pub(nc, 'm.a', b'1'); await pub(nc, 'm.a', b'2'); await pub(nc, 'm.b', b'3')
    await pub(nc, 'm.c', b'keep', **{'Nats-TTL': 'never'})
    markers = []
    for _ in range(40):                           # wait for both markers (max_age 1 s, expiry about every second)
        await asyncio.sleep(0.25)
        si = await js.stream_info('M', subjects_filter='>')
        subs = si.state.subjects or {}
        if 'm.a' in subs and 'm.b' in subs and si.state.messages == 3:
            for subj in ('m.a', 'm.b'):
                m = await js.get_last_msg('M', subj)
                markers.append((subj, m.data, {k: v for k, v in (m.headers or {}).items()}))
            break
    out.append(('markers', markers))
    for _ in range(40):                           # the markers expire too; the `never` message stays
        await asyncio.sleep(0.25)
        si = await js.stream_info('M', subjects_filter='>')
        if si.state.messages == 1: break
    out.append(('left', si.state.messages, sorted((si.state.subjects or {}).items())))
    await nc.close()
    return out


async def test_subject_delete_markers(start_server):
    res = [await marker_scenario(start_server(k, '-js')) for k in KINDS]
    for a, b in zip(res[0], res[1]): assert b == a, f'\n jsnb: {b}\n  ref: {a}'


async def test_kv_with_limit_markers(start_server):
    "nats-py KeyValue with `ttl` and `limit_marker_ttl`: a watcher sees the key go when it ages out."
    seen = {}
    for kind in KINDS:
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); js = nc.jetstream()
        kv = await js.create_key_value(bucket='sessions', ttl=1, limit_marker_ttl=1)
        await kv.put('u1', b'token')
        w = await kv.watch('u1')
        entries = []
        for _ in range(40):
            try: e = await w.updates(timeout=0.5)
            except nats.errors.TimeoutError: e = None
            if e is not None: entries.append((e.key, e.value, e.operation))
            if len(entries) >= 2: break
        last = await kv.get('u1')                       # the marker is the key's latest entry: empty
        entries.append(('get', last.value))
        seen[kind] = entries
        await w.stop(); await nc.close()
    assert seen['nats-server'][0] == ('u1', b'token', None) and len(seen['nats-server']) == 3
    assert seen['jsnb'] == seen['nats-server']


async def test_no_markers_for_delete_and_purge(start_server):
    "The specification's Remove and Purge markers: the reference does not place them, and neither does jsnb."
    seen = {}
    for kind in KINDS:
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); js = nc.jetstream()
        await api(nc, '$JS.API.STREAM.CREATE.P', {'name': 'P', 'subjects': ['p.>'], 'max_age': 60_000_000_000,
                                                  'subject_delete_marker_ttl': 1_000_000_000})
        for subj in ('p.a', 'p.a', 'p.b'): await pub(nc, subj, b'v')
        await js.delete_msg('P', 3)
        await js.purge_stream('P', subject='p.a')
        si = await js.stream_info('P')
        seen[kind] = (si.state.messages, si.state.last_seq)
        await nc.close()
    assert seen['jsnb'] == seen['nats-server'] == (0, 3)


async def test_ttl_raised_to_marker_ttl_and_sourced_ttl(start_server):
    "A TTL below `subject_delete_marker_ttl` is raised to it; a source without `allow_msg_ttl` still stores TTL messages."
    seen = {}
    for kind in KINDS:
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); js = nc.jetstream(); out = []
        await api(nc, '$JS.API.STREAM.CREATE.R', {'name': 'R', 'subjects': ['r.>'], 'allow_msg_ttl': True,
                                                  'subject_delete_marker_ttl': 5_000_000_000})
        out.append(await pub(nc, 'r.a', b'x', **{'Nats-TTL': '2'}))
        out.append(await pub(nc, 'r.b', b'y', **{'Nats-TTL': '10'}))
        out.append([(await js.get_msg('R', i)).headers for i in (1, 2)])
        out.append(strip(await api(nc, '$JS.API.STREAM.CREATE.SRC', {'name': 'SRC', 'sources': [{'name': 'R'}]})))
        for _ in range(50):
            if (await js.stream_info('SRC')).state.messages == 2: break
            await asyncio.sleep(0.1)
        out.append([{k: v for k, v in (await js.get_msg('SRC', i)).headers.items() if k != 'Nats-Stream-Source'} for i in (1, 2)])
        seen[kind] = out
        await nc.close()
    assert seen['jsnb'] == seen['nats-server'], seen


@pytest.mark.parametrize('kind', KINDS)
async def test_sourced_ttl_is_kept_without_allow_msg_ttl(start_server, kind):
    "A stream sourcing a TTL stream keeps the copies when it does not allow message TTLs itself."
    s = start_server(kind, '-js')
    nc = await nats.connect(s.url)
    try:
        await api(nc, '$JS.API.STREAM.CREATE.EVENTS', {'name': 'EVENTS', 'subjects': ['events.>'], 'allow_msg_ttl': True})
        await api(nc, '$JS.API.STREAM.CREATE.AUDIT', {'name': 'AUDIT', 'sources': [{'name': 'EVENTS'}]})
        assert (await pub(nc, 'events.flash', b'x', **{'Nats-TTL': '1'}))['seq'] == 1
        for _ in range(50):
            if (await api(nc, '$JS.API.STREAM.INFO.AUDIT', {}))['state']['messages'] == 1: break
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.5)
        events = (await api(nc, '$JS.API.STREAM.INFO.EVENTS', {}))['state']['messages']
        audit = await api(nc, '$JS.API.STREAM.MSG.GET.AUDIT', {'last_by_subj': 'events.flash'})
        assert (events, audit['message']['seq']) == (0, 1)
    finally: await nc.close()


def code(d):
    "A pub ack as its error code, or `('seq', seq, duplicate)`."
    return d['error']['err_code'] if 'error' in d else ('seq', d.get('seq'), d.get('duplicate'))


TTL_WITH = [('bad+wrong last seq', {'Nats-TTL': 'abc', 'Nats-Expected-Last-Sequence': '99'}),
            ('bad+wrong subject seq', {'Nats-TTL': 'abc', 'Nats-Expected-Last-Subject-Sequence': '99'}),
            ('bad+duplicate', {'Nats-TTL': 'abc', 'Nats-Msg-Id': 'id1'}),
            ('bad+wrong last id', {'Nats-TTL': 'abc', 'Nats-Expected-Last-Msg-Id': 'nope'}),
            ('bad+rollup', {'Nats-TTL': 'abc', 'Nats-Rollup': 'sub'}),
            ('bad+wrong stream', {'Nats-TTL': 'abc', 'Nats-Expected-Stream': 'NOPE'}),
            ('bad+schedule', {'Nats-TTL': 'abc', 'Nats-Schedule': '@every 1s'}),
            ('never', {'Nats-TTL': 'never'}), ('bad', {'Nats-TTL': 'abc'}), ('zero', {'Nats-TTL': '0'}),
            ('zero+wrong last seq', {'Nats-TTL': '0', 'Nats-Expected-Last-Sequence': '99'}),
            ('5+wrong last seq', {'Nats-TTL': '5', 'Nats-Expected-Last-Sequence': '99'}),
            ('5+duplicate', {'Nats-TTL': '5', 'Nats-Msg-Id': 'id1'})]


async def ttl_order_scenario(s):
    """Where the `Nats-TTL` check stands among the others, on one message and on an atomic batch's: a single publish
    refuses a TTL the stream does not allow where the headers are checked, but an invalid one only when it is stored
    (after de-duplication and the expectations); a batch refuses any TTL on a stream without `allow_msg_ttl`, and an
    invalid one, where its headers are checked."""
    nc = await nats.connect(s.url); out = []
    for allow in (False, True):
        name = f'T{int(allow)}'
        await api(nc, f'$JS.API.STREAM.CREATE.{name}', {'name': name, 'subjects': [f'{name}.>'], 'allow_msg_ttl': allow,
                                                          'allow_atomic': True})
        out.append((name, code(await pub(nc, f'{name}.a', b'x', **{'Nats-Msg-Id': 'id1'}))))
        for label, h in TTL_WITH: out.append((name, 'single', label, code(await pub(nc, f'{name}.a', b'x', **h))))
        for k, (label, h) in enumerate(TTL_WITH):
            batch = {'Nats-Batch-Id': f'b{int(allow)}{k}', 'Nats-Batch-Sequence': '1', 'Nats-Batch-Commit': '1'}
            out.append((name, 'batch', label, code(await pub(nc, f'{name}.a', b'x', **batch, **h))))
    await nc.close()
    return out


async def test_ttl_checked_where_the_reference_checks_it(start_server):
    res = [await ttl_order_scenario(start_server(k, '-js')) for k in KINDS]
    assert ('T0', 'batch', 'bad', 10166) in res[0] and ('T0', 'single', 'bad', 10165) in res[0]   # the two orders differ
    for a, b in zip(res[0], res[1]): assert b == a, f'\n jsnb: {b}\n  ref: {a}'
