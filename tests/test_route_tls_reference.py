"""Routes over TLS (`cluster { tls { cert_file, key_file, ca_file, verify, timeout } }`) against nats-server 2.15.1:
mixed clusters (jsnb dialling the reference and the reference dialling jsnb) form over TLS and carry messages both
ways; a peer in clear text, a peer whose certificate another CA signed, and a server dialled at a host its
certificate does not name are refused by both servers alike; the route INFO, CONNECT and `/varz` say TLS."""
import json, re, socket, ssl, time, urllib.request
import pytest
from conftest import KINDS, REF_BIN, ServerProc
from jsnb.nats.pki import CA

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]


@pytest.fixture(scope='module')
def certs(tmp_path_factory):
    """A CA and a route certificate (server and client use, for 127.0.0.1 and localhost) it signs; one from another CA;
    one for another host only."""
    here = ['localhost', '127.0.0.1']
    ca = CA(tmp_path_factory.mktemp('route-certs'), subject='route CA')
    ca.issue('route', 'route', sans=here)
    ca.issue('elsewhere', 'elsewhere', sans=['elsewhere.example'])
    CA(ca.dir, 'other-ca', 'other CA').issue('stranger', 'stranger', sans=here)
    return ca.dir


def tls_block(certs, cert='route', ca='ca', verify=True) -> str:
    return (f'tls {{ cert_file: "{certs}/{cert}.pem", key_file: "{certs}/{cert}-key.pem", ca_file: "{certs}/{ca}.pem", '
            f'verify: {str(verify).lower()}, timeout: 2 }}')


def conf(name: str, tls: str = '', routes=(), extra='') -> str:
    r = ', '.join(f'"nats-route://127.0.0.1:{p}"' for p in routes)
    return (f'server_name: {name}\nhttp: "127.0.0.1:-1"\n{extra}\n'
            f'cluster {{\n  name: c\n  listen: "127.0.0.1:-1"\n  routes: [{r}]\n  {tls}\n}}\n')


def port_of(s, what: str) -> int:
    "The port `s` listens on for `what` (the reference may log its route port just after it says it is ready)."
    pat = r'Starting http monitor on \S+:(\d+)' if what == 'http' else rf'Listening for {what} connections on \S+?:(\d+)'
    end = time.time() + 5
    while (m := re.search(pat, s.log_text())) is None and time.time() < end: time.sleep(0.05)
    return int(m.group(1))


def route_port(s) -> int: return port_of(s, 'route')


def http(s, path: str) -> dict:
    with urllib.request.urlopen(f'http://127.0.0.1:{port_of(s, "http")}{path}', timeout=5) as r: return json.load(r)


def routes(s) -> int:
    "How many other servers `s` has routes to (the reference keeps a pool of routes to each)."
    return len({r['remote_id'] for r in http(s, '/routez').get('routes') or ()})


def settle(pred, timeout=10.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if pred(): return True
        time.sleep(0.1)
    return pred()


def client(s, user: bytes = b'') -> socket.socket:
    "A raw client of `s`, connected (as `user`, password the same, when given) and past its first PONG."
    c = socket.create_connection(('127.0.0.1', s.port), timeout=5); c.recv(4096)
    creds = b'"user":"%s","pass":"%s",' % (user, user) if user else b''
    c.sendall(b'CONNECT {%s"verbose":false}\r\nPING\r\n' % creds)
    got = b''
    while b'PONG' not in got: got += c.recv(4096)
    return c


def flows(a, b, user: bytes = b'') -> bool:
    "A message published on `a` reaches a subscriber on `b` (tried until the interest has crossed the route)."
    sub, pub = client(b, user), client(a, user)
    sub.sendall(b'SUB t.x 1\r\nPING\r\n'); sub.recv(4096)
    sub.settimeout(0.3)
    got, end = b'', time.time() + 10
    try:
        while b'MSG t.x 1 2\r\nhi\r\n' not in got and time.time() < end:
            pub.sendall(b'PUB t.x 2\r\nhi\r\n')
            try: got += sub.recv(4096)
            except socket.timeout: pass
    finally: sub.close(); pub.close()
    return b'MSG t.x 1 2\r\nhi\r\n' in got


@pytest.mark.parametrize('dialler', KINDS)
@pytest.mark.parametrize('verify', [True, False], ids=['verify', 'no-verify'])
def test_mixed_cluster_over_tls(certs, dialler, verify):
    """A jsnb server and a nats-server route to each other over TLS (`dialler` dials, the other accepts): the route
    forms on both, says TLS, and messages flow both ways."""
    acceptor_kind = 'nats-server' if dialler == 'jsnb' else 'jsnb'
    acc = ServerProc(acceptor_kind, [], conf('acceptor', tls_block(certs, verify=verify))).start()
    try:
        dia = ServerProc(dialler, [], conf('dialler', tls_block(certs, verify=verify), [route_port(acc)])).start()
        try:
            assert settle(lambda: routes(acc) == 1 and routes(dia) == 1), (acc.log_text(), dia.log_text())
            assert flows(acc, dia) and flows(dia, acc)
            for s in (acc, dia):
                c = http(s, '/varz')['cluster']
                assert (c.get('tls_required'), c.get('tls_verify'), c.get('tls_timeout')) == (True, True, 2), s.kind
                assert 'TLS route handshake error' not in s.log_text()
        finally: dia.stop()
    finally: acc.stop()


def _refused(certs, kind, peer_kind, tls_here, tls_there, here_dials: bool) -> tuple:
    "Server `kind` (TLS `tls_here`) and a `peer_kind` (TLS `tls_there`), one dialling the other: (routes formed, error lines of `kind`)."
    s = ServerProc(kind, [], conf('s', tls_here)).start()
    try:
        if here_dials:
            p = ServerProc(peer_kind, [], conf('p', tls_there)).start()
            s.stop(); s = ServerProc(kind, [], conf('s', tls_here, [route_port(p)])).start()
        else:
            p = ServerProc(peer_kind, [], conf('p', tls_there, [route_port(s)])).start()
        try:
            settle(lambda: 'TLS route handshake error' in s.log_text() or 'Error' in s.log_text() or routes(s) > 0, 8)
            time.sleep(1.5)            # a route that would form has formed
            lines = [re.sub(r'^.*?\[ERR\] \S+:\d+ - rid:\d+ - ', '', l) for l in s.log_text().splitlines() if 'TLS route handshake error' in l]
            return routes(s), routes(p), sorted(set(lines))
        finally: p.stop()
    finally: s.stop()


@pytest.mark.parametrize('here_dials', [True, False], ids=['dialling', 'accepting'])
def test_clear_text_peer_refused(certs, here_dials):
    "A server with route TLS and a peer without it (the same kind: jsnb with jsnb, the reference with the reference) form no route."
    got = {k: _refused(certs, k, k, tls_block(certs), '', here_dials) for k in KINDS}
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][:2] == (0, 0)
    assert got['jsnb'][2] == ['TLS route handshake error: tls: first record does not look like a TLS handshake']


@pytest.mark.parametrize('here_dials', [True, False], ids=['dialling', 'accepting'])
def test_certificate_of_another_ca_refused(certs, here_dials):
    """A peer whose certificate another CA signed (and which trusts only that CA) is refused both ways, even with
    `verify: false`: the reference always checks the certificate on routes. Every pairing of jsnb and the reference."""
    stranger = tls_block(certs, cert='stranger', ca='other-ca')
    got = {(k, peer): _refused(certs, k, peer, tls_block(certs, verify=False), stranger, here_dials)[:2] for k in KINDS for peer in KINDS}
    assert set(got.values()) == {(0, 0)}, got


def test_dialled_host_not_in_certificate(certs):
    "A server dialled at 127.0.0.1 whose certificate names only another host is refused by the dialler, jsnb as the reference."
    got = {}
    for k in KINDS:
        acc = ServerProc(k, [], conf('acceptor', tls_block(certs, cert='elsewhere'))).start()
        try:
            dia = ServerProc(k, [], conf('dialler', tls_block(certs), [route_port(acc)])).start()
            try:
                settle(lambda: 'TLS route handshake error' in dia.log_text(), 8); time.sleep(1)
                got[k] = (routes(acc), routes(dia), 'TLS route handshake error' in dia.log_text())
            finally: dia.stop()
        finally: acc.stop()
    assert got['jsnb'] == got['nats-server'] == (0, 0, True)


def test_route_info_and_connect_say_tls(certs):
    """What a server with route TLS sends on a new route, read over TLS by hand: INFO after the handshake, with
    `tls_required` and `tls_verify`; nothing at all before a handshake (a clear-text reader sees no INFO)."""
    got = {}
    for k in KINDS:
        s = ServerProc(k, [], conf('s', tls_block(certs))).start()
        try:
            plain = socket.create_connection(('127.0.0.1', route_port(s)), timeout=5); plain.settimeout(0.5)
            try: early = plain.recv(4096)
            except socket.timeout: early = b''
            plain.close()
            ctx = ssl.create_default_context(cafile=str(certs / 'ca.pem'))
            ctx.load_cert_chain(str(certs / 'route.pem'), str(certs / 'route-key.pem'))
            with ctx.wrap_socket(socket.create_connection(('127.0.0.1', route_port(s)), timeout=5), server_hostname='127.0.0.1') as t:
                line = b''
                while b'\r\n' not in line: line += t.recv(4096)
            info = json.loads(line.split(b' ', 1)[1])
            got[k] = (early, info.get('tls_required'), info.get('tls_verify'))
        finally: s.stop()
    assert got['jsnb'] == got['nats-server'] == (b'', True, True)


def test_cluster_tls_config_errors(tmp_path, certs):
    "A missing file and `verify_and_map` (not done by jsnb) stop the start with a clear error; jsnb never runs without what was asked."
    bad = ServerProc('jsnb', [], conf('s', f'tls {{ cert_file: "{tmp_path}/none.pem", key_file: "{tmp_path}/none-key.pem" }}'))
    with pytest.raises(RuntimeError, match='no such file or directory'): bad.start()
    mapped = ServerProc('jsnb', [], conf('s', tls_block(certs)[:-1] + ', verify_and_map: true }'))
    with pytest.raises(RuntimeError, match='verify_and_map'): mapped.start()


def test_varz_cluster_block(certs):
    "`/varz`'s cluster block with route TLS: the same fields and values (but the port and jsnb's pool of one route)."
    got = {}
    for k in KINDS:
        s = ServerProc(k, [], conf('s', tls_block(certs))).start()
        try: got[k] = {f: v for f, v in http(s, '/varz')['cluster'].items() if f not in ('cluster_port', 'pool_size')}
        finally: s.stop()
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb']['tls_required'] is True and got['jsnb']['auth_timeout'] == 3 and got['jsnb']['tls_cert_not_after']


def test_silent_peer_handshake_timeout(certs):
    "A peer that opens the route port and never starts TLS is closed after the TLS timeout, without a byte, logged alike."
    got = {}
    for k in KINDS:
        s = ServerProc(k, [], conf('s', tls_block(certs))).start()
        try:
            c = socket.create_connection(('127.0.0.1', route_port(s)), timeout=10)
            start = time.time()
            try: data = c.recv(100)
            except ConnectionResetError: data = b''
            took = time.time() - start
            c.close()
            settle(lambda: 'connection closed' in s.log_text(), 5)
            lines = [l for l in s.log_text().splitlines() if 'rid:' in l and 'created' not in l]
            got[k] = (data, took > 1.5, sorted({'[ERR] ...timeout' if 'timeout' in l and '[ERR]' in l else re.sub(r'^.*? - rid:\d+ - ', '', l)
                                                for l in lines}))
        finally: s.stop()
    assert got['jsnb'] == got['nats-server']     # (the reference's read deadline and timer race: one or both report the timeout)
    assert got['jsnb'] == (b'', True, ['Router connection closed: TLS Handshake Failure', '[ERR] ...timeout'])


@pytest.mark.parametrize('kind', KINDS)
async def test_replicated_stream_over_tls_routes(certs, kind, tmp_path):
    """Three servers with JetStream whose routes all run over TLS: the meta group forms and an R3 stream's messages
    reach every replica (on jsnb the Raft traffic rides the routes, so it goes through their TLS too)."""
    import asyncio, nats
    from jsclusters import free_ports
    rports = free_ports(3)
    every = ', '.join(f'"nats-route://127.0.0.1:{p}"' for p in rports)
    procs = []
    try:
        for i in range(3):
            cfg = (f'server_name: t{i}\nhttp: "127.0.0.1:-1"\njetstream {{ store_dir: "{tmp_path / f"t{i}"}" }}\n'
                   f'cluster {{\n  name: c\n  listen: "127.0.0.1:{rports[i]}"\n  routes: [{every}]\n  {tls_block(certs)}\n}}\n')
            procs.append(ServerProc(kind, [], cfg, isolate_store=False).start())
        def meta_ready():
            metas = [http(s, '/jsz').get('meta_cluster') or {} for s in procs]
            return len({m.get('leader') for m in metas}) == 1 and metas[0].get('leader')
        assert settle(meta_ready, 60), [s.log_text()[-2000:] for s in procs]
        nc = await nats.connect(procs[0].url)
        js = nc.jetstream()
        for _ in range(100):                                  # (a meta leader just elected may still refuse for a moment)
            try: await js.add_stream(name='T', subjects=['t.>'], num_replicas=3); break
            except Exception: await asyncio.sleep(0.2)
        for i in range(20): await js.publish('t.x', b'%d' % i)
        await nc.close()
        assert settle(lambda: all(http(s, '/jsz')['messages'] == 20 for s in procs), 30), [http(s, '/jsz')['messages'] for s in procs]
        for s in procs: assert 'TLS route handshake error' not in s.log_text()
    finally:
        for s in procs: s.stop()
