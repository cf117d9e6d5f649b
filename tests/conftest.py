"""Fixtures that run one scenario against jsnb and against the reference nats-server."""
import os, re, shutil, signal, subprocess, sys, tempfile, time, pathlib
import pytest

REF_BIN = shutil.which('nats-server')


@pytest.hookimpl(tryfirst=True)            # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """With several workers (`--dist loadgroup`), the tests of a module that shares a module-wide fixture (a Spark
    session, a built site, servers started once) stay on one worker, and benchmarks and soak runs on one worker,
    one after the other: they measure, and must not compete with each other."""
    for item in items:
        defs = getattr(item, '_fixtureinfo', None)
        shared = defs is not None and any(d.scope != 'function' and d.baseid.endswith('.py')
                                          for ds in defs.name2fixturedefs.values() for d in ds)
        if item.get_closest_marker('bench') or item.get_closest_marker('soak'): item.add_marker(pytest.mark.xdist_group('measure'))
        elif shared: item.add_marker(pytest.mark.xdist_group(item.module.__name__))


DURATIONS = pathlib.Path(__file__).with_name('durations.json')   # optional: seconds per test, for a machine with no cache yet
LONG = 5.0                                                          # a unit of work this long (s) starts before the rest


def _known_durations(config) -> dict[str, float]:
    "Seconds each test took when last run: the pytest cache's record of this machine's runs over `tests/durations.json`."
    import json
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    cache = getattr(config, 'cache', None)            # none with `-p no:cacheprovider`
    return {**known, **(cache.get('jsnb/durations', {}) if cache else {})}


def _xdist_active(config) -> bool:
    return bool(getattr(config.option, 'numprocesses', None)) and getattr(config.option, 'dist', 'no') != 'no'


def pytest_configure(config):
    "Under pytest-xdist, the scheduler hands out the work in the order the collection has (the longest first, below)."
    if _xdist_active(config) and not hasattr(config, 'workerinput'): config.option.loadscopereorder = False


@pytest.hookimpl(wrapper=True, tryfirst=True, specname='pytest_collection_modifyitems')   # after every other ordering
def pytest_collection_modifyitems_longest_first(config, items):
    """With several workers, the units of work (a test, or a module that shares a module-wide fixture) that took at
    least LONG seconds last time go first, longest first, so that the run does not end waiting on one long test
    started last; then the other modules that stay on one worker, the largest first (pytest-xdist's own order); the
    single tests keep their order (the file order, or the shuffled one). Alone (`-n 0`) nothing moves."""
    result = yield
    if not hasattr(config, 'workerinput'): return result      # a pytest-xdist worker collects; alone, nothing moves
    known, units = _known_durations(config), {}
    for item in items:
        group = next((m.args[0] if m.args else m.kwargs.get('name', 'default') for m in item.iter_markers('xdist_group')), None)
        nodeid = _base_nodeid(item.nodeid)
        units.setdefault(group or nodeid, []).append((item, known.get(nodeid, 0.0)))
    cost = {u: sum(d for _, d in tests) for u, tests in units.items()}
    def rank(u):        # the long ones by duration, then (as pytest-xdist would) the modules by their number of tests
        return (-cost[u], 0) if cost[u] >= LONG else (0, -len(units[u]))
    order = sorted(units, key=rank)           # stable: single short tests keep their order
    items[:] = [item for u in order for item, _ in units[u]]
    return result


_RAN: dict[str, float] = {}


def _base_nodeid(nodeid: str) -> str:
    "The test's id without the `@group` pytest-xdist appends (after the parameters' brackets)."
    at = nodeid.rfind('@')
    return nodeid[:at] if at > nodeid.rfind(']') and at > nodeid.rfind('::') else nodeid


def _record_duration(report):
    if report.outcome != 'rerun': _RAN[_base_nodeid(report.nodeid)] = _RAN.get(_base_nodeid(report.nodeid), 0.0) + report.duration


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    "The main process keeps each test's duration in the pytest cache, for the next run's order."
    config = session.config
    if hasattr(config, 'workerinput') or not _RAN or getattr(config, 'cache', None) is None: return
    config.cache.set('jsnb/durations', {**config.cache.get('jsnb/durations', {}), **{k: round(v, 2) for k, v in _RAN.items()}})


def _checks_the_docs(config) -> bool:
    "Whether this run includes the documentation site's browser checks (its file, or a folder that holds it)."
    docs = (pathlib.Path(__file__).parent / 'test_docs_site.py').resolve()
    paths = [pathlib.Path(a.split('::')[0]).resolve() for a in config.args] or [pathlib.Path(config.rootpath) / 'tests']
    return any(p == docs or p in docs.parents for p in paths)


@pytest.hookimpl(tryfirst=True)           # before pytest-xdist starts its workers: they inherit what this finds
def pytest_sessionstart(session):
    """Chromium for the documentation checks is found or installed once, in the main process, before any test runs,
    saying so on the terminal as it happens (tests/browser.py)."""
    config = session.config
    if hasattr(config, 'workerinput') or not _checks_the_docs(config): return
    from browser import ensure_chromium
    tr = config.pluginmanager.get_plugin('terminalreporter')
    say = (lambda text: (tr.write_line(text), tr.flush())) if tr else (lambda text: print(text, file=sys.__stderr__, flush=True))
    ensure_chromium(say)


@pytest.fixture(autouse=True)
def _no_event_loop_left_running(request):
    """A test (or a fixture it used) that leaves an event loop running in the worker's thread fails itself, and the loop
    is let go: otherwise every later test of that worker that calls `asyncio.run` fails instead of it."""
    yield
    import asyncio
    if asyncio._get_running_loop() is not None:
        asyncio._set_running_loop(None)
        pytest.fail(f'{request.node.nodeid} left an asyncio event loop running in its thread', pytrace=False)


_FIRST_FAILURES: list[tuple[str, str]] = []


def pytest_runtest_logreport(report):
    """Keep why a test that was run again failed the first time: the summary says only that it was run again. And how
    long each test took (setup, call and teardown)."""
    _record_duration(report)
    if report.outcome == 'rerun':
        lines = [l for l in report.longreprtext.splitlines() if l.startswith('E ') or re.match(r'\S+\.py:\d+: ', l)]
        _FIRST_FAILURES.append((report.nodeid, '\n'.join(lines[-12:])))


def pytest_terminal_summary(terminalreporter):
    if _FIRST_FAILURES:
        terminalreporter.section('why the tests run again failed the first time')
        for nodeid, why in _FIRST_FAILURES: terminalreporter.write_line(f'{nodeid}\n{why}')


KINDS = ['jsnb', 'nats-server']
_LISTEN = re.compile(r'Listening for client connections on (\S+):(\d+)')


class ServerProc:
    "A jsnb or reference server in a subprocess, started with the same flags."
    def __init__(self, kind: str, args=(), config: str | None = None, workdir: str | None = None, isolate_store: bool = True,
                 env: dict | None = None):
        self.kind, self.args, self.isolate_store, self.env = kind, list(args), isolate_store, env   # env: variables added
        self.dir = pathlib.Path(workdir or tempfile.mkdtemp(prefix=f'{kind}-'))
        self.config = config
        self.proc, self.port, self.log = None, None, self.dir / 'server.log'

    def cmd(self, port_args):
        args = list(port_args) + self.args
        if self.isolate_store and ('-js' in args or '--jetstream' in args) and '-sd' not in args and '--store_dir' not in args:
            args += ['-sd', str(self.dir / 'store')]      # never share the default store between runs
        if self.config is not None:
            conf = self.dir / 'server.conf'; conf.write_text(self.config); args += ['-c', str(conf)]
        args += ['-l', str(self.log)]
        if self.kind == 'jsnb': return [sys.executable, '-c', 'import sys; from jsnb.cli import main; sys.exit(main())'] + args
        if REF_BIN is None: pytest.skip('reference nats-server not installed')
        return [REF_BIN] + args

    def start(self, port: int | None = None, timeout: float = 20):
        "Start (on `port`, or a free port) and wait for `Server is ready`."
        if self.log.exists(): self.log.unlink()
        self.proc = subprocess.Popen(self.cmd(['-p', str(port if port else -1)]), cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, **self.env} if self.env else None)
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self.log.read_text() if self.log.exists() else ''
            if 'Server is ready' in text:
                self.port = int(_LISTEN.search(text).group(2)); return self
            if self.proc.poll() is not None:
                raise RuntimeError(f'{self.kind} exited: {self.proc.stderr.read().decode()} {text}')
            time.sleep(0.02)
        self.stop(); raise RuntimeError(f'{self.kind} did not start: {text}')

    @property
    def url(self): return f'nats://127.0.0.1:{self.port}'

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try: self.proc.wait(10)
            except subprocess.TimeoutExpired: self.proc.kill(); self.proc.wait()
        if self.proc and self.proc.stderr: self.proc.stderr.close()

    def restart(self):
        port = self.port; self.stop(); return self.start(port)

    def log_text(self): return self.log.read_text() if self.log.exists() else ''

    def ports_file(self, d) -> tuple[str, dict]: return ports_file(self.proc.pid, d)


def ports_file(pid: int, d, timeout: float = 5) -> tuple[str, dict]:
    "Name and content of `<program>_<pid>.ports` in `d`, once written (the reference writes it in the background)."
    import json
    deadline = time.time() + timeout
    while True:
        found = sorted(pathlib.Path(d).glob(f'*_{pid}.ports'))
        if found: return found[0].name, json.loads(found[0].read_text())
        if time.time() > deadline: return '', {}
        time.sleep(0.05)


@pytest.fixture
def start_server():
    "Factory: `start_server(kind, *flags, config=...)`; every server started is stopped at the end."
    started = []
    def start(kind, *args, config=None):
        s = ServerProc(kind, args, config).start(); started.append(s); return s
    yield start
    for s in started: s.stop()


@pytest.fixture(params=KINDS)
def server(request, start_server):
    "The same scenario against jsnb and against the reference."
    return start_server(request.param)


def log_lines(server, word: str) -> list[str]:
    "The log lines containing `word`, without the pid, time and the client's port and id (they differ by run)."
    out = []
    for line in server.log_text().splitlines():
        if word in line:
            text = re.sub(r'^\[\d+\] \S+ \S+ ', '', line)
            out.append(re.sub(r'127\.0\.0\.1:\d+ - cid:\d+', 'CLIENT', text))
    return out
