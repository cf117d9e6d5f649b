"""Every compiled scan kernel agrees with its numpy twin (property-based, over adversarial indexes),
and the stores give the same answers with the kernels switched off (`JSNB_NO_JIT=1`)."""
import os, subprocess, sys
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from jsnb.js import kernels

@st.composite
def indexes(draw):
    "A random index: dead flags, subject ids, store times, TTLs, a filter and a row range."
    n = draw(st.integers(0, 300))
    nsub = draw(st.integers(1, 8))
    dead = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.bool_)
    sid = np.array(draw(st.lists(st.integers(0, nsub - 1), min_size=n, max_size=n)), np.int32)
    ts = np.sort(np.array(draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n)), np.int64))
    ttl = np.array(draw(st.lists(st.sampled_from([-1, 0, 7]), min_size=n, max_size=n)), np.int64)
    shape = draw(st.sampled_from(['all', 'one', 'mask']))
    if shape == 'all': want = None
    elif shape == 'one': want = draw(st.integers(-1, nsub - 1))
    else: want = np.array(draw(st.lists(st.booleans(), min_size=nsub, max_size=nsub)), np.bool_)
    a = draw(st.integers(0, n)); b = draw(st.integers(a, n))
    return dead, sid, ts, ttl, want, a, b, nsub, draw(st.integers(-1, 1001))

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(indexes())
def test_kernels_agree_with_twins(ix):
    jit, twin = kernels._twins(*ix)
    assert jit == twin

@settings(max_examples=100, deadline=None)
@given(indexes(), st.integers(1, 5000))
def test_long_one_subject_scans_agree(ix, pad):
    "Scans for one subject longer than the compiled window hand over to numpy without losing a row."
    dead, sid, ts, ttl, _, _, _, nsub, cutoff = ix
    kernels.warm()
    dead = np.concatenate([np.zeros(pad, np.bool_), dead]); sid = np.concatenate([np.full(pad, nsub, np.int32), sid])
    n = len(dead)
    for want in range(nsub):
        hits = np.flatnonzero(~dead & (sid == want))
        assert kernels.next_row(dead, sid, want, 0, n) == (hits[0] if len(hits) else -1)
        assert kernels.prev_row(dead, sid, want, 0, n) == (hits[-1] if len(hits) else -1)

def test_multi_last_matches_a_model():
    "The store's multi-last (kernel path) against a dictionary model, across bounds."
    from jsnb.js.store import MemStore
    assert kernels.warm() >= 0 and kernels.JIT
    rng = np.random.default_rng(5)
    ms, model = MemStore(), []
    for i in range(3000):
        s = f'k.{int(rng.integers(0, 200))}'
        ms.store_msg(s, b'', b'%d' % i); model.append(s)
    for seq in rng.integers(1, 3001, 40).tolist(): ms.remove_msg(seq); model[seq - 1] = None
    for up_to in [1, 10, 500, 1500, 2999, 3000, 5000]:
        for start in [0, 1, 700]:
            want = {}
            for seq, s in enumerate(model, 1):
                if s is not None and start <= seq <= up_to: want[s] = seq
            got = ms.multi_last(['k.*'], up_to, limit=1024, start=start)
            assert [m.seq for m in got] == sorted(want.values())
    assert ms.multi_last(['k.*'], 3000, limit=10) is None

def test_stores_without_jit():
    "The store notebook and store tests pass with the kernels switched off."
    env = dict(os.environ, JSNB_NO_JIT='1')
    r = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:cacheprovider', 'tests/test_stores.py',
                        '-k', 'not crash', '--override-ini', 'addopts='], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    code = 'import jsnb.js.kernels as k; print(k.WANTED, k.warm(), k.JIT)'
    assert subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True).stdout.strip() == 'False 0.0 False'

def test_kernel_cache_outside_the_package(tmp_path):
    "Compiled kernels (the server's and the benchmark client's) are cached in the user's cache, never in the package."
    pkg = os.path.join(os.path.dirname(kernels.__file__), '__pycache__')
    def numba_files(): return {f for f in os.listdir(pkg) if '.nb' in f} if os.path.isdir(pkg) else set()
    before = numba_files()
    env = dict(os.environ, JSNB_CACHE_DIR=str(tmp_path), JSNB_NO_JIT='', JSNB_AOT='0')     # (numba's cache: compiled here)
    code = ('import numpy as np, jsnb.js.kernels as k, jsnb.bench.client as b; '
            'print(k.warm() >= 0, k.JIT, b.scan_frames(b"PONG\\r\\n", 0, np.zeros((4, b.NCOLS), np.int64)) == (1, 6))')
    r = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True)
    assert r.stdout.split() == ['True', 'True', 'True'], r.stderr
    assert numba_files() == before
    cached = [p.name for p in (tmp_path / 'numba').rglob('*.nbi')]
    assert any('kernels' in n for n in cached) and any(n.startswith('client.') for n in cached), cached


# The frame kernels write what their Python twins write, byte for byte (jsnb.js.frames, jsnb.js.records).
@st.composite
def stored_msgs(draw, ascii_only=True):
    "Stored messages in sequence order: subjects, header blocks (or none), payloads, times that repeat and cross the calendar."
    from jsnb.js.store import StoreMsg
    n = draw(st.integers(1, 40))
    seq = draw(st.integers(1, 2**40)); out = []
    times = st.sampled_from([0, 10, 1_709_164_800 * 10**9, 1_700_000_000_123_456_789, 4_102_444_799 * 10**9 + 1, 951_782_400 * 10**9 + 7])
    for i in range(n):
        subj = draw(st.from_regex(r'[a-z]{1,6}(\.[a-z0-9]{1,4}){0,3}', fullmatch=True) if ascii_only else st.sampled_from(['o.a', 'o.ü']))
        hdr = draw(st.sampled_from([b'', b'NATS/1.0\r\n\r\n', b'NATS/1.0\r\nNats-Msg-Id: x%d\r\n\r\n' % i]))
        out.append(StoreMsg(subj, seq, draw(times), hdr, draw(st.binary(max_size=60))))
        seq += draw(st.integers(1, 3))
    return out

@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stored_msgs(), st.integers(1, 10**9), st.integers(0, 50))
def test_run_frames_kernel_is_its_twin(msgs, dseq, pending):
    from jsnb.js.frames import RUN_MIN, ack_prefix, encode_run, run_frames, encode_frames
    kernels.warm()
    pfx = ack_prefix('S', 'C', 1)
    run = encode_run(msgs, b'42', pfx, dseq, pending)
    if len(msgs) < RUN_MIN: assert run is None; return
    out, ends, sizes, _ = run
    twin = run_frames('_I', msgs, pfx, dseq, pending)
    assert out[:ends[-1]].tobytes() == encode_frames(twin, b'42')
    assert sizes.tolist() == [len(s) + len(r) + len(h) + len(d) for _, s, r, h, d in twin]

@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stored_msgs(ascii_only=False), st.integers(0, 100))
def test_direct_batch_kernel_is_its_twin(msgs, pending):
    from jsnb.js.frames import direct_batch, direct_headers
    from jsnb.nats.protocol import wire
    from jsnb.nats.frames import msg_frame
    kernels.warm()
    buf, cols = b'', []
    for m in msgs:
        s = wire(m.subject); at = len(buf) + 3
        buf += b'abc' + s + m.hdr + m.data
        cols.append((at, len(s), at + len(s), len(m.hdr), at + len(s) + len(m.hdr), len(m.data), m.seq, m.ts))
    twin = b''.join(msg_frame(b'_I', b'7', b'', len(h), h + m.data)
                    for i, m in enumerate(msgs) for h in [direct_headers(b'S', m, max(pending - i - 1, 0), msgs[i - 1].seq if i else 0)])
    assert direct_batch(buf, np.array(cols, np.int64), b'_I', b'7', b'S', pending) == twin

@settings(max_examples=100, deadline=None)
@given(stored_msgs())
def test_write_records_kernel_is_its_twin(msgs):
    from jsnb.js.records import MSG, record, write_records
    from jsnb.js.index import lengths
    kernels.warm()
    subs, hdrs, datas = [m.subject.encode() for m in msgs], [m.hdr for m in msgs], [m.data for m in msgs]
    out = write_records(b''.join(s + h + d for s, h, d in zip(subs, hdrs, datas)), lengths(subs), lengths(hdrs), lengths(datas), 7, msgs[0].ts)
    assert out.tobytes() == b''.join(record(MSG, 7 + i, msgs[0].ts, 0, s, h, d) for i, (s, h, d) in enumerate(zip(subs, hdrs, datas)))
    each = np.array([m.ts for m in msgs], np.int64)                     # each message at its own time (a restore's)
    out = write_records(b''.join(s + h + d for s, h, d in zip(subs, hdrs, datas)), lengths(subs), lengths(hdrs), lengths(datas), 7, each)
    assert out.tobytes() == b''.join(record(MSG, 7 + i, m.ts, 0, s, h, d) for i, (m, s, h, d) in enumerate(zip(msgs, subs, hdrs, datas)))
