"""Speed of the `jetstream` Spark source and sink, jsnb and the reference in the same run, printed side by side
(run on demand: `pytest -m bench -n 0 -s tests/test_spark_bench.py`). A batch read of a stream of 1M small
messages in two partitions, counted by subject, the same stream followed by a streaming query in micro-batches of
100k messages, and a batch write of 100k rows in two tasks; then a read of an R3 stream on three servers against the
same messages in an R1 stream on one server, three partitions each. `JSNB_SPARK_BENCH_READ` /
`JSNB_SPARK_BENCH_WRITE` / `JSNB_SPARK_BENCH_CLUSTER` change the sizes."""
import os, tempfile, time
import pytest
pytest.importorskip('pyspark')
from conftest import KINDS
from jsclusters import JSCluster
from jsnb.clients.blocking import _Conn, _api
from jsnb.clients.spark import local_session

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]
N_READ = int(os.environ.get('JSNB_SPARK_BENCH_READ', 1_000_000))
N_WRITE = int(os.environ.get('JSNB_SPARK_BENCH_WRITE', 100_000))
N_CLUSTER = int(os.environ.get('JSNB_SPARK_BENCH_CLUSTER', 300_000))
SUBJECTS = 10


@pytest.fixture(scope='module')
def spark():
    s = local_session('jsnb-spark-bench')
    yield s
    s.stop()


def load(url: str, n: int, payload: bytes = b'0123456789abcdef', window: int = 2000, replicas: int = 1):
    "Stream BENCH (subjects bench.*, Direct Get on) with `n` messages, published with acks, `window` at a time."
    with _Conn(url, timeout=60) as c:
        for _ in range(300):                           # (a cluster just started elects its meta leader first)
            try: _api(c, 'STREAM.CREATE.BENCH', {'name': 'BENCH', 'subjects': ['bench.*'], 'allow_direct': True, 'storage': 'file',
                                                  'num_replicas': replicas}); break
            except Exception: time.sleep(0.2)
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
        def follow():
            q = (spark.readStream.format('jetstream').option('url', s.url).option('stream', 'BENCH').option('partitions', 2)
                 .option('max_messages_per_trigger', N_READ // 10).load().writeStream.format('noop')
                 .option('checkpointLocation', tempfile.mkdtemp()).trigger(availableNow=True).start())
            q.awaitTermination()
            assert sum(p['numInputRows'] for p in q.recentProgress) == N_READ
        t_stream = best(follow)
        print(f'{kind}: streaming read {N_READ / t_stream:,.0f} rows/s', flush=True)
        with _Conn(s.url) as c: _api(c, 'STREAM.CREATE.W', {'name': 'W', 'subjects': ['w.*'], 'storage': 'file'})
        rows = spark.range(0, N_WRITE, numPartitions=2).selectExpr(f"concat('w.', id % {SUBJECTS}) as subject", 'cast(cast(id as string) as binary) as data')
        def write(): rows.write.format('jetstream').mode('append').option('url', s.url).save()
        t_write = best(write)
        print(f'{kind}: batch write {N_WRITE / t_write:,.0f} rows/s', flush=True)
        with _Conn(s.url) as c: stored = _api(c, 'STREAM.INFO.W')['state']['messages']
        assert stored == RUNS * N_WRITE                  # every run's rows, none dropped
        results[kind] = (N_READ / t_read, N_READ / t_stream, N_WRITE / t_write)
        s.stop()
    print(f'\n{"":44}' + ''.join(f'{k:>14}' for k in results) + f'{"ratio":>8}')
    for i, what in enumerate([f'batch read, {N_READ} msgs, 2 partitions', f'streaming read, {N_READ} msgs, {N_READ // 10} a batch',
                              f'batch write, {N_WRITE} rows, 2 tasks']):
        r = [v[i] for v in results.values()]
        print(f'{what:44}' + ''.join(f'{x:>10,.0f} r/s' for x in r) + f'{r[0] / r[1]:>8.2f}')


def test_spark_cluster_read_speed(spark, start_server):
    "An R3 stream on three servers read in three partitions (one per server), against an R1 stream on one server."
    results = {}
    for kind in KINDS:
        cl = JSCluster(kind, open=True).start()
        try:
            cl.wait_meta(); load(cl.url(0), N_CLUSTER, replicas=3)
            df = spark.read.format('jetstream').option('url', cl.url(0)).option('stream', 'BENCH').option('partitions', 3).load()
            def read(): assert df.count() == N_CLUSTER
            results[kind, 3] = N_CLUSTER / best(read)
        finally: cl.stop()
        s = start_server(kind, '-js')
        load(s.url, N_CLUSTER)
        df = spark.read.format('jetstream').option('url', s.url).option('stream', 'BENCH').option('partitions', 3).load()
        def read1(): assert df.count() == N_CLUSTER
        results[kind, 1] = N_CLUSTER / best(read1)
        s.stop()
        print(f'\n{kind}: R3 on 3 servers {results[kind, 3]:,.0f} rows/s, R1 on 1 server {results[kind, 1]:,.0f} rows/s', flush=True)
    print(f'\n{f"batch read, {N_CLUSTER} msgs, 3 partitions":44}{"3 servers, R3":>16}{"1 server":>14}{"3 / 1":>8}')
    for kind in KINDS:
        print(f'{kind:44}{results[kind, 3]:>12,.0f} r/s{results[kind, 1]:>10,.0f} r/s{results[kind, 3] / results[kind, 1]:>8.2f}')
