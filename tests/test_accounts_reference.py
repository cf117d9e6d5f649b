"""Accounts against the reference: the same `accounts` configuration run by jsnb and by nats-server 2.15.1 must
accept and refuse the same clients, deliver the same messages to the same accounts (isolation, stream and service
imports with their subject mappings and reply subjects), answer the same `/connz`, and refuse the same mistakes."""
import asyncio, json, re, urllib.request

import pytest
import nats

from conftest import KINDS, REF_BIN
from test_auth_reference import attempt, check_config, log_lines, run_briefly

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

ACCOUNTS = '''
http: "127.0.0.1:-1"
accounts {
  A: { users: [ {user: a, password: a} ], exports: [ {stream: "foo.>"}, {service: "req.>"} ] }
  B: { users: [ {user: b, password: b} ],
       imports: [ {stream: {account: A, subject: "foo.>"}, prefix: pre}, {service: {account: A, subject: "req.x"}, to: "bq"} ] }
  C: { users: [ {user: c, password: c} ],
       imports: [ {stream: {account: A, subject: "foo.bar"}, to: "x.y"}, {service: {account: A, subject: "req.y"}} ] }
  D: { users: [ {user: d, password: d} ], exports: [ {stream: "only.c", accounts: [C]} ] }
}
authorization { users: [ {user: g, password: g} ] }
'''


def both(start_server, config):
    return {k: start_server(k, config=config) for k in KINDS}


def monitor_port(server) -> int:
    return int(re.search(r'Starting http monitor on [\d.]+:(\d+)', server.log_text()).group(1))


def reply_shape(r: str) -> str:
    "A reply subject with its random parts replaced: `_R_.<6>.<6>` and nats-py's inboxes."
    r = re.sub(r'^_R_\.[A-Za-z0-9]{6}\.[A-Za-z0-9]{6}$', '_R_.X.Y', r)
    return re.sub(r'^_INBOX\..*', '_INBOX', r)


async def deliveries(url) -> list:
    "Who sees what: each user subscribes to `>`, A answers `req.>`; then publishes and requests across accounts."
    conns = {u: await nats.connect(url.replace('nats://', f'nats://{u}:{u}@'), allow_reconnect=False) for u in 'abcdg'}
    got = []
    for u, nc in conns.items():
        async def cb(m, u=u): got.append((u, reply_shape(m.subject), reply_shape(m.reply), m.data.decode()))
        await nc.subscribe('>', cb=cb)
    async def svc(m):
        got.append(('svc', m.subject, reply_shape(m.reply), m.data.decode())); await m.respond(b'resp:' + m.data)
    await conns['a'].subscribe('req.>', cb=svc)
    for nc in conns.values(): await nc.flush()
    await conns['a'].publish('foo.bar', b'1', reply='r.1')
    await conns['a'].publish('foo.baz', b'2')
    await conns['b'].publish('foo.bar', b'3')
    await conns['g'].publish('foo.bar', b'4')
    await conns['d'].publish('only.c', b'5')
    for nc in conns.values(): await nc.flush()
    await asyncio.sleep(0.3)
    answers = []
    for u, subject in (('b', 'bq'), ('c', 'req.y'), ('c', 'req.z'), ('b', 'req.x'), ('g', 'req.x')):
        try: r = await conns[u].request(subject, b'hi' + u.encode(), timeout=1); answers.append((u, subject, r.data.decode()))
        except Exception as e: answers.append((u, subject, type(e).__name__))
    await asyncio.sleep(0.3)
    for nc in conns.values(): await nc.close()
    return sorted(got), answers


def test_isolation_and_imports(start_server):
    servers = both(start_server, ACCOUNTS)
    out = {k: asyncio.run(deliveries(s.url)) for k, s in servers.items()}
    assert out['jsnb'] == out['nats-server']
    got, answers = out['jsnb']
    assert ('b', 'pre.foo.bar', 'r.1', '1') in got and ('c', 'x.y', 'r.1', '1') in got
    assert ('svc', 'req.x', '_R_.X.Y', 'hib') in got
    assert answers[:2] == [('b', 'bq', 'resp:hib'), ('c', 'req.y', 'resp:hic')]


async def no_responders(url) -> list:
    "Requests through a service import with nobody answering in the exporting account."
    nc = await nats.connect(url.replace('nats://', 'nats://c:c@'), allow_reconnect=False)
    out = []
    for subject in ('req.y', 'nothing'):
        try: await nc.request(subject, b'x', timeout=1); out.append('answered')
        except Exception as e: out.append(type(e).__name__)
    await nc.close()
    return out


def test_service_import_no_responders(start_server):
    servers = both(start_server, ACCOUNTS)
    out = {k: asyncio.run(no_responders(s.url)) for k, s in servers.items()}
    assert out['jsnb'] == out['nats-server'] == ['NoRespondersError', 'NoRespondersError']


def test_logins_and_connect_info(start_server):
    "Users of every account log in, wrong passwords are refused, and the INFO after CONNECT names the account."
    servers = both(start_server, ACCOUNTS + 'no_auth_user: c\n')
    out = {}
    for k, s in servers.items():
        res = []
        for o in ({'user': 'a', 'pass': 'a'}, {'user': 'a', 'pass': 'b'}, {'user': 'g', 'pass': 'g'}, {}, {'user': 'zz', 'pass': 'a'}):
            text, closed = attempt(s.port, {**o, 'protocol': 1}, wait=0.4)
            m = re.search(rb'"remote_account":"([^"]*)"', text)
            res.append((b'Authorization Violation' in text, closed, m and m.group(1).decode()))
        out[k] = res
    assert out['jsnb'] == out['nats-server']
    assert [r[2] for r in out['jsnb']] == ['A', None, '$G', 'C', None]


async def connz(url, port) -> list:
    conns = [await nats.connect(url.replace('nats://', f'nats://{u}:{u}@'), name=u) for u in 'ag']
    for nc in conns: await nc.flush()
    out = []
    for q in ('', 'auth=1', 'auth=true&acc=A', 'acc=A', 'acc=ZZ'):
        d = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/connz?{q}', timeout=5))
        out.append((q, d['num_connections'], d['total'], d['connections'] and
                    [{k: v for k, v in c.items() if k in ('name', 'account', 'authorized_user', 'name_tag')} for c in d['connections']]))
    for nc in conns: await nc.close()
    return out


def test_connz_accounts(start_server):
    servers = both(start_server, ACCOUNTS)
    out = {k: asyncio.run(connz(s.url, monitor_port(s))) for k, s in servers.items()}
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][1][3][0] == {'name': 'a', 'authorized_user': 'a', 'account': 'A', 'name_tag': 'A'}


def test_authentication_error_logged_with_account(start_server):
    "A publish violation of a user in an account is logged as `\"A/user:x\"`, like the reference."
    conf = ACCOUNTS.replace('{user: a, password: a}', '{user: a, password: a, permissions: {publish: "ok"}}')
    servers = both(start_server, conf)
    for s in servers.values(): attempt(s.port, {'user': 'a', 'pass': 'a'}, then=b'PUB no 0\r\n\r\nPING\r\n')
    lines = {k: log_lines(s, 'Publish Violation') for k, s in servers.items()}
    assert lines['jsnb'] == lines['nats-server'] and '"A/user:a"' in lines['jsnb'][0]


BAD = {
    'duplicate user': 'accounts { A: { users: [ {user: a, password: a} ] }, B: { users: [ {user: a, password: b} ] } }',
    'duplicate with authorization': 'accounts { A: { users: [ {user: a, password: a} ] } }\nauthorization { users: [ {user: a, password: b} ] }',
    'undefined account': 'accounts { B: { imports: [ {stream: {account: Z, subject: "foo"}} ] } }',
    'not exported': 'accounts { A: {}, B: { imports: [ {stream: {account: A, subject: "foo"}} ] } }',
    'wrong kind': 'accounts { A: {exports: [{service: "foo"}]}, B: { imports: [ {stream: {account: A, subject: "foo"}} ] } }',
    'not to this account': 'accounts { A: {exports: [{stream: "foo", accounts: [C]}]}, B: { imports: [ {stream: {account: A, subject: "foo"}} ] }, C: {} }',
    'narrower export': 'accounts { A: {exports: [{stream: "foo.bar"}]}, B: { imports: [ {stream: {account: A, subject: "foo.>"}} ] } }',
    'unknown import field': 'accounts { A: {exports: [{stream: "foo.>"}]}, B: { imports: [ {stream: {account: A, subject: "foo.x"}, foo: 1} ] } }',
    'unknown account field': 'accounts { A: {bogus: 1} }',
    'reserved': 'accounts { "$G": {} }',
    'token and account users': 'accounts { A: { users: [ {user: a, password: a} ] } }\nauthorization { token: s3cr3t }',
    'single user and account users': 'accounts { A: { users: [ {user: a, password: a} ] } }\nauthorization { user: x, password: y }',
}

MESSAGES = {
    'duplicate user': 'Duplicate user "a" detected', 'duplicate with authorization': 'Duplicate user "a" detected',
    'undefined account': '"Z" account not defined for stream import', 'not exported': 'Error adding stream import "foo": stream import not authorized',
    'wrong kind': 'Error adding stream import "foo": stream import not authorized',
    'not to this account': 'Error adding stream import "foo": stream import not authorized',
    'narrower export': 'Error adding stream import "foo.>": stream import not authorized',
    'unknown import field': 'unknown field "foo"',
    'unknown account field': 'unknown field "bogus"', 'reserved': '"$G" is a Reserved Account',
    # the reference checks these from whichever block it reads first (Go's map order), so either wording comes out
    'token and account users': ('Can not have a token and a users array', 'Can not have a token and accounts'),
    'single user and account users': ('Can not have a single user/pass and a users array', 'Can not have a single user/pass and accounts'),
}


@pytest.mark.parametrize('case', list(BAD))
def test_configuration_mistakes(tmp_path, case):
    path = tmp_path / 'bad.conf'; path.write_text(BAD[case] + '\n')
    out = {k: check_config(k, path) for k in KINDS}
    assert out['jsnb'][0] != 0 and out['nats-server'][0] != 0
    said = MESSAGES[case] if isinstance(MESSAGES[case], tuple) else (MESSAGES[case],)
    assert any(m in out['nats-server'][1] for m in said) and any(m in out['jsnb'][1] for m in said)


GOOD = {
    'names only': 'accounts [ A, B ]',
    'no_auth_user in an account': 'accounts { A: {users: [{user: a, password: a}]} }\nno_auth_user: a',
    'system account without users': 'accounts { A: {} }\nsystem_account: A',
    'response threshold': 'accounts { A: {exports: [{service: "s", response_threshold: "5s", response_type: singleton}]} }',
}


@pytest.mark.parametrize('case', list(GOOD))
def test_accepted_configurations(tmp_path, case):
    path = tmp_path / 'ok.conf'; path.write_text(GOOD[case] + '\n')
    out = {k: check_config(k, path)[0] for k in KINDS}
    assert out == {'jsnb': 0, 'nats-server': 0}


REFUSED = {
    # the reference refuses this one only when it reads `to` after `prefix` (the order of a Go map: one run in two)
    'prefix and to': ('accounts { A: {exports: [{stream: "foo.>"}]}, B: { imports: [ {stream: {account: A, subject: "foo.x"}, prefix: p, to: q} ] } }',
                      "Stream import can not have a 'prefix' and a 'to' property"),
    'latency': ('accounts { A: {exports: [{service: "s", latency: "lat.x"}]} }', 'does not support yet'),
    'token position': ('accounts { A: {exports: [{service: "s.*", account_token_position: 2}]} }', 'does not support yet'),
    'mappings': ('accounts { A: {mappings: {a: b}} }', 'does not support yet'),
    'account nkey': ('accounts { A: {nkey: ABC} }', 'does not support yet'),
    'share': ('accounts { A: {exports: [{service: "s"}]}, B: {imports: [{service: {account: A, subject: s}, share: true}]} }', 'does not support yet'),
}


@pytest.mark.parametrize('case', list(REFUSED))
def test_refused_by_jsnb(tmp_path, case):
    "What jsnb does not implement is refused with a clear message (the reference accepts it)."
    conf, msg = REFUSED[case]
    path = tmp_path / 'x.conf'; path.write_text(conf + '\n')
    rc, out = check_config('jsnb', path)
    assert rc != 0 and msg in out


def test_missing_system_account_refused_at_start(tmp_path):
    path = tmp_path / 's.conf'; path.write_text('accounts { A: {} }\nsystem_account: Z\n')
    out = {k: run_briefly(k, path, seconds=5) for k in KINDS}
    assert all(rc not in (None, 0) and 'error resolving system account: account missing' in text for rc, text in out.values())


# ---------------------------------------------------------------- JetStream in accounts

JS_ACCOUNTS = '''
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: enabled }
  B: { users: [ {user: b, password: b} ] }
  C: { users: [ {user: c, password: c} ],
       jetstream: { max_mem: 1M, max_file: 10M, max_streams: 2, max_consumers: 2, max_ack_pending: 5,
                    memory_max_stream_bytes: 2048, store_max_stream_bytes: 4096, max_bytes_required: true } }
  D: { users: [ {user: d, password: d} ], jetstream: { max_mem: 400 } }
}
authorization { users: [ {user: g, password: g} ] }
'''

_VOLATILE = {'created', 'ts', 'first_ts', 'last_ts', 'leader', 'server_id', 'now', 'start'}


def norm(x):
    "A JSON answer without the parts that differ by run (times, ids, generated consumer names)."
    if isinstance(x, dict):
        return {k: norm(v) for k, v in x.items() if k not in _VOLATILE and not (k == 'name' and isinstance(v, str) and len(v) == 8 and 'stream_name' in x)}
    if isinstance(x, list): return [norm(v) for v in x]
    return x


async def requests(url, user, reqs, timeout=3.0) -> list:
    "Each `(subject, body)` as a request from `user`: the JSON answer (normalised), or what went wrong."
    nc = await nats.connect(url.replace('nats://', f'nats://{user}:{user}@'), allow_reconnect=False)
    out = []
    for subject, body in reqs:
        try: r = await nc.request(subject, body if isinstance(body, bytes) else json.dumps(body).encode(), timeout=timeout)
        except Exception as e: out.append(type(e).__name__); continue
        try: out.append(norm(json.loads(r.data)))
        except ValueError: out.append(r.data.decode())
    await nc.close()
    return out


def run_both(start_server, config, *flags, script):
    servers = {k: start_server(k, *flags, config=config) for k in KINDS}
    return servers, {k: asyncio.run(script(s.url)) for k, s in servers.items()}


def test_accounts_without_jetstream_answer_10039(start_server):
    reqs = [('$JS.API.INFO', b''), ('$JS.API.STREAM.CREATE.X', {'name': 'X'}), ('$JS.API.STREAM.NAMES', b''),
            ('$JS.API.STREAM.LIST', b''), ('$JS.API.STREAM.INFO.X', b''), ('$JS.API.CONSUMER.INFO.X.Y', b''),
            ('$JS.API.CONSUMER.INFO.X.Y', b'{"x":1}'), ('$JS.API.STREAM.MSG.GET.X', {'seq': 1}), ('$JS.API.FOO', b''),
            ('$JS.API.DIRECT.GET.X', {'seq': 1}), ('$JS.API.CONSUMER.CREATE.X', {'stream_name': 'X', 'config': {}})]
    async def script(url): return [await requests(url, u, reqs, timeout=0.5) for u in 'bg']
    _, out = run_both(start_server, JS_ACCOUNTS, '-js', script=script)
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][0][0]['error']['err_code'] == 10039 and out['jsnb'][1][0]['error']['err_code'] == 10039


def test_account_info_and_isolated_streams(start_server):
    "Each account with JetStream has its own streams (the same name in two accounts), its own limits in INFO."
    stream = {'name': 'S', 'subjects': ['s.>'], 'storage': 'file', 'max_bytes': 1000}
    async def script(url):
        out = []
        for u in 'ac':
            out.append(await requests(url, u, [('$JS.API.STREAM.CREATE.S', stream), ('s.1', b'x' * (3 if u == 'a' else 5)),
                                              ('$JS.API.STREAM.INFO.S', b''), ('$JS.API.INFO', b''), ('$JS.API.STREAM.NAMES', b'')]))
        return out
    servers, out = run_both(start_server, JS_ACCOUNTS, '-js', script=script)
    assert out['jsnb'] == out['nats-server']
    a, c = out['jsnb']
    assert a[2]['state']['bytes'] != c[2]['state']['bytes'] and a[3]['limits']['max_streams'] == -1 and c[3]['limits']['max_streams'] == 2
    for s in servers.values():
        root = s.dir / 'store' / 'jetstream'
        assert sorted(p.name for p in root.iterdir() if p.is_dir() and (p / 'streams').exists()) == ['A', 'C']
        assert (root / 'A' / 'streams' / 'S').is_dir() and (root / 'C' / 'streams' / 'S').is_dir()


def test_account_limits(start_server):
    "Account C's limits, each refused with the reference's error."
    async def script(url):
        return await requests(url, 'c', [
            ('$JS.API.STREAM.CREATE.S1', {'name': 'S1', 'subjects': ['a'], 'storage': 'file'}),                        # max_bytes required
            ('$JS.API.STREAM.CREATE.S1', {'name': 'S1', 'subjects': ['a'], 'storage': 'file', 'max_bytes': 5000}),     # over 4096
            ('$JS.API.STREAM.CREATE.S1', {'name': 'S1', 'subjects': ['a'], 'storage': 'memory', 'max_bytes': 3000}),   # over 2048
            ('$JS.API.STREAM.CREATE.S1', {'name': 'S1', 'subjects': ['a'], 'storage': 'file', 'max_bytes': 4096, 'max_consumers': 3}),
            ('$JS.API.STREAM.CREATE.S1', {'name': 'S1', 'subjects': ['a'], 'storage': 'file', 'max_bytes': 4096}),
            ('$JS.API.STREAM.CREATE.S2', {'name': 'S2', 'subjects': ['b'], 'storage': 'memory', 'max_bytes': 2048}),
            ('$JS.API.STREAM.CREATE.S3', {'name': 'S3', 'subjects': ['c'], 'storage': 'file', 'max_bytes': 100}),      # max_streams 2
            ('$JS.API.STREAM.UPDATE.S1', {'name': 'S1', 'subjects': ['a'], 'storage': 'file', 'max_bytes': 8000}),
            ('$JS.API.CONSUMER.CREATE.S1.d1', {'stream_name': 'S1', 'config': {'durable_name': 'd1', 'ack_policy': 'explicit'}}),
            ('$JS.API.CONSUMER.CREATE.S1.d2', {'stream_name': 'S1', 'config': {'durable_name': 'd2', 'ack_policy': 'explicit', 'max_ack_pending': 9}}),
            ('$JS.API.CONSUMER.CREATE.S1.d2', {'stream_name': 'S1', 'config': {'durable_name': 'd2', 'ack_policy': 'explicit', 'max_ack_pending': 4}}),
            ('$JS.API.CONSUMER.CREATE.S1.d3', {'stream_name': 'S1', 'config': {'durable_name': 'd3', 'ack_policy': 'explicit'}}),   # max_consumers 2
            ('$JS.API.INFO', b'')])
    _, out = run_both(start_server, JS_ACCOUNTS, '-js', script=script)
    assert out['jsnb'] == out['nats-server']
    codes = [r.get('error', {}).get('err_code') for r in out['jsnb']]
    assert codes[:4] == [10113, 10122, 10122, 10026] and codes[6] == 10027 and codes[9] == 10121 and codes[11] == 10026
    assert out['jsnb'][8]['config']['max_ack_pending'] == 5


def test_account_storage_limit_on_publish(start_server):
    "Account D may keep 400 bytes in memory: the publish that would pass that is refused with 10002."
    async def script(url):
        return await requests(url, 'd', [('$JS.API.STREAM.CREATE.M', {'name': 'M', 'subjects': ['m'], 'storage': 'memory'})]
                              + [('m', b'x' * 100)] * 5 + [('$JS.API.INFO', b'')])
    _, out = run_both(start_server, JS_ACCOUNTS, '-js', script=script)
    assert out['jsnb'] == out['nats-server']
    assert [r.get('error', {}).get('err_code') for r in out['jsnb'][1:6]].count(10002) >= 1


DOMAIN = JS_ACCOUNTS.replace('accounts {', 'jetstream { domain: hub }\naccounts {', 1)


def test_domain(start_server):
    "`$JS.hub.API` is answered as `$JS.API`, in accounts with and without JetStream; acks and stream info show the domain."
    async def script(url):
        a = await requests(url, 'a', [('$JS.hub.API.INFO', b''), ('$JS.hub.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s']}),
                                      ('s', b'1'), ('$JS.hub.API.STREAM.INFO.S', b''), ('$JS.API.STREAM.INFO.S', b''),
                                      ('$JS.other.API.INFO', b''), ('$JS.hub.API.DIRECT.GET.S', {'seq': 1})])
        b = await requests(url, 'b', [('$JS.hub.API.INFO', b''), ('$JS.API.INFO', b'')])
        nc = await nats.connect(url.replace('nats://', 'nats://a:a@')); info = nc._server_info.get('domain'); await nc.close()
        return a, b, info
    _, out = run_both(start_server, DOMAIN, '-js', script=script)
    assert out['jsnb'] == out['nats-server']
    a, b, info = out['jsnb']
    assert info == 'hub' and a[0]['domain'] == 'hub' and a[2] == {'stream': 'S', 'domain': 'hub', 'seq': 1} and a[3]['domain'] == 'hub'
    assert b[0]['error']['err_code'] == 10039


def test_domain_without_accounts(start_server):
    async def script(url):
        return await requests(url, 'x', [('$JS.hub.API.INFO', b''), ('$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s']}), ('s', b'1')])
    _, out = run_both(start_server, 'jetstream { domain: hub }\n', '-js', script=script)
    assert out['jsnb'] == out['nats-server'] and out['jsnb'][0]['domain'] == 'hub' and out['jsnb'][2]['domain'] == 'hub'


NATS_PY_LIMITS = '''
jetstream: { domain: "test-domain" }
no_auth_user: "foo"
accounts: {
  A {
    users: [{ user: "foo" }]
    jetstream: { max_mem: 64MB, max_file: 32MB, max_streams: 10, max_consumers: 20, max_ack_pending: 100,
                 memory_max_stream_bytes: 2048, store_max_stream_bytes: 4096, max_stream_bytes: true }
  }
}
'''


def test_nats_py_account_limits_scenario(start_server):
    "The scenario of nats.py's `AccountLimitsTest.test_account_limits` (its configuration file, its steps), on both servers."
    async def script(url):
        nc = await nats.connect(url)
        js, out = nc.jetstream(), []
        for kw in ({}, {'max_bytes': 65536}):
            try: await js.add_stream(name='limits', subjects=['limits'], **kw)
            except nats.js.errors.BadRequestError as e: out.append((e.err_code, e.description))
        out.append((await js.add_stream(name='limits', subjects=['limits'], max_bytes=128)).config.max_bytes)
        await js.publish('limits', b'A' * 55)
        out.append((await js.stream_info('limits')).state.messages)
        for _ in range(5): await js.publish('limits', b'A')
        info = await js.account_info()
        out.append((info.memory, info.storage, info.streams, info.consumers, info.limits, info.api.total, info.api.errors, info.domain, info.tiers))
        out.append((await nc.jetstream(domain='test-domain').stream_info('limits')).state.messages)
        await nc.close()
        return out
    _, out = run_both(start_server, NATS_PY_LIMITS, '-js', script=script)
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][:2] == [(10113, 'account requires a stream config to have max bytes set'),
                               (10122, 'stream max bytes exceeds account limit max stream bytes')]
    assert out['jsnb'][-1] == 3 and out['jsnb'][-2][7] == 'test-domain'


CROSS = '''
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: enabled,
       exports: [ {stream: "foo.>"}, {service: "$JS.API.INFO"}, {service: "$JS.API.STREAM.INFO.*"} ] }
  B: { users: [ {user: b, password: b} ], jetstream: enabled,
       imports: [ {stream: {account: A, subject: "foo.>"}, prefix: from_a},
                  {service: {account: A, subject: "$JS.API.INFO"}, to: "a.info"},
                  {service: {account: A, subject: "$JS.API.STREAM.INFO.*"}} ] }
}
'''


def test_imports_with_jetstream(start_server):
    """A stream in B stores what A publishes through a stream import; B asks A's JetStream API through a service import
    (its own JetStream answers the subjects it has too)."""
    async def script(url):
        b = await requests(url, 'b', [('$JS.API.STREAM.CREATE.IN', {'name': 'IN', 'subjects': ['from_a.foo.>']})])
        a = await requests(url, 'a', [('$JS.API.STREAM.CREATE.OWN', {'name': 'OWN', 'subjects': ['own']}), ('own', b'1')])
        nc = await nats.connect(url.replace('nats://', 'nats://a:a@')); await nc.publish('foo.x', b'2'); await nc.flush(); await nc.close()
        for _ in range(100):                                   # until B's stream has stored what came through the import
            info = (await requests(url, 'b', [('$JS.API.STREAM.INFO.IN', b'')]))[0]
            if info.get('state', {}).get('messages'): break
            await asyncio.sleep(0.05)
        b += await requests(url, 'b', [('$JS.API.STREAM.INFO.IN', b''), ('a.info', b''), ('$JS.API.STREAM.INFO.OWN', b''),
                                       ('$JS.API.INFO', b'')])
        return a + b
    _, out = run_both(start_server, CROSS, '-js', script=script)
    for r in (*out['jsnb'], *out['nats-server']):
        if isinstance(r, dict): r.pop('api', None)             # API call counts include the waiting loop's polls
    assert out['jsnb'] == out['nats-server']
    r = out['jsnb']
    assert r[3]['state']['messages'] == 1 and r[4]['streams'] == 1 and r[6]['streams'] == 1


async def raw_no_responders(port) -> bytes:
    "The 503 a requester gets through a service import mapped to another subject, with nobody answering."
    from rawclient import Raw
    r = Raw(port, connect=b'CONNECT {"verbose":false,"user":"b","pass":"b","headers":true,"no_responders":true}\r\n'
                         b'SUB r 1\r\nPUB bq r 0\r\n\r\nPING\r\n')
    try: return r.read(0.5)[0]
    finally: r.close()


def test_service_import_no_responders_status(start_server):
    servers = both(start_server, ACCOUNTS)
    out = {k: asyncio.run(raw_no_responders(s.port)) for k, s in servers.items()}
    assert out['jsnb'] == out['nats-server'] and b'503' in out['jsnb']


def test_accountz(start_server):
    servers = both(start_server, ACCOUNTS)
    out = {}
    for k, s in servers.items():
        port = monitor_port(s)
        d = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/accountz', timeout=5))
        try: urllib.request.urlopen(f'http://127.0.0.1:{port}/accountz?acc=ZZ', timeout=5); bad = None
        except urllib.error.HTTPError as e: bad = (e.code, e.read().decode())
        out[k] = (d['system_account'], sorted(d['accounts']), bad)
    assert out['jsnb'] == out['nats-server'] == ('$SYS', ['$G', '$SYS', 'A', 'B', 'C', 'D'], (400, 'Account ZZ does not exist'))


async def reply_through_stream_import(url) -> str:
    "A request published in A reaches B through a stream import; B's answer stays in B."
    a = await nats.connect(url.replace('nats://', 'nats://a:a@')); b = await nats.connect(url.replace('nats://', 'nats://b:b@'))
    async def resp(m): await m.respond(b'from b')
    await b.subscribe('pre.foo.>', cb=resp); await b.flush()
    try: r = await a.request('foo.q', b'?', timeout=1); out = r.data.decode()
    except Exception as e: out = type(e).__name__
    await a.close(); await b.close()
    return out


def test_reply_through_stream_import(start_server):
    servers = both(start_server, ACCOUNTS)
    out = {k: asyncio.run(reply_through_stream_import(s.url)) for k, s in servers.items()}
    # B's answer never reaches A; the reference now and then answers 503 instead of staying silent (its import's
    # interest in B's subscription is settled asynchronously), so either silence or a 503 is accepted from it
    assert out['jsnb'] == 'TimeoutError' and out['nats-server'] in ('TimeoutError', 'NoRespondersError')


def test_unknown_api_subjects(start_server):
    "Every `$JS.API` subject is taken (an unknown verb gets no answer); a Direct Get nobody serves gets the 503."
    reqs = [('$JS.API.FOO', b''), ('$JS.API.STREAM.FOO', b''), ('$JS.API.DIRECT.GET.NOPE', {'seq': 1}), ('$JS.API.INFO', b'')]
    async def script(url): return [await requests(url, u, reqs, timeout=0.5) for u in 'ab']
    _, out = run_both(start_server, JS_ACCOUNTS, '-js', script=script)
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][0][:3] == ['TimeoutError', 'TimeoutError', 'NoRespondersError']
    async def plain(url): return await requests(url, 'x', reqs, timeout=0.5)       # no authentication: any user is let in
    _, out = run_both(start_server, None, '-js', script=plain)
    assert out['jsnb'] == out['nats-server'] and out['jsnb'][:3] == ['TimeoutError', 'TimeoutError', 'NoRespondersError']


def test_account_streams_survive_a_restart(start_server):
    "A file stream of account A comes back in A after a restart, with its messages; C still does not see it."
    async def before(url):
        return await requests(url, 'a', [('$JS.API.STREAM.CREATE.P', {'name': 'P', 'subjects': ['p']}), ('p', b'1'), ('p', b'2')])
    async def after(url):
        return (await requests(url, 'a', [('$JS.API.STREAM.INFO.P', b'')]), await requests(url, 'c', [('$JS.API.STREAM.INFO.P', b'')]))
    servers, _ = run_both(start_server, JS_ACCOUNTS, '-js', script=before)
    out = {}
    for k, s in servers.items():
        s.restart()
        out[k] = asyncio.run(after(s.url))
    assert out['jsnb'] == out['nats-server']
    a, c = out['jsnb']
    assert a[0]['state']['messages'] == 2 and c[0]['error']['err_code'] == 10059


STREAMED = '''accounts {
  A: { users: [{user: a, password: a}], exports: [{service: "svc.>", response_type: stream}, {service: "one"}, {stream: "ev.*.>"}] }
  B: { users: [{user: b, password: b}],
       imports: [{service: {account: A, subject: "svc.>"}, to: "froma.svc.>"}, {service: {account: A, subject: "one"}},
                 {stream: {account: A, subject: "ev.*.>"}, to: "a_ev.*.>"}] }
}'''


async def streamed_responses(url) -> list:
    "A streamed service answers three times through the import, a singleton once; wildcard imports keep their tokens."
    a = await nats.connect(url.replace('nats://', 'nats://a:a@')); b = await nats.connect(url.replace('nats://', 'nats://b:b@'))
    async def many(m):
        for i in range(3): await a.publish(m.reply, f'{m.subject}:{i}'.encode())
    await a.subscribe('svc.>', cb=many); await a.subscribe('one', cb=many); await a.flush()
    inbox, events = b.new_inbox(), await b.subscribe('a_ev.>')
    sub = await b.subscribe(inbox); await b.flush()
    async def collect(n_wait=1.0):
        got = []
        while True:
            try: got.append((await sub.next_msg(timeout=n_wait)).data.decode())
            except nats.errors.TimeoutError: return got
    out = []
    await b.publish('froma.svc.x.y', b'', reply=inbox); out.append(await collect())
    await b.publish('one', b'', reply=inbox); out.append(await collect())
    await a.publish('ev.k1.deep.er', b'e'); await a.flush()
    out.append((await events.next_msg(timeout=3)).subject)
    await a.close(); await b.close()
    return out


def test_streamed_responses_and_wildcard_imports(start_server):
    _, out = run_both(start_server, STREAMED, script=streamed_responses)
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'] == [['svc.x.y:0', 'svc.x.y:1', 'svc.x.y:2'], ['one:0'], 'a_ev.k1.deep.er']


SHARED = '''jetstream { max_file_store: 200KB }
accounts {
  A: { users: [{user: a, password: a}], jetstream: enabled }
  B: { users: [{user: b, password: b}], jetstream: enabled }
}'''


async def shared_limit(url) -> list:
    "Two accounts fill the server's file store limit together: the second one's publishes are refused once it is full."
    out = []
    for u in 'ab':
        out += await requests(url, u, [(f'$JS.API.STREAM.CREATE.S{u}', {'name': f'S{u}', 'subjects': [f'{u}.>']})])
    big = b'x' * 4096
    for u, n in (('a', 30), ('b', 30)):
        nc = await nats.connect(url.replace('nats://', f'nats://{u}:{u}@'))
        res = []
        for i in range(n):
            r = json.loads((await nc.request(f'{u}.x', big, timeout=3)).data)
            res.append(r.get('error', {}).get('err_code', 'ok'))
        out.append(res); await nc.close()
    out += [await requests(url, u, [('$JS.API.INFO', b'')]) for u in 'ab']
    return out


def test_server_limits_shared_by_accounts(start_server):
    _, out = run_both(start_server, SHARED, '-js', script=shared_limit)
    for r in (*out['jsnb'], *out['nats-server']):
        for x in (r if isinstance(r, list) else [r]):
            if isinstance(x, dict): x.pop('api', None); x.pop('created', None); x.pop('ts', None)
    assert out['jsnb'] == out['nats-server']


JS_EXPORTED = '''no_auth_user: a
accounts {
  JS { jetstream: enabled, users: [{user: js, password: js}],
       exports: [{service: "$JS.API.>", response_type: stream}, {service: "$JS.ACK.>", response_type: stream}, {stream: "A.>", accounts: [A]}] }
  A { users: [{user: a, password: s3cret}],
      imports: [{service: {subject: "$JS.API.>", account: JS}, to: "IPA.>"}, {service: {subject: "$JS.ACK.>", account: JS}},
                {stream: {subject: "A.>", account: JS}}] }
}'''


async def pull_across_accounts(url) -> list:
    "A consumer of account JS pulled from account A through its JetStream API imported under `IPA.>`: messages keep their subject."
    adm = await nats.connect(url.replace('nats://', 'nats://js:js@')); js = adm.jetstream()
    await js.add_stream(name='S', subjects=['s.>'])
    for i in range(3): await js.publish(f's.{i}', b'%d' % i)
    await js.add_consumer('S', durable_name='me', ack_policy='explicit')
    nc = await nats.connect(url.replace('nats://', 'nats://a:s3cret@'), inbox_prefix='A')
    sub = await nc.subscribe('A.pull.1'); await nc.flush()
    await nc.publish('IPA.CONSUMER.MSG.NEXT.S.me', b'{"batch":3,"expires":2000000000}', reply='A.pull.1')
    out = []
    for _ in range(3):
        m = await sub.next_msg(timeout=3)
        out.append((m.subject, m.data, m.reply.split('.')[:5]))
        await nc.publish(m.reply, b'+ACK')                     # the ack goes back through the $JS.ACK import
    await nc.flush(); await asyncio.sleep(0.3)
    out.append((await js.consumer_info('S', 'me')).num_ack_pending)
    await adm.close(); await nc.close()
    return out


def test_pull_consumer_across_accounts(start_server):
    _, out = run_both(start_server, JS_EXPORTED, '-js', script=pull_across_accounts)
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][:3] == [(f's.{i}', b'%d' % i, ['$JS', 'ACK', 'S', 'me', '1']) for i in range(3)] and out['jsnb'][3] == 0
