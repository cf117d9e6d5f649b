"""Consumers through stock nats-py, each scenario against jsnb and the reference.

Timings are loose on purpose (waits are upper bounds, never exact durations)."""
import asyncio, json, os
import pytest
import nats
from nats.js.api import ConsumerConfig, AckPolicy, DeliverPolicy

pytestmark = pytest.mark.reference
BOTH = ['jsnb', 'nats-server']


async def setup(start_server, kind, n=0, **stream):
    s = start_server(kind, '-js')
    nc = await asyncio.wait_for(nats.connect(s.url), 15)
    js = nc.jetstream()
    await js.add_stream(name='ORDERS', subjects=['ORDERS.*'], **stream)
    for i in range(n): await js.publish('ORDERS.received' if i % 2 == 0 else 'ORDERS.processed', b'order %d' % i)
    return s, nc, js


def counters(ci):
    return dict(delivered=(ci.delivered.consumer_seq, ci.delivered.stream_seq), ack_floor=(ci.ack_floor.consumer_seq, ci.ack_floor.stream_seq),
                num_ack_pending=ci.num_ack_pending, num_redelivered=ci.num_redelivered, num_pending=ci.num_pending)


@pytest.mark.parametrize('kind', BOTH)
async def test_pull_fetch_ack_counters(start_server, kind):
    s, nc, js = await setup(start_server, kind, 10)
    psub = await js.pull_subscribe('ORDERS.received', durable='NEW')
    msgs = await psub.fetch(3, timeout=5)
    assert [m.data for m in msgs] == [b'order 0', b'order 2', b'order 4']
    assert [m.metadata.sequence.stream for m in msgs] == [1, 3, 5]
    assert [m.metadata.sequence.consumer for m in msgs] == [1, 2, 3]
    assert msgs[0].metadata.num_pending == 4 and msgs[2].metadata.num_pending == 2
    await msgs[0].ack(); await msgs[2].ack_sync()
    ci = await js.consumer_info('ORDERS', 'NEW')
    assert counters(ci) == dict(delivered=(3, 5), ack_floor=(1, 2), num_ack_pending=1, num_redelivered=0, num_pending=2)  # seq 2 is filtered out
    await msgs[1].ack_sync()
    ci = await js.consumer_info('ORDERS', 'NEW')
    assert counters(ci) == dict(delivered=(3, 5), ack_floor=(3, 5), num_ack_pending=0, num_redelivered=0, num_pending=2)
    rest = await psub.fetch(10, timeout=1)
    assert [m.metadata.sequence.stream for m in rest] == [7, 9]
    with pytest.raises(nats.errors.TimeoutError): await psub.fetch(1, timeout=0.5)
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_nak_term_and_redelivery(start_server, kind):
    s, nc, js = await setup(start_server, kind, 4)
    psub = await js.pull_subscribe('ORDERS.*', durable='W', config=ConsumerConfig(ack_wait=1.0, max_deliver=3))
    m1, m2, m3 = await psub.fetch(3, timeout=5)
    await m1.nak(); await m2.term(); await m3.in_progress()
    await nc.flush(); await asyncio.sleep(0.2)           # the reference handles acks asynchronously
    again = await psub.fetch(1, timeout=5)
    assert again[0].metadata.sequence.stream == 1 and again[0].metadata.num_delivered == 2
    await again[0].ack_sync()
    # 4 is new; 3 was never acknowledged and comes back once its ack wait (1 s) has passed
    seen = {}
    for _ in range(10):
        try:
            for m in await psub.fetch(2, timeout=1):
                seen[m.metadata.sequence.stream] = m.metadata.num_delivered; await m.ack_sync()
        except asyncio.TimeoutError: pass
        if len(seen) >= 2: break
    assert seen == {3: 2, 4: 1}
    ci = await js.consumer_info('ORDERS', 'W')
    assert ci.num_ack_pending == 0 and ci.num_redelivered == 0 and ci.delivered.stream_seq == 4
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_pull_statuses_raw(start_server, kind):
    s, nc, js = await setup(start_server, kind, 1)
    await js.add_consumer('ORDERS', ConsumerConfig(durable_name='P', ack_policy=AckPolicy.EXPLICIT, max_waiting=1))
    inbox = nc.new_inbox(); sub = await nc.subscribe(inbox + '.*')
    async def pull(tag, body):
        await nc.publish('$JS.API.CONSUMER.MSG.NEXT.ORDERS.P', json.dumps(body).encode() if isinstance(body, dict) else body, reply=f'{inbox}.{tag}')
    await pull('a', {'batch': 1, 'no_wait': True})
    m = await sub.next_msg(timeout=5); assert m.data == b'order 0' and m.subject == 'ORDERS.received'   # the message keeps its subject
    await pull('b', {'batch': 1, 'no_wait': True})
    m = await sub.next_msg(timeout=5); assert (m.headers or {}).get('Status') == '404' and m.headers.get('Description') == 'No Messages'
    await pull('c', {'batch': 5, 'expires': 300_000_000})
    await pull('d', {'batch': 5, 'expires': 300_000_000})
    m = await sub.next_msg(timeout=5)
    assert m.subject.endswith('.d') and m.headers['Status'] == '409' and m.headers['Description'] == 'Exceeded MaxWaiting'
    m = await sub.next_msg(timeout=5)
    assert m.subject.endswith('.c') and m.headers['Status'] == '408' and m.headers['Description'] == 'Request Timeout'
    assert m.headers['Nats-Pending-Messages'] == '5' and m.headers['Nats-Pending-Bytes'] == '0'
    await pull('e', {'batch': 1, 'expires': 2_000_000_000, 'idle_heartbeat': 200_000_000})
    m = await sub.next_msg(timeout=5)
    assert m.headers['Status'] == '100' and m.headers['Description'] == 'Idle Heartbeat'
    assert m.headers['Nats-Last-Consumer'] == '1' and m.headers['Nats-Last-Stream'] == '1'
    await js.delete_consumer('ORDERS', 'P')
    m = await sub.next_msg(timeout=5)
    assert m.subject.endswith('.e') and m.headers['Status'] == '409' and m.headers['Description'] == 'Consumer Deleted'
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_push_durable_and_queue(start_server, kind):
    s, nc, js = await setup(start_server, kind, 6)
    got = []
    async def cb(m): got.append(m.metadata.sequence.stream); await m.ack()
    sub = await js.subscribe('ORDERS.*', durable='MONITOR', cb=cb, manual_ack=True)
    for _ in range(50):
        if len(got) == 6: break
        await asyncio.sleep(0.1)
    assert got == [1, 2, 3, 4, 5, 6]
    await js.publish('ORDERS.completed', b'late')
    for _ in range(50):
        if len(got) == 7: break
        await asyncio.sleep(0.1)
    assert got[-1] == 7
    a, b = [], []
    async def ca(m): a.append(m)
    async def cbb(m): b.append(m)
    qa = await js.subscribe('ORDERS.*', queue='workers', cb=ca)
    qb = await js.subscribe('ORDERS.*', queue='workers', cb=cbb)
    for _ in range(50):
        if len(a) + len(b) == 7: break
        await asyncio.sleep(0.1)
    assert len(a) + len(b) == 7
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_ordered_consumer(start_server, kind):
    s, nc, js = await setup(start_server, kind, 20)
    sub = await js.subscribe('ORDERS.*', ordered_consumer=True)
    seqs = [(await sub.next_msg(timeout=5)).metadata.sequence.stream for _ in range(20)]
    assert seqs == list(range(1, 21))
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_deliver_policies(start_server, kind):
    s, nc, js = await setup(start_server, kind, 6)
    async def first(**cfg):
        psub = await js.pull_subscribe('ORDERS.*', durable=None, config=ConsumerConfig(**cfg))
        ms = await psub.fetch(1, timeout=2)
        return ms[0].metadata.sequence.stream
    assert await first(deliver_policy=DeliverPolicy.LAST) == 6
    assert await first(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=4) == 4
    psub = await js.pull_subscribe('ORDERS.*', durable=None, config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT))
    assert sorted(m.metadata.sequence.stream for m in await psub.fetch(5, timeout=1)) == [5, 6]
    psub = await js.pull_subscribe('ORDERS.*', durable='NEWONLY', config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW))
    await js.publish('ORDERS.received', b'fresh')
    assert [m.data for m in await psub.fetch(1, timeout=2)] == [b'fresh']
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_workqueue_and_interest_retention(start_server, kind):
    s = start_server(kind, '-js')
    nc = await nats.connect(s.url); js = nc.jetstream()
    await js.add_stream(name='WQ', subjects=['wq.*'], retention='workqueue')
    for i in range(4): await js.publish('wq.a', b'%d' % i)
    psub = await js.pull_subscribe('wq.a', durable='ONE')
    for m in await psub.fetch(4, timeout=5): await m.ack_sync()
    assert (await js.stream_info('WQ')).state.messages == 0
    with pytest.raises(nats.js.errors.BadRequestError): await js.pull_subscribe('wq.a', durable='TWO')
    await js.add_stream(name='INT', subjects=['int.*'], retention='interest')
    await js.publish('int.a', b'nobody listening')
    assert (await js.stream_info('INT')).state.messages == 0
    p1 = await js.pull_subscribe('int.a', durable='I1'); p2 = await js.pull_subscribe('int.a', durable='I2')
    await js.publish('int.a', b'two listeners')
    (m,) = await p1.fetch(1, timeout=5); await m.ack_sync()
    assert (await js.stream_info('INT')).state.messages == 1
    (m,) = await p2.fetch(1, timeout=5); await m.ack_sync()
    assert (await js.stream_info('INT')).state.messages == 0
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_kv_watch_keys_history(start_server, kind):
    s = start_server(kind, '-js')
    nc = await nats.connect(s.url); js = nc.jetstream()
    kv = await js.create_key_value(bucket='cfg', history=10)
    await kv.put('a', b'1'); await kv.put('b', b'2'); await kv.put('a', b'3'); await kv.delete('b')
    assert await kv.keys() == ['a']
    assert [e.value for e in await kv.history('a')] == [b'1', b'3']
    w = await kv.watchall()
    seen = []
    async for e in w:
        if e is None: break
        seen.append((e.key, e.value, e.operation))
    await kv.put('c', b'new')
    e = await w.updates(timeout=5)
    seen.append((e.key, e.value, e.operation))
    assert seen == [('a', b'3', None), ('b', b'', 'DEL'), ('c', b'new', None)]
    await w.stop()
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_object_store(start_server, kind):
    s = start_server(kind, '-js')
    nc = await nats.connect(s.url); js = nc.jetstream()
    obs = await js.create_object_store('files')
    blob = os.urandom(3 * 1024 * 1024 + 123)
    info = await obs.put('big.bin', blob)
    assert info.size == len(blob) and info.chunks > 1
    got = await obs.get('big.bin')
    assert got.data == blob
    await obs.put('small.txt', b'hello')
    assert sorted(o.name for o in await obs.list()) == ['big.bin', 'small.txt']
    await obs.delete('small.txt')
    assert [o.name for o in await obs.list(ignore_deletes=True)] == ['big.bin']
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_durable_state_survives_restart(start_server, kind):
    s, nc, js = await setup(start_server, kind, 6)
    psub = await js.pull_subscribe('ORDERS.*', durable='DUR')
    for m in await psub.fetch(4, timeout=5): await m.ack_sync()
    await nc.close()
    await asyncio.get_running_loop().run_in_executor(None, s.restart)
    nc = await nats.connect(s.url); js = nc.jetstream()
    ci = await js.consumer_info('ORDERS', 'DUR')
    assert ci.ack_floor.stream_seq == 4 and ci.num_pending == 2
    psub = await js.pull_subscribe('ORDERS.*', durable='DUR')
    assert [m.metadata.sequence.stream for m in await psub.fetch(5, timeout=1)] == [5, 6]
    await nc.close()


@pytest.mark.parametrize('kind', BOTH)
async def test_ordered_consumer_recreated_after_loss(start_server, kind):
    "nats-py recreates an ordered consumer that disappeared (missed heartbeats) and resumes after the last message."
    s, nc, js = await setup(start_server, kind, 5)
    sub = await js.subscribe('ORDERS.*', ordered_consumer=True, idle_heartbeat=0.5)
    seqs = [(await sub.next_msg(timeout=5)).metadata.sequence.stream for _ in range(5)]
    names = (await js.streams_info())[0].state.consumer_count
    for name in json.loads((await nc.request('$JS.API.CONSUMER.NAMES.ORDERS', b'', timeout=5)).data)['consumers']:
        await js.delete_consumer('ORDERS', name)
    for i in range(5, 8): await js.publish('ORDERS.received', b'order %d' % i)
    seqs += [(await sub.next_msg(timeout=20)).metadata.sequence.stream for _ in range(3)]
    assert names == 1 and seqs == list(range(1, 9))
    await nc.close()
