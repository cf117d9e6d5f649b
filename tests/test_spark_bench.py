"""Speed of the `jetstream` Spark source and sink, jsnb and the reference in the same run, printed side by side
(run on demand: `pytest -m bench -n 0 -s tests/test_spark_bench.py`). A batch read of a stream of 1M small
messages in two partitions, counted by subject, and a batch write of 100k rows in two tasks.
`JSNB_SPARK_BENCH_READ` / `JSNB_SPARK_BENCH_WRITE` change the sizes."""
import os, time
import pytest
pytest.importorskip('pyspark')
from conftest import KINDS
from jsnb.clients.blocking import _Conn, _api
from jsnb.clients.spark import local_session

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]
N_READ = int(os.environ.get('JSNB_SPARK_BENCH_READ', 1_000_000))
N_WRITE = int(os.environ.get('JSNB_SPARK_BENCH_WRITE', 100_000))
SUBJECTS = 10


@pytest.fixture(scope='module')
def spark():
    s = local_session('jsnb-spark-bench')
    yield s
    s.stop()


def load(url: str, n: int, payload: bytes = b'0123456789abcdef', window: int = 2000):
    "Stream BENCH (subjects bench.*, Direct Get on) with `n` messages, published with acks, `window` at a time."
    with _Conn(url, timeout=60) as c:
        _api(c, 'STREAM.CREATE.BENCH', {'name': 'BENCH', 'subjects': ['bench.*'], 'allow_direct': True, 'storage': 'file'})
        for lo in range(0, n, window):
            k = min(window, n - lo)
            for i in range(lo, lo + k): c.send(f'bench.{i % SUBJECTS}', payload)
            c.flush()
            for _ in range(k): c.next()
        assert _api(c, 'STREAM.INFO.BENCH')['state']['messages'] == n


RUNS = 3


def best(fn, runs=RUNS):
    "The shortest of `runs` timings of `fn()` (the first run also warms Spark's Python workers; best of three, as `jsnb bench --compare`)."
    out = []
    for _ in range(runs):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return min(out)


def test_spark_read_write_speed(spark, start_server):
    results = {}
    for kind in KINDS:
        s = start_server(kind, '-js')
        load(s.url, N_READ)
        df = (spark.read.format('jetstream').option('url', s.url).option('stream', 'BENCH').option('partitions', 2).load())
        counts = {}
        def read(): counts.update({r.subject: r['count'] for r in df.groupBy('subject').count().collect()})
        t_read = best(read)
        print(f'\n{kind}: batch read {N_READ / t_read:,.0f} rows/s', flush=True)
        assert sum(counts.values()) == N_READ and len(counts) == SUBJECTS
        with _Conn(s.url) as c: _api(c, 'STREAM.CREATE.W', {'name': 'W', 'subjects': ['w.*'], 'storage': 'file'})
        rows = spark.range(0, N_WRITE, numPartitions=2).selectExpr(f"concat('w.', id % {SUBJECTS}) as subject", 'cast(cast(id as string) as binary) as data')
        def write(): rows.write.format('jetstream').mode('append').option('url', s.url).save()
        t_write = best(write)
        print(f'{kind}: batch write {N_WRITE / t_write:,.0f} rows/s', flush=True)
        with _Conn(s.url) as c: stored = _api(c, 'STREAM.INFO.W')['state']['messages']
        assert stored == RUNS * N_WRITE                  # every run's rows, none dropped
        results[kind] = (N_READ / t_read, N_WRITE / t_write)
        s.stop()
    print(f'\n{"":40}' + ''.join(f'{k:>14}' for k in results))
    print(f'{f"batch read, {N_READ} msgs, 2 partitions":40}' + ''.join(f'{r[0]:>10,.0f} r/s' for r in results.values()))
    print(f'{f"batch write, {N_WRITE} rows, 2 tasks":40}' + ''.join(f'{r[1]:>10,.0f} r/s' for r in results.values()))
