"""The security matrix against the reference: one list of configuration files (users with bcrypt, plain passwords,
permissions and an nkey; accounts with an export; TLS with client certificates; TLS mapping certificates to users;
operator mode with JWTs) times one list of client attempts (no credentials, wrong and right credentials, nkey, JWT
creds, TLS with and without a client certificate, a cross-account publish, a denied subject). Every cell runs on jsnb
and on nats-server 2.15.1 with nats-py; accepted or refused, the error the server sent, and what was delivered must
be the same."""
import asyncio

import bcrypt, nkeys, pytest
import nats

from conftest import KINDS, REF_BIN
from test_jwt_reference import keys, account, user, operator_conf
from test_tls_map_reference import pki, ctx, tls_block  # noqa: F401 (fixture)

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

NSEED, NKEY = keys('user')
ASEED, AKEY = keys('account')
USEED, UKEY = keys('user')
ALICE_HASH = bcrypt.hashpw(b'alicepw', bcrypt.gensalt(4, prefix=b'2a')).decode()
BOB = '{user: bob, password: bobpw, permissions: {publish: {deny: "secret.>"}, subscribe: {deny: "secret.>"}}}'

USERS = f'''authorization {{ users = [
  {{user: alice, password: "{ALICE_HASH}"}}
  {BOB}
  {{user: carol, password: carolpw}}
  {{nkey: {NKEY}}}
] }}
'''
ACCOUNTS = f'''accounts {{
  A: {{ users: [ {{user: alice, password: alicepw}}, {BOB}, {{nkey: {NKEY}}} ], exports: [ {{stream: "shared.>"}} ] }}
  B: {{ users: [ {{user: carol, password: carolpw}} ], imports: [ {{stream: {{account: A, subject: "shared.>"}}}} ] }}
}}
'''
MAPPED = '''authorization { users = [
  {user: "alice@acme.io"}
  {user: "CN=bob,O=Acme", permissions: {publish: {deny: "secret.>"}}}
  {user: "svc.acme.io", password: carolpw}
] }
'''


def configs(pki):
    "name -> (configuration text, TLS context for the attempts: (with client certificate, without))."
    with_cert, no_cert = ctx(pki, 'email'), ctx(pki)
    verify = (f'tls {{\n  cert_file: "{pki}/server.pem"\n  key_file: "{pki}/server-key.pem"\n  ca_file: "{pki}/ca.pem"\n'
              f'  verify: true\n}}\n')
    return {
        'users': (USERS, None),
        'accounts': (ACCOUNTS, None),
        'tls-verify': (verify + USERS, (with_cert, no_cert)),
        'tls-map': (tls_block(pki) + MAPPED, (with_cert, no_cert)),
        'operator': (operator_conf({AKEY: account(AKEY, 'A')}), None),
    }


def creds(tmp_path) -> str:
    path = tmp_path / 'u.creds'
    path.write_text(f'-----BEGIN NATS USER JWT-----\n{user(UKEY, ASEED)}\n------END NATS USER JWT------\n\n'
                    f'-----BEGIN USER NKEY SEED-----\n{USEED.decode()}\n------END USER NKEY SEED------\n')
    return str(path)


LOGINS = {'none': {}, 'wrong': {'user': 'alice', 'password': 'nope'}, 'right': {'user': 'alice', 'password': 'alicepw'},
          'bob': {'user': 'bob', 'password': 'bobpw'}, 'carol': {'user': 'carol', 'password': 'carolpw'},
          'nkey': {'nkeys_seed_str': NSEED.decode()}}


def _said(e: BaseException) -> str:
    "What a failed connect says: the server's -ERR text when there was one, else only that it failed."
    s = str(e)
    return s[s.index("'"):] if "nats: '" in s else 'refused'


async def _connect(url, tls, kw):
    errors = []
    async def on_error(e): errors.append(str(e))
    try: nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=4, error_cb=on_error,
                                 tls=tls, **kw)
    except Exception as e: return None, _said(e), errors
    try: await nc.flush(2)
    except Exception as e: await nc.close(); return None, f'no PONG: {type(e).__name__}', errors
    return nc, 'ok', errors


async def attempt(url, name, tls, creds_file) -> tuple:
    "One cell: (outcome, anything the server reported, deliveries)."
    cert, no_cert = tls if tls else (None, None)
    if name in ('none', 'wrong', 'right', 'nkey'):
        nc, said, errors = await _connect(url, cert, LOGINS[name])
        if nc: await nc.close()
        return said, errors
    if name == 'jwt':
        nc, said, errors = await _connect(url, cert, {'user_credentials': creds_file})
        if nc: await nc.close()
        return said, errors
    if name == 'tls-no-cert':
        if tls is None: return ('no TLS here',)
        nc, said, errors = await _connect(url, no_cert, LOGINS['right'])
        if nc: await nc.close()
        return said == 'ok', errors if said == 'ok' else []           # how the refused handshake ends depends on TLS 1.3 timing
    if name == 'cross-account':                                       # carol (account B) listens; alice (A) publishes
        got = []
        async def cb(m): got.append(m.subject)
        sub, s1, _ = await _connect(url, cert, LOGINS['carol'])
        pub, s2, _ = await _connect(url, cert, LOGINS['right'])
        try:
            if sub and pub:
                for subj in ('x.>', 'shared.>'):
                    await sub.subscribe(subj, cb=cb)
                await sub.flush()
                for subj in ('x.1', 'shared.1'): await pub.publish(subj, b'hi')
                await pub.flush()                                     # alice's messages are through the server:
                await sub.publish('x.end', b''); await sub.flush()     # carol's own marker comes after them
                for _ in range(100):
                    if 'x.end' in got: break
                    await asyncio.sleep(0.05)
        finally:
            for nc in (sub, pub):
                if nc: await nc.close()
        assert 'x.end' in got or not (sub and pub), ('the marker never came back', s1, s2, got)
        return s1, s2, sorted(x for x in got if x != 'x.end')
    if name == 'denied-subject':                                      # bob may not publish or subscribe to secret.>
        nc, said, errors = await _connect(url, cert, LOGINS['bob'])
        if nc:
            await nc.subscribe('secret.x'); await nc.publish('secret.x', b'no'); await nc.publish('ok.x', b'yes')
            try: await nc.flush(2)
            except Exception: pass
            await asyncio.sleep(0.3); await nc.close()
        return said, sorted(set(errors))
    raise ValueError(name)


def run_cell(url, name, tls, creds_file):
    "One cell; a cross-account run in which nothing at all came through is tried again (seen, rarely, on a loaded machine)."
    r = asyncio.run(attempt(url, name, tls, creds_file))
    for _ in range(2):
        if name != 'cross-account' or r[2]: break
        r = asyncio.run(attempt(url, name, tls, creds_file))
    return r


ATTEMPTS = ['none', 'wrong', 'right', 'nkey', 'jwt', 'tls-no-cert', 'cross-account', 'denied-subject']
CONFIGS = ['users', 'accounts', 'tls-verify', 'tls-map', 'operator']


@pytest.mark.parametrize('config', CONFIGS)
def test_matrix(start_server, pki, tmp_path, config):
    text, tls = configs(pki)[config]
    servers = {k: start_server(k, config=text) for k in KINDS}
    c = creds(tmp_path)
    got = {k: {a: run_cell(s.url, a, tls, c) for a in ATTEMPTS} for k, s in servers.items()}
    for a in ATTEMPTS: assert got['jsnb'][a] == got['nats-server'][a], (config, a, got['jsnb'][a], got['nats-server'][a])
    # the matrix is only worth something if it both lets in and keeps out, in every configuration
    outcomes = [r[0] for r in got['jsnb'].values() if r and isinstance(r[0], str)]
    assert 'ok' in outcomes and "'Authorization Violation'" in outcomes, (config, got['jsnb'])


def test_the_matrix_sees_what_matters(start_server, pki, tmp_path):
    "Spot checks of cells: isolation between accounts, the denied subject's errors, JWT creds only in operator mode."
    cs = configs(pki)
    s = start_server('jsnb', config=cs['accounts'][0])
    assert asyncio.run(attempt(s.url, 'cross-account', None, None)) == ('ok', 'ok', ['shared.1'])
    said, errors = asyncio.run(attempt(s.url, 'denied-subject', None, None))
    assert said == 'ok' and 'nats: permissions violation for publish to "secret.x"' in errors
    assert 'nats: permissions violation for subscription to "secret.x"' in errors     # (nats-py lowercases them)
    s = start_server('jsnb', config=cs['users'][0])
    assert asyncio.run(attempt(s.url, 'cross-account', None, None)) == ('ok', 'ok', ['shared.1', 'x.1'])
    assert asyncio.run(attempt(s.url, 'jwt', None, creds(tmp_path)))[0] == "'Authorization Violation'"
    s = start_server('jsnb', config=cs['operator'][0])
    assert asyncio.run(attempt(s.url, 'jwt', None, creds(tmp_path)))[0] == 'ok'
