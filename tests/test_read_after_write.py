"""Read-after-write (`min_last_seq`), from the specification's note about testing.

The reference removed the feature before its release, so these scenarios run against jsnb
only; each one also checks the part of the behaviour that must not change (a satisfiable
request is answered normally)."""
import asyncio, json, time
import pytest
import nats
from jsnb.clients.consistency import get_msg, kv_get, kv_create, add_consumer, MonotonicReader, MinLastSeqError


@pytest.fixture
async def js_server(start_server):
    s = start_server('jsnb', '-js')
    nc = await asyncio.wait_for(nats.connect(s.url), 15)
    yield s, nc, nc.jetstream()
    await nc.close()


@pytest.mark.parametrize('direct,by_subject', [(False, False), (False, True), (True, False), (True, True)])
async def test_message_get_waits_for_the_write(js_server, direct, by_subject):
    s, nc, js = js_server
    await js.add_stream(name='S', subjects=['s.>'], allow_direct=True)
    await js.publish('s.a', b'one')
    t = time.monotonic()
    with pytest.raises(MinLastSeqError):
        await get_msg(nc, 'S', seq=0 if by_subject else 1, subject='s.a' if by_subject else '', min_last_seq=2, direct=direct)
    assert time.monotonic() - t >= 0.3                    # refusals are delayed (about 0.5 s)
    ack = await js.publish('s.a', b'two')
    m = await get_msg(nc, 'S', seq=0 if by_subject else 2, subject='s.a' if by_subject else '', min_last_seq=ack.seq, direct=direct)
    assert (m.seq, m.data) == (2, b'two')


async def test_raw_error_forms(js_server):
    s, nc, js = js_server
    await js.add_stream(name='S', subjects=['s.>'], allow_direct=True)
    await js.publish('s.a', b'one')
    d = json.loads((await nc.request('$JS.API.STREAM.MSG.GET.S', b'{"seq": 1, "min_last_seq": 5}', timeout=5)).data)
    assert d['error'] == {'code': 412, 'err_code': 10180, 'description': 'min last sequence'}
    for subj, body in [('$JS.API.DIRECT.GET.S', b'{"seq": 1, "min_last_seq": 5}'), ('$JS.API.DIRECT.GET.S.s.a', b'{"min_last_seq": 5}')]:
        r = await nc.request(subj, body, timeout=5)
        assert r.headers == {'Status': '412', 'Description': 'Min Last Sequence'} and r.data == b''
    r = await nc.request('$JS.API.DIRECT.GET.S.s.a', b'{"min_last_seq": 1}', timeout=5)   # satisfiable: a normal answer
    assert r.data == b'one' and r.headers['Nats-Sequence'] == '1'


async def test_consumer_waits_then_flows(js_server):
    s, nc, js = js_server
    await js.add_stream(name='S', subjects=['s.>'])
    for i in range(3): await js.publish('s.x', b'%d' % i)
    info = await add_consumer(nc, 'S', {'durable_name': 'C', 'ack_policy': 'explicit'}, min_last_seq=5)
    assert info['config']['min_last_seq'] == 5 and info['num_pending'] == 0
    psub = await js.pull_subscribe('s.>', durable='C')
    with pytest.raises(nats.errors.TimeoutError): await psub.fetch(1, timeout=0.5)
    await js.publish('s.x', b'3')
    with pytest.raises(nats.errors.TimeoutError): await psub.fetch(1, timeout=0.5)    # still below 5
    assert (await js.consumer_info('S', 'C')).num_pending == 0
    await asyncio.sleep(1)                                 # let the timed-out pull requests expire on the server
    await js.publish('s.x', b'4')
    assert (await js.consumer_info('S', 'C')).num_pending == 5
    assert [m.data for m in await psub.fetch(5, timeout=2)] == [b'0', b'1', b'2', b'3', b'4']


async def test_mirror_behind_refuses(js_server):
    s, nc, js = js_server
    await js.add_stream(name='UP', subjects=['up.>'])
    for i in range(3): await js.publish('up.a', b'%d' % i)
    await nc.request('$JS.API.STREAM.CREATE.M', json.dumps({'name': 'M', 'mirror': {'name': 'UP'}, 'allow_direct': True}).encode(), timeout=5)
    for _ in range(50):
        if (await js.stream_info('M')).state.last_seq == 3: break
        await asyncio.sleep(0.1)
    await js.delete_stream('UP')                         # the mirror can no longer catch up: it stays behind
    with pytest.raises(MinLastSeqError): await get_msg(nc, 'M', seq=3, min_last_seq=4, direct=True)
    assert (await get_msg(nc, 'M', seq=3, min_last_seq=3, direct=True)).data == b'2'


async def test_kv_create_uses_the_revision_from_the_error(js_server):
    s, nc, js = js_server
    kv = await js.create_key_value(bucket='users', history=5)
    await kv.put('alice', b'v1'); await kv.delete('alice')
    rev = await kv_create(kv, 'alice', b'v2')               # update(last=0) fails with "wrong last sequence: 2"
    assert rev == 3 and (await kv_get(kv, 'alice', min_revision=rev)).value == b'v2'
    with pytest.raises(nats.js.errors.KeyWrongLastSequenceError): await kv_create(kv, 'alice', b'v3')
    with pytest.raises(MinLastSeqError): await kv_get(kv, 'alice', min_revision=rev + 1)


async def test_monotonic_reader(js_server):
    s, nc, js = js_server
    await js.add_stream(name='S', subjects=['s.>'], allow_direct=True)
    r = MonotonicReader(nc, 'S')
    r.observe((await js.publish('s.a', b'1')).seq)
    r.observe((await js.publish('s.b', b'2')).seq)
    assert (await r.get(subject='s.a')).data == b'1' and r.highest == 2
    r.observe(3)                                           # a write we heard of but the stream lacks
    with pytest.raises(MinLastSeqError): await r.get(subject='s.a', retries=0)
