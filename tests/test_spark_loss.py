"""No silent loss in the `jetstream` Spark source, against jsnb and the reference nats-server: messages the stream
drops between planning a read and reading it fail the read (or, with `fail_on_data_loss=false`, are reported with
the rows lost), in batch reads and inside a micro-batch; a stream deleted and created again under a streaming
query's checkpoint is noticed; errors say what they are about where PySpark shows them."""
import pytest
pytest.importorskip('pyspark')
from sparksession import spark, stderr_until   # noqa: F401  (the module's session)
from conftest import KINDS
from jsnb.clients.blocking import NatsError, _Conn, _api

pytestmark = pytest.mark.timeout(300)


def api(url, subject, req=None):
    with _Conn(url) as c: return _api(c, subject, req)


def publish(url, subject, lo, hi, prefix='m'):
    "Publish `prefix<i>` for i in [lo, hi) to `subject` (a window of acks at a time)."
    with _Conn(url) as c:
        for a in range(lo, hi, 1000):
            b = min(hi, a + 1000)
            for i in range(a, b): c.send(subject, f'{prefix}{i}'.encode())
            c.flush()
            for _ in range(b - a): c.next()


def reader(spark, url, **opts):
    r = spark.read.format('jetstream').option('url', url)
    for k, v in opts.items(): r = r.option(k, v)
    return r.load()


def failure(fn) -> str:
    try: fn()
    except Exception as e: return str(e)
    raise AssertionError('no failure')


@pytest.mark.parametrize('kind', KINDS)
def test_batch_retention_between_planning_and_reading(spark, start_server, kind, request):
    """A batch read planned over 1,000 sequences of a stream that keeps 1,000 messages; 600 more published before
    its task runs push the first 600 out. The read fails, naming the stream, the sequences and the option; with
    `fail_on_data_loss=false` it gives what is left and says how many rows were lost. By Direct Get, with a subject
    filter, and through a consumer (a stream without Direct Get). (Before: 400 rows, no error.)"""
    s = start_server(kind, '-js')
    for name, direct in (('R', True), ('P', False)):
        api(s.url, f'STREAM.CREATE.{name}', {'name': name, 'subjects': [f'{name.lower()}.*'], 'max_msgs': 1000, 'allow_direct': direct})
    def fill(name, n, data=None):
        with _Conn(s.url) as c:
            for i in range(n): c.send(f"{name.lower()}.{'ab'[i % 2]}", data or f'm{i}'.encode())
            c.flush()
            for _ in range(n): c.next()
    for name, opts, planned in [('R', {}, 1000), ('R', {'subjects': 'r.a'}, 500), ('P', {}, 1000), ('P', {'subjects': 'p.b'}, 500)]:
        for strict in (True, False):
            api(s.url, f'STREAM.PURGE.{name}'); fill(name, 1000)
            lo = api(s.url, f'STREAM.INFO.{name}')['state']['first_seq']
            rdd = reader(spark, s.url, stream=name, fail_on_data_loss=str(strict).lower(), **opts).rdd
            assert rdd.getNumPartitions() == 1                   # planned: sequences lo .. lo + 999
            fill(name, 600, b'late')                             # the stream lets go of lo .. lo + 599
            lost = planned * 6 // 10
            facts = f'stream {name!r}: {lost} of the {planned} rows planned in sequences {lo}-{lo + 999} are gone'
            if strict:
                e = failure(rdd.collect)
                assert facts in e and f'sequences {lo}-{lo + 599}' in e and 'fail_on_data_loss=false' in e, e
            else:
                got = rdd.collect()
                keep = {'r.a': 0, 'p.b': 1}.get(opts.get('subjects'))
                assert [r.seq for r in got] == [q for q in range(lo + 600, lo + 1000) if keep is None or (q - lo) % 2 == keep]
                assert facts in stderr_until(request, facts)


@pytest.mark.parametrize('kind', KINDS)
def test_deletes_known_to_the_plan_are_not_loss(spark, start_server, kind):
    """Messages deleted before the read is planned (every tenth, and a subject purged) are not rows the plan expects:
    the read, in four partitions, gives the others and fails nothing. One deleted after planning, inside a range, is a
    gap the plan did not know of: the read fails, naming the stream and the option. (Before: one row fewer, no error.)"""
    s = start_server(kind, '-js')
    api(s.url, 'STREAM.CREATE.D', {'name': 'D', 'subjects': ['d.*'], 'allow_direct': True})
    with _Conn(s.url) as c:
        for i in range(2000): c.send(f"d.{'abc'[i % 3]}", f'm{i}'.encode())
        c.flush()
        for _ in range(2000): c.next()
    with _Conn(s.url) as c:
        for q in range(10, 2001, 10): _api(c, 'STREAM.MSG.DELETE.D', {'seq': q})
        _api(c, 'STREAM.PURGE.D', {'filter': 'd.c'})
    left = [q for q in range(1, 2001) if q % 10 and (q - 1) % 3 != 2]
    for opts, want in (({}, left), ({'subjects': 'd.a'}, [q for q in left if (q - 1) % 3 == 0])):
        df = reader(spark, s.url, stream='D', partitions=4, **opts)
        assert sorted(r.seq for r in df.collect()) == want
    rdd = reader(spark, s.url, stream='D', partitions=4).rdd
    assert rdd.getNumPartitions() == 4                           # planned
    api(s.url, 'STREAM.MSG.DELETE.D', {'seq': left[len(left) // 2]})
    e = failure(rdd.collect)
    assert "stream 'D': 1 of the" in e and 'are gone' in e and 'fail_on_data_loss=false' in e, e


@pytest.mark.parametrize('kind', KINDS)
def test_microbatch_retention_between_planning_and_reading(spark, start_server, kind, tmp_path, request):
    """Inside a micro-batch: the tasks of a batch planned over 1-1000 find 1-600 gone; the query fails, naming them.
    With `fail_on_data_loss=false` it reads what is left and warns with the same facts."""
    s = start_server(kind, '-js')
    api(s.url, 'STREAM.CREATE.M', {'name': 'M', 'subjects': ['m.>'], 'max_msgs': 1000, 'allow_direct': True})
    publish(s.url, 'm.x', 0, 1000)
    seen = []
    def batch(df, batch_id):
        rdd = df.rdd
        rdd.getNumPartitions()                                   # the micro-batch is planned
        publish(s.url, 'm.x', 1000, 1600)                        # and the stream lets go of 600 of its messages
        seen.extend(r.seq for r in rdd.collect())
    def run(ckpt, **opts):
        r = spark.readStream.format('jetstream').option('url', s.url).option('stream', 'M')
        for k, v in opts.items(): r = r.option(k, v)
        q = r.load().writeStream.foreachBatch(batch).option('checkpointLocation', str(ckpt)).trigger(availableNow=True).start()
        try: q.awaitTermination(120)
        except Exception: pass
        return q
    e = str(run(tmp_path / 'a').exception())
    assert "stream 'M'" in e and 'sequences 1-600' in e and 'fail_on_data_loss=false' in e, e
    api(s.url, 'STREAM.PURGE.M'); publish(s.url, 'm.x', 0, 1000)        # sequences 1601-2600, then 2601-3200 in the batch
    seen.clear()
    assert run(tmp_path / 'b', fail_on_data_loss='false').exception() is None
    assert seen == list(range(2201, 2601))
    facts = "stream 'M': 600 of the 1000 rows planned in sequences 1601-2600 are gone: sequences 1601-2200 were removed"
    assert facts in stderr_until(request, facts)


def recreate(url, name, n, prefix):
    "(Delete and) create stream `name` with `n` messages `prefix<i>`."
    try: api(url, f'STREAM.DELETE.{name}')
    except NatsError: pass
    api(url, f'STREAM.CREATE.{name}', {'name': name, 'subjects': [f'{name.lower()}.>'], 'allow_direct': True})
    publish(url, f'{name.lower()}.x', 0, n, prefix)


@pytest.mark.parametrize('kind', KINDS)
def test_recreated_stream_under_a_checkpoint(spark, start_server, kind, tmp_path, request):
    """A query read 1,000 messages and stopped; the stream was deleted and created again with 1,500 others. Restarted
    from its checkpoint, the query fails, saying so; with `fail_on_data_loss=false` it reads the new stream from its
    first sequence, with a warning. (Before: sequences 1-1,000 of the new stream were never read.)"""
    s = start_server(kind, '-js')
    recreate(s.url, 'RC', 1000, 'old')
    out, ckpt = str(tmp_path / 'out'), str(tmp_path / 'ckpt')
    def run(**opts):
        r = spark.readStream.format('jetstream').option('url', s.url).option('stream', 'RC')
        for k, v in opts.items(): r = r.option(k, v)
        q = (r.load().selectExpr('seq', "cast(data as string) as data").writeStream.format('parquet').option('path', out)
             .option('checkpointLocation', ckpt).trigger(availableNow=True).start())
        try: q.awaitTermination(120)
        except Exception: pass
        return q
    assert run().exception() is None
    recreate(s.url, 'RC', 1500, 'new')
    e = str(run().exception())
    assert "stream 'RC' was deleted and created again" in e and 'fail_on_data_loss=false' in e, e
    assert run(fail_on_data_loss='false').exception() is None
    assert 'reading the new stream from its first sequence' in stderr_until(request, 'reading the new stream')
    got = spark.read.parquet(out).collect()
    assert sorted(r.data for r in got if r.data.startswith('new')) == sorted(f'new{i}' for i in range(1500))
    assert sorted(r.data for r in got if r.data.startswith('old')) == sorted(f'old{i}' for i in range(1000))


@pytest.mark.parametrize('kind', KINDS)
def test_offsets_know_their_stream(start_server, kind):
    """Offsets carry the stream's `created` time; an offset past the stream's end (the stream went backwards, say
    from an offset written before offsets knew their stream) is loss, not a silent skip."""
    from jsnb.clients.spark import _StreamReader
    from jsnb.clients.spark_read import _Options
    s = start_server(kind, '-js')
    recreate(s.url, 'B', 30, 'm')
    created = api(s.url, 'STREAM.INFO.B')['created']
    def stream_reader(**opts): return _StreamReader(_Options({'url': s.url, 'stream': 'B', **opts}), None)
    r = stream_reader()
    assert r.initialOffset() == {'seq': 0, 'created': created}
    assert r.latestOffset({'seq': 0, 'created': created}) == {'seq': 30, 'created': created}
    with pytest.raises(RuntimeError, match=r"stream 'B' ends at sequence 30, before the query's offset 50.*fail_on_data_loss=false"):
        r.latestOffset({'seq': 50})
    with pytest.raises(RuntimeError, match=r"stream 'B' was deleted and created again"):
        r.latestOffset({'seq': 10, 'created': '2001-01-01T00:00:00Z'})
    lax = stream_reader(fail_on_data_loss='false')
    end = lax.latestOffset({'seq': 50})
    assert end == {'seq': 30, 'created': created}
    assert [(p.lo, p.hi) for p in lax.partitions({'seq': 50}, end)] == [(1, 30)]                 # from its first sequence
    assert [(p.lo, p.hi) for p in lax.partitions({'seq': 10, 'created': created}, end)] == [(11, 30)]
    r.stop(); lax.stop()


def test_option_errors_where_pyspark_shows_them(spark, start_server):
    "A misspelled option in readStream is refused at load(), by name (before: PySpark's UnboundLocalError)."
    s = start_server('jsnb', '-js')
    with pytest.raises(Exception, match=r"unknown option 'subject' for the jetstream source \(did you mean 'subjects'\?\)") as e:
        spark.readStream.format('jetstream').option('url', s.url).option('stream', 'S').option('subject', 'x').load()
    assert 'UnboundLocalError' not in str(e.value)
    with pytest.raises(Exception, match=r"option 'partitions' must be an integer"):
        spark.readStream.format('jetstream').option('url', s.url).option('stream', 'S').option('partitions', 'x').load()


@pytest.mark.parametrize('kind', KINDS)
def test_missing_stream_named(spark, start_server, kind, tmp_path):
    "A stream that does not exist is named in the error, for batch reads and for streaming queries."
    s = start_server(kind, '-js')
    with pytest.raises(Exception, match=r"stream 'NOPE' not found \(code 404, err_code 10059\)"): reader(spark, s.url, stream='NOPE').collect()
    q = (spark.readStream.format('jetstream').option('url', s.url).option('stream', 'NOPE').load().writeStream.format('noop')
         .option('checkpointLocation', str(tmp_path)).trigger(availableNow=True).start())
    try: q.awaitTermination(60)
    except Exception: pass
    assert "stream 'NOPE' not found" in str(q.exception())
