"""Subjects a cluster uses between its servers are out of every client's reach, on jsnb and on nats-server: a user
allowed to publish and subscribe to `>` but denied `$JS.API.STREAM.DELETE.>` tries every internal subject jsnb ever
used for requests between servers (the forward to a stream's leader, catch-up, stream list and usage gathering) and
gets no responders, as on nats-server, and the stream it may not delete is still there (issue 40, finding 1). The answers
servers send each other travel outside every client account too: no client subscribed to `$JSC.>` sees one."""
import asyncio, time
import pytest
import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from jsclusters import JSCluster, request, publish_acked
from jsnb.js.cluster_meta import peer_id

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']
USERS = ('authorization { users: [{user: g, password: g}, {user: p, password: p, permissions: '
         '{publish: {allow: ">", deny: "$JS.API.STREAM.DELETE.>"}, subscribe: ">"}}] }\nno_auth_user: g\n')


class _Cluster(JSCluster):
    "The test clusters, with a user `p` who may publish and subscribe anywhere except deleting streams."
    def config(self, i: int) -> str: return USERS + super().config(i)


def _internal_subjects(leader: str) -> list[str]:
    "What a client might try: every internal request subject jsnb used, aimed at the stream leader's peer id."
    pid = peer_id(leader)
    return [f'$JSC.FWD.{pid}.0.$JS.API.STREAM.DELETE.S', f'$JSC.FWD.{pid}.1.$JS.API.STREAM.DELETE.S',
            f'$JSC.SYNC.{pid}', f'$JSC.LIST.{pid}.1', f'$JSC.USAGE.{pid}.1', f'$JSC.R.{pid}']


async def _scenario(c: JSCluster) -> dict:
    nc = await nats.connect(c.url(0))
    try:
        deadline = time.time() + 60
        while True:
            try: r = await request(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s.>'], 'num_replicas': 3}, timeout=5)
            except (NatsTimeout, NoRespondersError): r = {'error': 'no answer'}
            if 'error' not in r or time.time() > deadline: break
            await asyncio.sleep(0.5)
        assert 'error' not in r, r
        await publish_acked(nc.jetstream(), 's.1', b'kept', time.time() + 30)
        leader = r['cluster']['leader']
        while not leader:
            leader = (await request(nc, '$JS.API.STREAM.INFO.S'))['cluster'].get('leader') or ''
    finally: await nc.close()
    out = {}
    for i in range(c.n):                                # from every server: the leader's and the others
        p = await nats.connect(c.url(i, 'p'))
        try:
            for subject in _internal_subjects(leader):
                try:
                    await p.request(subject, b'{}', timeout=2)
                    got = 'answered'
                except NoRespondersError: got = 'no responders'
                except NatsTimeout: got = 'timeout'
                out[(i, subject.replace(peer_id(leader), '<leader>'))] = got
        finally: await p.close()
    nc = await nats.connect(c.url(1))
    try: out['stream'] = (await request(nc, '$JS.API.STREAM.INFO.S'))['state']['messages']
    finally: await nc.close()
    return out


@pytest.mark.parametrize('kind', KINDS)
def test_no_client_reaches_an_internal_subject(kind):
    c = _Cluster(kind).start()
    try:
        c.wait_meta()
        got = asyncio.run(_scenario(c))
    finally: c.stop()
    assert got.pop('stream') == 1                   # the stream the user may not delete is there
    assert set(got.values()) == {'no responders'}, {k: v for k, v in got.items() if v != 'no responders'}


async def _watched_listing(c: JSCluster) -> list:
    "Streams of one replica (spread over the servers), listed and counted from every server while clients of every server watch `$JSC.>`."
    watchers, seen = [await nats.connect(c.url(i)) for i in range(c.n)], []
    async def saw(m): seen.append(m.subject)
    for w in watchers: await w.subscribe('$JSC.>', cb=saw); await w.flush()
    ncs = [await nats.connect(c.url(i)) for i in range(c.n)]
    try:
        for k in range(6):
            deadline = time.time() + 60
            while True:
                try: r = await request(ncs[0], f'$JS.API.STREAM.CREATE.L{k}', {'name': f'L{k}', 'subjects': [f'l{k}']}, timeout=5)
                except (NatsTimeout, NoRespondersError): r = {'error': 'no answer'}
                if 'error' not in r or time.time() > deadline: break
                await asyncio.sleep(0.5)
            assert 'error' not in r, r
        for nc in ncs:
            lst = await request(nc, '$JS.API.STREAM.LIST')
            assert lst['total'] == 6, lst
            assert (await request(nc, '$JS.API.INFO'))['streams'] == 6
        for w in watchers: await w.flush()
        await asyncio.sleep(0.5)
    finally:
        for nc in ncs + watchers: await nc.close()
    return seen


@pytest.mark.parametrize('kind', KINDS)
def test_no_client_sees_an_internal_answer(kind):
    """Listing streams and counting an account's usage gather answers from the servers that hold the streams; no client,
    on any server, subscribed to `$JSC.>` sees one of them go by."""
    c = JSCluster(kind).start()
    try:
        c.wait_meta()
        assert asyncio.run(_watched_listing(c)) == []
    finally: c.stop()
