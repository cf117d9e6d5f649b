"""Snapshots and restores of replicated streams in a cluster, against nats-server and jsnb.

An R3 file stream with a durable consumer that acknowledged some of its messages is snapshotted through a server that
may not lead it (`$JS.API.STREAM.SNAPSHOT`, the client acknowledging every chunk, as `nats stream backup` does). The
stream is deleted and the snapshot restored into the same cluster through another server, as three replicas
(`$JS.API.STREAM.RESTORE`): every replica comes to hold it, and the consumer goes on where it was. The snapshot is also
restored on a single server of the same kind, as one replica. What the restored streams and consumers hold is compared
between the two servers, and must be what the cluster held."""
import asyncio, json, time
import pytest
import nats
import nats.js.errors

from jsdiff import blank
from jsclusters import JSCluster, request, publish_acked
import test_snapshot_reference as SR

pytestmark = [pytest.mark.reference, pytest.mark.timeout(300)]
N, ACKED = 40, 12


async def _retried(nc, subject, body, tries: int = 40, ok=lambda r: True) -> dict:
    """An API request asked again (0.5 s apart) while the cluster answers with an error (a group still electing), or
    with what `ok` does not take yet."""
    for _ in range(tries):
        r = await request(nc, subject, body)
        if 'error' not in r and ok(r): return r
        await asyncio.sleep(0.5)
    return r


async def _fetched(sub, n: int, tries: int = 20) -> list:
    """`n` messages of a pull consumer, asked again (0.5 s apart) while nobody answers yet: nats-server's consumer of a
    stream just restored in a cluster takes requests a moment after its info is answered (`503`)."""
    for k in range(tries):
        try: return await sub.fetch(n, timeout=10)
        except nats.js.errors.ServiceUnavailableError:
            if k == tries - 1: raise
            await asyncio.sleep(0.5)


def _state(info: dict) -> dict:
    st = info['state']
    return {k: st.get(k) for k in ('messages', 'bytes', 'first_seq', 'last_seq', 'num_subjects', 'num_deleted')}


def _consumer(info: dict) -> dict:
    return dict(delivered=info['delivered']['stream_seq'], ack_floor=info['ack_floor']['stream_seq'],
                num_pending=info['num_pending'], num_ack_pending=info['num_ack_pending'])


async def _scenario(kind: str, start_server) -> dict:
    out = {}
    c = JSCluster(kind)
    try:
        c.start(); c.wait_meta()
        nc = await nats.connect(c.url(1))
        r = await _retried(nc, '$JS.API.STREAM.CREATE.BK', {'name': 'BK', 'subjects': ['bk.>'], 'num_replicas': 3, 'storage': 'file'})
        assert 'error' not in r, r
        js = nc.jetstream()
        for i in range(N): await publish_acked(js, f'bk.{i % 4}', b'm%d' % i, time.time() + 30)
        r = await _retried(nc, '$JS.API.CONSUMER.DURABLE.CREATE.BK.C',
                           {'stream_name': 'BK', 'config': {'durable_name': 'C', 'ack_policy': 'explicit'}})
        assert 'error' not in r, r
        sub = await js.pull_subscribe_bind('C', 'BK')
        for m in await sub.fetch(ACKED, timeout=10): await m.ack_sync()
        held = await _retried(nc, '$JS.API.STREAM.INFO.BK', None)
        out['cluster'] = _state(held)
        reply, chunks = await SR.backup(nc, 'BK')
        out['snapshot'] = blank({k: v for k, v in reply.items() if k != 'state'})
        assert 'error' not in reply, reply
        out['snapshot state'] = _state(reply)
        assert 'error' not in await request(nc, '$JS.API.STREAM.DELETE.BK')
        await nc.close()
        nc = await nats.connect(c.url(2))                      # restored through another server
        r, fin = await SR.restore(nc, reply['config'], reply['state'], chunks.data)
        assert fin is not None and 'error' not in fin, (r, fin)
        out['restore answer'] = (r['type'], sorted(r), fin['type'], fin['config']['num_replicas'], _state(fin))
        for _ in range(60):                                    # every replica current
            info = await request(nc, '$JS.API.STREAM.INFO.BK')
            reps = (info.get('cluster') or {}).get('replicas') or []
            if len(reps) == 2 and all(p.get('current') for p in reps): break
            await asyncio.sleep(0.5)
        out['restored in the cluster'] = (_state(info), len(reps), all(p.get('current') for p in reps))
        out['its consumer'] = _consumer(await _retried(nc, '$JS.API.CONSUMER.INFO.BK.C', None,     # (the reference's restored
                                                       ok=lambda r: r['num_pending'] + r['num_ack_pending'] > 0))   # consumer counts its state a moment later)
        sub = await nc.jetstream().pull_subscribe_bind('C', 'BK')
        out['the rest'] = [m.data for m in await _fetched(sub, N - ACKED)]
        await nc.close()
    finally: c.stop()
    if kind == 'jsnb':                                         # (jsnb reads its own stores: every replica holds the same)
        stores = c.stores('BK')
        assert len(stores) == 3 and stores[0] == stores[1] == stores[2] and len(stores[0]) == N, [len(x) for x in stores]
    s = start_server(kind, '-js')
    nc = await nats.connect(s.url)
    try:
        r, fin = await SR.restore(nc, dict(reply['config'], num_replicas=1), reply['state'], chunks.data)
        assert fin is not None and 'error' not in fin, (r, fin)
        out['restored'] = _state(await SR.api(nc, '$JS.API.STREAM.INFO.BK'))
        out['consumer'] = _consumer(await SR.api(nc, '$JS.API.CONSUMER.INFO.BK.C'))
    finally: await nc.close()
    return out


async def test_snapshot_and_restore_of_a_replicated_stream(start_server):
    got = {}
    for kind in ('nats-server', 'jsnb'):
        try: got[kind] = await _scenario(kind, start_server)
        except Exception as e: raise AssertionError(f'on {kind}') from e
    assert got['jsnb'] == got['nats-server'], got
    assert got['jsnb']['restored'] == got['jsnb']['cluster'] == got['jsnb']['snapshot state']
    assert got['jsnb']['consumer'] == got['jsnb']['its consumer'] == dict(delivered=ACKED, ack_floor=ACKED, num_pending=N - ACKED, num_ack_pending=0)
    assert got['jsnb']['restored in the cluster'] == (got['jsnb']['cluster'], 2, True)
    assert got['jsnb']['the rest'] == [b'm%d' % i for i in range(ACKED, N)]
