"""Stock nats-py against jsnb, and the same scenarios against the reference nats-server."""
import asyncio
import pytest
import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

pytestmark = pytest.mark.reference


async def connect(url, **kw):
    return await asyncio.wait_for(nats.connect(url, allow_reconnect=False, **kw), 15)


async def collect(sub, n, timeout=10):
    return [await asyncio.wait_for(sub.next_msg(timeout=timeout), timeout) for _ in range(n)]


async def test_wildcards(server):
    nc = await connect(server.url)
    star, full, exact = await nc.subscribe('orders.*'), await nc.subscribe('orders.>'), await nc.subscribe('orders.new')
    for s in ['orders.new', 'orders.eu.new', 'orders', 'other.new']: await nc.publish(s, s.encode())
    await nc.flush()
    assert [m.subject for m in await collect(star, 1)] == ['orders.new']
    assert [m.subject for m in await collect(full, 2)] == ['orders.new', 'orders.eu.new']
    assert [m.subject for m in await collect(exact, 1)] == ['orders.new']
    with pytest.raises(NatsTimeout): await star.next_msg(timeout=0.2)
    await nc.close()


async def test_queue_groups(server):
    nc, pub = await connect(server.url), await connect(server.url)
    got = {i: [] for i in range(3)}
    for i in range(3):
        async def cb(m, i=i): got[i].append(m.data)
        await nc.subscribe('jobs', queue='workers', cb=cb)
    plain = await nc.subscribe('jobs')
    await nc.flush()
    for i in range(300): await pub.publish('jobs', b'%d' % i)
    await pub.flush()
    assert len(await collect(plain, 300)) == 300
    await asyncio.sleep(0.2)
    delivered = sorted(x for v in got.values() for x in v)
    assert delivered == sorted(b'%d' % i for i in range(300))        # each job to exactly one member
    assert all(len(v) > 30 for v in got.values())
    await nc.close(); await pub.close()


async def test_request_reply_with_headers(server):
    nc = await connect(server.url)
    async def responder(m):
        await nc.publish(m.reply, m.data[::-1], headers={'X-Echo': m.headers['X-Trace'], 'X-Multi': 'a'})
    await nc.subscribe('svc.reverse', cb=responder)
    msg = await nc.request('svc.reverse', b'abc', timeout=5, headers={'X-Trace': 't-1'})
    assert msg.data == b'cba' and msg.headers == {'X-Echo': 't-1', 'X-Multi': 'a'}
    await nc.close()


async def test_no_responders(server):
    nc = await connect(server.url)
    with pytest.raises(NoRespondersError): await nc.request('nobody.here', b'x', timeout=5)
    await nc.close()


async def test_20000_in_order(server):
    nc, pub = await connect(server.url), await connect(server.url)
    sub = await nc.subscribe('seq', pending_msgs_limit=100_000)
    await nc.flush()
    for i in range(20000): await pub.publish('seq', b'%d' % i)
    await pub.flush()
    got = [int(m.data) for m in await collect(sub, 20000)]
    assert got == list(range(20000))
    await nc.close(); await pub.close()


async def test_one_mib_round_trip(server):
    nc = await connect(server.url)
    assert nc.max_payload == 1024 * 1024
    sub = await nc.subscribe('big')
    payload = bytes(range(256)) * 4096
    await nc.publish('big', payload)
    (m,) = await collect(sub, 1)
    assert m.data == payload
    await nc.close()


async def test_unsubscribe_with_max(server):
    nc = await connect(server.url)
    sub = await nc.subscribe('limited')
    await sub.unsubscribe(limit=3)
    for i in range(10): await nc.publish('limited', b'%d' % i)
    await nc.flush()
    got = [m.data for m in await collect(sub, 3)]
    assert got == [b'0', b'1', b'2']
    with pytest.raises(NatsTimeout): await sub.next_msg(timeout=0.3)     # nothing after the third
    await nc.close()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_user_password(kind, start_server):
    s = start_server(kind, '--user', 'alice', '--pass', 's3cret')
    nc = await connect(f'nats://alice:s3cret@127.0.0.1:{s.port}')
    await nc.flush()
    await nc.close()
    with pytest.raises(Exception) as e:
        await connect(f'nats://alice:wrong@127.0.0.1:{s.port}')
    assert 'authorization violation' in str(e.value).lower()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_token(kind, start_server):
    s = start_server(kind, '--auth', 'tok3n')
    nc = await connect(f'nats://127.0.0.1:{s.port}', token='tok3n')
    await nc.flush(); await nc.close()
    with pytest.raises(Exception) as e: await connect(f'nats://127.0.0.1:{s.port}', token='nope')
    assert 'authorization violation' in str(e.value).lower()


async def test_config_file_auth(start_server):
    s = start_server('jsnb', config='authorization { user: bob, password: "pw" }\n')
    nc = await connect(f'nats://bob:pw@127.0.0.1:{s.port}')
    await nc.flush(); await nc.close()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_reconnect_after_restart(kind, start_server):
    s = start_server(kind)
    reconnected = asyncio.Event()
    async def on_reconnect(): reconnected.set()
    nc = await asyncio.wait_for(nats.connect(s.url, reconnect_time_wait=0.1, max_reconnect_attempts=100,
                                             reconnected_cb=on_reconnect), 5)
    sub = await nc.subscribe('after.restart')
    await nc.flush()
    await asyncio.get_running_loop().run_in_executor(None, s.restart)
    await asyncio.wait_for(reconnected.wait(), 15)
    await nc.publish('after.restart', b'back')          # the subscription was re-sent on reconnect
    (m,) = await collect(sub, 1)
    assert m.data == b'back'
    await nc.close()
