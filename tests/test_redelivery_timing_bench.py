"""How exactly each server keeps a consumer's `backoff` schedule: the time between two deliveries of a message, as a
client on the same machine receives them, minus the backoff step that separates them. Each is late only by what the machine
lets each process run (on a machine with idle cores, both within a few milliseconds); an interval can also look
short when the client itself received the delivery before it late.

nats.js's `jetstream - backoff` allows 50 ms either way between the deliveries it sees; on a machine with load 12-15
on 2 cores it failed on jsnb now and then (60-205 ms late) while the reference passed. The timer itself is not the
cause: jsnb's timer fires at its due time and its callback takes well under a millisecond, while an idle jsnb's event
loop there is itself 15-75 ms late (the process does not get the CPU), which is what this benchmark shows next to the
reference's figures. Run on demand: pytest -m bench -n 0 -s tests/test_redelivery_timing_bench.py"""
import asyncio, json, statistics, time
import pytest
import nats

pytestmark = pytest.mark.bench
MS = 1_000_000
STEPS = [200, 400, 600]           # ms
N = 10                            # messages, each delivered len(STEPS) + 1 times


async def _lateness(start_server, kind) -> list[float]:
    s = start_server(kind, '-js')
    nc = await asyncio.wait_for(nats.connect(s.url), 15)
    try:
        r = await nc.request('$JS.API.STREAM.CREATE.B', json.dumps({'name': 'B', 'subjects': ['b'], 'storage': 'memory'}).encode(), timeout=5)
        assert 'error' not in json.loads(r.data)
        r = await nc.request('$JS.API.CONSUMER.CREATE.B.C', json.dumps({'stream_name': 'B', 'config': {
            'durable_name': 'C', 'ack_policy': 'explicit', 'max_deliver': len(STEPS) + 1, 'backoff': [m * MS for m in STEPS]}}).encode(), timeout=5)
        assert 'error' not in json.loads(r.data)
        stamps: dict[int, list[float]] = {}
        done = asyncio.Event()
        async def cb(m):
            t = m.reply.split('.')                       # $JS.ACK.B.C.<deliveries>.<stream seq>...
            stamps.setdefault(int(t[5]), []).append(time.monotonic())
            if sum(map(len, stamps.values())) == N * (len(STEPS) + 1): done.set()
        await nc.subscribe('in', cb=cb)
        for i in range(N): await nc.request('b', b'%d' % i, timeout=5)
        await nc.publish('$JS.API.CONSUMER.MSG.NEXT.B.C', json.dumps({'batch': 1000, 'expires': 60 * 1000 * MS}).encode(), reply='in')
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await nc.close()
    return [(b - a) * 1000 - step for ts in stamps.values() for a, b, step in zip(ts, ts[1:], STEPS)]


async def test_backoff_precision(start_server):
    out = {kind: await _lateness(start_server, kind) for kind in ('nats-server', 'jsnb')}
    for kind, late in out.items():
        q = statistics.quantiles(late, n=10)
        print(f'{kind:12} late by (ms): min {min(late):.1f}  median {statistics.median(late):.1f}  p90 {q[-1]:.1f}  max {max(late):.1f}')
    assert statistics.median(out['jsnb']) < statistics.median(out['nats-server']) + 20, out
