"""Secure connections from the `jetstream` Spark source and sink, against jsnb and the reference nats-server:
TLS (`tls://`, a CA file, client certificates for servers that verify them, a server that requires TLS
behind a `nats://` URL), user nkeys (a seed file), and credentials files (user JWT and seed) in operator mode."""
import asyncio, base64, hashlib, json, ssl, time
import pytest
pytest.importorskip('pyspark')
import nats, nkeys
from conftest import KINDS
from jsnb.clients.blocking import NatsError, _Conn
from jsnb.clients.spark import local_session

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope='module')
def spark():
    s = local_session('jsnb-spark-security')
    yield s
    s.stop()


from test_auth_reference import certs      # the throwaway CA and certificates the TLS tests use (a module fixture)


def tls_conf(certs, extra=''):
    return f'tls {{\n  cert_file: "{certs}/server.pem"\n  key_file: "{certs}/server-key.pem"\n{extra}}}\n'


def nats_ctx(certs, cert=None):
    ctx = ssl.create_default_context(cafile=str(certs / 'ca.pem'))
    if cert: ctx.load_cert_chain(str(certs / f'{cert}.pem'), str(certs / f'{cert}-key.pem'))
    return ctx


def fill(url, n=20, **connect):
    "Stream S (subject s.*) with `n` messages, through nats-py."
    async def go():
        nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False, **connect)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.*'], allow_direct=True)
        for i in range(n): await js.publish(f's.{i % 2}', f'm{i}'.encode())
        await nc.close()
    asyncio.run(go())


def roundtrip(spark, url, **opts):
    "Read S with the options, write its rows back to S, and return the count read and the count after writing."
    r = spark.read.format('jetstream').option('url', url).option('stream', 'S').option('partitions', 2)
    for k, v in opts.items(): r = r.option(k, v)
    df = r.load().select('subject', 'data')
    n = df.count()
    w = df.write.format('jetstream').mode('append').option('url', url).option('msg_id', 'none')
    for k, v in opts.items(): w = w.option(k, v)
    w.save()
    r2 = spark.read.format('jetstream').option('url', url).option('stream', 'S')
    for k, v in opts.items(): r2 = r2.option(k, v)
    return n, r2.load().count()


@pytest.mark.parametrize('kind', KINDS)
def test_tls_read_write(spark, start_server, certs, kind):
    "A server that requires TLS: `tls://` with the CA, or `nats://` (the server's INFO asks for TLS); without the CA, a clear failure."
    s = start_server(kind, '-js', config=tls_conf(certs))
    fill(s.url, tls=nats_ctx(certs))
    tls_url = s.url.replace('nats://', 'tls://')
    assert roundtrip(spark, tls_url, tls_ca=str(certs / 'ca.pem')) == (20, 40)
    assert roundtrip(spark, s.url, tls_ca=str(certs / 'ca.pem')) == (40, 80)      # upgraded because the server requires it
    with pytest.raises(ConnectionError, match='CERTIFICATE_VERIFY_FAILED'): _Conn(tls_url, timeout=5)      # the system's CAs
    with pytest.raises(ConnectionError, match='CERTIFICATE_VERIFY_FAILED'): _Conn(tls_url, timeout=5, tls_ca=str(certs / 'other-ca.pem'))
    with pytest.raises(Exception, match='CERTIFICATE_VERIFY_FAILED'):
        spark.read.format('jetstream').option('url', tls_url).option('stream', 'S').load().count()
    with pytest.raises(ConnectionError, match="doesn't match|mismatch|not valid for"):     # the certificate names 127.0.0.1, not this
        _Conn(tls_url.replace('127.0.0.1', '127.0.0.2'), timeout=5, tls_ca=str(certs / 'ca.pem'))


@pytest.mark.parametrize('kind', KINDS)
def test_tls_client_certificates(spark, start_server, certs, kind):
    "A server that verifies clients: the client certificate gets in, none or one from another CA does not."
    s = start_server(kind, '-js', config=tls_conf(certs, f'  ca_file: "{certs}/ca.pem"\n  verify: true\n'))
    fill(s.url, tls=nats_ctx(certs, 'client'))
    ca = str(certs / 'ca.pem')
    mine = dict(tls_ca=ca, tls_cert=str(certs / 'client.pem'), tls_key=str(certs / 'client-key.pem'))
    assert roundtrip(spark, s.url, **mine) == (20, 40)
    for bad in (dict(tls_ca=ca), dict(tls_ca=ca, tls_cert=str(certs / 'stranger.pem'), tls_key=str(certs / 'stranger-key.pem'))):
        with pytest.raises((ConnectionError, NatsError)): _Conn(s.url, timeout=5, **bad).request('x')
    with pytest.raises(ValueError, match='needs both tls_cert and tls_key'): _Conn(s.url, tls_ca=ca, tls_cert=mine['tls_cert'])


def test_tls_asked_of_a_plain_server(start_server, certs):
    "`tls://` or a TLS option against a server without TLS fails before CONNECT: no password goes out in the clear."
    for kind in KINDS:
        s = start_server(kind)
        for url, opts in ((s.url.replace('nats://', 'tls://'), {}), (s.url, {'tls_ca': str(certs / 'ca.pem')})):
            with pytest.raises(NatsError, match='does not speak TLS'): _Conn(url, timeout=5, user='u', password='p', **opts)


SEED = nkeys.encode_seed(bytes(range(32)), nkeys.PREFIX_BYTE_USER)
OTHER = nkeys.encode_seed(bytes(range(1, 33)), nkeys.PREFIX_BYTE_USER)
def public(seed): return nkeys.from_seed(bytearray(seed)).public_key.decode()


@pytest.mark.parametrize('kind', KINDS)
def test_nkey_seed(spark, start_server, tmp_path, kind):
    "A server with an nkey user: the seed file gets in (reads and writes); another seed gets the server's refusal."
    s = start_server(kind, '-js', config=f'authorization {{ users = [ {{nkey: {public(SEED)}}} ] }}\n')
    (tmp_path / 'user.nk').write_bytes(SEED + b'\n'); (tmp_path / 'other.nk').write_bytes(OTHER)
    fill(s.url, nkeys_seed=str(tmp_path / 'user.nk'))
    assert roundtrip(spark, s.url, nkeys_seed=str(tmp_path / 'user.nk')) == (20, 40)
    with pytest.raises(NatsError, match='Authorization Violation'): _Conn(s.url, timeout=5, nkeys_seed=str(tmp_path / 'other.nk'))
    with pytest.raises(NatsError, match='Authorization Violation'): _Conn(s.url, timeout=5)
    with pytest.raises(Exception, match='Authorization Violation'):
        spark.read.format('jetstream').option('url', s.url).option('stream', 'S').option('nkeys_seed', str(tmp_path / 'other.nk')).load().count()
    with pytest.raises(Exception, match="unknown option 'nkey_seed'.*did you mean 'nkeys_seed'"):
        spark.read.format('jetstream').option('url', s.url).option('stream', 'S').option('nkey_seed', 'x').load().count()


def test_nkey_and_tls_together(spark, start_server, certs, tmp_path):
    "Both at once, on both servers: TLS carries the signed nonce."
    (tmp_path / 'user.nk').write_bytes(SEED)
    conf = tls_conf(certs) + f'authorization {{ users = [ {{nkey: {public(SEED)}}} ] }}\n'
    for kind in KINDS:
        s = start_server(kind, '-js', config=conf)
        fill(s.url, tls=nats_ctx(certs), nkeys_seed=str(tmp_path / 'user.nk'))
        assert roundtrip(spark, s.url.replace('nats://', 'tls://'), tls_ca=str(certs / 'ca.pem'), nkeys_seed=str(tmp_path / 'user.nk')) == (20, 40)


# ---------------------------------------------------------------- credentials files (operator mode)

def _b64(b: bytes) -> str: return base64.urlsafe_b64encode(b).rstrip(b'=').decode()

def jwt(issuer: nkeys.KeyPair, sub: str, name: str, nats_claims: dict) -> str:
    "A NATS JWT (ed25519-nkey) issued by `issuer`."
    claims = {'iat': int(time.time()), 'iss': issuer.public_key.decode(), 'name': name, 'sub': sub, 'nats': {**nats_claims, 'version': 2}}
    claims['jti'] = base64.b32encode(hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()).decode().rstrip('=')
    head = _b64(json.dumps({'typ': 'JWT', 'alg': 'ed25519-nkey'}).encode()) + '.' + _b64(json.dumps(claims).encode())
    return head + '.' + _b64(issuer.sign(head.encode()))


def keypair(prefix) -> nkeys.KeyPair:
    import os
    return nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), prefix)))


@pytest.mark.parametrize('kind', KINDS)
def test_creds_file(spark, start_server, tmp_path, kind):
    "An operator, an account with JetStream and a user: the user's credentials file reads and writes; another user's JWT with the wrong seed is refused."
    op, acc, sys_acc = keypair(nkeys.PREFIX_BYTE_OPERATOR), keypair(nkeys.PREFIX_BYTE_ACCOUNT), keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    user = keypair(nkeys.PREFIX_BYTE_USER)
    op_jwt = jwt(op, op.public_key.decode(), 'op', {'type': 'operator', 'system_account': sys_acc.public_key.decode()})
    limits = {'subs': -1, 'data': -1, 'payload': -1, 'imports': -1, 'exports': -1, 'wildcards': True, 'conn': -1, 'leaf': -1,
              'mem_storage': -1, 'disk_storage': -1, 'streams': -1, 'consumer': -1}
    acc_jwt = jwt(op, acc.public_key.decode(), 'app', {'type': 'account', 'limits': limits})
    sys_jwt = jwt(op, sys_acc.public_key.decode(), 'SYS', {'type': 'account', 'limits': {k: v for k, v in limits.items() if 'storage' not in k and k not in ('streams', 'consumer')}})
    user_jwt = jwt(acc, user.public_key.decode(), 'u', {'type': 'user', 'subs': -1, 'data': -1, 'payload': -1})
    def creds(path, token, seed):
        path.write_text(f'-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n'
                        f'************************* IMPORTANT *************************\nNKEY Seed printed below.\n\n'
                        f'-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n------END USER NKEY SEED------\n')
        return str(path)
    good = creds(tmp_path / 'u.creds', user_jwt, user.seed)
    bad = creds(tmp_path / 'bad.creds', user_jwt, keypair(nkeys.PREFIX_BYTE_USER).seed)
    conf = (f'operator: {op_jwt}\nsystem_account: {sys_acc.public_key.decode()}\nresolver: MEMORY\n'
            f'resolver_preload: {{\n  {acc.public_key.decode()}: {acc_jwt}\n  {sys_acc.public_key.decode()}: {sys_jwt}\n}}\n')
    s = start_server(kind, '-js', config=conf)
    fill(s.url, user_credentials=good)
    assert roundtrip(spark, s.url, creds=good) == (20, 40)
    with pytest.raises(NatsError, match='Authorization Violation'): _Conn(s.url, timeout=5, creds=bad)
    with pytest.raises(NatsError, match='Authorization Violation'): _Conn(s.url, timeout=5)


@pytest.mark.parametrize('kind', KINDS)
def test_tls_refusals_say_what(spark, start_server, certs, kind):
    """A server that verifies clients: without a client certificate the client says the server requires one (before:
    "the NATS server closed the connection" from jsnb, a bare TLS alert from nats-server); a certificate from another
    CA is named as the one not accepted; a server certificate the client does not trust names the CA file."""
    s = start_server(kind, '-js', config=tls_conf(certs, f'  ca_file: "{certs}/ca.pem"\n  verify: true\n'))
    ca = str(certs / 'ca.pem')
    with pytest.raises(ConnectionError, match='the server requires a TLS client certificate .*set tls_cert and tls_key'):
        _Conn(s.url, timeout=5, tls_ca=ca)
    stranger = str(certs / 'stranger.pem')
    with pytest.raises(ConnectionError, match=f"the server did not accept the client certificate \\(tls_cert='{stranger}'\\)"):
        _Conn(s.url, timeout=5, tls_ca=ca, tls_cert=stranger, tls_key=str(certs / 'stranger-key.pem')).request('x')
    with pytest.raises(Exception, match='the server requires a TLS client certificate'):
        spark.read.format('jetstream').option('url', s.url).option('stream', 'S').option('tls_ca', ca).load().count()
    other = str(certs / 'other-ca.pem')
    with pytest.raises(ConnectionError, match=f"the server's certificate was not accepted \\(tls_ca='{other}'.*CERTIFICATE_VERIFY_FAILED"):
        _Conn(s.url, timeout=5, tls_ca=other, tls_cert=str(certs / 'client.pem'), tls_key=str(certs / 'client-key.pem'))


@pytest.mark.parametrize('kind', KINDS)
def test_tls_hostname_setting(spark, start_server, certs, kind):
    "`nats.tls_hostname`: a URL that names the server otherwise (here 127.0.0.2) still checks its certificate, against that name."
    s = start_server(kind, '-js', config=tls_conf(certs))
    fill(s.url, tls=nats_ctx(certs))
    url = s.url.replace('nats://127.0.0.1', 'tls://127.0.0.2')
    with pytest.raises(Exception, match="doesn't match|mismatch|not valid for"):
        spark.read.format('jetstream').option('url', url).option('stream', 'S').option('tls_ca', str(certs / 'ca.pem')).load().count()
    df = (spark.read.format('jetstream').option('url', url).option('stream', 'S').option('tls_ca', str(certs / 'ca.pem'))
          .option('nats.tls_hostname', 'localhost').load())
    assert df.count() == 20
