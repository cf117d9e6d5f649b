"""Atomic batch publishing, frame by frame, against jsnb and the reference."""
import asyncio, json
import pytest
import nats
from jsdiff import blank

pytestmark = pytest.mark.reference


async def scenario(s):
    nc = await nats.connect(s.url); out = []
    async def api(subj, body):
        return blank(json.loads((await nc.request(subj, json.dumps(body).encode(), timeout=5)).data))
    async def send(subject, data=b'', **h):
        r = await nc.request(subject, data, headers={k.replace('_', '-'): str(v) for k, v in h.items()}, timeout=5)
        out.append((subject, sorted(h.items()), json.loads(r.data) if r.data else ''))
    async def count(name):
        si = json.loads((await nc.request(f'$JS.API.STREAM.INFO.{name}', b'', timeout=5)).data)
        out.append((name, si['state']['messages'], si['state']['last_seq']))
    B = 'Nats_Batch_Id'; S = 'Nats_Batch_Sequence'; C = 'Nats_Batch_Commit'
    await api('$JS.API.STREAM.CREATE.OFF', {'name': 'OFF', 'subjects': ['off.>']})
    await send('off.a', b'x', **{B: 'b1', S: 1})
    out.append(await api('$JS.API.STREAM.CREATE.A', {'name': 'A', 'subjects': ['a.>'], 'allow_atomic': True}))
    await send('a.x', b'1', **{B: 'ok', S: 1}); await send('a.y', b'2', **{B: 'ok', S: 2}); await count('A')
    await send('a.z', b'3', **{B: 'ok', S: 3, C: 1}); await count('A')
    await send('a.x', b'4', **{B: 'eob', S: 1}); await send('a.y', b'5', **{B: 'eob', S: 2})
    await send('a.z', b'', **{B: 'eob', S: 3, C: 'eob'}); await count('A')
    m = json.loads((await nc.request('$JS.API.STREAM.MSG.GET.A', b'{"seq": 5}', timeout=5)).data)['message']
    out.append(('eob last hdrs', m.get('hdrs')))
    await send('a.x', b'g', **{B: 'gap', S: 1}); await send('a.x', b'g', **{B: 'gap', S: 3, C: 1})
    await send('a.x', b'n', **{B: 'late', S: 2})
    await send('a.x', b'n', **{B: 'late', S: 1001})
    await send('a.x', b'i', **{B: 'inv', S: 1}); await send('a.x', b'i', **{B: 'inv', S: 2, C: 'yes'})
    await send('a.x', b'm', **{B: 'noseq'})
    await send('a.x', b'l', **{B: 'x' * 65, S: 1})
    await send('a.x', b'e', **{B: 'eob1', S: 1, C: 'eob'})
    await send('a.x', b'd', **{B: 'dup', S: 1, 'Nats_Msg_Id': 'm1'}); await send('a.y', b'd', **{B: 'dup', S: 2, C: 1, 'Nats_Msg_Id': 'm1'})
    await send('a.x', b'u', **{B: 'uns', S: 1, C: 1, 'Nats_Expected_Last_Msg_Id': 'zz'})
    await count('A')
    await send('a.x', b'e1', **{B: 'exp', S: 1, 'Nats_Expected_Last_Sequence': 5})
    await send('a.y', b'e2', **{B: 'exp', S: 2, C: 1, 'Nats_Expected_Last_Sequence': 6})
    await send('a.x', b'f1', **{B: 'exp2', S: 1, 'Nats_Expected_Last_Sequence': 7})
    await send('a.y', b'f2', **{B: 'exp2', S: 2, C: 1, 'Nats_Expected_Last_Sequence': 7})
    await send('a.x', b'h1', **{B: 'exp3', S: 1})                 # a later message's expectation is checked first:
    await send('a.y', b'h2', **{B: 'exp3', S: 2, C: 1, 'Nats_Expected_Last_Sequence': 99})   # against the batch so far
    await count('A')
    await nc.close()
    return out


async def test_atomic_batches(start_server):
    res = {k: await scenario(start_server(k, '-js')) for k in ('nats-server', 'jsnb')}
    diffs = [f'\n jsnb: {b}\n  ref: {a}' for a, b in zip(res['nats-server'], res['jsnb']) if a != b]
    assert not diffs and len(res['jsnb']) == len(res['nats-server']), ''.join(diffs)


async def interleaved(s):
    "Two batches staged at once, a consumer watching: nothing is visible until each commit."
    nc = await nats.connect(s.url); js = nc.jetstream(); out = []
    await js.add_stream(name='I', subjects=['i.>'], allow_atomic=True)
    psub = await js.pull_subscribe('i.>', durable='W')
    hdr = lambda b, n, commit=False: {'Nats-Batch-Id': b, 'Nats-Batch-Sequence': str(n), **({'Nats-Batch-Commit': '1'} if commit else {})}
    for n in range(1, 4):
        await nc.request('i.a', b'a%d' % n, headers=hdr('A', n), timeout=5)
        await nc.request('i.b', b'b%d' % n, headers=hdr('B', n), timeout=5)
    out.append(('staged', (await js.stream_info('I')).state.messages))
    try: out.append(('before commit', [m.data for m in await psub.fetch(1, timeout=0.5)]))
    except asyncio.TimeoutError: out.append(('before commit', []))
    out.append(json.loads((await nc.request('i.b', b'b4', headers=hdr('B', 4, True), timeout=5)).data))
    out.append(('B committed', [m.data for m in await psub.fetch(10, timeout=1)]))
    out.append(json.loads((await nc.request('i.a', b'a4', headers=hdr('A', 4, True), timeout=5)).data))
    out.append(('A committed', [m.data for m in await psub.fetch(10, timeout=1)]))
    # the per-stream limit on open batches
    for n in range(50): await nc.request('i.x', b'', headers=hdr(f'open{n}', 1), timeout=5)
    out.append(json.loads((await nc.request('i.x', b'', headers=hdr('one-too-many', 1), timeout=5)).data))
    await nc.close()
    return out


async def test_interleaved_batches_and_inflight_limit(start_server):
    res = {k: await interleaved(start_server(k, '-js')) for k in ('nats-server', 'jsnb')}
    assert res['jsnb'] == res['nats-server'], res


async def one_write(s):
    """Plain publishes and three batches' messages in one write (so one read of the server's): each answer, in order, and
    what the stream holds. The batch messages between two plain ones are taken together; a plain one ends the group."""
    nc = await nats.connect(s.url); js = nc.jetstream()
    await js.add_stream(name='W', subjects=['w.>'], allow_atomic=True)
    answers = await nc.subscribe('ans.>')
    B, S, C = 'Nats-Batch-Id', 'Nats-Batch-Sequence', 'Nats-Batch-Commit'
    sends = [('w.p1', {}), ('w.a', {B: 'x', S: '1'}), ('w.b', {B: 'x', S: '2'}), ('w.p2', {}), ('w.c', {B: 'x', S: '3', C: '1'}),
             ('w.d', {B: 'y', S: '1'}), ('w.e', {B: 'y', S: '3', C: '1'}),           # a gap: the batch is refused
             ('w.p3', {'Nats-Msg-Id': 'm'}), ('w.f', {B: 'z', S: '1'}), ('w.g', {B: 'z', S: '2', C: 'eob'}),
             ('w.h', {B: 'z', S: '1'}), ('w.p3', {'Nats-Msg-Id': 'm'}), ('w.end', {})]
    for i, (subject, h) in enumerate(sends): await nc.publish(subject, b'%d' % i, reply=f'ans.{i}', headers=h or None)
    await nc.flush()
    out = []
    while not out or out[-1][0] != f'ans.{len(sends) - 1}':
        m = await answers.next_msg(timeout=5)
        out.append((m.subject, json.loads(m.data) if m.data else ''))
    psub = await js.pull_subscribe('w.>', durable='R')
    out += [(m.subject, m.data, m.metadata.sequence.stream, dict(m.headers or {})) for m in await psub.fetch(20, timeout=2)]
    st = (await js.stream_info('W')).state
    out.append((st.messages, st.first_seq, st.last_seq))
    await nc.close()
    return out


async def test_batch_messages_among_plain_ones_in_one_read(start_server):
    res = {k: await one_write(start_server(k, '-js')) for k in ('nats-server', 'jsnb')}
    assert res['jsnb'] == res['nats-server'], res


async def test_abandoned_after_idle(start_server):
    "A batch that stops growing is abandoned after 10 s, with the advisory (loose timing)."
    seen = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); js = nc.jetstream()
        await js.add_stream(name='T', subjects=['t.>'], allow_atomic=True)
        adv = await nc.subscribe('$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>')
        await nc.request('t.a', b'1', headers={'Nats-Batch-Id': 'idle', 'Nats-Batch-Sequence': '1'}, timeout=5)
        m = await adv.next_msg(timeout=25)
        d = json.loads(m.data)
        seen[kind] = (m.subject, sorted(d), d['type'], d['stream'], d['batch'], d['reason'])
        r = await nc.request('t.a', b'2', headers={'Nats-Batch-Id': 'idle', 'Nats-Batch-Sequence': '2', 'Nats-Batch-Commit': '1'}, timeout=5)
        seen[kind] += (json.loads(r.data),)
        await nc.close()
    assert seen['jsnb'] == seen['nats-server'], seen


async def test_client_against_both(start_server):
    "jsnb's batch publisher gives the same results against both servers."
    from jsnb.clients.publish import atomic_batch, BatchError
    seen = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); js = nc.jetstream(); out = []
        await js.add_stream(name='ADDR', subjects=['addr.>'], allow_atomic=True)
        async with atomic_batch(nc, batch_id='b1') as b:
            for f in ('street', 'city', 'zip'): await b.add(f'addr.1.{f}', f.encode())
        out.append(b.ack)
        m = await js.get_msg('ADDR', 3)
        out.append((m.subject, m.data, m.headers))
        await js.add_stream(name='PLAIN', subjects=['plain.>'])
        try:
            async with atomic_batch(nc) as b: await b.add('plain.x', b'1')
        except BatchError as e: out.append((e.code, e.err_code, e.description))
        seen[kind] = out
        await nc.close()
    assert seen['jsnb'] == seen['nats-server'], seen


async def test_mirrors_and_async_persist_refuse_atomic(start_server):
    seen = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); out = []
        await nc.request('$JS.API.STREAM.CREATE.UP', b'{"name":"UP","subjects":["up.>"]}', timeout=5)
        for name, body in [('M', {'name': 'M', 'mirror': {'name': 'UP'}, 'allow_atomic': True}),
                           ('P', {'name': 'P', 'subjects': ['p.>'], 'allow_atomic': True, 'persist_mode': 'async'})]:
            out.append(json.loads((await nc.request(f'$JS.API.STREAM.CREATE.{name}', json.dumps(body).encode(), timeout=5)).data).get('error'))
        seen[kind] = out
        await nc.close()
    assert seen['jsnb'] == seen['nats-server'] and all(seen['jsnb']), seen


BATCH_RULES = {                                  # one batch each: (subject, headers) per message, the last one commits
    'rollup sub, subject written before': [('R.a', {}), ('R.a', {'Nats-Rollup': 'sub'})],
    'rollup sub, first on its subject': [('R.a', {'Nats-Rollup': 'sub'}), ('R.a', {})],
    'rollup all, not first': [('R.b', {}), ('R.c', {'Nats-Rollup': 'all'})],
    'rollup all, first': [('R.b', {'Nats-Rollup': 'all'}), ('R.c', {})],
    'rollup, invalid value': [('R.b', {'Nats-Rollup': 'xx'})],
    'subject sequence, subject written before': [('R.d', {}), ('R.d', {'Nats-Expected-Last-Subject-Sequence': '0'})],
    'subject sequence, another subject written': [('R.e', {}), ('R.f', {'Nats-Expected-Last-Subject-Sequence': '0'})],
    'subject for, without a sequence': [('R.e', {'Nats-Expected-Last-Subject-Sequence-Subject': 'R.a'})],
    'last sequence, later message': [('R.g', {}), ('R.g', {'Nats-Expected-Last-Sequence': '99'})],
    'message id twice': [('R.h', {'Nats-Msg-Id': 'x1'}), ('R.h', {'Nats-Msg-Id': 'x1'})],
    'header block over 64 KiB': [('R.j', {'X-Big': 'a' * 70000})],
    'stream source header': [('R.k', {}), ('R.k', {'Nats-Stream-Source': 'X 1 > > R.k'})],
    'a schedule': [('R.i', {'Nats-Schedule': '@every 1s', 'Nats-Schedule-Target': 'R.t'})],
}


async def batch_rules(s):
    """Where an atomic batch's checks differ from a single message's (the reference runs one order for each), and
    which single-message rules a batch meets too: rollups, subject expectations, header size, `Nats-Stream-Source`."""
    nc = await nats.connect(s.url); out = []
    async def req(subject, body=b'', **h): return json.loads((await nc.request(subject, body, headers=h or None, timeout=5)).data)
    await req('$JS.API.STREAM.CREATE.R', json.dumps({'name': 'R', 'subjects': ['R.>'], 'allow_atomic': True, 'allow_rollup_hdrs': True,
                                                     'allow_msg_schedules': True}).encode())
    await req('$JS.API.STREAM.CREATE.N', json.dumps({'name': 'N', 'subjects': ['N.>'], 'allow_atomic': True}).encode())
    for k, (label, msgs) in enumerate(BATCH_RULES.items()):
        for i, (subject, h) in enumerate(msgs):
            bh = {'Nats-Batch-Id': f'b{k}', 'Nats-Batch-Sequence': str(i + 1), **h}
            if i < len(msgs) - 1: await nc.publish(subject, b'x', headers=bh); continue
            r = await req(subject, b'x', **bh, **{'Nats-Batch-Commit': '1'})
            out.append((label, r['error']['err_code'] if 'error' in r else ('stored', r['count'])))
    for label, h in [('rollup not allowed', {'Nats-Rollup': 'sub'}), ('subject for only', {'Nats-Expected-Last-Subject-Sequence-Subject': 'N.a'})]:
        r = await req('N.a', b'x', **{'Nats-Batch-Id': label.replace(' ', '-'), 'Nats-Batch-Sequence': '1', 'Nats-Batch-Commit': '1', **h})
        out.append((label, r['error']['err_code'] if 'error' in r else ('stored', r['count'])))
    si = json.loads((await nc.request('$JS.API.STREAM.INFO.R', b'', timeout=5)).data)
    out.append(('stored in R', si['state']['messages']))
    await nc.close()
    return out


async def test_batch_checks_follow_the_reference(start_server):
    res = {k: await batch_rules(start_server(k, '-js')) for k in ('nats-server', 'jsnb')}
    assert ('rollup all, not first', 10111) in res['nats-server']                       # the scenario exercises the rules
    diffs = [f'\n jsnb: {b}\n  ref: {a}' for a, b in zip(res['nats-server'], res['jsnb']) if a != b]
    assert not diffs and len(res['jsnb']) == len(res['nats-server']), ''.join(diffs)
