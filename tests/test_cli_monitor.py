"""The `jsnb-server` command and HTTP monitoring, checked against the reference."""
import json, os, shutil, signal, socket, subprocess, sys, time, urllib.request
import pytest
import nats
from conftest import ServerProc, REF_BIN


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


def get(port, path):
    with urllib.request.urlopen(f'http://127.0.0.1:{port}{path}', timeout=5) as r:
        return r.headers.get('Content-Type'), json.loads(r.read())


def test_console_script_version():
    exe = shutil.which('jsnb-server')
    assert exe, 'jsnb-server is not on PATH: the package is not installed'
    r = subprocess.run([exe, '--version'], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and 'jsnb-server' in r.stdout


def test_default_jetstream_start_uses_embedded_store(tmp_path):
    "`jsnb-server -js` needs nothing else: it creates its store directory and reports it."
    s = ServerProc('jsnb', ['-js', '-sd', str(tmp_path / 'store')]).start()
    try:
        log = s.log_text()
        assert f'Store Directory: "{tmp_path / "store" / "jetstream"}"' in log
        assert (tmp_path / 'store' / 'jetstream').is_dir()
        assert 'Listening for client connections on 0.0.0.0:' in log and 'Server is ready' in log
    finally: s.stop()


def test_default_store_dir_without_flag():
    from jsnb.nats.config import DEFAULT_STORE_DIR
    s = ServerProc('jsnb', ['-js'], isolate_store=False).start()
    try: assert f'Store Directory: "{os.path.join(DEFAULT_STORE_DIR, "jetstream")}"' in s.log_text()
    finally: s.stop()


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT])
def test_graceful_shutdown(sig):
    s = ServerProc('jsnb', []).start()
    sock = socket.create_connection(('127.0.0.1', s.port)); sock.recv(4096)
    s.proc.send_signal(sig)
    assert s.proc.wait(10) == 0
    log = s.log_text()
    assert 'Initiating Shutdown...' in log and 'Server Exiting..' in log
    sock.settimeout(5); assert sock.recv(100) == b''          # the client was closed, not left hanging
    s.stop()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_config_syntax_error_names_the_line(kind, tmp_path):
    conf = tmp_path / 'bad.conf'
    conf.write_text('port: 4222\nserver_name: "x"\njetstream {\n  store_dir: \n')
    exe = [REF_BIN] if kind == 'nats-server' else [sys.executable, '-c', 'import sys; from jsnb.cli import main; sys.exit(main())']
    if exe[0] is None: pytest.skip('no reference')
    r = subprocess.run(exe + ['-c', str(conf)], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    if kind == 'jsnb':
        assert 'bad.conf:' in r.stderr and 'configuration error' in r.stderr, r.stderr
        assert any(f'bad.conf:{n}' in r.stderr for n in (4, 5)), r.stderr


def _run_server(kind, args, timeout=20):
    "Run a server that is expected to stop by itself: (exit status, everything it printed)."
    exe = [REF_BIN] if kind == 'nats-server' else [sys.executable, '-c', 'import sys; from jsnb.cli import main; sys.exit(main())']
    if exe[0] is None: pytest.skip('no reference')
    r = subprocess.run(exe + args, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_config_unknown_key_stops_the_server(kind, tmp_path):
    "A misspelt key is an error, as in the reference, with its line; `-t` fails on it too."
    conf = tmp_path / 'typo.conf'
    conf.write_text('port: 4222\nmax_paylod: 1MB\n')
    for extra in ([], ['-t']):
        rc, out = _run_server(kind, ['-c', str(conf)] + extra)
        assert rc == 1 and 'typo.conf:2' in out and 'unknown field "max_paylod"' in out, out


def test_config_unsupported_option_stops_the_server(tmp_path):
    "A nats-server option jsnb does not implement is refused, never read and ignored."
    conf = tmp_path / 'resolver_tls.conf'
    conf.write_text('port: 4222\nresolver_tls { cert_file: x }\n')
    rc, out = _run_server('jsnb', ['-c', str(conf), '-t'])
    assert rc == 1 and '"resolver_tls" is a nats-server option that jsnb does not support yet' in out, out
    assert 'refusing to start rather than run without it' in out, out


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_store_dir_that_is_a_file(kind, tmp_path):
    (tmp_path / 'afile').write_text('x')
    for sd in (tmp_path / 'afile', tmp_path / 'afile' / 'below'):
        rc, out = _run_server(kind, ['-js', '-p', '-1', '-sd', str(sd)])
        assert rc == 1 and "[FTL] Can't start JetStream: storage directory is not a directory" in out, out
        assert 'Server is ready' not in out and 'Error listening' not in out


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_pid_file_that_cannot_be_written(kind, tmp_path):
    rc, out = _run_server(kind, ['-p', '-1', '-P', str(tmp_path / 'missing' / 'pid')])
    assert rc == 1 and '[FTL] Could not write pidfile:' in out and 'Server is ready' not in out, out


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_monitor_port_in_use(kind):
    with socket.socket() as busy:
        busy.bind(('0.0.0.0', 0)); busy.listen()
        port = busy.getsockname()[1]
        rc, out = _run_server(kind, ['-p', '-1', '-m', str(port)])
    assert rc == 1 and "[FTL] Can't start monitoring: can't listen to the monitor port" in out and f':{port}' in out, out
    assert 'Error listening on port' not in out and 'Server is ready' not in out


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_client_port_in_use(kind):
    with socket.socket() as busy:
        busy.bind(('0.0.0.0', 0)); busy.listen()
        port = busy.getsockname()[1]
        rc, out = _run_server(kind, ['-p', str(port)])
    assert rc == 1 and f'[FTL] Error listening on port: 0.0.0.0:{port},' in out and 'in use' in out, out


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_log_file_that_cannot_be_opened(kind, tmp_path):
    rc, out = _run_server(kind, ['-p', '-1', '-l', str(tmp_path / 'missing' / 'x.log')])
    assert rc == 1 and 'missing/x.log' in out and 'no such file or directory' in out.lower() and 'Traceback' not in out, out


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_go_style_boolean_flags(kind, tmp_path):
    "`-js=true` starts JetStream, `-js=false` does not, as with Go's flag package."
    for value, expect in (('true', True), ('false', False)):
        s = ServerProc(kind, [f'-js={value}', '-sd', str(tmp_path / value)]).start()
        try: assert ('Starting JetStream' in s.log_text()) == expect, s.log_text()
        finally: s.stop()


def test_debug_and_trace_flags():
    s = ServerProc('jsnb', ['-DV']).start()
    try:
        sock = socket.create_connection(('127.0.0.1', s.port)); sock.recv(4096)
        sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n'); sock.recv(100); sock.close()
        time.sleep(0.3)
        log = s.log_text()
        assert '[DBG]' in log and 'Client connection created' in log and '[TRC]' in log and '<<- [PING]' in log
    finally: s.stop()


ENDPOINTS = ['/varz', '/connz', '/connz?subs=1', '/connz?subs=detail', '/subsz', '/subsz?subs=1', '/jsz', '/healthz']


def _keys(d, prefix=''):
    "Every key path in a JSON document (list items merged)."
    out = set()
    if isinstance(d, dict):
        for k, v in d.items():
            out.add(prefix + k); out |= _keys(v, prefix + k + '.')
    elif isinstance(d, list):
        for x in d: out |= _keys(x, prefix)
    return out


@pytest.mark.reference
async def test_monitoring_fields_match_reference(tmp_path):
    "Every field jsnb reports is named as the reference names it, and the core ones are all there."
    servers = [ServerProc(k, ['-js', '-sd', str(tmp_path / k), '-m', str(free_port())]).start() for k in ('nats-server', 'jsnb')]
    try:
        docs = {}
        for s in servers:
            nc = await nats.connect(s.url, name='monitor-test')
            await nc.subscribe('watch.*', queue='q'); await nc.flush()
            http = int(s.args[s.args.index('-m') + 1])
            docs[s.kind] = {e: get(http, e) for e in ENDPOINTS}
            await nc.close()
        for e in ENDPOINTS:
            (rct, ref), (jct, ours) = docs['nats-server'][e], docs['jsnb'][e]
            assert jct == rct
            extra = _keys(ours) - _keys(ref) - {'jsnb_version'}
            assert not extra, f'{e}: fields the reference does not have: {extra}'
        must = {'/varz': {'server_id', 'version', 'port', 'max_payload', 'connections', 'in_msgs', 'out_msgs', 'mem', 'uptime',
                          'subscriptions', 'slow_consumers', 'jetstream.config.store_dir'},
                '/connz?subs=detail': {'connections.cid', 'connections.name', 'connections.subscriptions_list_detail.qgroup'},
                '/subsz?subs=1': {'num_subscriptions', 'subscriptions_list.subject'},
                '/jsz': {'config.store_dir', 'streams', 'messages'}, '/healthz': {'status'}}
        for e, keys in must.items(): assert keys <= _keys(docs['jsnb'][e][1]), (e, keys - _keys(docs['jsnb'][e][1]))
        assert docs['jsnb']['/healthz'][1] == docs['nats-server']['/healthz'][1] == {'status': 'ok'}
        c = docs['jsnb']['/connz?subs=detail'][1]['connections'][0]
        assert c['name'] == 'monitor-test' and c['subscriptions_list_detail'][0]['subject'] == 'watch.*'
    finally:
        for s in servers: s.stop()


@pytest.mark.parametrize('sync,expected', [('always', {'sync_interval': 120_000_000_000, 'sync_always': True}),
                                           ('"30s"', {'sync_interval': 30_000_000_000})])
def test_jsz_reports_sync_settings_as_the_reference(start_server, sync, expected):
    "The file store's sync setting appears in /jsz's config as the reference reports it."
    import json, socket, urllib.request
    seen = []
    for kind in ('nats-server', 'jsnb'):
        with socket.socket() as so: so.bind(('127.0.0.1', 0)); hp = so.getsockname()[1]
        s = start_server(kind, '-js', config=f'jetstream {{ sync_interval: {sync} }}\nhttp_port: {hp}\n')
        cfg = json.loads(urllib.request.urlopen(f'http://127.0.0.1:{hp}/jsz', timeout=5).read())['config']
        seen.append({k: cfg.get(k) for k in ('sync_interval', 'sync_always') if k in cfg})
    assert seen == [expected, expected]


def test_monitoring_answers_only_once_clients_can_connect(tmp_path):
    """Harnesses poll `/varz` to learn that a server is up: when jsnb answers, its client port is already open
    (the reference opens monitoring first and usually wins the race because it starts fast; jsnb guarantees it)."""
    mport = free_port()
    exe = [sys.executable, '-c', 'import sys; from jsnb.cli import main; sys.exit(main())']
    port = free_port()
    p = subprocess.Popen(exe + ['-js', '-sd', str(tmp_path), '-p', str(port), '-m', str(mport)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while True:
            try: get(mport, '/varz'); break
            except OSError:
                assert time.time() < deadline and p.poll() is None; time.sleep(0.002)
        socket.create_connection(('127.0.0.1', port), timeout=2).close()
    finally: p.terminate(); p.wait(10)


BAD_FLAGS = {   # flags with a bad value: the reference's message (first line), which jsnb prints as its only line
    'client port too big': ['-p', '99999'], 'client port 65536': ['-p', '65536'], 'client port negative': ['-p', '-5'],
    'client port not a number': ['-p', 'abc'], 'client port missing': ['-p'],
    'monitor port too big': ['-m', '99999'], 'monitor port negative': ['-p', '-1', '-m', '-2'], 'monitor port not a number': ['-m', 'x'],
    'https port not a number': ['-ms', 'x'], 'connect retries not a number': ['--connect_retries', 'abc'],
    'unknown flag': ['--zzz'], 'switch with a bad value': ['-js=maybe'], 'unknown host': ['-a', '999.1.1.1', '-p', '-1'],
    'pid file in no directory': ['-p', '-1', '-P', '/nonexistent/x.pid'], 'store in no directory': ['-p', '-1', '-js', '-sd', '/proc/x/y'],
}


def _first_error(text: str) -> str:
    "The error of a failed start, without the log's pid, time and level, or a program name before it."
    import re
    line = next(l for l in text.splitlines() if l.strip() and ('[FTL]' in l or not l.startswith('[')))
    return re.sub(r'^(\[\d+\] \S+ \S+ \[FTL\] |jsnb-server: |nats-server: )', '', line).removesuffix(' (jsnb-server -h lists the flags)')


@pytest.mark.parametrize('case', list(BAD_FLAGS))
def test_bad_flag_values_are_one_line(case, tmp_path):
    """A bad flag value stops jsnb-server with one line on stderr (no traceback, no usage) that says what the
    reference says, and a non-zero status."""
    if REF_BIN is None: pytest.skip('no reference')
    args = BAD_FLAGS[case]
    ref = subprocess.run([REF_BIN, *args], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    ours = subprocess.run([sys.executable, '-c', 'import sys; from jsnb.cli import main; sys.exit(main())', *args],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = [l for l in ours.stderr.splitlines() if l.strip() and '[INF]' not in l and '[WRN]' not in l]
    assert ours.returncode != 0 and len(lines) == 1 and 'Traceback' not in ours.stderr, (ours.returncode, ours.stderr)
    theirs = _first_error(ref.stderr + ref.stdout)
    if case == 'pid file in no directory': theirs = theirs.replace('open /nonexistent/x.pid: no such file or directory', 'No such file or directory: /nonexistent/x.pid')
    if case == 'store in no directory': theirs = theirs.replace('mkdir /proc/x: no such file or directory', 'No such file or directory')
    assert _first_error(ours.stderr) == theirs, (ours.stderr, ref.stderr)
