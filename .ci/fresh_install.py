"""The package as it would be published, and the README's commands on a fresh machine, in throwaway
virtualenvs (run by `.ci/run` after the tests).

0. `python -m build` makes the sdist and the wheel; `twine check --strict` passes on both, every
   classifier is a valid trove classifier, the metadata names no placeholder address, and both carry
   the LICENSE.
1. The built wheel without extras in a new virtualenv: no pandas, matplotlib or Pillow comes with it;
   every module of the package imports, except those that say which extra they need; `jsnb-docs` and
   `jsnb.stream_frame` name their extra instead of a traceback. Then `jsnb-server -js`: it must print
   `Server is ready`, and a stock client (nats-py, from the outer environment) stores and reads back a
   JetStream message. Nothing may be written inside the installed package (compiled-kernel caches
   belong in the user's cache).
2. In the same virtualenv, the README's second command's install, `pip install -e ".[dev]"`: `jsnb`
   still imports with its version, `jsnb-server` starts, and pytest collects every test.
3. The built wheel with the `spark` extra in another new virtualenv is enough to count a stream with
   `spark.read.format("jetstream")`.
"""
import asyncio, csv, email, os, pathlib, re, signal, socket, subprocess, sys, tempfile, time, venv, zipfile, tarfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def step(msg): print(f'fresh-install: {msg}', flush=True)


CLEAN = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}     # the virtualenvs import their own jsnb only


def run(*cmd, cwd=ROOT, **kw):
    "Run a command (from the checkout unless `cwd` says otherwise); stop with its output if it fails."
    kw.setdefault('env', CLEAN)
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


def built(tmp: pathlib.Path) -> pathlib.Path:
    "Build the sdist and the wheel, check them as an index would; the wheel's path."
    step('python -m build  (sdist and wheel)')
    run(sys.executable, '-m', 'build', '--outdir', tmp / 'dist', '.')
    wheel, sdist = next((tmp / 'dist').glob('*.whl')), next((tmp / 'dist').glob('*.tar.gz'))
    run(sys.executable, '-m', 'twine', 'check', '--strict', wheel, sdist)
    import trove_classifiers
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read(next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))))
        licensed = any(n.endswith('/LICENSE') for n in z.namelist())
    with tarfile.open(sdist) as t: licensed = licensed and any(n.endswith('/LICENSE') for n in t.getnames())
    bad = [c for c in meta.get_all('Classifier', []) if c not in trove_classifiers.classifiers]
    if bad: sys.exit(f'fresh-install: not trove classifiers: {bad}')
    if not licensed: sys.exit('fresh-install: the LICENSE file is missing from the sdist or the wheel')
    if re.search(r'@(example\.(com|org|net)|localhost)\b', str(meta)): sys.exit('fresh-install: a placeholder address in the metadata')
    if meta['License-Expression'] != 'Apache-2.0': sys.exit(f"fresh-install: license {meta['License-Expression']!r}")
    step(f'{wheel.name} and {sdist.name}: twine check --strict, classifiers, LICENSE, addresses')
    return wheel


IMPORT_ALL = '''
import importlib, json, pkgutil, sys, jsnb
out = {}
for m in pkgutil.walk_packages(jsnb.__path__, 'jsnb.'):
    try: importlib.import_module(m.name)
    except ModuleNotFoundError as e: out[m.name] = e.name
    except Exception as e: out[m.name] = f'{type(e).__name__}: {e}'
print(json.dumps(out))
'''
BASE_MODULES = ('jsnb.app', 'jsnb.cli', 'jsnb.clients.backup', 'jsnb.nats.server', 'jsnb.js.api')   # must import without extras
HEAVY = ('pandas', 'matplotlib', 'pillow', 'fonttools')


def lean(bin_: pathlib.Path):
    "The base install brings no analysis packages; every module imports or fails only for want of an extra's package."
    import json
    have = {l.split()[0].lower() for l in run(bin_ / 'pip', 'list', '--format=freeze').replace('==', ' ').splitlines()}
    if heavy := [p for p in HEAVY if p in have]: sys.exit(f'fresh-install: the base install brought {heavy}')
    failed = json.loads(run(bin_ / 'python', '-c', IMPORT_ALL, cwd=bin_).strip().splitlines()[-1])
    from jsnb import _EXTRAS
    wrong = {m: why for m, why in failed.items() if m in BASE_MODULES or (why or '').split('.')[0] not in _EXTRAS}
    if wrong: sys.exit(f'fresh-install: modules that do not import in the base install: {wrong}')
    r = subprocess.run([bin_ / 'jsnb-docs', 'site', '--root', ROOT, '--out', bin_.parent / 'docs'], cwd=bin_, env=CLEAN,
                       capture_output=True, text=True)
    if r.returncode != 1 or 'pip install "jsnb[docs]"' not in r.stderr or 'Traceback' in r.stderr:
        sys.exit(f'fresh-install: jsnb-docs in the base install: {r.returncode} {r.stderr[-2000:]}')
    r = subprocess.run([bin_ / 'python', '-c', 'import jsnb; jsnb.stream_frame'], cwd=bin_, env=CLEAN, capture_output=True, text=True)
    if 'pip install "jsnb[analysis]"' not in r.stderr: sys.exit(f'fresh-install: jsnb.stream_frame in the base install: {r.stderr[-2000:]}')
    step(f'no {", ".join(HEAVY)}; {len(failed)} modules need the packages of an extra: ' + ', '.join(f'{m} ({w})' for m, w in sorted(failed.items())))


def base_then_dev(tmp: pathlib.Path, wheel: pathlib.Path):
    bin_ = new_venv(tmp / 'venv')
    step(f'pip install {wheel.name}  (no extras)')
    run(bin_ / 'pip', 'install', '-q', wheel)
    lean(bin_)
    env = dict(CLEAN, XDG_CACHE_HOME=str(tmp / 'cache'))       # a user's empty cache: the kernels compile
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


def spark_only(tmp: pathlib.Path, wheel: pathlib.Path):
    bin_ = new_venv(tmp / 'venv-spark')
    step(f'pip install "{wheel.name}[spark]"  (a new virtualenv)')
    run(bin_ / 'pip', 'install', '-q', f'jsnb[spark] @ {wheel.as_uri()}')
    server = Running(bin_, tmp / 'store-spark', CLEAN)
    asyncio.run(store_and_read(server.port, n=5, direct=True))
    env = dict(CLEAN, PYSPARK_PYTHON=str(bin_ / 'python'), PYSPARK_DRIVER_PYTHON=str(bin_ / 'python'))
    out = run(bin_ / 'python', '-c', SPARK_COUNT, f'nats://127.0.0.1:{server.port}', env=env, timeout=600, cwd=bin_)
    server.stop()
    if out.split()[-1:] != ['5']: sys.exit(f'fresh-install: spark counted {out!r}, expected 5')
    step('spark.read.format("jetstream") counts the stream')


if __name__ == '__main__':
    t = time.time()
    with tempfile.TemporaryDirectory(prefix='jsnb-fresh-') as d:
        wheel = built(pathlib.Path(d))
        base_then_dev(pathlib.Path(d), wheel)
        spark_only(pathlib.Path(d), wheel)
    step(f'all good in {time.time() - t:.0f} s')
