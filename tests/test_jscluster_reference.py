"""A 3-server JetStream cluster of jsnb and one of the reference nats-server, given the same requests and held to the
same expectations:
the meta group in `/jsz`, the `cluster` of stream info (names and shapes, not timings), err_codes, stepdown, Direct Get
from every server. Both clusters use the same server names, so the peer ids must be equal too."""
import asyncio, json, os, time
import pytest
import nats, nats.js.errors
from jsclusters import JSCluster, request as _req, publish_acked

pytestmark = pytest.mark.reference



@pytest.fixture(scope='module', params=['jsnb', 'nats-server'])
def cluster(request):
    c = JSCluster(request.param)
    try:
        c.start(); c.wait_meta()
        yield c
    finally: c.stop()


@pytest.fixture(autouse=True)
def _clean_slate(request):
    """Each test finds the shared cluster without streams, whatever ran before it (in any order, alone, or again after
    a failure): it makes the streams it uses."""
    if 'cluster' not in request.fixturenames: return
    c = request.getfixturevalue('cluster')
    if left := c.streams(): c.delete(sorted(left))


async def _clients(c):
    return [await nats.connect(c.url(i)) for i in range(c.n)]


async def _until(cond, timeout: float = 30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if await cond(): return True
        await asyncio.sleep(0.2)
    raise TimeoutError


def test_meta_cluster_in_jsz(cluster):
    deadline = time.time() + 20
    while True:                                          # the reference lists a peer once it has heard from it
        mc = cluster.jsz(0)['meta_cluster']
        if len(mc.get('replicas') or ()) == 2 and mc.get('leader') or time.time() > deadline: break
        time.sleep(0.2)
    assert sorted(mc) == ['cluster_size', 'leader', 'name', 'peer', 'pending', 'pending_infos', 'pending_requests',
                          'quorum_needed', 'replicas', 'snapshot']
    assert (mc['name'], mc['cluster_size'], mc['quorum_needed']) == ('c1', 3, 2)
    assert sorted(r['name'] for r in mc['replicas']) == ['n1', 'n2']                  # the others, as seen from n0
    peers = {'n0': '6DVFpukC', 'n1': 'fjFyEjc1', 'n2': '44jzkV9D'}
    assert all(r['peer'] == peers[r['name']] for r in mc['replicas'])
    assert mc['peer'] == peers[mc['leader']]
    assert sorted(mc['snapshot']) == ['last_time', 'pending_entries', 'pending_size']
    assert all({'name', 'current', 'active', 'peer'} <= set(r) for r in mc['replicas'])
    assert cluster.jsz(0)['ha_assets'] >= 1
    deadline = time.time() + 10                          # nothing left to apply once the group is idle (a new leader's own
    while cluster.jsz(0)['meta_cluster']['pending'] and time.time() < deadline: time.sleep(0.2)    # first entry is no work)
    assert cluster.jsz(0)['meta_cluster']['pending'] == 0


async def _r3_and_r1(ncs) -> tuple[dict, dict]:
    "Streams R3 (three replicas) and R1 (one), and their create responses."
    r3 = await _req(ncs[0], '$JS.API.STREAM.CREATE.R3', {'name': 'R3', 'subjects': ['r3.>'], 'num_replicas': 3, 'allow_direct': True})
    r1 = await _req(ncs[1], '$JS.API.STREAM.CREATE.R1', {'name': 'R1', 'subjects': ['r1.>']})
    return r3, r1


async def _publish_to_r3(ncs, n: int = 3):
    "Messages m0, m1, ... to R3, one through each server in turn, until every replica holds them."
    acks = [await ncs[i % len(ncs)].jetstream().publish('r3.x', f'm{i}'.encode()) for i in range(n)]
    async def all_current():
        info = await _req(ncs[2], '$JS.API.STREAM.INFO.R3')
        return info['state']['messages'] == n and all(p['current'] for p in info['cluster']['replicas'])
    await _until(all_current)
    return acks


async def test_streams_known_everywhere_and_cluster_info(cluster):
    ncs = await _clients(cluster)
    r3, r1 = await _r3_and_r1(ncs)
    assert r3['config']['num_replicas'] == 3 and r1['config']['num_replicas'] == 1
    assert set(r1['cluster']) == {'name', 'leader'} and r1['cluster']['name'] == 'c1'
    c = r3['cluster']
    assert set(c) == {'name', 'raft_group', 'leader', 'leader_since', 'system_account', 'traffic_account', 'replicas'}
    assert (c['system_account'], c['traffic_account']) == (True, '$SYS')     # (replication traffic out of client accounts)
    assert c['raft_group'].startswith('S-R3F-') and len(c['raft_group']) == len('S-R3F-') + 8
    assert sorted([c['leader']] + [p['name'] for p in c['replicas']]) == ['n0', 'n1', 'n2']
    for i in range(3):
        names = await _req(ncs[i], '$JS.API.STREAM.NAMES')
        assert (names['total'], names['streams']) == (2, ['R1', 'R3'])
    for i in range(3):
        lst = await _req(ncs[i], '$JS.API.STREAM.LIST')
        assert (lst['total'], [x['config']['name'] for x in lst['streams']], 'missing' in lst) == (2, ['R1', 'R3'], False)
        assert all(x['cluster']['name'] == 'c1' and x['cluster']['leader'] for x in lst['streams'])
    acks = await _publish_to_r3(ncs)
    assert [a.seq for a in acks] == [1, 2, 3]
    info = await _req(ncs[2], '$JS.API.STREAM.INFO.R3')
    for p in info['cluster']['replicas']:
        assert set(p) <= {'name', 'current', 'active', 'lag', 'peer', 'offline'} and {'name', 'current', 'active', 'peer'} <= set(p)
        assert isinstance(p['active'], int) and 'lag' not in p and 'offline' not in p
    for i in range(3):                                                    # every server's clients reach a replica
        m = await ncs[i].request('$JS.API.DIRECT.GET.R3', b'{"seq": 2}', timeout=10)
        assert (m.headers['Nats-Stream'], m.headers['Nats-Sequence'], m.data) == ('R3', '2', b'm1')
    for nc in ncs: await nc.close()


async def test_stepdown(cluster):
    ncs = await _clients(cluster)
    await _r3_and_r1(ncs); await _publish_to_r3(ncs)
    before = await _req(ncs[0], '$JS.API.STREAM.INFO.R3')
    old = before['cluster']['leader']
    r = await _req(ncs[1], '$JS.API.STREAM.LEADER.STEPDOWN.R3')
    assert r == {'type': 'io.nats.jetstream.api.v1.stream_leader_stepdown_response', 'success': True}

    async def moved():
        try: info = await _req(ncs[0], '$JS.API.STREAM.INFO.R3')
        except nats.errors.TimeoutError: return False
        return 'error' not in info and info['cluster'].get('leader') not in (None, old)
    await _until(moved)
    assert (await _req(ncs[0], '$JS.API.STREAM.INFO.R3'))['created'] == before['created']   # one creation time on every replica
    a = await ncs[2].jetstream().publish('r3.x', b'after')
    assert a.seq == 4
    r = await _req(ncs[0], '$JS.API.STREAM.LEADER.STEPDOWN.NOPE')
    assert r['error'] == {'code': 404, 'err_code': 10059, 'description': 'stream not found'}
    for nc in ncs: await nc.close()


async def _fetch(sub, n: int, timeout: float = 30) -> list:
    deadline = time.time() + timeout
    while True:
        try: return await sub.fetch(n, timeout=2)
        except (nats.errors.TimeoutError, asyncio.TimeoutError, nats.js.errors.ServiceUnavailableError):
            if time.time() > deadline: raise
            await asyncio.sleep(0.2)


async def test_consumer_on_a_replicated_stream(cluster):
    "A durable pull consumer of R3: `cluster` in its info, the same counters from every server, its leader stepping down without losing its state."
    ncs = await _clients(cluster)
    await _r3_and_r1(ncs); await _publish_to_r3(ncs, 4)
    r = await _req(ncs[0], '$JS.API.CONSUMER.DURABLE.CREATE.R3.work',
                   {'stream_name': 'R3', 'config': {'durable_name': 'work', 'ack_policy': 'explicit'}})
    assert 'error' not in r, r
    assert r['config']['num_replicas'] == 0
    c = r['cluster']
    assert set(c) >= {'name', 'raft_group', 'leader', 'system_account', 'traffic_account', 'replicas'}
    assert set(c) <= {'name', 'raft_group', 'leader', 'leader_since', 'system_account', 'traffic_account', 'replicas'}
    assert sorted([c['leader']] + [p['name'] for p in c['replicas']]) == ['n0', 'n1', 'n2']
    assert list(r).index('cluster') == list(r).index('num_pending') + 1
    sub = await ncs[1].jetstream().pull_subscribe_bind('work', 'R3')
    msgs = await _fetch(sub, 2)                            # the reference's consumer may still be electing its leader
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2]
    await msgs[0].ack_sync(timeout=10)
    for i in range(3):
        info = await _req(ncs[i], '$JS.API.CONSUMER.INFO.R3.work')
        assert (info['delivered']['stream_seq'], info['ack_floor']['stream_seq'], info['num_ack_pending'], info['num_pending']) == (2, 1, 1, 2)
    old = info['cluster']['leader']
    r = await _req(ncs[2], '$JS.API.CONSUMER.LEADER.STEPDOWN.R3.work')
    assert r == {'type': 'io.nats.jetstream.api.v1.consumer_leader_stepdown_response', 'success': True}

    async def moved():
        try: info = await _req(ncs[0], '$JS.API.CONSUMER.INFO.R3.work')
        except nats.errors.TimeoutError: return False
        return 'error' not in info and info['cluster'].get('leader') not in (None, old)
    await _until(moved)
    info = await _req(ncs[0], '$JS.API.CONSUMER.INFO.R3.work')
    assert (info['delivered']['stream_seq'], info['ack_floor']['stream_seq'], info['num_ack_pending']) == (2, 1, 1)
    await msgs[1].ack_sync(timeout=10)                   # acknowledged at the new leader
    nxt = await _fetch(sub, 1)
    assert nxt[0].metadata.sequence.stream == 3
    r = await _req(ncs[1], '$JS.API.CONSUMER.LEADER.STEPDOWN.R3.nope')
    assert r['error'] == {'code': 404, 'err_code': 10014, 'description': 'consumer not found'}
    r = await _req(ncs[1], '$JS.API.CONSUMER.LEADER.STEPDOWN.NOPE.work')
    assert r['error'] == {'code': 404, 'err_code': 10059, 'description': 'stream not found'}
    r = await _req(ncs[0], '$JS.API.CONSUMER.DURABLE.CREATE.R1.one', {'stream_name': 'R1', 'config': {'durable_name': 'one'}})
    assert set(r['cluster']) == {'name', 'leader'}                   # a consumer of a stream on one server: no group
    for _ in range(50):                  # the new consumer's assignment reaches every server a moment after the answer
        r = await _req(ncs[2], '$JS.API.CONSUMER.LEADER.STEPDOWN.R1.one')
        if r.get('error', {}).get('err_code') != 10014: break
        await asyncio.sleep(0.1)
    assert r == {'type': 'io.nats.jetstream.api.v1.consumer_leader_stepdown_response', 'success': True}
    r = await _req(ncs[1], '$JS.API.CONSUMER.DELETE.R3.work')
    assert r == {'type': 'io.nats.jetstream.api.v1.consumer_delete_response', 'success': True}
    for nc in ncs: await nc.close()


async def test_work_queue_consumer(cluster):
    "A consumer of an R3 work queue: acknowledged messages leave the stream on every server; a second unfiltered consumer is refused alike."
    ncs = await _clients(cluster)
    base = [cluster.jsz(i)['messages'] for i in range(cluster.n)]
    r = await _req(ncs[0], '$JS.API.STREAM.CREATE.WQ3', {'name': 'WQ3', 'subjects': ['wq3.>'], 'num_replicas': 3, 'retention': 'workqueue'})
    assert 'error' not in r, r
    js = ncs[1].jetstream()
    for k in range(10): await js.publish('wq3.x', b'%d' % k)
    cfg = {'ack_policy': 'explicit'}
    r = await _req(ncs[2], '$JS.API.CONSUMER.DURABLE.CREATE.WQ3.work', {'stream_name': 'WQ3', 'config': dict(cfg, durable_name='work')})
    assert 'error' not in r, r
    r = await _req(ncs[2], '$JS.API.CONSUMER.DURABLE.CREATE.WQ3.more', {'stream_name': 'WQ3', 'config': dict(cfg, durable_name='more')})
    assert r['error'] == {'code': 400, 'err_code': 10099, 'description': 'multiple non-filtered consumers not allowed on workqueue stream'}
    r = await _req(ncs[0], '$JS.API.CONSUMER.DURABLE.CREATE.WQ3.one',
                   {'stream_name': 'WQ3', 'config': dict(cfg, durable_name='one', num_replicas=1, filter_subject='wq3.one')})
    assert r['error'] == {'code': 400, 'err_code': 10134, 'description': "consumer config replicas must match interest retention stream's replicas"}
    sub = await js.pull_subscribe_bind('work', 'WQ3')
    msgs = await _fetch(sub, 4)
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3, 4]
    for m in msgs[:3]: await m.ack_sync(timeout=10)

    async def removed_everywhere():
        return [cluster.jsz(i)['messages'] - base[i] for i in range(cluster.n)] == [7, 7, 7]
    await _until(removed_everywhere)
    for nc in ncs:
        info = await _req(nc, '$JS.API.STREAM.INFO.WQ3')
        assert (info['state']['messages'], info['state']['first_seq'], info['state'].get('num_deleted', 0)) == (7, 4, 0)
        ci = await _req(nc, '$JS.API.CONSUMER.INFO.WQ3.work')
        assert (ci['delivered']['stream_seq'], ci['ack_floor']['stream_seq'], ci['num_ack_pending'], ci['num_pending']) == (4, 3, 1, 6)
    r = await _req(ncs[0], '$JS.API.STREAM.DELETE.WQ3')
    assert r.get('success') is True, r
    for nc in ncs: await nc.close()


async def test_interest_consumers(cluster):
    "Consumers of an R3 interest stream: nothing kept without interest, a message leaves every server once both consumers acknowledged it, everything once the last consumer is gone."
    ncs = await _clients(cluster)
    await _req(ncs[0], '$JS.API.STREAM.DELETE.IN3')                  # (a rerun starts from nothing: the cluster is the module's)
    await asyncio.sleep(0.5)
    base = [cluster.jsz(i)['messages'] for i in range(cluster.n)]
    held = lambda: [cluster.jsz(i)['messages'] - base[i] for i in range(cluster.n)]
    r = await _req(ncs[0], '$JS.API.STREAM.CREATE.IN3', {'name': 'IN3', 'subjects': ['in3.>'], 'num_replicas': 3, 'retention': 'interest'})
    assert 'error' not in r, r
    js = ncs[1].jetstream()
    for k in range(5):                                               # nobody interested yet: not kept
        for _ in range(50):                      # (nats-server: no responders until this server has heard of the new leader)
            try: await js.publish('in3.x', b'%d' % k); break
            except nats.js.errors.NoStreamResponseError: await asyncio.sleep(0.1)
    for name in ('a', 'b'):
        r = await _req(ncs[2], f'$JS.API.CONSUMER.DURABLE.CREATE.IN3.{name}',
                       {'stream_name': 'IN3', 'config': {'durable_name': name, 'ack_policy': 'explicit'}})
        assert 'error' not in r, r
    for k in range(10): await js.publish('in3.x', b'%d' % k)
    info = await _req(ncs[0], '$JS.API.STREAM.INFO.IN3')
    assert (info['state']['messages'], info['state']['first_seq'], info['state']['last_seq']) == (10, 6, 15)
    for name, n in (('a', 10), ('b', 6)):
        sub = await js.pull_subscribe_bind(name, 'IN3')
        msgs = await _fetch(sub, n)
        assert [m.metadata.sequence.stream for m in msgs] == list(range(6, 6 + n))
        for m in msgs: await m.ack_sync(timeout=10)

    async def count(n):
        return held() == [n] * 3
    await _until(lambda: count(4))
    r = await _req(ncs[1], '$JS.API.CONSUMER.DELETE.IN3.b')
    assert r.get('success') is True, r
    await _until(lambda: count(0))
    info = await _req(ncs[2], '$JS.API.STREAM.INFO.IN3')
    assert (info['state']['messages'], info['state']['last_seq']) == (0, 15)
    r = await _req(ncs[0], '$JS.API.STREAM.DELETE.IN3')
    assert r.get('success') is True, r
    for nc in ncs: await nc.close()


async def test_consumer_replicas(cluster):
    "A consumer's `num_replicas` on an R3 stream: the stream's own count and a smaller one taken and reported, more or a negative one refused alike (and a smaller one on an interest stream)."
    nc = await nats.connect(cluster.url(1))
    r = await _req(nc, '$JS.API.STREAM.CREATE.CR3', {'name': 'CR3', 'subjects': ['cr3.>'], 'num_replicas': 3})
    assert 'error' not in r, r
    for n, err in ((5, {'code': 400, 'err_code': 10126, 'description': 'consumer config replica count exceeds parent stream'}),
                   (-1, {'code': 400, 'err_code': 10133, 'description': 'replicas count cannot be negative'})):
        r = await _req(nc, '$JS.API.CONSUMER.CREATE.CR3', {'stream_name': 'CR3', 'config': {'ack_policy': 'explicit', 'num_replicas': n}})
        assert r['error'] == err
    r = await _req(nc, '$JS.API.CONSUMER.DURABLE.CREATE.CR3.three',
                   {'stream_name': 'CR3', 'config': {'durable_name': 'three', 'ack_policy': 'explicit', 'num_replicas': 3}})
    assert 'error' not in r, r
    assert r['config']['num_replicas'] == 3 and len(r['cluster']['replicas']) == 2
    r = await _req(nc, '$JS.API.CONSUMER.DURABLE.CREATE.CR3.two',         # fewer than the stream: a leader and one replica
                   {'stream_name': 'CR3', 'config': {'durable_name': 'two', 'ack_policy': 'explicit', 'num_replicas': 2}})
    assert 'error' not in r, r
    assert r['config']['num_replicas'] == 2 and len(r['cluster']['replicas']) == 1
    assert r['cluster']['leader'] not in [p['name'] for p in r['cluster']['replicas']]
    await nc.jetstream().publish('cr3.a', b'x')
    sub = await nc.jetstream().pull_subscribe_bind('two', 'CR3')
    for m in await sub.fetch(1, timeout=10): await m.ack_sync(timeout=10)
    ci = await _req(nc, '$JS.API.CONSUMER.INFO.CR3.two')
    assert (ci['ack_floor']['stream_seq'], ci['num_pending'], len(ci['cluster']['replicas'])) == (1, 0, 1)
    r = await _req(nc, '$JS.API.STREAM.CREATE.CRI', {'name': 'CRI', 'subjects': ['cri'], 'num_replicas': 3, 'retention': 'interest'})
    assert 'error' not in r, r
    r = await _req(nc, '$JS.API.CONSUMER.CREATE.CRI', {'stream_name': 'CRI', 'config': {'ack_policy': 'explicit', 'num_replicas': 2}})
    assert r['error'] == {'code': 400, 'err_code': 10134, 'description': 'consumer config replicas must match interest retention stream\'s replicas'}
    r = await _req(nc, '$JS.API.STREAM.DELETE.CRI')
    assert r.get('success') is True, r
    r = await _req(nc, '$JS.API.STREAM.DELETE.CR3')
    assert r.get('success') is True, r
    await nc.close()


async def test_account_info_across_the_cluster(cluster):
    "`$JS.API.INFO` through any server: the meta leader answers, with the usage of the whole cluster (each replica's storage counts)."
    ncs = await _clients(cluster)
    before = await _req(ncs[0], '$JS.API.INFO')
    for name, r in (('AI3', 3), ('AI1', 1)):
        resp = await _req(ncs[0], f'$JS.API.STREAM.CREATE.{name}', {'name': name, 'subjects': [name.lower()], 'num_replicas': r, 'max_bytes': 1 << 20})
        assert 'error' not in resp, resp
    js = ncs[1].jetstream()
    for i in range(10): await js.publish('ai3', b'x' * 100)
    for i in range(5): await js.publish('ai1', b'y' * 100)
    r = await _req(ncs[2], '$JS.API.CONSUMER.DURABLE.CREATE.AI3.c', {'stream_name': 'AI3', 'config': {'durable_name': 'c'}})
    assert 'error' not in r, r

    async def summed():                                  # followers apply a moment later: until the sum is steady
        total = sum(cluster.jsz(i)['storage'] for i in range(cluster.n))
        return (await _req(ncs[0], '$JS.API.INFO'))['storage'] == total and total > before['storage']
    await _until(summed)
    infos = [await _req(nc, '$JS.API.INFO') for nc in ncs]
    total = sum(cluster.jsz(i)['storage'] for i in range(cluster.n))
    for info in infos:
        assert (info['storage'], info['memory']) == (total, before['memory'])
        assert (info['streams'], info['consumers']) == (before['streams'] + 2, before['consumers'] + 1)
        assert info['reserved_storage'] == before['reserved_storage'] + 2 * (1 << 20)      # once per stream, not per replica
    totals = [i['api']['total'] for i in infos]
    assert totals[0] < totals[1] < totals[2]            # one server's count, growing with each request
    for name in ('AI3', 'AI1'): await _req(ncs[0], f'$JS.API.STREAM.DELETE.{name}')
    for nc in ncs: await nc.close()


async def test_key_value_reads_on_three_replicas(cluster):
    "A key-value bucket of three replicas read as clients read one: history, keys and a watch (ordered consumers of one replica), and such a consumer's `cluster`."
    ncs = await _clients(cluster)
    kv = await ncs[0].jetstream().create_key_value(bucket='KV3', history=5, replicas=3)
    for v in (b'1', b'2', b'3'): await kv.put('k', v)
    await kv.put('other', b'x')
    kv2 = await ncs[2].jetstream().key_value('KV3')
    assert [e.value for e in await kv2.history('k')] == [b'1', b'2', b'3']
    assert sorted(await kv2.keys()) == ['k', 'other']
    w = await kv2.watch('k')
    assert (await w.updates(timeout=10)).value == b'3'
    await w.updates(timeout=10)                          # (the end of the initial values)
    await kv.put('k', b'4')
    assert (await w.updates(timeout=10)).value == b'4'
    await w.stop()
    r = await _req(ncs[1], '$JS.API.CONSUMER.DURABLE.CREATE.KV_KV3.one',
                   {'stream_name': 'KV_KV3', 'config': {'durable_name': 'one', 'num_replicas': 1, 'mem_storage': True}})
    assert 'error' not in r, r
    assert set(r['cluster']) == {'name', 'leader'} and r['config']['num_replicas'] == 1
    await ncs[0].jetstream().delete_key_value('KV3')
    for nc in ncs: await nc.close()


async def test_meta_leader_stepdown_only_from_the_system_account(cluster):
    "The reference takes `META.LEADER.STEPDOWN` only from the system account: a client of `$G` hears nothing, and the meta leader stays."
    old = cluster.wait_meta()
    nc = await nats.connect(cluster.url(0))
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request('$JS.API.META.LEADER.STEPDOWN', b'', timeout=2)
    await nc.close()
    assert cluster.wait_meta() == old


@pytest.mark.parametrize('cfg,err', [
    ({'name': 'R7', 'subjects': ['r7'], 'num_replicas': 7}, {'code': 500, 'err_code': 10052, 'description': 'maximum replicas is 5'}),
    ({'name': 'R5', 'subjects': ['r5'], 'num_replicas': 5}, {'code': 400, 'err_code': 10005, 'description': 'no suitable peers for placement'}),
    ({'name': 'OV', 'subjects': ['ov.a.*'], 'num_replicas': 3}, {'code': 400, 'err_code': 10065, 'description': 'subjects overlap with an existing stream'}),
])
async def test_create_refusals(cluster, cfg, err):
    nc = await nats.connect(cluster.url(2))
    if cfg['name'] == 'OV':                      # the stream it overlaps with
        assert 'error' not in await _req(nc, '$JS.API.STREAM.CREATE.OV0', {'name': 'OV0', 'subjects': ['ov.>'], 'num_replicas': 3})
    r = await _req(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
    assert r['error'] == err
    await nc.close()



@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_cluster_without_route_credentials(kind):
    "Routes without credentials are allowed, as the reference allows them: replicated streams work; jsnb says in its log that the cluster is open."
    c = JSCluster(kind, open=True)
    try:
        c.start(); c.wait_meta()
        ncs = await _clients(c)
        si = await _req(ncs[1], '$JS.API.STREAM.CREATE.OPEN', {'name': 'OPEN', 'subjects': ['open.>'], 'num_replicas': 3})
        assert si['config']['num_replicas'] == 3 and len(si['cluster']['replicas']) == 2
        assert [(await ncs[i].jetstream().publish('open.x', b'm')).seq for i in range(3)] == [1, 2, 3]
        for nc in ncs: await nc.close()
        if kind == 'jsnb':
            assert all('JetStream cluster without route credentials: any host that reaches the route port can join'
                       in p.log_text() for p in c.procs)
    finally: c.stop()


async def test_alternates_of_a_mirrored_stream(cluster):
    "STREAM.INFO of a stream with a mirror lists both as `alternates` (name, cluster); other replies and unmirrored streams have none."
    nc = await nats.connect(cluster.url(0))
    created = await _req(nc, '$JS.API.STREAM.CREATE.ALT', {'name': 'ALT', 'subjects': ['alt.>']})
    assert 'alternates' not in created
    assert 'alternates' not in await _req(nc, '$JS.API.STREAM.INFO.ALT')
    nc1 = await nats.connect(cluster.url(1))
    m = await _req(nc1, '$JS.API.STREAM.CREATE.ALT_M', {'name': 'ALT_M', 'mirror': {'name': 'ALT'}})
    assert 'error' not in m and 'alternates' not in m
    info = await _req(nc1, '$JS.API.STREAM.INFO.ALT')
    assert sorted(info['alternates'], key=lambda a: a['name']) == [{'name': 'ALT', 'cluster': 'c1'}, {'name': 'ALT_M', 'cluster': 'c1'}]
    assert 'alternates' not in await _req(nc1, '$JS.API.STREAM.INFO.ALT_M')       # a mirror lists no alternates of its own
    lst = await _req(nc1, '$JS.API.STREAM.LIST')
    assert all('alternates' not in s for s in lst['streams'])
    for c in (nc, nc1): await c.close()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_a_server_without_jetstream(kind):
    "Clients of a cluster's server without JetStream use the streams of the others: the API, publishing, pulling and acking, and a leader change."
    c = JSCluster(kind, n=4, no_js=(0,))
    try:
        c.start(); c.wait_meta()
        nc = await nats.connect(c.url(0), max_reconnect_attempts=-1)
        js = nc.jetstream()
        assert (await js.account_info()).streams == 0
        si = await js.add_stream(name='DC', subjects=['dc.>'], num_replicas=3)
        assert si.cluster.leader in ('n1', 'n2', 'n3')
        assert [(await js.publish('dc.x', f'{k}'.encode())).seq for k in range(5)] == [1, 2, 3, 4, 5]
        sub = await js.pull_subscribe('dc.>', 'd')
        msgs = await _fetch(sub, 5)                                 # (a new replicated consumer may need a moment)
        assert [m.data for m in msgs] == [b'0', b'1', b'2', b'3', b'4']
        for m in msgs: await m.ack_sync(timeout=10)
        ci = await js.consumer_info('DC', 'd')
        assert (ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending) == (5, 0, 0)
        assert (await _req(nc, '$JS.API.STREAM.INFO.NOPE'))['error']['err_code'] == 10059
        c.kill(int(si.cluster.leader[1:]))                          # publishing goes on once another replica leads
        deadline = time.time() + 60
        while True:
            try: ack = await js.publish('dc.x', b'after', timeout=2); break
            except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError, nats.js.errors.ServiceUnavailableError):
                if time.time() > deadline: raise
                await asyncio.sleep(0.2)
        assert ack.seq == 6
        await nc.close()
    finally: c.stop()


async def test_scale_up_from_one_replica(cluster):
    "An R1 stream updated to `num_replicas: 3` answers with the new replicas and the messages it had; every server then holds it."
    nc = await nats.connect(cluster.url(0))
    js = nc.jetstream()
    r = await _req(nc, '$JS.API.STREAM.CREATE.GROW', {'name': 'GROW', 'subjects': ['grow.>']})
    assert set(r['cluster']) == {'name', 'leader'}
    for k in range(10): await js.publish('grow.x', f'{k}'.encode())
    r = await _req(nc, '$JS.API.STREAM.UPDATE.GROW', {'name': 'GROW', 'subjects': ['grow.>'], 'num_replicas': 3}, timeout=30)
    assert r['type'] == 'io.nats.jetstream.api.v1.stream_update_response'
    assert (r['config']['num_replicas'], r['state']['messages'], r['state']['last_seq']) == (3, 10, 10)
    assert r['cluster']['name'] == 'c1' and r['cluster']['raft_group'].startswith('S-R3F-')
    deadline = time.time() + 30
    while True:                                  # (the reference answers before its new group has a leader)
        try: ack = await js.publish('grow.x', b'10', timeout=2); break
        except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError, nats.js.errors.ServiceUnavailableError):
            if time.time() > deadline: raise
            await asyncio.sleep(0.2)
    assert ack.seq == 11

    async def all_current():
        info = await _req(nc, '$JS.API.STREAM.INFO.GROW')
        return info['state']['messages'] == 11 and all(p['current'] for p in info['cluster']['replicas'])
    await _until(all_current)
    await nc.close()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_placement_by_cluster_and_tags(kind):
    "`placement`: the cluster must be this one; every tag must be a server's (case aside), `!tag` one it must not have; what cannot be placed is refused with 10005 and the reasons."
    c = JSCluster(kind, tags={0: ['az:1', 'ssd'], 1: ['az:2'], 2: ['az:3', 'ssd']})
    try:
        c.start(); c.wait_meta()
        nc = await nats.connect(c.url(0))
        time.sleep(1)                                              # (the reference places only on servers it has heard from)

        async def create(name, placement, n=1):
            r = await _req(nc, f'$JS.API.STREAM.CREATE.{name}', {'name': name, 'subjects': [name.lower()], 'num_replicas': n, 'placement': placement})
            if 'error' in r: return r['error']
            return sorted([r['cluster']['leader']] + [p['name'] for p in r['cluster'].get('replicas', [])])
        none = 'no suitable peers for placement'
        assert await create('A', {'cluster': 'other'}) == {'code': 400, 'err_code': 10005, 'description': none}
        assert await create('B', {'tags': ['ssd']}, 2) == ['n0', 'n2']
        assert await create('C', {'tags': ['ssd']}, 3) == {'code': 400, 'err_code': 10005, 'description': none + ", tags not matched ['ssd']"}
        assert await create('D', {'tags': ['az:2']}) == ['n1']
        assert await create('E', {'cluster': 'c1', 'tags': ['nope']}) == {'code': 400, 'err_code': 10005, 'description': none + ", tags not matched ['nope']"}
        assert await create('F', {'tags': ['AZ:3']}) == ['n2']
        assert await create('G', {'tags': ['ssd', '!az:1']}) == ['n2']
        assert await create('H', {'tags': ['!ssd']}, 2) == {'code': 400, 'err_code': 10005, 'description': none + ", tags excluded ['ssd']"}
        async def update(name, placement, n=1):
            r = await _req(nc, f'$JS.API.STREAM.UPDATE.{name}', {'name': name, 'subjects': [name.lower()], 'num_replicas': n, 'placement': placement})
            return r.get('error') or sorted([r['cluster']['leader']] + [p['name'] for p in r['cluster'].get('replicas', [])])
        got = [await update('D', {'tags': ['nope']}), await update('D', {'cluster': 'other'}), await update('B', {'tags': ['az:2']}, 2),
               await update('D', {'tags': ['az:2']})]
        assert got == [{'code': 400, 'err_code': 10005, 'description': none + ", tags not matched ['nope']"},   # the stream stays where it is
                       {'code': 400, 'err_code': 10005, 'description': none},
                       {'code': 400, 'err_code': 10005, 'description': none + ", tags not matched ['az:2']"},
                       ['n1']], got                                                                       # (its server fits)
        await nc.close()
    finally: c.stop()


async def test_peer_remove_refusals(cluster):
    "`STREAM.PEER.REMOVE` on three servers: no server to take the peer's place (10075), a peer that is not a member (10040), no stream (10059), no peer named (10003)."
    nc = await nats.connect(cluster.url(0))
    r = await _req(nc, '$JS.API.STREAM.CREATE.PR', {'name': 'PR', 'subjects': ['pr.>'], 'num_replicas': 3})
    follower = r['cluster']['replicas'][0]
    T = 'io.nats.jetstream.api.v1.stream_remove_peer_response'
    assert await _req(nc, '$JS.API.STREAM.PEER.REMOVE.PR', {'peer': follower['name']}) == \
        {'type': T, 'error': {'code': 503, 'err_code': 10075, 'description': 'peer remap failed'}}
    assert (await _req(nc, '$JS.API.STREAM.PEER.REMOVE.PR', {'peer': follower['peer']}))['error']['err_code'] == 10075   # by peer id
    assert await _req(nc, '$JS.API.STREAM.PEER.REMOVE.PR', {'peer': 'nx'}) == \
        {'type': T, 'error': {'code': 400, 'err_code': 10040, 'description': 'peer not a member'}}
    assert await _req(nc, '$JS.API.STREAM.PEER.REMOVE.NOPE', {'peer': 'n0'}) == \
        {'type': T, 'error': {'code': 404, 'err_code': 10059, 'description': 'stream not found'}}
    assert await _req(nc, '$JS.API.STREAM.PEER.REMOVE.PR', {}) == \
        {'type': T, 'error': {'code': 400, 'err_code': 10003, 'description': 'bad request'}}
    await nc.close()


async def _fetch_until(sub, n: int, timeout: float = 30):
    "Fetch `n` messages, asking again while the servers do not know the consumer's interest yet (nats-server answers 503 then)."
    deadline = time.time() + timeout
    while True:
        try: return await sub.fetch(n, timeout=5)
        except (nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError):
            if time.time() > deadline: raise
            await asyncio.sleep(0.2)


async def test_peer_remove_of_a_stream_of_one_replica(cluster):
    """`STREAM.PEER.REMOVE` of the only server of a stream: it starts again, empty, on another server (sequences from 1),
    with its durable consumer starting again from the beginning."""
    nc = await nats.connect(cluster.url(1))
    js = nc.jetstream()
    r = await _req(nc, '$JS.API.STREAM.CREATE.MV1', {'name': 'MV1', 'subjects': ['mv1'], 'num_replicas': 1})
    assert 'error' not in r, r
    old = r['cluster']['leader']
    for i in range(5): await js.publish('mv1', b'x%d' % i)
    sub = await js.pull_subscribe('mv1', 'd', stream='MV1')
    for m in await _fetch_until(sub, 2): await m.ack_sync(timeout=10)
    assert await _req(nc, '$JS.API.STREAM.PEER.REMOVE.MV1', {'peer': old}) == \
        {'type': 'io.nats.jetstream.api.v1.stream_remove_peer_response', 'success': True}

    async def moved():                                   # (nats-server may leave a request unanswered while it moves the stream)
        try: i = await _req(nc, '$JS.API.STREAM.INFO.MV1', timeout=2)
        except nats.errors.TimeoutError: return False
        return 'error' not in i and i['cluster'].get('leader') not in (None, old) and i
    await _until(moved, 60)
    info = await moved()
    assert (info['state']['messages'], info['state']['last_seq'], info['config']['num_replicas']) == (0, 0, 1)

    async def consumer():
        try: c = await _req(nc, '$JS.API.CONSUMER.INFO.MV1.d', timeout=2)
        except nats.errors.TimeoutError: return False
        return 'error' not in c and c['cluster'].get('leader') == info['cluster']['leader'] and c
    await _until(consumer, 30)
    c = await consumer()
    assert (c['delivered']['stream_seq'], c['ack_floor']['stream_seq'], c['num_pending']) == (0, 0, 0)
    ack = await publish_acked(js, 'mv1', b'after', time.time() + 30, headers={'Nats-Msg-Id': 'after'})   # (no responders until
                                                     # the new leader's interest is known)
    assert (ack.stream, ack.seq) == ('MV1', 1)
    assert [m.data for m in await _fetch_until(sub, 1)] == [b'after']
    await _req(nc, '$JS.API.STREAM.DELETE.MV1')
    await nc.close()

async def test_atomic_batch_on_three_replicas(cluster):
    "An atomic batch on an R3 stream is one entry of the group's log: stored whole on every replica, or refused whole."
    ncs = await _clients(cluster)
    r = await _req(ncs[0], '$JS.API.STREAM.CREATE.AB', {'name': 'AB', 'subjects': ['ab.>'], 'num_replicas': 3,
                                                         'allow_atomic': True, 'allow_direct': True})
    assert 'error' not in r, r
    def hdr(b, n, commit=False, **more):
        return {'Nats-Batch-Id': b, 'Nats-Batch-Sequence': str(n), **({'Nats-Batch-Commit': '1'} if commit else {}), **more}
    async def send(nc, b, n, data, commit=False, **more):
        m = await nc.request('ab.x', data, headers=hdr(b, n, commit, **more), timeout=10)
        return json.loads(m.data) if m.data else None
    nc = ncs[1]
    assert [await send(nc, 'A', n, b'a%d' % n) for n in (1, 2)] == [None, None]             # staged: an empty answer
    assert await send(nc, 'A', 3, b'a3', True) == {'stream': 'AB', 'seq': 3, 'batch': 'A', 'count': 3}
    await send(nc, 'B', 1, b'b1')
    await send(nc, 'B', 2, b'b2', **{'Nats-Expected-Last-Sequence': '99'})                  # fails the whole batch
    err = await send(nc, 'B', 3, b'b3', True)
    assert err['error'] == {'code': 400, 'err_code': 10071, 'description': 'wrong last sequence: 4'}, err   # with the batch so far
    assert await send(ncs[2], 'C', 1, b'c1', True) == {'stream': 'AB', 'seq': 4, 'batch': 'C', 'count': 1}
    got = {}
    for i in range(3):                                       # every server's clients read the same four messages
        got[i] = [(await ncs[i].request('$JS.API.DIRECT.GET.AB', json.dumps({'seq': q}).encode(), timeout=10)).data for q in range(1, 5)]
    assert got[0] == got[1] == got[2] == [b'a1', b'a2', b'a3', b'c1']
    info = await _req(ncs[0], '$JS.API.STREAM.INFO.AB')
    assert (info['state']['messages'], info['state']['last_seq']) == (4, 4)
    for nc in ncs: await nc.close()


async def test_one_off_schedule_on_three_replicas(cluster):
    "A one-off message schedule on an R3 stream fires once, through whichever server the client uses."
    ncs = await _clients(cluster)
    r = await _req(ncs[0], '$JS.API.STREAM.CREATE.SC', {'name': 'SC', 'subjects': ['sc.>'], 'num_replicas': 3, 'allow_msg_schedules': True})
    assert 'error' not in r, r
    at = '@at ' + time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + 2))
    a = await ncs[1].jetstream().publish('sc.once', b'one', headers={'Nats-Schedule': at, 'Nats-Schedule-Target': 'sc.out'})
    assert a.seq == 1

    async def fired(): return (await _req(ncs[2], '$JS.API.STREAM.INFO.SC'))['state']['last_seq'] >= 2
    await _until(fired)
    await asyncio.sleep(2)                                   # and nothing more
    info = await _req(ncs[0], '$JS.API.STREAM.INFO.SC')
    m = (await _req(ncs[2], '$JS.API.STREAM.MSG.GET.SC', {'last_by_subj': 'sc.out'}))['message']
    print(cluster.kind, info['state'], m)
    assert (info['state']['messages'], info['state']['last_seq'], m['seq'], m['subject']) == (1, 2, 2, 'sc.out')
    for nc in ncs: await nc.close()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_update_while_the_meta_leader_is_down(kind):
    """With the meta leader killed, a stream update (which the meta group records) is answered once another server
    leads it. The reference drops a request that comes during the election (the client asks again, as here); jsnb
    keeps it, and answers the first request."""
    c = JSCluster(kind)
    try:
        c.start(); meta = c.wait_meta()
        nc = await nats.connect(c.url(next(i for i in range(3) if f'n{i}' != meta)))
        r = await _req(nc, '$JS.API.STREAM.CREATE.U', {'name': 'U', 'subjects': ['u.>'], 'num_replicas': 3})
        assert 'error' not in r, r
        for _ in range(10):                      # the stream's leader is not the meta leader (its requests go to its leader)
            if r['cluster']['leader'] != meta: break
            await _req(nc, '$JS.API.STREAM.LEADER.STEPDOWN.U'); await asyncio.sleep(1)
            r = await _req(nc, '$JS.API.STREAM.INFO.U')
        assert r['cluster']['leader'] != meta
        c.kill(int(meta[1:]))
        tries, deadline = 0, time.time() + 90
        while True:
            tries += 1
            try: r = await _req(nc, '$JS.API.STREAM.UPDATE.U', {'name': 'U', 'subjects': ['u.>'], 'num_replicas': 3, 'description': 'd'}, timeout=20); break
            except nats.errors.TimeoutError:
                if time.time() > deadline: raise
        assert (r['type'], r['config']['description']) == ('io.nats.jetstream.api.v1.stream_update_response', 'd'), r
        if kind == 'jsnb': assert tries == 1
        await nc.close()
    finally: c.stop()



async def test_fast_batches_on_three_replicas():
    """Fast-ingest batches on an R3 stream, frame by frame (`test_fast_batch_reference.run`), on both clusters: every
    replica moves each batch on alike, the proposing server answers; every server reads the same messages."""
    from types import SimpleNamespace
    from test_fast_batch_reference import run
    res = {}
    for kind in ('nats-server', 'jsnb'):
        c = JSCluster(kind)
        try:
            c.start(); c.wait_meta()
            res[kind] = await run(SimpleNamespace(url=c.url(1)), replicas=3)
            if kind == 'jsnb':                   # every replica's store holds the same messages
                await asyncio.sleep(1); c.stop()
                stores = c.stores('F')
                assert len(stores[0]) == res[kind]['state'] and stores[0] == stores[1] == stores[2]
        finally: c.stop()
    diffs = [f'\n{k}:\n jsnb: {res["jsnb"][k]}\n  ref: {res["nats-server"][k]}' for k in res['nats-server'] if res['jsnb'].get(k) != res['nats-server'][k]]
    assert not diffs, ''.join(diffs)


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_stream_list_by_a_server_without_a_copy(kind):
    """An R2 stream on two of three servers is in `STREAM.LIST` answered by the third (the meta leader, which answers
    every list), whichever of its two servers leads it: jsnb once asked only the stream's first server, which as a
    follower could not answer, and left the stream out of the list for as long as it did not lead."""
    c = JSCluster(kind, tags={0: ['meta'], 1: ['s'], 2: ['s']}, system=True)
    try:
        c.start(); c.wait_meta()
        sys_nc, nc = await nats.connect(c.url(0, 'sys')), await nats.connect(c.url(0))
        time.sleep(1)                                              # (the reference places only on servers it has heard from)
        async def meta_on_n0():
            if c.jsz(0)['meta_cluster'].get('leader') == 'n0': return True
            await sys_nc.request('$JS.API.META.LEADER.STEPDOWN', json.dumps({'placement': {'preferred': 'n0'}}).encode(), timeout=5)
            return False
        await _until(meta_on_n0)
        r = await _req(nc, '$JS.API.STREAM.CREATE.TWO', {'name': 'TWO', 'subjects': ['two'], 'num_replicas': 2, 'placement': {'tags': ['s']}})
        assert 'error' not in r, r
        listed = []
        for lead in ('n1', 'n2', 'n1'):
            async def led():
                info = await _req(nc, '$JS.API.STREAM.INFO.TWO')
                if (info.get('cluster') or {}).get('leader') == lead: return True
                await _req(nc, '$JS.API.STREAM.LEADER.STEPDOWN.TWO', {'placement': {'preferred': lead}})
                return False
            await _until(led)
            async def in_list():
                lst = await _req(nc, '$JS.API.STREAM.LIST')
                got = [(s['config']['name'], s['cluster']['leader']) for s in lst.get('streams') or ()]
                if got == [('TWO', lead)]: listed.append((lst['total'], got, lst.get('missing')))
                return got == [('TWO', lead)]
            await _until(in_list)
        assert listed == [(1, [('TWO', 'n1')], None), (1, [('TWO', 'n2')], None), (1, [('TWO', 'n1')], None)]
        errors = lambda: [c.jsz(i)['api']['errors'] for i in (1, 2)]
        before = errors()
        for _ in range(5): assert [s['config']['name'] for s in (await _req(nc, '$JS.API.STREAM.LIST'))['streams']] == ['TWO']
        assert errors() == before                                  # (the follower asked for the info is not the account's error)
        assert c.jsz(0)['meta_cluster']['leader'] == 'n0'
        await nc.close(); await sys_nc.close()
    finally: c.stop()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_mirror_and_source_of_a_stream_on_another_server(kind):
    "A mirror and a source (one replica each) placed on servers that do not hold their upstream copy it, and what is published later."
    c = JSCluster(kind, tags={0: ['up'], 1: ['mirror'], 2: ['source']})
    try:
        c.start(); c.wait_meta()
        nc = await nats.connect(c.url(0)); js = nc.jetstream()
        time.sleep(1)                                              # (the reference places only on servers it has heard from)
        async def create(cfg, tag):
            r = await _req(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", {**cfg, 'placement': {'tags': [tag]}})
            assert 'error' not in r, r
            return r['cluster']['leader']
        assert await create({'name': 'UP', 'subjects': ['up.>']}, 'up') == 'n0'
        for k in range(5): await js.publish('up.x', b'%d' % k)
        assert await create({'name': 'MI', 'mirror': {'name': 'UP'}}, 'mirror') == 'n1'
        assert await create({'name': 'SO', 'sources': [{'name': 'UP', 'filter_subject': 'up.>'}]}, 'source') == 'n2'
        for k in range(5, 8): await js.publish('up.x', b'%d' % k)

        async def copied():
            got = [(await _req(nc, f'$JS.API.STREAM.INFO.{n}'))['state']['messages'] for n in ('MI', 'SO')]
            return got == [8, 8]
        await _until(copied)
        m = await js.get_msg('MI', 8)
        assert m.data == b'7'
        m = await js.get_msg('SO', 8)
        assert m.data == b'7' and m.headers['Nats-Stream-Source'].startswith('UP 8 ')
        await nc.close()
    finally: c.stop()


async def test_replicated_mirror_and_source_info(cluster):
    "An R3 mirror and an R3 source of an R3 stream: they copy everything, and their info reports the upstream with the same fields."
    ncs = await _clients(cluster)
    nc, js = ncs[0], ncs[0].jetstream()
    assert 'error' not in await _req(nc, '$JS.API.STREAM.CREATE.RUP', {'name': 'RUP', 'subjects': ['rup.>'], 'num_replicas': 3})
    for k in range(10): await js.publish('rup.a', b'%d' % k)
    for name, cfg in (('RMI', {'mirror': {'name': 'RUP'}}), ('RSO', {'sources': [{'name': 'RUP'}]})):
        r = await _req(ncs[1], f'$JS.API.STREAM.CREATE.{name}', {'name': name, 'num_replicas': 3, **cfg})
        assert 'error' not in r, r
        assert len(r['cluster'].get('replicas', [])) == 2 or r['cluster'].get('leader') is None

    async def copied():
        infos = [await _req(nc, f'$JS.API.STREAM.INFO.{n}') for n in ('RMI', 'RSO')]
        return all('error' not in i and i['state']['messages'] == 10 for i in infos)
    await _until(copied)
    mi, so = await _req(nc, '$JS.API.STREAM.INFO.RMI'), await _req(nc, '$JS.API.STREAM.INFO.RSO')
    assert (sorted(mi['mirror']), sorted(so['sources'][0])) == (['active', 'lag', 'name'], ['active', 'lag', 'name', 'seq'])
    assert (mi['mirror']['name'], mi['mirror']['lag'], so['sources'][0]['name'], so['sources'][0]['lag']) == ('RUP', 0, 'RUP', 0)
    assert (mi['state']['first_seq'], mi['state']['last_seq'], so['state']['last_seq']) == (1, 10, 10)
    for nc_ in ncs: await nc_.close()


async def test_stepdown_to_a_preferred_server(cluster):
    "`STREAM.LEADER.STEPDOWN` with a `placement`: the preferred server takes over; the leader itself, an unknown server, no fitting follower or bad JSON are refused."
    nc = await nats.connect(cluster.url(0))
    r = await _req(nc, '$JS.API.STREAM.CREATE.PREF', {'name': 'PREF', 'subjects': ['pref.>'], 'num_replicas': 3})
    assert 'error' not in r, r
    T = 'io.nats.jetstream.api.v1.stream_leader_stepdown_response'
    async def leader():
        for _ in range(50):
            info = await _req(nc, '$JS.API.STREAM.INFO.PREF')
            if (info.get('cluster') or {}).get('leader'): return info['cluster']['leader']
            await asyncio.sleep(0.2)
    was = await leader()
    to = sorted({'n0', 'n1', 'n2'} - {was})[0]
    for _ in range(20):                                  # (refused while the follower is not caught up yet)
        r = await _req(nc, '$JS.API.STREAM.LEADER.STEPDOWN.PREF', {'placement': {'preferred': to}})
        if r.get('success'): break
        await asyncio.sleep(0.5)
    assert r == {'type': T, 'success': True}, r
    async def moved(): return await leader() == to
    await _until(moved)
    assert await _req(nc, '$JS.API.STREAM.LEADER.STEPDOWN.PREF', {'placement': {'preferred': to}}) == \
        {'type': T, 'error': {'code': 400, 'err_code': 10005, 'description': f'preferred server "{to}" is already leader'}}
    assert await _req(nc, '$JS.API.STREAM.LEADER.STEPDOWN.PREF', {'placement': {'preferred': 'nx'}}) == \
        {'type': T, 'error': {'code': 400, 'err_code': 10005, 'description': 'preferred server "nx" not known'}}
    assert await _req(nc, '$JS.API.STREAM.LEADER.STEPDOWN.PREF', {'placement': {'tags': ['nope']}}) == \
        {'type': T, 'error': {'code': 400, 'err_code': 10005, 'description': 'no replacement peer connected'}}
    m = await nc.request('$JS.API.STREAM.LEADER.STEPDOWN.PREF', b'{"placement":', timeout=10)
    assert json.loads(m.data)['error']['err_code'] == 10025
    await nc.close()


@pytest.mark.skipif(not os.path.isdir('/proc/self/fd'), reason='counts open descriptors through /proc')
async def test_groups_leave_no_descriptors_open(cluster):
    """Replicated streams and consumers made and deleted again and again leave every server with the file descriptors it
    had (a Raft member once kept two for good: the pipe PySyncObj makes to wake a thread)."""
    def fds(): return [len(os.listdir(f'/proc/{p.proc.pid}/fd')) for p in cluster.procs]
    nc = await nats.connect(cluster.url(0)); js = nc.jetstream()
    async def make_and_delete(k):
        await js.add_stream(name=f'FD{k}', subjects=[f'fd.{k}'], num_replicas=3)
        await js.add_consumer(f'FD{k}', durable_name='d', ack_policy='explicit')        # a consumer's group of three too
        await js.delete_stream(f'FD{k}')
    await make_and_delete(0); await asyncio.sleep(1)
    before = fds()
    for k in range(1, 16): await make_and_delete(k)
    await asyncio.sleep(1)
    after = fds()
    assert all(a - b <= 4 for a, b in zip(after, before)), (before, after)     # (15 rounds of two groups: 60 more each, before)
    await nc.close()
