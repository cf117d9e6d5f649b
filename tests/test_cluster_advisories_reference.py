"""The clustered advisories of nats-server 2.15.1 from a 3-server cluster of jsnb: `STREAM.LEADER_ELECTED`,
`STREAM.QUORUM_LOST`, `CONSUMER.LEADER_ELECTED` and `CONSUMER.QUORUM_LOST`, with the reference's type strings and
fields (the leader, every replica as the leader sees it), when an R3 stream and its R3 consumer are created, when
their leader steps down, and when the leader is left alone. The same scenario runs on both; the field names must be
equal."""
import asyncio, json, time
import pytest
import nats
from jsclusters import JSCluster, request

pytestmark = pytest.mark.reference

PREFIX = '$JS.EVENT.ADVISORY.'
KINDS = ('STREAM.LEADER_ELECTED', 'STREAM.QUORUM_LOST', 'CONSUMER.LEADER_ELECTED', 'CONSUMER.QUORUM_LOST')


async def _until(cond, timeout: float = 60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond(): return True
        await asyncio.sleep(0.05)
    return False


async def _retried(nc, subject: str, body=None, tries: int = 20) -> dict:
    "An API request, asked again (a busy cluster may time out or answer 10008 while a group settles) until it succeeds."
    for k in range(tries):
        try: r = await request(nc, subject, body)
        except nats.errors.TimeoutError: r = {'error': 'timeout'}
        if 'error' not in r or k == tries - 1: return r
        await asyncio.sleep(0.5)


def _shape(adv: dict) -> tuple:
    "The fields of an advisory, and of each replica it lists."
    return tuple(adv), tuple(sorted({k for r in adv.get('replicas') or () for k in r if k not in ('offline', 'lag')}))


async def _scenario(c: JSCluster) -> dict:
    "What each kind of advisory looked like (its shape, its type, the stream and consumer it names), and the leaders it named."
    nc = await nats.connect(c.url(0))
    got = {k: [] for k in KINDS}
    async def on(m):
        kind = next(k for k in KINDS if m.subject.startswith(PREFIX + k + '.'))
        got[kind].append((m.subject, json.loads(m.data)))
    for k in KINDS: await nc.subscribe(PREFIX + k + '.>', cb=on)
    sysnc, in_sys = await nats.connect(c.url(0, 'sys')), []    # the system account hears them too, naming the account
    async def on_sys(m): in_sys.append(json.loads(m.data))
    await sysnc.subscribe(PREFIX + 'STREAM.LEADER_ELECTED.>', cb=on_sys)
    await nc.flush(); await sysnc.flush()
    created = time.time()
    for _ in range(40):
        r = await request(nc, '$JS.API.STREAM.CREATE.ADV', {'name': 'ADV', 'subjects': ['adv.>'], 'num_replicas': 3})
        if 'error' not in r: break
        await asyncio.sleep(0.5)
    r = await _retried(nc, '$JS.API.CONSUMER.DURABLE.CREATE.ADV.D',
                       {'stream_name': 'ADV', 'config': {'durable_name': 'D', 'ack_policy': 'explicit', 'num_replicas': 3}})
    assert 'error' not in r, r
    assert await _until(lambda: got['STREAM.LEADER_ELECTED'] and got['CONSUMER.LEADER_ELECTED']), got
    first = (got['STREAM.LEADER_ELECTED'][-1][1]['leader'], got['CONSUMER.LEADER_ELECTED'][-1][1]['leader'])
    ns = len(got['STREAM.LEADER_ELECTED'])
    assert (await _retried(nc, '$JS.API.STREAM.LEADER.STEPDOWN.ADV'))['success']
    assert await _until(lambda: len(got['STREAM.LEADER_ELECTED']) > ns), got
    lead = got['STREAM.LEADER_ELECTED'][-1][1]['leader']
    assert lead != first[0]
    for _ in range(40):                                  # the consumer's leader moves to the stream's
        info = await request(nc, '$JS.API.CONSUMER.INFO.ADV.D')
        if info['cluster'].get('leader') == lead: break
        r = await request(nc, '$JS.API.CONSUMER.LEADER.STEPDOWN.ADV.D', {'placement': {'preferred': lead}})
        await asyncio.sleep(0.5)
    assert info['cluster']['leader'] == lead, info['cluster']
    assert await _until(lambda: got['CONSUMER.LEADER_ELECTED'][-1][1]['leader'] == lead), got   # (the reference's may have been there already)
    assert await _until(lambda: len(in_sys) >= 2), in_sys
    assert [(a['account'], a['stream'], a['type']) for a in in_sys[:2]] == [('$G', 'ADV', 'io.nats.jetstream.advisory.v1.stream_leader_elected')] * 2
    await nc.close(); await sysnc.close()
    i = int(lead[1:])                                   # left alone: the others stop
    nc = await nats.connect(c.url(i))
    for k in KINDS[1::2]: await nc.subscribe(PREFIX + k + '.>', cb=on)
    await nc.flush()
    await asyncio.sleep(max(0.0, created + 6 - time.time()))    # a group younger than 5 s that loses quorum is not advised
    for j in range(3):
        if j != i: c.procs[j].stop()
    assert await _until(lambda: got['STREAM.QUORUM_LOST'] and got['CONSUMER.QUORUM_LOST'], 90), got
    await nc.close()
    return got


def _run(kind: str) -> dict:
    "The scenario on a cluster of `kind`; each advisory checked; the shapes of each kind of advisory seen."
    c = JSCluster(kind, system=True)
    try:
        c.start(); c.wait_meta()
        got = asyncio.run(_scenario(c))
    finally: c.stop()
    names, shapes = {f'n{i}' for i in range(3)}, {}
    for k, advs in got.items():
        for subject, adv in advs:
            assert subject == PREFIX + k + ('.ADV.D' if k.startswith('CONSUMER') else '.ADV')
            assert adv['type'] == 'io.nats.jetstream.advisory.v1.' + k.lower().replace('.', '_')
            assert adv['stream'] == 'ADV' and adv.get('consumer', 'D') == 'D' and 'account' not in adv   # (in the account: no `account`)
            assert {r['name'] for r in adv['replicas']} == names and all(len(r['peer']) == 8 for r in adv['replicas'])
            if 'leader' in adv: assert adv['leader'] in names
            shapes.setdefault(k, set()).add(_shape(adv))
    return shapes


def test_clustered_advisories_match_reference():
    ref, ours = _run('nats-server'), _run('jsnb')
    assert set(ref) == set(KINDS)
    assert ours == ref
