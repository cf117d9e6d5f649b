"""Route faults injected on loopback with a TCP proxy between two servers (tests/faultproxy.py), the same
scenario on a jsnb pair and on a nats-server pair: a partition cuts interest and heals, a silent route goes
stale and is closed, a slow link keeps order, a route nobody reads from never stalls local traffic."""
import asyncio, time
import pytest
import nats
from faultproxy import FaultProxy
from test_routes_reference import Node, wait_mesh

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']


def conf(routes=(), extra=''):
    r = ', '.join(f'"{u}"' for u in routes)
    return extra + f'cluster {{ name: c1, listen: "127.0.0.1:-1", routes: [{r}] }}\n'


@pytest.fixture
def pair():
    "Factory: `pair(kind, extra_conf, delay)` -> (a, b, proxy); b's route to a goes through the proxy."
    made = []
    def make(kind, extra='', delay=0.0):
        a = Node(kind, 'a', config=conf(extra=extra)).start(); made.append(a)
        proxy = FaultProxy(('127.0.0.1', a.cluster_port), delay); made.append(proxy)
        b = Node(kind, 'b', config=conf([proxy.url], extra)).start(); made.append(b)
        wait_mesh([a, b]); return a, b, proxy
    yield make
    for x in reversed(made): x.close() if isinstance(x, FaultProxy) else x.stop()


async def until(pred, timeout=20.0, what=''):
    "Wait for `pred()` without blocking the event loop (the clients must keep answering the servers' pings)."
    deadline = time.time() + timeout
    while time.time() < deadline:
        if await asyncio.to_thread(pred): return
        await asyncio.sleep(0.1)
    raise AssertionError(f'not within {timeout} s: {what}')


async def meshed(a, b): await asyncio.to_thread(wait_mesh, [a, b], 30)


async def crosses(pub, sub, subject='p.probe', timeout=10.0):
    "Publish probes on one server until the subscriber on the other gets one (interest has spread)."
    deadline = time.time() + timeout
    while time.time() < deadline:
        await pub.publish(subject, b'probe'); await pub.flush()
        try:
            m = await sub.next_msg(timeout=0.2)
            while True:                                        # drain the other probes
                try: await sub.next_msg(timeout=0.2)
                except nats.errors.TimeoutError: return m
        except nats.errors.TimeoutError: pass
    raise AssertionError('no message crossed the route')


async def clients(a, b):
    ca = await nats.connect(a.url, allow_reconnect=False)
    cb = await nats.connect(b.url, allow_reconnect=False)
    return ca, cb, await ca.subscribe('p.>')


@pytest.mark.parametrize('kind', KINDS)
async def test_partition_cuts_interest_and_heals(pair, kind):
    a, b, proxy = pair(kind)
    ca, cb, sub = await clients(a, b)
    await crosses(cb, sub)
    proxy.sever()
    await until(lambda: not a.peers() and not b.peers(), what='both sides see the route gone')
    local = await cb.subscribe('p.>')
    await cb.publish('p.during', b'x'); await cb.flush()
    assert (await local.next_msg(timeout=2)).subject == 'p.during'           # B still serves its own clients
    with pytest.raises(nats.errors.TimeoutError): await sub.next_msg(timeout=0.5)
    proxy.heal()
    await meshed(a, b)                                           # B dials its configured route again
    await crosses(cb, sub)
    await ca.close(); await cb.close()


@pytest.mark.parametrize('kind', KINDS)
async def test_silent_route_goes_stale(pair, kind):
    a, b, proxy = pair(kind, extra='ping_interval: "1s"\nping_max: 2\n')
    ca, cb, sub = await clients(a, b)
    await crosses(cb, sub)
    proxy.blackhole()                                                       # open but silent: only pings can tell
    await until(lambda: not a.peers() and not b.peers(), timeout=30, what='the silent route is closed')
    for n in (a, b): assert 'Stale Connection' in n.proc.log_text(), n.proc.log_text()[-2000:]
    proxy.sever(); proxy.heal()
    await meshed(a, b)
    await crosses(cb, sub)
    await ca.close(); await cb.close()


@pytest.mark.parametrize('kind', KINDS)
async def test_slow_link_keeps_order(pair, kind):
    a, b, proxy = pair(kind, delay=0.02)
    ca, cb, sub = await clients(a, b)
    async def echo(m): await m.respond(b'a:' + m.data)
    await ca.subscribe('svc', cb=echo)
    await crosses(cb, sub)
    for i in range(500): await cb.publish(f'p.{i}', b'%d' % i)
    await cb.flush()
    got = [int((await sub.next_msg(timeout=10)).data) for _ in range(500)]
    assert got == list(range(500))
    await asyncio.sleep(0.3)
    assert (await cb.request('svc', b'x', timeout=10)).data == b'a:x'
    await ca.close(); await cb.close()


@pytest.mark.parametrize('kind', KINDS)
async def test_unread_route_never_stalls_local_traffic(pair, kind):
    "The proxy stops reading: B's route output piles up while B's own clients keep their round trips."
    a, b, proxy = pair(kind, extra='max_pending: 2MB\n')
    ca, cb, sub = await clients(a, b)
    await crosses(cb, sub)
    local = await nats.connect(b.url, allow_reconnect=False)
    async def echo(m): await m.respond(m.data)
    await local.subscribe('local.svc', cb=echo); await local.flush()
    proxy.blackhole()
    payload = b'x' * 32768
    for i in range(600): await cb.publish('p.big', payload)                # ~20 MB towards A
    for i in range(20):
        assert (await cb.request('local.svc', b'%d' % i, timeout=5)).data == b'%d' % i
    await until(lambda: 'Slow Consumer' in b.proc.log_text(), what='the unread route is cut off as a slow consumer')
    proxy.sever(); proxy.heal()
    await meshed(a, b)
    await crosses(cb, sub)
    await ca.close(); await cb.close(); await local.close()


@pytest.mark.parametrize('kind', KINDS)
def test_gossip_dials_the_advertised_address(kind):
    """`cluster { advertise }`: a server that hears of another through gossip dials the address that one advertises
    (here a proxy in front of its route port), not the one it listens on."""
    from jsclusters import free_ports
    made = []
    try:
        b = Node(kind, 'b', config=conf()).start(); made.append(b)
        c = Node(kind, 'c', config=conf([b.route_url])).start(); made.append(c)
        wait_mesh([b, c])
        aport = free_ports(1)[0]
        proxy = FaultProxy(('127.0.0.1', aport))
        made.append(proxy)
        cfg = conf([b.route_url]).replace('listen: "127.0.0.1:-1"', f'listen: "127.0.0.1:{aport}", advertise: "127.0.0.1:{proxy.port}"')
        a = Node(kind, 'a', config=cfg).start(); made.append(a)       # a knows only b; b tells c about a
        wait_mesh([a, b, c])
        assert proxy.accepted >= 1, 'c did not dial the advertised address'
    finally:
        for x in reversed(made): x.close() if isinstance(x, FaultProxy) else x.stop()


@pytest.mark.parametrize('kind', KINDS)
async def test_route_dialled_again_through_a_long_partition(pair, kind):
    "While cut, the proxy takes each new connection and drops it at once; B keeps dialling and the route comes back on heal."
    a, b, proxy = pair(kind)
    ca, cb, sub = await clients(a, b)
    await crosses(cb, sub)
    accepted = proxy.accepted
    proxy.sever()
    await until(lambda: not a.peers() and not b.peers(), what='both sides see the route gone')
    proxy.mode = 'drop'                                          # accept, then close: as a peer that hangs up at once
    await asyncio.sleep(3.5)                                     # several attempts, each dropped
    proxy.heal()
    await meshed(a, b)
    assert proxy.accepted > accepted + 1
    await crosses(cb, sub)
    await ca.close(); await cb.close()
