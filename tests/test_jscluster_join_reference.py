"""A server that joins a cluster whose meta group has formed, against nats-server and jsnb.

Three servers route to each other and form their meta group; a fourth, configured with routes to them (they do not
name it), starts later. It becomes a member of the meta group (`/jsz` reports four members everywhere), it learns the
streams that exist, and a new stream can be placed on it (by its tag) and used through the others."""
import asyncio, json, time
import pytest
import nats

from jsclusters import JSCluster, request, publish_acked, USER, PASSWORD

pytestmark = [pytest.mark.reference, pytest.mark.timeout(300)]


class _Growing(JSCluster):
    "Four servers: the first three route to each other; the fourth, tagged `late`, routes to them."
    def __init__(self, kind: str): super().__init__(kind, n=4, tags={3: ['late']})

    def config(self, i: int) -> str:
        s = super().config(i)
        if i == 3: return s
        late = f'"nats-route://{USER}:{PASSWORD}@127.0.0.1:{self.route[3]}"'
        return s.replace(', ' + late, '')


def _members(c, i: int) -> int:
    return c.jsz(i).get('meta_cluster', {}).get('cluster_size', 0)


async def _retried(nc, subject, body, tries: int = 40) -> dict:
    for _ in range(tries):
        r = await request(nc, subject, body)
        if 'error' not in r: return r
        await asyncio.sleep(0.5)
    return r


async def _scenario(kind: str) -> dict:
    out = {}
    c = _Growing(kind)
    try:
        for i in range(3): c.start(i)
        c.wait_meta()
        nc = await nats.connect(c.url(0))
        assert 'error' not in await _retried(nc, '$JS.API.STREAM.CREATE.OLD', {'name': 'OLD', 'subjects': ['old.>'], 'num_replicas': 3})
        c.start(3)
        deadline = time.time() + 60
        while time.time() < deadline and not all(_members(c, i) == 4 for i in range(4)): await asyncio.sleep(0.2)
        out['members'] = [_members(c, i) for i in range(4)]
        new = await nats.connect(c.url(3))
        out['streams known to the new server'] = (await _retried(new, '$JS.API.STREAM.NAMES', None))['streams']
        r = await _retried(nc, '$JS.API.STREAM.CREATE.NEW', {'name': 'NEW', 'subjects': ['new.>'], 'placement': {'tags': ['late']}})
        out['placed on'] = (r.get('cluster') or {}).get('leader'), r.get('error')
        js = nc.jetstream()
        for i in range(5): await publish_acked(js, 'new.x', b'%d' % i, time.time() + 30)
        info = await _retried(nc, '$JS.API.STREAM.INFO.NEW', None)
        out['new stream'] = info['state']['messages'], info['cluster']['leader']
        await nc.close(); await new.close()
    finally: c.stop()
    return out


async def test_a_server_joins_a_formed_cluster():
    got = {}
    for kind in ('nats-server', 'jsnb'):
        try: got[kind] = await _scenario(kind)
        except Exception as e: raise AssertionError(f'on {kind}: {got}') from e
    assert got['jsnb'] == got['nats-server'] == {'members': [4, 4, 4, 4], 'streams known to the new server': ['OLD'],
                                                  'placed on': ('n3', None), 'new stream': (5, 'n3')}, got
