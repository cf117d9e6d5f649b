"""The `jetstream` Spark source on a cluster and over a failing network, against jsnb and the reference nats-server:
a read's tasks spread over the servers that hold the stream, a server killed while a task reads from it (the task goes
on from another one: every row once), and a connection cut mid-read made again up to `fetch_retries` times."""
import socket, threading, time
import pytest
pytest.importorskip('pyspark')
from sparksession import spark, stderr_until, failed_tasks   # noqa: F401  (the module's session)
from conftest import KINDS
from jsclusters import JSCluster
from jsnb.clients.blocking import _Conn, _api
from jsnb.clients.spark import JetStreamDataSource
from jsnb.clients.spark_read import _Options

pytestmark = pytest.mark.timeout(600)


class Proxy:
    """A TCP proxy on loopback to `port`. Once a connection has carried `after` bytes from the server, `cut` is called
    (once, with no arguments) and, if `close`, that connection is closed; `conns` counts the connections made."""
    def __init__(self, port: int, after: int | None = None, cut=None, close: bool = True):
        self.target, self.after, self.cut, self.close, self.fired, self.conns = port, after, cut, close, False, 0
        self.lsock = socket.create_server(('127.0.0.1', 0)); self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self): return f'nats://127.0.0.1:{self.port}'

    def _accept(self):
        while True:
            try: a, _ = self.lsock.accept()
            except OSError: return
            try: b = socket.create_connection(('127.0.0.1', self.target), timeout=5)
            except OSError: a.close(); continue
            self.conns += 1
            threading.Thread(target=self._pump, args=(a, b, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(b, a, True), daemon=True).start()

    def _pump(self, src, dst, from_server):
        n = 0
        while True:
            try: data = src.recv(65536)
            except OSError: break
            if not data: break
            n += len(data)
            if from_server and self.after is not None and n > self.after:
                if not self.fired: self.fired = True; self.cut and self.cut()
                if self.close: break
            try: dst.sendall(data)
            except OSError: break
        for s in (src, dst):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
            s.close()

    def stop(self): self.lsock.close()


def fill(url, name, n, size=100, replicas=1):
    "Stream `name` (subject `<name>.x`, Direct Get on) with `n` messages of `size` bytes, each naming its number."
    with _Conn(url, timeout=30) as c:
        for _ in range(100):                                # a cluster just started may not have its meta leader yet
            try: _api(c, f'STREAM.CREATE.{name}', {'name': name, 'subjects': [f'{name.lower()}.>'], 'allow_direct': True,
                                                  'num_replicas': replicas}); break
            except Exception: time.sleep(0.3)
        for a in range(0, n, 1000):
            b = min(n, a + 1000)
            for i in range(a, b): c.send(f'{name.lower()}.x', f'{i:08d}'.encode().ljust(size, b'.'))
            c.flush()
            for _ in range(b - a): c.next()
        return _api(c, f'STREAM.INFO.{name}')


def exact(rows, n):
    "Every message read once: sequences 1..n, each with its own payload."
    got = sorted((r.seq, bytes(r.data)[:8]) for r in rows)
    return [s for s, _ in got] == list(range(1, n + 1)) and all(int(d) == s - 1 for s, d in got)


def current(cl, name, timeout=60):
    "The stream's info once all three replicas are current."
    deadline = time.time() + timeout
    while time.time() < deadline:
        with _Conn(cl.url(0)) as c: info = _api(c, f'STREAM.INFO.{name}')
        reps = (info.get('cluster') or {}).get('replicas') or []
        if len(reps) == 2 and all(r.get('current') for r in reps): return info
        time.sleep(0.2)
    raise TimeoutError(info.get('cluster'))


@pytest.mark.parametrize('kind', KINDS)
def test_read_over_a_cluster(spark, kind, request):
    """Three servers and an R3 stream of 30,000 messages. Planned from one URL, six partitions go to all three servers
    (the stream's leader first, then its replicas; before: every task to the first URL). Read in three tasks, one per
    server, through relays: once the relay of one server (a follower) has passed 300 kB of its task's 3 MB, the server
    is killed (SIGKILL). The task goes on from the next sequence on another server: every row once, and no task fails."""
    cl = JSCluster(kind, open=True).start()
    proxies = []
    try:
        cl.wait_meta()
        fill(cl.url(0), 'KILL', 30000, size=200, replicas=3)
        info = current(cl, 'KILL')
        parts = JetStreamDataSource({'url': cl.url(0), 'stream': 'KILL', 'partitions': '6'}).reader(None).partitions()
        first = []
        for p in parts:
            with _Options({'url': cl.url(0)}).connect(','.join(p.urls)) as c: first.append(c.info['server_name'])
        held = [info['cluster']['leader']] + [r['name'] for r in info['cluster']['replicas']]
        assert first == held * 2, (first, held)
        assert all(len(p.urls) >= 3 for p in parts)                   # and the others, should one go away
        meta = cl.wait_meta()
        victim = next(i for i in range(3) if f'n{i}' not in (info['cluster']['leader'], meta))     # a follower, not the meta leader
        proxies = [Proxy(cl.client[i], **(dict(after=300_000, cut=lambda: cl.kill(victim), close=False) if i == victim else {}))
                   for i in range(3)]
        df = (spark.read.format('jetstream').option('url', ','.join(p.url for p in proxies)).option('stream', 'KILL')
              .option('partitions', 3).option('batch_size', 500).load())
        spark.sparkContext.setJobGroup(f'cluster-read-{kind}', 'a read with a server killed mid-way')
        rows = df.collect()
        assert failed_tasks(spark, f'cluster-read-{kind}') == 0                          # the task went on: Spark retried nothing
        assert proxies[victim].fired and cl.procs[victim].proc.poll() is not None       # killed, mid-read
        assert exact(rows, 30000)
        err = stderr_until(request, 'going on from sequence')
        assert "reading stream 'KILL'" in err and 'going on from sequence' in err
    finally:
        for p in proxies: p.stop()
        cl.stop()


@pytest.mark.parametrize('kind', KINDS)
def test_connection_cut_mid_read(spark, start_server, kind, request):
    """A proxy in front of a server cuts every connection after 200 kB; the URL list names the proxy, then the server.
    A task cut off connects again to the next URL and goes on: every row once. With `fetch_retries=0` it gives up,
    saying so."""
    s = start_server(kind, '-js')
    fill(s.url, 'CUT', 20000, size=100)
    proxy = Proxy(s.port, after=200_000)
    try:
        def read(**opts):
            r = spark.read.format('jetstream').option('url', f'{proxy.url},{s.url}').option('stream', 'CUT').option('batch_size', 300)
            for k, v in opts.items(): r = r.option(k, v)
            return r.load().collect()
        assert exact(read(), 20000)
        assert proxy.fired and 'going on from sequence' in stderr_until(request, 'going on from sequence')
        spark.sparkContext.setJobGroup(f'cut-{kind}', 'a read that gives up')
        with pytest.raises(Exception, match=r"reading sequences \d+-20000 of stream 'CUT': .*no more tries \(fetch_retries=0\)"):
            read(fetch_retries=0)
        assert failed_tasks(spark, f'cut-{kind}') == 2          # the task, and Spark's one retry of it (local[2,2]): what the count sees
    finally: proxy.stop()
