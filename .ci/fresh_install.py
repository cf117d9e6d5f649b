"""The README's commands on a fresh machine, in throwaway virtualenvs (run by `.ci/run` after the tests).

1. `pip install .` (no extras), then `jsnb-server -js`: it must print `Server is ready`, and a stock
   client (nats-py, from the outer environment) stores and reads back a JetStream message. Nothing may
   be written inside the installed package (compiled-kernel caches belong in the user's cache).
2. In the same virtualenv, the README's second command's install, `pip install -e ".[dev]"`: `jsnb`
   still imports with its version, `jsnb-server` starts, and pytest collects every test.
3. `pip install ".[spark]"` in another new virtualenv is enough to count a stream with
   `spark.read.format("jetstream")`.
"""
import asyncio, csv, os, pathlib, signal, socket, subprocess, sys, tempfile, time, venv

ROOT = pathlib.Path(__file__).resolve().parent.parent


def step(msg): print(f'fresh-install: {msg}', flush=True)


def run(*cmd, cwd=ROOT, **kw):
    "Run a command (from the checkout unless `cwd` says otherwise); stop with its output if it fails."
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, text=True, capture_output=True, **kw)
    if r.returncode: sys.exit(f'fresh-install: {" ".join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}')
    return r.stdout


def new_venv(where: pathlib.Path) -> pathlib.Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / 'bin'


def free_port() -> int:
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


class Running:
    "`jsnb-server -js` from a virtualenv, on a free port, until `Server is ready`."
    def __init__(self, bin_: pathlib.Path, store: pathlib.Path, env=None):
        self.port = free_port()
        self.log = store.parent / f'server-{self.port}.log'
        self.proc = subprocess.Popen([bin_ / 'jsnb-server', '-js', '-p', str(self.port), '-sd', str(store), '-l', str(self.log)],
                                     cwd=store.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while 'Server is ready' not in self.text():
            if self.proc.poll() is not None: sys.exit(f'fresh-install: jsnb-server exited:\n{self.proc.stderr.read()}\n{self.text()}')
            if time.time() > deadline: self.stop(); sys.exit(f'fresh-install: jsnb-server did not start:\n{self.text()}')
            time.sleep(0.05)

    def text(self): return self.log.read_text() if self.log.exists() else ''

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        if rc != 0: sys.exit(f'fresh-install: jsnb-server stopped with status {rc}:\n{self.proc.stderr.read()}\n{self.text()}')


async def store_and_read(port: int, n: int = 1, direct: bool = False) -> None:
    "Store `n` messages in stream FRESH with nats-py and read the last one back."
    import nats
    nc = await nats.connect(f'nats://127.0.0.1:{port}')
    js = nc.jetstream()
    await js.add_stream(name='FRESH', subjects=['fresh.>'], allow_direct=direct)
    for i in range(n): ack = await js.publish('fresh.x', f'hello {i}'.encode())
    assert (ack.stream, ack.seq) == ('FRESH', n), ack
    sub = await js.pull_subscribe('fresh.x', durable='READER')
    msgs = await sub.fetch(n, timeout=10)
    assert [m.data for m in msgs] == [f'hello {i}'.encode() for i in range(n)], msgs
    await nc.close()


def files_not_installed(bin_: pathlib.Path) -> list[str]:
    "Files inside the installed `jsnb` package that pip did not install (and so would not remove)."
    site = pathlib.Path(run(bin_ / 'python', '-c', 'import jsnb, os; print(os.path.dirname(jsnb.__file__))', cwd=bin_).strip())
    dist = next(site.parent.glob('jsnb-*.dist-info'))
    recorded = {(site.parent / row[0]).resolve() for row in csv.reader((dist / 'RECORD').open())}
    return [str(p) for p in site.rglob('*') if p.is_file() and p.resolve() not in recorded]


def base_then_dev(tmp: pathlib.Path):
    bin_ = new_venv(tmp / 'venv')
    step('pip install .  (no extras)')
    run(bin_ / 'pip', 'install', '-q', '.')
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / 'cache'))       # a user's empty cache: the kernels compile
    env.pop('JSNB_CACHE_DIR', None)
    server = Running(bin_, tmp / 'store', env)
    step(f'jsnb-server -js is ready; nats-py stores and reads a message')
    asyncio.run(store_and_read(server.port))
    code = 'import jsnb.js.kernels as k; print(k.warm() > 0 or not k.WANTED)'  # the server's kernels, compiled and cached
    assert run(bin_ / 'python', '-c', code, env=env, cwd=bin_).split() == ['True']
    server.stop()
    stray = files_not_installed(bin_)
    if stray: sys.exit(f'fresh-install: files written inside the installed package: {stray}')
    if not list((tmp / 'cache' / 'jsnb').rglob('*.nbi')): sys.exit('fresh-install: no compiled kernels in the user cache')
    step('pip install -e ".[dev]"  (the second README command, same virtualenv)')
    run(bin_ / 'pip', 'install', '-q', '-e', '.[dev]')
    version = run(bin_ / 'python', '-c', 'import jsnb; print(jsnb.__version__)', cwd=bin_).strip()
    step(f'jsnb {version} imports; pytest collects')
    run(bin_ / 'python', '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider')
    server = Running(bin_, tmp / 'store2', env)
    asyncio.run(store_and_read(server.port))
    server.stop()


SPARK_COUNT = '''
import sys
from pyspark.sql import SparkSession
import jsnb.clients.spark
spark = SparkSession.builder.master("local[2]").appName("fresh-install").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
jsnb.clients.spark.register(spark)
n = spark.read.format("jetstream").option("url", sys.argv[1]).option("stream", "FRESH").load().count()
spark.stop()
print(n)
'''


def spark_only(tmp: pathlib.Path):
    bin_ = new_venv(tmp / 'venv-spark')
    step('pip install ".[spark]"  (a new virtualenv)')
    run(bin_ / 'pip', 'install', '-q', '.[spark]')
    server = Running(bin_, tmp / 'store-spark')
    asyncio.run(store_and_read(server.port, n=5, direct=True))
    env = dict(os.environ, PYSPARK_PYTHON=str(bin_ / 'python'), PYSPARK_DRIVER_PYTHON=str(bin_ / 'python'))
    out = run(bin_ / 'python', '-c', SPARK_COUNT, f'nats://127.0.0.1:{server.port}', env=env, timeout=600, cwd=bin_)
    server.stop()
    if out.split()[-1:] != ['5']: sys.exit(f'fresh-install: spark counted {out!r}, expected 5')
    step('spark.read.format("jetstream") counts the stream')


if __name__ == '__main__':
    t = time.time()
    with tempfile.TemporaryDirectory(prefix='jsnb-fresh-') as d:
        base_then_dev(pathlib.Path(d))
        spark_only(pathlib.Path(d))
    step(f'all good in {time.time() - t:.0f} s')
