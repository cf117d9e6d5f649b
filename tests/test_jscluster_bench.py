"""Speed of replicated streams: three servers of jsnb and three of the reference on this machine, the same scenarios of
`jsnb bench` on an R3 stream (file storage), printed side by side with the ratio (run on demand:
`pytest -m bench -n 0 -s tests/test_jscluster_bench.py`). Asynchronous publishing with a window of 1000 acks
(target: jsnb at least 0.25 of the reference), one-at-a-time publishing (rate and p50/p99 latency), and Direct Get
one request at a time (every server holds a replica and answers; the client is on the second server). Best of three runs of each, as `jsnb bench --compare` takes them.
`JSNB_R3_BENCH_MSGS` changes the size."""
import os
import pytest
from jsclusters import JSCluster
from jsnb.bench.scenarios import BenchOptions, run_scenario

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]
MSGS = int(os.environ.get('JSNB_R3_BENCH_MSGS', 50_000))
RUNS = 3
TARGET = 0.25


async def _measure(kind: str) -> dict:
    c = JSCluster(kind)
    out = {}
    try:
        c.start(); c.wait_meta()
        base = dict(storage='file', replicas=3, progress=False)
        for name, o in [('js-pub-async', BenchOptions(msgs=MSGS, window=1000, **base)),
                        ('js-pub-sync', BenchOptions(msgs=MSGS, sync_msgs=max(200, MSGS // 50), **base)),
                        ('direct-get', BenchOptions(msgs=MSGS, sync_msgs=max(500, MSGS // 20), **base))]:
            runs = [await run_scenario(name, c.url(1), o) for _ in range(RUNS)]
            out[name] = max(runs, key=lambda r: r.msgs_per_sec)
    finally: c.stop()
    return out


async def test_replicated_stream_speed():
    got = {kind: await _measure(kind) for kind in ('nats-server', 'jsnb')}
    print(f'\n{"R3 file, 128 B":<16} {"nats-server":>14} {"jsnb":>12} {"ratio":>7}   p50/p99 µs (ref | jsnb)')
    for name in got['jsnb']:
        ref, js = got['nats-server'][name], got['jsnb'][name]
        lat = ''
        if js.p50_us is not None: lat = f'{ref.p50_us:.0f}/{ref.p99_us:.0f} | {js.p50_us:.0f}/{js.p99_us:.0f}'
        print(f'{name:<16} {ref.msgs_per_sec:>12,.0f}/s {js.msgs_per_sec:>10,.0f}/s {js.msgs_per_sec / ref.msgs_per_sec:>7.2f}   {lat}')
    ratio = got['jsnb']['js-pub-async'].msgs_per_sec / got['nats-server']['js-pub-async'].msgs_per_sec
    assert ratio >= TARGET, f'R3 asynchronous publishing at {ratio:.2f} of the reference (target {TARGET})'
