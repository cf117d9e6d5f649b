"""Consumer delivery behaviour on the wire, each scenario against jsnb and the reference nats-server.

Every scenario watches the raw frames a plain subscription receives (subject, reply subject with its
timestamp token blanked, headers with status lines, payload) and the consumer info counters; the expected
values are the ones the reference produces. Timings are loose on purpose: waits are generous upper bounds,
and where spacing matters only a fraction of the expected delay is required."""
import asyncio, datetime, json, time
import pytest
import nats

from rawclient import Raw

pytestmark = pytest.mark.reference
BOTH = ['jsnb', 'nats-server']
NS = 1_000_000_000
MS = 1_000_000
NOT_FOUND = {'code': 404, 'err_code': 10014, 'description': 'consumer not found'}


# ---------------------------------------------------------------------------------------------- helpers

async def boot(start_server, kind, *streams):
    "Start `kind` with JetStream, connect, create `streams` (raw stream configs)."
    s = start_server(kind, '-js')
    nc = await asyncio.wait_for(nats.connect(s.url), 15)
    for st in streams:
        r = await api(nc, f'$JS.API.STREAM.CREATE.{st["name"]}', st)
        assert 'error' not in r, r
    return s, nc


async def api(nc, subject, body=None) -> dict:
    data = b'' if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    r = await nc.request(subject, data, timeout=5)
    return json.loads(r.data)


async def add_consumer(nc, stream, cfg) -> dict:
    name = cfg.get('durable_name') or cfg.get('name')
    subject = f'$JS.API.CONSUMER.CREATE.{stream}' + (f'.{name}' if name else '')
    r = await api(nc, subject, {'stream_name': stream, 'config': cfg})
    assert 'error' not in r, r
    return r


async def info(nc, stream, name) -> dict:
    return await api(nc, f'$JS.API.CONSUMER.INFO.{stream}.{name}')


def counters(ci) -> dict:
    return dict(delivered=(ci['delivered']['consumer_seq'], ci['delivered']['stream_seq']),
                ack_floor=(ci['ack_floor']['consumer_seq'], ci['ack_floor']['stream_seq']),
                num_ack_pending=ci['num_ack_pending'], num_redelivered=ci['num_redelivered'],
                num_pending=ci['num_pending'], num_waiting=ci['num_waiting'])


async def publish(nc, subject, data=b'', headers=None) -> dict:
    r = await nc.request(subject, data, timeout=5, headers=headers)
    ack = json.loads(r.data); assert 'error' not in ack, ack
    return ack


def reply_shape(reply: str) -> str:
    "The reply subject with its per-run tokens blanked: the ack timestamp, the flow control id."
    if not reply: return ''
    t = reply.split('.')
    if reply.startswith('$JS.ACK.') and len(t) == 9: t[7] = '<ts>'
    elif reply.startswith('$JS.FC.'): t[-1] = '<id>'
    return '.'.join(t)


def frame(m) -> tuple:
    return (m.subject, reply_shape(m.reply), dict(m.headers or {}), m.data)


def ack_reply(stream, consumer, dc, sseq, dseq, pending) -> str:
    return f'$JS.ACK.{stream}.{consumer}.{dc}.{sseq}.{dseq}.<ts>.{pending}'


def is_status(m, code=None) -> bool:
    st = (m.headers or {}).get('Status')
    return st is not None and (code is None or st == code)


class Collector:
    "Everything a plain subscription receives, with arrival times (monotonic and wall clock)."
    def __init__(self): self.got = []

    @classmethod
    async def on(cls, nc, subject, queue=''):
        c = cls()
        async def cb(m): c.got.append((time.monotonic(), time.time(), m))
        c.sub = await nc.subscribe(subject, queue=queue, cb=cb, pending_bytes_limit=512 * 1024 * 1024)
        await nc.flush()
        return c

    @property
    def msgs(self): return [m for _, _, m in self.got]

    @property
    def data(self): return [m for m in self.msgs if not is_status(m)]

    def status(self, code): return [m for m in self.msgs if is_status(m, code)]

    async def until(self, pred, timeout=10, what=''):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = pred()
            if r: return r
            await asyncio.sleep(0.02)
        raise AssertionError(f'timed out waiting for {what}; got {[frame(m) for m in self.msgs][-5:]}')

    async def count(self, n, timeout=10):
        return await self.until(lambda: len(self.data) >= n, timeout, f'{n} messages')


def rfc3339(t: float) -> str:
    "A wall clock time as RFC 3339 with nanoseconds, UTC, trailing zeros trimmed (as the reference prints it)."
    ns = int(t * NS)
    base = datetime.datetime.fromtimestamp(ns // NS, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S')
    frac = f'{ns % NS:09d}'.rstrip('0')
    return base + (f'.{frac}' if frac else '') + 'Z'


def blank(x, keys):
    if isinstance(x, dict): return {k: ('<v>' if k in keys else blank(v, keys)) for k, v in x.items()}
    if isinstance(x, list): return [blank(v, keys) for v in x]
    return x


# ---------------------------------------------------------------------------------------------- 1

@pytest.mark.parametrize('kind', BOTH)
async def test_flow_control_and_idle_heartbeats(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'FC', 'subjects': ['fc.>']})
    # an idle consumer: the first heartbeat reports nothing delivered yet
    idle = await Collector.on(nc, 'dlv.idle')
    await add_consumer(nc, 'FC', {'durable_name': 'H', 'deliver_subject': 'dlv.idle', 'filter_subject': 'fc.none',
                                  'idle_heartbeat': 500 * MS, 'ack_policy': 'none'})
    await idle.until(lambda: idle.msgs, 5, 'an idle heartbeat')
    assert frame(idle.msgs[0]) == ('dlv.idle', '', {'Status': '100', 'Description': 'Idle Heartbeat',
                                                    'Nats-Last-Consumer': '0', 'Nats-Last-Stream': '0'}, b'')

    body = b'x' * 32 * 1024
    for _ in range(300): await publish(nc, 'fc.x', body)
    col = await Collector.on(nc, 'dlv.fc')
    await add_consumer(nc, 'FC', {'durable_name': 'C', 'deliver_subject': 'dlv.fc', 'idle_heartbeat': 500 * MS,
                                  'flow_control': True, 'ack_policy': 'none'})
    fc = (await col.until(lambda: [m for m in col.msgs if (m.headers or {}).get('Description') == 'FlowControl Request'],
                          10, 'a flow control request'))[0]
    assert frame(fc) == ('dlv.fc', '$JS.FC.FC.C.<id>', {'Status': '100', 'Description': 'FlowControl Request'}, b'')
    assert len(fc.reply.split('.')) == 5
    # without an answer the consumer stalls, and its heartbeats say on what
    stalled = (await col.until(lambda: [m for m in col.status('100') if 'Nats-Consumer-Stalled' in m.headers], 5,
                               'a stalled heartbeat'))[0]
    n1 = len(col.data)
    assert 0 < n1 < 300
    assert frame(stalled) == ('dlv.fc', '', {'Status': '100', 'Description': 'Idle Heartbeat', 'Nats-Last-Consumer': str(n1),
                                             'Nats-Last-Stream': str(n1), 'Nats-Consumer-Stalled': fc.reply}, b'')
    await col.until(lambda: len([m for m in col.status('100') if 'Nats-Consumer-Stalled' in m.headers]) >= 2, 5, 'another stalled heartbeat')
    assert len(col.data) == n1, 'delivered more while stalled on flow control'
    # answering every flow control request lets it run to the end
    answered, last_answer = set(), time.monotonic()
    end = time.monotonic() + 30
    while time.monotonic() < end:
        for m in col.msgs:
            if m.headers and m.headers.get('Description') == 'FlowControl Request' and m.reply not in answered:
                answered.add(m.reply); await nc.publish(m.reply, b''); last_answer = time.monotonic()
        if len(col.data) == 300 and any(t > last_answer + 0.05 and is_status(m, '100') and 'Nats-Consumer-Stalled' not in m.headers
                                        and m.headers.get('Description') == 'Idle Heartbeat' for t, _, m in col.got):
            break
        await asyncio.sleep(0.02)
    assert len(col.data) == 300 and len(answered) >= 1
    assert [frame(m) for m in col.data] == [('fc.x', ack_reply('FC', 'C', 1, i, i, 300 - i), {}, body) for i in range(1, 301)]
    for m in col.msgs:
        if is_status(m) and m.headers.get('Description') == 'FlowControl Request':
            assert frame(m) == ('dlv.fc', '$JS.FC.FC.C.<id>', {'Status': '100', 'Description': 'FlowControl Request'}, b'')
    hb = [m for t, _, m in col.got if t > last_answer + 0.05 and is_status(m, '100') and m.headers.get('Description') == 'Idle Heartbeat'][-1]
    assert frame(hb) == ('dlv.fc', '', {'Status': '100', 'Description': 'Idle Heartbeat',
                                        'Nats-Last-Consumer': '300', 'Nats-Last-Stream': '300'}, b'')
    ci = await info(nc, 'FC', 'C')
    assert counters(ci) == dict(delivered=(300, 300), ack_floor=(300, 300), num_ack_pending=0, num_redelivered=0, num_pending=0, num_waiting=0)
    await nc.close()


# ---------------------------------------------------------------------------------------------- 2

@pytest.mark.parametrize('kind', BOTH)
async def test_replay_original_vs_instant(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'R', 'subjects': ['r.>']})
    t0 = time.monotonic()
    for i in range(5):
        if i: await asyncio.sleep(0.5)
        await publish(nc, f'r.{i}', b'm%d' % i)
    span = time.monotonic() - t0
    orig, inst = await Collector.on(nc, 'dlv.orig'), await Collector.on(nc, 'dlv.inst')
    await add_consumer(nc, 'R', {'durable_name': 'O', 'deliver_subject': 'dlv.orig', 'replay_policy': 'original', 'ack_policy': 'none'})
    await add_consumer(nc, 'R', {'durable_name': 'I', 'deliver_subject': 'dlv.inst', 'replay_policy': 'instant', 'ack_policy': 'none'})
    await inst.count(5, 10); await orig.count(5, 15)
    for col, name in ((orig, 'O'), (inst, 'I')):
        assert [frame(m) for m in col.msgs] == [(f'r.{i}', ack_reply('R', name, 1, i + 1, i + 1, 4 - i), {}, b'm%d' % i) for i in range(5)]
    t_orig = [t for t, _, _ in orig.got]
    t_inst = [t for t, _, _ in inst.got]
    assert t_orig[-1] - t_orig[0] >= 0.6 * span, (t_orig, span)
    assert all(b - a >= 0.6 * 0.5 for a, b in zip(t_orig, t_orig[1:])), t_orig
    assert t_inst[-1] - t_inst[0] < 0.6 * span, (t_inst, span)
    await nc.close()


# ---------------------------------------------------------------------------------------------- 3

@pytest.mark.parametrize('kind', BOTH)
async def test_rate_limit(start_server, kind):
    # the burst allowance is the stream's max_msg_size (else the max payload, 1 MiB)
    s, nc = await boot(start_server, kind, {'name': 'RL', 'subjects': ['rl.>'], 'max_msg_size': 2048},
                       {'name': 'RB', 'subjects': ['rb.>']})
    for i in range(5): await publish(nc, 'rl.x', bytes([65 + i]) * 1024); await publish(nc, 'rb.x', bytes([65 + i]) * 1024)
    slow, burst = await Collector.on(nc, 'dlv.slow'), await Collector.on(nc, 'dlv.burst')
    t0 = time.monotonic()
    await add_consumer(nc, 'RL', {'durable_name': 'L', 'deliver_subject': 'dlv.slow', 'rate_limit_bps': 8000, 'ack_policy': 'none'})
    await add_consumer(nc, 'RB', {'durable_name': 'B', 'deliver_subject': 'dlv.burst', 'rate_limit_bps': 8000, 'ack_policy': 'none'})
    await burst.count(5, 10)
    t_burst = time.monotonic() - t0
    await slow.count(5, 20)
    t_slow = slow.got[-1][0] - t0
    assert t_slow >= 2.0, t_slow
    assert t_burst < t_slow / 2, f'5 KiB fits the 1 MiB burst, took {t_burst} (the limited one {t_slow})'
    assert [frame(m) for m in slow.msgs] == [('rl.x', ack_reply('RL', 'L', 1, i, i, 5 - i), {}, bytes([64 + i]) * 1024) for i in range(1, 6)]
    assert counters(await info(nc, 'RL', 'L'))['delivered'] == (5, 5)
    await nc.close()


# ---------------------------------------------------------------------------------------------- 4

@pytest.mark.parametrize('kind', BOTH)
async def test_headers_only(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'HO', 'subjects': ['ho.>']})
    await publish(nc, 'ho.a', b'y' * 100, headers={'X-A': '1', 'X-B': 'two words'})
    await publish(nc, 'ho.b', b'abc')
    await publish(nc, 'ho.c', b'')
    col = await Collector.on(nc, 'dlv.ho')
    await add_consumer(nc, 'HO', {'durable_name': 'C', 'deliver_subject': 'dlv.ho', 'headers_only': True, 'ack_policy': 'explicit'})
    await col.count(3, 10)
    assert [frame(m) for m in col.msgs] == [
        ('ho.a', ack_reply('HO', 'C', 1, 1, 1, 2), {'X-A': '1', 'X-B': 'two words', 'Nats-Msg-Size': '100'}, b''),
        ('ho.b', ack_reply('HO', 'C', 1, 2, 2, 1), {'Nats-Msg-Size': '3'}, b''),
        ('ho.c', ack_reply('HO', 'C', 1, 3, 3, 0), {'Nats-Msg-Size': '0'}, b''),
    ]
    # pull consumers likewise
    await add_consumer(nc, 'HO', {'durable_name': 'P', 'headers_only': True, 'ack_policy': 'explicit'})
    inbox = nc.new_inbox(); pc = await Collector.on(nc, inbox)
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.HO.P', json.dumps({'batch': 1}).encode(), reply=inbox)
    await pc.count(1, 5)
    assert frame(pc.msgs[0]) == ('ho.a', ack_reply('HO', 'P', 1, 1, 1, 2), {'X-A': '1', 'X-B': 'two words', 'Nats-Msg-Size': '100'}, b'')
    await nc.close()


# ---------------------------------------------------------------------------------------------- 5

@pytest.mark.parametrize('kind', BOTH)
async def test_ack_next(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'NX', 'subjects': ['nx.>']})
    for i in range(1, 7): await publish(nc, 'nx.a', b'%d' % i)
    await add_consumer(nc, 'NX', {'durable_name': 'P', 'ack_policy': 'explicit'})
    a = nc.new_inbox(); ca = await Collector.on(nc, a)
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.NX.P', b'', reply=a)
    await ca.count(1, 5)
    assert frame(ca.msgs[0]) == ('nx.a', ack_reply('NX', 'P', 1, 1, 1, 5), {}, b'1')
    # +NXT with a JSON body: the next two arrive on the ack's own reply inbox
    b = nc.new_inbox(); cb = await Collector.on(nc, b)
    await nc.publish(ca.msgs[0].reply, b'+NXT {"batch":2}', reply=b)
    await cb.count(2, 5)
    assert [frame(m) for m in cb.msgs] == [('nx.a', ack_reply('NX', 'P', 1, 2, 2, 4), {}, b'2'),
                                           ('nx.a', ack_reply('NX', 'P', 1, 3, 3, 3), {}, b'3')]
    # +NXT without a body asks for one; with a bare number for that many
    c = nc.new_inbox(); cc = await Collector.on(nc, c)
    await nc.publish(cb.msgs[1].reply, b'+NXT', reply=c)
    await cc.count(1, 5)
    d = nc.new_inbox(); cd = await Collector.on(nc, d)
    await nc.publish(cc.msgs[0].reply, b'+NXT 2', reply=d)
    await cd.count(2, 5)
    await asyncio.sleep(0.2)
    assert [frame(m) for m in cc.msgs] == [('nx.a', ack_reply('NX', 'P', 1, 4, 4, 2), {}, b'4')]
    assert [frame(m) for m in cd.msgs] == [('nx.a', ack_reply('NX', 'P', 1, 5, 5, 1), {}, b'5'),
                                           ('nx.a', ack_reply('NX', 'P', 1, 6, 6, 0), {}, b'6')]
    assert len(cb.msgs) == 2 and len(ca.msgs) == 1
    ci = await info(nc, 'NX', 'P')
    # 1, 3 and 4 were acknowledged with +NXT; 2, 5 and 6 are pending
    assert counters(ci) == dict(delivered=(6, 6), ack_floor=(1, 1), num_ack_pending=3, num_redelivered=0, num_pending=0, num_waiting=0)
    await nc.close()


# ---------------------------------------------------------------------------------------------- 6

@pytest.mark.parametrize('kind', BOTH)
async def test_backoff_and_max_deliver(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'BO', 'subjects': ['bo.>']})
    adv = await Collector.on(nc, '$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.BO.C')
    col = await Collector.on(nc, 'dlv.bo')
    r = await add_consumer(nc, 'BO', {'durable_name': 'C', 'deliver_subject': 'dlv.bo', 'ack_policy': 'explicit',
                                      'backoff': [500 * MS, 1000 * MS], 'max_deliver': 3})
    assert r['config']['ack_wait'] == 500 * MS and r['config']['backoff'] == [500 * MS, 1000 * MS]
    await publish(nc, 'bo.a', b'again')
    await col.count(2, 5)
    ci = await info(nc, 'BO', 'C')
    assert counters(ci) == dict(delivered=(2, 1), ack_floor=(0, 0), num_ack_pending=1, num_redelivered=1, num_pending=0, num_waiting=0)
    await col.count(3, 6)
    ci = await info(nc, 'BO', 'C')                     # the last delivery is pending until its ack wait (1 s) runs out
    assert counters(ci) == dict(delivered=(3, 1), ack_floor=(0, 0), num_ack_pending=1, num_redelivered=1, num_pending=0, num_waiting=0)
    await asyncio.sleep(2.2)                           # a 4th delivery would come 1 s after the 3rd
    assert [frame(m) for m in col.msgs] == [('bo.a', ack_reply('BO', 'C', dc, 1, dc, 0), {}, b'again') for dc in (1, 2, 3)]
    t = [t for t, _, _ in col.got]
    assert 0.3 <= t[1] - t[0] < 3, t
    assert 0.6 <= t[2] - t[1] < 4, t
    ci = await info(nc, 'BO', 'C')             # past max_deliver it is no longer pending, though never acknowledged
    assert counters(ci) == dict(delivered=(3, 1), ack_floor=(0, 0), num_ack_pending=0, num_redelivered=1, num_pending=0, num_waiting=0)
    assert len(adv.msgs) == 1
    a = json.loads(adv.msgs[0].data)
    assert blank(a, {'id', 'timestamp'}) == {'type': 'io.nats.jetstream.advisory.v1.max_deliver', 'id': '<v>', 'timestamp': '<v>',
                                              'stream': 'BO', 'consumer': 'C', 'stream_seq': 1, 'deliveries': 3}
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_max_deliver_counts_naks(start_server, kind):
    "A message NAKed on every delivery is delivered `max_deliver` times, then dropped from pending with one advisory."
    s, nc = await boot(start_server, kind, {'name': 'MD', 'subjects': ['md.>']})
    adv = await Collector.on(nc, '$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.MD.P')
    await add_consumer(nc, 'MD', {'durable_name': 'P', 'ack_policy': 'explicit', 'max_deliver': 2, 'ack_wait': 30 * NS})
    await publish(nc, 'md.a', b'bad')
    got = []
    for _ in range(3):
        col = await Collector.on(nc, nc.new_inbox())
        await nc.publish('$JS.API.CONSUMER.MSG.NEXT.MD.P', json.dumps({'batch': 1, 'expires': 700 * MS}).encode(), reply=col.sub.subject)
        m = (await col.until(lambda: col.msgs, 3, 'a message or a status'))[0]
        got.append(frame(m) if not is_status(m) else m.headers['Status'])
        if not is_status(m): await nc.request(m.reply, b'-NAK', timeout=5)
    assert got == [('md.a', ack_reply('MD', 'P', dc, 1, dc, 0), {}, b'bad') for dc in (1, 2)] + ['408']
    await adv.count(1)
    assert json.loads(adv.msgs[0].data)['deliveries'] == 2 and len(adv.msgs) == 1
    ci = await info(nc, 'MD', 'P')
    assert counters(ci) == dict(delivered=(2, 1), ack_floor=(0, 0), num_ack_pending=0, num_redelivered=1, num_pending=0, num_waiting=0)
    await nc.close()


# ---------------------------------------------------------------------------------------------- 7

@pytest.mark.parametrize('kind', BOTH)
async def test_nak_with_delay(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'NK', 'subjects': ['nk.>']})
    await publish(nc, 'nk.a', b'first'); await publish(nc, 'nk.b', b'second')
    await add_consumer(nc, 'NK', {'durable_name': 'P', 'ack_policy': 'explicit', 'ack_wait': 30 * NS})
    cols = {}
    async def pull(tag, body):
        cols[tag] = await Collector.on(nc, nc.new_inbox())
        await nc.publish('$JS.API.CONSUMER.MSG.NEXT.NK.P', json.dumps(body).encode(), reply=cols[tag].sub.subject)
    async def on(tag, what, timeout=5):
        col = cols[tag]; await col.until(lambda: col.msgs, timeout, what)
        return col.msgs
    await pull('a', {'batch': 1, 'no_wait': True})
    (m1,) = await on('a', 'the first message')
    assert frame(m1) == ('nk.a', ack_reply('NK', 'P', 1, 1, 1, 1), {}, b'first')
    await nc.request(m1.reply, b'-NAK {"delay": 1000000000}', timeout=5)
    t_nak = time.monotonic()
    await pull('b', {'batch': 1, 'no_wait': True})     # the delayed one is not due yet: the next comes first
    (m2,) = await on('b', 'the second message')
    assert frame(m2) == ('nk.b', ack_reply('NK', 'P', 1, 2, 2, 0), {}, b'second')
    await nc.request(m2.reply, b'+ACK', timeout=5)
    await pull('c', {'batch': 1, 'no_wait': True})
    (m3,) = await on('c', 'a status')
    assert frame(m3) == (cols['c'].sub.subject, '', {'Status': '404', 'Description': 'No Messages'}, b'')
    ci = await info(nc, 'NK', 'P')
    assert counters(ci) == dict(delivered=(2, 2), ack_floor=(0, 0), num_ack_pending=1, num_redelivered=0, num_pending=0, num_waiting=0)
    await pull('d', {'batch': 1, 'expires': 5 * NS})
    (m4,) = await on('d', 'the redelivery', 6)
    t4 = cols['d'].got[0][0]
    assert t4 - t_nak >= 0.7, t4 - t_nak
    assert frame(m4) == ('nk.a', ack_reply('NK', 'P', 2, 1, 3, 0), {}, b'first')
    ci = await info(nc, 'NK', 'P')
    assert counters(ci) == dict(delivered=(3, 2), ack_floor=(0, 0), num_ack_pending=1, num_redelivered=1, num_pending=0, num_waiting=0)
    await nc.close()


# ---------------------------------------------------------------------------------------------- 8

@pytest.mark.parametrize('kind', BOTH)
async def test_inactive_threshold(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'IT', 'subjects': ['it.>']})
    await publish(nc, 'it.a', b'1')
    live = await Collector.on(nc, 'dlv.live')
    push = (await add_consumer(nc, 'IT', {'deliver_subject': 'nobody.listens', 'inactive_threshold': NS, 'ack_policy': 'none'}))['name']
    pull = (await add_consumer(nc, 'IT', {'inactive_threshold': NS, 'ack_policy': 'explicit'}))['name']
    kept = (await add_consumer(nc, 'IT', {'deliver_subject': 'dlv.live', 'inactive_threshold': NS, 'ack_policy': 'none'}))['name']
    assert 'error' not in await info(nc, 'IT', push) and 'error' not in await info(nc, 'IT', pull)
    gone, t0 = {}, time.monotonic()
    while time.monotonic() - t0 < 8 and len(gone) < 2:
        for name in (push, pull):
            if name not in gone:
                r = await info(nc, 'IT', name)
                if 'error' in r: gone[name] = (time.monotonic() - t0, r['error'])
        await asyncio.sleep(0.1)
    assert set(gone) == {push, pull}, gone
    assert all(err == NOT_FOUND for _, err in gone.values()), gone
    assert all(t >= 0.5 for t, _ in gone.values()), gone
    # the push consumer with an interested subscriber stays
    assert 'error' not in await info(nc, 'IT', kept)
    await live.count(1, 5)
    names = (await api(nc, '$JS.API.CONSUMER.NAMES.IT'))['consumers']
    assert names == [kept]
    await nc.close()


# ---------------------------------------------------------------------------------------------- 9

@pytest.mark.parametrize('kind', BOTH)
async def test_consumer_pause(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'PZ', 'subjects': ['pz.>']})
    col = await Collector.on(nc, 'dlv.pz')
    created = await add_consumer(nc, 'PZ', {'durable_name': 'C', 'deliver_subject': 'dlv.pz', 'ack_policy': 'none'})
    until = time.time() + 1.5
    stamp = rfc3339(until)
    r = await api(nc, '$JS.API.CONSUMER.PAUSE.PZ.C', {'pause_until': stamp})
    assert blank(r, {'pause_until', 'pause_remaining'}) == {'type': 'io.nats.jetstream.api.v1.consumer_pause_response',
                                                            'paused': True, 'pause_until': '<v>', 'pause_remaining': '<v>'}
    assert r['pause_until'] == stamp and 0 < r['pause_remaining'] <= 1.5 * NS
    await publish(nc, 'pz.a', b'1'); await publish(nc, 'pz.b', b'2')
    ci = await info(nc, 'PZ', 'C')
    assert ci['paused'] is True and 0 < ci['pause_remaining'] <= 1.5 * NS
    assert ci['config'] == {**created['config'], 'pause_until': stamp, 'metadata': {**created['config']['metadata'], '_nats.req.level': '1'}}
    assert counters(ci)['num_pending'] == 2 and counters(ci)['delivered'] == (0, 0)
    await col.count(2, 8)
    assert [frame(m) for m in col.msgs] == [('pz.a', ack_reply('PZ', 'C', 1, 1, 1, 1), {}, b'1'), ('pz.b', ack_reply('PZ', 'C', 1, 2, 2, 0), {}, b'2')]
    assert col.got[0][1] >= until - 0.05, (col.got[0][1], until)     # nothing before the pause ended
    ci = await info(nc, 'PZ', 'C')
    assert 'paused' not in ci and 'pause_remaining' not in ci
    # resuming and pausing an unknown consumer
    r = await api(nc, '$JS.API.CONSUMER.PAUSE.PZ.C', {})
    assert r == {'type': 'io.nats.jetstream.api.v1.consumer_pause_response', 'paused': False, 'pause_until': '0001-01-01T00:00:00Z'}
    past = rfc3339(time.time() - 10)
    r = await api(nc, '$JS.API.CONSUMER.PAUSE.PZ.C', {'pause_until': past})
    assert r == {'type': 'io.nats.jetstream.api.v1.consumer_pause_response', 'paused': False, 'pause_until': past}
    r = await api(nc, '$JS.API.CONSUMER.PAUSE.PZ.NOPE', {'pause_until': stamp})
    assert r == {'type': 'io.nats.jetstream.api.v1.consumer_pause_response', 'error': NOT_FOUND,
                 'paused': False, 'pause_until': '0001-01-01T00:00:00Z'}
    await nc.close()


# ---------------------------------------------------------------------------------------------- 10

@pytest.mark.parametrize('kind', BOTH)
async def test_start_time_and_filter_subjects(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'T', 'subjects': ['t.>']})
    for x in 'abc': await publish(nc, f't.{x}', b'old ' + x.encode())          # 1-3
    await asyncio.sleep(0.3); start = rfc3339(time.time()); await asyncio.sleep(0.3)
    for x in 'abc': await publish(nc, f't.{x}', b'new ' + x.encode())          # 4-6
    r = await add_consumer(nc, 'T', {'durable_name': 'P', 'deliver_policy': 'by_start_time', 'opt_start_time': start,
                                     'filter_subjects': ['t.a', 't.c'], 'ack_policy': 'explicit'})
    assert r['config']['opt_start_time'] == start and r['config']['filter_subjects'] == ['t.a', 't.c'] and 'filter_subject' not in r['config']
    steps = [counters(r)]
    inbox = nc.new_inbox(); col = await Collector.on(nc, inbox)
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.T.P', json.dumps({'batch': 1}).encode(), reply=inbox)
    await col.count(1, 5)
    steps.append(counters(await info(nc, 'T', 'P')))
    await publish(nc, 't.b', b'late b'); await publish(nc, 't.c', b'late c'); await publish(nc, 't.a', b'late a')   # 7-9
    steps.append(counters(await info(nc, 'T', 'P')))
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.T.P', json.dumps({'batch': 10, 'expires': 500 * MS}).encode(), reply=inbox)
    await col.count(4, 5)
    await col.until(lambda: col.status('408'), 5, 'the request to expire')
    steps.append(counters(await info(nc, 'T', 'P')))
    assert [frame(m) for m in col.data] == [
        ('t.a', ack_reply('T', 'P', 1, 4, 1, 1), {}, b'new a'), ('t.c', ack_reply('T', 'P', 1, 6, 2, 2), {}, b'new c'),
        ('t.c', ack_reply('T', 'P', 1, 8, 3, 1), {}, b'late c'), ('t.a', ack_reply('T', 'P', 1, 9, 4, 0), {}, b'late a')]
    z = dict(num_redelivered=0, num_waiting=0)
    # the stream sequences start just before the first message at or after the start time
    assert steps == [dict(delivered=(0, 3), ack_floor=(0, 3), num_ack_pending=0, num_pending=2, **z),
                     dict(delivered=(1, 4), ack_floor=(0, 3), num_ack_pending=1, num_pending=1, **z),
                     dict(delivered=(1, 4), ack_floor=(0, 3), num_ack_pending=1, num_pending=3, **z),
                     dict(delivered=(4, 9), ack_floor=(0, 3), num_ack_pending=4, num_pending=0, **z)]
    # a start time after everything: nothing pending, the next new message is the first
    r = await add_consumer(nc, 'T', {'durable_name': 'F', 'deliver_policy': 'by_start_time', 'opt_start_time': rfc3339(time.time() + 0.2),
                                     'filter_subjects': ['t.b', 't.c']})
    z = dict(num_ack_pending=0, num_redelivered=0, num_waiting=0)
    assert counters(r) == dict(delivered=(0, 9), ack_floor=(0, 9), num_pending=0, **z)
    await asyncio.sleep(0.4)
    await publish(nc, 't.c', b'future')                                       # 10
    assert counters(await info(nc, 'T', 'F')) == dict(delivered=(0, 9), ack_floor=(0, 9), num_pending=1, **z)
    await nc.close()


# ---------------------------------------------------------------------------------------------- 11

def hmsgs(raw: Raw, n: int, timeout: float = 5) -> list[tuple[str, str, bytes, bytes]]:
    "Read `n` HMSG/MSG frames: (subject, reply shape, header block, payload)."
    out = [(m.subject.decode(), reply_shape(m.reply.decode()), m.hdr, m.payload) for m in raw.msgs(n, timeout)]
    assert len(out) == n, out
    return out


@pytest.mark.parametrize('kind', BOTH)
async def test_pull_request_limits_status_lines(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'PL', 'subjects': ['pl.>']})
    await publish(nc, 'pl.a', b'z' * 100)
    await add_consumer(nc, 'PL', {'durable_name': 'P', 'ack_policy': 'explicit', 'max_batch': 5, 'max_expires': 2 * NS, 'max_bytes': 1000})
    raw = Raw(s.port)
    raw.send(b'SUB _R.> 1\r\nPING\r\n'); raw.until(b'PONG')
    def pull(tag, body):
        b = json.dumps(body).encode()
        raw.send(b'PUB $JS.API.CONSUMER.MSG.NEXT.PL.P _R.%s %d\r\n%s\r\n' % (tag.encode(), len(b), b))
    pull('a', {'batch': 1, 'max_bytes': 50})
    pull('b', {'batch': 10})
    pull('c', {'batch': 1, 'expires': 5 * NS})
    pull('d', {'batch': 1, 'max_bytes': 2000})
    pull('e', {'batch': 1, 'expires': 3 * 60 * NS})
    frames = await asyncio.get_running_loop().run_in_executor(None, hmsgs, raw, 5)
    assert frames == [
        ('_R.a', '', b'NATS/1.0 409 Message Size Exceeds MaxBytes\r\nNats-Pending-Messages: 1\r\nNats-Pending-Bytes: 50\r\n\r\n', b''),
        ('_R.b', '', b'NATS/1.0 409 Exceeded MaxRequestBatch of 5\r\n\r\n', b''),
        ('_R.c', '', b'NATS/1.0 409 Exceeded MaxRequestExpires of 2s\r\n\r\n', b''),
        ('_R.d', '', b'NATS/1.0 409 Exceeded MaxRequestMaxBytes of 1000\r\n\r\n', b''),
        ('_R.e', '', b'NATS/1.0 409 Exceeded MaxRequestExpires of 2s\r\n\r\n', b''),
    ]
    # none of that delivered anything: the message is still first in line
    pull('f', {'batch': 5, 'max_bytes': 1000, 'expires': NS})
    (f,) = await asyncio.get_running_loop().run_in_executor(None, hmsgs, raw, 1)
    assert f == ('pl.a', ack_reply('PL', 'P', 1, 1, 1, 0), b'', b'z' * 100)
    ci = await info(nc, 'PL', 'P')
    assert counters(ci)['delivered'] == (1, 1) and ci['num_redelivered'] == 0
    raw.close()
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_pull_max_bytes_counts_subject_reply_and_message(start_server, kind):
    "`max_bytes` counts each message as the reference does: subject + ack reply + headers + payload."
    s, nc = await boot(start_server, kind, {'name': 'MB', 'subjects': ['mb.>']})
    for _ in range(100): await publish(nc, 'mb.a', b'0123456789')
    await add_consumer(nc, 'MB', {'durable_name': 'P', 'ack_policy': 'explicit'})
    raw = Raw(s.port)
    raw.send(b'SUB _R.> 1\r\nPING\r\n'); raw.until(b'PONG')
    b = json.dumps({'batch': 1000, 'max_bytes': 1000, 'expires': 2 * NS}).encode()
    raw.send(b'PUB $JS.API.CONSUMER.MSG.NEXT.MB.P _R.x %d\r\n%s\r\n' % (len(b), b))
    got = await asyncio.get_running_loop().run_in_executor(None, lambda: raw.msgs(100, 3))
    *msgs, last = got
    sizes = [len(m.subject) + len(m.reply) + len(m.hdr) + len(m.payload) for m in msgs]
    assert 15 <= len(msgs) <= 20 and all(m.payload == b'0123456789' for m in msgs)
    left = 1000 - sum(sizes)
    assert last.hdr == b'NATS/1.0 409 Message Size Exceeds MaxBytes\r\nNats-Pending-Messages: %d\r\nNats-Pending-Bytes: %d\r\n\r\n' % (1000 - len(msgs), left)
    assert 0 < left < sizes[-1]
    raw.close(); await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_no_responders_for_missing_consumer_and_ack_none(start_server, kind):
    "Pull requests to a missing stream or consumer, and acks to an `ack_policy: none` consumer, get the core's 503."
    s, nc = await boot(start_server, kind, {'name': 'NR', 'subjects': ['nr.>']})
    await publish(nc, 'nr.a', b'x')
    await add_consumer(nc, 'NR', {'durable_name': 'N', 'ack_policy': 'none'})
    await add_consumer(nc, 'NR', {'durable_name': 'E', 'ack_policy': 'explicit'})
    raw = Raw(s.port)
    raw.send(b'SUB _R.> 1\r\nPING\r\n'); raw.until(b'PONG')
    asks = ['$JS.API.CONSUMER.MSG.NEXT.NOPE.C', '$JS.API.CONSUMER.MSG.NEXT.NR.NOPE', '$JS.ACK.NR.NOPE.1.1.1.0.0']
    for i, subj in enumerate(asks): raw.send(b'PUB %s _R.%d 0\r\n\r\n' % (subj.encode(), i))
    frames = await asyncio.get_running_loop().run_in_executor(None, hmsgs, raw, len(asks))
    assert frames == [(f'_R.{i}', '', b'NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n' % a.encode(), b'') for i, a in enumerate(asks)]
    # a consumer that takes acks answers an ack-ack; one that takes none has no responder
    for name in ('E', 'N'):
        b = b'{"batch":1,"expires":1000000000}'
        raw.send(b'PUB $JS.API.CONSUMER.MSG.NEXT.NR.%s _R.%s %d\r\n%s\r\n' % (name.encode(), name.encode(), len(b), b))
        (m,) = await asyncio.get_running_loop().run_in_executor(None, lambda: raw.msgs(1, 5))
        raw.send(b'PUB %s _R.ack%s 4\r\n+ACK\r\n' % (m.reply, name.encode()))
        (a,) = await asyncio.get_running_loop().run_in_executor(None, hmsgs, raw, 1)
        assert a == ((f'_R.ack{name}', '', b'', b'') if name == 'E' else
                     (f'_R.ackN', '', b'NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n' % m.reply, b''))
    raw.close(); await nc.close()


# ---------------------------------------------------------------------------------------------- 12

@pytest.mark.parametrize('kind', BOTH)
async def test_ack_all(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'AA', 'subjects': ['aa.>']})
    for i in range(1, 6): await publish(nc, 'aa.x', b'%d' % i)
    await add_consumer(nc, 'AA', {'durable_name': 'P', 'ack_policy': 'all'})
    inbox = nc.new_inbox(); col = await Collector.on(nc, inbox)
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.AA.P', json.dumps({'batch': 5}).encode(), reply=inbox)
    await col.count(5, 5)
    ms = col.msgs
    assert [frame(m) for m in ms] == [('aa.x', ack_reply('AA', 'P', 1, i, i, 5 - i), {}, b'%d' % i) for i in range(1, 6)]
    steps = [counters(await info(nc, 'AA', 'P'))]
    await nc.request(ms[2].reply, b'+ACK', timeout=5)
    steps.append(counters(await info(nc, 'AA', 'P')))
    await nc.request(ms[1].reply, b'+ACK', timeout=5)          # already covered: nothing changes
    steps.append(counters(await info(nc, 'AA', 'P')))
    await nc.request(ms[4].reply, b'+ACK', timeout=5)
    steps.append(counters(await info(nc, 'AA', 'P')))
    z = dict(num_redelivered=0, num_pending=0, num_waiting=0)
    assert steps == [dict(delivered=(5, 5), ack_floor=(0, 0), num_ack_pending=5, **z),
                     dict(delivered=(5, 5), ack_floor=(3, 3), num_ack_pending=2, **z),
                     dict(delivered=(5, 5), ack_floor=(3, 3), num_ack_pending=2, **z),
                     dict(delivered=(5, 5), ack_floor=(5, 5), num_ack_pending=0, **z)]
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
@pytest.mark.parametrize('policy', ['explicit', 'all'])
async def test_ack_beyond_what_was_delivered_is_not_confirmed(start_server, kind, policy):
    """An acknowledgement of a message the consumer has not delivered yet (a stream sequence at or past its next one)
    changes nothing and gets no answer: an `AckSync` for it is never confirmed (a new consumer leader that did not
    hear of its predecessor's last deliveries must not confirm acks it could not apply)."""
    s, nc = await boot(start_server, kind, {'name': 'AB', 'subjects': ['ab.>']})
    for i in range(1, 6): await publish(nc, 'ab.x', b'%d' % i)
    await add_consumer(nc, 'AB', {'durable_name': 'P', 'ack_policy': policy})
    inbox = nc.new_inbox(); col = await Collector.on(nc, inbox)
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.AB.P', json.dumps({'batch': 2}).encode(), reply=inbox)
    await col.count(2, 5)
    before = counters(await info(nc, 'AB', 'P'))
    answers = []
    for sseq, dseq in ((3, 3), (5, 5), (1, 1)):                # not delivered, not delivered, delivered
        try: answers.append((await nc.request(f'$JS.ACK.AB.P.1.{sseq}.{dseq}.0.0', b'+ACK', timeout=1)).data)
        except nats.errors.TimeoutError: answers.append('no answer')
    after = counters(await info(nc, 'AB', 'P'))
    assert answers == ['no answer', 'no answer', b'']
    assert (before['delivered'], before['num_ack_pending']) == ((2, 2), 2)
    assert (after['delivered'], after['ack_floor'], after['num_ack_pending']) == ((2, 2), (1, 1), 1)
    await nc.close()


# ---------------------------------------------------------------------------------------------- 13

@pytest.mark.parametrize('kind', BOTH)
async def test_deliver_group_queue_subscribers(start_server, kind):
    s, nc = await boot(start_server, kind, {'name': 'DG', 'subjects': ['dg.>']})
    a = await Collector.on(nc, 'dlv.grp', queue='workers')
    b = await Collector.on(nc, 'dlv.grp', queue='workers')
    r = await add_consumer(nc, 'DG', {'durable_name': 'Q', 'deliver_subject': 'dlv.grp', 'deliver_group': 'workers', 'ack_policy': 'explicit'})
    assert r['config']['deliver_group'] == 'workers' and r['push_bound'] is True
    for i in range(1, 41): await publish(nc, f'dg.{i % 3}', b'%d' % i)
    await a.until(lambda: len(a.msgs) + len(b.msgs) >= 40, 10, '40 messages')
    await asyncio.sleep(0.3)
    for m in a.msgs + b.msgs: await nc.publish(m.reply, b'+ACK')
    await nc.flush()
    got = sorted((int(m.reply.split('.')[5]) for m in a.msgs + b.msgs))
    assert got == list(range(1, 41))
    assert all(m.reply.split('.')[4] == '1' for m in a.msgs + b.msgs)
    await asyncio.sleep(0.2)
    ci = await info(nc, 'DG', 'Q')
    assert counters(ci) == dict(delivered=(40, 40), ack_floor=(40, 40), num_ack_pending=0, num_redelivered=0, num_pending=0, num_waiting=0)
    await nc.close()


# ---------------------------------------------------------------------------------------------- pull requests and the window

@pytest.mark.parametrize('kind', BOTH)
async def test_redeliveries_are_not_held_back_by_max_ack_pending(start_server, kind):
    "With the ack window full, redeliveries still go out (they are pending already), and max_deliver still ends them."
    s, nc = await boot(start_server, kind, {'name': 'W', 'subjects': ['w.>']})
    adv = await Collector.on(nc, '$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.W.C')
    await add_consumer(nc, 'W', {'durable_name': 'C', 'ack_policy': 'explicit', 'max_ack_pending': 2,
                                 'backoff': [300 * MS, 600 * MS], 'max_deliver': 3})
    for i in range(3): await publish(nc, f'w.{i}', b'x')
    col = await Collector.on(nc, nc.new_inbox())
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.W.C', json.dumps({'batch': 10, 'expires': 4 * NS}).encode(), reply=col.sub.subject)
    await col.count(6, 5)                       # w.0 and w.1, three deliveries each; w.2 never fits the window
    got = sorted((m.subject, int(m.reply.split('.')[4])) for m in col.data)
    assert got == [('w.0', 1), ('w.0', 2), ('w.0', 3), ('w.1', 1), ('w.1', 2), ('w.1', 3)]
    await adv.count(2, 3)
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_no_wait_request_held_by_the_window_ends_at_its_heartbeat(start_server, kind):
    """A `no_wait` request with an expiry and a heartbeat (nats.py's `fetch`) that got what `max_ack_pending` let out
    ends with 404 at its first heartbeat: acknowledgements then do not send it more (the next request gets them)."""
    s, nc = await boot(start_server, kind, {'name': 'H', 'subjects': ['h.>']})
    await add_consumer(nc, 'H', {'durable_name': 'C', 'ack_policy': 'explicit', 'max_ack_pending': 5})
    for i in range(9): await publish(nc, f'h.{i}', b'x')
    col = await Collector.on(nc, nc.new_inbox())
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.H.C', json.dumps(
        {'batch': 20, 'expires': 3 * NS, 'idle_heartbeat': 100 * MS, 'no_wait': True}).encode(), reply=col.sub.subject)
    await col.until(lambda: col.status('404'), 3, 'No Messages')
    assert len(col.data) == 5 and not col.status('408')
    for m in col.data: await nc.request(m.reply, b'+ACK', timeout=5)
    nxt = await Collector.on(nc, nc.new_inbox())
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.H.C', json.dumps({'batch': 4, 'expires': 2 * NS}).encode(), reply=nxt.sub.subject)
    await nxt.count(4)
    assert len(col.data) == 5 and [m.subject for m in nxt.data] == [f'h.{i}' for i in range(5, 9)]
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_expired_request_gets_its_timeout_not_a_message(start_server, kind):
    "A message stored after a pull request expired goes to the next request, never to the expired one."
    s, nc = await boot(start_server, kind, {'name': 'X', 'subjects': ['x']})
    await add_consumer(nc, 'X', {'durable_name': 'C', 'ack_policy': 'explicit'})
    old = await Collector.on(nc, nc.new_inbox())
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.X.C', json.dumps({'batch': 1, 'expires': 200 * MS}).encode(), reply=old.sub.subject)
    await nc.flush(); await asyncio.sleep(0.21)
    await publish(nc, 'x', b'late')
    new = await Collector.on(nc, nc.new_inbox())
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.X.C', json.dumps({'batch': 1, 'expires': 2 * NS}).encode(), reply=new.sub.subject)
    await new.count(1)
    await old.until(lambda: old.status('408'), 3, 'the timeout')
    assert old.data == [] and [m.data for m in new.data] == [b'late']
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_requests_from_a_gone_inbox_are_dropped(start_server, kind):
    "A pull request whose reply subject nobody listens to is not served, not counted, and takes nothing."
    s, nc = await boot(start_server, kind, {'name': 'G', 'subjects': ['g']})
    await add_consumer(nc, 'G', {'durable_name': 'C', 'ack_policy': 'explicit'})
    gone = await Collector.on(nc, nc.new_inbox())
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.G.C', json.dumps({'batch': 5, 'expires': 30 * NS}).encode(), reply=gone.sub.subject)
    await nc.flush()
    await gone.sub.unsubscribe(); await nc.flush()
    await publish(nc, 'g', b'one')
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.G.C', json.dumps({'batch': 1}).encode(), reply=nc.new_inbox())   # nobody listens
    await nc.flush()
    ci = await info(nc, 'G', 'C')
    assert counters(ci) == dict(delivered=(0, 0), ack_floor=(0, 0), num_ack_pending=0, num_redelivered=0, num_pending=1, num_waiting=0)
    live = await Collector.on(nc, nc.new_inbox())
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.G.C', json.dumps({'batch': 1, 'expires': 2 * NS}).encode(), reply=live.sub.subject)
    await live.count(1)
    assert [m.data for m in live.data] == [b'one']
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_pause_until_in_the_create_config(start_server, kind):
    "A consumer created with `pause_until` in the future is paused from the start, and says so."
    s, nc = await boot(start_server, kind, {'name': 'PU', 'subjects': ['pu']})
    await publish(nc, 'pu', b'held')
    until = rfc3339(time.time() + 3600)
    r = await add_consumer(nc, 'PU', {'durable_name': 'C', 'ack_policy': 'explicit', 'pause_until': until})
    assert r['paused'] is True and 3500 * NS < r['pause_remaining'] <= 3600 * NS and r['config']['pause_until'] == until
    col = await Collector.on(nc, nc.new_inbox())
    await nc.publish('$JS.API.CONSUMER.MSG.NEXT.PU.C', json.dumps({'batch': 1, 'expires': 500 * MS}).encode(), reply=col.sub.subject)
    await col.until(lambda: col.status('408'), 3, 'the timeout')
    assert col.data == []
    ci = await info(nc, 'PU', 'C')
    assert ci['paused'] is True and counters(ci)['num_pending'] == 1
    await nc.close()


async def test_ack_policy_flow_control(start_server):
    "`ack_policy: flow_control`: flow control asked when full or idle, and the answer's Nats-Last-* headers ack up to there."
    async def run(kind):
        s, nc = await boot(start_server, kind, {'name': 'FCA', 'subjects': ['fca']})
        for _ in range(5): await publish(nc, 'fca', b'x')
        sub = await nc.subscribe('fca.dlv')
        await add_consumer(nc, 'FCA', {'durable_name': 'C', 'deliver_subject': 'fca.dlv', 'ack_policy': 'flow_control', 'max_ack_pending': 3})
        async def state():
            ci = await info(nc, 'FCA', 'C')
            return ci['ack_floor']['stream_seq'], ci['num_ack_pending'], ci['delivered']['stream_seq']
        log, answers = [], iter([2, 3, 5])
        t0 = time.time()
        while time.time() - t0 < 8 and len([x for x in log if x[0] == 'after']) < 3:
            m = await sub.next_msg(3)
            st = (m.headers or {}).get('Status')
            if st == '100' and m.reply:
                upto = next(answers)
                log.append(('flow control', await state()))
                await nc.publish(m.reply, b'', headers={'Nats-Last-Stream': str(upto), 'Nats-Last-Consumer': str(upto)})
                await nc.flush(); await asyncio.sleep(0.2)
                log.append(('after', upto, await state()))
            elif st is None: log.append(('msg', m.reply.split('.')[5]))
        await nc.close()
        return log
    ref, ours = await run('nats-server'), await run('jsnb')
    assert ours == ref
    assert ref[-1] == ('after', 5, (5, 0, 5))
