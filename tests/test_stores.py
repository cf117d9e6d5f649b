"""Store behaviour, run against both stores; restart, corruption and crash tests for the file
store; and a differential check of byte accounting and state against the reference server."""
import asyncio, json, os, random, signal, subprocess, sys, time, pathlib
import pytest

from jsnb.js.store import MemStore, StoreLimits, StoreError, StoreMsg, mem_msg_size, file_msg_size
from jsnb.js import filestore as fsmod, records
from jsnb.js.filestore import FileStore
from jsnb.nats.subjects import subject_matches

ROOT = pathlib.Path(__file__).resolve().parent.parent
H = b'NATS/1.0\r\nX-Foo: bar\r\n\r\n'


@pytest.fixture(params=['memory', 'file'])
def kind(request): return request.param


@pytest.fixture
def mk(kind, tmp_path):
    "Factory for a fresh store of the parametrized kind (file stores get small blocks)."
    made = []
    def make(limits=None, **kw):
        if kind == 'memory': s = MemStore(limits)
        else:
            kw.setdefault('block_size', 2048)
            s = FileStore(tmp_path / f's{len(made)}', limits, **kw)
        made.append(s); return s
    yield make
    for s in made:
        try: s.stop()
        except StoreError: pass


def fill(st, subjects, ts0=None):
    out = []
    for i, s in enumerate(subjects):
        out.append(st.store_msg(s, H if i % 2 else b'', b'm%d' % i, ts=None if ts0 is None else ts0 + i)[0])
    return out


def seqs(st, f='>'):
    "Every live sequence matching `f`, by walking load_next_msg."
    out, m = [], st.load_next_msg(f, 0)
    while m: out.append(m.seq); m = st.load_next_msg(f, m.seq + 1)
    return out


# ---------------------------------------------------------------- storing and loading

def test_sequences_and_round_trip(mk):
    st = mk()
    assert st.store_msg('a.b', H, b'hello', ts=1_000) == (1, 1_000)
    seq, ts = st.store_msg('a.c', b'', b'')
    assert seq == 2 and abs(ts - time.time_ns()) < 5e9
    assert st.load_msg(1) == StoreMsg('a.b', 1, 1_000, H, b'hello')
    assert st.load_msg(2).hdr == b'' and st.load_msg(2).data == b''
    assert st.load_msg(0) is None and st.load_msg(3) is None
    big = os.urandom(300_000)
    assert st.store_msg('big', b'', big)[0] == 3 and st.load_msg(3).data == big


def test_store_msgs_batch(mk, kind, monkeypatch):
    st = mk(StoreLimits(max_msgs_per_subject=1, discard='new', discard_new_per_subject=True), **({} if kind == 'memory' else {'block_size': 1 << 20}))
    writes = []
    real = os.pwrite
    monkeypatch.setattr(fsmod.os, 'pwrite', lambda fd, b, off: writes.append(len(b)) or real(fd, b, off))
    res = st.store_msgs([('a', b'', b'1'), ('b', H, b'2', 5_000_000_000), ('a', b'', b'3'), ('c', b'', b'4')])
    assert [r[0] if isinstance(r, tuple) else r.kind for r in res] == [1, 2, 'max_msgs_per_subject', 3]
    assert st.load_msg(3).subject == 'c' and st._ix.ttl[st._ix.row(2)] == 5_000_000_000
    if kind == 'file': assert len(writes) == 1          # one write for the whole buffer
    writes.clear()
    st.store_msgs([(f's.{i}', b'', b'x' * 10) for i in range(200)])
    if kind == 'file': assert len(writes) == 1


def test_skip_msg(mk):
    st = mk()
    assert st.skip_msg() == 1
    s = st.state()
    assert (s['messages'], s['first_seq'], s['last_seq']) == (0, 2, 1)
    fill(st, ['a', 'b'])
    assert st.skip_msg() == 4
    fill(st, ['c'])
    s = st.state(deleted_details=True)
    assert (s['first_seq'], s['last_seq'], s['num_deleted'], s['deleted']) == (2, 5, 1, [4])
    assert st.load_msg(4) is None and st.load_next_msg('', 4).seq == 5


def test_load_next_last_prev(mk):
    st = mk()
    fill(st, ['o.a.1', 'o.b.1', 'x', 'o.a.2', 'o.b.1', 'y.z', 'o.a.1'])
    assert seqs(st) == [1, 2, 3, 4, 5, 6, 7] and seqs(st, '') == seqs(st)
    assert seqs(st, 'o.a.1') == [1, 7]
    assert seqs(st, 'o.*.1') == [1, 2, 5, 7]
    assert seqs(st, 'o.>') == [1, 2, 4, 5, 7]
    assert seqs(st, '*') == [3] and seqs(st, '*.*') == [6] and seqs(st, 'nope') == [] and seqs(st, 'o.*') == []
    assert st.load_next_msg('o.b.1', 3).seq == 5 and st.load_next_msg('o.b.1', 6) is None
    assert st.load_next_msg('>', 100) is None
    assert [st.load_last_msg(f).seq for f in ['', '>', 'o.b.1', 'o.a.*', '*', 'o.>', '*.z']] == [7, 7, 5, 7, 3, 7, 6]
    assert st.load_last_msg('zzz') is None and st.load_last_msg('q.*') is None
    assert [st.load_prev_msg(s).seq for s in (7, 100, 1)] == [7, 7, 1]
    assert st.load_prev_msg(0) is None
    st.remove_msg(7); st.remove_msg(5)
    assert st.load_last_msg('o.a.1').seq == 1 and st.load_last_msg('o.b.1').seq == 2
    assert st.load_last_msg('').seq == 6 and st.load_prev_msg(7).seq == 6
    st.remove_msg(1)
    assert st.load_next_msg('', 0).seq == 2 and st.load_prev_msg(1) is None


# ---------------------------------------------------------------- deleting, purging, compacting

def test_remove_and_erase(mk, kind):
    st = mk()
    fill(st, ['a', 'b', 'a', 'b'])
    st.store_msg('s', b'', b'SECRET-PAYLOAD-0123456789')
    assert st.remove_msg(2) and not st.remove_msg(2) and not st.remove_msg(99)
    assert st.remove_msg(5, erase=True)
    assert st.load_msg(2) is None and st.load_msg(5) is None
    s = st.state(deleted_details=True)
    assert (s['messages'], s['first_seq'], s['last_seq'], s['num_deleted'], s['deleted'], s['num_subjects']) == (3, 1, 5, 2, [2, 5], 2)
    assert 'deleted' not in st.state()
    if kind == 'file':
        st.stop()
        blob = b''.join(p.read_bytes() for p in st._bdir.glob('*.blk'))
        assert b'SECRET-PAYLOAD' not in blob and b'm3' in blob
    # deleting the first message moves first_seq; deleting everything leaves first past last
    st = mk(); fill(st, ['a', 'b', 'c'])
    st.remove_msg(1)
    assert st.state()['first_seq'] == 2
    st.remove_msg(3); st.remove_msg(2)
    s = st.state()
    assert (s['messages'], s['bytes'], s['first_seq'], s['last_seq'], s['first_ts']) == (0, 0, 4, 3, '0001-01-01T00:00:00Z')
    assert 'num_deleted' not in s and 'num_subjects' not in s


def test_purge_variants(mk):
    subjects = ['a', 'b.1', 'a', 'b.2', 'a', 'b.1', 'c', 'a']
    st = mk(); fill(st, subjects)
    assert st.purge() == 8
    s = st.state()
    assert (s['messages'], s['first_seq'], s['last_seq']) == (0, 9, 8)
    assert st.store_msg('a', b'', b'')[0] == 9
    st = mk(); fill(st, subjects)
    assert st.purge('b.*') == 3 and seqs(st) == [1, 3, 5, 7, 8]
    assert st.purge('a', keep=2) == 2 and seqs(st) == [5, 7, 8]
    assert st.purge('a', keep=5) == 0
    st = mk(); fill(st, subjects)
    assert st.purge('a', seq=5) == 2 and seqs(st, 'a') == [5, 8]      # below 5, exclusive
    assert st.purge('>', seq=1) == 0
    assert st.purge(seq=4) == 1 and seqs(st) == [4, 5, 6, 7, 8]         # no filter: a compaction
    assert st.purge('>', keep=2) == 3 and seqs(st) == [7, 8]
    st = mk(); fill(st, subjects)
    assert st.purge('', seq=3, keep=5) == 2 and seqs(st)[0] == 3
    st = mk(); fill(st, subjects)
    assert st.purge('*') == 5 and seqs(st) == [2, 4, 6]                 # wildcard over one token
    assert st.purge('b.1') == 2 and st.purge('b.2') == 1
    s = st.state()
    assert (s['messages'], s['first_seq'], s['last_seq']) == (0, 9, 8)


def test_compact(mk):
    st = mk(); fill(st, 'abcdef')
    assert st.compact(3) == 2 and st.state()['first_seq'] == 3
    assert st.compact(2) == 0
    st.remove_msg(4)
    assert st.compact(5) == 1 and seqs(st) == [5, 6]
    assert st.compact(20) == 2
    s = st.state()
    assert (s['messages'], s['first_seq'], s['last_seq']) == (0, 20, 19)
    assert st.store_msg('a', b'', b'')[0] == 20
    assert mk().compact(5) == 0                                          # fresh store
    st = mk(); st.compact(5)
    assert st.store_msg('a', b'', b'')[0] == 5


# ---------------------------------------------------------------- limits

def test_discard_old_limits(mk):
    st = mk(StoreLimits(max_msgs=3))
    fill(st, 'abcde')
    assert seqs(st) == [3, 4, 5] and st.state()['first_seq'] == 3
    size = st.msg_size('a', b'', b'm0')
    st = mk(StoreLimits(max_bytes=3 * size + 1))
    for i in range(6): st.store_msg('a', b'', b'm%d' % i)
    assert seqs(st) == [4, 5, 6] and st.state()['bytes'] == 3 * size
    st = mk(StoreLimits(max_msgs_per_subject=2))
    fill(st, ['k.1', 'k.2', 'k.1', 'k.1', 'k.2', 'k.1'])
    assert seqs(st) == [2, 4, 5, 6]
    assert st.subjects() == {'k.1': 2, 'k.2': 2} and seqs(st, 'k.1') == [4, 6]
    st = mk(StoreLimits(max_msgs_per_subject=1))                         # a KV: last value per key
    for i in range(50): st.store_msg(f'kv.{i % 5}', b'', b'%d' % i)
    assert st.subjects() == {f'kv.{i}': 1 for i in range(5)} and seqs(st) == list(range(46, 51))
    st = mk(StoreLimits(max_bytes=10))                                   # bigger than the limit: nothing stays
    st.store_msg('a', b'', b'x' * 50)
    assert st.state()['messages'] == 0


def test_discard_new_limits(mk):
    st = mk(StoreLimits(max_msgs=2, discard='new'))
    fill(st, 'ab')
    with pytest.raises(StoreError) as e: st.store_msg('c', b'', b'')
    assert (e.value.kind, str(e.value)) == ('max_msgs', 'maximum messages exceeded')
    assert st.state()['last_seq'] == 2
    size = st.msg_size('a', b'', b'12345')
    st = mk(StoreLimits(max_bytes=2 * size, discard='new'))
    st.store_msg('a', b'', b'12345'); st.store_msg('a', b'', b'12345')
    with pytest.raises(StoreError) as e: st.store_msg('a', b'', b'1')
    assert (e.value.kind, str(e.value)) == ('max_bytes', 'maximum bytes exceeded')
    # at the per-subject limit without discard_new_per_subject: the new message replaces the oldest
    st = mk(StoreLimits(max_msgs=2, max_msgs_per_subject=1, discard='new'))
    fill(st, ['k.1', 'k.2'])
    assert st.store_msg('k.1', b'', b'new')[0] == 3 and seqs(st) == [2, 3]
    with pytest.raises(StoreError): st.store_msg('k.3', b'', b'')
    st = mk(StoreLimits(max_msgs_per_subject=2, discard='new', discard_new_per_subject=True))
    fill(st, ['k', 'k'])
    with pytest.raises(StoreError) as e: st.store_msg('k', b'', b'')
    assert (e.value.kind, str(e.value)) == ('max_msgs_per_subject', 'maximum messages per subject exceeded')
    assert st.store_msg('other', b'', b'')[0] == 3
    rollup = b'NATS/1.0\r\nNats-Rollup: sub\r\n\r\n'
    assert st.store_msg('k', rollup, b'')[0] == 4 and seqs(st, 'k') == [2, 4]
    # with bytes: a replacement is allowed only if the replaced message is at least as big
    size = st.msg_size('k', b'', b'1234')
    st = mk(StoreLimits(max_bytes=2 * size, max_msgs_per_subject=1, discard='new'))
    st.store_msg('k', b'', b'1234'); st.store_msg('j', b'', b'1234')
    assert st.store_msg('k', b'', b'5678')[0] == 3
    with pytest.raises(StoreError) as e: st.store_msg('k', b'', b'123456789')
    assert e.value.kind == 'max_bytes'


def test_max_msg_size(mk):
    st = mk(StoreLimits(max_msg_size=10))
    st.store_msg('a', b'', b'x' * 10)
    with pytest.raises(StoreError) as e: st.store_msg('a', b'', b'x' * 11)
    assert (e.value.kind, str(e.value)) == ('max_msg_size', 'message size exceeds maximum allowed')
    with pytest.raises(StoreError): st.store_msg('a', b'NATS/1.0\r\n\r\n', b'x')   # headers count
    assert st.state()['last_seq'] == 1


def test_max_age_and_ttl(mk):
    sec = 1_000_000_000
    st = mk(StoreLimits(max_age=10 * sec))
    t0 = 1_700_000_000 * sec
    for i, ttl in enumerate([0, -1, 0, 3 * sec, 0, 0]): st.store_msg(f's.{i}', b'', b'', ts=t0 + i * sec, ttl=ttl)
    assert st.next_expiry() == t0 + 6 * sec                     # seq 4's own TTL
    assert st.expire(t0 + 5 * sec) == 0
    assert st.expire(t0 + 6 * sec) == 1 and st.load_msg(4) is None
    assert st.expire(t0 + 12 * sec) == 2 and seqs(st) == [2, 5, 6]   # seq 2 never expires
    assert st.next_expiry() == t0 + 14 * sec                    # seq 5 (seq 2 at the head never expires)
    assert st.expire(t0 + 100 * sec) == 2 and seqs(st) == [2]
    st = mk()                                                   # TTL without max_age
    st.store_msg('a', b'', b'', ts=t0, ttl=sec); st.store_msg('b', b'', b'', ts=t0)
    assert st.next_expiry() == t0 + sec and st.expire(t0 + sec) == 1 and seqs(st) == [2]
    assert st.next_expiry() is None and st.expire() == 0
    st = mk(StoreLimits(max_age=sec))                           # real clock
    st.store_msg('a', b'', b''); st.store_msg('b', b'', b'', ttl=-1)
    assert st.expire() == 0 and st.expire(time.time_ns() + 2 * sec) == 1


def test_update_limits(mk):
    st = mk()
    for i in range(30): st.store_msg(f'k.{i % 3}', b'', b'm%02d' % i)
    st.update_limits(StoreLimits(max_msgs_per_subject=4))
    assert st.subjects() == {'k.0': 4, 'k.1': 4, 'k.2': 4}
    st.update_limits(StoreLimits(max_msgs=5))
    assert seqs(st) == [26, 27, 28, 29, 30]
    size = st.msg_size('k.0', b'', b'm29')
    st.update_limits(StoreLimits(max_bytes=2 * size))
    assert seqs(st) == [29, 30]
    st.update_limits(StoreLimits(max_msgs=1, discard='new'))     # discard new: no trimming
    assert seqs(st) == [29, 30]
    with pytest.raises(StoreError): st.store_msg('x', b'', b'')
    st = mk(); fill(st, 'abc', ts0=1)                           # ancient timestamps
    st.update_limits(StoreLimits(max_age=60 * 10**9))
    assert st.state()['messages'] == 0
    st = mk(); fill(st, [f'k.{i % 2}' for i in range(1000)])    # a large trim is one vector operation
    st.update_limits(StoreLimits(max_msgs=10))
    assert seqs(st) == list(range(991, 1001))


def test_index_trim_keeps_payloads_aligned(mk):
    "Dead rows leave the index head in bulk; loads stay right across many trims."
    st = mk(StoreLimits(max_msgs=100))
    for i in range(20_000): st.store_msg(f's.{i % 13}', b'', b'%d' % i)
    assert st._ix.n < 10_000 and st._ix.seq[0] > 1
    assert [st.load_msg(q).data for q in range(19_901, 20_001)] == [b'%d' % (q - 1) for q in range(19_901, 20_001)]
    assert st.load_msg(19_900) is None and seqs(st)[0] == 19_901
    assert st.num_pending(0, 's.0') == len([q for q in range(19_901, 20_001) if (q - 1) % 13 == 0])


def test_first_seq(mk):
    st = mk(StoreLimits(first_seq=1000))
    s = st.state()
    assert (s['first_seq'], s['last_seq']) == (1000, 999)
    assert st.store_msg('a', b'', b'')[0] == 1000


# ---------------------------------------------------------------- state and counts

def test_state_fields(mk):
    st = mk()
    t0 = 1_700_000_000_000_000_000
    assert st.state() == {'messages': 0, 'bytes': 0, 'first_seq': 0, 'first_ts': '0001-01-01T00:00:00Z',
                          'last_seq': 0, 'last_ts': '0001-01-01T00:00:00Z'}
    fill(st, ['a', 'b', 'a', 'c', 'd'], ts0=t0)
    st.remove_msg(2); st.remove_msg(4)
    size = sum(st.msg_size(s, H if i % 2 else b'', b'm%d' % i) for i, s in enumerate('abacd') if i not in (1, 3))
    assert st.state(deleted_details=True) == {
        'messages': 3, 'bytes': size, 'first_seq': 1, 'first_ts': '2023-11-14T22:13:20Z', 'last_seq': 5,
        'last_ts': '2023-11-14T22:13:20.000000004Z', 'num_subjects': 2, 'num_deleted': 2, 'deleted': [2, 4]}
    assert list(st.state()) == ['messages', 'bytes', 'first_seq', 'first_ts', 'last_seq', 'last_ts', 'num_subjects', 'num_deleted']
    st.purge()
    assert st.state()['last_ts'] == '2023-11-14T22:13:20.000000004Z'   # purging keeps the last time
    assert json.dumps(st.state())                                       # plain JSON types


def test_msg_size(kind, mk):
    st = mk()
    want = mem_msg_size if kind == 'memory' else file_msg_size
    assert st.msg_size('S.abc', H, b'hello world') == want('S.abc', H, b'hello world')
    assert mem_msg_size('S.a', b'', b'hello') == 24 and file_msg_size('S.a', b'', b'hello') == 38
    assert file_msg_size('S.a', H, b'hello') == 38 + 4 + len(H)


def test_subjects_and_num_pending(mk):
    st = mk()
    fill(st, ['o.a', 'o.b', 'x', 'o.a', 'o.b.c', 'o.a', 'x'])
    assert st.subjects() == {'o.a': 3, 'o.b': 1, 'x': 2, 'o.b.c': 1}
    assert st.subjects('o.*') == {'o.a': 3, 'o.b': 1} and st.subjects('o.>') == {'o.a': 3, 'o.b': 1, 'o.b.c': 1}
    assert st.subjects('x') == {'x': 2} and st.subjects('zz') == {}
    assert [st.num_pending(s) for s in (0, 1, 4, 7, 8)] == [7, 7, 4, 1, 0]
    assert [st.num_pending(s, 'o.a') for s in (0, 2, 5, 7)] == [3, 2, 1, 0]
    assert [st.num_pending(s, 'o.*') for s in (0, 3, 6)] == [4, 2, 1]
    assert st.num_pending(0, 'nope') == 0
    assert [st.num_pending(s, '', True) for s in (0, 5, 6, 7)] == [4, 3, 2, 1]
    assert [st.num_pending(s, 'o.>', True) for s in (0, 5, 6)] == [3, 2, 1]
    st.remove_msg(6); st.remove_msg(1)
    assert st.num_pending(0, 'o.a') == 1 and st.num_pending(0, 'o.a', True) == 1
    assert st.subjects('o.a') == {'o.a': 1}


def test_closed(mk):
    st = mk(); fill(st, 'ab'); st.stop()
    for call in [lambda: st.store_msg('a', b'', b''), lambda: st.load_msg(1), lambda: st.state(), lambda: st.purge()]:
        with pytest.raises(StoreError) as e: call()
        assert e.value.kind == 'closed'
    st.stop()                                                             # idempotent


def test_meta(mk):
    st = mk()
    assert st.read_meta() is None
    st.write_meta({'name': 'S', 'subjects': ['a.>']}); st.write_meta({'name': 'S', 'max_msgs': 5})
    assert st.read_meta() == {'name': 'S', 'max_msgs': 5}


def test_randomised_against_model(mk):
    "Random operations against a dict model, with every limit kind switched on at some point."
    rnd = random.Random(11)
    st, model = mk(StoreLimits(max_msgs_per_subject=30)), {}
    subjects = ['a.1', 'a.2', 'b.1', 'b.2.x', 'c']
    for step in range(3000):
        op = rnd.random()
        if op < 0.75:
            s = rnd.choice(subjects); seq, _ = st.store_msg(s, b'', b'%d' % step); model[seq] = (s, b'%d' % step)
            for q in sorted(q for q in model if model[q][0] == s)[:-30]: del model[q]
        elif op < 0.9 and model:
            q = rnd.choice(list(model)); assert st.remove_msg(q, erase=rnd.random() < 0.3); del model[q]
        elif op < 0.95:
            f = rnd.choice(['a.*', 'b.>', 'c', '>']); keep = rnd.randint(0, 5)
            hit = sorted(q for q in model if matches(f)(model[q][0]))
            n = st.purge(f, keep=keep)
            gone = hit[:len(hit) - keep] if keep < len(hit) else []
            assert n == len(gone)
            for q in gone: del model[q]
        elif st.state()['last_seq'] > 50:
            c = st.state()['last_seq'] - rnd.randint(0, 40)
            st.compact(c)
            for q in [q for q in model if q < c]: del model[q]
        if step % 300 == 0:
            s = st.state()
            assert s['messages'] == len(model) and s['first_seq'] == min(model, default=s['last_seq'] + 1)
            for f in ['a.*', 'b.>', '>', 'c']:
                hit = sorted(q for q in model if matches(f)(model[q][0]))
                assert seqs(st, f) == hit and st.num_pending(0, f) == len(hit)
            for q, (s_, d) in list(model.items())[:50]:
                m = st.load_msg(q); assert (m.subject, m.data) == (s_, d)


def test_randomised_with_sparse_index(mk, monkeypatch):
    "Dead rows dropped as soon as there are 8, skips between messages: every query on a sparse index, against a model."
    from jsnb.js.index import Index
    real = Index.trim
    monkeypatch.setattr(Index, 'trim', lambda self, min_rows=8: real(self, min_rows))
    rnd = random.Random(5)
    st, model, ts = mk(StoreLimits(max_msgs_per_subject=3)), {}, 0
    subjects = ['k.stable', 'k.a', 'k.b', 'o.c']
    for step in range(4000):
        op = rnd.random()
        if op < 0.8:
            s = rnd.choice(subjects[1:]) if step else 'k.stable'; ts += 10
            seq, _ = st.store_msg(s, b'', b'%d' % step, ts=ts); model[seq] = (s, b'%d' % step, ts)
            for q in sorted(q for q in model if model[q][0] == s)[:-3]: del model[q]
        elif op < 0.9: st.skip_msg()
        elif len(model) > 1:
            q = rnd.choice(sorted(model)[1:]); assert st.remove_msg(q); del model[q]
        if step % 97 == 0 or step == 3999:
            s = st.state(deleted_details=True)
            first, last = min(model), s['last_seq']
            assert (s['messages'], s['first_seq']) == (len(model), first)
            assert s.get('deleted', []) == [q for q in range(first, last + 1) if q not in model]
            assert st._ix.n - st._ix.msgs < 16                          # dead rows do not pile up
            for f in ['k.*', 'k.a', '>', 'o.c']:
                hit = sorted(q for q in model if matches(f)(model[q][0]))
                assert seqs(st, f) == hit and st.num_pending(0, f) == len(hit)
                assert getattr(st.load_last_msg(f), 'seq', None) == (hit[-1] if hit else None)
            for q in rnd.sample(range(1, last + 2), min(20, last + 1)):
                m = st.load_msg(q)
                assert (m.subject, m.data, m.ts) == model[q] if q in model else m is None
                prev = [p for p in model if p <= q]
                assert getattr(st.load_prev_msg(q), 'seq', None) == (max(prev) if prev else None)
                later = [p for p in model if model[p][2] >= ts - 50 * (q % 7)]
                assert st.seq_from_time(ts - 50 * (q % 7)) == (min(later) if later else last + 1)
            ml = st.multi_last(['k.>'], last)
            assert [m.seq for m in ml] == sorted(max(q for q in model if model[q][0] == k) for k in {v[0] for v in model.values() if v[0].startswith('k.')})


def matches(f):
    return (lambda s: True) if f in ('', '>') else (lambda s: subject_matches(s, f))


# ---------------------------------------------------------------- file store: restart, corruption, crash

def snapshot(st):
    return st.state(deleted_details=True), st.subjects(), [st.load_msg(s) for s in range(1, st.state()['last_seq'] + 1)]


def live_ttls(st):
    ix = st._ix; live = ~ix.dead[:ix.n]
    return dict(zip(ix.seq[:ix.n][live].tolist(), ix.ttl[:ix.n][live].tolist()))


def test_restart_brings_everything_back(tmp_path):
    d = tmp_path / 'S'
    st = FileStore(d, StoreLimits(max_msgs_per_subject=5), block_size=1024)
    rnd = random.Random(5)
    for i in range(300):
        hdr = b'NATS/1.0\r\nNats-Msg-Id: %d\r\n\r\n' % i if i % 3 else b''
        st.store_msg(f'o.{rnd.randint(0, 40)}', hdr, os.urandom(rnd.randint(0, 200)), ttl=-1 if i % 7 == 0 else 0)
    st.store_msgs([('batch', b'', b'%d' % i) for i in range(20)])
    st.skip_msg()
    for q in range(150, 200, 3): st.remove_msg(q, erase=q % 2 == 0)
    st.purge('o.1'); st.purge('o.2', keep=1)
    st.write_meta({'name': 'S', 'storage': 'file'})
    before, ttl_before = snapshot(st), live_ttls(st)
    assert len(st._blocks) > 5 and before[0]['num_deleted'] > 0
    st.stop()
    st = FileStore(d, StoreLimits(max_msgs_per_subject=5), block_size=1024)
    assert snapshot(st) == before and live_ttls(st) == ttl_before
    assert st.read_meta() == {'name': 'S', 'storage': 'file'}
    assert (st.lost, st.truncated) == (0, 0)
    assert st.num_pending(0, 'o.*') == sum(before[1][k] for k in before[1] if k.startswith('o.'))
    assert st.store_msg('after', b'', b'x')[0] == before[0]['last_seq'] + 1
    st.stop()


def test_restart_after_purge_and_compact(tmp_path):
    d = tmp_path / 'S'
    st = FileStore(d, block_size=512)
    for i in range(100): st.store_msg('a', b'', b'%03d' % i)
    st.compact(60); st.remove_msg(70); st.stop()
    st = FileStore(d, block_size=512)
    s = st.state(deleted_details=True)
    assert (s['messages'], s['first_seq'], s['last_seq'], s['deleted']) == (40, 60, 100, [70])
    assert min(st._blocks) > 1                          # leading blocks were removed
    st.purge(); st.stop()
    st = FileStore(d, block_size=512)
    s = st.state()
    assert (s['messages'], s['first_seq'], s['last_seq']) == (0, 101, 100)
    assert s['last_ts'] != '0001-01-01T00:00:00Z'
    st.compact(500); st.stop()
    st = FileStore(d)
    assert (st.state()['first_seq'], st.store_msg('a', b'', b'')[0]) == (500, 500)
    st.stop()


def test_discard_old_removes_leading_blocks(tmp_path):
    st = FileStore(tmp_path / 'S', StoreLimits(max_msgs=10), block_size=1024)
    for i in range(2000): st.store_msg('a', b'', b'x' * 20)
    files = list(st._bdir.glob('*.blk'))
    assert len(files) <= 3 and sum(p.stat().st_size for p in files) < 4096
    st.stop()
    st = FileStore(tmp_path / 'S', StoreLimits(max_msgs=10))
    assert seqs(st) == list(range(1991, 2001))
    st.stop()


def test_reopen_with_lower_limits_trims(tmp_path):
    st = FileStore(tmp_path / 'S'); fill(st, 'abcdefgh'); st.stop()
    st = FileStore(tmp_path / 'S', StoreLimits(max_msgs=3))
    assert seqs(st) == [6, 7, 8]
    st.stop()


def _last_block(st): return st._path(max(st._blocks))


@pytest.mark.parametrize('damage', ['truncate', 'garbage', 'flip', 'zeros'])
def test_torn_tail_is_cut(tmp_path, damage, caplog):
    "A torn or garbled end of the last block is cut off; the sequences it held are never given out again."
    d = tmp_path / 'S'
    st = FileStore(d)
    for i in range(10): st.store_msg('a', H, b'payload-%d' % i)
    st.stop()
    p = _last_block(st); data = p.read_bytes()
    rec = records.HDR + 1 + len(H) + len(b'payload-9')
    if damage == 'truncate': p.write_bytes(data[:-5])
    elif damage == 'garbage': p.write_bytes(data + b'\x99\x00\x00')
    elif damage == 'flip': p.write_bytes(data[:-2] + bytes([data[-2] ^ 1]) + data[-1:])
    else: p.write_bytes(data + bytes(4096))
    caplog.set_level('WARNING', logger='jsnb')
    st = FileStore(d)
    kept = 10 if damage in ('garbage', 'zeros') else 9
    assert st.state()['last_seq'] == 10 and st.state()['messages'] == kept
    assert [st.load_msg(s).data for s in range(1, kept + 1)] == [b'payload-%d' % i for i in range(kept)]
    assert p.stat().st_size == (len(data) if kept == 10 else len(data) - rec)
    assert [r.levelname for r in caplog.records] and all(r.levelname == 'WARNING' for r in caplog.records)
    if kept == 9: assert 'lost sequences 10..10' in caplog.text
    assert st.store_msg('a', b'', b'next')[0] == 11
    st.stop()
    caplog.clear()
    st = FileStore(d)
    assert st.load_msg(11).data == b'next' and st.truncated == 0 and st.damage == [] and not caplog.records
    st.stop()


def test_damaged_record_in_the_middle_is_skipped(tmp_path):
    d = tmp_path / 'S'
    st = FileStore(d)
    for i in range(5): st.store_msg('a', b'', b'payload-%d' % i)
    off = int(st._ix.off[st._ix.row(3)]); st.stop()
    p = _last_block(st); data = bytearray(p.read_bytes())
    data[off + records.HDR + 3] ^= 0xff
    p.write_bytes(bytes(data))
    st = FileStore(d)
    assert st.lost == 1 and st.load_msg(3) is None
    assert [st.load_msg(s).data for s in (1, 2, 4, 5)] == [b'payload-%d' % i for i in (0, 1, 3, 4)]
    assert st.state()['last_seq'] == 5
    st.stop()


def test_sync_options(tmp_path, monkeypatch):
    calls = []
    real = os.fdatasync
    monkeypatch.setattr(fsmod.os, 'fdatasync', lambda fd: calls.append(fd) or real(fd))
    st = FileStore(tmp_path / 'a', sync_always=True)
    calls.clear(); st.store_msg('a', b'', b''); st.store_msgs([('a', b'', b'')] * 10)
    assert len(calls) == 2                                # one per call, before it returns
    st.stop()
    st = FileStore(tmp_path / 'b', sync_interval=3600)
    calls.clear()
    for _ in range(20): st.store_msg('a', b'', b'')
    assert calls == [] and st._dirty
    st.sync(); assert len(calls) == 1 and not st._dirty
    st.sync(); assert len(calls) == 1                     # nothing new to sync
    st._synced -= 7200; st.store_msg('a', b'', b'')       # the interval has passed
    assert len(calls) == 2
    st.stop()


def test_meta_is_atomic(tmp_path):
    st = FileStore(tmp_path / 'S')
    for i in range(5): st.write_meta({'name': 'S', 'v': i})
    st.stop()
    assert sorted(p.name for p in (tmp_path / 'S').iterdir()) == ['meta.json', 'msgs']
    assert FileStore(tmp_path / 'S').read_meta() == {'name': 'S', 'v': 4}


def test_delete_removes_directory(tmp_path):
    st = FileStore(tmp_path / 'S'); fill(st, 'ab'); st.delete()
    assert not (tmp_path / 'S').exists()


WRITER = r'''
import sys
from jsnb.js.filestore import FileStore
def body(seq): return (b'%d-' % seq) * (seq % 37 + 1)
def hdr(seq): return b'NATS/1.0\r\nN: %d\r\n\r\n' % seq
fs = FileStore(sys.argv[1], sync_always=True, block_size=32 * 1024)
nxt = fs.state()['last_seq'] + 1
print('ready', flush=True)
while True:
    if nxt % 10 == 0:
        batch = [('c.%d' % (s % 7), hdr(s), body(s)) for s in range(nxt, nxt + 5)]
        for seq, ts in fs.store_msgs(batch):
            assert seq == nxt; print(seq, ts, flush=True); nxt += 1
    else:
        seq, ts = fs.store_msg('c.%d' % (nxt % 7), hdr(nxt), body(nxt))
        assert seq == nxt; print(seq, ts, flush=True); nxt += 1
'''


def test_crash_keeps_every_acknowledged_message(tmp_path):
    "SIGKILL a writer mid-run (three times); every message it acknowledged is there and intact."
    d = tmp_path / 'S'
    acked: dict[int, int] = {}
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    for rnd, run_for in enumerate([0.6, 0.35, 0.8]):
        p = subprocess.Popen([sys.executable, '-c', WRITER, str(d)], stdout=subprocess.PIPE, env=env, cwd=ROOT)
        assert p.stdout.readline().strip() == b'ready'
        os.set_blocking(p.stdout.fileno(), False)
        time.sleep(run_for)
        os.kill(p.pid, signal.SIGKILL); p.wait()
        out = b''
        while chunk := p.stdout.read(): out += chunk
        p.stdout.close()
        lines = out.decode().split('\n')[:-1]                       # drop a line cut by the kill
        for line in lines:
            seq, ts = map(int, line.split()); acked[seq] = ts
        st = FileStore(d, block_size=32 * 1024)
        assert acked and st.state()['last_seq'] >= max(acked)
        for seq, ts in acked.items():
            m = st.load_msg(seq)
            assert m is not None, (rnd, seq)
            assert (m.subject, m.ts, m.hdr, m.data) == ('c.%d' % (seq % 7), ts, b'NATS/1.0\r\nN: %d\r\n\r\n' % seq, (b'%d-' % seq) * (seq % 37 + 1))
        assert st.state()['messages'] == st.state()['last_seq']       # no holes
        st.stop()
    assert len(acked) > 100, len(acked)


# ---------------------------------------------------------------- against the reference

def _hdr(h):
    "Header bytes exactly as the client library sends them."
    return b'' if not h else b'NATS/1.0\r\n' + b''.join(b'%s: %s\r\n' % (k.encode(), v.encode()) for k, v in h.items()) + b'\r\n'


SCENARIO = [
    ('pub', 'a', None, b'hello'), ('pub', 'abc', {'X-Foo': 'bar'}, b'hello world'),
    ('pub', 'abc', {'X-Foo': 'bar', 'Nats-Msg-Id': 'x1'}, b''), ('pub', 'e', None, b''),
    ('pub', 'b.1', {'K': 'v' * 40}, b'x' * 300), ('pub', 'b.2', None, b'y' * 7), ('pub', 'a', None, b'again'),
    ('pub', 'b.1', None, b'z'), ('pub', 'c.d.e', {'A': '1', 'B': '2'}, b'deep'), ('pub', 'a', None, b'last a'),
    ('check',),
    ('del', 3, True), ('del', 1, False), ('check',),
    ('purge', 'b.*', 0, 1), ('check',),
    ('purge', 'a', 8, 0), ('check',),
    ('purge', '', 6, 0), ('check',),
    ('pub', 'new', {'X': 'y'}, b'after'), ('del', 11, False), ('check',),
    ('purge', '', 0, 0), ('check',),
    ('pub', 'a', None, b'fresh'), ('check',),
]


def test_accounting_and_state_match_reference(start_server, tmp_path):
    "The same operations on the reference (memory and file streams) and on our stores give the same state."
    srv = start_server('nats-server', '-js', '-sd', str(tmp_path / 'js'))
    import nats

    async def run():
        nc = await nats.connect(srv.url)
        async def api(subj, req):
            r = await nc.request(subj, json.dumps(req).encode(), timeout=5)
            resp = json.loads(r.data); assert 'error' not in resp, resp; return resp
        for storage, ours in [('memory', MemStore()), ('file', FileStore(tmp_path / 'ours', block_size=256))]:
            name = f'S{storage}'
            await api(f'$JS.API.STREAM.CREATE.{name}', {'name': name, 'subjects': [f'{name}.>'], 'storage': storage})
            for op in SCENARIO:
                if op[0] == 'pub':
                    _, s, h, data = op
                    ack = json.loads((await nc.request(f'{name}.{s}', data, headers=h, timeout=5)).data)
                    assert ours.store_msg(f'{name}.{s}', _hdr(h), data)[0] == ack['seq']
                elif op[0] == 'del':
                    await api(f'$JS.API.STREAM.MSG.DELETE.{name}', {'seq': op[1], 'no_erase': not op[2]})
                    assert ours.remove_msg(op[1], erase=op[2])
                elif op[0] == 'purge':
                    _, f, seq, keep = op
                    req = {k: v for k, v in [('filter', f and f'{name}.{f}'), ('seq', seq), ('keep', keep)] if v}
                    resp = await api(f'$JS.API.STREAM.PURGE.{name}', req)
                    assert ours.purge(f and f'{name}.{f}', seq, keep) == resp['purged'], op
                else:
                    info = await api(f'$JS.API.STREAM.INFO.{name}', {'deleted_details': True, 'subjects_filter': '>'})
                    ref = info['state']
                    subjects = ref.pop('subjects', {}); ref.pop('consumer_count')
                    mine = ours.state(deleted_details=True)
                    for k in ('first_ts', 'last_ts'):
                        assert (ref.pop(k) == '0001-01-01T00:00:00Z') == (mine.pop(k) == '0001-01-01T00:00:00Z'), k
                    assert mine == ref, (storage, op)
                    assert ours.subjects() == subjects
            ours.stop()
        await nc.close()

    asyncio.run(run())


def test_ttl_expiry_follows_the_deadline_heap():
    "Per-message TTLs are found from a deadline heap: expiring touches only what expires."
    from jsnb.js.store import MemStore
    s = MemStore()
    for i in range(20_000): s.store_msg('plain', b'', b'x', ts=i)
    for i in range(10): s.store_msg('short', b'', b'y', ts=20_000 + i, ttl=100)
    for i in range(10): s.store_msg('long', b'', b'z', ts=20_000 + i, ttl=10_000_000)
    assert len(s._ix.ttl_heap) == 20
    assert s.expire(now_ns=20_200) == 10
    assert len(s._ix.ttl_heap) == 10 and s.state()['messages'] == 20_010
    assert s.next_expiry() == 20_000 + 10_000_000
