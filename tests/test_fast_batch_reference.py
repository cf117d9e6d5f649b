"""Fast-ingest batches (`allow_batched`), frame by frame, against jsnb and the reference."""
import asyncio, json
import pytest
import nats

pytestmark = pytest.mark.reference


async def run(s, replicas: int = 1):
    "The frames of each scenario; `replicas`: of stream F (on a cluster, `s.url` is one of its servers)."
    nc = await nats.connect(s.url); js = nc.jetstream(); out = {}
    await js.add_stream(name='OFF', subjects=['off.>'])
    r = await nc.request('$JS.API.STREAM.CREATE.F', json.dumps({'name': 'F', 'subjects': ['f.>'], 'allow_batched': True,
                                                                'num_replicas': replicas}).encode(), timeout=10)
    assert 'error' not in json.loads(r.data), r.data
    frames = []
    sub = await nc.subscribe('fi.>', cb=lambda m: frames.append((m.subject.split('.')[1], json.loads(m.data)))) if False else None
    got = []
    async def cb(m): got.append((m.subject.split('.', 2)[1], json.loads(m.data) if m.data else None))
    await nc.subscribe('fi.>', cb=cb)
    await nc.flush()

    async def send(bid, seq, op, flow=10, gap='fail', subject='f.a', data=b'x'):
        await nc.publish(subject, data, reply=f'fi.{bid}.{flow}.{gap}.{seq}.{op}.$FI')

    async def settle(bid, n=1):
        for _ in range(50):
            await nc.flush(); await asyncio.sleep(0.05)
            if sum(1 for b, _ in got if b == bid) >= n and any(b == bid and f and 'batch' in f for b, f in got): break
        await asyncio.sleep(0.2)
        return [f for b, f in got if b == bid]

    await nc.publish('off.a', b'x', reply='fi.off.10.fail.1.0.$FI'); await asyncio.sleep(0.3)
    out['disabled'] = [f for b, f in got if b == 'off']
    for i in range(1, 26): await send('basic', i, 0 if i == 1 else (2 if i == 25 else 1))
    out['basic'] = await settle('basic')
    for i in range(1, 6): await send('eob', i, 0 if i == 1 else 1)
    await send('eob', 6, 3, data=b'')
    out['eob'] = await settle('eob')
    for i in (1, 2, 4): await send('gapok', i, 0 if i == 1 else 1, gap='ok')
    await send('gapok', 5, 2, gap='ok')
    out['gap ok'] = await settle('gapok')
    for i in (1, 2, 4): await send('gapfail', i, 0 if i == 1 else 1)
    out['gap fail'] = await settle('gapfail')
    for i in (1, 2, 3): await send('ping', i, 0 if i == 1 else 1)
    await send('ping', 3, 4)
    await send('ping', 4, 2)
    out['ping'] = await settle('ping')
    await nc.publish('f.a', b'x', reply='fi.bad.$FI'); await asyncio.sleep(0.3)
    out['bad pattern'] = [f for b, f in got if b == 'bad.$FI' or b == 'bad']
    await send('unknown', 2, 1); await asyncio.sleep(0.3)
    out['unknown'] = [f for b, f in got if b == 'unknown']
    await send('x' * 65, 1, 0); await asyncio.sleep(0.3)
    out['long id'] = [f for b, f in got if b == 'x' * 65]
    out['state'] = (await js.stream_info('F')).state.messages
    await nc.close()
    return out


async def test_fast_ingest_frames(start_server):
    res = {k: await run(start_server(k, '-js')) for k in ('nats-server', 'jsnb')}
    diffs = [f'\n{k}:\n jsnb: {res["jsnb"][k]}\n  ref: {res["nats-server"][k]}' for k in res['nats-server'] if res['jsnb'].get(k) != res['nats-server'][k]]
    assert not diffs, ''.join(diffs)


async def concurrent(s):
    "Two fast publishers on one stream: the second starts at an interval of 1, and both adapt."
    nc = await nats.connect(s.url); got = []
    await nc.request('$JS.API.STREAM.CREATE.F', json.dumps({'name': 'F', 'subjects': ['f.>'], 'allow_batched': True}).encode(), timeout=5)
    async def cb(m): got.append((m.subject.split('.')[1], json.loads(m.data)))
    await nc.subscribe('fc.>', cb=cb); await nc.flush()
    for i in range(1, 41):
        for bid in ('A', 'B') if i > 5 else ('A',):
            n = i if bid == 'A' else i - 5
            op = 0 if n == 1 else (2 if (bid == 'A' and i == 40) or (bid == 'B' and i == 40) else 1)
            await nc.publish('f.x', b'x', reply=f'fc.{bid}.100.fail.{n}.{op}.$FI')
        await nc.flush()
    for _ in range(40):
        await asyncio.sleep(0.05)
        if sum(1 for _, f in got if 'batch' in f) == 2: break
    await nc.close()
    return {bid: [f for b, f in got if b == bid] for bid in ('A', 'B')}


async def test_concurrent_fast_publishers(start_server):
    res = {k: await concurrent(start_server(k, '-js')) for k in ('nats-server', 'jsnb')}
    assert res['jsnb'] == res['nats-server'], res


async def test_fast_publisher_against_both(start_server):
    "jsnb's fast publisher drives both servers to the same result."
    from jsnb.clients.publish import FastBatchPublisher, BatchError
    seen = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); js = nc.jetstream()
        await js.add_stream(name='ING', subjects=['ing.>'], allow_batched=True)
        pub = FastBatchPublisher(nc, batch_id='b1', flow=50)
        for i in range(3000): await pub.add('ing.x', b'%d' % i)
        ack = await pub.commit()
        last = await js.get_msg('ING', 3000)
        await js.add_stream(name='NOPE', subjects=['nope.>'])
        try: await FastBatchPublisher(nc).add('nope.x', b'1')
        except BatchError as e: err = e.err_code
        seen[kind] = (ack, (await js.stream_info('ING')).state.messages, last.data, pub.gaps, pub.errors, err)
        await nc.close()
    assert seen['jsnb'] == seen['nats-server'], seen


@pytest.mark.bench
async def test_bench_fast_ingest_vs_async_publish(start_server):
    "Throughput of fast-ingest against plain async publishing, on both servers (run with -m bench)."
    import time
    from jsnb.clients.publish import FastBatchPublisher
    n, rates = 20_000, {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); js = nc.jetstream()
        await js.add_stream(name='B', subjects=['b.>'], allow_batched=True, storage='memory')
        t = time.perf_counter()
        futs = [await js.publish_async('b.a', b'x' * 128) for _ in range(n)]
        await asyncio.gather(*futs)
        rates[kind, 'async publish'] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        pub = FastBatchPublisher(nc, flow=500)
        for _ in range(n): await pub.add('b.b', b'x' * 128)
        await pub.commit()
        rates[kind, 'fast ingest'] = n / (time.perf_counter() - t)
        await nc.close()
    for mode in ('async publish', 'fast ingest'):
        print(f'{mode:14} reference {rates["nats-server", mode]:9.0f}/s  jsnb {rates["jsnb", mode]:9.0f}/s  '
              f'ratio {rates["jsnb", mode] / rates["nats-server", mode]:.2f}')
    for kind in ('nats-server', 'jsnb'):
        print(f'{kind}: fast ingest / async publish = {rates[kind, "fast ingest"] / rates[kind, "async publish"]:.2f}')
