"""Operator mode against the reference: operator, account and user JWTs made here (ed25519 nkeys, as `nsc` makes
them), the same configuration run by jsnb and nats-server 2.15.1. Valid users get in and bad ones get the same
`-ERR` and log line; permissions, allow_responses and account default permissions are enforced alike; account
limits (connections, subscriptions, payload) and JetStream limits from the account JWT; exports and imports
between JWT accounts; `$SYS.REQ.USER.INFO`; a user JWT expiring; `.creds` files with nats-py."""
import asyncio, base64, json, os, re, time

import nkeys, pytest
import nats

from conftest import KINDS, REF_BIN, log_lines
from rawclient import Raw

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

PREFIX = {'operator': nkeys.PREFIX_BYTE_OPERATOR, 'account': nkeys.PREFIX_BYTE_ACCOUNT, 'user': nkeys.PREFIX_BYTE_USER}


def b64(b: bytes) -> str: return base64.urlsafe_b64encode(b).rstrip(b'=').decode()


def keys(kind):
    "A new (seed, public key) of `kind`."
    seed = nkeys.encode_seed(os.urandom(32), PREFIX[kind])
    return seed, nkeys.from_seed(bytearray(seed)).public_key.decode()


def encode(claims: dict, seed: bytes) -> str:
    "A version 2 NATS JWT of `claims`, signed by `seed` (written here independently of jsnb's encoder)."
    kp = nkeys.from_seed(bytearray(seed))
    c = {'jti': b64(os.urandom(16)), 'iat': int(time.time()), **claims, 'iss': kp.public_key.decode()}
    c['nats'] = {**c['nats'], 'version': 2}
    signed = b64(json.dumps({'typ': 'JWT', 'alg': 'ed25519-nkey'}).encode()) + '.' + b64(json.dumps(c).encode())
    return signed + '.' + b64(kp.sign(signed.encode()))


UNLIMITED = {'subs': -1, 'data': -1, 'payload': -1}
ACC_UNLIMITED = {**UNLIMITED, 'conn': -1, 'imports': -1, 'exports': -1, 'leaf': -1, 'wildcards': True}

OSEED, OP = keys('operator')
SYS_SEED, SYS = keys('account')


def account(pub, name, seed=OSEED, limits=None, exp=None, **n):
    c = {'sub': pub, 'name': name, 'nats': {'type': 'account', 'limits': {**ACC_UNLIMITED, **(limits or {})}, **n}}
    return encode({**c, 'exp': exp} if exp else c, seed)


def user(key, seed, name='u', exp=None, iat=None, **n):
    c = {'sub': key, 'name': name, 'nats': {'type': 'user', **UNLIMITED, **n}}
    if exp: c['exp'] = exp
    if iat: c['iat'] = iat
    return encode(c, seed)


def operator_conf(accounts: dict, extra: str = '', operator: str | None = None) -> str:
    "A configuration: the operator inline, the system account, `resolver: MEMORY` with `accounts` {key: jwt} preloaded."
    op = operator or encode({'sub': OP, 'name': 'O', 'nats': {'type': 'operator', 'system_account': SYS}}, OSEED)
    pre = '\n'.join(f'  {k}: {v}' for k, v in {SYS: account(SYS, 'SYS'), **accounts}.items())
    return f'operator: {op}\nsystem_account: {SYS}\nresolver: MEMORY\nresolver_preload: {{\n{pre}\n}}\n{extra}'


def both(start_server, config, *flags):
    return {k: start_server(k, *flags, config=config) for k in KINDS}


def session(port, jwt, seed=None, then=b'PING\r\n', wait=0.4, sig=None, **opts):
    "CONNECT with user `jwt`, signing the nonce with `seed` (or sending `sig`), then `then`: (answer, closed)."
    r = Raw(port, connect=None)
    nonce = json.loads(r.info).get('nonce', '')
    o = {'verbose': False, 'pedantic': False, 'headers': True, 'jwt': jwt, **opts}
    if seed is not None: o['sig'] = b64(nkeys.from_seed(bytearray(seed)).sign(nonce.encode()))
    if sig is not None: o['sig'] = sig
    r.send(b'CONNECT ' + json.dumps(o).encode() + b'\r\n' + then)
    try: return r.read(wait)
    finally: r.close()


# ---------------------------------------------------------------- who gets in

def test_who_gets_in(start_server):
    aseed, acc = keys('account')
    skseed, sk = keys('account')                # a signing key of the account
    xseed, xacc = keys('account')               # an account nobody preloaded
    bseed, bacc = keys('account')               # an account that refuses bearer tokens
    rogue_seed, _ = keys('operator')
    rseed, racc = keys('account')               # an account a rogue operator signed
    useed, upub = keys('user')
    vseed, revoked = keys('user')
    now = int(time.time())
    accounts = {acc: account(acc, 'A', signing_keys=[sk], revocations={revoked: now + 5}),
                bacc: account(bacc, 'B', limits={'disallow_bearer': True}),
                racc: account(racc, 'R', seed=rogue_seed)}
    servers = both(start_server, operator_conf(accounts))
    cases = [
        ('valid', dict(jwt=user(upub, aseed), seed=useed)),
        ('signing key', dict(jwt=user(upub, skseed, issuer_account=acc), seed=useed)),
        ('signing key without issuer_account', dict(jwt=user(upub, skseed), seed=useed)),
        ('unknown signing key', dict(jwt=user(upub, xseed, issuer_account=acc), seed=useed)),
        ('wrong signature', dict(jwt=user(upub, aseed), seed=vseed)),
        ('garbage signature', dict(jwt=user(upub, aseed), sig='x' * 86)),
        ('no signature', dict(jwt=user(upub, aseed))),
        ('expired', dict(jwt=user(upub, aseed, exp=now - 5), seed=useed)),
        ('not yet expired', dict(jwt=user(upub, aseed, exp=now + 60), seed=useed)),
        ('unknown account', dict(jwt=user(upub, xseed), seed=useed)),
        ('account of an untrusted operator', dict(jwt=user(upub, rseed), seed=useed)),
        ('bearer', dict(jwt=user(upub, aseed, bearer_token=True))),
        ('bearer refused by account', dict(jwt=user(upub, bseed, bearer_token=True))),
        ('revoked', dict(jwt=user(revoked, aseed, iat=now), seed=vseed)),
        ('issued after revocation', dict(jwt=user(revoked, aseed, iat=now + 10), seed=vseed)),
        ('src allowed', dict(jwt=user(upub, aseed, src=['127.0.0.0/8']), seed=useed)),
        ('src refused', dict(jwt=user(upub, aseed, src=['10.0.0.0/8']), seed=useed)),
        ('websocket only', dict(jwt=user(upub, aseed, allowed_connection_types=['WEBSOCKET']), seed=useed)),
        ('not a JWT', dict(jwt='eyJhbGciOi.xx.yy', seed=useed)),
        ('user and password', dict(jwt='', user='a', **{'pass': 'b'})),
    ]
    results = {k: [(name, session(s.port, **kw)) for name, kw in cases] for k, s in servers.items()}
    assert results['jsnb'] == results['nats-server']
    ok = [name for name, (answer, closed) in results['jsnb'] if answer == b'PONG\r\n' and not closed]
    assert ok == ['valid', 'signing key', 'not yet expired', 'bearer', 'issued after revocation', 'src allowed']
    lines = {k: log_lines(s, 'authentication error') + log_lines(s, 'Bad src') for k, s in servers.items()}
    assert lines['jsnb'] == lines['nats-server'] and '[ERR] CLIENT - authentication error - User "a"' in lines['jsnb']


def test_info_has_a_nonce_and_auth_required(start_server):
    servers = both(start_server, operator_conf({}))
    for s in servers.values():
        info = json.loads(Raw(s.port, connect=None).info)
        assert info['auth_required'] is True and re.fullmatch('[A-Za-z0-9_-]{15}', info['nonce']), s.kind


# ---------------------------------------------------------------- permissions

def test_permissions_and_default_permissions(start_server):
    aseed, acc = keys('account')
    useed, upub = keys('user')
    servers = both(start_server, operator_conf({acc: account(acc, 'A', default_permissions={'pub': {'deny': ['secret.>']}, 'sub': {}})}))
    scoped = user(upub, aseed, pub={'allow': ['pub.>', 'jobs.*'], 'deny': ['pub.secret']}, sub={'allow': ['sub.*', 'q.* workers'], 'deny': ['sub.hidden']})
    data = (b'SUB sub.a 1\r\nSUB sub.hidden 2\r\nSUB other 3\r\nSUB q.a workers 4\r\nSUB q.a others 5\r\n'
            b'PUB pub.ok 0\r\n\r\nPUB pub.secret 0\r\n\r\nPUB nope 0\r\n\r\nPUB jobs.a 0\r\n\r\nPING\r\n')
    plain = b'PUB secret.x 0\r\n\r\nPUB open 0\r\n\r\nPING\r\n'
    got = {k: (session(s.port, scoped, useed, data), session(s.port, user(upub, aseed), useed, plain)) for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server']
    assert b'Permissions Violation for Publish to "pub.secret"' in got['jsnb'][0][0]
    assert b'Permissions Violation for Publish to "secret.x"' in got['jsnb'][1][0]
    lines = {k: log_lines(s, 'Violation') for k, s in servers.items()}
    assert lines['jsnb'] == lines['nats-server'] and any('/A/jwt:' + upub in x for x in lines['jsnb'])


def test_allow_responses(start_server):
    aseed, acc = keys('account')
    sseed, svc = keys('user')
    cseed, cli = keys('user')
    servers = both(start_server, operator_conf({acc: account(acc, 'A')}))
    for s in servers.values():
        r = Raw(s.port, connect=None)
        nonce = json.loads(r.info)['nonce']
        o = {'verbose': False, 'jwt': user(svc, aseed, sub={'allow': ['svc.>']}, resp={'max': 1, 'ttl': 0}),
             'sig': b64(nkeys.from_seed(bytearray(sseed)).sign(nonce.encode()))}
        r.send(b'CONNECT ' + json.dumps(o).encode() + b'\r\nSUB svc.> 1\r\nPING\r\n'); assert r.until(b'PONG') == b'PONG\r\n'
        c = Raw(s.port, connect=None)
        nonce = json.loads(c.info)['nonce']
        o = {'verbose': False, 'jwt': user(cli, aseed), 'sig': b64(nkeys.from_seed(bytearray(cseed)).sign(nonce.encode()))}
        c.send(b'CONNECT ' + json.dumps(o).encode() + b'\r\nSUB _INBOX.1 9\r\nPUB svc.x _INBOX.1 2\r\nhi\r\nPING\r\n')
        c.until(b'PONG')
        m = r.msgs(1)[0]
        r.send(b'PUB ' + m.reply + b' 2\r\nok\r\nPUB ' + m.reply + b' 4\r\nmore\r\nPUB other 0\r\n\r\nPING\r\n')
        answer = r.until(b'PONG')
        assert answer == b'-ERR \'Permissions Violation for Publish to "_INBOX.1"\'\r\n-ERR \'Permissions Violation for Publish to "other"\'\r\nPONG\r\n', s.kind
        assert [bytes(x.data) for x in c.msgs(1)] == [b'ok'], s.kind
        r.close(); c.close()


# ---------------------------------------------------------------- account limits

def test_account_connection_subscription_and_payload_limits(start_server):
    aseed, acc = keys('account')
    useed, upub = keys('user')
    servers = both(start_server, operator_conf({acc: account(acc, 'A', limits={'conn': 1, 'subs': 2, 'payload': 8})}))
    for s in servers.values():
        first = Raw(s.port, connect=None)
        nonce = json.loads(first.info)['nonce']
        first.send(b'CONNECT ' + json.dumps({'verbose': False, 'jwt': user(upub, aseed), 'sig': b64(nkeys.from_seed(bytearray(useed)).sign(nonce.encode()))}).encode()
                   + b'\r\nSUB a 1\r\nSUB b 2\r\nSUB c 3\r\nPUB z 8\r\n12345678\r\nPING\r\n')
        assert first.until(b'PONG') == b"-ERR 'maximum subscriptions exceeded'\r\nPONG\r\n", s.kind
        assert session(s.port, user(upub, aseed), useed) == (b"-ERR 'maximum account active connections exceeded'\r\n", True), s.kind
        first.send(b'PUB z 9\r\n123456789\r\n')
        assert first.read(0.5) == (b"-ERR 'Maximum Payload Violation'\r\n", True), s.kind
        first.close()
    # the user's own limit is tighter than the account's; 0 subscriptions refuses the connection
    for s in servers.values():
        assert session(s.port, user(upub, aseed, subs=1), useed, b'SUB a 1\r\nSUB b 2\r\nPING\r\n') == \
            (b"-ERR 'maximum subscriptions exceeded'\r\nPONG\r\n", False), s.kind


def test_jetstream_limits_from_the_account_jwt(start_server):
    aseed, acc = keys('account')
    nseed, noj = keys('account')
    useed, upub = keys('user')
    conf = operator_conf({acc: account(acc, 'A', limits={'mem_storage': 100000, 'disk_storage': 0, 'streams': 2, 'consumer': 1}),
                          noj: account(noj, 'N')})
    results = {}
    for k, s in both(start_server, conf, '-js').items():
        creds = s.dir / 'u.creds'
        creds.write_text(f'-----BEGIN NATS USER JWT-----\n{user(upub, aseed)}\n------END NATS USER JWT------\n\n'
                         f'-----BEGIN USER NKEY SEED-----\n{useed.decode()}\n------END USER NKEY SEED------\n')
        ncreds = s.dir / 'n.creds'
        ncreds.write_text(f'-----BEGIN NATS USER JWT-----\n{user(upub, nseed)}\n------END NATS USER JWT------\n\n'
                          f'-----BEGIN USER NKEY SEED-----\n{useed.decode()}\n------END USER NKEY SEED------\n')

        async def scenario():
            nc = await nats.connect(s.url, user_credentials=str(creds), allow_reconnect=False)
            out = []
            async def api(subject, body):
                m = await nc.request(subject, json.dumps(body).encode(), timeout=5)
                d = json.loads(m.data); d.pop('type', None)
                return d
            info = await api('$JS.API.INFO', {})
            out.append({k2: info.get(k2) for k2 in ('limits', 'streams', 'consumers')})
            one = await api('$JS.API.STREAM.CREATE.ONE', {'name': 'ONE', 'subjects': ['one'], 'storage': 'memory'})
            out.append(one.get('error'))
            out.append((await api('$JS.API.STREAM.CREATE.BIG', {'name': 'BIG', 'subjects': ['big'], 'storage': 'memory', 'max_bytes': 200000})).get('error'))
            out.append((await api('$JS.API.STREAM.CREATE.TWO', {'name': 'TWO', 'subjects': ['two'], 'storage': 'memory'})).get('error'))
            out.append((await api('$JS.API.STREAM.CREATE.THREE', {'name': 'THREE', 'subjects': ['three'], 'storage': 'memory'})).get('error'))
            out.append((await api('$JS.API.STREAM.CREATE.FILE', {'name': 'FILE', 'subjects': ['file']})).get('error'))
            out.append((await api('$JS.API.CONSUMER.CREATE.ONE.C1', {'stream_name': 'ONE', 'config': {'durable_name': 'C1'}})).get('error'))
            out.append((await api('$JS.API.CONSUMER.CREATE.ONE.C2', {'stream_name': 'ONE', 'config': {'durable_name': 'C2'}})).get('error'))
            await nc.close()
            other = await nats.connect(s.url, user_credentials=str(ncreds), allow_reconnect=False)
            m = await other.request('$JS.API.INFO', b'', timeout=5)
            out.append(json.loads(m.data).get('error'))
            await other.close()
            return out
        results[k] = asyncio.run(scenario())
    assert results['jsnb'] == results['nats-server']
    codes = [e and e.get('err_code') for e in results['jsnb'][1:]]
    assert codes[:4] == [None, 10028, None, 10027] and codes[-1] == 10039, codes


# ---------------------------------------------------------------- exports and imports

def test_exports_and_imports_between_jwt_accounts(start_server):
    aseed, a = keys('account')
    bseed, b = keys('account')
    useed, upub = keys('user')
    accounts = {a: account(a, 'A', exports=[{'type': 'stream', 'subject': 'feed.>'}, {'type': 'service', 'subject': 'help.>'},
                                          {'type': 'stream', 'subject': 'private.>', 'token_req': True}]),
                b: account(b, 'B', imports=[{'type': 'stream', 'account': a, 'subject': 'feed.>', 'local_subject': 'in.>'},
                                            {'type': 'service', 'account': a, 'subject': 'help.>', 'local_subject': 'ask.>'}])}
    for s in both(start_server, operator_conf(accounts)).values():
        pa = Raw(s.port, connect=None)
        nonce = json.loads(pa.info)['nonce']
        pa.send(b'CONNECT ' + json.dumps({'verbose': False, 'headers': True, 'jwt': user(upub, aseed), 'sig': b64(nkeys.from_seed(bytearray(useed)).sign(nonce.encode()))}).encode()
                + b'\r\nSUB help.> 1\r\nPING\r\n'); pa.until(b'PONG')
        pb = Raw(s.port, connect=None)
        nonce = json.loads(pb.info)['nonce']
        pb.send(b'CONNECT ' + json.dumps({'verbose': False, 'jwt': user(upub, bseed), 'sig': b64(nkeys.from_seed(bytearray(useed)).sign(nonce.encode()))}).encode()
                + b'\r\nSUB in.> 1\r\nSUB private.> 2\r\nSUB _INBOX.r 3\r\nPING\r\n'); pb.until(b'PONG')
        pa.send(b'PUB feed.x 1\r\n1\r\nPUB private.x 1\r\n2\r\nPING\r\n'); pa.until(b'PONG')
        got = pb.msgs(1)
        assert [(bytes(m.subject), bytes(m.data)) for m in got] == [(b'in.x', b'1')], s.kind
        pb.send(b'PUB ask.me _INBOX.r 1\r\n?\r\n')
        req = pa.msgs(1)[0]
        assert bytes(req.subject) == b'help.me' and bytes(req.data[req.hdr_len:]) == b'?', s.kind
        info = json.loads(re.search(rb'Nats-Request-Info: (.*)\r\n', bytes(req.data[:req.hdr_len])).group(1))
        assert info['acc'] == b and info['rtt'] > 0 and set(info) == {'acc', 'rtt'}, (s.kind, info)
        pa.send(b'PUB ' + req.reply + b' 2\r\nok\r\n')
        assert [(bytes(m.subject), bytes(m.data)) for m in pb.msgs(1)] == [(b'_INBOX.r', b'ok')], s.kind
        assert pb.read(0.3)[0] == b'', s.kind         # nothing from the token-required export
        pa.close(); pb.close()


# ---------------------------------------------------------------- USER.INFO, expiry, creds

def test_user_info(start_server):
    aseed, acc = keys('account')
    useed, upub = keys('user')
    jwt = user(upub, aseed, name='bob', exp=int(time.time()) + 100, pub={'allow': ['a.>', '$SYS.REQ.USER.INFO']},
               sub={'allow': ['_INBOX.>', 'q.* grp']}, resp={'max': 3, 'ttl': 5_000_000_000})
    got = {}
    for k, s in both(start_server, operator_conf({acc: account(acc, 'Acme')})).items():
        r = Raw(s.port, connect=None)
        nonce = json.loads(r.info)['nonce']
        r.send(b'CONNECT ' + json.dumps({'verbose': False, 'jwt': jwt, 'sig': b64(nkeys.from_seed(bytearray(useed)).sign(nonce.encode()))}).encode()
               + b'\r\nSUB _INBOX.x 1\r\nPUB $SYS.REQ.USER.INFO _INBOX.x 0\r\n\r\n')
        d = json.loads(bytes(r.msgs(1)[0].data))
        r.close()
        assert set(d['server']) >= {'name', 'host', 'id', 'ver', 'jetstream', 'flags', 'seq', 'time'}, k
        data = d['data']
        assert 95e9 <= data.pop('expires') <= 100e9, k
        for side in data['permissions'].values():
            for key in ('allow', 'deny'):
                if isinstance(side, dict) and key in side: side[key] = sorted(side[key])
        got[k] = data
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'] == {'user': upub, 'account': acc, 'account_name': 'Acme', 'user_name': 'bob',
                           'permissions': {'publish': {'allow': ['$SYS.REQ.USER.INFO', 'a.>']}, 'subscribe': {'allow': ['_INBOX.>', 'q.* grp']},
                                           'responses': {'max': 3, 'ttl': 5_000_000_000}}}


@pytest.mark.parametrize('which', ['user', 'account'])
def test_jwt_expires_while_connected(start_server, which):
    "A user's or its account's JWT expiring disconnects the client with the reference's error."
    aseed, acc = keys('account')
    useed, upub = keys('user')
    at = int(time.time()) + 15            # the account's JWT expires once both servers have started, even on a busy machine
    servers = both(start_server, operator_conf({acc: account(acc, 'A', exp=at if which == 'account' else None)}))
    if which == 'user': at = int(time.time()) + 4                   # the user's JWT: made once the servers are up
    jwt = user(upub, aseed, exp=at if which == 'user' else None)
    conns = {}
    for k, s in servers.items():
        r = Raw(s.port, connect=None)
        nonce = json.loads(r.info)['nonce']
        r.send(b'CONNECT ' + json.dumps({'verbose': False, 'jwt': jwt, 'sig': b64(nkeys.from_seed(bytearray(useed)).sign(nonce.encode()))}).encode() + b'\r\nPING\r\n')
        assert r.until(b'PONG') == b'PONG\r\n', k
        conns[k] = r
    got = {k: r.until(b'Expired', timeout=max(5, at - time.time() + 30)).replace(b'PING\r\n', b'') for k, r in conns.items()}   # the reference may PING first
    assert got['jsnb'] == got['nats-server'] == f"-ERR '{which.title()} Authentication Expired'\r\n".encode()
    for r in conns.values(): r.close()


def test_creds_files_with_nats_py(start_server, tmp_path):
    aseed, acc = keys('account')
    useed, upub = keys('user')
    good, other = tmp_path / 'good.creds', tmp_path / 'other.creds'
    good.write_text(f'-----BEGIN NATS USER JWT-----\n{user(upub, aseed)}\n------END NATS USER JWT------\n\n'
                    f'************************* IMPORTANT *************************\n\n'
                    f'-----BEGIN USER NKEY SEED-----\n{useed.decode()}\n------END USER NKEY SEED------\n')
    other.write_text(good.read_text().replace(useed.decode(), keys('user')[0].decode()))
    for s in both(start_server, operator_conf({acc: account(acc, 'A')})).values():
        async def go(path):
            async def quiet(e): pass
            try: nc = await nats.connect(s.url, user_credentials=str(path), error_cb=quiet, allow_reconnect=False, max_reconnect_attempts=0)
            except Exception as e: return str(e)
            await nc.flush(); await nc.close(); return 'ok'
        assert asyncio.run(go(good)) == 'ok', s.kind
        assert 'Authorization Violation' in asyncio.run(go(other)), s.kind


# ---------------------------------------------------------------- configuration

def test_configurations_refused_alike(tmp_path):
    from test_auth_reference import run_briefly
    aseed, acc = keys('account')
    cases = [operator_conf({}, 'accounts: { X: {} }'), operator_conf({}, 'authorization: { users: [{user: a, password: b}] }'),
             operator_conf({}).replace(f'system_account: {SYS}', f'system_account: {acc}'),
             operator_conf({acc: 'eyJub3QiOiJhIGp3dCJ9.e30.AAAA'})]
    for i, conf in enumerate(cases):
        path = tmp_path / f'c{i}.conf'; path.write_text(conf)
        rc = {k: run_briefly(k, path, seconds=60)[0] for k in KINDS}    # a wait for the refusal, not a bound
        assert rc['jsnb'] not in (0, None) and rc['nats-server'] not in (0, None), (i, rc)


def test_resolvers_jsnb_does_not_have_are_refused_by_name(tmp_path):
    from test_auth_reference import run_briefly
    for resolver, word in (('URL(http://127.0.0.1:1/jwt/v1/accounts/)', 'URL resolver'), ('{ type: full, dir: "./jwt" }', 'directory based')):
        path = tmp_path / 'r.conf'
        path.write_text(operator_conf({}).replace('resolver: MEMORY', f'resolver: {resolver}'))
        rc, out = run_briefly('jsnb', path, seconds=20)
        assert rc not in (0, None) and word in out, out


def test_tiered_jetstream_limits(start_server):
    "An account JWT with `tiered_limits` for R1: account info shows zero top-level limits and the tier, enforced alike."
    aseed, acc = keys('account')
    useed, upub = keys('user')
    conf = operator_conf({acc: account(acc, 'A', limits={'tiered_limits': {'R1': {'disk_storage': 1 << 20, 'consumer': -1, 'streams': -1}}})})
    results = {}
    for k, s in both(start_server, conf, '-js').items():
        async def scenario():
            nc = await nats.connect(s.url, user_jwt_cb=lambda: user(upub, aseed, bearer_token=True).encode(),
                                    signature_cb=lambda nonce: b'', allow_reconnect=False)
            out = []
            for subject, body in [('$JS.API.INFO', {}), ('$JS.API.STREAM.CREATE.M', {'name': 'M', 'subjects': ['m'], 'storage': 'memory'}),
                                  ('$JS.API.STREAM.CREATE.F', {'name': 'F', 'subjects': ['f'], 'max_bytes': 1000}),
                                  ('$JS.API.STREAM.CREATE.G', {'name': 'G', 'subjects': ['g'], 'max_bytes': 2 << 20}), ('$JS.API.INFO', {})]:
                d = json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data)
                d.pop('api', None)
                out.append(d.get('error') if 'config' in d or 'error' in d else d)
            await nc.close()
            return out
        results[k] = asyncio.run(scenario())
    assert results['jsnb'] == results['nats-server']
    assert results['jsnb'][-1]['tiers']['R1']['limits']['max_storage'] == 1 << 20 and results['jsnb'][-1]['limits']['max_storage'] == 0


def test_scoped_signing_keys(start_server):
    "A user signed by a scoped key gets the scope's template; one that sets permissions of its own is refused."
    aseed, acc = keys('account')
    skseed, sk = keys('account')
    useed, upub = keys('user')
    scope = {'kind': 'user_scope', 'key': sk, 'role': 'app', 'template': {'pub': {'allow': ['app.>']}, 'sub': {'allow': ['app.>']},
                                                                        'subs': -1, 'data': -1, 'payload': -1}}
    servers = both(start_server, operator_conf({acc: account(acc, 'A', signing_keys=[scope])}))

    def scoped_user(**n):
        c = {'sub': upub, 'name': 'u', 'nats': {'type': 'user', 'issuer_account': acc, **n}}
        return encode(c, skseed)
    data = b'PUB app.x 0\r\n\r\nPUB other 0\r\n\r\nSUB app.y 1\r\nSUB other 2\r\nPING\r\n'
    got = {k: [session(s.port, scoped_user(), useed, data), session(s.port, scoped_user(pub={'allow': ['>']}), useed, data)]
           for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][0] == (b'-ERR \'Permissions Violation for Publish to "other"\'\r\n'
                              b'-ERR \'Permissions Violation for Subscription to "other"\'\r\nPONG\r\n', False)
    assert got['jsnb'][1] == (b"-ERR 'Authorization Violation'\r\n", True)


def test_v1_jwts_of_the_nats_js_tests(start_server):
    "Version 1 operator, account and user JWTs (as nats.js's tests carry them) are accepted alike."
    op = ('eyJ0eXAiOiJqd3QiLCJhbGciOiJlZDI1NTE5In0.eyJhdWQiOiJURVNUUyIsImV4cCI6MTg1OTEyMTI3NSwianRpIjoiWE5MWjZYWVBIVE1ESlFSTlFPSFVPSlFHV0NVN01JNVc1SlhDWk5YQllVS0VRVzY3STI1USIsImlhdCI6MTU0Mzc2MTI3NSwiaXNzIjoiT0NBVDMzTVRWVTJWVU9JTUdOR1VOWEo2NkFIMlJMU0RBRjNNVUJDWUFZNVFNSUw2NU5RTTZYUUciLCJuYW1lIjoiU3luYWRpYSBDb21tdW5pY2F0aW9ucyBJbmMuIiwibmJmIjoxNTQzNzYxMjc1LCJzdWIiOiJPQ0FUMzNNVFZVMlZVT0lNR05HVU5YSjY2QUgyUkxTREFGM01VQkNZQVk1UU1JTDY1TlFNNlhRRyIsInR5cGUiOiJvcGVyYXRvciIsIm5hdHMiOnsic2lnbmluZ19rZXlzIjpbIk9EU0tSN01ZRlFaNU1NQUo2RlBNRUVUQ1RFM1JJSE9GTFRZUEpSTUFWVk40T0xWMllZQU1IQ0FDIiwiT0RTS0FDU1JCV1A1MzdEWkRSVko2NTdKT0lHT1BPUTZLRzdUNEhONk9LNEY2SUVDR1hEQUhOUDIiLCJPRFNLSTM2TFpCNDRPWTVJVkNSNlA1MkZaSlpZTVlXWlZXTlVEVExFWjVUSzJQTjNPRU1SVEFCUiJdfX0'
          '.hyfz6E39BMUh0GLzovFfk3wT4OfualftjdJ_eYkLfPvu5tZubYQ_Pn9oFYGCV_6yKy3KMGhWGUCyCdHaPhalBw')
    acc = ('eyJ0eXAiOiJqd3QiLCJhbGciOiJlZDI1NTE5In0.eyJqdGkiOiJXVFdYVDNCT1JWSFNLQkc2T0pIVVdFQ01QRVdBNldZVEhNRzVEWkJBUUo1TUtGU1dHM1FRIiwiaWF0IjoxNTQ0MjE3NzU3LCJpc3MiOiJPQ0FUMzNNVFZVMlZVT0lNR05HVU5YSjY2QUgyUkxTREFGM01VQkNZQVk1UU1JTDY1TlFNNlhRRyIsInN1YiI6IkFDWlNXQko0U1lJTEs3UVZERUxPNjRWWDNFRldCNkNYQ1BNRUJVS0EzNk1KSlFSUFhHRUVRMldKIiwidHlwZSI6ImFjY291bnQiLCJuYXRzIjp7ImxpbWl0cyI6eyJzdWJzIjotMSwiY29ubiI6LTEsImltcG9ydHMiOi0xLCJleHBvcnRzIjotMSwiZGF0YSI6LTEsInBheWxvYWQiOi0xLCJ3aWxkY2FyZHMiOnRydWV9fX0'
           '.q-E7bBGTU0uoTmM9Vn7WaEHDzCUrqvPDb9mPMQbry_PNzVAjf0RG9vd15lGxW5lu7CuGVqpj4CYKhNDHluIJAg')
    ujwt = ('eyJ0eXAiOiJqd3QiLCJhbGciOiJlZDI1NTE5In0.eyJqdGkiOiJFU1VQS1NSNFhGR0pLN0FHUk5ZRjc0STVQNTZHMkFGWERYQ01CUUdHSklKUEVNUVhMSDJBIiwiaWF0IjoxNTQ0MjE3NzU3LCJpc3MiOiJBQ1pTV0JKNFNZSUxLN1FWREVMTzY0VlgzRUZXQjZDWENQTUVCVUtBMzZNSkpRUlBYR0VFUTJXSiIsInN1YiI6IlVBSDQyVUc2UFY1NTJQNVNXTFdUQlAzSDNTNUJIQVZDTzJJRUtFWFVBTkpYUjc1SjYzUlE1V002IiwidHlwZSI6InVzZXIiLCJuYXRzIjp7InB1YiI6e30sInN1YiI6e319fQ'
            '.kCR9Erm9zzux4G6M-V2bp7wKMKgnSNqMBACX05nwePRWQa37aO_yObbhcJWFGYjo1Ix-oepOkoyVLxOJeuD8Bw')
    useed = b'SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4'
    conf = f'operator: {op}\nresolver: MEMORY\nresolver_preload: {{\n  ACZSWBJ4SYILK7QVDELO64VX3EFWB6CXCPMEBUKA36MJJQRPXGEEQ2WJ: {acc}\n}}\n'
    got = {k: [session(s.port, ujwt, useed, b'SUB a 1\r\nPUB a 1\r\nx\r\nPING\r\n'), session(s.port, ujwt, keys('user')[0])]
           for k, s in both(start_server, conf).items()}
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][0] == (b'MSG a 1 1\r\nx\r\nPONG\r\n', False)


def test_limits_a_version_2_account_leaves_out_are_zero(start_server):
    "An account JWT that gives only conn and subs (as nats.js's tests write them) allows no payload, in the same read as CONNECT too."
    aseed, acc = keys('account')
    useed, upub = keys('user')
    conf = operator_conf({acc: encode({'sub': acc, 'name': 'A', 'nats': {'type': 'account', 'limits': {'conn': -1, 'subs': -1}}}, OSEED)})
    got = {k: [session(s.port, user(upub, aseed), useed, b'SUB a 1\r\nPUB a 0\r\n\r\nPING\r\n'),
               session(s.port, user(upub, aseed), useed, b'SUB a 1\r\nPUB a 5\r\nhello\r\nPING\r\n')] for k, s in both(start_server, conf).items()}
    assert got['jsnb'] == got['nats-server'] == [(b'MSG a 1 0\r\n\r\nPONG\r\n', False), (b"-ERR 'Maximum Payload Violation'\r\n", True)]


def test_operator_signing_keys_and_strict_use(start_server):
    "Accounts signed by an operator signing key; with strict signing key use, neither identity key may sign."
    oskseed, osk = keys('operator')
    aseed, acc = keys('account')
    bseed, bacc = keys('account')
    skseed, sk = keys('account')
    useed, upub = keys('user')
    for strict in (False, True):
        op = encode({'sub': OP, 'name': 'O', 'nats': {'type': 'operator', 'signing_keys': [osk], 'system_account': SYS,
                                                      **({'strict_signing_key_usage': True} if strict else {})}}, OSEED)
        conf = operator_conf({acc: account(acc, 'A', seed=oskseed, signing_keys=[sk]), bacc: account(bacc, 'B'),
                              SYS: account(SYS, 'SYS', seed=oskseed)}, operator=op)
        cases = [dict(jwt=user(upub, aseed), seed=useed), dict(jwt=user(upub, skseed, issuer_account=acc), seed=useed),
                 dict(jwt=user(upub, bseed), seed=useed)]
        got = {k: [session(s.port, **kw) for kw in cases] for k, s in both(start_server, conf).items()}
        assert got['jsnb'] == got['nats-server'], strict
        ok = [a == b'PONG\r\n' for a, _ in got['jsnb']]
        assert ok == ([True, True, True] if not strict else [False, True, False]), (strict, ok)


def test_user_info_needs_a_system_account(start_server):
    "Operators without a system account: nobody answers `$SYS.REQ.USER.INFO` (no responders), as in the reference."
    aseed, acc = keys('account')
    useed, upub = keys('user')
    op = encode({'sub': OP, 'name': 'O', 'nats': {'type': 'operator'}}, OSEED)
    conf = f'operator: {op}\nresolver: MEMORY\nresolver_preload: {{ {acc}: {account(acc, "A")} }}\n'
    got = {k: session(s.port, user(upub, aseed), useed, b'SUB _INBOX.x 1\r\nPUB $SYS.REQ.USER.INFO _INBOX.x 0\r\n\r\nPING\r\n',
                      wait=1, no_responders=True) for k, s in both(start_server, conf).items()}
    assert got['jsnb'] == got['nats-server'] and b'NATS/1.0 503' in got['jsnb'][0]
    words = ('Trusted Operators', '  System  :', '  Operator:', '  Issued  :', '  Expires :')
    lines = {k: [x for x in s.log_text().splitlines() if any(w in x for w in words)] for k, s in both(start_server, conf).items()}
    lines = {k: [re.sub(r'^\[\d+\] \S+ \S+ ', '', x) for x in v] for k, v in lines.items()}
    assert lines['jsnb'] == lines['nats-server'] and lines['jsnb'][0] == '[INF] Trusted Operators', lines
    assert lines['jsnb'][-1] == '[WRN] Trusted Operators should utilize a System Account'


def test_activation_tokens(start_server):
    "A token-required export: imported with an activation token the exporter signed for the importer; without one, or with one for another account, not."
    aseed, a = keys('account')
    bseed, b = keys('account')
    cseed, c = keys('account')
    useed, upub = keys('user')

    def act(sub, subject='private.>'):
        return encode({'sub': sub, 'name': 'act', 'nats': {'type': 'activation', 'subject': subject, 'kind': 'stream'}}, aseed)
    accounts = {a: account(a, 'A', exports=[{'type': 'stream', 'subject': 'private.>', 'token_req': True}]),
                b: account(b, 'B', imports=[{'type': 'stream', 'account': a, 'subject': 'private.>', 'token': act(b)}]),
                c: account(c, 'C', imports=[{'type': 'stream', 'account': a, 'subject': 'private.>', 'token': act(b)}])}
    got = {}
    for k, s in both(start_server, operator_conf(accounts)).items():
        subs = []
        for seed in (bseed, cseed):
            r = Raw(s.port, connect=None)
            nonce = json.loads(r.info)['nonce']
            r.send(b'CONNECT ' + json.dumps({'verbose': False, 'jwt': user(upub, seed), 'sig': b64(nkeys.from_seed(bytearray(useed)).sign(nonce.encode()))}).encode()
                   + b'\r\nSUB private.> 1\r\nPING\r\n'); r.until(b'PONG'); subs.append(r)
        session(s.port, user(upub, aseed), useed, b'PUB private.x 2\r\nhi\r\nPING\r\n')
        got[k] = [r.read(0.5)[0] for r in subs]
        for r in subs: r.close()
    assert got['jsnb'] == got['nats-server'] == [b'MSG private.x 1 2\r\nhi\r\n', b'']


def test_user_info_without_operators(start_server):
    "`$SYS.REQ.USER.INFO` for users of the configuration (as nats.js's request context test asks it), and for no user at all."
    conf = '''accounts {
  S: { users: [ {user: s, password: s, permission: {subscribe: ["q.>", "_INBOX.>"], publish: "$SYS.REQ.USER.INFO", allow_responses: true}} ],
       exports: [ {service: "q.>"} ] }
  A: { users: [ {user: a, password: a} ], imports: [ {service: {subject: "q.>", account: "S"}} ] }
}
'''
    got = {}
    for k, s in both(start_server, conf).items():
        out = []
        for user_, pw in (('s', 's'), ('a', 'a')):
            r = Raw(s.port, connect=b'CONNECT ' + json.dumps({'verbose': False, 'user': user_, 'pass': pw}).encode()
                    + b'\r\nSUB _INBOX.x 1\r\nPUB $SYS.REQ.USER.INFO _INBOX.x 0\r\n\r\n')
            d = json.loads(bytes(r.msgs(1)[0].data))['data']
            r.close()
            for side in (d.get('permissions') or {}).values():
                if isinstance(side, dict) and 'allow' in side: side['allow'] = sorted(side['allow'])
            out.append(d)
        got[k] = out
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][0] == {'user': 's', 'account': 'S', 'account_name': 'S', 'permissions': {
        'publish': {'allow': ['$SYS.REQ.USER.INFO']}, 'subscribe': {'allow': ['_INBOX.>', 'q.>']}, 'responses': {'max': 1, 'ttl': 120_000_000_000}}}
    assert got['jsnb'][1] == {'user': 'a', 'account': 'A', 'account_name': 'A'}
