"""Attacks on a cluster, run against a 3-server jsnb cluster and a 3-server nats-server 2.15.1 cluster with the same
configuration (routes over TLS with a bcrypt route password, leaf node and monitoring ports, two accounts), asserting
the same outcome: the route password's hash is refused and the password admitted; a route peer in clear text or with
a certificate of another CA never gets an INFO; a flood before authentication on a route port is cut and the cluster
keeps its routes and its traffic; a leaf node naming another account in CONNECT's `remote_account` stays in the
account its credentials give; the monitoring port listens only on the client host (`-a`)."""
import json, shutil, socket, ssl, subprocess, time
import pytest
from conftest import KINDS, REF_BIN, ServerProc
from test_route_tls_reference import certs, tls_block, port_of, routes, settle, client, flows   # noqa: F401  (the certificates fixture)

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

PASSWORD = 's3cret'


def _bcrypt(pw: str) -> str:
    import bcrypt
    return bcrypt.hashpw(pw.encode(), bcrypt.gensalt(4, prefix=b'2a')).decode()


HASH = _bcrypt(PASSWORD)


def conf(name: str, certs, peers=()) -> str:
    """Every server dials the ones started before it: a full mesh of explicit routes (a route learnt by gossip would be
    dialled with the configured password, the hash, and refused, by the reference as by jsnb)."""
    routes = 'routes: [' + ', '.join(f'"nats-route://r:{PASSWORD}@127.0.0.1:{p}"' for p in peers) + ']'
    return f'''server_name: {name}
accounts {{ A {{ users [{{user: a, password: a}}] }}, B {{ users [{{user: b, password: b}}] }} }}
leafnodes {{ listen: "127.0.0.1:-1" }}
cluster {{
  name: c
  listen: "127.0.0.1:-1"
  authorization {{ user: r, password: "{HASH}" }}
  {routes}
  {tls_block(certs)}
}}
'''


@pytest.fixture(scope='module')
def clusters(certs):
    "Three jsnb servers and three nats-server servers, each set a full mesh over TLS, on 127.0.0.1 only."
    out = {}
    try:
        for k in KINDS:
            out[k] = []
            for i in range(3):
                peers = [port_of(s, 'route') for s in out[k]]
                out[k].append(ServerProc(k, ['-a', '127.0.0.1', '-m', '-1'], conf(f'{k}-{i}', certs, peers)).start())
        for k, ss in out.items():
            assert settle(lambda: all(routes(s) == 2 for s in ss), 15), k
        yield out
    finally:
        for ss in out.values():
            for s in ss: s.stop()


def read_for(c, seconds: float) -> bytes:
    "What `c` is sent in `seconds`, or until it is closed (b'<closed>' appended)."
    c.settimeout(0.2)
    out, end = b'', time.time() + seconds
    while time.time() < end:
        try: d = c.recv(65536)
        except socket.timeout: continue
        except (ConnectionResetError, ssl.SSLError): return out + b'<closed>'
        if not d: return out + b'<closed>'
        out += d
    return out


def route_tls(s, certs, cert='route', ca='ca'):
    "A TLS connection to `s`'s route port, presenting certificate `cert`."
    ctx = ssl.create_default_context(cafile=str(certs / f'{ca}.pem'))
    ctx.load_cert_chain(str(certs / f'{cert}.pem'), str(certs / f'{cert}-key.pem'))
    return ctx.wrap_socket(socket.create_connection(('127.0.0.1', port_of(s, 'route')), timeout=5), server_hostname='127.0.0.1')


def test_cluster_formed(clusters):
    "The three servers route to each other over TLS with the bcrypt-protected password, and messages cross them."
    got = {k: ([routes(s) for s in ss], flows(ss[0], ss[2], b'a'), flows(ss[2], ss[1], b'a')) for k, ss in clusters.items()}
    assert got['jsnb'] == got['nats-server'] == ([2, 2, 2], True, True)


@pytest.mark.parametrize('password', ['hash', 'password'])
def test_route_password_hash(clusters, certs, password):
    """Finding 3: whoever read the configuration and presents the bcrypt hash as the route password is refused; the
    password itself is admitted (no error)."""
    got = {}
    for k, ss in clusters.items():
        with route_tls(ss[1], certs) as t:
            info = read_for(t, 0.5)
            pw = HASH if password == 'hash' else PASSWORD
            t.sendall(b'CONNECT ' + json.dumps({'user': 'r', 'pass': pw, 'name': 'intruder', 'cluster': 'c', 'headers': True}).encode() + b'\r\nPING\r\n')
            answer = read_for(t, 1.5)
        got[k] = (info.startswith(b'INFO '), answer.replace(b'PING\r\n', b'').split(b'\r\n')[0], answer.endswith(b'<closed>'))
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'] == ((True, b"-ERR 'Authorization Violation'", True) if password == 'hash' else (True, b'PONG', False))


@pytest.mark.parametrize('how', ['clear text', 'certificate of another CA'])
def test_route_port_without_tls(clusters, certs, how):
    "Finding 5 (route TLS): a route peer in clear text, or presenting a certificate another CA signed, never gets INFO."
    got = {}
    for k, ss in clusters.items():
        if how == 'clear text':
            c = socket.create_connection(('127.0.0.1', port_of(ss[0], 'route')), timeout=5)
            c.sendall(b'CONNECT {"user":"r","pass":"%s"}\r\nPING\r\n' % PASSWORD.encode())
            got[k] = b'INFO' in read_for(c, 2)
            c.close()
        else:
            try:
                with route_tls(ss[0], certs, cert='stranger', ca='ca') as t:
                    t.sendall(b'CONNECT {"user":"r","pass":"%s"}\r\nPING\r\n' % PASSWORD.encode())
                    got[k] = b'INFO' in read_for(t, 2)
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError): got[k] = False
    assert got['jsnb'] == got['nats-server'] == False
    assert all(routes(s) == 2 for ss in clusters.values() for s in ss)


def test_route_flood_before_authentication(clusters, certs):
    """A TLS peer with a good certificate but no CONNECT starts a 2 GB route message: it is cut within a few MB, and
    the cluster keeps its routes and its traffic."""
    got = {}
    for k, ss in clusters.items():
        sent = 0
        try:
            with route_tls(ss[0], certs) as t:
                t.settimeout(10)
                t.sendall(b'RMSG $G foo 2000000000\r\n'); chunk = b'x' * 65536
                while sent < 64 << 20: t.sendall(chunk); sent += len(chunk)
            cut = False
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError, socket.timeout): cut = True
        got[k] = (cut, sent < 16 << 20, [routes(s) for s in ss], flows(ss[1], ss[0], b'a'), ss[0].proc.poll() is None)
    assert got['jsnb'] == got['nats-server'] == (True, True, [2, 2, 2], True, True)


@pytest.mark.parametrize('remote_account', ['B', 'A', 'NOPE'])
def test_leaf_remote_account(clusters, remote_account):
    """Finding 5 (leaf `remote_account`): a leaf node logged in as a user of account A that names another account in
    its CONNECT stays bound to A, as in the reference (which takes `remote_account` as the name of the leaf's own
    local account, not as a claim): it gets A's messages, never B's."""
    got = {}
    for k, ss in clusters.items():
        leaf = socket.create_connection(('127.0.0.1', port_of(ss[0], 'leafnode')), timeout=5); read_for(leaf, 0.3)
        leaf.sendall(b'CONNECT ' + json.dumps({'user': 'a', 'pass': 'a', 'name': 'spoke', 'headers': True,
                                               'remote_account': remote_account}).encode() + b'\r\nLS+ t.y\r\nPING\r\n')
        hello = read_for(leaf, 1.0)
        infos = [json.loads(l.split(b' ', 1)[1]) for l in hello.split(b'\r\n') if l.startswith(b'INFO ')]
        account = next((i['remote_account'] for i in infos if 'remote_account' in i), None)    # the account the leaf is bound to
        for user in (b'b', b'a'):                        # from the other end of the cluster
            p = client(ss[2], user)
            for _ in range(10): p.sendall(b'PUB t.y 1\r\n%s\r\n' % user); time.sleep(0.1)
            p.close()
        seen = read_for(leaf, 1.5)
        leaf.close()
        got[k] = (account, b'LMSG t.y 1\r\na\r\n' in seen, b'LMSG t.y 1\r\nb\r\n' in seen, seen.endswith(b'<closed>'))
    assert got['jsnb'] == got['nats-server'] == ('A', True, False, False)


def test_monitoring_on_the_client_host(clusters):
    "Finding 5 (monitoring): with `-a 127.0.0.1` every member's monitoring port listens on 127.0.0.1 only."
    if shutil.which('ss') is None: pytest.skip('ss (iproute2) not installed')
    out = subprocess.run(['ss', '-ltnpH'], capture_output=True, text=True, check=True).stdout
    got = {}
    for k, ss in clusters.items():
        hosts = set()
        for s in ss:
            port = port_of(s, 'http')
            hosts |= {line.split()[3].rpartition(':')[0] for line in out.splitlines()
                      if f'pid={s.proc.pid},' in line and line.split()[3].endswith(f':{port}')}
        got[k] = sorted(hosts)
    assert got['jsnb'] == got['nats-server'] == ['127.0.0.1']


def test_silent_route_peer_timed_out(clusters, certs):
    """A TLS peer with a good certificate that never sends CONNECT is told `Authentication Timeout` and closed; the
    wait is the route authorization's default with TLS (the TLS timeout and a second: 3 s here), not sooner than 2 s."""
    got = {}
    for k, ss in clusters.items():
        with route_tls(ss[2], certs) as t:
            start = time.time()
            out = read_for(t, 10)
            took = time.time() - start
        got[k] = (out.startswith(b'INFO '), out.split(b'\r\n')[-2:] if out.endswith(b'<closed>') else out[-60:], took > 2)
    assert got['jsnb'] == got['nats-server'] == (True, [b"-ERR 'Authentication Timeout'", b'<closed>'], True)
