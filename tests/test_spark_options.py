"""What a Kafka-source user reaches for, in the `jetstream` Spark source, against jsnb and the reference nats-server:
where a read starts (`starting_position`: earliest, latest, a sequence, a time), partitions sized by rows (a sparse
subject filter does not leave one task all the work; `max_rows_per_partition`), and the client's own settings
(`nats.inbox_prefix`, `nats.name`)."""
import json, socket, time, urllib.request
import pytest
pytest.importorskip('pyspark')
from sparksession import spark   # noqa: F401  (the module's session)
from conftest import KINDS
from jsnb.clients.blocking import _Conn, _api

pytestmark = pytest.mark.timeout(300)


def publish(url, subjects, data=None, **auth):
    "Publish one message to each of `subjects` (payload: its index), with acks."
    with _Conn(url, **auth) as c:
        for i, s in enumerate(subjects): c.send(s, data or str(i).encode())
        c.flush()
        return [json.loads(c.next().payload)['seq'] for _ in subjects]


def read(spark, url, **opts):
    r = spark.read.format('jetstream').option('url', url)
    for k, v in opts.items(): r = r.option(k, v)
    return r.load()


def stream(spark, url, **opts):
    r = spark.readStream.format('jetstream').option('url', url)
    for k, v in opts.items(): r = r.option(k, v)
    return r.load()


@pytest.mark.parametrize('kind', KINDS)
def test_starting_position(spark, start_server, kind, tmp_path):
    """`latest`: a query reads only what is published after it first started; a sequence and a time start there, in
    streaming and batch reads; `latest` in a batch read, or with `start_seq`, is refused."""
    s = start_server(kind, '-js')
    with _Conn(s.url) as c: _api(c, 'STREAM.CREATE.SP', {'name': 'SP', 'subjects': ['sp'], 'allow_direct': True})
    with _Conn(s.url) as c:
        for _ in range(10): c.request('sp', b'x'); time.sleep(0.002)      # one at a time: each its own time
        t4 = _api(c, 'STREAM.MSG.GET.SP', {'seq': 4})['message']['time']
    def available(position, ckpt):
        "The sequences a query reads (Trigger.AvailableNow) from `position`, with checkpoint `ckpt`: all its runs so far."
        out = str(tmp_path / f'{ckpt}-out')
        q = (stream(spark, s.url, stream='SP', starting_position=position).select('seq').writeStream.format('parquet')
             .option('path', out).option('checkpointLocation', str(tmp_path / ckpt)).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        return sorted(r.seq for r in spark.read.parquet(out).collect()) if (tmp_path / f'{ckpt}-out').exists() else []
    assert available('latest', 'a') == []                       # its first offset: the stream's last sequence, 10
    publish(s.url, ['sp'] * 5)
    assert available('latest', 'a') == [11, 12, 13, 14, 15]     # what came after it started
    assert available('12', 'b') == [12, 13, 14, 15]
    assert available(t4, 'c') == list(range(4, 16))
    assert available('earliest', 'd') == list(range(1, 16))
    assert [r.seq for r in read(spark, s.url, stream='SP', starting_position='13').collect()] == [13, 14, 15]
    assert [r.seq for r in read(spark, s.url, stream='SP', starting_position=t4).orderBy('seq').collect()] == list(range(4, 16))
    with pytest.raises(Exception, match='starting_position=latest is for streaming queries'):
        read(spark, s.url, stream='SP', starting_position='latest').collect()
    with pytest.raises(Exception, match='give starting_position or start_seq/start_time, not both'):
        read(spark, s.url, stream='SP', starting_position='latest', start_seq=3)


def per_partition(df) -> list[int]: return df.rdd.mapPartitions(lambda it: [sum(1 for _ in it)]).collect()


@pytest.mark.parametrize('direct', [True, False], ids=['direct-get', 'consumer'])
@pytest.mark.parametrize('kind', KINDS)
def test_partitions_sized_by_rows(spark, start_server, kind, direct):
    """400 rows on `p.sparse`, all in the first 800 of 4,000 sequences: four partitions hold 100 rows each (before:
    400, 0, 0, 0), and `max_rows_per_partition=150` makes three of at most 150. The same rows either way."""
    s = start_server(kind, '-js')
    with _Conn(s.url) as c: _api(c, 'STREAM.CREATE.P', {'name': 'P', 'subjects': ['p.*'], 'allow_direct': direct})
    publish(s.url, ['p.sparse' if i < 800 and i % 2 == 0 else 'p.other' for i in range(4000)])
    want = [2 * i + 1 for i in range(400)]
    df = read(spark, s.url, stream='P', subjects='p.sparse', partitions=4)
    assert per_partition(df) == [100, 100, 100, 100]
    assert sorted(r.seq for r in df.collect()) == want
    capped = read(spark, s.url, stream='P', subjects='p.sparse', max_rows_per_partition=150)
    sizes = per_partition(capped)
    assert len(sizes) == 3 and max(sizes) <= 150 and sum(sizes) == 400
    assert sorted(r.seq for r in capped.collect()) == want
    everything = read(spark, s.url, stream='P', max_rows_per_partition=1000)
    assert per_partition(everything) == [1000] * 4
    if not direct:
        with _Conn(s.url) as c: assert _api(c, 'CONSUMER.NAMES.P')['consumers'] == []       # the counting consumers are gone


def free_port() -> int:
    so = socket.socket(); so.bind(('127.0.0.1', 0)); p = so.getsockname()[1]; so.close(); return p


@pytest.mark.parametrize('kind', KINDS)
def test_client_settings(spark, start_server, kind, tmp_path):
    """`nats.inbox_prefix`: a user who may receive replies only on `_ETL.>` reads and writes with it, and is refused
    without it; `nats.name`: a streaming query's connection carries the name in the server's /connz."""
    perms = '{subscribe: {allow: ["_ETL.>"]}, publish: {allow: ["$JS.API.>", "etl.>"]}}'
    mon = free_port()
    s = start_server(kind, '-js', '-m', str(mon), config=f'authorization {{ users = [ {{user: etl, password: pw, permissions: {perms}}} ] }}\n')
    auth = dict(user='etl', password='pw', inbox_prefix='_ETL')
    with _Conn(s.url, **auth) as c: _api(c, 'STREAM.CREATE.ETL', {'name': 'ETL', 'subjects': ['etl.>'], 'allow_direct': True})
    publish(s.url, ['etl.in'] * 20, **auth)
    opts = {'stream': 'ETL', 'user': 'etl', 'password': 'pw', 'nats.inbox_prefix': '_ETL'}
    df = read(spark, s.url, **opts)
    assert df.count() == 20
    df.selectExpr("'etl.out' as subject", 'data').write.format('jetstream').mode('append').option('url', s.url) \
        .option('user', 'etl').option('password', 'pw').option('nats.inbox_prefix', '_ETL').save()
    assert read(spark, s.url, subjects='etl.out', **opts).count() == 20
    with pytest.raises(Exception, match='Permissions Violation for Subscription to "?_INBOX'):
        read(spark, s.url, stream='ETL', user='etl', password='pw').collect()
    q = (stream(spark, s.url, **opts, **{'nats.name': 'etl-follow'}).writeStream.format('noop')
         .option('checkpointLocation', str(tmp_path / 'c')).trigger(processingTime='500 milliseconds').start())
    try:
        names, deadline = [], time.time() + 180
        while time.time() < deadline and q.exception() is None:       # once the query has planned a batch, its connection is open
            if q.lastProgress:
                with urllib.request.urlopen(f'http://127.0.0.1:{mon}/connz', timeout=5) as r:
                    names = [x.get('name') for x in json.load(r)['connections']]
                if 'etl-follow' in names: break
            time.sleep(0.2)
        assert 'etl-follow' in names, names
    finally: q.stop()
