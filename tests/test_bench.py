"""`jsnb bench`: the frame scanner against its twin and the twin against the protocol module's
`ClientParser`, a quick run of every scenario against both servers, and (on demand, `pytest -m bench -n 0`)
the full comparison with its targets."""
import csv, math
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jsnb.bench import client as bench
from jsnb.bench.client import NCOLS, scan_frames, _scan_py, _row_ops, ack_frames, statuses
from jsnb.nats.protocol import ClientParser
from jsnb.bench.scenarios import COLUMNS, SCENARIOS, BenchOptions, LARGE, LIMITED, _TOTALS
from jsnb.bench.scenarios import Result
from jsnb.bench.compare import main, plan, judge, misses, table, GROUPS, MEMORY_COLUMNS, SCALING_COLUMNS, SCALING_OPS
from jsnb.bench.cluster import Probed, probed_rows

pytestmark = pytest.mark.reference

# ---- the scanner: compiled and pure-Python twins agree on any byte stream cut anywhere

_subject = st.text('abcxyz.$_>*0123456789', min_size=1, max_size=12).filter(lambda s: ' ' not in s)
_frame = st.one_of(
    st.tuples(st.just('MSG'), _subject, st.integers(1, 999), st.one_of(st.none(), _subject), st.binary(max_size=40)),
    st.tuples(st.just('HMSG'), _subject, st.integers(1, 999), st.one_of(st.none(), _subject), st.binary(max_size=40)),
    st.sampled_from([b'PING\r\n', b'PONG\r\n', b'+OK\r\n', b"-ERR 'Slow Consumer'\r\n", b'INFO {"a":1}\r\n', b'WHAT\r\n']))

def _encode(f) -> bytes:
    if isinstance(f, bytes): return f
    op, subj, sid, reply, data = f
    r = f' {reply}' if reply else ''
    if op == 'MSG': return f'MSG {subj} {sid}{r} {len(data)}\r\n'.encode() + data + b'\r\n'
    h = b'NATS/1.0 100 Idle Heartbeat\r\n\r\n' if sid % 2 else b'NATS/1.0\r\nK: v\r\n\r\n'
    return f'HMSG {subj}  {sid}{r}\t{len(h)} {len(h) + len(data)}\r\n'.encode() + h + data + b'\r\n'


@pytest.mark.skipif(not bench.JIT, reason='numba not available')
@settings(max_examples=150, deadline=None)
@given(st.lists(_frame, max_size=25), st.integers(0, 10_000), st.integers(1, 8))
def test_scanner_twins_agree(frames, cut, cap):
    wire = b''.join(map(_encode, frames))
    wire = wire[:cut % (len(wire) + 1)]
    a, b = np.zeros((cap, NCOLS), np.int64), np.zeros((cap, NCOLS), np.int64)
    pa, pb, n = 0, 0, 0
    while True:                                     # scan in passes of `cap` rows, as the connection does
        (na, pa), (nb, pb) = scan_frames(wire, pa, a), _scan_py(wire, pb, b)
        assert (na, pa) == (nb, pb)
        assert (a[:na] == b[:nb]).all()
        arr = np.frombuffer(wire, np.uint8)
        assert (statuses(arr, a[:na]) == statuses(arr, b[:nb])).all()
        assert ack_frames(wire, a[:na]) == b''.join(b'PUB ' + wire[r[4]:r[4] + r[5]] + b' 0\r\n\r\n' for r in a[:na] if r[5])
        n += na
        if na < cap: break
    complete = 0                                    # every frame that fits entirely was scanned
    for f in frames:
        complete += len(_encode(f))
        if complete > len(wire): break
        n -= 1
    assert n == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(_frame, max_size=25), st.integers(0, 10_000))
def test_twin_reads_as_client_parser(frames, cut):
    "The pure-Python scanner reads what the protocol module's `ClientParser` reads, on any stream cut anywhere."
    wire = b''.join(map(_encode, frames))
    wire = wire[:cut % (len(wire) + 1)]
    rows = np.zeros((len(frames) + 1, NCOLS), np.int64)
    n, _ = _scan_py(wire, 0, rows)
    assert _row_ops(wire, rows[:n]) == ClientParser().feed(wire)


# ---- a quick run of everything against both servers

def _rows(path):
    with open(path, newline='') as f:
        r = csv.DictReader(f)
        return r.fieldnames, list(r)


def test_compare_smoke(tmp_path, capsys):
    "Every scenario, both storages, both servers, and memory: complete runs, sane numbers, CSV and chart written."
    msgs, sync = 1500, 100
    rc = main(['--compare', 'all', 'memory', '--msgs', str(msgs), '--sync-msgs', str(sync), '--keys', '50',
               '--memory-msgs', '3000', '--storage', 'memory,file', '--out', str(tmp_path), '-q'])
    out = capsys.readouterr().out
    assert rc == 0, out
    cols, rows = _rows(tmp_path / 'bench-compare.csv')
    assert cols == COLUMNS
    expected = {(n, s, k) for n, s in plan(GROUPS['all'], ['memory', 'file']) for k in ('nats-server', 'jsnb')}
    assert {(r['scenario'], r['storage'], r['server']) for r in rows} == expected
    for r in rows:
        one_at_a_time = r['scenario'] in ('js-pub-sync', 'direct-get', 'kv-get')
        counted = _TOTALS.get(r['scenario'])                  # (scenarios that send another number, of another size)
        size = {'js-pub-large': LARGE, 'js-ingest-limit': LIMITED}.get(r['scenario'], 128)
        o = BenchOptions(msgs=msgs, sync_msgs=sync)
        assert int(r['msgs']) == (counted(o) if counted else sync if one_at_a_time else msgs), r
        assert int(r['msg_size']) == size
        assert float(r['seconds']) > 0 and float(r['msgs_per_sec']) > 0
        assert math.isclose(float(r['bytes_per_sec']), float(r['msgs_per_sec']) * size, rel_tol=1e-3)
        assert (r['p50_us'] != '') == one_at_a_time and (r['p99_us'] != '') == one_at_a_time
        if one_at_a_time: assert 0 < float(r['p50_us']) <= float(r['p99_us'])
        assert int(r['peak_rss_bytes']) > 1 << 20
    png = (tmp_path / 'bench-compare.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000
    cols, mem = _rows(tmp_path / 'bench-memory.csv')
    assert cols == MEMORY_COLUMNS and [m['server'] for m in mem] == ['nats-server', 'jsnb']
    for m in mem:
        assert int(m['msgs']) == 3000 and int(m['rss_after_bytes']) > 0 and math.isfinite(float(m['bytes_per_msg']))
    for name in SCENARIOS: assert name in out, out            # the table lists every scenario
    assert 'bytes of RSS per stored 128-byte message' in out


def test_scaling_smoke(tmp_path, capsys):
    "The scaling group on a small stream: every op at every size for both servers (num_pending is checked inside)."
    rc = main(['--compare', 'scaling', '--scaling-sizes', '3000,6k', '--scaling-subjects', '200', '--out', str(tmp_path), '-q'])
    assert rc == 0, capsys.readouterr()
    cols, rows = _rows(tmp_path / 'bench-scaling.csv')
    assert cols == SCALING_COLUMNS
    assert sorted((r['server'], int(r['stream_msgs']), r['op']) for r in rows) == sorted(
        (k, n, op) for k in ('nats-server', 'jsnb') for n in (3000, 6000) for op in SCALING_OPS)
    assert all(float(r['seconds']) > 0 and r['scenario'] == 'scaling' for r in rows)
    assert (tmp_path / 'bench-scaling.png').read_bytes()[:4] == b'\x89PNG'


def test_single_server_and_kernels(start_server, capsys):
    "Against a URL: a line per scenario, the server named from its INFO; the kernels group prints its table or says why not."
    s = start_server('jsnb', '-js')
    assert main(['-s', s.url, 'pubsub', 'direct-get', '--msgs', '500', '-q']) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [l.split()[0] for l in lines] == ['pubsub', 'direct-get']
    assert main(['kernels', '--msgs', '20000', '-q']) == 0
    out = capsys.readouterr().out
    assert 'speed-up' in out or 'not available' in out


def test_errors_are_reported(capsys):
    "An unreachable server or an unknown scenario is a one-line error and exit status 1."
    assert main(['-s', 'nats://127.0.0.1:1', 'pub', '-q']) == 1
    assert main(['no-such-scenario']) == 1
    err = capsys.readouterr().err
    assert 'unknown scenario' in err and err.count('jsnb bench:') == 2
    assert main(['--check', 'pub', '-q']) == 1                  # the targets are ratios: only with --compare
    assert '--check needs --compare' in capsys.readouterr().err


def _pair(ref, ours):
    ref.server, ours.server = 'nats-server', 'jsnb'
    return [ref, ours]


def test_cluster_rows_are_judged():
    "The replicated rows' targets: R3 rates and p99 as ratios, the rolling restart's figures against limits of their own."
    lat = lambda us: np.full(100, us * 1000, np.int64)
    res = (_pair(Result('r3-pub-async', 'file', 1000, 1.0, 128), Result('r3-pub-async', 'file', 1000, 2.5, 128))
           + _pair(Result('r3-pub-sync', 'file', 100, 1, 128, lat(400)), Result('r3-pub-sync', 'file', 100, 1, 128, lat(500)))
           + _pair(Result('r3-direct-get', 'file', 100, 1, 128, lat(100)), Result('r3-direct-get', 'file', 100, 1, 128, lat(300))))
    ref = probed_rows([0.0, 0.02, 0.1, 0.12], [0.001] * 4, 100, 0, [(0.01, 0.11)], 2.0, 128)
    ours = probed_rows([0.0, 0.02, 0.5, 0.52], [0.001] * 4, 100, 3, [(0.01, 0.51)], 2.0, 128)
    for a, b in zip(ref, ours): res += _pair(a, b)
    got = {a.scenario: judge(a.scenario, a, b) for a, b in zip(res[::2], res[1::2])}
    assert got['r3-pub-async'] == (0.4, '>= 0.5', False)
    assert got['r3-pub-sync'][1:] == ('p99 <= 1.5x', True) and math.isclose(got['r3-pub-sync'][0], 1.25)
    assert got['r3-direct-get'][1:] == ('p99 <= 2x', False)
    assert got['restart-gap'][1:] == ('<= 0.3 s', False) and math.isclose(got['restart-gap'][0], 0.48 / 0.08)
    assert got['restart-failed'][1:] == ('<= 1 %', False) and math.isnan(got['restart-failed'][0])    # the reference failed none
    assert [m.split(' ')[0] for m in misses(res)] == ['r3-pub-async', 'r3-direct-get', 'restart-gap', 'restart-failed']
    text = table(res)
    assert 'restart-gap: nats-server median 0.080 s' in text and 'jsnb 3 of 100 probes failed (3.00%)' in text
    verdicts = {l.split()[0]: ('below' if ' below ' in l else 'ok' if ' ok ' in l else '') for l in text.splitlines()[2:7]}
    assert verdicts == {'r3-pub-async': 'below', 'r3-pub-sync': 'ok', 'r3-direct-get': 'below', 'restart-gap': 'below', 'restart-failed': 'below'}


@pytest.mark.bench
def test_cluster_compare_smoke(tmp_path, capsys):
    """`jsnb bench cluster --compare` end to end with small counts (about a minute: two 3-server JetStream clusters,
    three restarts each): every row for both servers, numbers in the CSV, the restart figures under the table."""
    msgs, sync = 2000, 100
    rc = main(['cluster', '--compare', '--msgs', str(msgs), '--sync-msgs', str(sync), '--out', str(tmp_path), '-q'])
    out = capsys.readouterr().out
    assert rc == 0, out
    cols, rows = _rows(tmp_path / 'bench-compare.csv')
    names = ['cluster-pubsub', 'r3-pub-async', 'r3-pub-sync', 'r3-direct-get', 'restart-gap', 'restart-failed']
    assert cols == COLUMNS and sorted((r['scenario'], r['server']) for r in rows) == sorted((n, k) for n in names for k in ('nats-server', 'jsnb'))
    for r in rows:
        want = {'cluster-pubsub': msgs, 'r3-pub-async': msgs, 'r3-pub-sync': sync, 'r3-direct-get': sync}.get(r['scenario'])
        assert int(r['msgs']) == want if want else int(r['msgs']) > 10, r        # restart rows: the probes sent
        assert float(r['seconds']) > 0 and (r['storage'] == 'file') == (r['scenario'] != 'cluster-pubsub'), r
        timed = r['scenario'] in ('r3-pub-sync', 'r3-direct-get', 'restart-gap', 'restart-failed')
        assert (r['p50_us'] != '') == timed, r
    lines = out.splitlines()
    for n in names: assert any(l.startswith(n + ' ') for l in lines), out
    assert any(l.startswith('restart-gap: nats-server median') and 'per restart' in l for l in lines), out
    assert any(l.startswith('restart-failed: nats-server') and 'probes failed' in l for l in lines), out


# ---- the full comparison, on demand

@pytest.mark.bench
def test_bench_compare_targets(tmp_path, capsys):
    "The full comparison (a few minutes) with `--check`: the table is printed, and each target missed fails the test, by name."
    rc = main(['--compare', '--storage', 'memory,file', '--msgs', '100k', '--memory-msgs', '1M', '--repeat', '3',
               '--out', str(tmp_path), '--check'])
    cap = capsys.readouterr()
    with capsys.disabled(): print(cap.out)
    assert rc == 0, cap.err
