"""The kernels built ahead of time: loaded without numba, equal to their twins, run without the interpreter lock, and a
failed build leaves the server compiling them itself. Each check runs in a process of its own: one that imported numba
(or loaded the built module) could not show what a fresh server does."""
import os, subprocess, sys, textwrap
import pytest
from jsnb.js import kernels

pytestmark = pytest.mark.skipif(not kernels.WANTED, reason='the kernels are off (numba missing, or JSNB_NO_JIT set)')

def run(code: str, timeout: float = 900, **env) -> list[str]:
    "The lines `code` prints, run by a fresh interpreter with `env` added."
    e = {**{k: v for k, v in os.environ.items() if k not in ('JSNB_AOT', 'JSNB_JIT_AT_START')}, **env}
    r = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=e)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()

def test_every_module_with_kernels_is_built():
    "The build imports `KERNEL_MODULES`: a module that registers kernels and is not listed would be compiled in-process."
    out = run('''
        import jsnb.js.api, jsnb.js.kernels as k
        print(sorted({g['__name__'] for g, _, _ in k._ELSEWHERE} | {m for m, _, _ in k._OWN} | {k.__name__}) == sorted(k.KERNEL_MODULES))
    ''')
    assert out == ['True']

def test_built_kernels_agree_with_twins_without_numba():
    out = run('''
        import sys, zlib, numpy as np, jsnb.js.api, jsnb.js.kernels as k, jsnb.js.archive as a, jsnb.js.records as r
        k.warm(); a.warm()
        print(k.built() is not None, a.compiled(), 'numba' in sys.modules, 'llvmlite' in sys.modules)
        rng, bad = np.random.default_rng(11), 0
        for _ in range(300):
            n, nsub = int(rng.integers(0, 60)), int(rng.integers(1, 6))
            dead, sid = rng.random(n) < 0.4, rng.integers(0, nsub, n).astype(np.int32)
            ts, ttl = np.sort(rng.integers(0, 100, n)), rng.choice([-1, 0, 5], n).astype(np.int64)
            lo, hi = sorted(rng.integers(0, n + 1, 2).tolist())
            for want in (None, int(rng.integers(-1, nsub)), rng.random(nsub) < 0.5):
                built, twin = k._twins(dead, sid, ts, ttl, want, lo, hi, nsub, int(rng.integers(0, 100)))
                bad += built != twin
        data = rng.integers(0, 256, 300_000).astype(np.uint8).tobytes()
        c = a._JITTED['_crc_loop'](np.frombuffer(data, np.uint8), 0xffffffff, a._CRC_T)
        bad += int(c) != a._crc_py(data, 0xffffffff)
        bad += int(r._crc(np.frombuffer(data, np.uint8), 0, len(data), 0xffffffff, r.CRC_IEEE)) ^ 0xffffffff != zlib.crc32(data)
        text = b''.join(b'{"order": %d, "status": "paid"}' % i for i in range(20000))
        bad += a.S2Reader().feed(a.S2_HEADER + a.s2_frames(text, header=False)) != text
        print(bad)
    ''')
    assert out == ['True', 'True', 'False', 'False', '0']

def test_built_kernels_run_beside_python():
    """A built kernel lets go of the interpreter lock while it runs. With no forced hand-over (a switch interval of 100 s),
    the main thread, woken by the worker just before its calls, runs only once the worker lets go: during the calls if
    they release the lock, after the last one if they held it (a kernel compiled without `nogil` prints False here)."""
    out = run('''
        import sys, threading, numpy as np, jsnb.js.archive as a
        a.warm(); k = a._JITTED['_crc_loop']
        big = np.frombuffer(bytes(64 << 20), np.uint8)
        sys.setswitchinterval(100)
        started, finished = threading.Event(), []
        def work():
            started.set()
            for _ in range(8): k(big, 0, a._CRC_T)
            finished.append(True)
        t = threading.Thread(target=work); t.start(); started.wait(); print(not finished); t.join()
    ''')
    assert out == ['True']

def test_a_failed_build_compiles_in_the_process(tmp_path):
    "A build that failed is not tried again: the server says why, once, and compiles the kernels itself."
    code = '''
        import os, sys, jsnb.js.kernels as k
        os.makedirs(os.path.dirname(k.ahead_path()), exist_ok=True)
        open(k.ahead_path() + '.failed', 'w').write('no C compiler')
        print(k.warm() >= 0, k.JIT, k.built() is None, 'numba' in sys.modules)
    '''
    e = {**{k: v for k, v in os.environ.items() if k not in ('JSNB_AOT', 'JSNB_JIT_AT_START')}, 'JSNB_CACHE_DIR': str(tmp_path)}
    r = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True, timeout=900, env=e)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ['True', 'True', 'True', 'True']
    assert r.stderr.count('not built ahead of time (no C compiler; delete ') == 1, r.stderr     # (the file that says so)

def test_starting_a_warm_never_waits_for_a_compile():
    """The event loop starts the background warm (`warm_in_background`) while another thread may hold the compile lock for
    the seconds of a compile or build (the snapshot kernels' warm does): it must not wait for it. Here the caller holds
    that lock itself, so waiting for it would never end."""
    out = run('''
        import jsnb.js.kernels as k
        k.lock.acquire()
        t = k.warm_in_background(); print(t.is_alive())
        k.lock.release(); t.join(); print(k.JIT == k.WANTED)
    ''', timeout=300)
    assert out == ['True', 'True']

def test_a_machines_first_build(tmp_path):
    """From an empty cache (numba's too), as on a fresh machine: the server's start sets the build going and goes on, the
    build writes every kernel (numba compiled a helper other kernels call in several forms: the one built is its trial's),
    and the server never imports numba."""
    out = run('''
        import os, sys, jsnb.js.api, jsnb.js.kernels as k, jsnb.js.archive as a
        print(k.load_built(), k.built() is not None, a.warm() is not None and a.compiled(), k.warm() >= 0 and k.JIT)
        print('numba' in sys.modules, os.path.exists(k.ahead_path() + '.failed'), sorted(k.compiled_forms().values())[-1])
    ''', JSNB_CACHE_DIR=str(tmp_path))
    assert out == ['False', 'True', 'True', 'True', 'False', 'False', '1']

def test_a_module_that_does_not_load_is_not_compiled_at_start(tmp_path):
    "A built module that does not load (damaged, or built against another numpy): the start goes on with the twins."
    code = '''
        import os, sys, jsnb.js.api, jsnb.js.kernels as k
        os.makedirs(os.path.dirname(k.ahead_path()), exist_ok=True)
        open(k.ahead_path(), 'wb').write(b'not a module')
        print(k.load_built(), k.JIT, 'numba' in sys.modules)
    '''
    e = {**{k: v for k, v in os.environ.items() if k not in ('JSNB_AOT', 'JSNB_JIT_AT_START')}, 'JSNB_CACHE_DIR': str(tmp_path)}
    r = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True, timeout=300, env=e)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ['False', 'False', 'False']
    assert 'not built ahead of time' in r.stderr, r.stderr

def test_builds_clear_what_is_left(tmp_path):
    "A build clears killed builds' directories and modules unused for `UNUSED_DAYS`; a module in use, and its types, stay."
    old = kernels.time.time() - kernels.UNUSED_DAYS * 86400 - 60
    ext = kernels.importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / 'tmpkilled').mkdir(); (tmp_path / 'tmpfresh').mkdir()
    for name in ('jsnb_kernels-old', 'jsnb_kernels-used'):
        for f in (name + ext, name + ext + '.json', name + ext + '.lock'): (tmp_path / f).write_text('x')
    for f in ['tmpkilled', 'jsnb_kernels-old' + ext, 'jsnb_kernels-old' + ext + '.json', 'jsnb_kernels-used' + ext + '.json']:
        os.utime(tmp_path / f, (old, old))                  # (the used module's types are as old as it was built)
    kernels._clear_leftovers(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(['tmpfresh', 'jsnb_kernels-used' + ext,
                                                                'jsnb_kernels-used' + ext + '.json', 'jsnb_kernels-used' + ext + '.lock'])
