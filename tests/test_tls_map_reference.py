"""`verify_and_map` against the reference: the same configuration run by jsnb and nats-server 2.15.1 must map the
same client certificates (email, DNS name, subject DN in any order, subject string) to the same users of
`authorization { users }` and of accounts, refuse the same ones with the same error, and log the same warning."""
import asyncio, time

import pytest
import nats

from conftest import KINDS, REF_BIN
from test_auth_reference import nats_outcome, log_lines, check_config
from jsnb.nats.pki import CA

DENIED = "refused: nats: 'Authorization Violation'"
pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]


@pytest.fixture(scope='module')
def pki(tmp_path_factory):
    "A CA, a server certificate, and client certificates with various subjects and alternative names."
    ca = CA(tmp_path_factory.mktemp('pki'), subject='map CA')
    ca.issue('server', 'localhost', sans=['localhost', '127.0.0.1'], usage=['server'])
    clients = {
        'email': ('whoever', ['alice@acme.io', 'svc.acme.io']),
        'dns': ('whoever', ['svc.acme.io']),
        'dn': ([('O', 'Acme'), ('CN', 'bob')], []),
        'dn-reordered': ([('CN', 'dave'), ('OU', 'ops'), ('O', 'Acme')], []),
        'subject-with-dc': ([('DC', 'io'), ('DC', 'acme'), ('E', 'e@acme.io'), ('CN', 'erin')], []),
        'unknown': ('carol', []),
    }
    for stem, (subject, sans) in clients.items(): ca.issue(stem, subject, sans=sans, usage=['client'])
    return ca.dir


def ctx(pki, stem=None):
    import ssl
    c = ssl.create_default_context(cafile=str(pki / 'ca.pem'))
    if stem: c.load_cert_chain(str(pki / f'{stem}.pem'), str(pki / f'{stem}-key.pem'))
    return c


def tls_block(pki):
    return (f'tls {{\n  cert_file: "{pki}/server.pem"\n  key_file: "{pki}/server-key.pem"\n  ca_file: "{pki}/ca.pem"\n'
            f'  verify_and_map: true\n}}\n')


USERS = '''authorization { users = [
  {user: "alice@acme.io"}
  {user: "svc.acme.io", password: "pw"}
  {user: "CN=bob,O=Acme"}
  {user: "O=Acme,OU=ops,CN=dave"}
  {user: "CN=erin,DC=io,DC=acme"}
] }
'''

ATTEMPTS = [('email', {}), ('dns', {}), ('dns', {'user': 'svc.acme.io', 'password': 'pw'}), ('dn', {}),
            ('dn-reordered', {}), ('subject-with-dc', {}), ('unknown', {}), ('unknown', {'user': 'alice@acme.io', 'password': ''}),
            ('email', {'user': 'someone', 'password': 'x'})]


def test_users_mapped_from_certificates(start_server, pki):
    servers = {k: start_server(k, config=tls_block(pki) + USERS) for k in KINDS}
    got = {}
    for k, s in servers.items():
        got[k] = [asyncio.run(nats_outcome(s.url, tls=ctx(pki, stem), **kw)) for stem, kw in ATTEMPTS]
        got[k].append(asyncio.run(nats_outcome(s.url, tls=ctx(pki))) == 'ok')   # no certificate: refused (how, depends on TLS 1.3 timing)
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][:2] == ['ok', DENIED] and got['jsnb'][2:6] == ['ok'] * 4
    assert got['jsnb'][6:9] == [DENIED] * 3          # the last: mapped to alice, who has no password, but one was sent
    for s in servers.values():                       # the log may trail the answers a little
        for _ in range(100):
            if len(log_lines(s, 'found in connect proto')) >= 2 and log_lines(s, 'authentication error - User "alice'): break
            time.sleep(0.05)
    warn = {k: log_lines(s, 'found in connect proto') + log_lines(s, 'authentication error') for k, s in servers.items()}
    assert warn["jsnb"] == warn["nats-server"] == [
        '[WRN] User "svc.acme.io" found in connect proto, but user required from cert',
        '[WRN] User "someone" found in connect proto, but user required from cert',
        '[ERR] CLIENT - authentication error - User "svc.acme.io"',       # the DNS name maps, the password is missing
        '[ERR] CLIENT - authentication error',                             # nothing maps
        '[ERR] CLIENT - authentication error - User "alice@acme.io"',      # nothing maps (the name sent is logged)
        '[ERR] CLIENT - authentication error - User "alice@acme.io"']      # alice maps, a password was sent


ACCOUNTS = '''accounts {
  A: { users: [ {user: "alice@acme.io"}, {user: "CN=bob,O=Acme"} ] }
  B: { users: [ {user: "svc.acme.io"} ] }
}
'''


async def cross(url, pki) -> list:
    "alice (A) and svc (B) subscribe to `x`; bob (A) and svc publish there: who gets what."
    got = []
    ncs = {s: await nats.connect(url, tls=ctx(pki, s), allow_reconnect=False) for s in ('email', 'dn', 'dns')}
    try:
        for s in ('email', 'dns'):
            async def cb(m, s=s): got.append((s, m.data.decode()))
            await ncs[s].subscribe('x', cb=cb)
            await ncs[s].flush()
        for s in ('dn', 'dns'): await ncs[s].publish('x', s.encode()); await ncs[s].flush()
        await asyncio.sleep(0.3)
    finally:
        for nc in ncs.values(): await nc.close()
    return sorted(got)


def test_mapped_users_land_in_their_accounts(start_server, pki):
    servers = {k: start_server(k, config=tls_block(pki) + ACCOUNTS) for k in KINDS}
    got = {k: asyncio.run(cross(s.url, pki)) for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server'] == [('dns', 'dns'), ('email', 'dn')]


def test_password_less_user_is_a_certificate_identity(start_server, pki):
    "Without a certificate mapping on the way in (a name and no password), a user without a password is refused."
    conf = tls_block(pki) + USERS
    servers = {k: start_server(k, config=conf) for k in KINDS}
    got = {k: asyncio.run(nats_outcome(s.url, tls=ctx(pki, 'unknown'), user='CN=bob,O=Acme', password='')) for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server'] == DENIED


def test_verify_and_map_must_be_a_boolean(tmp_path, pki):
    path = tmp_path / 'x.conf'
    path.write_text(f'tls {{ cert_file: "{pki}/server.pem", key_file: "{pki}/server-key.pem", verify_and_map: "yes" }}\n')
    out = {k: check_config(k, path) for k in KINDS}
    assert all(rc != 0 and "expected 'verify_and_map' to be a boolean" in text for rc, text in out.values()), out


def _plain_and_tls(url: str, pki) -> dict:
    "What a client sees of a server with `allow_non_tls`: INFO's security fields, a plain round trip, a round trip after starting TLS."
    import json, socket, ssl
    host, port = url.rsplit('/', 1)[1].rsplit(':', 1)
    out = {}
    for mode in ('plain', 'tls'):
        s = socket.create_connection((host, int(port)), timeout=5)
        f = s.makefile('rb')
        info = json.loads(f.readline().split(b' ', 1)[1])
        out[f'{mode} info'] = {k: info.get(k) for k in ('tls_required', 'tls_available', 'tls_verify')}
        if mode == 'tls':
            s = ctx(pki).wrap_socket(s, server_hostname='localhost'); f = s.makefile('rb')
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB q 1\r\nPUB q 2\r\nhi\r\nPING\r\n')
        got = [f.readline() for _ in range(3)]
        out[f'{mode} round trip'] = [g.strip() for g in got]
        s.close()
    return out


def test_allow_non_tls(start_server, pki):
    "`allow_non_tls`: INFO says `tls_available` instead of `tls_required`; a client may start TLS or stay in plain text."
    conf = f'tls {{\n  cert_file: "{pki}/server.pem"\n  key_file: "{pki}/server-key.pem"\n}}\nallow_non_tls: true\n'
    out = {k: _plain_and_tls(start_server(k, config=conf).url, pki) for k in KINDS}
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb']['plain info'] == {'tls_required': None, 'tls_available': True, 'tls_verify': None}
    assert out['jsnb']['tls round trip'] == [b'MSG q 1 2', b'hi', b'PONG']
