"""`/jsz` details in a 3-server cluster, jsnb against nats-server 2.15.1: each server lists the replicas it holds (an R3
stream on every server, an R1 stream on one), with the `cluster` block as it sees it (the leader, the other replicas),
its consumers, `stream-leader-only` on the stream's leader only, `leader-only` answered by the meta leader alone, and
the system account's `$SYS.REQ.SERVER.PING.JSZ` with the same detail options answered by every server; and `/healthz`
asked for streams and consumers each server holds or not."""
import asyncio, json, time
import pytest
import nats
from jsclusters import JSCluster, request
from test_healthz_reference import get

pytestmark = pytest.mark.reference

                                                           # (consumer Raft groups: jsnb's consumers ride their stream's)


async def _setup(c: JSCluster):
    nc = await nats.connect(c.url(0))
    js = nc.jetstream()
    for _ in range(40):
        r = await request(nc, '$JS.API.STREAM.CREATE.J', {'name': 'J', 'subjects': ['j.>'], 'num_replicas': 3})
        if 'error' not in r: break
        await asyncio.sleep(0.5)
    assert 'error' not in r, r
    assert 'error' not in await request(nc, '$JS.API.STREAM.CREATE.ONE', {'name': 'ONE', 'subjects': ['one.>']})
    for i in range(5): await js.publish('j.x', b'%d' % i)
    r = await request(nc, '$JS.API.CONSUMER.DURABLE.CREATE.J.D',
                      {'stream_name': 'J', 'config': {'durable_name': 'D', 'ack_policy': 'explicit', 'num_replicas': 3}})
    assert 'error' not in r, r
    await nc.close()


def _streams(doc: dict) -> dict:
    return {s['name']: s for a in doc.get('account_details') or () for s in a.get('stream_detail') or ()}


async def _sys_jsz(c: JSCluster, body: dict) -> list[dict]:
    nc = await nats.connect(c.url(0, 'sys'))
    inbox, got = nc.new_inbox(), []
    sub = await nc.subscribe(inbox)
    await nc.publish('$SYS.REQ.SERVER.PING.JSZ', json.dumps(body).encode(), reply=inbox)
    try:
        while len(got) < 3: got.append(json.loads((await sub.next_msg(5)).data))
    finally: await nc.close()
    return got


HEALTHZ = ['', '?js-meta-only=true', '?account=%24G&stream=J&consumer=D', '?account=%24G&stream=ONE', '?account=nope&details=true',
           '?account=%24G&stream=J&consumer=X&details=true', '?account=%24G&stream=NONE']   # (`/healthz` on a cluster that is current)


def _view(kind: str) -> dict:
    "What the cluster's servers report, reduced to what both servers must agree on."
    c = JSCluster(kind, system=True)
    try:
        c.start(); c.wait_meta()
        asyncio.run(_setup(c))
        deadline = time.time() + 30                     # every replica has the messages and the consumer, and knows the leaders
        while time.time() < deadline:
            docs = [get(c.http[i], '/jsz?consumers=true&config=true&raft=true')[1] for i in range(3)]
            js = [_streams(d).get('J') for d in docs]
            if all(j and j['state']['messages'] == 5 and j.get('consumer_detail') and j['cluster'].get('leader')
                   and j['consumer_detail'][0]['cluster'].get('leader') for j in js): break
            time.sleep(0.2)
        out = dict(leader_only=sorted(get(c.http[i], '/jsz?leader-only=true')[0] for i in range(3)),
                   stream_leader_only=sorted(n for i in range(3) for n in _streams(get(c.http[i], '/jsz?stream-leader-only=true&streams=true')[1])),
                   holds=sorted(sorted(_streams(d)) for d in docs), shapes=set(), states=set())
        bodies = [get(c.http[i], '/jsz?leader-only=true')[1] for i in range(3)]
        out['not_leader'] = sorted(b for b in bodies if isinstance(b, str))
        lead = next(j['cluster']['leader'] for j in js)
        for i, j in enumerate(js):
            cl = j['cluster']
            rep = [tuple(k for k in r if k not in ('lag', 'offline')) for r in cl['replicas']]
            assert {r['name'] for r in cl['replicas']} == {f'n{k}' for k in range(3)} - {f'n{i}'}
            assert cl['leader'] == lead and j['stream_raft_group'] == cl['raft_group']
            assert [r['current'] for r in cl['replicas'] if r['name'] == lead] in ([True], [])
            con = j['consumer_detail'][0]
            out['shapes'].add((f'n{i}' == lead, tuple(k for k in j if k != 'consumer_raft_groups'),
                               tuple(cl), tuple(rep),
                               tuple(k for k in con), tuple(k for k in con['cluster'] if k != 'leader_since')))
            out['states'].add((j['state']['messages'], j['state']['consumer_count'], con['name'], con['config']['durable_name']))
        while time.time() < deadline and any(get(c.http[i], '/healthz')[0] != 200 for i in range(3)): time.sleep(0.2)
        out['healthz'] = sorted(tuple((q, get(c.http[i], '/healthz' + q)) for q in HEALTHZ) for i in range(3))
        got = asyncio.run(_sys_jsz(c, {'streams': True, 'consumer': True}))
        out['sys'] = sorted(sorted((n, s['state']['messages'], len(s.get('consumer_detail') or ())) for n, s in _streams(g['data']).items())
                            for g in got)
        return out
    finally: c.stop()


def test_jsz_details_in_a_cluster_match_reference():
    ref, ours = _view('nats-server'), _view('jsnb')
    assert ref['leader_only'] == [200, 400, 400] and ref['stream_leader_only'] == ['J', 'ONE']
    assert ours == ref
