"""Streams that copy from work-queue and interest streams, and interest retention itself, against jsnb and the
reference: a copy consumes what it copied (about a second later), counts as a consumer and as interest upstream;
an interest stream keeps a new message only when some consumer's filter (or a copying stream) takes its subject,
and applies a rollup even to a message it does not keep. Also what a copy loses of its headers."""
import asyncio, base64, json, time
import pytest
import nats

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']
SETTLE = 2.2          # the reference acknowledges copies at its source consumer's next heartbeat (each second)


async def api(nc, subject, body=None):
    return json.loads((await nc.request(subject, json.dumps(body or {}).encode(), timeout=5)).data)


async def pub(nc, subject, data=b'x', **hdrs):
    return json.loads((await nc.request(subject, data, headers=hdrs or None, timeout=5)).data)


async def state(nc, stream):
    r = await api(nc, f'$JS.API.STREAM.INFO.{stream}', {'subjects_filter': '>'})
    if 'error' in r: return r['error']
    st = r['state']
    return {k: st.get(k) for k in ('messages', 'first_seq', 'last_seq', 'num_deleted', 'subjects', 'consumer_count')}


async def get(nc, stream, **req):
    r = await api(nc, f'$JS.API.STREAM.MSG.GET.{stream}', req)
    if 'error' in r: return r['error']
    m = r['message']
    hdrs = base64.b64decode(m['hdrs']).decode().split('\r\n') if m.get('hdrs') else []
    hdrs = [' '.join(h.split(' ')[:6]) if h.startswith('Nats-Stream-Source:') else h for h in hdrs if h]  # not the identity
    return m['seq'], m['subject'], base64.b64decode(m.get('data', '')), hdrs


async def until(pred, timeout=6.0, step=0.05):
    end = time.monotonic() + timeout
    while True:
        v = await pred()
        if v or time.monotonic() > end: return v
        await asyncio.sleep(step)


async def has(nc, stream, n):
    async def ok(): return (await state(nc, stream))['messages'] >= n
    return await until(ok)


def both(start_server, scenario, *flags):
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


# --- (a) copying from a work queue ------------------------------------------------------------

@pytest.mark.parametrize('storage', ['memory', 'file'])
async def test_source_consumes_work_queue(start_server, storage):
    "A source of a work queue: copies everything, counts as one consumer there, and the work queue drops what was copied."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.W', {'name': 'W', 'subjects': ['w.>'], 'retention': 'workqueue', 'storage': storage})
        for subj in ('w.a', 'w.b', 'w.a'): out.append(await pub(nc, subj))
        out.append((await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'sources': [{'name': 'W'}], 'storage': storage})).get('error'))
        await has(nc, 'S', 3)
        out.append(await state(nc, 'W'))                    # copied, not yet acknowledged
        await asyncio.sleep(SETTLE)
        out.append(await state(nc, 'W')); out.append(await state(nc, 'S'))
        for subj in ('w.c', 'w.a'): out.append(await pub(nc, subj))
        await has(nc, 'S', 5)
        await asyncio.sleep(SETTLE)
        out.append(await state(nc, 'W')); out.append(await state(nc, 'S'))
        out.append(await get(nc, 'S', seq=4))
        out.append((await api(nc, '$JS.API.STREAM.DELETE.S')).get('success'))
        await asyncio.sleep(0.3)
        out.append(await pub(nc, 'w.d'))
        await asyncio.sleep(SETTLE)
        out.append(await state(nc, 'W'))                    # nobody reads it any more
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_filtered_source_and_mirror_of_work_queues(start_server):
    "A filtered source consumes only what it copies; a mirror of a work queue consumes it too; a work queue with its own consumer as well."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.W2', {'name': 'W2', 'subjects': ['v.>'], 'retention': 'workqueue'})
        for subj in ('v.a', 'v.b', 'v.a', 'v.c.x'): await pub(nc, subj)
        out.append((await api(nc, '$JS.API.STREAM.CREATE.S2', {'name': 'S2', 'sources': [
            {'name': 'W2', 'subject_transforms': [{'src': 'v.a', 'dest': 'copy.a'}, {'src': 'v.c.*', 'dest': 'copy.c.{{wildcard(1)}}'}]}]})).get('error'))
        await api(nc, '$JS.API.STREAM.CREATE.W4', {'name': 'W4', 'subjects': ['t.>'], 'retention': 'workqueue'})
        for subj in ('t.a', 't.b'): await pub(nc, subj)
        out.append((await api(nc, '$JS.API.STREAM.CREATE.M4', {'name': 'M4', 'mirror': {'name': 'W4', 'filter_subject': 't.b'}})).get('error'))
        await api(nc, '$JS.API.STREAM.CREATE.W3', {'name': 'W3', 'subjects': ['u.>'], 'retention': 'workqueue'})
        out.append((await api(nc, '$JS.API.CONSUMER.CREATE.W3.D', {'stream_name': 'W3', 'config': {'durable_name': 'D', 'ack_policy': 'explicit'}})).get('error'))
        for subj in ('u.a', 'u.b'): await pub(nc, subj)
        out.append((await api(nc, '$JS.API.STREAM.CREATE.S3', {'name': 'S3', 'sources': [{'name': 'W3'}]})).get('error'))
        await has(nc, 'S2', 3); await has(nc, 'M4', 1); await has(nc, 'S3', 2)
        await asyncio.sleep(SETTLE)
        for st in ('W2', 'S2', 'W4', 'M4', 'W3', 'S3'): out.append(await state(nc, st))
        await nc.close()
        return out
    same(await both(start_server, scenario))


# --- interest upstreams and interest retention ------------------------------------------------

async def test_source_of_interest_stream(start_server):
    "An interest stream keeps what a copying stream wants even without consumers, until the copy is acknowledged and no consumer needs it."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.I', {'name': 'I', 'subjects': ['i.>'], 'retention': 'interest'})
        out.append(await pub(nc, 'i.a'))                    # nobody: dropped
        out.append((await api(nc, '$JS.API.STREAM.CREATE.SI', {'name': 'SI', 'sources': [{'name': 'I', 'filter_subject': 'i.*'}]})).get('error'))
        await asyncio.sleep(0.2)
        out.append((await api(nc, '$JS.API.CONSUMER.CREATE.I.D', {'stream_name': 'I', 'config': {
            'durable_name': 'D', 'ack_policy': 'explicit', 'filter_subject': 'i.a'}})).get('error'))
        for subj in ('i.a', 'i.b', 'i.c.d'): out.append(await pub(nc, subj))   # i.c.d: neither the source nor D wants it
        await has(nc, 'SI', 2)
        out.append(await state(nc, 'I'))
        await asyncio.sleep(SETTLE)
        out.append(await state(nc, 'I')); out.append(await state(nc, 'SI'))
        sub = await nc.subscribe('_PULL.>')
        await nc.publish('$JS.API.CONSUMER.MSG.NEXT.I.D', b'{"batch":1,"expires":1000000000}', reply='_PULL.1')
        m = await sub.next_msg(5)
        out.append((m.subject, m.data)); await nc.publish(m.reply, b'+ACK')
        await asyncio.sleep(0.5)
        out.append(await state(nc, 'I'))                    # the last consumer that needed it acknowledged it
        await nc.close()
        return out
    same(await both(start_server, scenario))


async def test_interest_is_decided_by_filters(start_server):
    "Interest retention keeps a message only when some consumer's filter matches its subject; a rollup without interest still purges."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.I', {'name': 'I', 'subjects': ['i.>'], 'retention': 'interest', 'allow_rollup_hdrs': True})
        out.append(await pub(nc, 'i.a', **{'Nats-Msg-Id': 'first'}))
        out.append(await pub(nc, 'i.a', **{'Nats-Msg-Id': 'first'}))    # its id is remembered although nothing was stored
        for name, cfg in [('A', {'filter_subject': 'i.a'}), ('B', {'filter_subjects': ['i.b.*', 'i.c']}),
                          ('P', {'filter_subject': 'i.p', 'pause_until': '2099-01-01T00:00:00Z'})]:
            out.append((await api(nc, f'$JS.API.CONSUMER.CREATE.I.{name}', {'stream_name': 'I', 'config': {
                'durable_name': name, 'ack_policy': 'explicit', **cfg}})).get('error'))
        for subj in ('i.a', 'i.b', 'i.b.1', 'i.c', 'i.d', 'i.p', 'i.a', 'i.b.2'):
            out.append((subj, await pub(nc, subj, subj.encode())))
        out.append(await state(nc, 'I'))
        out.append((subj := 'i.d', await pub(nc, subj, b'roll', **{'Nats-Rollup': 'sub'})))    # nothing on i.d anyway
        out.append(('i.b.1', await pub(nc, 'i.b.1', b'roll', **{'Nats-Rollup': 'sub'})))
        out.append(await state(nc, 'I'))
        await api(nc, '$JS.API.CONSUMER.DELETE.I.B')
        out.append(('i.b.1', await pub(nc, 'i.b.1', b'gone', **{'Nats-Rollup': 'sub'})))     # no interest: the subject is purged
        out.append(await state(nc, 'I'))
        out.append(('i.zzz', await pub(nc, 'i.zzz', b'all', **{'Nats-Rollup': 'all'})))      # no interest: everything is purged
        out.append(await state(nc, 'I'))
        out.append(('i.a', await pub(nc, 'i.a', b'kept')))
        out.append(await state(nc, 'I'))
        await nc.close()
        return out
    same(await both(start_server, scenario))


# --- what a copy loses ------------------------------------------------------------------------

async def test_copies_lose_expected_and_batch_headers(start_server):
    "A sourced copy is stored without the origin's `Nats-Expected-*` and `Nats-Batch-*` headers (they are not checked again)."
    async def scenario(s):
        nc = await nats.connect(s.url); out = []
        await api(nc, '$JS.API.STREAM.CREATE.O', {'name': 'O', 'subjects': ['o.>'], 'allow_atomic': True})
        await api(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s.>'], 'sources': [{'name': 'O'}]})
        out.append(await pub(nc, 's.own'))
        out.append(await pub(nc, 'o.a', b'1', K='v', **{'Nats-Expected-Last-Sequence': '0', 'Nats-Expected-Stream': 'O',
                                                          'Nats-Expected-Last-Subject-Sequence': '0'}))
        b = lambda n, commit=False: {'Nats-Batch-Id': 'b1', 'Nats-Batch-Sequence': str(n), **({'Nats-Batch-Commit': '1'} if commit else {})}
        await nc.request('o.b', b'2', headers={**b(1), 'X': 'y'}, timeout=5)
        out.append(json.loads((await nc.request('o.c', b'3', headers=b(2, True), timeout=5)).data))
        await has(nc, 'S', 4)
        for seq in range(1, 5): out.append(await get(nc, 'S', seq=seq))
        await nc.close()
        return out
    same(await both(start_server, scenario))
