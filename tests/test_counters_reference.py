"""Distributed counters (`allow_msg_counter`, `Nats-Incr`), against jsnb and the reference: pub acks with
`val`, stored totals and headers, every refusal and its err_code, configuration rules, limits, purges,
sources that sum counters (`Nats-Counter-Sources`), atomic batches, restarts, and nats-py's own API."""
import asyncio, base64, json, socket, time
import pytest
import nats

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']


# --- helpers ----------------------------------------------------------------------------------

async def api(nc, subject, body=None):
    return json.loads((await nc.request(subject, json.dumps(body or {}).encode(), timeout=5)).data)


async def pub(nc, subject, data=b'', **hdrs):
    "Publish with headers; the pub ack as the server sent it (errors included)."
    return json.loads((await nc.request(subject, data, headers=hdrs or None, timeout=5)).data)


def _src(line: str) -> str:
    "A `Nats-Stream-Source` line without its last field, the upstream's identity (a hash of its creation time)."
    k, _, v = line.partition(': ')
    f = v.split(' ')
    return f'{k}: {" ".join(f[:5])} <ident>' if k == 'Nats-Stream-Source' and len(f) > 5 else line


async def get(nc, stream, **req):
    "A stored message through the API: (seq, subject, data, header lines), or the error."
    r = await api(nc, f'$JS.API.STREAM.MSG.GET.{stream}', req)
    if 'error' in r: return r['error']
    m = r['message']
    hdrs = base64.b64decode(m['hdrs']).decode().split('\r\n') if m.get('hdrs') else []
    return m['seq'], m['subject'], base64.b64decode(m.get('data', '')), [_src(h) for h in hdrs if h]


async def direct(nc, stream, **req):
    "Direct Get: (status/headers, data)."
    r = await nc.request(f'$JS.API.DIRECT.GET.{stream}', json.dumps(req).encode(), timeout=5)
    h = {k: v for k, v in (r.headers or {}).items() if k not in ('Nats-Time-Stamp',)}
    return sorted(h.items()), r.data


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


async def has(nc, stream, n):
    "Wait until `stream` holds `n` messages."
    return await until(lambda: _count(nc, stream, n))


async def _count(nc, stream, n): return (await state(nc, stream))['messages'] >= n


def raw_publish(port: int, subject: str, header_lines: list[bytes], payload: bytes = b'') -> list[bytes]:
    "Publish one message per header block over a raw socket (exact bytes); the replies, in order."
    s = socket.create_connection(('127.0.0.1', port), timeout=5)
    s.recv(65536)
    s.sendall(b'CONNECT {"headers":true,"verbose":false}\r\nSUB _R.* 1\r\n')
    for i, h in enumerate(header_lines):
        hb = b'NATS/1.0\r\n' + h + b'\r\n\r\n'
        s.sendall(b'HPUB %s _R.%d %d %d\r\n%s%s\r\n' % (subject.encode(), i, len(hb), len(hb) + len(payload), hb, payload))
    s.sendall(b'PING\r\n')
    out, end = b'', time.time() + 5
    while out.count(b'MSG _R.') < len(header_lines) and time.time() < end:
        try: out += s.recv(65536)
        except socket.timeout: break
    s.close()
    replies = {}
    for part in out.split(b'MSG _R.')[1:]:
        i, rest = part.split(b' ', 1)
        replies[int(i)] = rest.split(b'\r\n', 1)[1].split(b'\r\n', 1)[0]
    return [replies.get(i) for i in range(len(header_lines))]


def both(start_server, scenario, *flags, config=None):
    "Run `scenario(server)` on both servers at once; {kind: result}."
    async def run():
        servers = {k: start_server(k, '-js', *flags, config=config) for k in KINDS}
        res = await asyncio.gather(*(scenario(servers[k]) for k in KINDS))
        return dict(zip(KINDS, res))
    return run()


def same(res):
    ref, ours = res['nats-server'], res['jsnb']
    if isinstance(ref, list) and isinstance(ours, list) and len(ref) == len(ours):
        diffs = [f'step {i}:\n jsnb: {b}\n  ref: {a}' for i, (a, b) in enumerate(zip(ref, ours)) if a != b]
        assert not diffs, '\n'.join(diffs)
    assert ours == ref


def counter(name, subjects, **cfg):
    return dict(name=name, subjects=subjects, allow_msg_counter=True, **cfg)


# --- publishing increments --------------------------------------------------------------------

HEADER_CASES = [
    {}, {'Nats-Incr': '1'}, {'Nats-Incr': '+41'}, {'Nats-Incr': '-2'}, {'Nats-Incr': '-0'}, {'Nats-Incr': '007'},
    {'Nats-Incr': str(10 ** 40)}, {'Nats-Incr': str(-10 ** 40 + 1)}, {'Nats-Incr': '9' * 5000},
    {'Nats-Incr': '-' + '9' * 5000}, {'Nats-Incr': 'ten'}, {'Nats-Incr': '1_000'}, {'Nats-Incr': '0x10'},
    {'Nats-Incr': '1.5'}, {'Nats-Incr': '1e3'}, {'Nats-Incr': '+'}, {'Nats-Incr': '--1'}, {'Nats-Incr': '١'},
    {'Nats-Incr': ''}, {'X-Other': 'v'},
    {'Nats-Incr': '1', 'Nats-Rollup': 'sub'}, {'Nats-Incr': '1', 'Nats-Rollup': 'all'}, {'Nats-Incr': '1', 'Nats-Rollup': 'bad'},
    {'Nats-Incr': '1', 'Nats-Expected-Stream': 'C'}, {'Nats-Incr': '1', 'Nats-Expected-Stream': 'OTHER'},
    {'Nats-Incr': '1', 'Nats-Expected-Last-Sequence': '0'}, {'Nats-Incr': '1', 'Nats-Expected-Last-Sequence': 'x'},
    {'Nats-Incr': '1', 'Nats-Expected-Last-Subject-Sequence': '1'},
    {'Nats-Incr': '1', 'Nats-Expected-Last-Subject-Sequence-Subject': 'c.a'},
    {'Nats-Incr': '1', 'Nats-Expected-Last-Msg-Id': 'x'}, {'Nats-Incr': '1', 'Nats-TTL': '5s'},
    {'Nats-Incr': '1', 'Nats-TTL': 'never'}, {'Nats-Incr': '1', 'Nats-TTL': 'bogus'},
    {'Nats-Incr': 'x', 'Nats-Expected-Stream': 'OTHER'}, {'Nats-Expected-Stream': 'OTHER'},
    {'Nats-Incr': '1', 'Nats-Stream-Source': 'X 1 > > c.a'},
    {'Nats-Incr': '1', 'Nats-Schedule': '@at 2099-01-01T00:00:00Z', 'Nats-Schedule-Target': 'c.t'},
    {'Nats-Incr': '1', 'Nats-Msg-Id': 'm1'}, {'Nats-Incr': '1', 'Nats-Msg-Id': 'm1'}, {'Nats-Msg-Id': 'm1'},
    {'Nats-Incr': '5', 'Nats-Msg-Id': 'm2', 'Nats-Expected-Last-Sequence': '3'},
]


async def increments(s, storage):
    nc = await nats.connect(s.url); out = []
    out.append((await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['c.>'], storage=storage, allow_direct=True)))['config'])
    await api(nc, '$JS.API.STREAM.CREATE.P', {'name': 'P', 'subjects': ['p.>'], 'storage': storage})
    for h in HEADER_CASES:
        out.append((h, await pub(nc, 'c.a', b'', **h)))
    out.append(await pub(nc, 'c.a', b'payload', **{'Nats-Incr': '1'}))
    out.append(await pub(nc, 'c.a', b'payload', **{'Nats-Incr': 'bad'}))
    out.append(await pub(nc, 'c.a', b'payload'))
    for h in ({'Nats-Incr': '1'}, {'Nats-Incr': 'bad'}, {'Nats-Incr': ''}, {}):
        out.append((h, await pub(nc, 'p.a', b'', **h)))
    out.append(await pub(nc, 'p.a', b'x', **{'Nats-Incr': '2'}))
    out.append(await pub(nc, 'c.b', b'', **{'Nats-Incr': '7'}))
    out.append(await state(nc, 'C'))
    last = (await state(nc, 'C'))['last_seq']
    for seq in range(1, last + 1): out.append(await get(nc, 'C', seq=seq))
    out.append(await get(nc, 'C', last_by_subj='c.a'))
    out.append(await direct(nc, 'C', last_by_subj='c.b'))
    out.append(await direct(nc, 'C', seq=1))
    await nc.close()
    return out


@pytest.mark.parametrize('storage', ['memory', 'file'])
async def test_increments_and_refusals(start_server, storage):
    "Every kind of increment and of refused message on a counter stream and a plain one: acks, errors, stored messages, Direct Get."
    same(await both(start_server, lambda s: increments(s, storage)))


async def test_raw_header_forms(start_server):
    "Exact header bytes: spaces before the value are skipped, a trailing blank or a tab is invalid, the first `Nats-Incr` counts."
    async def scenario(s):
        nc = await nats.connect(s.url)
        await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['c.>']))
        forms = [b'Nats-Incr: 7 ', b'Nats-Incr:5', b'Nats-Incr:  5', b'Nats-Incr: \t3', b'Nats-Incr: 1\r\nNats-Incr: 2',
                 b'Nats-Incr: 1\r\nNats-Incr: x', b'X: a\r\nNats-Incr: 1', b'nats-incr: 1', b'NATS-INCR: 1', b'Nats-Incr : 1',
                 b'Nats-Incr: 2\r\nNats-Counter-Sources: {"X":{"c.a":"5"}}', b'Nats-Incr: 1',
                 b'Nats-Incr:3\r\nNats-Counter-Sources:   {"Y":null}', b'Nats-Incr: 1']
        out = [json.loads(r) if r else r for r in await asyncio.get_running_loop().run_in_executor(
            None, raw_publish, int(s.url.rsplit(':', 1)[1]), 'c.raw', forms)]
        last = (await state(nc, 'C'))['last_seq']
        for seq in range(1, last + 1): out.append(await get(nc, 'C', seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_client_sources_headers(start_server):
    "A client's own `Nats-Counter-Sources`: stored as sent when the subject has no sources, replaced (re-encoded as Go does) when it has, and a broken one breaks the counter."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['c.>']))
        for subj, cs in [('c.a', '{"Z":{"q":"1"},"A":{"<&>":"\\u0008\\u2028x","b":"2"}}'), ('c.a', None), ('c.a', '{"W":{}}'),
                         ('c.b', 'bogus'), ('c.b', None), ('c.c', 'null'), ('c.c', None), ('c.d', '{"O1":null}'), ('c.d', None),
                         ('c.e', '{"O1":{"s":null}}'), ('c.e', None), ('c.f', '{"O1":{"s":5}}'), ('c.f', None),
                         ('c.g', '{}'), ('c.g', None), ('c.h', '[]'), ('c.h', None), ('c.i', '{"a":{"b":"1"}} x'), ('c.i', None)]:
            h = {'Nats-Incr': '1', **({'Nats-Counter-Sources': cs} if cs is not None else {})}
            out.append((subj, cs, await pub(nc, subj, b'', **h)))
        last = (await state(nc, 'C'))['last_seq']
        for seq in range(1, last + 1): out.append(await get(nc, 'C', seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))


# --- configuration ----------------------------------------------------------------------------

async def test_config_rules(start_server):
    "What counters cannot be combined with, that they cannot be turned on or off by an update, and how a counter stream's config reads."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        for extra in [{}, {'discard': 'new'}, {'allow_msg_ttl': True}, {'allow_msg_schedules': True},
                      {'retention': 'interest'}, {'retention': 'workqueue'}, {'allow_rollup_hdrs': True},
                      {'subject_delete_marker_ttl': 2 * 10 ** 9}, {'max_msgs_per_subject': 1}, {'allow_direct': True},
                      {'allow_atomic': True}, {'deny_purge': True, 'deny_delete': True}, {'storage': 'memory', 'max_msgs': 5}]:
            r = await api(nc, '$JS.API.STREAM.CREATE.X', counter('X', ['x.>'], **extra))
            out.append((extra, r.get('error'), {k: v for k, v in r.get('config', {}).items() if k != 'metadata'} if 'config' in r else None,
                        r.get('config', {}).get('metadata')))
            if 'config' in r: await api(nc, '$JS.API.STREAM.DELETE.X')
        r = await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['c.>']))
        out.append(r.get('error') or r['config']['metadata'])
        out.append((await api(nc, '$JS.API.STREAM.UPDATE.C', {'name': 'C', 'subjects': ['c.>']})).get('error'))
        out.append((await api(nc, '$JS.API.STREAM.UPDATE.C', counter('C', ['c.>'], max_msg_size=100))).get('error'))
        await api(nc, '$JS.API.STREAM.CREATE.P', {'name': 'P', 'subjects': ['p.>']})
        out.append((await api(nc, '$JS.API.STREAM.UPDATE.P', counter('P', ['p.>']))).get('error'))
        out.append((await api(nc, '$JS.API.STREAM.CREATE.M', {'name': 'M', 'mirror': {'name': 'C'}, 'allow_msg_counter': True})).get('error'))
        r = await api(nc, '$JS.API.STREAM.CREATE.M', {'name': 'M', 'mirror': {'name': 'C'}})
        out.append((r.get('error'), r['config'].get('allow_msg_counter')))
        r = await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'sources': [{'name': 'C'}], 'allow_msg_counter': True})
        out.append((r.get('error'), r['config'].get('allow_msg_counter')))
        await nc.close()
        return out
    same(await both(start_server, scenario))


# --- limits, purges, deletes ------------------------------------------------------------------

async def test_sizes(start_server):
    "A total that outgrows `max_payload` (1 KiB here) or the stream's `max_msg_size` is refused; the counter keeps its value."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['foo'], storage='file'))
        big = '1' * 500
        for incr in ['1', big, '-2', '-' + big, '1', '1' * 300, '-' + '1' * 300]:
            out.append(await pub(nc, 'foo', b'', **{'Nats-Incr': incr}))
        out.append((await api(nc, '$JS.API.STREAM.UPDATE.C', counter('C', ['foo'], storage='file', max_msg_size=37))).get('error'))
        for incr in ['1', '10', '-1', '-1']:
            out.append(await pub(nc, 'foo', b'', **{'Nats-Incr': incr}))
        out.append(await get(nc, 'C', last_by_subj='foo'))
        await nc.close()
        return out
    same(await both(start_server, scenario, config='max_payload: 1024\n'))


async def test_purge_delete_and_limits(start_server):
    "The total continues from whatever is now the subject's last message: after a purge, a purge keeping some, a delete, and per-subject limits."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['c.>'], max_msgs_per_subject=3))
        inc = lambda subj, n: pub(nc, subj, b'', **{'Nats-Incr': str(n)})
        for n in (1, 2, 3, 4): out.append(await inc('c.a', n))
        out.append(await state(nc, 'C'))
        out.append(await api(nc, '$JS.API.STREAM.MSG.DELETE.C', {'seq': 4}))
        out.append(await inc('c.a', 10))
        out.append(await api(nc, '$JS.API.STREAM.PURGE.C', {'filter': 'c.a', 'keep': 1}))
        out.append(await inc('c.a', 1))
        out.append(await api(nc, '$JS.API.STREAM.PURGE.C', {'filter': 'c.a'}))
        out.append(await inc('c.a', 1))
        out.append(await inc('c.b', -5))
        out.append(await api(nc, '$JS.API.STREAM.PURGE.C'))
        out.append(await inc('c.b', -5))
        out.append(await state(nc, 'C'))
        await nc.close()
        return out
    same(await both(start_server, scenario))


# --- sources and mirrors ----------------------------------------------------------------------

async def test_sources_aggregate(start_server):
    "Two counter streams summed into a third with local increments of its own: totals, rewritten `Nats-Incr`, and `Nats-Counter-Sources`."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.O1', counter('O1', ['foo.1', 'bar.1']))
        await api(nc, '$JS.API.STREAM.CREATE.O2', counter('O2', ['foo.2']))
        tr = lambda: [{'src': 'foo.*', 'dest': 'foo'}]
        out.append((await api(nc, '$JS.API.STREAM.CREATE.M', counter('M', ['foo'], sources=[
            {'name': 'O1', 'subject_transforms': tr()}, {'name': 'O2', 'subject_transforms': tr()}])))['config']['sources'])
        n = 0
        for subj, incr in [('foo.1', 1), ('foo.2', 2), ('foo', 10), ('foo.1', 4), ('foo.2', -7), ('foo.1', 0), ('foo', 1),
                           ('bar.1', 3)]:
            out.append(await pub(nc, subj, b'', **{'Nats-Incr': str(incr)}))
            if subj != 'bar.1': n += 1
            await has(nc, 'M', n)
        await asyncio.sleep(0.3)
        out.append(await state(nc, 'M'))
        for seq in range(1, n + 1): out.append(await get(nc, 'M', seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_sources_starting_above_zero(start_server):
    "Sources added to a counter stream that already counts locally, from origins that already have totals (one message each)."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.O1', counter('O1', ['foo.1'], max_msgs_per_subject=1))
        await api(nc, '$JS.API.STREAM.CREATE.O2', counter('O2', ['foo.2'], max_msgs_per_subject=1))
        for _ in range(5):
            await pub(nc, 'foo.1', b'', **{'Nats-Incr': '1'}); await pub(nc, 'foo.2', b'', **{'Nats-Incr': '2'})
        await api(nc, '$JS.API.STREAM.CREATE.M', counter('M', ['foo']))
        out.append(await pub(nc, 'foo', b'', **{'Nats-Incr': '1'}))
        tr = lambda: [{'src': 'foo.*', 'dest': 'foo'}]
        out.append((await api(nc, '$JS.API.STREAM.UPDATE.M', counter('M', ['foo'], sources=[{'name': 'O1', 'subject_transforms': tr()}]))).get('error'))
        await has(nc, 'M', 2)
        out.append((await api(nc, '$JS.API.STREAM.UPDATE.M', counter('M', ['foo'], sources=[
            {'name': 'O1', 'subject_transforms': tr()}, {'name': 'O2', 'subject_transforms': tr()}]))).get('error'))
        await has(nc, 'M', 3)
        out.append(await pub(nc, 'foo', b'', **{'Nats-Incr': '1'}))
        for seq in range(1, 5): out.append(await get(nc, 'M', seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_chained_and_unfiltered_sources(start_server):
    "A counter stream sourcing an aggregate (whose messages carry sources of their own) and an origin without transforms."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.O1', counter('O1', ['o1.*']))
        await api(nc, '$JS.API.STREAM.CREATE.A', counter('A', ['agg'], sources=[{'name': 'O1', 'subject_transforms': [{'src': 'o1.*', 'dest': 'agg'}]}]))
        await api(nc, '$JS.API.STREAM.CREATE.T', counter('T', ['t.>'], sources=[{'name': 'A'}, {'name': 'O1'}]))
        for subj, incr in [('o1.x', 2), ('o1.y', 3), ('agg', 100), ('o1.x', 1)]:
            out.append(await pub(nc, subj, b'', **{'Nats-Incr': str(incr)}))
            await asyncio.sleep(0.3)
        await asyncio.sleep(0.5)
        for st in ('A', 'T'):
            stt = await state(nc, st); out.append(stt)
            for subj in sorted(stt['subjects'] or {}):
                m = await get(nc, st, last_by_subj=subj)
                # T's two sources copy independently: which one lands first (and so the sequence a subject's
                # last message gets) is a race on both servers; the subject, total and headers are not.
                out.append(m[1:] if st == 'T' and isinstance(m, tuple) else m)
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_mirror_and_plain_source_store_verbatim(start_server):
    "A mirror, and a stream without counters that sources a counter stream, keep the messages as the origin stored them."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.O', counter('O', ['foo.*']))
        await api(nc, '$JS.API.STREAM.CREATE.M', {'name': 'M', 'mirror': {'name': 'O'}})
        await api(nc, '$JS.API.STREAM.CREATE.V', {'name': 'V', 'sources': [{'name': 'O', 'subject_transforms': [{'src': 'foo.*', 'dest': 'foo'}]}]})
        for subj, incr in [('foo.1', 1), ('foo.2', 2), ('foo.1', 5)]:
            out.append(await pub(nc, subj, b'', **{'Nats-Incr': str(incr)}))
        await has(nc, 'M', 3); await has(nc, 'V', 3)
        for st in ('M', 'V'):
            for seq in (1, 2, 3): out.append(await get(nc, st, seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_source_that_cannot_be_counted_stops(start_server):
    "A counter stream sourcing a plain stream stops at a message without `Nats-Incr` and copies nothing after it."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['c.>']))
        await api(nc, '$JS.API.STREAM.CREATE.P', {'name': 'P', 'subjects': ['p.>'], 'sources': [{'name': 'C'}]})
        out.append(await pub(nc, 'c.x', b'', **{'Nats-Incr': '4'}))
        await has(nc, 'P', 1)
        out.append(await pub(nc, 'p.x', b'plain'))
        out.append(await pub(nc, 'c.x', b'', **{'Nats-Incr': '4'}))
        await has(nc, 'P', 3)
        await api(nc, '$JS.API.STREAM.CREATE.S', counter('S', ['s.>'], sources=[{'name': 'P'}]))
        await has(nc, 'S', 1)
        await asyncio.sleep(1.5)
        out.append(await state(nc, 'S'))
        out.append(await get(nc, 'S', seq=1))
        await nc.close()
        return out
    same(await both(start_server, scenario))


# --- batches, restarts, nats-py ----------------------------------------------------------------

async def test_atomic_batch_of_increments(start_server):
    "An atomic batch counts its increments in order (several on one subject), stores the totals, and fails as a whole on a bad one."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['c.>'], allow_atomic=True))
        b = lambda bid, n, commit=False: {'Nats-Batch-Id': bid, 'Nats-Batch-Sequence': str(n), **({'Nats-Batch-Commit': '1'} if commit else {})}
        async def send(subject, data=b'', **h):
            r = await nc.request(subject, data, headers=h, timeout=5)
            return json.loads(r.data) if r.data else ''
        out.append(await pub(nc, 'c.a', b'', **{'Nats-Incr': '100'}))
        for i, (subj, incr) in enumerate([('c.a', '1'), ('c.b', '2'), ('c.a', '3'), ('c.a', '-10')], 1):
            out.append(await send(subj, **b('good', i, i == 4), **{'Nats-Incr': incr}))
        for bad in [{}, {'Nats-Incr': 'x'}, {'Nats-Incr': '1', 'Nats-Expected-Last-Sequence': '5'}, {'Nats-Incr': '1', 'Nats-Rollup': 'sub'}]:
            out.append(await send('c.a', **b('bad', 1), **{'Nats-Incr': '1'}))
            out.append(await send('c.a', **b('bad', 2, True), **bad))
        out.append(await send('c.a', b'x', **b('pay', 1, True), **{'Nats-Incr': '1'}))
        out.append(await state(nc, 'C'))
        for seq in range(1, 6): out.append(await get(nc, 'C', seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_restart_keeps_counting(start_server):
    "File streams: totals, and what an aggregate remembered of its sources, continue after a restart."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.O', counter('O', ['o.*'], storage='file'))
        await api(nc, '$JS.API.STREAM.CREATE.M', counter('M', ['m'], storage='file', sources=[
            {'name': 'O', 'subject_transforms': [{'src': 'o.*', 'dest': 'm'}]}]))
        for subj, incr in [('o.a', 5), ('m', 1), ('o.a', 2)]:
            out.append(await pub(nc, subj, b'', **{'Nats-Incr': str(incr)}))
            await asyncio.sleep(0.2)
        await has(nc, 'M', 3)
        await nc.close()
        await asyncio.get_running_loop().run_in_executor(None, s.restart)
        nc = await nats.connect(s.url)
        for subj, incr in [('o.a', 1), ('m', 1), ('o.a', -8)]:
            out.append(await pub(nc, subj, b'', **{'Nats-Incr': str(incr)}))
            await asyncio.sleep(0.2)
        await has(nc, 'M', 6)
        await asyncio.sleep(0.3)
        out.append(await state(nc, 'M'))
        for seq in range(1, 7): out.append(await get(nc, 'M', seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_nats_py_api(start_server):
    "nats-py's own calls: `PubAck.val`, `get_msg`, `get_last_msg`, Direct Get, the error it raises."
    async def scenario(s):
        nc = await nats.connect(s.url); js = nc.jetstream(); out = []
        await js.add_stream(name='HITS', subjects=['hits.>'], allow_msg_counter=True, allow_direct=True)
        for n in ('1', '41', '-2'):
            ack = await js.publish('hits.home', headers={'Nats-Incr': n})
            out.append((ack.stream, ack.seq, ack.val, ack.duplicate))
        ack = await js.publish('hits.home', headers={'Nats-Incr': '1', 'Nats-Msg-Id': 'a'})
        ack2 = await js.publish('hits.home', headers={'Nats-Incr': '1', 'Nats-Msg-Id': 'a'})
        out.append(((ack.seq, ack.val), (ack2.seq, ack2.val, ack2.duplicate)))
        m = await js.get_last_msg('HITS', 'hits.home')
        out.append((m.seq, m.subject, m.data, dict(m.headers or {})))
        m = await js.get_msg('HITS', subject='hits.home', direct=True)
        out.append((m.seq, m.subject, m.data, {k: v for k, v in (m.headers or {}).items() if k != 'Nats-Time-Stamp'}))
        for hdrs in ({}, {'Nats-Incr': 'x'}):
            try: await js.publish('hits.home', b'', headers=hdrs or None)
            except nats.js.errors.APIError as e: out.append((e.code, e.err_code, e.description))
        info = await js.stream_info('HITS')
        out.append((info.config.allow_msg_counter, info.state.messages))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_transform_republish_and_consumers(start_server):
    "A counter stream with a subject transform counts per stored subject; republished copies and consumers see the totals."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.C', counter('C', ['in.>'], subject_transform={'src': 'in.>', 'dest': 'out.>'},
                                                          republish={'src': 'out.>', 'dest': 'rp.>'}))
        seen = []
        async def cb(m): seen.append((m.subject, m.data, {k: v for k, v in (m.headers or {}).items() if k != 'Nats-Time-Stamp'}))
        await nc.subscribe('rp.>', cb=cb); await nc.flush()
        for subj, n in [('in.a', 2), ('in.a', 3), ('in.b', -1)]: out.append(await pub(nc, subj, b'', **{'Nats-Incr': str(n)}))
        out.append(await state(nc, 'C'))
        out.append((await api(nc, '$JS.API.CONSUMER.CREATE.C.R', {'stream_name': 'C', 'config': {
            'durable_name': 'R', 'ack_policy': 'none', 'filter_subject': 'out.a'}})).get('error'))
        sub = await nc.subscribe('_PULL.>')
        await nc.publish('$JS.API.CONSUMER.MSG.NEXT.C.R', b'{"batch":5,"expires":500000000}', reply='_PULL.1')
        for _ in range(2):
            m = await sub.next_msg(5); out.append((m.subject, m.data, m.headers))
        await asyncio.sleep(0.3)
        out.append(sorted(seen, key=lambda x: x[2].get('Nats-Sequence', '')))
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_fast_ingest_batch_of_increments(start_server):
    "Increments sent as a fast-ingest batch are counted one by one; a message without an increment is refused in its frame."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.F', counter('F', ['f.>'], allow_batched=True))
        got = []
        async def cb(m): got.append(json.loads(m.data) if m.data else None)
        await nc.subscribe('fi.>', cb=cb); await nc.flush()
        for i, (incr, op) in enumerate([('1', 0), ('2', 1), (None, 1), ('5', 2)], 1):
            await nc.publish('f.a', b'', reply=f'fi.b1.10.ok.{i}.{op}.$FI', headers={'Nats-Incr': incr} if incr else None)
        for _ in range(60):
            await nc.flush(); await asyncio.sleep(0.05)
            if any(f and 'batch' in f for f in got): break
        await asyncio.sleep(0.2)
        out.append(got)
        out.append(await state(nc, 'F'))
        for seq in range(1, 4): out.append(await get(nc, 'F', seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))
