"""A network partition in a 3-server JetStream cluster, on jsnb and on nats-server with the same expectations: every
link between two servers goes through a proxy on loopback (the route, which on both carries the Raft traffic), and the stream
leader is cut off from the other two while all three keep running. The promises: the cut-off side acknowledges
nothing (no split-brain writes), the majority elects a leader and goes on, and after the heal every server holds
the same messages: the acknowledged ones, and none of the writes the cut-off leader could not commit."""
import asyncio, json, time
import pytest
import nats
from nats.errors import TimeoutError as NatsTimeout, NoRespondersError
from nats.js.errors import APIError, NoStreamResponseError
from jsclusters import JSCluster, request as _req, publish_acked

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']


def _acked(js, subject: str, data: bytes, deadline: float):
    "Publish (with a message id, so a retry of a stored one is dropped) until acknowledged."
    return publish_acked(js, subject, data, deadline, {'Nats-Msg-Id': data.decode()}, (APIError,))


async def _leader(nc, stream: str, deadline: float, not_this: str = '') -> str:
    "The stream's leader as stream info reports it, once there is one (other than `not_this`)."
    while time.time() < deadline:
        try:
            info = await _req(nc, f'$JS.API.STREAM.INFO.{stream}', timeout=2)
            leader = (info.get('cluster') or {}).get('leader') or ''
            if leader and leader != not_this: return leader
        except (NatsTimeout, NoRespondersError): pass
        await asyncio.sleep(0.2)
    raise TimeoutError(f'no leader for {stream}')


def _same_everywhere(c: JSCluster, messages: int, timeout: float = 60):
    "Wait until every server holds `messages` messages (the cut-off one has caught up and dropped what it could not commit)."
    deadline, seen = time.time() + timeout, None
    while time.time() < deadline:
        try: seen = [c.jsz(i)['messages'] for i in range(c.n)]
        except OSError: pass
        if seen == [messages] * c.n: return
        time.sleep(0.2)
    raise AssertionError(f'servers hold {seen} messages, expected {messages} each')


async def _contents(nc, stream: str, n: int) -> list[bytes]:
    "The stream's messages in order, read by Direct Get (any replica answers; asked again while leaders change after the heal)."
    got = []
    for seq in range(1, n + 1):
        for _ in range(50):
            try: got.append((await nc.request(f'$JS.API.DIRECT.GET.{stream}', json.dumps({'seq': seq}).encode(), timeout=2)).data); break
            except (NatsTimeout, NoRespondersError): await asyncio.sleep(0.2)
        else: raise TimeoutError(f'no answer for sequence {seq}')
    return got


async def partition_round(c: JSCluster, stream: str, k: int) -> dict:
    "One round: publish, cut the leader off, publish on both sides, heal, check. Returns the round's figures."
    nc0 = await nats.connect(c.url(0))
    leader = await _leader(nc0, stream, time.time() + 60)
    li = int(leader[1:])
    cut = await nats.connect(c.url(li), allow_reconnect=False)   # a client of the leader (never moved to another server)
    maj = await nats.connect(c.url((li + 1) % c.n), max_reconnect_attempts=-1)
    jm, jc = maj.jetstream(), cut.jetstream()
    before = [f'r{k}-before-{i}'.encode() for i in range(10)]
    for d in before: await _acked(jm, f'{stream.lower()}.x', d, time.time() + 30)
    c.isolate(li)
    t0 = time.time()
    minority, acked_minority = [f'r{k}-cut-{i}'.encode() for i in range(5)], []
    async def on_the_cut_side():
        for d in minority:                                    # nobody may acknowledge these
            try: await jc.publish(f'{stream.lower()}.x', d, timeout=1, headers={'Nats-Msg-Id': d.decode()}); acked_minority.append(d)
            except (NatsTimeout, NoRespondersError, NoStreamResponseError, APIError, asyncio.TimeoutError, nats.errors.ConnectionClosedError): pass
    side = asyncio.create_task(on_the_cut_side())
    majority = [f'r{k}-after-{i}'.encode() for i in range(10)]
    await _acked(jm, f'{stream.lower()}.x', majority[0], time.time() + 60)
    first_ack = time.time() - t0                               # the majority elected a leader and goes on
    for d in majority[1:]: await _acked(jm, f'{stream.lower()}.x', d, time.time() + 30)
    new_leader = await _leader(maj, stream, time.time() + 30)
    await side
    dropped = cut.is_closed                                   # the cut-off server kept its client
    c.heal()
    t1 = time.time()
    info = await _req(maj, f'$JS.API.STREAM.INFO.{stream}')
    total = info['state']['messages']
    await asyncio.to_thread(_same_everywhere, c, total)
    healed = time.time() - t1
    got = await _contents(maj, stream, total)
    for nc in (nc0, cut, maj): await nc.close()
    return dict(dropped=dropped, leader=leader, new_leader=new_leader, acked_minority=acked_minority, first_ack=first_ack, healed=healed,
                kept=[d for d in got if d in before + majority], lost=[d for d in before + majority if d not in got],
                cut_writes_kept=[d for d in got if d in minority], duplicates=len(got) - len(set(got)), total=total)


@pytest.fixture
def cluster(request):
    c = JSCluster(request.param, partitions=True)
    try:
        c.start(); c.wait_meta()
        yield c
    finally: c.stop()


async def _stream(c: JSCluster, name: str):
    "Create the R3 stream `name` (asked again while the meta group is not ready to answer, as nats-server may be at first)."
    nc = await nats.connect(c.url(0))
    deadline = time.time() + 60
    while True:
        try: r = await _req(nc, f'$JS.API.STREAM.CREATE.{name}', dict(name=name, subjects=[f'{name.lower()}.>'], num_replicas=3, allow_direct=True)); break
        except NatsTimeout:
            if time.time() > deadline: raise
    await nc.close()
    assert 'error' not in r, r


@pytest.mark.parametrize('cluster', KINDS, indirect=True)
async def test_leader_cut_off_from_the_majority(cluster):
    await _stream(cluster, 'P')
    r = await partition_round(cluster, 'P', 0)
    print(cluster.kind, {k: v for k, v in r.items() if k not in ('kept',)})
    assert r['acked_minority'] == [] and not r['dropped']    # no acknowledgement on the cut-off side, whose client stays
    assert r['new_leader'] != r['leader']                    # the majority elected another leader
    assert r['lost'] == [] and r['duplicates'] == 0          # every acknowledged message, once
    assert r['cut_writes_kept'] == []                        # what the cut-off leader could not commit is gone
    assert r['total'] == 20


@pytest.mark.soak
@pytest.mark.timeout(1800)
@pytest.mark.parametrize('cluster', KINDS, indirect=True)
async def test_partition_soak(cluster):
    "Twenty rounds on one cluster; prints the figures."
    await _stream(cluster, 'P')
    rounds = []
    for k in range(20):
        rounds.append(await partition_round(cluster, 'P', k))
        print(cluster.kind, 'round', k, {x: rounds[-1][x] for x in ('leader', 'new_leader', 'first_ack', 'healed', 'total')})
    print(cluster.kind, 'rounds', len(rounds), 'messages', rounds[-1]['total'],
          'acked on the cut side', sum(len(r['acked_minority']) for r in rounds), 'lost', sum(len(r['lost']) for r in rounds),
          'duplicated', sum(r['duplicates'] for r in rounds), 'cut writes kept', sum(len(r['cut_writes_kept']) for r in rounds),
          'first ack after the cut (s) max', round(max(r['first_ack'] for r in rounds), 2),
          'healed (s) max', round(max(r['healed'] for r in rounds), 2))
    for r in rounds:
        assert r['acked_minority'] == [] and not r['dropped'] and r['lost'] == [] and r['duplicates'] == 0 and r['cut_writes_kept'] == []
    assert rounds[-1]['total'] == 20 * len(rounds)
