"""Configuration reload (`SIGHUP`), against jsnb and the reference: the same file edits, then the same signal, and
the same outcome: the log lines, what connected clients are told and which are closed, what is refused."""
import json, pathlib, re, signal, socket, tempfile, time
import pytest
from conftest import ServerProc

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']

USERS = 'authorization {{ {auth} users [ {{user: a, password: a}}, {{user: b, password: {pb}, permissions: {perms}}} ] }}\n'
OPEN = '{subscribe: "foo.>", publish: "foo.>"}'


def conf(pb='b', perms=OPEN, extra='', auth=''):
    return extra + USERS.format(pb=pb, perms=perms, auth=auth)


class Raw:
    "A raw client connection: CONNECT, then whatever the server sends."
    def __init__(self, port, **connect):
        self.s = socket.create_connection(('127.0.0.1', port), timeout=5)
        self.buf = b''
        self.info = json.loads(self.line()[5:])
        self.s.sendall(b'CONNECT ' + json.dumps({'verbose': False, 'pedantic': False, **connect}).encode() + b'\r\nPING\r\n')
        assert self.line() == b'PONG'

    def line(self) -> bytes:
        while b'\r\n' not in self.buf:
            data = self.s.recv(65536)
            if not data: raise EOFError(self.buf)
            self.buf += data
        line, _, self.buf = self.buf.partition(b'\r\n')
        return line

    def upto_pong(self, send=b'') -> list[bytes]:
        "Send `send` and a PING; the lines that came before the PONG."
        self.s.sendall(send + b'PING\r\n')
        out = []
        while (l := self.line()) != b'PONG': out.append(l)
        return out

    def until_closed(self) -> list[bytes]:
        "The lines the server sends until it closes the connection."
        out = []
        try:
            while True: out.append(self.line())
        except (EOFError, ConnectionResetError): return out


def hup(p: ServerProc, text: str) -> list[str]:
    "Rewrite the configuration file, send SIGHUP, wait for the reload's last line; the reload's log lines, without prefixes."
    (p.dir / 'server.conf').write_text(text)
    done = re.compile(r'Reloaded server configuration|Failed to reload server configuration')
    n = len(done.findall(p.log_text()))
    p.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while len(done.findall(p.log_text())) == n:
        assert time.time() < deadline, p.log_text()
        time.sleep(0.02)
    time.sleep(0.1)         # lines logged right after the reload (the closed clients)
    part = p.log_text().split('Trapped "hangup" signal')[-1]
    return [re.sub(r'^\[\d+\] \S+ \S+ ', '', l) for l in part.splitlines()[1:]]


def started(kind, text, *args):
    return ServerProc('jsnb' if kind == 'jsnb' else 'nats-server', args, config=text).start()


def run_both(scenario):
    out = {}
    for kind in KINDS:
        p = started(kind, scenario.conf)
        try: out[kind] = scenario(p)
        finally: p.stop()
    assert out['jsnb'] == out['nats-server'], out
    return out['jsnb']


def reloaded(lines):
    "The `Reloaded` lines, without the reference's config digest."
    return [l[6:] for l in lines if 'Reloaded' in l]


def digestless(lines):
    "`lines` without the configuration digest (compared already between the servers)."
    return [re.sub(r' \(sha256:[0-9a-f]{64}\)$', '', l) for l in lines]


def test_reload_log_lines():
    "What changed is applied and logged in the reference's order; the new max_payload reaches new clients."
    def scenario(p):
        lines = hup(p, conf(extra='debug: true\nmax_payload: 1000\nping_interval: "1m"\nwrite_deadline: "5s"\n'
                               'max_connections: 100\n', auth='timeout: 3,'))
        return reloaded(lines), Raw(p.port, user='a', **{'pass': 'a'}).info['max_payload']
    scenario.conf = conf()
    lines, mp = run_both(scenario)
    assert digestless(lines) == ['Reloaded: debug = true', 'Reloaded: max_connections = 100', 'Reloaded: authorization users',
                     'Reloaded: accounts', 'Reloaded: ping_interval = 1m0s', 'Reloaded: authorization timeout = 3',
                     'Reloaded: max_payload = 1000', 'Reloaded: write_deadline = 5s', 'Reloaded server configuration']
    assert mp == 1000


def test_removed_user_is_closed():
    "A client of a user the new file removes is closed (without an error, as in the reference); the others stay."
    def scenario(p):
        a, b = Raw(p.port, user='a', **{'pass': 'a'}), Raw(p.port, user='b', **{'pass': 'b'})
        hup(p, 'authorization { users [ {user: b, password: b, permissions: ' + OPEN + '} ] }\n')
        return a.until_closed(), b.upto_pong()
    scenario.conf = conf()
    assert run_both(scenario) == ([], [])


def test_changed_password_is_an_authorization_violation():
    "A client whose password no longer matches is told `Authorization Violation` and closed."
    def scenario(p):
        b = Raw(p.port, user='b', **{'pass': 'b'})
        lines = hup(p, conf(pb='other'))
        return b.until_closed(), [re.sub(r'\S+ - cid:\d+ - ', '', l) for l in lines if 'authentication error' in l]
    scenario.conf = conf()
    got, logged = run_both(scenario)
    assert got == [b"-ERR 'Authorization Violation'"] and logged == ['[ERR] "$G/user:b" - authentication error - User "b"']


def test_lost_subscribe_permission():
    "A subscription the new permissions deny is removed with the reference's error, and logged; a denied publish is refused."
    def scenario(p):
        b = Raw(p.port, user='b', **{'pass': 'b'})
        b.upto_pong(b'SUB foo.x 1\r\nSUB foo.y q 2\r\nSUB bar 3\r\n')
        lines = hup(p, conf(perms='{subscribe: {allow: "bar", deny: "foo.>"}, publish: "bar"}'))
        got = b.upto_pong()
        denied = b.upto_pong(b'PUB foo.x 1\r\nx\r\nPUB bar 1\r\nx\r\n')
        return sorted(got), sorted(l for l in lines if 'Removed sub' in l), denied, b.upto_pong(b'SUB foo.z 4\r\n')
    scenario.conf = conf(perms='{subscribe: [foo.>, bar], publish: [foo.>, bar]}')
    got, logged, denied, resub = run_both(scenario)
    assert got == [b'-ERR \'Permissions Violation for Subscription to "foo.x" (sid "1")\'',
                   b'-ERR \'Permissions Violation for Subscription to "foo.y" using queue "q" (sid "2")\'']
    assert logged == ['[INF] Removed sub "foo.x" (sid "1") for User "b" - not authorized',
                      '[INF] Removed sub "foo.y" using queue "q" (sid "2") for User "b" - not authorized']
    assert denied == [b'-ERR \'Permissions Violation for Publish to "foo.x"\'', b'MSG bar 3 1', b'x']
    assert resub == [b'-ERR \'Permissions Violation for Subscription to "foo.z"\'']


@pytest.mark.parametrize('change,message', [
    ('server_name: x\n', 'config reload not supported for ServerName: old=, new=x'),
    ('lame_duck_duration: "40s"\n', 'config reload not supported for LameDuckDuration: old=2m0s, new=40s'),
    ('max_subs: 3\n', 'config reload not supported for MaxSubs: old=0, new=3'),
])
def test_not_reloadable_is_refused(change, message):
    "A change that cannot be reloaded refuses the whole reload: logged, and the server keeps its old configuration."
    def scenario(p):
        a = Raw(p.port, user='a', **{'pass': 'a'})
        lines = hup(p, 'debug: true\n' + change + conf(pb='other'))
        b = Raw(p.port, user='b', **{'pass': 'b'})          # the old password still works
        return [l for l in lines if 'reload' in l.lower()], a.upto_pong(), b.upto_pong()
    scenario.conf = conf()
    assert run_both(scenario) == ([f'[ERR] Failed to reload server configuration: {message}'], [], [])


def test_debug_turned_on():
    "After `debug: true` is reloaded, the debug lines of a new connection appear in the log."
    def scenario(p):
        hup(p, 'debug: true\n' + conf())
        Raw(p.port, user='a', **{'pass': 'a'}).s.close()
        deadline = time.time() + 10
        while 'Client connection created' not in p.log_text():
            assert time.time() < deadline
            time.sleep(0.02)
        return True
    scenario.conf = conf()
    run_both(scenario)


def test_config_error_is_refused():
    "A file that does not parse is refused and nothing changes."
    for kind in KINDS:
        p = started(kind, conf())
        try:
            lines = hup(p, conf() + 'port: {\n')
            assert [l for l in lines if 'Failed to reload server configuration' in l], (kind, lines)
            assert Raw(p.port, user='a', **{'pass': 'a'}).upto_pong() == []
        finally: p.stop()


def outcome(c: Raw):
    "('open', lines before the PONG) or ('closed', the lines before the end)."
    out = []
    try:
        c.s.sendall(b'PING\r\n')
        while (l := c.line()) != b'PONG': out.append(l)
        return 'open', out
    except (EOFError, ConnectionResetError, BrokenPipeError): return 'closed', out


def strip(lines, *keep):
    "The log lines holding one of `keep`, without the client's address and id, nor the reference's config digest."
    return [re.sub(r'\S+ - cid:\d+ - ', '', l) for l in lines if any(k in l for k in keep)]


def test_token_changed():
    "A client of the old token is told `Authorization Violation`; the reload logs the token line."
    def scenario(p):
        c = Raw(p.port, auth_token='t1')
        lines = hup(p, 'authorization { token: t2 }\n')
        return outcome(c), strip(lines, 'Reloaded', 'authentication error')
    scenario.conf = 'authorization { token: t1 }\n'
    got, lines = run_both(scenario)
    assert got == ('closed', [b"-ERR 'Authorization Violation'"]) and '[INF] Reloaded: authorization token' in lines


def test_single_user_clients_are_closed():
    "As in the reference, a client of the single `user`/`password` is closed by every reload, even one that keeps it."
    def scenario(p):
        c = Raw(p.port, user='u', **{'pass': 'p'})
        hup(p, 'ping_max: 3\nauthorization { user: u, password: p }\n')
        return outcome(c), outcome(Raw(p.port, user='u', **{'pass': 'p'}))
    scenario.conf = 'authorization { user: u, password: p }\n'
    assert run_both(scenario) == (('closed', []), ('open', []))


@pytest.mark.parametrize('same', [True, False])
def test_nkey_users_line(same):
    "`authorization nkey users` is logged only when the nkey users changed."
    nk = 'UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4'
    base = f'authorization {{ users [ {{nkey: {nk}}}, {{user: a, password: a}} ] }}\n'
    def scenario(p):
        return strip(hup(p, base if same else 'authorization { users [ {user: a, password: a} ] }\n'), 'Reloaded')
    scenario.conf = base
    assert ('[INF] Reloaded: authorization nkey users' in run_both(scenario)) is not same


def test_lower_max_connections():
    "Lowering `max_connections` closes clients until the server is within it, each told `maximum connections exceeded`."
    def scenario(p):
        cs = [Raw(p.port) for _ in range(3)]
        lines = hup(p, 'max_connections: 1\n')
        return sorted(outcome(c) for c in cs), strip(lines, 'max_connections', 'exceeded')
    scenario.conf = 'max_connections: 10\n'
    got, lines = run_both(scenario)
    assert got == [('closed', [b"-ERR 'maximum connections exceeded'"])] * 2 + [('open', [])]
    assert lines == ['[ERR] maximum connections exceeded - Account:$G', '[INF] Closed 2 connections to fall within max_connections',
                     '[INF] Reloaded: max_connections = 1']


def test_user_moved_to_another_account():
    "A client whose user now belongs to another account is closed (it logs in again, into the new account)."
    before = 'accounts { A { users [ {user: a, password: a} ] }, B { users [ {user: b, password: b} ] } }\n'
    after = 'accounts { A { users [ ] }, B { users [ {user: b, password: b}, {user: a, password: a} ] } }\n'
    def scenario(p):
        a, b = Raw(p.port, user='a', **{'pass': 'a'}), Raw(p.port, user='b', **{'pass': 'b'})
        hup(p, after)
        return outcome(a), outcome(b)
    scenario.conf = before
    assert run_both(scenario) == (('closed', []), ('open', []))


@pytest.mark.parametrize('users,ok', [('{user: b, password: b}', True), ('{user: a, password: a}, {user: b, password: b}', False)])
def test_no_auth_user_removed(users, ok):
    "`no_auth_user` may only be removed together with its user."
    def scenario(p):
        return strip(hup(p, f'authorization {{ users [ {users} ] }}\n'), 'reload', 'Reloaded server')
    scenario.conf = 'no_auth_user: a\nauthorization { users [ {user: a, password: a}, {user: b, password: b} ] }\n'
    lines = digestless(run_both(scenario))
    assert lines == (['[INF] Reloaded server configuration'] if ok else
                     ['[ERR] Failed to reload server configuration: config reload not supported for NoAuthUser: old=a, new='])


def test_operator_mode():
    "Operator mode: a reload logs the accounts twice (the accounts, and the resolver made anew); a new operator is refused."
    from test_jwt_reference import keys, account, operator_conf
    _, acc = keys('account')
    config = operator_conf({acc: account(acc, 'A')})
    def scenario(p):
        same = strip(hup(p, config + 'debug: true\n'), 'Reloaded')
        other = strip(hup(p, operator_conf({acc: account(acc, 'A')})), 'Failed to reload')     # a new operator JWT
        return same, [l.split(' old=')[0] for l in other]
    scenario.conf = config
    same, other = run_both(scenario)
    assert (digestless(same), other) == (['[INF] Reloaded: debug = true', '[INF] Reloaded: authorization users', '[INF] Reloaded: accounts',
                                   '[INF] Reloaded: accounts', '[INF] Reloaded server configuration'],
                                  ['[ERR] Failed to reload server configuration: config reload not supported for TrustedOperators:'])


@pytest.mark.parametrize('new,message', [
    ('max_mem: 512M', 'config reload not supported for decreasing jetstream max memory and store'),
    ('max_mem: 1G, store_dir: "/elsewhere"', 'config reload not supported for jetstream storage directory'),
])
def test_jetstream_limits(new, message):
    "While JetStream runs its limits may not be lowered, nor its directory moved (the reference's messages)."
    def scenario(p):
        store = p.dir / 'store'
        ok = strip(hup(p, f'debug: true\njetstream {{ max_mem: 1G, store_dir: "{store}" }}\n'), 'Reloaded: debug')
        return ok, strip(hup(p, f'jetstream {{ {new.replace("/elsewhere", str(store) + "2")} {"" if "store_dir" in new else ", store_dir: " + json.dumps(str(store))} }}\n'), 'Failed')
    out = {}
    for kind in KINDS:
        d = pathlib.Path(tempfile.mkdtemp(prefix='reload-js-'))
        p = ServerProc('jsnb' if kind == 'jsnb' else 'nats-server', (), config=f'jetstream {{ max_mem: 1G, store_dir: "{d / "store"}" }}\n',
                       workdir=str(d), isolate_store=False).start()
        try: out[kind] = scenario(p)
        finally: p.stop()
    assert out['jsnb'] == out['nats-server'] == (['[INF] Reloaded: debug = true'], [f'[ERR] Failed to reload server configuration: {message}']), out


def test_authorization_newly_required():
    "Clients that connected without credentials are told `Authorization Violation` once the file requires them."
    def scenario(p):
        c = Raw(p.port)
        lines = hup(p, conf())
        return outcome(c), strip(lines, 'authentication error')
    scenario.conf = 'ping_max: 2\n'
    assert run_both(scenario) == (('closed', [b"-ERR 'Authorization Violation'"]), ['[ERR] authentication error'])


def test_pid_file_written():
    "A new `pid_file` is written at once."
    for kind in KINDS:
        p = started(kind, conf())
        try:
            lines = hup(p, f'pid_file: "{p.dir / "new.pid"}"\n' + conf())
            assert f'[INF] Reloaded: pid_file = {p.dir / "new.pid"}' in lines, (kind, lines)
            assert (p.dir / 'new.pid').read_text().strip() == str(p.proc.pid), kind
        finally: p.stop()


def test_ports_file_dir():
    "A new `ports_file_dir` gets the ports file and the old one loses it (with the reference's complaint when there was none)."
    def scenario(p):
        out = []
        for name in ('ports', 'ports2'):
            (p.dir / name).mkdir()
            lines = hup(p, f'ports_file_dir: "{p.dir / name}"\n' + conf())
            lines = [re.sub(r'[^/ ]+_\d+\.ports', '<file>', l.replace(str(p.dir), '<dir>')) for l in lines if 'ports' in l]
            out.append((lines, [len(list((p.dir / d).iterdir())) for d in ('ports', 'ports2') if (p.dir / d).exists()]))
        return out
    scenario.conf = conf()
    assert run_both(scenario) == [
        (['[ERR] Error cleaning up ports file <dir>/ports/<file>: remove <dir>/ports/<file>: no such file or directory',
          '[INF] Reloaded: ports_file_dir = <dir>/ports'], [1]),
        (['[INF] Reloaded: ports_file_dir = <dir>/ports2'], [0, 1])]


def test_accounts_added_and_removed():
    "An account the file adds takes logins at once; the clients of one it removes are closed; the others stay."
    before = 'accounts { A { users [ {user: a, password: a} ] }, B { users [ {user: b, password: b} ] } }\n'
    after = 'accounts { A { users [ {user: a, password: a} ] }, C { users [ {user: c, password: c} ] } }\n'
    def scenario(p):
        a, b = Raw(p.port, user='a', **{'pass': 'a'}), Raw(p.port, user='b', **{'pass': 'b'})
        lines = strip(hup(p, after), 'Reloaded', 'rror')
        c = Raw(p.port, user='c', **{'pass': 'c'})
        c.s.sendall(b'SUB x 1\r\n'); c.upto_pong()
        Raw(p.port, user='a', **{'pass': 'a'}).upto_pong(b'PUB x 1\r\nz\r\n')     # another account: not seen by c
        return outcome(a), outcome(b), outcome(c), digestless(lines)
    scenario.conf = before
    assert run_both(scenario) == (('open', []), ('closed', []), ('open', []),
                                  ['[INF] Reloaded: authorization users', '[INF] Reloaded: accounts', '[INF] Reloaded server configuration'])


def test_account_exports_change_refused_by_jsnb():
    "jsnb refuses, by name, an account change the reference would reload (new exports)."
    p = started('jsnb', 'accounts { A { users [ {user: a, password: a} ] } }\n')
    try:
        lines = hup(p, 'accounts { A { users [ {user: a, password: a} ], exports [ {stream: "x.>"} ] } }\n')
        assert [l for l in lines if 'Failed' in l] == [
            '[ERR] Failed to reload server configuration: config reload not supported for Accounts (the exports, imports or '
            'jetstream of account A changed): jsnb does not reload this option while running (nats-server does); '
            'restart the server to change it']
    finally: p.stop()
