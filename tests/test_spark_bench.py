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


def best(fns: dict, runs=RUNS) -> dict:
    """The shortest of `runs` timings of each of `fns` (name -> function), the functions taking turns run after run, so
    that both servers see the same machine (the first run also warms Spark's Python workers; best of three, as
    `jsnb bench --compare`)."""
    out = {k: [] for k in fns}
    for _ in range(runs):
        for k, fn in fns.items():
            t = time.perf_counter(); fn(); out[k].append(time.perf_counter() - t)
    return {k: min(v) for k, v in out.items()}


def table(title: str, rows: list[tuple[str, dict]], unit='r/s'):
    "Print `rows` (what, {kind: rate}) side by side, with jsnb's rate over the reference's."
    print(f'\n{title:46}' + ''.join(f'{k:>14}' for k in KINDS) + f'{"ratio":>8}')
    for what, r in rows: print(f'{what:46}' + ''.join(f'{r[k]:>10,.0f} {unit}' for k in KINDS) + f'{r["jsnb"] / r["nats-server"]:>8.2f}')


def test_spark_read_write_speed(spark, start_server):
    servers = {kind: start_server(kind, '-js') for kind in KINDS}
    for s in servers.values(): load(s.url, N_READ)
    dfs = {k: spark.read.format('jetstream').option('url', s.url).option('stream', 'BENCH').option('partitions', 2).load()
           for k, s in servers.items()}
    def read(kind):
        counts = {r.subject: r['count'] for r in dfs[kind].groupBy('subject').count().collect()}
        assert sum(counts.values()) == N_READ and len(counts) == SUBJECTS
    def follow(kind):
        q = (spark.readStream.format('jetstream').option('url', servers[kind].url).option('stream', 'BENCH').option('partitions', 2)
             .option('max_messages_per_trigger', N_READ // 10).load().writeStream.format('noop')
             .option('checkpointLocation', tempfile.mkdtemp()).trigger(availableNow=True).start())
        q.awaitTermination()
        assert sum(p['numInputRows'] for p in q.recentProgress) == N_READ
    for s in servers.values():
        with _Conn(s.url) as c: _api(c, 'STREAM.CREATE.W', {'name': 'W', 'subjects': ['w.*'], 'storage': 'file'})
    rows = spark.range(0, N_WRITE, numPartitions=2).selectExpr(f"concat('w.', id % {SUBJECTS}) as subject", 'cast(cast(id as string) as binary) as data')
    def write(kind): rows.write.format('jetstream').mode('append').option('url', servers[kind].url).save()
    t_read = best({k: (lambda k=k: read(k)) for k in KINDS})
    t_stream = best({k: (lambda k=k: follow(k)) for k in KINDS})
    t_write = best({k: (lambda k=k: write(k)) for k in KINDS})
    for s in servers.values():
        with _Conn(s.url) as c: assert _api(c, 'STREAM.INFO.W')['state']['messages'] == RUNS * N_WRITE     # every run's rows, none dropped
    table('the jetstream source, jsnb / nats-server', [
        (f'batch read, {N_READ} msgs, 2 partitions', {k: N_READ / t for k, t in t_read.items()}),
        (f'streaming read, {N_READ} msgs, {N_READ // 10} a batch', {k: N_READ / t for k, t in t_stream.items()}),
        (f'batch write, {N_WRITE} rows, 2 tasks', {k: N_WRITE / t for k, t in t_write.items()})])


def test_spark_cluster_read_speed(spark, start_server):
    "An R3 stream on three servers read in three partitions (one per server), against an R1 stream on one server."
    for kind in KINDS:
        cl = JSCluster(kind, open=True).start()
        try:
            cl.wait_meta(); load(cl.url(0), N_CLUSTER, replicas=3)
            s = start_server(kind, '-js'); load(s.url, N_CLUSTER)
            dfs = {where: spark.read.format('jetstream').option('url', url).option('stream', 'BENCH').option('partitions', 3).load()
                   for where, url in (('3 servers, R3', cl.url(0)), ('1 server, R1', s.url))}
            def read(where): assert dfs[where].count() == N_CLUSTER
            t = best({w: (lambda w=w: read(w)) for w in dfs})
            r3, r1 = N_CLUSTER / t['3 servers, R3'], N_CLUSTER / t['1 server, R1']
            print(f'\n{kind}: batch read of {N_CLUSTER} msgs in 3 partitions: an R3 stream on 3 servers {r3:,.0f} rows/s, '
                  f'an R1 stream on 1 server {r1:,.0f} rows/s, {r3 / r1:.2f} of it', flush=True)
            s.stop()
        finally: cl.stop()
