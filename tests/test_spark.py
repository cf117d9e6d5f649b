"""The `jetstream` Spark data source against jsnb and the reference nats-server: batch reads (columns,
filters, snapshots, partitions, KV), streaming restarts from a checkpoint, read limits, idempotent
writes under a retried task, and write errors."""
import asyncio, json, tempfile, time
from datetime import datetime, timezone
import pytest
pytest.importorskip('pyspark')
import nats
from pyspark.sql import functions as F
from sparksession import local_spark, stderr_until
from conftest import KINDS

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope='session')
def spark():
    "One local session for the file; `local[2,2]` retries a failed task once."
    s = local_spark('jsnb-spark-tests', **{'spark.sql.execution.arrow.maxRecordsPerBatch': '50'})
    yield s
    s.stop()


def js_run(url, fn):
    "Run `fn(js)` with a fresh nats-py connection."
    async def go():
        nc = await nats.connect(url, connect_timeout=10)
        try: return await fn(nc.jetstream())
        finally: await nc.close()
    return asyncio.run(go())


def read(spark, url, **opts):
    r = spark.read.format('jetstream').option('url', url)
    for k, v in opts.items(): r = r.option(k, v)
    return r.load()


def rows(df, got=None):
    "(subject, seq, headers, data) of each row, in sequence order."
    return [(r.subject, r.seq, dict(r.headers or {}), bytes(r.data)) for r in got or df.orderBy('seq').collect()]


def publish_orders(url, n=30, direct=True):
    "ORDERS with three subjects; returns the published messages as (subject, seq, headers, data) and the time range."
    async def go(js):
        await js.add_stream(name='ORDERS', subjects=['ORDERS.*'], allow_direct=direct)
        out, t0 = [], datetime.now(timezone.utc)
        for i in range(n):
            subject = f"ORDERS.{['received', 'processed', 'completed'][i % 3]}"
            hdrs = {'Order-Id': str(i // 3)} if i % 2 else None
            ack = await js.publish(subject, f'order {i}'.encode(), headers=hdrs)
            out.append((subject, ack.seq, {k: [v] for k, v in (hdrs or {}).items()}, f'order {i}'.encode()))
        return out, t0, datetime.now(timezone.utc)
    return js_run(url, go)


@pytest.mark.parametrize('direct', [True, False], ids=['direct-get', 'consumer'])
@pytest.mark.parametrize('kind', KINDS)
def test_batch_read(spark, start_server, kind, direct):
    "Every read option gives the same rows, by Direct Get or (a stream without allow_direct) through a consumer."
    s = start_server(kind, '-js')
    sent, t0, t1 = publish_orders(s.url, direct=direct)
    df = read(spark, s.url, stream='ORDERS')
    assert df.columns == ['stream', 'subject', 'seq', 'time', 'headers', 'data']
    got = df.orderBy('seq').collect()
    assert rows(df, got) == sent
    assert {r.stream for r in got} == {'ORDERS'}
    assert all(t0.replace(microsecond=0) <= r.time.astimezone(timezone.utc) <= t1 for r in got)
    # filters with wildcards and a comma list
    sub = [m for m in sent if m[0] in ('ORDERS.received', 'ORDERS.completed')]
    assert rows(read(spark, s.url, stream='ORDERS', subjects='ORDERS.received, ORDERS.completed')) == sub
    assert rows(read(spark, s.url, stream='ORDERS', subjects='ORDERS.*,ORDERS.received')) == sent
    # start and snapshot end, by sequence and by time
    assert rows(read(spark, s.url, stream='ORDERS', start_seq=5, up_to_seq=12)) == sent[4:12]
    assert rows(read(spark, s.url, stream='ORDERS', start_time=got[9].time.isoformat())) == sent[9:]
    assert rows(read(spark, s.url, stream='ORDERS', up_to_time=got[20].time.isoformat())) == sent[:20]   # exclusive
    assert rows(read(spark, s.url, stream='ORDERS', start_time='2999-01-01T00:00:00Z')) == []
    # a snapshot is fixed: later messages are not in it
    snap = read(spark, s.url, stream='ORDERS', up_to_seq=30, partitions=3)
    js_run(s.url, lambda js: js.publish('ORDERS.received', b'late'))
    assert rows(snap) == sent
    assert len(rows(read(spark, s.url, stream='ORDERS'))) == 31
    # partitions read the same rows as one task (above: unfiltered, and in `sub` filtered)
    assert snap.rdd.getNumPartitions() == 3
    many = read(spark, s.url, stream='ORDERS', partitions=4, batch_size=3, subjects='ORDERS.received,ORDERS.completed', up_to_seq=30)
    assert many.rdd.getNumPartitions() == 4 and rows(many) == sub
    names = js_run(s.url, lambda js: js.consumers_info('ORDERS'))
    assert names == []                              # the consumer path leaves nothing behind


@pytest.mark.parametrize('kind', KINDS)
def test_read_errors(spark, start_server, kind):
    s = start_server(kind, '-js')
    with pytest.raises(Exception, match=r"stream 'NOPE' not found \(code 404, err_code 10059\)"): read(spark, s.url, stream='NOPE').collect()


@pytest.mark.parametrize('direct', [True, False], ids=['direct-get', 'consumer'])
@pytest.mark.parametrize('kind', KINDS)
def test_kv(spark, start_server, kind, direct):
    s = start_server(kind, '-js')
    async def go(js):
        kv = await js.create_key_value(bucket='cfg', history=4, direct=direct)
        for k, v in [('a', b'1'), ('b', b'2'), ('c', b'3'), ('a', b'4'), ('d', b'5')]: await kv.put(k, v)
        await kv.delete('b'); await kv.purge('d')
        return sorted(await kv.keys()), {k: (await kv.get(k)).value for k in await kv.keys()}
    keys, values = js_run(s.url, go)
    df = read(spark, s.url, bucket='cfg')
    assert df.columns == ['key', 'value', 'revision', 'time']
    got = df.collect()
    assert sorted(r.key for r in got) == keys == ['a', 'c']
    assert {r.key: bytes(r.value) for r in got} == values
    assert {r.key: r.revision for r in got} == {'a': 4, 'c': 3}
    assert [(r.key, bytes(r.value)) for r in read(spark, s.url, bucket='cfg', up_to_seq=3).collect()] == [('a', b'1'), ('b', b'2'), ('c', b'3')]
    assert [r.key for r in read(spark, s.url, bucket='cfg', keys='c,b').collect()] == ['c']


@pytest.mark.parametrize('kind', KINDS)
def test_kv_many_keys(spark, start_server, kind):
    "Past the servers' 1,024 subjects for multi-last, the KV read scans the stream and gives the same answer."
    s = start_server(kind, '-js')
    async def go(js):
        kv = await js.create_key_value(bucket='big', history=2, direct=True)
        acks = [await js.publish_async(f'$KV.big.k{i:04d}', f'v{i}'.encode(), wait_stall=5) for i in range(1100)]
        await asyncio.gather(*acks)
        await kv.put('k0001', b'new'); await kv.delete('k0002')
    js_run(s.url, go)
    from jsnb.clients.blocking import _Conn, NatsError
    from jsnb.clients.spark_read import _direct
    with _Conn(s.url) as c, pytest.raises(NatsError, match='Too Many Results'): _direct(c, 'KV_big', {'multi_last': ['$KV.big.>']})
    got = {r.key: bytes(r.value) for r in read(spark, s.url, bucket='big').collect()}
    assert len(got) == 1099 and got['k0001'] == b'new' and 'k0002' not in got and got['k1099'] == b'v1099'


def _caught_up(q, last):
    for _ in range(1200):
        if q.exception(): raise q.exception()
        p = q.lastProgress
        if p and json.loads(p['sources'][0]['endOffset'] or '{}').get('seq') == last and not q.status['isDataAvailable']: return
        time.sleep(0.05)
    raise TimeoutError(q.status)


@pytest.mark.parametrize('kind', KINDS)
def test_streaming_restart(spark, start_server, kind, tmp_path):
    "A query stopped and restarted from its checkpoint reads every message once; micro-batches respect the limit."
    s = start_server(kind, '-js')
    js_run(s.url, lambda js: js.add_stream(name='EV', subjects=['ev.*'], allow_direct=True))
    def pub(lo, hi):
        async def go(js):
            for i in range(lo, hi): await js.publish(f"ev.{'ab'[i % 2]}", str(i).encode())
        js_run(s.url, go)
    out, ckpt = str(tmp_path / 'out'), str(tmp_path / 'ckpt')
    def start():
        return (spark.readStream.format('jetstream').option('url', s.url).option('stream', 'EV').option('subjects', 'ev.a,ev.b')
                .option('max_messages_per_trigger', 4).load().select('seq', 'data')
                .writeStream.format('parquet').option('path', out).option('checkpointLocation', ckpt).start())
    pub(0, 10)
    q = start(); _caught_up(q, 10)
    pub(10, 13)                                    # new messages reach the running query
    _caught_up(q, 13); q.stop()
    sizes = [p['numInputRows'] for p in q.recentProgress if p['numInputRows']]
    assert max(sizes) <= 4 and sum(sizes) == 13
    pub(13, 20)                                    # published while the query is down
    q = start(); _caught_up(q, 20); q.stop()
    assert json.loads(q.recentProgress[0]['sources'][0]['startOffset'])['seq'] == 13
    got = spark.read.parquet(out).collect()
    assert sorted(r.seq for r in got) == list(range(1, 21))
    assert sorted(int(r.data) for r in got) == list(range(20))


def test_streaming_available_now_and_start(spark, start_server, tmp_path):
    "Trigger.AvailableNow reads up to the last message at start; `start_seq` sets the first offset (a stream without Direct Get)."
    s = start_server('jsnb', '-js')
    async def go(js):
        await js.add_stream(name='EV', subjects=['ev'])
        for i in range(12): await js.publish('ev', str(i).encode())
    js_run(s.url, go)
    q = (spark.readStream.format('jetstream').option('url', s.url).option('stream', 'EV').option('start_seq', 5)
         .option('max_messages_per_trigger', 5).load().select('seq')
         .writeStream.format('parquet').option('path', str(tmp_path / 'o')).option('checkpointLocation', str(tmp_path / 'c'))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert sorted(r.seq for r in spark.read.parquet(str(tmp_path / 'o')).collect()) == list(range(5, 13))
    assert [p['numInputRows'] for p in q.recentProgress if p['numInputRows']] == [5, 3]


def test_write_idempotent_under_retry(spark, start_server):
    "A task that fails after publishing is retried; the stream's duplicate window drops the retry's repeats."
    s = start_server('jsnb', '-js')
    js_run(s.url, lambda js: js.add_stream(name='OUT', subjects=['out.>'], allow_direct=True))
    n, url = 700, s.url
    def gen(it):
        from pyspark import TaskContext
        attempt = TaskContext.get().attemptNumber()
        for i in it:
            yield (f'out.{i % 5}', f'attempt {attempt}'.encode().ljust(2000), str(i))   # large rows leave buffers early
        if attempt == 0:                           # fail once the writer has stored some of the rows
            from jsnb.clients.blocking import _Conn, _api
            with _Conn(url) as c:
                for _ in range(600):
                    if _api(c, 'STREAM.INFO.OUT')['state']['messages'] >= 256: break
                    time.sleep(0.05)
            raise RuntimeError('injected failure after publishing')
    df = spark.sparkContext.parallelize(range(n), 1).mapPartitions(gen).toDF('subject string, data binary, id string')
    df.write.format('jetstream').mode('append').option('url', s.url).option('stream', 'OUT').option('msg_id_column', 'id').save()
    got = read(spark, s.url, stream='OUT').collect()
    assert len(got) == n and len({r.headers['Nats-Msg-Id'][0] for r in got}) == n
    by_attempt = {a: sum(1 for r in got if bytes(r.data).rstrip() == f'attempt {a}'.encode()) for a in (0, 1)}
    assert by_attempt[0] > 0 and by_attempt[1] > 0 and sum(by_attempt.values()) == n, by_attempt
    # the default ids name each row's place in the write: the retried task's repeats are dropped too
    js_run(s.url, lambda js: js.add_stream(name='POS', subjects=['pos.>'], allow_direct=True))
    df = spark.sparkContext.parallelize(range(n), 1).mapPartitions(gen).toDF('subject string, data binary, id string')
    df.selectExpr("concat('pos.', subject) as subject", 'data').write.format('jetstream').mode('append').option('url', s.url).save()
    got = read(spark, s.url, stream='POS').collect()
    assert len(got) == n and len({r.headers['Nats-Msg-Id'][0] for r in got}) == n
    # writing the same rows again with ids from a hash of each row stores nothing new
    df2 = spark.createDataFrame([(f'out.x', f'v{i}'.encode(), {'H': str(i)}) for i in range(20)], 'subject string, data binary, headers map<string,string>')
    for _ in range(2): df2.write.format('jetstream').mode('append').option('url', s.url).option('msg_id', 'hash').save()
    got2 = read(spark, s.url, stream='OUT', subjects='out.x').collect()
    assert sorted(bytes(r.data) for r in got2) == sorted(f'v{i}'.encode() for i in range(20))
    assert all(r.headers['H'] == [bytes(r.data)[1:].decode()] for r in got2)


@pytest.mark.parametrize('kind', KINDS)
def test_write_errors(spark, start_server, kind):
    s = start_server(kind, '-js')
    async def go(js):
        await js.add_stream(name='SMALL', subjects=['small.>'], max_msg_size=64, allow_direct=True)
        await js.add_stream(name='OTHER', subjects=['other.>'])
    js_run(s.url, go)
    def write(data, subject, **opts):
        w = spark.createDataFrame([(subject, data)], 'subject string, data binary').write.format('jetstream').mode('append').option('url', s.url)
        for k, v in opts.items(): w = w.option(k, v)
        w.save()
    with pytest.raises(Exception, match=r"no stream captures subject 'nowhere\.x'"): write(b'1', 'nowhere.x')
    with pytest.raises(Exception, match=r'expected stream does not match \(code 400, err_code 10060\)'): write(b'1', 'other.x', stream='SMALL')
    with pytest.raises(Exception, match=r'message size exceeds maximum allowed \(code 400, err_code 10054\)'): write(b'x' * 100, 'small.x')
    df = spark.createDataFrame([('small.x', b'1')], 'subject string, data binary')
    with pytest.raises(Exception, match='append-only'): df.write.format('jetstream').mode('overwrite').option('url', s.url).save()
    with pytest.raises(Exception, match="column 'data'"): df.select('subject').write.format('jetstream').mode('append').option('url', s.url).save()
    write(b'ok', 'small.x')
    assert [bytes(r.data) for r in read(spark, s.url, stream='SMALL').collect()] == [b'ok']


@pytest.mark.parametrize('kind', KINDS)
def test_credentials(spark, start_server, kind):
    "user/password and token, as options or in the URL; a wrong password fails with the server's words."
    s = start_server(kind, '-js', '--user', 'ann', '--pass', 's3cret')
    async def go():
        nc = await nats.connect(s.url, user='ann', password='s3cret', connect_timeout=10)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s'], allow_direct=True)
        await js.publish('s', b'hello')
        await nc.close()
    asyncio.run(go())
    assert [bytes(r.data) for r in read(spark, s.url, stream='S', user='ann', password='s3cret').collect()] == [b'hello']
    assert read(spark, f'nats://ann:s3cret@127.0.0.1:{s.port}', stream='S').count() == 1
    with pytest.raises(Exception, match='Authorization Violation'): read(spark, s.url, stream='S', user='ann', password='nope').collect()
    t = start_server(kind, '-js', '--auth', 'tok')
    with pytest.raises(Exception, match="stream 'S' not found"): read(spark, t.url, stream='S', token='tok').collect()
    with pytest.raises(Exception, match='Authorization Violation'): read(spark, t.url, stream='S').collect()


def test_streaming_write(spark, start_server, tmp_path):
    "A streaming query publishes each micro-batch with acks; run again from a fresh checkpoint, the msg ids keep the copy single."
    s = start_server('jsnb', '-js')
    async def go(js):
        await js.add_stream(name='IN', subjects=['in.*'], allow_direct=True)
        await js.add_stream(name='COPY', subjects=['copy.>'], allow_direct=True)
        for i in range(9): await js.publish(f"in.{'xyz'[i % 3]}", str(i).encode(), headers={'N': str(i)})
    js_run(s.url, go)
    def copy(ckpt):
        q = (spark.readStream.format('jetstream').option('url', s.url).option('stream', 'IN').option('subjects', 'in.x,in.z')
             .option('max_messages_per_trigger', 4).load()
             .select(F.concat(F.lit('copy.'), 'subject').alias('subject'), 'data', 'headers', F.col('seq').cast('string').alias('id'))
             .writeStream.format('jetstream').option('url', s.url).option('stream', 'COPY').option('msg_id_column', 'id')
             .option('checkpointLocation', str(ckpt)).trigger(availableNow=True).start())
        assert q.awaitTermination(120) is not False and q.exception() is None
    copy(tmp_path / 'a'); copy(tmp_path / 'b')
    got = read(spark, s.url, stream='COPY').orderBy('data').collect()
    assert [(r.subject, bytes(r.data), r.headers['N'][0]) for r in got] == \
        [(f"copy.in.{'xyz'[i % 3]}", str(i).encode(), str(i)) for i in range(9) if i % 3 != 1]


@pytest.mark.parametrize('kind', KINDS)
def test_identical_rows_all_stored(spark, start_server, kind, tmp_path, request):
    "Identical rows are data: a batch write and a streaming copy store every one; duplicates are reported when they happen."
    s = start_server(kind, '-js')
    async def go(js):
        for name in ('SAME', 'SRC', 'DST'): await js.add_stream(name=name, subjects=[f'{name.lower()}.>'], allow_direct=True)
        for i in range(100): await js.publish('src.x', b'payload %d' % (i % 10))
    js_run(s.url, go)
    spark.createDataFrame([('same.a', b'x')] * 1000, 'subject string, data binary').repartition(3) \
        .write.format('jetstream').mode('append').option('url', s.url).save()
    q = (spark.readStream.format('jetstream').option('url', s.url).option('stream', 'SRC').option('max_messages_per_trigger', 30).load()
         .selectExpr("'dst.x' as subject", 'data').writeStream.format('jetstream').option('url', s.url)
         .option('checkpointLocation', str(tmp_path / 'c')).trigger(availableNow=True).start())
    assert q.awaitTermination(120) is not False and q.exception() is None
    counts = js_run(s.url, lambda js: asyncio.gather(*(js.stream_info(n) for n in ('SAME', 'DST'))))
    assert [c.state.messages for c in counts] == [1000, 100]
    # content ids, asked for: the stream drops the repeats and the write says how many
    spark.createDataFrame([('same.b', b'x')] * 10, 'subject string, data binary').coalesce(1) \
        .write.format('jetstream').mode('append').option('url', s.url).option('msg_id', 'hash').save()
    assert js_run(s.url, lambda js: js.stream_info('SAME')).state.messages == 1001
    assert 'jetstream write: 1 rows stored, 9 not stored' in stderr_until(request, 'not stored')


@pytest.mark.parametrize('kind', KINDS)
def test_streaming_retention_loss(spark, start_server, kind, tmp_path, request):
    "Messages the stream dropped before the query read them fail the query, naming the range; fail_on_data_loss=false goes on."
    s = start_server(kind, '-js')
    def pub(lo, hi):
        async def go(js):
            for i in range(lo, hi): await js.publish('lim.x', str(i).encode())
        js_run(s.url, go)
    js_run(s.url, lambda js: js.add_stream(name='LIM', subjects=['lim.>'], max_msgs=5, allow_direct=True))
    out = str(tmp_path / 'out')
    def run(**opts):
        r = spark.readStream.format('jetstream').option('url', s.url).option('stream', 'LIM')
        for k, v in opts.items(): r = r.option(k, v)
        q = (r.load().select('seq', 'data').writeStream.format('parquet').option('path', out)
             .option('checkpointLocation', str(tmp_path / 'c')).trigger(availableNow=True).start())
        try: q.awaitTermination(120)
        except Exception: pass                      # a failed query raises here; its exception() says why
        return q
    pub(0, 5)
    assert run().exception() is None
    pub(5, 25)                                      # 20 more: sequences 6-20 are gone before the query sees them
    e = run().exception()
    assert e is not None and "stream 'LIM' no longer holds sequences 6-20" in str(e) and 'fail_on_data_loss=false' in str(e)
    assert run(fail_on_data_loss='false').exception() is None
    assert "no longer holds sequences 6-20" in stderr_until(request, 'no longer holds')
    assert sorted(r.seq for r in spark.read.parquet(out).collect()) == [1, 2, 3, 4, 5, 21, 22, 23, 24, 25]


def test_options_refused_clearly(spark, start_server):
    "A misspelled option is refused with the nearest known one; streaming a bucket says what to do, once."
    s = start_server('jsnb', '-js')
    js_run(s.url, lambda js: js.add_stream(name='S', subjects=['s'], allow_direct=True))
    with pytest.raises(Exception, match=r"unknown option 'subject' for the jetstream source \(did you mean 'subjects'\?\)"):
        read(spark, s.url, stream='S', subject='s').collect()
    with pytest.raises(Exception, match="unknown option 'startingoffsets'"):
        read(spark, s.url, stream='S', startingOffsets='earliest').collect()
    q = (spark.readStream.format('jetstream').option('url', s.url).option('bucket', 'b').load()
         .writeStream.format('console').option('checkpointLocation', tempfile.mkdtemp()).trigger(availableNow=True).start())
    try: q.awaitTermination(120)
    except Exception: pass
    e = str(q.exception())
    assert 'KV mode (option bucket) reads batches only' in e and 'UnboundLocalError' not in e


@pytest.mark.parametrize('kind', KINDS)
def test_repeated_headers_round_trip(spark, start_server, kind):
    "A header key given more than once keeps each value, in order, through a read and a write back."
    s = start_server(kind, '-js')
    async def go(js):
        await js.add_stream(name='H', subjects=['h.>'])
        await js.publish('h.in', b'x', headers={'One': 'a'})
        nc = js._nc
        await nc.request('h.in', b'y', headers=None, timeout=5)
    js_run(s.url, go)
    from jsnb.clients.blocking import _Conn
    with _Conn(s.url) as c:                          # nats-py sends a key once: write the repeated one by hand
        c.request('h.in', b'z', b'NATS/1.0\r\nTag: a\r\nTag: b, c\r\nTag: d\r\n\r\n')
    df = read(spark, s.url, stream='H')
    got = df.orderBy('seq').collect()
    assert [r.headers for r in got] == [{'One': ['a']}, {}, {'Tag': ['a', 'b, c', 'd']}]
    df.selectExpr("'h.out' as subject", 'data', 'headers').write.format('jetstream').mode('append').option('url', s.url).save()
    back = read(spark, s.url, stream='H', subjects='h.out').orderBy('data').collect()
    assert [{k: v for k, v in r.headers.items() if k != 'Nats-Msg-Id'} for r in back] == [{'One': ['a']}, {}, {'Tag': ['a', 'b, c', 'd']}]


@pytest.mark.parametrize('kind', KINDS)
def test_streaming_row_limits(spark, start_server, kind, tmp_path):
    "max_rows_per_trigger counts rows on the filters; min_rows_per_trigger waits for rows, up to max_trigger_delay."
    s = start_server(kind, '-js')
    def pub(subjects):
        async def go(js):
            for i, subj in enumerate(subjects): await js.publish(subj, str(i).encode())
        js_run(s.url, go)
    js_run(s.url, lambda js: js.add_stream(name='RL', subjects=['rl.*']))
    pub(['rl.a' if i % 5 == 0 else 'rl.b' for i in range(40)])                # 8 rows on rl.a, far apart
    q = (spark.readStream.format('jetstream').option('url', s.url).option('stream', 'RL').option('subjects', 'rl.a')
         .option('max_rows_per_trigger', 3).load().writeStream.format('noop')
         .option('checkpointLocation', str(tmp_path / 'a')).trigger(availableNow=True).start())
    assert q.awaitTermination(120) is not False and q.exception() is None
    assert [p['numInputRows'] for p in q.recentProgress if p['numInputRows']] == [3, 3, 2]
    assert json.loads(q.recentProgress[0]['sources'][0]['latestOffset'])['seq'] == 40      # the lag, reported
    # a running query that waits for 4 rows, at most 3 s
    out = str(tmp_path / 'out')
    q = (spark.readStream.format('jetstream').option('url', s.url).option('stream', 'RL').option('subjects', 'rl.a')
         .option('start_seq', 41).option('min_rows_per_trigger', 4).option('max_trigger_delay', '3s').load()
         .select('seq').writeStream.format('parquet').option('path', out).option('checkpointLocation', str(tmp_path / 'b'))
         .trigger(processingTime='200 milliseconds').start())
    try:
        def rows_seen(): return sum(p['numInputRows'] for p in q.recentProgress)
        time.sleep(1.0); pub(['rl.a', 'rl.b', 'rl.a']); t0 = time.time()      # 2 rows: fewer than 4
        time.sleep(1.0)
        assert rows_seen() == 0                                                # waiting for more
        for _ in range(300):                                                   # until the delay runs out
            if rows_seen() == 2: break
            time.sleep(0.1)
        assert rows_seen() == 2
        waited = time.time() - t0                                              # the delay, and a batch's work
        pub(['rl.a'] * 4); t0 = time.time()                                   # enough: read without waiting out the delay
        while rows_seen() < 6 and time.time() - t0 < 60: time.sleep(0.1)
        assert rows_seen() == 6 and time.time() - t0 < 0.8 * waited, (time.time() - t0, waited)   # sooner than the delay
    finally: q.stop()
    assert q.exception() is None
