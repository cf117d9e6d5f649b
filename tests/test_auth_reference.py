"""Security settings against the reference: the same configuration file and the same client behaviour, run
against jsnb and nats-server 2.15.1, must be accepted or refused alike, with the same `-ERR` texts, the same
log lines and the same deliveries. Covers `authorization` users (plain and bcrypt passwords), a single user or
token, `timeout`, `no_auth_user`, nkey users, permissions (allow/deny, wildcards, queue groups, delivery-time
denies, `allow_responses`, JetStream API requests), `max_subscriptions`, TLS (after INFO, `handshake_first`,
client certificates), `jsnb-server -t` on all of these, and monitoring with authentication on."""
import asyncio, base64, json, re, socket, ssl, subprocess, sys, time, urllib.request

import bcrypt, nkeys, pytest
import nats

from conftest import KINDS, REF_BIN, log_lines
from jsnb.nats.pki import CA
from rawclient import Raw

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

ALICE = bcrypt.hashpw(b'alicepw', bcrypt.gensalt(4, prefix=b'2a')).decode()     # as `nats server passwd` writes (cost 4: fast)
CAROL = bcrypt.hashpw(b'carolpw', bcrypt.gensalt(4, prefix=b'2b')).decode()
TOKEN = bcrypt.hashpw(b's3cr3t', bcrypt.gensalt(4, prefix=b'2a')).decode()


def both(start_server, config, *flags):
    "The same configuration, started by jsnb and by the reference."
    return {k: start_server(k, *flags, config=config) for k in KINDS}


def attempt(port, opts: dict, then: bytes = b'PING\r\n', wait: float = 0.4) -> tuple[bytes, bool]:
    "CONNECT with `opts` (then `then`); what the server answered and whether it closed the connection."
    r = Raw(port, connect=b'CONNECT ' + json.dumps({'verbose': False, 'pedantic': False, **opts}).encode() + b'\r\n' + then)
    try: return r.read(wait)
    finally: r.close()


def outcomes(servers, attempts, **kw):
    "`attempt` each of `attempts` on each server: {kind: [(answer, closed), ...]}."
    return {k: [attempt(s.port, a, **kw) for a in attempts] for k, s in servers.items()}


async def nats_outcome(url, **kw) -> str:
    "Connect with nats-py and round-trip a PING: 'ok', or why it failed."
    async def quiet(e): pass
    try: nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5, error_cb=quiet, **kw)
    except Exception as e: return f'refused: {str(e) or repr(e)}'
    try: await nc.flush(2); return 'ok'
    except Exception as e: return f'failed: {type(e).__name__}'
    finally: await nc.close()


def check_config(kind, path) -> tuple[int, str]:
    "`-t -c path`: exit status and output."
    exe = [REF_BIN] if kind == 'nats-server' else [sys.executable, '-c', 'import sys; from jsnb.cli import main; sys.exit(main())']
    r = subprocess.run(exe + ['-t', '-c', str(path)], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def run_briefly(kind, path, seconds=20) -> tuple[int | None, str]:
    "Start a server on `path` (port -1) and see whether it refuses to start: its exit status (None: running) and output."
    exe = [REF_BIN] if kind == 'nats-server' else [sys.executable, '-c', 'import sys; from jsnb.cli import main; sys.exit(main())']
    p = subprocess.Popen(exe + ['-c', str(path), '-p', '-1'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try: rc = p.wait(seconds)
    except subprocess.TimeoutExpired: p.terminate(); p.wait(10); rc = None
    return rc, p.stdout.read()


# ---------------------------------------------------------------- users and passwords

USERS = f'''authorization {{
  users = [
    {{user: bob, password: bobpw}}
    {{user: alice, password: "{ALICE}"}}
    {{user: carol, password: "{CAROL}"}}
  ]
}}
'''

USER_ATTEMPTS = [{}, {'user': 'bob'}, {'user': 'bob', 'pass': 'x'}, {'user': 'bob', 'pass': 'bobpw'},
                 {'user': 'alice', 'pass': 'alicepw'}, {'user': 'alice', 'pass': ALICE}, {'user': 'carol', 'pass': 'carolpw'},
                 {'user': 'eve', 'pass': 'bobpw'}, {'auth_token': 'bobpw'}, {'pass': 'bobpw'},
                 {'user': 'bob', 'pass': 'bobpw', 'account': 'A'}]


def test_users_plain_and_bcrypt(start_server):
    servers = both(start_server, USERS)
    got = outcomes(servers, USER_ATTEMPTS)
    assert got['jsnb'] == got['nats-server']
    ok = [a for a, (out, closed) in zip(USER_ATTEMPTS, got['jsnb']) if out == b'PONG\r\n' and not closed]
    assert ok == [{'user': 'bob', 'pass': 'bobpw'}, {'user': 'alice', 'pass': 'alicepw'}, {'user': 'carol', 'pass': 'carolpw'}]
    assert all(r == (b"-ERR 'Authorization Violation'\r\n", True) for a, r in zip(USER_ATTEMPTS, got['jsnb']) if a not in ok)
    assert log_lines(servers['jsnb'], 'authentication error') == log_lines(servers['nats-server'], 'authentication error')
    assert '[ERR] CLIENT - authentication error - User "bob"' in log_lines(servers['jsnb'], 'authentication error')
    for s in servers.values():
        assert b'"auth_required":true' in Raw(s.port, connect=None).info
        assert log_lines(s, 'Plaintext passwords') == ['[WRN] Plaintext passwords detected, use nkeys or bcrypt']
        assert asyncio.run(nats_outcome(s.url, user='alice', password='alicepw')) == 'ok'
        assert asyncio.run(nats_outcome(f'nats://bob:bobpw@127.0.0.1:{s.port}')) == 'ok'
        assert 'Authorization Violation' in asyncio.run(nats_outcome(s.url, user='alice', password='nope'))


def test_a_bcrypt_login_does_not_stall_other_clients(start_server):
    "jsnb checks a bcrypt password on a worker thread: a connected client is answered while a login is being checked."
    slow = bcrypt.hashpw(b'slowpw', bcrypt.gensalt(13, prefix=b'2a')).decode()
    s = start_server('jsnb', config=f'authorization {{ users = [ {{user: fast, password: f}}, {{user: slow, password: "{slow}"}} ] }}\n')
    other = Raw(s.port, connect=b'CONNECT {"verbose":false,"user":"fast","pass":"f"}\r\nPING\r\n')
    assert other.until(b'PONG') == b'PONG\r\n'
    login = Raw(s.port, connect=b'CONNECT {"verbose":false,"user":"slow","pass":"slowpw"}\r\nPING\r\n')
    time.sleep(0.05)
    t0 = time.monotonic()
    other.send(b'PING\r\n')
    assert other.until(b'PONG', 5) == b'PONG\r\n'
    answered = time.monotonic() - t0
    assert login.until(b'PONG', 30) == b'PONG\r\n'
    assert answered < (time.monotonic() - t0) / 2, answered
    wrong = Raw(s.port, connect=b'CONNECT {"verbose":false,"user":"slow","pass":"nope"}\r\nPING\r\n')
    assert wrong.until(b'Violation', 30) == b"-ERR 'Authorization Violation'\r\n"
    for r in (other, login, wrong): r.close()


SINGLE = [('authorization { user: u, password: p }\n', ()),
          ('authorization { token: t0k }\n', ()),
          (f'authorization {{ token: "{TOKEN}" }}\n', ()),
          (f'authorization {{ user: u, password: "{ALICE}" }}\n', ()),
          ('', ('--user', 'u', '--pass', 'p')),
          ('', ('--auth', 't0k'))]
SINGLE_ATTEMPTS = [{}, {'user': 'u', 'pass': 'p'}, {'user': 'u', 'pass': 'x'}, {'user': 'u'}, {'user': 'u', 'pass': 'alicepw'},
                   {'auth_token': 't0k'}, {'auth_token': 's3cr3t'}, {'auth_token': TOKEN}, {'auth_token': 'x'}]


@pytest.mark.parametrize('config,flags', SINGLE, ids=['user', 'token', 'bcrypt-token', 'bcrypt-user', 'user-flags', 'token-flag'])
def test_single_user_or_token(start_server, config, flags):
    servers = both(start_server, config, *flags)
    got = outcomes(servers, SINGLE_ATTEMPTS)
    assert got['jsnb'] == got['nats-server']
    assert sum(r == (b'PONG\r\n', False) for r in got['jsnb']) == 1
    assert log_lines(servers['jsnb'], 'authentication error') == log_lines(servers['nats-server'], 'authentication error')


@pytest.mark.parametrize('timeout', ['1', '"500ms"'])
def test_auth_timeout(start_server, timeout):
    "A client that sends nothing is cut off after `timeout` (not before) with the reference's error."
    servers = both(start_server, f'authorization {{ user: u, password: p, timeout: {timeout} }}\n')
    for s in servers.values():
        r, t0 = Raw(s.port, connect=None), time.monotonic()
        out = r.until(b'Timeout', 30)                    # a wait, not a bound: a busy machine may be late
        took = time.monotonic() - t0
        assert out == b"-ERR 'Authentication Timeout'\r\n" and took >= (1 if timeout == '1' else 0.5) * 0.9, (s.kind, out, took)
        r.close()


# ---------------------------------------------------------------- no_auth_user

NO_AUTH = f'''authorization {{
  users = [
    {{user: bob, password: bobpw, permissions: {{publish: {{deny: "secret.>"}}}}}}
    {{user: alice, password: "{ALICE}"}}
  ]
}}
no_auth_user: bob
'''


def test_no_auth_user(start_server):
    servers = both(start_server, NO_AUTH)
    attempts = [({}, b'PUB secret.x 1\r\na\r\nPUB open.x 1\r\nb\r\nPING\r\n'), ({'user': 'alice', 'pass': 'alicepw'}, b'PUB secret.x 0\r\n\r\nPING\r\n'),
                ({'user': 'alice', 'pass': 'x'}, b'PING\r\n'), ({'user': 'bob'}, b'PING\r\n')]
    got = {k: [attempt(s.port, a, then) for a, then in attempts] for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][0] == (b"-ERR 'Permissions Violation for Publish to \"secret.x\"'\r\nPONG\r\n", False)
    for s in servers.values():
        info = json.loads(Raw(s.port, connect=None).info)
        assert 'auth_required' not in info, s.kind              # a client without credentials is welcome
        assert asyncio.run(nats_outcome(s.url)) == 'ok'
        r = Raw(s.port, connect=b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        line = r.until(b'}\r\n', 3)
        assert b'"connect_info":true' in line and b'"auth_required":true' in line, (s.kind, line)   # the INFO answering CONNECT still says so
        r.close()


def test_allowed_connection_types(start_server):
    config = '''authorization { users = [
      {user: web, password: p, allowed_connection_types: ["WEBSOCKET", "MQTT"]}
      {user: std, password: p, allowed_connection_types: "standard"}
    ] }
    '''
    servers = both(start_server, config)
    got = outcomes(servers, [{'user': 'web', 'pass': 'p'}, {'user': 'std', 'pass': 'p'}])
    assert got['jsnb'] == got['nats-server'] == [(b"-ERR 'Authorization Violation'\r\n", True), (b'PONG\r\n', False)]


def test_no_auth_user_with_bcrypt_password_never_logs_in(start_server):
    "The reference copies the configured (hashed) password into the client's credentials: such a user cannot get in."
    servers = both(start_server, NO_AUTH.replace('no_auth_user: bob', 'no_auth_user: alice'))
    got = outcomes(servers, [{}, {'user': 'alice', 'pass': 'alicepw'}])
    assert got['jsnb'] == got['nats-server'] == [(b"-ERR 'Authorization Violation'\r\n", True), (b'PONG\r\n', False)]


@pytest.mark.parametrize('config,message', [
    (USERS + 'no_auth_user: zed\n', 'no_auth_user: "zed" not present as user or nkey in authorization block or account configuration'),
    ('no_auth_user: zed\n', 'no_auth_user: "zed" present, but users/nkeys are not defined')], ids=['with users', 'without users'])
def test_bad_no_auth_user_passes_the_check_but_not_the_start(tmp_path, config, message):
    path = tmp_path / 'a.conf'; path.write_text(config)
    for kind in KINDS:
        assert check_config(kind, path)[0] == 0, kind
        rc, out = run_briefly(kind, path)
        assert rc == 1 and message in out and 'Server is ready' not in out, (kind, out)


# ---------------------------------------------------------------- nkeys

SEED = nkeys.encode_seed(bytes(range(32)), nkeys.PREFIX_BYTE_USER)
OTHER_SEED = nkeys.encode_seed(bytes(range(1, 33)), nkeys.PREFIX_BYTE_USER)
NKEY = nkeys.from_seed(bytearray(SEED)).public_key.decode()


def sign(seed: bytes, nonce: str) -> str:
    return base64.urlsafe_b64encode(nkeys.from_seed(bytearray(seed)).sign(nonce.encode())).decode().rstrip('=')


NKEYS = f'''authorization {{
  users = [
    {{nkey: {NKEY}, permissions: {{publish: "nk.>"}}}}
    {{user: bob, password: bobpw}}
  ]
}}
'''


def test_nkey_users(start_server, tmp_path):
    servers = both(start_server, NKEYS)
    (tmp_path / 'user.nk').write_bytes(SEED); (tmp_path / 'other.nk').write_bytes(OTHER_SEED)
    for s in servers.values():
        r = Raw(s.port, connect=None)
        nonce = json.loads(r.info)['nonce']
        assert len(nonce) == 15 and re.fullmatch('[A-Za-z0-9_-]+', nonce)
        results = []
        for opts in ({'nkey': NKEY}, {'nkey': NKEY, 'sig': sign(OTHER_SEED, nonce)}, {'nkey': NKEY, 'sig': 'x' * 86},
                     {'nkey': NKEY, 'sig': sign(SEED, nonce)}):
            r = Raw(s.port, connect=None)
            opts = {k: (sign(SEED, json.loads(r.info)['nonce']) if v == sign(SEED, nonce) else v) for k, v in opts.items()}
            r.send(b'CONNECT ' + json.dumps({'verbose': False, **opts}).encode() + b'\r\nPUB nk.a 0\r\n\r\nPUB other 0\r\n\r\nPING\r\n')
            results.append(r.read(0.4)); r.close()
        assert results == [(b"-ERR 'Authorization Violation'\r\n", True)] * 3 + \
                          [(b"-ERR 'Permissions Violation for Publish to \"other\"'\r\nPONG\r\n", False)], s.kind
        assert attempt(s.port, {'user': 'bob', 'pass': 'bobpw'}) == (b'PONG\r\n', False)
        assert asyncio.run(nats_outcome(s.url, nkeys_seed=str(tmp_path / 'user.nk'))) == 'ok'
        assert 'Authorization Violation' in asyncio.run(nats_outcome(s.url, nkeys_seed=str(tmp_path / 'other.nk')))
    lines = {k: log_lines(s, 'authentication error') for k, s in servers.items()}
    assert lines['jsnb'] == lines['nats-server'] and f'[ERR] CLIENT - authentication error - Nkey "{NKEY}"' in lines['jsnb']


# ---------------------------------------------------------------- permissions

PERMS = '''authorization {
  users = [
    {user: admin, password: a}
    {user: app, password: p, permissions: {
      publish: {allow: ["pub.>", "jobs.*"], deny: ["pub.secret", "pub.secret.>"]}
      subscribe: {allow: ["sub.*", "q.* workers", "pub.>", "jobs.*"], deny: ["sub.hidden", "pub.secret.*", "jobs.* badq"]}
    }}
    {user: simple, password: s, permissions: {publish: ["a.*"], subscribe: "a.>"}}
    {user: svc, password: s, permissions: {subscribe: "svc.>", allow_responses: true}}
    {user: svc2, password: s, permissions: {subscribe: "svc.>", allow_responses: {max: 2, expires: "1m"}}}
  ]
  default_permissions: {publish: {deny: ">"}}
}
'''

APP_SESSION = (b'SUB sub.a 1\r\nSUB sub.hidden 2\r\nSUB other 3\r\nSUB q.a 4\r\nSUB q.a workers 5\r\nSUB q.a others 6\r\n'
               b'SUB pub.> 7\r\nSUB jobs.a badq 8\r\nSUB jobs.a goodq 9\r\nSUB jobs.* 10\r\nSUB x _sys_ 11\r\n'
               b'PUB pub.ok 2\r\nok\r\nPUB pub.secret 1\r\nx\r\nPUB pub.secret.deep 1\r\nx\r\nPUB nope 1\r\nx\r\n'
               b'HPUB jobs.a 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPUB jobs.a.b 0\r\n\r\nPING\r\n')


def _session(port, user, pw, data, wait=0.4):
    return attempt(port, {'user': user, 'pass': pw, 'headers': True}, data, wait)


def test_publish_and_subscribe_permissions(start_server):
    servers = both(start_server, PERMS)
    got = {k: _session(s.port, 'app', 'p', APP_SESSION) for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server']
    assert b'Permissions Violation for Subscription to "q.a" using queue "others"' in got['jsnb'][0]
    simple = {k: _session(s.port, 'simple', 's', b'SUB a.> 1\r\nSUB b 2\r\nPUB a.x 1\r\n1\r\nPUB a.x.y 1\r\n2\r\nPUB b 0\r\n\r\nPING\r\n')
              for k, s in servers.items()}
    assert simple['jsnb'] == simple['nats-server']
    default = {k: _session(s.port, 'admin', 'a', b'SUB anything 1\r\nPUB anything 0\r\n\r\nPING\r\n') for k, s in servers.items()}
    assert default['jsnb'] == default['nats-server'] == (b"-ERR 'Permissions Violation for Publish to \"anything\"'\r\nPONG\r\n", False)
    assert log_lines(servers['jsnb'], 'Violation') == log_lines(servers['nats-server'], 'Violation')


def test_denied_subjects_are_filtered_at_delivery(start_server):
    "A wildcard subscription that covers a denied subject does not receive messages on it."
    config = PERMS.replace('default_permissions: {publish: {deny: ">"}}', '')
    servers = both(start_server, config)
    for s in servers.values(): s.subscriber = Raw(s.port, connect=b'CONNECT {"verbose":false,"pedantic":false,"user":"app","pass":"p"}\r\n'
                                                    b'SUB pub.> 1\r\nSUB jobs.* goodq 2\r\nPING\r\n')
    for s in servers.values(): assert s.subscriber.until(b'PONG') == b'PONG\r\n'
    pubs = b''.join(b'PUB %s %d\r\n%d\r\n' % (subj, len(str(i)), i) for i, subj in enumerate([b'pub.ok', b'pub.secret.x', b'pub.secret', b'pub.a.b',
                                                                                  b'jobs.a', b'jobs.b'] * 2))
    for s in servers.values(): assert _session(s.port, 'admin', 'a', pubs + b'PING\r\n') == (b'PONG\r\n', False)
    got = {k: sorted(s.subscriber.read(0.5)[0].split(b'MSG ')) for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server']
    assert not any(b'secret.x' in m for m in got['jsnb'])
    assert sum(m.startswith(b'jobs.') for m in got['jsnb']) == 4                # only group goodq, each message once
    for s in servers.values(): s.subscriber.close()


@pytest.mark.parametrize('user,answers', [('svc', 1), ('svc2', 2)])
def test_allow_responses(start_server, user, answers):
    "A service may answer the requests it receives (at most `max` times each), and publish nothing else."
    servers = both(start_server, PERMS.replace('default_permissions: {publish: {deny: ">"}}', ''))
    for k, s in servers.items():
        svc = Raw(s.port, connect=b'CONNECT {"verbose":false,"pedantic":false,"user":"%s","pass":"s"}\r\nSUB svc.> 1\r\nPING\r\n' % user.encode())
        assert svc.until(b'PONG') == b'PONG\r\n'
        req = Raw(s.port, connect=b'CONNECT {"verbose":false,"pedantic":false,"user":"admin","pass":"a"}\r\nSUB _INBOX.r 9\r\n'
                                  b'PUB svc.echo _INBOX.r 2\r\nhi\r\nPING\r\n')
        assert req.until(b'PONG') == b'PONG\r\n'
        assert svc.msgs(1)[0].reply == b'_INBOX.r'
        svc.send(b'PUB _INBOX.r 1\r\n1\r\nPUB _INBOX.r 1\r\n2\r\nPUB _INBOX.r 1\r\n3\r\nPUB elsewhere 0\r\n\r\nPING\r\n')
        s.result = (svc.until(b'PONG'), req.read(0.4)[0])
        svc.close(); req.close()
    assert servers['jsnb'].result == servers['nats-server'].result
    assert servers['jsnb'].result[1].count(b'MSG _INBOX.r 9') == answers


def test_jetstream_api_needs_publish_permission(start_server):
    config = '''authorization { users = [
      {user: ops, password: o}
      {user: app, password: p, permissions: {publish: {deny: "$JS.API.>"}}}
    ] }
    '''
    servers = both(start_server, config, '-js')
    for s in servers.values():
        async def scenario():
            async def quiet(e): pass
            nc = await nats.connect(s.url, user='app', password='p', error_cb=quiet, allow_reconnect=False)
            try:
                await nc.jetstream().add_stream(name='S', subjects=['s.>'])
                return 'created'
            except Exception as e: return type(e).__name__
            finally: await nc.close()
        s.result = asyncio.run(scenario())
        s.raw = attempt(s.port, {'user': 'app', 'pass': 'p'}, b'SUB _INBOX.1 1\r\nPUB $JS.API.INFO _INBOX.1 0\r\n\r\nPING\r\n')
        async def allowed():
            nc = await nats.connect(s.url, user='ops', password='o', allow_reconnect=False)
            try: return (await nc.jetstream().add_stream(name='S', subjects=['s.>'])).config.name
            finally: await nc.close()
        assert asyncio.run(allowed()) == 'S'
    assert servers['jsnb'].result == servers['nats-server'].result != 'created'
    assert servers['jsnb'].raw == servers['nats-server'].raw == (b"-ERR 'Permissions Violation for Publish to \"$JS.API.INFO\"'\r\nPONG\r\n", False)


def test_second_connect_starts_afresh(start_server):
    "A CONNECT on a connected client drops its subscriptions, so a new identity cannot keep what the old one could see."
    servers = both(start_server, 'authorization { users = [ {user: a, password: a}, {user: b, password: b, permissions: {subscribe: "x"}} ] }\n')
    session = (b'SUB foo 1\r\nPING\r\nCONNECT {"user":"b","pass":"b","verbose":false,"pedantic":false}\r\n'
               b'PUB foo 1\r\nx\r\nSUB y 2\r\nSUB x 3\r\nPUB x 1\r\ny\r\nPING\r\n')
    got = {k: attempt(s.port, {'user': 'a', 'pass': 'a'}, session) for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server'] == \
        (b"PONG\r\n-ERR 'Permissions Violation for Subscription to \"y\"'\r\nMSG x 3 1\r\ny\r\nPONG\r\n", False)


def test_max_subscriptions(start_server):
    servers = both(start_server, 'max_subscriptions: 2\n')
    session = b'SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nSUB a 1\r\nUNSUB 1\r\nSUB d 4\r\nSUB e 5\r\nPUB d 1\r\nx\r\nPING\r\n'
    got = {k: attempt(s.port, {}, session) for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][0].count(b"-ERR 'maximum subscriptions exceeded'") == 3 and b'MSG d 4 1' in got['jsnb'][0]
    assert log_lines(servers['jsnb'], 'maximum subscriptions') == log_lines(servers['nats-server'], 'maximum subscriptions')


# ---------------------------------------------------------------- TLS

@pytest.fixture(scope='module')
def certs(tmp_path_factory):
    "A throwaway CA, a server certificate for 127.0.0.1/localhost, a client certificate, and one from another CA."
    ca = CA(tmp_path_factory.mktemp('certs'))
    ca.issue('server', 'localhost', sans=['localhost', '127.0.0.1'], usage=['server'])
    ca.issue('client', 'client', usage=['client'])
    CA(ca.dir, 'other-ca', 'other CA').issue('stranger', 'stranger', usage=['client'])
    return ca.dir


def client_tls(certs, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / 'ca.pem'))
    if cert: ctx.load_cert_chain(str(certs / f'{cert}.pem'), str(certs / f'{cert}-key.pem'))
    return ctx


def tls_conf(certs, extra=''):
    return f'tls {{\n  cert_file: "{certs}/server.pem"\n  key_file: "{certs}/server-key.pem"\n{extra}}}\n'


def test_tls_after_info(start_server, certs):
    servers = both(start_server, tls_conf(certs, '  timeout: "3s"\n') + 'authorization { user: u, password: p }\n')
    for s in servers.values():
        info = json.loads(Raw(s.port, connect=None).info)
        assert (info.get('tls_required'), info.get('tls_verify'), info.get('auth_required')) == (True, None, True), s.kind
        assert asyncio.run(nats_outcome(s.url, tls=client_tls(certs), user='u', password='p')) == 'ok'
        assert 'Authorization Violation' in asyncio.run(nats_outcome(s.url, tls=client_tls(certs), user='u', password='x'))
        assert asyncio.run(nats_outcome(s.url, user='u', password='p')) != 'ok'       # nats-py's default context does not know our CA
        s.plain = attempt(s.port, {'user': 'u', 'pass': 'p'})                         # a client that ignores tls_required
    assert servers['jsnb'].plain == servers['nats-server'].plain == (b'', True)
    for s in servers.values():
        assert any('TLS handshake error' in l for l in log_lines(s, 'TLS')), s.kind
        assert '[INF] TLS required for client connections' in log_lines(s, 'TLS required'), s.kind


def test_tls_client_certificates(start_server, certs):
    servers = both(start_server, tls_conf(certs, f'  ca_file: "{certs}/ca.pem"\n  verify: true\n'))
    for s in servers.values():
        info = json.loads(Raw(s.port, connect=None).info)
        assert (info.get('tls_required'), info.get('tls_verify')) == (True, True), s.kind
        s.results = [asyncio.run(nats_outcome(s.url, tls=client_tls(certs, c))) == 'ok' for c in ('client', None, 'stranger')]
    assert servers['jsnb'].results == servers['nats-server'].results == [True, False, False]
    assert log_lines(servers['jsnb'], "didn't provide a certificate") and log_lines(servers['jsnb'], 'signed by unknown authority')


def test_tls_handshake_first(start_server, certs):
    servers = both(start_server, tls_conf(certs, '  handshake_first: true\n'))
    for s in servers.values():
        s.results = [asyncio.run(nats_outcome(s.url, tls=client_tls(certs), tls_handshake_first=True)) == 'ok',
                     asyncio.run(nats_outcome(s.url, tls=client_tls(certs))) == 'ok']
        sock = socket.create_connection(('127.0.0.1', s.port), timeout=2); sock.settimeout(0.5)
        try: s.first = sock.recv(100)                                  # nothing until the client starts TLS
        except socket.timeout: s.first = b''
        sock.close()
        assert any('"TLS Handshake First"' in l for l in log_lines(s, 'WRN')), s.kind
    assert servers['jsnb'].results == servers['nats-server'].results == [True, False]
    assert servers['jsnb'].first == servers['nats-server'].first == b''


@pytest.mark.parametrize('switch', ['--tls', '--tlsverify'])
def test_tls_flags(start_server, certs, switch):
    flags = [switch, '--tlscert', f'{certs}/server.pem', '--tlskey', f'{certs}/server-key.pem', '--tlscacert', f'{certs}/ca.pem']
    servers = {k: start_server(k, *flags) for k in KINDS}
    for s in servers.values():
        info = json.loads(Raw(s.port, connect=None).info)
        s.results = [info.get('tls_required'), info.get('tls_verify'),
                     asyncio.run(nats_outcome(s.url, tls=client_tls(certs, 'client'))), asyncio.run(nats_outcome(s.url, tls=client_tls(certs))) == 'ok']
    assert servers['jsnb'].results == servers['nats-server'].results == [True, switch == '--tlsverify' or None, 'ok', switch == '--tls']


def test_tls_flags_need_files_and_can_turn_tls_off(start_server, certs, tmp_path):
    for kind in KINDS:
        exe = [REF_BIN] if kind == 'nats-server' else [sys.executable, '-c', 'import sys; from jsnb.cli import main; sys.exit(main())']
        r = subprocess.run(exe + ['--tls', '-p', '-1'], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and 'TLS Server certificate must be present and valid' in r.stderr, (kind, r.stderr)
        r = subprocess.run(exe + ['--tlscert', f'{certs}/server.pem', '-p', '-1'], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and 'TLS Server private key must be present and valid' in r.stderr, (kind, r.stderr)
    servers = both(start_server, tls_conf(certs), '-tls=false')
    for s in servers.values():
        assert 'tls_required' not in json.loads(Raw(s.port, connect=None).info), s.kind
        assert attempt(s.port, {}) == (b'PONG\r\n', False)


# ---------------------------------------------------------------- configuration checks (-t) and refusals

VALID = {'users': USERS, 'no-auth-user': NO_AUTH, 'nkeys': NKEYS, 'permissions': PERMS, 'max-subs': 'max_subs: 10\n',
         'single': 'authorization { user: u, password: p, timeout: "3s" }\n', 'token': f'authorization {{ token: "{TOKEN}" }}\n',
         'perm-forms': 'authorization { users = [ {user: a, password: b, permissions: {pub: "x", sub: {allow: "y"}, '
                       'publish_allow_responses: {max_msgs: 3, ttl: "10s"}}} ] }\n',
         'conn-types': 'authorization { users = [ {user: a, password: b, allowed_connection_types: ["STANDARD", "WEBSOCKET"]} ] }\n'}
INVALID = {
    'users-and-user': ('authorization { user: x, users = [ {user: a, password: b} ] }\n', 'Can not have a single user/pass and a users array'),
    'users-and-token': ('authorization { token: t, users = [ {user: a, password: b} ] }\n', 'Can not have a token and a users array'),
    'duplicate': ('authorization { users = [ {user: a, password: b}, {user: a, password: c} ] }\n', 'Duplicate user "a" detected'),
    'no-user': ('authorization { users = [ {password: b} ] }\n', 'User entry requires a user'),
    'bad-nkey': ('authorization { users = [ {nkey: UABC} ] }\n', 'Not a valid public nkey for a user'),
    'nkey-password': (f'authorization {{ users = [ {{nkey: {NKEY}, password: x}} ] }}\n', 'Nkey users do not take usernames or passwords'),
    'bad-perm-key': ('authorization { users = [ {user: a, password: b, permissions: {publsh: x}} ] }\n', 'Unknown field "publsh" parsing permissions'),
    'bad-subject': ('authorization { users = [ {user: a, password: b, permissions: {publish: "a b"}} ] }\n', 'subject "a b" is not a valid subject'),
    'bad-allow-deny': ('authorization { users = [ {user: a, password: b, permissions: {publish: {alow: x}}} ] }\n',
                       'Unknown field name "alow" parsing subject permissions'),
    'bad-conn-type': ('authorization { users = [ {user: a, password: b, allowed_connection_types: ["TELNET"]} ] }\n', 'invalid connection types'),
    'users-not-array': ('authorization { users: {user: a} }\n', 'Expected users field to be an array'),
    'missing-cert': ('tls { cert_file: "/nonexistent/s.pem", key_file: "/nonexistent/s-key.pem" }\n',
                     'error parsing X509 certificate/key pair: open /nonexistent/s.pem: no such file or directory'),
    'missing-key-file': ('tls { cert_file: "/nonexistent/s.pem" }\n', "missing 'key_file' in TLS configuration"),
    'tls-unknown-key': ('tls { cert_fil: x }\n', 'error parsing tls config, unknown field "cert_fil"'),
    'tls-verify-type': ('tls { verify: "yes" }\n', "error parsing tls config, expected 'verify' to be a boolean"),
    'missing-ca': ('tls { ca_file: "/nonexistent/ca.pem" }\n', 'open /nonexistent/ca.pem: no such file or directory'),
}


@pytest.mark.parametrize('name', sorted(VALID))
def test_check_accepts_like_the_reference(tmp_path, name):
    path = tmp_path / 'a.conf'; path.write_text(VALID[name])
    for kind in KINDS:
        rc, out = check_config(kind, path)
        assert rc == 0, (kind, out)


@pytest.mark.parametrize('name', sorted(INVALID))
def test_check_refuses_like_the_reference(tmp_path, name):
    text, message = INVALID[name]
    path = tmp_path / 'a.conf'; path.write_text(text)
    for kind in KINDS:
        rc, out = check_config(kind, path)
        assert rc == 1 and message in out and ('a.conf:' in out or kind == 'nats-server'), (kind, out)
        rc, out = run_briefly(kind, path)
        assert rc == 1 and message in out and 'Server is ready' not in out, (kind, out)


def test_missing_tls_files_stop_the_server(tmp_path, certs):
    "Certificate files are checked at start, by jsnb and by the reference, with the same words."
    path = tmp_path / 'a.conf'; path.write_text(f'tls {{ cert_file: "{certs}/server.pem", key_file: "{tmp_path}/gone.pem" }}\n')
    for kind in KINDS:
        rc, out = run_briefly(kind, path)
        assert rc == 1 and f'error parsing X509 certificate/key pair: open {tmp_path}/gone.pem: no such file or directory' in out, (kind, out)


NOT_YET = ['accounts { A: { mappings: { a: b } } }\n', 'resolver_tls { cert_file: x }\n', 'default_sentinel: x\n',
           'authorization { auth_callout { issuer: x } }\n',
           'authorization { users = [ {user: a, password: b, proxy_required: true} ] }\n']


@pytest.mark.parametrize('text', NOT_YET)
def test_settings_not_implemented_yet_stop_the_server(tmp_path, text):
    "Account mappings, the resolver TLS and default sentinel of operator mode, auth callouts: refused, never run without."
    path = tmp_path / 'a.conf'; path.write_text(text)
    rc, out = check_config('jsnb', path)
    assert rc == 1 and 'jsnb does not support yet' in out and 'refusing to start rather than run without it' in out, out


# ---------------------------------------------------------------- monitoring with authentication

def test_monitoring_with_authentication(start_server, certs):
    s = start_server('jsnb', config=USERS.replace('{user: bob, password: bobpw}', '{user: bob, password: bobpw, permissions: {publish: "x"}}')
                     + 'http: "127.0.0.1:-1"\n')
    m = re.search(r'Starting http monitor on [\d.]+:(\d+)', s.log_text())
    port = int(m[1]) if m else None
    if port is None: pytest.skip('monitor port not reported')
    assert attempt(s.port, {'user': 'bob', 'pass': 'bobpw'}) == (b'PONG\r\n', False)
    varz = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/varz', timeout=5))
    assert varz['auth_required'] is True
    r = Raw(s.port, connect=b'CONNECT {"verbose":false,"user":"alice","pass":"alicepw"}\r\nSUB a 1\r\nPING\r\n')
    assert r.until(b'PONG') == b'PONG\r\n'
    connz = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/connz?subs=1', timeout=5))
    assert connz['num_connections'] == 1 and connz['connections'][0]['subscriptions_list'] == ['a']
    assert urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=5).status == 200
    r.close()


# ---------------------------------------------------------------- nothing security-related is read and ignored

SECURITY_KEYS = ('resolver_tls default_sentinel '
                 'ocsp auth_callout auth_hook proxy_required').split()


def test_every_key_jsnb_does_not_implement_is_refused():
    "Walk the configuration tables: a key jsnb knows but does not implement stops the server, never warns and runs."
    from jsnb.nats import config, conf_format
    from jsnb.nats.tls import parse_tls, _TLS_LATER
    refused = []
    for table, block in ((config._TOP_KEYS, None), (config._AUTH_KEYS, 'authorization'), (config._JS_KEYS, 'jetstream')):
        for key, entry in table.items():
            if entry is not None: continue
            text = f'{key}: 1\n' if block is None else f'{block} {{ {key}: 1 }}\n'
            with pytest.raises(conf_format.ConfigError, match='jsnb does not support') as e: config.options_from_config(conf_format.parse_config(text))
            if key in SECURITY_KEYS: assert 'refusing to start rather than run without it' in str(e.value), key
            refused.append(key)
    assert set(SECURITY_KEYS) <= set(refused)
    for key in _TLS_LATER:
        with pytest.raises(ValueError, match='does not support yet: refusing to start'): parse_tls({key: True})
