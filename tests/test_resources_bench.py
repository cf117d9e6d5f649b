"""Resources of a KV hot key, jsnb beside the reference (on demand: `pytest -m bench -n 0 -s tests/test_resources_bench.py`).

A bucket with history 1 (a stream with `max_msgs_per_subject=1`) holds one stable key and one
key overwritten N times (`JSNB_BENCH_OVERWRITES`, default 1,000,000). For each server the
benchmark prints the server's resident memory as the overwrites go on, the bytes its store
keeps on disk for the few bytes of live data, and how long a restart takes until the hot key
can be read again. It checks the values survive, that jsnb's disk stays within twice the live
data plus one block, and that its memory does not grow with the number of overwrites."""
import asyncio, json, os, pathlib, time
import pytest

from conftest import ServerProc
from jsnb.bench.compare import cpu_seconds

pytestmark = [pytest.mark.bench, pytest.mark.timeout(7200)]

N = int(os.environ.get('JSNB_BENCH_OVERWRITES', 1_000_000))
WINDOW = 2000                     # acknowledgements outstanding
BLOCK = 8 << 20                   # jsnb's file store block size


def rss_mb(pid: int) -> float:
    for line in open(f'/proc/{pid}/status'):
        if line.startswith('VmRSS:'): return int(line.split()[1]) / 1024
    return float('nan')


def settle(pid: int, timeout: float = 60) -> float:
    "The server's RSS once it stops changing (jsnb compiles its kernels in the background after start)."
    last, t0 = rss_mb(pid), time.time()
    while time.time() - t0 < timeout:
        time.sleep(1.0)
        now = rss_mb(pid)
        if abs(now - last) < 1: return now
        last = now
    return last


def disk_mb(path: pathlib.Path) -> float:
    return sum(p.stat().st_size for p in path.rglob('*') if p.is_file()) / 1e6


async def overwrite(url: str, n: int, pid: int) -> dict:
    "Create the bucket, put the stable key, overwrite the hot key `n` times; RSS at a few points."
    import nats
    from nats.js.api import KeyValueConfig, StorageType
    nc = await nats.connect(url, pending_size=1 << 26)
    js = nc.jetstream()
    kv = await js.create_key_value(KeyValueConfig(bucket='HOT', history=1, storage=StorageType.FILE))
    await kv.put('stable', b'the stable value')
    rss = {0: await asyncio.to_thread(settle, pid)}
    acked, errors, done, target = 0, [], asyncio.Event(), n
    async def on_ack(msg):
        nonlocal acked
        acked += 1
        if b'"error"' in msg.data: errors.append(msg.data)
        if acked >= target: done.set()
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=on_ack)
    marks, sent, t0 = {n // 4, n // 2, n}, 0, time.perf_counter()
    while sent < n:
        while sent - acked >= WINDOW: await asyncio.sleep(0.0005)
        k = min(n - sent, WINDOW - (sent - acked), 256)
        for i in range(sent, sent + k): await nc.publish('$KV.HOT.hot', b'value %d' % (i + 1), reply=inbox)
        sent += k
        for m in sorted(marks):
            if sent >= m and m not in rss:
                target = m; done.clear()
                if acked < m: await asyncio.wait_for(done.wait(), 120)
                rss[m] = rss_mb(pid)
    target = n
    if acked < n: await asyncio.wait_for(done.wait(), 120)
    dt = time.perf_counter() - t0
    assert not errors, errors[:3]
    assert (await kv.get('hot')).value == b'value %d' % n
    info = await js.stream_info('KV_HOT')
    await nc.close()
    return dict(rss=rss, rate=n / dt, live=info.state.bytes, last=info.state.last_seq)


async def read_back(url: str, n: int) -> float:
    "Connect and read both keys: the end of a restart, as a client sees it."
    import nats
    nc = await nats.connect(url)
    kv = await nc.jetstream().key_value('HOT')
    assert (await kv.get('hot')).value == b'value %d' % n
    assert (await kv.get('stable')).value == b'the stable value'
    await nc.close()


def run(kind: str, workdir: pathlib.Path) -> dict:
    workdir.mkdir()
    sd = workdir / 'sd'
    srv = ServerProc(kind, ['-js', '-sd', str(sd)], workdir=str(workdir))
    try:
        srv.start()
        r = asyncio.run(overwrite(srv.url, N, srv.proc.pid))
        r['disk'] = disk_mb(sd)
        srv.stop()
        t0 = time.perf_counter()
        srv.start(timeout=600)
        asyncio.run(read_back(srv.url, N))
        r['restart'] = time.perf_counter() - t0
        r['rss_restarted'] = rss_mb(srv.proc.pid)
        return r
    finally: srv.stop()


def test_hot_key_resources(tmp_path):
    res = {kind: run(kind, tmp_path / kind) for kind in ('jsnb', 'nats-server')}
    j, r = res['jsnb'], res['nats-server']
    rows = [('overwrites of the hot key', f'{N:,}', f'{N:,}'),
            ('overwrite rate (msgs/s)', f"{j['rate']:,.0f}", f"{r['rate']:,.0f}"),
            ('live data (bytes)', f"{j['live']:,}", f"{r['live']:,}")]
    rows += [(f'RSS after {k:,} (MB)', f"{j['rss'][k]:.1f}", f"{r['rss'][k]:.1f}") for k in sorted(j['rss'])]
    rows += [('RSS growth over the run (MB)', f"{j['rss'][N] - j['rss'][0]:+.1f}", f"{r['rss'][N] - r['rss'][0]:+.1f}"),
             ('store on disk (MB)', f"{j['disk']:.2f}", f"{r['disk']:.2f}"),
             ('restart until both keys read (s)', f"{j['restart']:.2f}", f"{r['restart']:.2f}"),
             ('RSS after the restart (MB)', f"{j['rss_restarted']:.1f}", f"{r['rss_restarted']:.1f}")]
    w = max(len(a) for a, _, _ in rows)
    print(f"\n{'':<{w}}  {'jsnb':>12}  {'nats-server':>12}")
    for a, b, c in rows: print(f'{a:<{w}}  {b:>12}  {c:>12}')
    assert j['last'] == r['last'] == N + 1
    assert j['disk'] * 1e6 <= 2 * j['live'] + BLOCK + 64 * 1024            # state file and metadata besides
    assert j['rss'][N] - j['rss'][N // 4] < 32                             # flat in the number of overwrites


# ---------------------------------------------------------------------------------------------- idle CPU

IDLE_PENDING = int(os.environ.get('JSNB_BENCH_IDLE_PENDING', 100_000))
IDLE_STREAMS = int(os.environ.get('JSNB_BENCH_IDLE_STREAMS', 1000))
IDLE_SECONDS = float(os.environ.get('JSNB_BENCH_IDLE_SECONDS', 10))


def idle_cpu(pid: int, seconds: float = IDLE_SECONDS) -> float:
    "The share of one core a process uses while nobody asks it anything, in percent."
    time.sleep(2.0)                                   # let the last replies and any background compile finish
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


async def pending_setup(url: str, n: int):
    "One stream of `n` messages and one push consumer that has delivered them all, none acknowledged."
    import nats
    nc = await nats.connect(url, pending_size=1 << 27)
    js = nc.jetstream()
    await js.add_stream(name='IDLE', subjects=['idle'])
    acks = [await js.publish_async('idle', b'x' * 16, wait_stall=10) for _ in range(n)]
    await asyncio.gather(*acks)
    got = 0
    async def cb(m):
        nonlocal got; got += 1
    await nc.subscribe('idle.dlv', cb=cb, pending_msgs_limit=n + 10)
    cfg = {'durable_name': 'C', 'deliver_subject': 'idle.dlv', 'ack_policy': 'explicit', 'ack_wait': 3600 * 10**9,
           'max_ack_pending': n + 10}
    r = json.loads((await nc.request('$JS.API.CONSUMER.CREATE.IDLE.C', json.dumps({'stream_name': 'IDLE', 'config': cfg}).encode(), timeout=30)).data)
    assert 'error' not in r, r
    for _ in range(1200):
        if got >= n: break
        await asyncio.sleep(0.05)
    info = json.loads((await nc.request('$JS.API.CONSUMER.INFO.IDLE.C', b'', timeout=10)).data)
    assert info['num_ack_pending'] == n, info
    return nc


async def many_setup(url: str, n: int):
    "`n` streams with one durable consumer each, all idle."
    import nats
    nc = await nats.connect(url)
    for i in range(n):
        r = json.loads((await nc.request(f'$JS.API.STREAM.CREATE.S{i}', json.dumps({'name': f'S{i}', 'subjects': [f's.{i}']}).encode(), timeout=10)).data)
        assert 'error' not in r, r
        r = json.loads((await nc.request(f'$JS.API.CONSUMER.CREATE.S{i}.C', json.dumps(
            {'stream_name': f'S{i}', 'config': {'durable_name': 'C', 'ack_policy': 'explicit'}}).encode(), timeout=10)).data)
        assert 'error' not in r, r
    return nc


@pytest.mark.parametrize('setup', ['pending', 'many'])
def test_idle_cpu(tmp_path, setup):
    "Idle CPU beside the reference: a consumer with many unacknowledged messages, and many idle streams and consumers."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        srv = ServerProc(kind, ['-js'], workdir=str(tmp_path / kind))
        (tmp_path / kind).mkdir()
        try:
            srv.start()
            async def go():
                nc = await (pending_setup(srv.url, IDLE_PENDING) if setup == 'pending' else many_setup(srv.url, IDLE_STREAMS))
                cpu = await asyncio.to_thread(idle_cpu, srv.proc.pid)
                await nc.close()
                return cpu
            out[kind] = asyncio.run(go())
        finally: srv.stop()
    what = f'{IDLE_PENDING:,} unacknowledged messages' if setup == 'pending' else f'{IDLE_STREAMS:,} streams and consumers'
    print(f'\nidle CPU with {what}: nats-server {out["nats-server"]:.1f}%  jsnb {out["jsnb"]:.1f}%  (of one core, over {IDLE_SECONDS:g} s)')
    assert out['jsnb'] < 10, out                      # before timers keyed by deadline: 39% and 5%
