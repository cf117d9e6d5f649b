"""File store recovery and compaction: each kind of damage the robustness issue lists, applied to
the files of a real store (and, differentially, to the reference server's store); a crash
between syncs; compaction of a key overwritten again and again, checked against a model across
restarts and against crashes."""
import asyncio, glob, os, random, signal, subprocess, sys, time, pathlib
import pytest

from jsnb.js.store import StoreLimits
from jsnb.js import filestore as fsmod, records
from jsnb.js.filestore import FileStore

ROOT = pathlib.Path(__file__).resolve().parent.parent
N = 200                                      # messages in the damaged store
BLOCK = 4096                                 # small blocks, so that a store has several


def body(i): return b'payload-%04d-' % i + b'x' * (i % 23)


def filled(d):
    "A stopped store of N messages over several blocks: `{seq: (block, offset, record length)}`."
    st = FileStore(d, block_size=BLOCK)
    for i in range(1, N + 1): st.store_msg(f'a.{i % 5}', b'', body(i))
    ix = st._ix
    where = {int(ix.seq[r]): (int(ix.blk[r]), int(ix.off[r]), records.HDR + 3 + len(body(int(ix.seq[r]))))
             for r in range(ix.n)}
    blocks = list(st._blocks)
    st.stop()
    assert len(blocks) >= 4
    return where, blocks


def reopen(d, caplog):
    caplog.clear(); caplog.set_level('WARNING', logger='jsnb')
    st = FileStore(d, block_size=BLOCK)
    return st, [r for r in caplog.records if r.name == 'jsnb']


def survivors(st, last=N): return {q for q in range(1, last + 1) if st.load_msg(q) is not None}


def check(st, d, lost: set, logs, caplog):
    "What every damage test asserts: the survivors, what was logged, no sequence reused, a clean next open."
    assert survivors(st) == set(range(1, N + 1)) - lost
    for q in survivors(st): assert st.load_msg(q).data == body(q)
    assert logs and all(r.levelname == 'WARNING' and 'Filestore [S]' in r.getMessage() for r in logs)
    text = '\n'.join(r.getMessage() for r in logs)
    reported = {q for x in st.damage if x['first'] is not None for q in range(x['first'], x['last'] + 1)}
    assert lost <= reported, (sorted(lost - reported), text)
    s = st.state()
    assert s['last_seq'] == N and s['messages'] == N - len(lost)
    assert st.store_msg('a.new', b'', b'after')[0] == N + 1                  # never a sequence already used
    st.stop()
    st, logs = reopen(d, caplog)
    assert not logs and st.damage == [] and survivors(st, N + 1) == set(range(1, N + 2)) - lost
    st.stop()
    return text


def in_block(where, b, lo=0, hi=1 << 40):
    "Sequences whose records overlap bytes [lo, hi) of block `b`."
    return {q for q, (bb, off, n) in where.items() if bb == b and off < hi and off + n > lo}


# ---------------------------------------------------------------- the damage table, one test per row

def test_last_block_cut_mid_record(tmp_path, caplog):
    d = tmp_path / 'S'; where, blocks = filled(d)
    p = _blk(d, blocks[-1])
    size = p.stat().st_size; os.truncate(p, size - 5)
    st, logs = reopen(d, caplog)
    text = check(st, d, {N}, logs, caplog)
    assert f'lost sequences {N}..{N}' in text and f'goes on from {N + 1}' in text


def _blk(d, b): return d / 'msgs' / f'{b:08d}.blk'


@pytest.mark.parametrize('which', ['last', 'middle'])
def test_block_cut_in_half(tmp_path, caplog, which):
    d = tmp_path / 'S'; where, blocks = filled(d)
    b = blocks[-1] if which == 'last' else blocks[1]
    p = _blk(d, b); size = p.stat().st_size; os.truncate(p, size // 2)
    lost = in_block(where, b, size // 2)
    st, logs = reopen(d, caplog)
    text = check(st, d, lost, logs, caplog)
    assert f'block {b} is cut at byte' in text and f'lost sequences {min(lost)}..{max(lost)}' in text


@pytest.mark.parametrize('seed', [1, 2, 3])
def test_ten_flipped_bytes(tmp_path, caplog, seed):
    "Ten flipped bytes in a block lose the records they hit, not the block's tail."
    d = tmp_path / 'S'; where, blocks = filled(d)
    b = blocks[-2]
    p = _blk(d, b); buf = bytearray(p.read_bytes())
    hits = random.Random(seed).sample(range(len(buf) // 4, 3 * len(buf) // 4), 10)
    for i in hits: buf[i] ^= 0xff
    p.write_bytes(bytes(buf))
    lost = set().union(*(in_block(where, b, i, i + 1) for i in hits))
    st, logs = reopen(d, caplog)
    text = check(st, d, lost, logs, caplog)
    assert 'damaged bytes' in text
    assert max(where) in survivors(FileStore(d, block_size=BLOCK))                 # the tail after the damage is kept


@pytest.mark.parametrize('which', ['first', 'middle', 'last'])
@pytest.mark.parametrize('how', ['emptied', 'deleted'])
def test_block_emptied_or_deleted(tmp_path, caplog, which, how):
    d = tmp_path / 'S'; where, blocks = filled(d)
    b = {'first': blocks[0], 'middle': blocks[2], 'last': blocks[-1]}[which]
    p = _blk(d, b)
    if how == 'emptied': p.write_bytes(b'')
    else: p.unlink()
    lost = in_block(where, b)
    st, logs = reopen(d, caplog)
    text = check(st, d, lost, logs, caplog)
    assert (f'block {b} is missing' if how == 'deleted' else f'block {b} is cut at byte 0') in text


def test_state_file_damaged(tmp_path, caplog):
    "A damaged state file is reported and ignored; the blocks still give everything they hold."
    d = tmp_path / 'S'; filled(d)
    p = d / 'msgs' / 'state.json'; p.write_bytes(p.read_bytes().replace(b'"last"', b'"lost"'))
    st, logs = reopen(d, caplog)
    assert 'state file is damaged' in logs[0].getMessage()
    assert survivors(st) == set(range(1, N + 1)) and st.store_msg('a', b'', b'')[0] == N + 1
    st.stop()


# ---------------------------------------------------------------- crashes and what "acknowledged" means

def crash(st):
    "The process dies: nothing more is written, the operating system keeps what it was given."
    for fd in st._fds.values(): os.close(fd)
    st._fds.clear(); st._closed = True


def test_crash_between_syncs_keeps_what_the_os_had(tmp_path, caplog):
    d = tmp_path / 'S'
    st = FileStore(d, sync_interval=3600, block_size=BLOCK)
    for i in range(1, 101): st.store_msg('a', b'', body(i))
    st.sync()                                                      # the state file says 100
    for i in range(101, 151): st.store_msg('a', b'', body(i))
    crash(st)
    st, logs = reopen(d, caplog)
    assert not logs and st.state()['last_seq'] == 150 and st.load_msg(150).data == body(150)
    st.stop()


def test_power_loss_after_last_sync(tmp_path, caplog):
    """With `sync_interval`, what was acknowledged after the last sync is not durable: a power loss
    may take it, sequences and all; everything up to the last sync stays used even if more is lost."""
    d = tmp_path / 'S'
    st = FileStore(d, sync_interval=3600, block_size=1 << 20)
    for i in range(1, 101): st.store_msg('a', b'', body(i))
    st.sync()
    synced = st._size
    for i in range(101, 151): st.store_msg('a', b'', body(i))
    crash(st)
    os.truncate(_blk(d, 1), synced + 17)                            # the unsynced part never reached the disk
    st, logs = reopen(d, caplog)
    assert st.state()['last_seq'] == 100 and survivors(st) == set(range(1, 101))
    st.stop()
    os.truncate(_blk(d, 1), 3000)                                  # and then damage below the synced part
    st, logs = reopen(d, caplog)
    assert logs and st.state()['last_seq'] == 100 and st.store_msg('a', b'', b'')[0] == 101
    st.stop()


# ---------------------------------------------------------------- compaction

def disk(d): return sum(p.stat().st_size for p in (d / 'msgs').glob('*.blk'))


def test_hot_key_is_compacted(tmp_path):
    "One stable key and one key overwritten 200k times: disk stays within 2x live + one block, the index small."
    d, bs = tmp_path / 'KV', 32 << 10
    lim = StoreLimits(max_msgs_per_subject=1, discard='new')
    st = FileStore(d, lim, block_size=bs)
    st.store_msg('$KV.B.stable', b'', b'stable')
    peak = 0
    for i in range(400):
        st.store_msgs([('$KV.B.hot', b'', b'v%d' % (i * 500 + j)) for j in range(500)])
        peak = max(peak, disk(d))
    live = st.state()['bytes']
    assert peak <= 2 * live + 2 * bs and st._ix.n < 5000 and st._ix.cap <= 8192
    assert st.state()['last_seq'] == 200_001
    st.remove_msg(1)                                                # the stable key deleted: it must stay deleted
    st.stop()
    st = FileStore(d, StoreLimits(), block_size=bs)                 # no per-subject limit: nothing old may come back
    assert [(m.seq, m.data) for m in st.load_next_msgs('>', 0, 10)] == [(200_001, b'v199999')]
    assert st.store_msg('$KV.B.hot', b'', b'x')[0] == 200_002
    st.stop()


def test_compaction_against_a_model_across_restarts(tmp_path):
    "Random puts, deletes and purges on a few keys, small blocks, a restart every so often: the store is the model."
    rnd = random.Random(7)
    d, lim = tmp_path / 'S', StoreLimits(max_msgs_per_subject=2)
    st, model, last = FileStore(d, lim, block_size=1024), {}, 0
    keys = ['k.stable'] + [f'k.{i}' for i in range(4)]
    st.store_msg('k.stable', b'', b'first'); model[1] = ('k.stable', b'first'); last = 1
    for step in range(6000):
        op = rnd.random()
        if op < 0.8:
            k = rnd.choice(keys[1:]); v = b'%d' % step * rnd.randint(1, 8)
            seq, _ = st.store_msg(k, b'', v); assert seq == last + 1; last = seq; model[seq] = (k, v)
            for q in sorted(q for q in model if model[q][0] == k)[:-2]: del model[q]
        elif op < 0.93 and len(model) > 1:
            q = rnd.choice(sorted(model)[1:]); assert st.remove_msg(q, erase=rnd.random() < 0.2); del model[q]
        elif op < 0.96:
            k = rnd.choice(keys[1:]); st.purge(k)
            for q in [q for q in model if model[q][0] == k]: del model[q]
        elif op < 0.97: st.skip_msg(); last += 1
        elif op < 0.975:                                            # everything goes, the stable key too
            st.purge(); model.clear()
            st.store_msg('k.stable', b'', b'again'); last += 1; model[last] = ('k.stable', b'again')
        if step % 700 == 0 or step == 5999:
            st.stop(); st = FileStore(d, lim, block_size=1024)
            assert st.damage == []
        if step % 100 == 0 or step == 5999:
            s = st.state()
            assert (s['messages'], s['last_seq']) == (len(model), last)
            assert {m.seq: (m.subject, m.data) for m in st.load_next_msgs('>', 0, 10_000)} == model
            assert disk(d) <= 2 * s['bytes'] + 3 * 1024 + 8 * 39 * len(model), (disk(d), s['bytes'])
    st.stop()
    st = FileStore(d, StoreLimits(), block_size=1024)               # without limits: no deleted message came back
    assert {m.seq: (m.subject, m.data) for m in st.load_next_msgs('>', 0, 10_000)} == model
    st.stop()


KV_WRITER = r'''
import sys
from jsnb.js.filestore import FileStore
from jsnb.js.store import StoreLimits
fs = FileStore(sys.argv[1], StoreLimits(max_msgs_per_subject=1), sync_always=True, block_size=2048)
if fs.state()['messages'] == 0: fs.store_msg('kv.stable', b'', b'stable')
n = fs.state()['last_seq']
print('ready', flush=True)
while True:
    k = 'kv.%d' % (n % 3)
    seq, _ = fs.store_msg(k, b'', b'v%d' % (n + 1) + b'.' * (n % 50))
    print(seq, k, flush=True); n = seq
'''


def test_crash_during_compaction_loses_nothing_and_revives_nothing(tmp_path):
    "SIGKILL a KV writer (sync always, small blocks, constant compaction) again and again."
    d = tmp_path / 'KV'
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    latest: dict[str, int] = {}
    for rnd, run_for in enumerate([0.5, 0.3, 0.7, 0.45]):
        p = subprocess.Popen([sys.executable, '-c', KV_WRITER, str(d)], stdout=subprocess.PIPE, env=env, cwd=ROOT)
        assert p.stdout.readline().strip() == b'ready'
        os.set_blocking(p.stdout.fileno(), False)
        time.sleep(run_for)
        os.kill(p.pid, signal.SIGKILL); p.wait()
        out = b''
        while chunk := p.stdout.read(): out += chunk
        p.stdout.close()
        for line in out.decode().split('\n')[:-1]:
            seq, k = line.split(); latest[k] = int(seq)
        st = FileStore(d, StoreLimits(), block_size=2048)           # no limits: an old version revived would show
        assert st.damage == [], st.damage
        held = {}
        for m in st.load_next_msgs('>', 0, 100_000): held.setdefault(m.subject, []).append(m.seq)
        assert all(len(v) == 1 for v in held.values()), held          # one version per key, nothing revived
        assert held.pop('kv.stable') == [1]
        for k, seq in latest.items(): assert held[k][0] >= seq, (rnd, k)   # every acknowledged write is there
        assert st.state()['last_seq'] >= max(latest.values())
        st.stop()
    assert len(latest) == 3


# ---------------------------------------------------------------- against the reference

def _damage(blk: pathlib.Path, how: str):
    data = blk.read_bytes()
    if how == 'cut-mid-record': blk.write_bytes(data[:-5])
    elif how == 'cut-in-half': blk.write_bytes(data[:len(data) // 2])
    elif how == 'flip-10-bytes':
        b = bytearray(data)
        for i in random.Random(1).sample(range(len(b) // 3, 2 * len(b) // 3), 10): b[i] ^= 0xff
        blk.write_bytes(bytes(b))
    elif how == 'emptied': blk.write_bytes(b'')
    else: blk.unlink()


async def _publish(url, n, create):
    import nats
    nc = await nats.connect(url); js = nc.jetstream()
    if create: await js.add_stream(name='S', subjects=['s.>'], storage='file')
    seqs = [(await js.publish('s.x', b'payload-%d' % i)).seq for i in range(n)]
    state = (await js.stream_info('S')).state
    await nc.close()
    return seqs, state


@pytest.mark.reference
@pytest.mark.parametrize('how', ['cut-mid-record', 'cut-in-half', 'flip-10-bytes', 'emptied', 'deleted'])
def test_damage_against_reference(tmp_path, how):
    """The same damage to the last block of both servers' stores: jsnb goes on after the last
    sequence it acknowledged (the reference does not always), keeps at least as many messages,
    and logs a warning."""
    from conftest import ServerProc
    out = {}
    for kind in ('nats-server', 'jsnb'):
        srv = ServerProc(kind, ['-js', '-sd', str(tmp_path / kind / 'sd')], workdir=str(tmp_path / kind))
        (tmp_path / kind).mkdir()
        try:
            srv.start()
            seqs, _ = asyncio.run(_publish(srv.url, 100, True))
            assert seqs == list(range(1, 101))
            srv.stop()
            blocks = sorted(glob.glob(str(tmp_path / kind / 'sd' / '**' / '*.blk'), recursive=True),
                            key=lambda p: int(pathlib.Path(p).stem))
            _damage(pathlib.Path(blocks[-1]), how)
            srv.start()
            nxt, state = asyncio.run(_publish(srv.url, 1, False))
            out[kind] = (nxt[0], state.messages - 1, srv.log_text())
        finally: srv.stop()
    (j_next, j_kept, j_log), (r_next, r_kept, _) = out['jsnb'], out['nats-server']
    assert j_next == 101, out['jsnb'][:2]
    slack = 1 if how == 'cut-in-half' else 0         # whether the record at the half point survives depends on the layout
    assert j_next >= r_next and j_kept >= r_kept - slack, (out['jsnb'][:2], out['nats-server'][:2])
    assert '[WRN]' in j_log and 'Filestore [S]' in j_log
