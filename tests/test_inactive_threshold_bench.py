"""How soon each server deletes an ephemeral consumer whose client left, when its `inactive_threshold` is short (50 ms):
the reference's timer for it fires that long after the consumer went idle. libnats's `JetStreamSubscribeSync` looks for
the consumer 150 ms after closing its connection and expects it gone; jsnb, which looked at idle consumers once a
second, still had it (and the first check came up to a second after the consumer was made). A wall-clock measure, so a benchmark: pytest -m bench -n 0 -s tests/test_inactive_threshold_bench.py"""
import asyncio, json, time
import pytest
import nats

pytestmark = pytest.mark.bench
MS = 1_000_000


async def _gone_after(start_server, kind) -> float:
    s = start_server(kind, '-js')
    nc = await asyncio.wait_for(nats.connect(s.url), 15)
    r = await nc.request('$JS.API.STREAM.CREATE.T', json.dumps({'name': 'T', 'subjects': ['t'], 'storage': 'memory'}).encode(), timeout=5)
    assert 'error' not in json.loads(r.data)
    other = await asyncio.wait_for(nats.connect(s.url), 15)
    await other.subscribe('push.t')
    await other.flush()
    r = await nc.request('$JS.API.CONSUMER.CREATE.T', json.dumps({'stream_name': 'T', 'config': {
        'deliver_subject': 'push.t', 'ack_policy': 'none', 'inactive_threshold': 50 * MS}}).encode(), timeout=5)
    name = json.loads(r.data)['name']
    await asyncio.sleep(0.2)                                   # bound to its subscriber: kept
    r = await nc.request(f'$JS.API.CONSUMER.INFO.T.{name}', b'', timeout=5)
    assert 'error' not in json.loads(r.data), (kind, r.data)
    await other.close()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        r = await nc.request(f'$JS.API.CONSUMER.INFO.T.{name}', b'', timeout=5)
        if json.loads(r.data).get('error', {}).get('err_code') == 10014: break
        await asyncio.sleep(0.01)
    took = time.monotonic() - t0
    await nc.close()
    return took


async def test_short_inactive_threshold(start_server):
    out = {kind: await _gone_after(start_server, kind) for kind in ('nats-server', 'jsnb')}
    print({k: f'{v * 1000:.0f} ms' for k, v in out.items()})
    assert out['nats-server'] < 1 and out['jsnb'] < 0.5, out
