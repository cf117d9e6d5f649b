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
    env = dict(os.environ, JSNB_CACHE_DIR=str(tmp_path), JSNB_NO_JIT='')
    code = ('import numpy as np, jsnb.js.kernels as k, jsnb.bench.client as b; '
            'print(k.warm() >= 0, k.JIT, b.scan_frames(b"PONG\\r\\n", 0, np.zeros((4, b.NCOLS), np.int64)) == (1, 6))')
    r = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True)
    assert r.stdout.split() == ['True', 'True', 'True'], r.stderr
    assert numba_files() == before
    cached = [p.name for p in (tmp_path / 'numba').rglob('*.nbi')]
    assert any('kernels' in n for n in cached) and any(n.startswith('client.') for n in cached), cached
