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
    from jsnb.config import DEFAULT_STORE_DIR
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


def test_config_unknown_key_warns(tmp_path):
    s = ServerProc('jsnb', [], config='port: 4222\nmystery_knob: 3\n').start()
    try: assert '[WRN]' in s.log_text() and 'mystery_knob' in s.log_text()
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
