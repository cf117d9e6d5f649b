"""A server removed from a JetStream cluster comes back, against nats-server and jsnb.

Three servers with a system account; an R3 stream OLD holds three messages. A server other than the meta leader is
removed with `$JS.API.SERVER.REMOVE` while it runs: its JetStream stops (`/jsz` says `disabled`) and OLD goes on with
the two others. Restarted with the same store, it runs JetStream again but is kept out of the meta group for a while:
the others count two members, a new R3 stream cannot be placed, and its clients' requests are answered (by the
others). Five minutes after its removal the meta leader lets it back in: every server counts three members, OLD grows
back onto it with its messages (it can lead OLD), and a new R3 stream is placed on the three servers.

The reference's hold (its Raft layer's `peerRemoveTimeout`) cannot be shortened, so both clusters run at once, each in
a thread of its own, and the test waits the five minutes once."""
import asyncio, json, time
from concurrent.futures import ThreadPoolExecutor
import pytest
import nats

from jsclusters import JSCluster, request, publish_acked

pytestmark = [pytest.mark.reference, pytest.mark.soak, pytest.mark.timeout(1200)]   # (on demand: the reference holds a removed server out for five minutes, a time it does not let be changed)

ALL = ['n0', 'n1', 'n2']
HOLD = 300           # seconds: the reference's `peerRemoveTimeout`, and jsnb's `PEER_REMOVE_HOLD`


def _members(c, i: int):
    "(cluster_size, the servers) of the meta group as server `i` reports it, itself included."
    mc = c.jsz(i).get('meta_cluster') or {}
    return mc.get('cluster_size', 0), sorted({f'n{i}'} | {r['name'] for r in mc.get('replicas') or ()})


async def _until(fn, timeout: float = 60):
    "Poll async `fn` until it returns something true; that value (or the last one)."
    deadline, v = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            if v := await fn(): return v
        except Exception as e: v = repr(e)
        await asyncio.sleep(0.5)
    return v


async def _retried(nc, subject: str, body) -> dict:
    "An API request asked again until it is answered without an error (the last answer otherwise)."
    async def ok():
        r = await request(nc, subject, body)
        return r if 'error' not in r else None
    return await _until(ok) or await request(nc, subject, body)


async def _scenario(kind: str) -> dict:
    out, c = {}, JSCluster(kind, system=True)
    try:
        c.start(); lead = c.wait_meta()
        gone = max(n for n in ALL if n != lead); k = int(gone[1])
        at = next(i for i in range(3) if i != k)             # the clients stay on a server that is not removed
        nc = await nats.connect(c.url(at)); js = nc.jetstream()
        sys = await nats.connect(c.url(at, 'sys'))
        await _retried(nc, '$JS.API.STREAM.CREATE.OLD', {'name': 'OLD', 'subjects': ['old'], 'num_replicas': 3})
        for i in range(3): await publish_acked(js, 'old', b'%d' % i, time.time() + 30, headers={'Nats-Msg-Id': f'm{i}'})

        r = await request(sys, '$JS.API.SERVER.REMOVE', {'peer': gone})
        removed_at = time.monotonic()
        async def disabled(): return c.jsz(k).get('disabled') is True
        out['removed'] = (r.get('success'), await _until(disabled))

        c.procs[k].stop(); c.start(k)                          # the same store, the same name
        g = await nats.connect(c.url(k))
        info = await _retried(g, '$JS.API.INFO', None)
        early = await request(nc, '$JS.API.STREAM.CREATE.EARLY', {'name': 'EARLY', 'subjects': ['early'], 'num_replicas': 3})
        others = (2, sorted(n for n in ALL if n != gone))
        out['held out'] = {'the others count two members': [_members(c, i) == others for i in range(3) if i != k],
                           'its clients served': (info.get('type'), info.get('streams')), 'a new R3 stream': early.get('error')}

        async def back(): return all(_members(c, i) == (3, ALL) for i in range(3))
        await _until(back, HOLD + 240)
        out['members'] = [_members(c, i) for i in range(3)]
        out['let in after the hold'] = time.monotonic() - removed_at >= HOLD - 10

        async def grown():
            i = await js.stream_info('OLD')
            names = sorted([i.cluster.leader] + [p.name for p in i.cluster.replicas or ()])
            return (names, i.state.messages) if names == ALL and all(p.current for p in i.cluster.replicas) else None
        out['OLD'] = await _until(grown, 60)
        async def led():
            if (await js.stream_info('OLD')).cluster.leader == gone: return True
            await nc.request('$JS.API.STREAM.LEADER.STEPDOWN.OLD', json.dumps({'placement': {'preferred': gone}}).encode(), timeout=5)
            return False
        await _until(led, 60)
        i = await js.stream_info('OLD')
        out['OLD led by it'] = (i.cluster.leader == gone, i.state.messages)
        out['OLD publish'] = (await publish_acked(js, 'old', b'3', time.time() + 30, headers={'Nats-Msg-Id': 'm3'})).seq

        new = await _retried(nc, '$JS.API.STREAM.CREATE.NEW', {'name': 'NEW', 'subjects': ['new'], 'num_replicas': 3})
        cl = new.get('cluster') or {}
        out['NEW'] = sorted([cl.get('leader')] + [p['name'] for p in cl.get('replicas') or ()])
        out['NEW publish'] = (await publish_acked(js, 'new', b'x', time.time() + 30)).seq
        await g.close(); await nc.close(); await sys.close()
    finally: c.stop()
    return out


def test_a_removed_server_comes_back():
    with ThreadPoolExecutor(2) as pool:
        runs = {kind: pool.submit(asyncio.run, _scenario(kind)) for kind in ('nats-server', 'jsnb')}
        got = {}
        for kind, f in runs.items():
            try: got[kind] = f.result()
            except Exception as e: raise AssertionError(f'on {kind}: {got}') from e
    no_peers = {'code': 400, 'err_code': 10005, 'description': 'no suitable peers for placement'}
    assert got['jsnb'] == got['nats-server'] == {
        'removed': (True, True),
        'held out': {'the others count two members': [True, True],
                     'its clients served': ('io.nats.jetstream.api.v1.account_info_response', 1), 'a new R3 stream': no_peers},
        'members': [(3, ALL)] * 3,
        'let in after the hold': True,
        'OLD': (ALL, 3),
        'OLD led by it': (True, 3),
        'OLD publish': 4,
        'NEW': ALL,
        'NEW publish': 1,
    }, got
