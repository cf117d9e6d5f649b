"""The backup client (`jsnb.clients.backup`, `jsnb stream backup/restore`, `jsnb backup/restore --all`)
against jsnb and the reference nats-server, and across the two."""
import asyncio, json, os, subprocess, sys, time, pathlib
import pytest
import nats

from jsnb.clients.backup import snapshot, restore, backup_all, restore_all, BackupError

KINDS = ['jsnb', 'nats-server']
ENV = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parent.parent))


async def connect(s): return await asyncio.wait_for(nats.connect(s.url), 10)


async def populate(nc, name='ORDERS', n=60):
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f'{name.lower()}.*'])
    for i in range(1, n + 1):
        await js.publish(f'{name.lower()}.{("a", "b")[i % 2]}', f'{name} {i}'.encode(), headers={'X-I': str(i)} if i % 7 == 0 else None)
    await js.delete_msg(name, 5)
    await js.add_consumer(name, durable_name='C1', ack_policy='explicit', filter_subject=f'{name.lower()}.b')
    await js.add_consumer(name, durable_name='C2', ack_policy='explicit')
    sub = await js.pull_subscribe_bind('C1', name)
    for m in await sub.fetch(6): await m.ack()
    return js


async def view(nc, name):
    js = nc.jetstream()
    si = await js.stream_info(name)
    msgs = []
    for seq in range(si.state.first_seq, si.state.last_seq + 1):
        try: m = await js.get_msg(name, seq); msgs.append((m.seq, m.subject, m.data, dict(m.headers or {})))
        except nats.js.errors.NotFoundError: msgs.append((seq, None))
    cons = {}
    for c in await js.consumers_info(name):
        cons[c.name] = (c.delivered.stream_seq, c.ack_floor.stream_seq, c.num_pending, c.num_ack_pending)
    return (si.state.messages, si.state.first_seq, si.state.last_seq), msgs, cons


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, '-c', 'import sys; from jsnb.cli import jsnb_main; sys.exit(jsnb_main())', *args],
                          capture_output=True, text=True, env=ENV, timeout=timeout)


@pytest.mark.parametrize('kind', KINDS)
async def test_api_round_trip(start_server, kind, tmp_path):
    s = start_server(kind, '-js')
    nc = await connect(s)
    await populate(nc)
    before = await view(nc, 'ORDERS')
    meta = await snapshot(nc, 'ORDERS', tmp_path / 'b', chunk_size=1024)
    assert meta['state']['last_seq'] == 60 and json.loads((tmp_path / 'b' / 'backup.json').read_text()) == meta
    with pytest.raises(BackupError) as e: await restore(nc, tmp_path / 'b')
    assert e.value.err_code == 10130
    with pytest.raises(BackupError) as e: await snapshot(nc, 'NOPE', tmp_path / 'n')
    assert (e.value.code, e.value.err_code) == (404, 10059)
    await nc.jetstream().delete_stream('ORDERS')
    info = await restore(nc, tmp_path / 'b', chunk_size=1000)
    assert info['config']['name'] == 'ORDERS'
    assert await view(nc, 'ORDERS') == before
    await nc.close()


@pytest.mark.parametrize('src,dst', [('jsnb', 'nats-server'), ('nats-server', 'jsnb')])
async def test_cross_server(start_server, src, dst, tmp_path):
    a, b = start_server(src, '-js'), start_server(dst, '-js')
    na, nb = await connect(a), await connect(b)
    await populate(na)
    before = await view(na, 'ORDERS')
    await snapshot(na, 'ORDERS', tmp_path / 'x')
    await restore(nb, tmp_path / 'x')
    assert await view(nb, 'ORDERS') == before
    await na.close(); await nb.close()


@pytest.mark.parametrize('kind', KINDS)
async def test_cli_stream_and_all(start_server, kind, tmp_path):
    s = start_server(kind, '-js')
    nc = await connect(s)
    for n in ('A', 'B', 'C'): await populate(nc, n, n=20 + ord(n))
    before = {n: await view(nc, n) for n in ('A', 'B', 'C')}
    r = cli('stream', 'backup', 'A', str(tmp_path / 'a'), '--server', s.url)
    assert r.returncode == 0 and 'chunks' in r.stderr and '/s)' in r.stderr and 'Received' in r.stdout, r.stderr   # bytes, rate
    r = cli('stream', 'backup', 'NOPE', str(tmp_path / 'n'), '--server', s.url)
    assert r.returncode == 1 and 'stream not found' in r.stderr
    r = cli('backup', str(tmp_path / 'all'), '--server', s.url)      # every stream: the only thing it does (no --all needed)
    assert r.returncode == 0 and 'Backed up 3 streams' in r.stdout, r.stderr
    r = cli('restore', str(tmp_path / 'all'), '--server', s.url)
    assert r.returncode == 1 and '10130' in r.stderr and 'exists with' in r.stderr and 'the same as the backup' in r.stderr, r.stderr
    js = nc.jetstream()
    for n in ('A', 'B', 'C'): await js.delete_stream(n)
    r = cli('stream', 'restore', 'B', str(tmp_path / 'a'), '--server', s.url)       # the seed's form names the stream: not this one
    assert r.returncode == 1 and 'holds a backup of stream A, not B' in r.stderr, r.stderr
    r = cli('stream', 'restore', 'A', str(tmp_path / 'a'), '--server', s.url)
    assert r.returncode == 0, r.stderr
    await js.delete_stream('A')
    r = cli('restore', '--all', str(tmp_path / 'all'), '--server', s.url)
    assert r.returncode == 0, r.stderr
    assert {n: await view(nc, n) for n in ('A', 'B', 'C')} == before
    await js.update_stream(name='B', subjects=['b.*'], max_msgs=1000)
    r = cli('restore', str(tmp_path / 'all'), '--update-streams', '--server', s.url)     # they exist: the backup's configuration
    assert r.returncode == 0 and r.stdout.count('Updated Stream') == 3, r.stdout + r.stderr
    assert (await js.stream_info('B')).config.max_msgs == -1 and {n: await view(nc, n) for n in ('A', 'B', 'C')} == before
    await nc.close()
    r = cli('stream', 'backup', 'A', str(tmp_path / 'z'), '--server', 'nats://127.0.0.1:1')
    assert r.returncode == 1 and 'cannot connect' in r.stderr


@pytest.mark.parametrize('kind', KINDS)
async def test_snapshot_while_publishing(start_server, kind, tmp_path):
    s = start_server(kind, '-js')
    nc = await connect(s)
    js = nc.jetstream()
    await js.add_stream(name='S', subjects=['s.>'])
    for i in range(300): await js.publish('s.x', b'%d' % i)
    running = True
    async def pub():
        i = 300
        while running: await js.publish('s.x', b'%d' % i); i += 1
    t = asyncio.create_task(pub())
    await asyncio.sleep(0.05)
    meta = await snapshot(nc, 'S', tmp_path / 's', chunk_size=1024, window_size=2048)
    running = False; await t
    await js.delete_stream('S')
    info = await restore(nc, tmp_path / 's')
    last = meta['state']['last_seq']
    assert info['state']['last_seq'] == last and info['state']['messages'] == last > 300
    for seq in range(1, last + 1): assert (await js.get_msg('S', seq)).data == b'%d' % (seq - 1)
    await nc.close()


KILLER = r"""
import asyncio, json, os, signal, sys, nats
async def main(url, path, cut):
    nc = await nats.connect(url)
    meta = json.load(open(os.path.join(path, 'backup.json')))
    r = json.loads((await nc.request('$JS.API.STREAM.RESTORE.' + meta['config']['name'], json.dumps(meta).encode(), timeout=5)).data)
    data = open(os.path.join(path, 'stream.tar.s2'), 'rb').read()[:int(cut)]
    for i in range(0, len(data), 4096): await nc.request(r['deliver_subject'], data[i:i + 4096], timeout=5)
    await nc.flush()
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main(*sys.argv[1:]))
"""


async def after_cut(s, path, cut):
    "Restore the backup in `path` on server `s` from a client killed after `cut` bytes; what is there 7 s later, and the advisories."
    nc = await connect(s)
    seen = []
    async def adv(m): seen.append(m.subject)
    sub = await nc.subscribe('$JS.EVENT.ADVISORY.STREAM.>', cb=adv)
    p = await asyncio.create_subprocess_exec(sys.executable, '-c', KILLER, s.url, str(path), str(cut), env=ENV)
    assert await asyncio.wait_for(p.wait(), 60) == -9
    await asyncio.sleep(7)                         # both servers give up after 5 s without chunks
    await sub.unsubscribe()
    r = json.loads((await nc.request('$JS.API.STREAM.INFO.S', b'', timeout=5)).data)
    if 'error' in r: await nc.close(); return r['error']['err_code'], seen
    js = nc.jetstream()
    st = r['state']
    last = await js.get_msg('S', st['last_seq']) if st['messages'] else None
    cons = {c.name: (c.delivered.stream_seq, c.ack_floor.stream_seq, c.num_pending, c.num_ack_pending)
            for c in await js.consumers_info('S')}
    await js.delete_stream('S')
    info = await restore(nc, path)                 # and a full restore works afterwards
    assert info['state']['messages'] == 20000
    await nc.close()
    return (st['messages'], st['first_seq'], st['last_seq'], last and last.data), cons, seen


@pytest.mark.parametrize('src', KINDS)
async def test_interrupted_restore(start_server, src, tmp_path):
    "A restore whose client dies half-way: the same archive bytes, cut at the same place, leave the same on both servers."
    a = start_server(src, '-js')
    nc = await connect(a)
    js = nc.jetstream()
    await js.add_stream(name='S', subjects=['s.>'])
    for i in range(20000): await js.publish('s.x', os.urandom(200))
    await js.add_consumer('S', durable_name='C', ack_policy='explicit')
    for m in await (await js.pull_subscribe_bind('C', 'S')).fetch(5): await m.ack()
    await snapshot(nc, 'S', tmp_path / 's')
    await nc.close()
    size = (tmp_path / 's' / 'stream.tar.s2').stat().st_size
    assert size > 3 << 20                          # S2 frames of 1 MiB: more than three of them
    servers = [start_server(k, '-js') for k in KINDS]
    for cut in (600 << 10, size // 2 + 1000):
        got = await asyncio.gather(*(after_cut(s, tmp_path / 's', cut) for s in servers))
        assert got[0] == got[1], (cut, got)
        if cut < 1 << 20:                          # nothing decoded yet: no stream, no advisory but the first
            assert got[0] == (10059, ['$JS.EVENT.ADVISORY.STREAM.RESTORE_CREATE.S'])
        else:                                      # what arrived is a usable stream, announced when state.json came
            assert 0 < got[0][0][0] < 20000 and got[0][1]['C'][:2] == (5, 5)
            assert got[0][2] == ['$JS.EVENT.ADVISORY.STREAM.RESTORE_CREATE.S', '$JS.EVENT.ADVISORY.STREAM.CREATED.S']


async def digest(nc, name):
    "The stream's state, every message (sequence, subject, headers, payload hash) and every consumer's state."
    import hashlib
    js = nc.jetstream()
    si = await js.stream_info(name)
    msgs = []
    for seq in range(si.state.first_seq, si.state.last_seq + 1):
        try: m = await js.get_msg(name, seq)
        except nats.js.errors.NotFoundError: msgs.append((seq, None)); continue
        msgs.append((m.seq, m.subject, dict(m.headers or {}), hashlib.sha256(m.data).hexdigest()))
    cons = {}
    for c in await js.consumers_info(name):
        cons[c.name] = (c.config.filter_subject, c.delivered.consumer_seq, c.delivered.stream_seq, c.ack_floor.consumer_seq,
                        c.ack_floor.stream_seq, c.num_pending, c.num_ack_pending, c.num_redelivered)
    return (si.state.messages, si.state.bytes, si.state.first_seq, si.state.last_seq, si.state.num_deleted), msgs, cons


@pytest.mark.bench
@pytest.mark.parametrize('kind', KINDS)
async def test_backup_throughput(start_server, kind, tmp_path):
    "A 100 MB stream (JSNB_BENCH_BACKUP_MB) with consumers, backed up and restored: the same messages and consumer states after; MB/s printed."
    mb = int(os.environ.get('JSNB_BENCH_BACKUP_MB', '100'))
    s = start_server(kind, '-js')
    nc = await connect(s)
    js = nc.jetstream()
    await js.add_stream(name='BIG', subjects=['big.*'])
    noise = os.urandom(1 << 20)
    n = mb * 64
    for i in range(n):                             # 16 KiB payloads: half random bytes, half repeated text
        data = noise[(i * 8192) % len(noise):][:8192].ljust(8192, b'x') + b'order %8d ' % i * 512
        await nc.publish(f'big.{"ab"[i % 2]}', data, headers={'Nats-Msg-Id': str(i)} if i % 100 == 0 else None)
        if i % 256 == 255: await nc.flush()
    await nc.flush()
    while (await js.stream_info('BIG')).state.messages < n: await asyncio.sleep(0.2)
    for seq in (10, 11, n // 2): await js.delete_msg('BIG', seq)
    await js.add_consumer('BIG', durable_name='ALL', ack_policy='explicit', max_ack_pending=1000, ack_wait=3600)
    await js.add_consumer('BIG', durable_name='B', ack_policy='explicit', filter_subject='big.b')
    sub = await js.pull_subscribe_bind('ALL', 'BIG')
    got = await sub.fetch(40, timeout=10)
    for m in got[:30]: await m.ack()               # 30 acknowledged, 10 pending
    sub = await js.pull_subscribe_bind('B', 'BIG')
    for m in await sub.fetch(5, timeout=10): await m.ack()
    await nc.flush()
    before = await digest(nc, 'BIG')
    t0 = time.perf_counter(); await snapshot(nc, 'BIG', tmp_path / 'b', timeout=60); t1 = time.perf_counter()
    await js.delete_stream('BIG')
    t2 = time.perf_counter(); info = await restore(nc, tmp_path / 'b', timeout=300); t3 = time.perf_counter()
    assert info['state']['messages'] == n - 3
    after = await digest(nc, 'BIG')
    assert after[0] == before[0] and after[2] == before[2]
    assert after[1] == before[1]                   # every message, at its sequence
    size = n * 16384 / 1e6
    print(f'\n{kind}: {size:.0f} MB stream, backup {size / (t1 - t0):.1f} MB/s, restore {size / (t3 - t2):.1f} MB/s')
    await nc.close()


LOAD = r"""
import asyncio, sys, time, nats
async def main(url, seconds):
    nc = await nats.connect(url); js = nc.jetstream()
    await js.add_stream(name='LOAD', subjects=['load.>'], max_msgs=5000)
    end, n = time.monotonic() + float(seconds), 0
    while time.monotonic() < end and n < 2_000_000:
        for _ in range(200): await nc.publish('load.x', b'x' * 512); n += 1
        await js.publish('load.x', b'sync')
    await nc.close()
asyncio.run(main(*sys.argv[1:]))
"""


async def big_backup(s, path, n=2500):
    "A stream S of `n` messages with a consumer, backed up into `path`; its digest."
    nc = await connect(s)
    js = nc.jetstream()
    await js.add_stream(name='S', subjects=['s.>'])
    for i in range(n): await nc.publish('s.x', os.urandom(600))
    await nc.flush()
    while (await js.stream_info('S')).state.messages < n: await asyncio.sleep(0.1)
    await js.add_consumer('S', durable_name='C', ack_policy='explicit')
    await snapshot(nc, 'S', path)
    before = await digest(nc, 'S')
    await js.delete_stream('S')
    return nc, before


@pytest.mark.parametrize('kind', KINDS)
async def test_restore_stalled_client_under_load(start_server, kind, tmp_path):
    """A restore whose client stalls longer than the server waits (8 s > 5 s), on a server busy with other publishers: the
    client and the server agree afterwards (the client removed what the server had partly restored, and says so), and a
    retry succeeds; then a client that gives up waiting for the final answer finds the server finished it, and says done."""
    s = start_server(kind, '-js')
    nc, before = await big_backup(s, tmp_path / 'b')
    load = await asyncio.create_subprocess_exec(sys.executable, '-c', LOAD, s.url, '60', env=ENV)
    try:
        stalled = []
        def stall(done, chunks, total):
            if chunks == 2 and not stalled: stalled.append(1); time.sleep(8)     # the whole client stops, as a suspended process
        with pytest.raises(BackupError) as e: await restore(nc, tmp_path / 'b', chunk_size=64 << 10, window=1, progress=stall)
        msg = str(e.value)
        assert 'no longer receives this restore' in msg and ('was removed, nothing is left' in msg or 'holds no stream S' in msg), msg
        r = json.loads((await nc.request('$JS.API.STREAM.INFO.S', b'', timeout=10)).data)
        assert r['error']['err_code'] == 10059                      # both sides agree: nothing of S is left
        info = await restore(nc, tmp_path / 'b')                    # and a retry succeeds
        assert info['state']['messages'] == before[0][0]
        assert await digest(nc, 'S') == before
        await nc.jetstream().delete_stream('S')
        info = await restore(nc, tmp_path / 'b', timeout=0.001)     # the client stops waiting at once; the server goes on
        assert (info['state']['messages'], info['state']['last_seq']) == (before[0][0], before[0][3])
        with pytest.raises(BackupError) as e: await restore(nc, tmp_path / 'b')   # a retry over it says what is there
        assert e.value.err_code in (10058, 10130) and f"exists with {before[0][0]:,} messages" in str(e.value) and 'the same as the backup' in str(e.value)
    finally:
        if load.returncode is None: load.kill()
        await load.wait()
        await nc.close()


async def test_large_backup_frames_beside_the_loop(start_server, tmp_path):
    """A backup of several MiB, the compiled kernels in place: its blocks are compressed and checksummed in the archive's
    worker thread (`archive.frames_beside`), and its restore's chunks are decoded there; it restores to the same messages,
    on jsnb and on the reference."""
    from jsnb.app import serve
    from jsnb.js import archive
    archive.warm()
    if not archive.compiled(): pytest.skip('the compiled kernels are not available (numba)')
    srv = await serve(jetstream=True, store_dir=str(tmp_path / 'store'))
    nc = None
    try:
        nc = await connect(srv); js = nc.jetstream()
        await js.add_stream(name='BIG', subjects=['big.*'])
        body = bytes(range(256)) * 16
        for i in range(0, 1500, 100):
            await asyncio.gather(*[js.publish(f'big.{j % 3}', b'%d ' % j + body) for j in range(i, i + 100)])
        before, n0 = await view(nc, 'BIG'), archive.handed_over
        meta = await snapshot(nc, 'BIG', tmp_path / 'b')
        assert meta['state']['messages'] == 1500 and archive.handed_over - n0 >= 5    # 6 MiB: a block a MiB
        await js.delete_stream('BIG')
        n1 = archive.handed_over
        await restore(nc, tmp_path / 'b', chunk_size=64 << 10)
        assert await view(nc, 'BIG') == before
        assert archive.handed_over - n1 >= 3                   # the chunks of 64 KiB: decoded in the worker
        ref = await connect(start_server('nats-server', '-js'))
        try:
            await restore(ref, tmp_path / 'b')                 # the frames the worker made, read by the reference
            assert await view(ref, 'BIG') == before
        finally: await ref.close()
    finally:
        if nc is not None: await nc.close()
        await srv.stop()
