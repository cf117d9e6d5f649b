"""What a client must not reach, against jsnb and the reference with the same configuration: the JetStream API and the
key-value subjects through a JetStream domain's mapping, for a user whose permissions deny them."""
import json, socket, time
import pytest
from conftest import KINDS, ServerProc

pytestmark = pytest.mark.reference

DOMAIN_CONF = '''jetstream {{ domain: hub, store_dir: "{store}" }}
authorization {{ users = [
  {{user: a, password: a}},
  {{user: b, password: b, permissions: {{publish: {{deny: ["$JS.API.>", "$KV.>"]}}}}}} ] }}
'''


def raw(port: int, user: bytes, lines: bytes, wait: float = 0.5) -> bytes:
    "What a client logged in as `user` is sent after `lines`, until it is quiet."
    s = socket.create_connection(('127.0.0.1', port), timeout=5); s.recv(4096)
    s.sendall(b'CONNECT {"user":"%s","pass":"%s","verbose":false,"headers":true}\r\n' % (user, user) + lines)
    out, end = b'', time.time() + 5
    s.settimeout(wait)
    while time.time() < end:
        try: d = s.recv(65536)
        except socket.timeout: break
        if not d: break
        out += d
    s.close()
    return out


@pytest.mark.parametrize('target', [b'$JS.hub.API.STREAM.DELETE.V', b'$JS.hub.API.STREAM.INFO.V', b'$JS.hub.API.$KV.V.key'])
def test_domain_mapping_checks_the_mapped_subject(tmp_path, target):
    "A user denied `$JS.API.>` and `$KV.>` reaches neither through `$JS.<domain>.API.`: refused by name, the stream kept."
    got = {}
    for kind in KINDS:
        s = ServerProc(kind, [], DOMAIN_CONF.format(store=tmp_path / kind)).start()
        try:
            cfg = json.dumps({'name': 'V', 'subjects': ['v', '$KV.V.>']}).encode()
            assert b'did_create' in raw(s.port, b'a', b'SUB r 1\r\nPUB $JS.API.STREAM.CREATE.V r %d\r\n%s\r\nPING\r\n' % (len(cfg), cfg))
            answer = raw(s.port, b'b', b'SUB r 1\r\nPUB %s r 1\r\nx\r\nPING\r\n' % target)
            names = raw(s.port, b'a', b'SUB r 1\r\nPUB $JS.API.STREAM.INFO.V r 0\r\n\r\nPING\r\n')
            got[kind] = (answer, b'"messages":0' in names, [l.split(' - ', 3)[-1] for l in s.log_text().splitlines() if 'Violation' in l])
        finally: s.stop()
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][0].startswith(b"-ERR 'Permissions Violation for Publish to") and got['jsnb'][1] is True


@pytest.mark.parametrize('field', ['name', 'durable_name'])
@pytest.mark.parametrize('value', [['x'], {'a': 1}], ids=['list', 'object'])
def test_consumer_name_of_the_wrong_type(start_server, field, value):
    "A consumer's name given as a list or an object: the reference's invalid-JSON answer, no server error."
    import nats, asyncio
    async def go(url):
        nc = await nats.connect(url)
        await nc.request('$JS.API.STREAM.CREATE.S', json.dumps({'name': 'S', 'subjects': ['s']}).encode(), timeout=5)
        r = await nc.request('$JS.API.CONSUMER.CREATE.S', json.dumps({'stream_name': 'S', 'config': {field: value}}).encode(), timeout=5)
        await nc.close()
        return json.loads(r.data)['error']
    got = {k: asyncio.run(go(start_server(k, '-js').url)) for k in KINDS}
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb']['err_code'] == 10025


def _bcrypt(pw: str) -> str:
    import bcrypt
    return bcrypt.hashpw(pw.encode(), bcrypt.gensalt(4, prefix=b'2a')).decode()


def _count(port: int, path: str, key: str) -> int:
    import urllib.request
    with urllib.request.urlopen(f'http://127.0.0.1:{port}{path}', timeout=5) as r: return len(json.load(r).get(key) or [])


def _http(s) -> int:
    import re
    return int(re.search(r'Starting http monitor on \S+:(\d+)', s.log_text()).group(1))


def _port(s, what: str) -> int:
    import re
    return int(re.search(rf'Listening for {what} connections on \S+:(\d+)', s.log_text()).group(1))


def _settle(pred, timeout=8.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if pred(): return True
        time.sleep(0.1)
    return pred()


@pytest.mark.parametrize('what', ['route', 'leafnode'])
def test_bcrypt_passwords_of_routes_and_leaf_nodes(what):
    """A route or leaf node password configured as a bcrypt hash admits the password, and refuses the hash itself
    (whoever read the configuration does not get in), as for clients."""
    hashed = _bcrypt('s3cret')
    got = {}
    for kind in KINDS:
        if what == 'route': conf = f'server_name: hub\nhttp: 127.0.0.1:-1\ncluster {{ name: c, listen: "127.0.0.1:-1", authorization {{ user: r, password: "{hashed}" }} }}\n'
        else: conf = f'server_name: hub\nhttp: 127.0.0.1:-1\nleafnodes {{ listen: "127.0.0.1:-1", authorization {{ user: r, password: "{hashed}" }} }}\n'
        hub = ServerProc(kind, [], conf).start()
        out = []
        try:
            port = _port(hub, what)
            for pw in ('s3cret', hashed):
                from urllib.parse import quote
                url = f'{"nats-route" if what == "route" else "nats-leaf"}://r:{quote(pw, safe="")}@127.0.0.1:{port}'
                if what == 'route': c = f'server_name: spoke\ncluster {{ name: c, listen: "127.0.0.1:-1", routes: ["{url}"] }}\n'
                else: c = f'server_name: spoke\nleafnodes {{ remotes: [ {{ url: "{url}" }} ] }}\n'
                spoke = ServerProc(kind, [], c).start()
                try:
                    path, key = ('/routez', 'routes') if what == 'route' else ('/leafz', 'leafs')
                    out.append(_settle(lambda: _count(_http(hub), path, key) > 0, 4 if pw == hashed else 8))
                finally: spoke.stop()
                _settle(lambda: _count(_http(hub), path, key) == 0)
        finally: hub.stop()
        got[kind] = out
    assert got['jsnb'] == got['nats-server'] == [True, False]


def listening(pid: int) -> list[tuple[str, int]]:
    "The TCP addresses process `pid` listens on, from `ss` (address, port)."
    import subprocess, re
    out = subprocess.run(['ss', '-ltnpH'], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        if f'pid={pid},' not in line: continue
        addr = line.split()[3]
        host, _, port = addr.rpartition(':')
        found.append((host.strip('[]'), int(port)))
    return sorted(found)


def test_monitoring_listens_on_the_client_host():
    "With `-a 127.0.0.1` and a monitoring port, every listener is on 127.0.0.1 (the monitor follows the client host)."
    import shutil
    if shutil.which('ss') is None: pytest.skip('ss (iproute2) not installed')
    got = {}
    for kind in KINDS:
        s = ServerProc(kind, ['-a', '127.0.0.1', '-m', '-1']).start()
        try: got[kind] = sorted({h for h, _ in listening(s.proc.pid)})
        finally: s.stop()
    assert got['jsnb'] == got['nats-server'] == ['127.0.0.1']


@pytest.mark.parametrize('auth', [[], ['--user', 'u', '--pass', 'p']], ids=['open', 'authorization'])
def test_connect_longer_than_the_control_line(auth):
    "A CONNECT longer than `max_control_line`: the same error and log line with or without authorization."
    got = {}
    for kind in KINDS:
        s = ServerProc(kind, auth).start()
        try:
            c = socket.create_connection(('127.0.0.1', s.port), timeout=5); c.recv(4096)
            c.sendall(b'CONNECT {"user":"u","pass":"p","name":"' + b'x' * 5000 + b'"}\r\nPING\r\n')
            out, end = b'', time.time() + 5
            while b'\r\n' not in out and time.time() < end: out += c.recv(4096)
            _settle(lambda: 'control line' in s.log_text(), 3)
            got[kind] = (out, [l.split(' - ', 2)[-1] for l in s.log_text().splitlines() if '[ERR]' in l])
        finally: s.stop()
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'] == (b"-ERR 'maximum control line exceeded'\r\n", ['maximum control line exceeded'])
