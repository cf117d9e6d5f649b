"""A JetStream request from a client whose server holds no copy of the stream, on jsnb and on nats-server: four
servers, an R3 stream placed on three of them by tag, and the client on the fourth. Every link between two servers
goes through a proxy on loopback, and the link between the client's server and the stream's leader is slowed, so
that the leader hears of the client's new reply subject late. A request that reaches the leader by another way
(through a follower) must still be answered: the client asks once, on a new connection, as a command-line tool does;
its pull request gets its message, its acknowledgement is confirmed, and an ephemeral consumer is made."""
import asyncio, time
import pytest
import nats
from jsclusters import JSCluster, request as _req

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']
EPHEMERAL = dict(stream_name='S', config=dict(ack_policy='explicit', inactive_threshold=30 * 10**9))
SLOW = 0.4      # seconds each chunk waits on the slowed link: far longer than a request takes the other way


async def _leader(nc, stream: str, not_this: str = '', timeout: float = 60) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            leader = ((await _req(nc, f'$JS.API.STREAM.INFO.{stream}', timeout=5)).get('cluster') or {}).get('leader') or ''
            if leader and leader != not_this: return leader
        except nats.errors.TimeoutError: pass
        await asyncio.sleep(0.2)
    raise TimeoutError(f'no leader for {stream} other than {not_this!r}')


def _slow(c: JSCluster, i: int, j: int, delay: float):
    "Slow the link between servers i and j both ways (each dials the other through a proxy of its own; either route may be the one kept)."
    c.proxies[i, j].delay = c.proxies[j, i].delay = delay


async def _fresh_ask(url: str, subject: str, body=None) -> dict:
    "A request on a connection made for it (its reply subject is new to every server), asked once."
    nc = await nats.connect(url)
    try: return await _req(nc, subject, body, timeout=5)
    finally: await nc.close()


async def _fresh_fetch(url: str) -> bytes:
    "The next message of the pull consumer D, fetched once on a connection made for it, acknowledged and confirmed."
    nc = await nats.connect(url)
    try:
        psub = await nc.jetstream().pull_subscribe_bind('D', 'S')
        msg, = await psub.fetch(1, timeout=5)
        await msg.ack_sync(timeout=5)
        return msg.data
    finally: await nc.close()


@pytest.mark.parametrize('kind', KINDS)
async def test_request_from_a_server_without_the_stream_is_answered(kind):
    tags = {i: ['st'] for i in (1, 2, 3)}
    c = JSCluster(kind, n=4, partitions=True, tags=tags).start()
    try:
        await asyncio.to_thread(c.wait_meta)
        nc = await nats.connect(c.url(0))
        try:
            created = await _req(nc, '$JS.API.STREAM.CREATE.S', dict(name='S', subjects=['s.>'], num_replicas=3, storage='file',
                                                                   placement=dict(tags=['st'])), timeout=30)
            assert 'error' not in created, created
            js = nc.jetstream()
            await js.add_consumer('S', durable_name='D', ack_policy='explicit')
            for k in range(2): await js.publish('s.x', b'm%d' % k)
            leader, answered = await _leader(nc, 'S'), []
            # n0 sends a request for S to one server of the stream, always the same one (nats-server: to all of them);
            # after a stepdown the leader is another server, so one of the two rounds goes through a follower
            for k in range(2):
                li = int(leader[1:])
                _slow(c, 0, li, SLOW)
                try:
                    for subject in ('$JS.API.STREAM.INFO.S', '$JS.API.CONSUMER.INFO.S.D'):
                        r = await _fresh_ask(c.url(0), subject)
                        assert 'error' not in r, (k, subject, r)
                        answered.append((k, subject))
                    assert (await _fresh_ask(c.url(0), '$JS.API.STREAM.INFO.S'))['cluster']['leader'] == leader
                    assert await _fresh_fetch(c.url(0)) == b'm%d' % k           # a pull request and its acknowledgement
                    r = await _fresh_ask(c.url(0), '$JS.API.CONSUMER.CREATE.S', EPHEMERAL)   # one replica: on any server
                    assert 'error' not in r and r['config']['num_replicas'] in (0, 1), r
                finally: _slow(c, 0, li, 0.0)
                if k == 0:
                    r = await _req(nc, '$JS.API.STREAM.LEADER.STEPDOWN.S', timeout=10)
                    assert r.get('success'), r
                    leader = await _leader(nc, 'S', not_this=leader)
            assert len(answered) == 4
        finally: await nc.close()
    finally: c.stop()
