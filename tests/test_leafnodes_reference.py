"""Leaf nodes: a reference nats-server dials a hub as its leaf node, the hub being jsnb or the
reference. Every scenario runs once per hub, with stock nats-py clients on both servers, and the
two outcomes are compared: what the clients receive, the logs of a refused login, /leafz and /varz."""
import asyncio, json, re, subprocess, sys, time, urllib.request
import pytest
import nats
from conftest import ServerProc, KINDS, ports_file

pytestmark = pytest.mark.reference

_LEAF_PORT = re.compile(r'Listening for leafnode connections on (\S+):(\d+)')
_HTTP_PORT = re.compile(r'Starting http monitor on (\S+):(\d+)')
ACCOUNTS = 'accounts { A: { users: [ {user: a, password: a} ] }, B: { users: [ {user: b, password: b} ] } }\n'


class Hub:
    "A hub (jsnb or the reference) with a leaf node port, and the reference leaf node dialling it."
    def __init__(self, kind, leafnodes='', extra=''):
        self.kind, self.leafnodes, self.extra = kind, leafnodes, extra
        self.proc = self.leaf = None

    def start(self):
        conf = (f'server_name: hub\nhttp: "127.0.0.1:-1"\n{self.extra.replace("KIND", self.kind)}'
                f'leafnodes {{ listen: "127.0.0.1:-1", compression: off\n{self.leafnodes} }}\n')
        self.proc = ServerProc(self.kind, ['-a', '127.0.0.1'], conf).start()
        text = self.proc.log_text()
        self.leaf_port, self.http = int(_LEAF_PORT.search(text).group(2)), int(_HTTP_PORT.search(text).group(2))
        return self

    def dial(self, cred='', account='', wait=True, tls='', url=''):
        "Start the reference leaf node dialling this hub (`cred`: `user:password`, `tls`: the remote's `tls` block)."
        at = f'{cred}@' if cred else ''
        url = url or f'nats-leaf://{at}127.0.0.1:{self.leaf_port}'
        conf = (f'server_name: leaf\nhttp: "127.0.0.1:-1"\n{ACCOUNTS if account else ""}'
                f'leafnodes {{ remotes: [ {{url: "{url}"'
                f'{", account: " + account if account else ""}{", tls: " + tls if tls else ""}}} ] }}\n')
        self.leaf = ServerProc('nats-server', ['-a', '127.0.0.1'], conf).start()
        self.leaf_http = int(_HTTP_PORT.search(self.leaf.log_text()).group(2))
        if wait: until(lambda: self.get('/leafz')['leafnodes'] == 1)
        return self

    def get(self, path, leaf=False):
        port = self.leaf_http if leaf else self.http
        with urllib.request.urlopen(f'http://127.0.0.1:{port}{path}', timeout=5) as r: return json.load(r)

    def hub_sees(self, subject):
        "Whether the leaf's interest in `subject` has reached the hub."
        return any(subject in (l.get('subscriptions_list') or ()) for l in self.get('/leafz?subs=1')['leafs'])

    def leaf_sees(self, subject):
        "Whether the hub's interest in `subject` has reached the leaf."
        return any(subject in (l.get('subscriptions_list') or ()) for l in self.get('/leafz?subs=1', leaf=True)['leafs'])

    def stop(self):
        for p in (self.leaf, self.proc):
            if p is not None: p.stop()


def until(cond, timeout=10):
    "Wait for `cond()` (polling); fail when it never holds."
    end = time.time() + timeout
    while time.time() < end:
        if cond(): return
        time.sleep(0.05)
    raise AssertionError('condition never held')


def _one_of_each(cls):
    "A factory fixture's body: `make(**kw)` starts one `cls` of each kind; all are stopped at the end."
    made = []
    def make(**kw):
        hs = {k: cls(k, **kw) for k in KINDS}; made.extend(hs.values())
        for h in hs.values(): h.start()
        return hs
    yield make
    for h in made: h.stop()


@pytest.fixture
def hubs():
    "Factory: `hubs(**kw)` starts one hub of each kind; all are stopped at the end."
    yield from _one_of_each(Hub)


def both(hubs, scenario, **kw):
    "Run `scenario(hub)` on a jsnb hub and a reference hub; both outcomes, which the test compares."
    out = {}
    for kind, h in hubs(**kw).items(): out[kind] = asyncio.run(scenario(h))
    return out['jsnb'], out['nats-server']


def _msg(m): return (m.subject, m.reply, m.data, dict(m.headers or {}))


async def _clients(h, hub_user='', leaf_user=''):
    hc = await nats.connect(h.proc.url, user=hub_user or None, password=hub_user or None)
    lc = await nats.connect(h.leaf.url, user=leaf_user or None, password=leaf_user or None)
    return hc, lc


async def _pub_both_ways(h, dial=True):
    if dial: h.dial()
    hc, lc = await _clients(h)
    s = await lc.subscribe('to.leaf.*'); await lc.flush()
    until(lambda: h.hub_sees('to.leaf.*'))
    await hc.publish('to.leaf.a', b'one', reply='r1'); await hc.publish('to.leaf.b', b'two', headers={'k': 'v'}); await hc.flush()
    got = [_msg(await s.next_msg(5)), _msg(await s.next_msg(5))]
    s2 = await hc.subscribe('to.hub'); await hc.flush()
    until(lambda: h.leaf_sees('to.hub'))
    await lc.publish('to.hub', b'three', headers={'a': 'b'}); await lc.publish('to.hub', b'four'); await lc.flush()
    got += [_msg(await s2.next_msg(5)), _msg(await s2.next_msg(5))]
    await hc.close(); await lc.close()
    return got


def test_messages_both_ways(hubs):
    j, r = both(hubs, _pub_both_ways)
    assert j == r
    assert [g[2] for g in j] == [b'one', b'two', b'three', b'four']


async def _queues(h):
    "Queue group members on both sides: every message goes to one member, plain subscribers get all."
    h.dial()
    hc, lc = await _clients(h)
    hq = [await hc.subscribe('work', queue='q') for _ in range(2)]
    lq = await lc.subscribe('work', queue='q'); lp = await lc.subscribe('work')
    await hc.flush(); await lc.flush()
    until(lambda: h.hub_sees('work') and h.leaf_sees('work'))
    n = 40
    for i in range(n): await hc.publish('work', b'%d' % i)
    for i in range(n): await lc.publish('work', b'L%d' % i)
    await hc.flush(); await lc.flush()
    plain = [await lp.next_msg(5) for _ in range(2 * n)]
    await asyncio.sleep(0.2); await hc.flush(); await lc.flush()
    q = [s.pending_msgs for s in hq] + [lq.pending_msgs]
    await hc.close(); await lc.close()
    return sum(q), len(plain)


def test_queue_groups_across(hubs):
    j, r = both(hubs, _queues)
    assert j == r == (80, 80)


async def _unsub(h):
    h.dial()
    hc, lc = await _clients(h)
    s = await lc.subscribe('gone'); q = await lc.subscribe('gone.q', queue='g'); await lc.flush()
    until(lambda: h.hub_sees('gone') and h.hub_sees('gone.q'))
    seen = [h.hub_sees('gone')]
    await s.unsubscribe(); await q.unsubscribe(); await lc.flush()
    until(lambda: not h.hub_sees('gone') and not h.hub_sees('gone.q'))
    hs = await hc.subscribe('hub.side', queue='w'); await hc.flush()
    until(lambda: h.leaf_sees('hub.side'))
    await hs.unsubscribe(); await hc.flush()
    until(lambda: not h.leaf_sees('hub.side'))
    try: await hc.request('gone', b'', timeout=1); seen.append('answered')
    except nats.errors.NoRespondersError: seen.append('no responders')
    await hc.close(); await lc.close()
    return seen


def test_unsubscribe_propagates(hubs):
    j, r = both(hubs, _unsub)
    assert j == r == [True, 'no responders']


async def _requests(h):
    h.dial()
    hc, lc = await _clients(h)
    async def echo(m): await m.respond(b'echo:' + m.data)
    await hc.subscribe('svc.hub', cb=echo); await lc.subscribe('svc.leaf', cb=echo)
    await hc.flush(); await lc.flush()
    until(lambda: h.hub_sees('svc.leaf') and h.leaf_sees('svc.hub'))
    out = [(await lc.request('svc.hub', b'1', timeout=5)).data, (await hc.request('svc.leaf', b'2', timeout=5)).data]
    await hc.close(); await lc.close()
    return out


def test_request_reply_across(hubs):
    j, r = both(hubs, _requests)
    assert j == r == [b'echo:1', b'echo:2']


def _norm_log(text, words):
    out = []
    for line in text.splitlines():
        if any(w in line for w in words):
            line = re.sub(r'^\[\d+\] \S+ \S+ ', '', line)
            out.append(re.sub(r'127\.0\.0\.1:\d+ - lid:\d+', 'LEAF', line))
    return out


async def _refused(h):
    h.dial('leaf:wrong', wait=False)
    until(lambda: 'Authorization Violation' in h.leaf.log_text())
    until(lambda: 'Authentication Failure' in h.proc.log_text())
    hub = _norm_log(h.proc.log_text(), ['authentication error', 'Leafnode connection closed'])
    leaf = _norm_log(h.leaf.log_text(), ['Leafnode Error'])
    return hub[:2], leaf[:1], h.get('/leafz')['leafnodes']


def test_refused_login(hubs):
    j, r = both(hubs, _refused, leafnodes='authorization { user: leaf, password: s3cr3t }')
    assert j == r
    assert j[0] == ['[ERR] LEAF - authentication error - User "leaf"', '[INF] LEAF - Leafnode connection closed: Authentication Failure']


async def _bound(h, cred='leaf:s3cr3t'):
    "A leaf logged in as a user bound to account A: it shares A's subjects, not `$G`'s or B's."
    h.dial(cred)
    hc, lc = await _clients(h, hub_user='a')
    hb = await nats.connect(h.proc.url, user='b', password='b')
    s = await lc.subscribe('acc.>'); await lc.flush()
    until(lambda: h.hub_sees('acc.>'))
    await hb.publish('acc.b', b'from B'); await hb.flush()
    await hc.publish('acc.a', b'from A'); await hc.flush()
    got = [_msg(await s.next_msg(5))]
    try: got.append(_msg(await s.next_msg(0.5)))
    except nats.errors.TimeoutError: pass
    leafz = h.get('/leafz')['leafs'][0]
    await hc.close(); await lc.close(); await hb.close()
    return got, leafz['account']


def test_leaf_bound_to_account(hubs):
    j, r = both(hubs, _bound, extra=ACCOUNTS, leafnodes='authorization { user: leaf, password: s3cr3t, account: A }')
    assert j == r == ([('acc.a', '', b'from A', {})], 'A')


def test_leaf_users_list(hubs):
    auth = 'authorization { users: [ {user: l1, password: p1, account: B}, {user: leaf, password: s3cr3t, account: A} ] }'
    j, r = both(hubs, _bound, extra=ACCOUNTS, leafnodes=auth)
    assert j == r == ([('acc.a', '', b'from A', {})], 'A')


_VOLATILE = {'server_id', 'now', 'id', 'port', 'rtt'}

async def _monitor(h):
    h.dial()
    hc, lc = await _clients(h)
    s = await lc.subscribe('m.x'); await lc.flush()
    until(lambda: h.hub_sees('m.x'))
    await hc.publish('m.x', b'12345'); await hc.flush(); await s.next_msg(5)
    s2 = await hc.subscribe('m.y'); await hc.flush()
    until(lambda: h.leaf_sees('m.y'))
    await lc.publish('m.y', b'123'); await lc.flush(); await s2.next_msg(5)
    leafz = h.get('/leafz')
    leafz = {k: v for k, v in leafz.items() if k not in _VOLATILE}
    leafz['leafs'] = [{k: v for k, v in l.items() if k not in _VOLATILE} for l in leafz['leafs']]
    varz = h.get('/varz')
    leaf = {k: v for k, v in varz['leaf'].items() if k != 'port'}
    await hc.close(); await lc.close()
    return leafz, leaf, varz['leaf']['port'] == h.leaf_port, varz['leafnodes']


def test_leafz_and_varz(hubs):
    j, r = both(hubs, _monitor)
    assert j == r
    assert j[0]['leafs'][0]['in_msgs'] == j[0]['leafs'][0]['out_msgs'] == 1


def test_startup_log_and_ports_file(tmp_path):
    "The leaf node port is logged as the reference logs it, and (as in the reference) not listed in the ports file."
    out = {}
    for kind in KINDS:
        d = tmp_path / kind; d.mkdir()
        p = ServerProc(kind, ['-a', '127.0.0.1'], f'ports_file_dir: "{d}"\nleafnodes {{ listen: "127.0.0.1:-1" }}\n').start()
        try:
            port = int(_LEAF_PORT.search(p.log_text()).group(2))
            lines = [re.sub(r'^\[\d+\] \S+ \S+ ', '', l).replace(str(port), 'PORT') for l in p.log_text().splitlines() if 'leafnode' in l]
            out[kind] = lines, sorted(p.ports_file(d)[1])
        finally: p.stop()
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][0] == ['[INF] Listening for leafnode connections on 127.0.0.1:PORT']


def _start_error(kind, tmp_path, conf):
    p = ServerProc(kind, ['-a', '127.0.0.1'], conf, workdir=str(tmp_path / kind))
    (tmp_path / kind).mkdir(exist_ok=True)
    try: p.start(); return None
    except RuntimeError as e: return str(e)
    finally: p.stop()


@pytest.mark.parametrize('block,key', [('remotes: [ {url: "nats-leaf://127.0.0.1:7422", credentials: "x.creds"} ]',
                                        'leafnodes.remotes.credentials'),
                                       ('dial_timeout: "2s"', 'leafnodes.dial_timeout'),
                                       ('write_timeout: "close"', 'leafnodes.write_timeout'),
                                       ('authorization { user: a, password: b, proxy_required: true }',
                                        'leafnodes.authorization.proxy_required')])
def test_unimplemented_keys_refused(tmp_path, block, key):
    "Keys jsnb does not implement stop it at start, naming the key."
    err = _start_error('jsnb', tmp_path, f'leafnodes {{ listen: "127.0.0.1:-1"\n{block} }}\n')
    assert err is not None and f'"{key}" is a nats-server option that jsnb does not support yet' in err


def test_unknown_key_refused_by_both(tmp_path):
    errs = {k: _start_error(k, tmp_path, 'leafnodes { listen: "127.0.0.1:-1", bogus: 1 }\n') for k in KINDS}
    assert all(e is not None and 'unknown field "bogus"' in e for e in errs.values())


def test_client_on_leaf_port(hubs):
    "A client that dials the leaf node port is told it is the wrong port, by both."
    out = {}
    for kind, h in hubs().items():
        from rawclient import Raw
        r = Raw(h.leaf_port, connect=b'CONNECT {"lang":"python","verbose":false}\r\n')
        out[kind] = (b'attempted to connect to leaf node port' in r.read(1)[0], sorted(json.loads(r.info)))
    assert out['jsnb'][0] is out['nats-server'][0] is True
    common = set(out['nats-server'][1])
    assert common <= set(out['jsnb'][1]), common - set(out['jsnb'][1])


async def _jetstream_from_leaf(h):
    "A client of the leaf node (which has no JetStream) uses the JetStream API of a hub that has it."
    h.dial()
    lc = await nats.connect(h.leaf.url)
    until(lambda: h.leaf_sees('$JS.API.>'))
    try: out = (await lc.jetstream().add_stream(name='S', subjects=['s.>'])).config.name
    except Exception as e: out = type(e).__name__
    await lc.close()
    return out


def test_jetstream_api_from_leaf(hubs, tmp_path):
    "The reference hub does not extend JetStream in the same domain to a leaf node without `$JS.API` exports: nor does jsnb."
    j, r = both(hubs, _jetstream_from_leaf, extra=f'jetstream {{ store_dir: "{tmp_path}/KIND" }}\n')
    assert j == r


def test_leaf_logs_in_as_a_client_user(hubs):
    "Without credentials in the leafnodes block, the leaf logs in with the server's users and is bound to the user's account."
    j, r = both(hubs, lambda h: _bound(h, cred='a:a'), extra=ACCOUNTS)
    assert j == r == ([('acc.a', '', b'from A', {})], 'A')


def test_leaf_refused_as_a_client_user(hubs):
    async def refused(h):
        h.dial('a:nope', wait=False)
        until(lambda: 'Authorization Violation' in h.leaf.log_text())
        return _norm_log(h.proc.log_text(), ['authentication error'])[:1], h.get('/leafz')['leafnodes']
    j, r = both(hubs, refused, extra=ACCOUNTS)
    assert j == r == (['[ERR] LEAF - authentication error - User "a"'], 0)


IMPORTS = ('accounts { A: { users: [ {user: a, password: a} ], exports: [ {stream: "feed.>"}, {service: "help"} ] },\n'
           '           B: { users: [ {user: b, password: b} ],\n'
           '                imports: [ {stream: {account: A, subject: "feed.>"}}, {service: {account: A, subject: "help"}} ] } }\n')

async def _imports(h):
    "A leaf bound to account B gets A's exported stream and calls A's exported service."
    h.dial('b:b')
    ha = await nats.connect(h.proc.url, user='a', password='a')
    lc = await nats.connect(h.leaf.url)
    async def helper(m): await m.respond(b'helped')
    await ha.subscribe('help', cb=helper); await ha.flush()
    s = await lc.subscribe('feed.>'); await lc.flush()
    until(lambda: h.hub_sees('feed.>') and h.leaf_sees('help'))
    await ha.publish('feed.x', b'news'); await ha.flush()
    out = [_msg(await s.next_msg(5)), (await lc.request('help', b'?', timeout=5)).data]
    await ha.close(); await lc.close()
    return out


def test_account_imports_through_leaf(hubs):
    j, r = both(hubs, _imports, extra=IMPORTS)
    assert j == r == [('feed.x', '', b'news', {}), b'helped']


async def _jetstream_domain_from_leaf(h):
    "A client of the leaf node reaches the hub's JetStream through its domain (`$JS.HUB.API`), stores and reads."
    h.dial()
    lc = await nats.connect(h.leaf.url)
    until(lambda: h.get('/leafz', leaf=True)['leafs'][0]['subscriptions'] > 0)     # the hub's interest has arrived
    js = lc.jetstream(domain='HUB')
    out = [(await js.add_stream(name='S', subjects=['s.>'])).config.name]
    out.append((await js.publish('s.1', b'x')).seq)
    sub = await js.pull_subscribe('s.>', durable='d')
    msgs = await sub.fetch(1, timeout=5); await msgs[0].ack_sync()
    out += [msgs[0].subject, msgs[0].data, (await js.consumer_info('S', 'd')).num_ack_pending]
    psub = await js.subscribe('s.>')                  # a push consumer delivering to the leaf's client
    m = await psub.next_msg(5); await m.ack_sync()
    out += [m.subject, m.data, m.metadata.sequence.stream]
    await lc.close()
    return out


def test_jetstream_domain_from_leaf(hubs, tmp_path):
    j, r = both(hubs, _jetstream_domain_from_leaf, extra=f'jetstream {{ store_dir: "{tmp_path}/KIND", domain: HUB }}\n')
    assert j == r == ['S', 1, 's.1', b'x', 0, 's.1', b'x', 1]


from test_tls_map_reference import pki      # the CA and certificates (a fixture)

def test_leaf_over_tls(hubs, pki):
    "TLS on the leaf node port: the leaf upgrades after the INFO; messages flow; /varz shows the TLS settings."
    tls = f'tls {{ cert_file: "{pki}/server.pem", key_file: "{pki}/server-key.pem", timeout: 3 }}'
    async def scenario(h):
        h.dial(tls=f'{{ ca_file: "{pki}/ca.pem" }}')
        hc, lc = await _clients(h)
        s = await lc.subscribe('secure'); await lc.flush()
        until(lambda: h.hub_sees('secure'))
        await hc.publish('secure', b'sealed'); await hc.flush()
        m = _msg(await s.next_msg(5))
        await hc.close(); await lc.close()
        return m, {k: v for k, v in h.get('/varz')['leaf'].items() if k != 'port'}
    j, r = both(hubs, scenario, leafnodes=tls)
    assert j == r
    assert j[1]['tls_required'] is True and j[1]['tls_timeout'] == 3


def test_leaf_without_tls_refused(hubs, pki):
    "A leaf that does not upgrade to TLS gets nowhere, with both hubs."
    tls = f'tls {{ cert_file: "{pki}/server.pem", key_file: "{pki}/server-key.pem" }}'
    async def scenario(h):
        h.dial(wait=False)
        until(lambda: 'TLS' in h.leaf.log_text() or 'tls' in h.leaf.log_text())
        return h.get('/leafz')['leafnodes']
    j, r = both(hubs, scenario, leafnodes=tls)
    assert j == r == 0


def test_leaf_certificate_verified(hubs, pki):
    "`verify: true`: a leaf with a certificate of the CA connects, and INFO and /varz say so."
    tls = f'tls {{ cert_file: "{pki}/server.pem", key_file: "{pki}/server-key.pem", ca_file: "{pki}/ca.pem", verify: true }}'
    async def scenario(h):
        h.dial(tls=f'{{ ca_file: "{pki}/ca.pem", cert_file: "{pki}/dn.pem", key_file: "{pki}/dn-key.pem" }}')
        v = h.get('/varz')['leaf']
        return h.get('/leafz')['leafnodes'], v.get('tls_verify'), v.get('auth_timeout')
    j, r = both(hubs, scenario, leafnodes=tls)
    assert j == r == (1, True, 3)


_ROUTE_PORT = re.compile(r'Listening for route connections on (\S+):(\d+)')

async def _across_cluster(h, b, b_http):
    "The leaf is on server A of a cluster; the clients on server B and on the leaf reach each other."
    def b_routes_see(subject):
        with urllib.request.urlopen(f'http://127.0.0.1:{b_http}/routez?subs=1', timeout=5) as r: routes = json.load(r)['routes']
        return any(subject in (x.get('subscriptions_list') or ()) for x in routes)
    h.dial()
    bc, lc = await nats.connect(b.url), await nats.connect(h.leaf.url)
    s = await bc.subscribe('to.b'); await bc.flush()
    until(lambda: h.leaf_sees('to.b'))
    await lc.publish('to.b', b'from leaf'); await lc.flush()
    out = [_msg(await s.next_msg(5))]
    s2 = await lc.subscribe('to.leaf'); await lc.flush()
    until(lambda: b_routes_see('to.leaf'))
    await bc.publish('to.leaf', b'from b', reply='r'); await bc.flush()
    out.append(_msg(await s2.next_msg(5)))
    bq = [await bc.subscribe('work', queue='q') for _ in range(2)]; lq = await lc.subscribe('work', queue='q')
    await bc.flush(); await lc.flush()
    until(lambda: h.leaf_sees('work') and b_routes_see('work'))
    for i in range(20): await bc.publish('work', b'b'); await lc.publish('work', b'l')
    await bc.flush(); await lc.flush()
    for _ in range(200):                               # (the clients read while this waits)
        if sum(x.pending_msgs for x in bq) + lq.pending_msgs >= 40: break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    out.append(sum(x.pending_msgs for x in bq) + lq.pending_msgs)
    await bc.close(); await lc.close()
    return out


def test_leaf_on_a_cluster():
    out = {}
    for kind in KINDS:
        a = Hub(kind, extra='cluster { name: c1, listen: "127.0.0.1:-1" }\n').start()
        rport = int(_ROUTE_PORT.search(a.proc.log_text()).group(2))
        b = ServerProc(kind, ['-a', '127.0.0.1'], f'server_name: b\nhttp: "127.0.0.1:-1"\n'
                       f'cluster {{ name: c1, listen: "127.0.0.1:-1", routes: ["nats-route://127.0.0.1:{rport}"] }}\n').start()
        try:
            b_http = int(_HTTP_PORT.search(b.log_text()).group(2))
            until(lambda: a.get('/routez')['num_routes'] >= 1)
            out[kind] = asyncio.run(_across_cluster(a, b, b_http))
        finally: b.stop(); a.stop()
    assert out['jsnb'] == out['nats-server'] == [('to.b', '', b'from leaf', {}), ('to.leaf', 'r', b'from b', {}), 40]


def test_min_version(hubs):
    "A leaf node older than `min_version` is turned away with the reference's words."
    async def scenario(h):
        h.dial(wait=False)
        until(lambda: 'minimum version' in h.leaf.log_text())
        until(lambda: 'Leafnode connection closed' in h.proc.log_text())
        return (_norm_log(h.proc.log_text(), ['minimum version', 'Leafnode connection closed'])[:2],
                _norm_log(h.leaf.log_text(), ['minimum version'])[:1], h.get('/leafz')['leafnodes'])
    j, r = both(hubs, scenario, leafnodes='min_version: "2.16.0"')
    assert j == r
    assert j[0] == ['[ERR] LEAF - connection rejected since minimum version required is "2.16.0" - Account:$G',
                    '[INF] LEAF - Leafnode connection closed: Minimum Version Required']


@pytest.mark.parametrize('block', ['min_version: "2.7.0"', 'min_version: "two"',
                                   'authorization { users: [ {user: a, password: b}, {user: a, password: c} ] }'])
def test_config_errors_agree(tmp_path, block):
    "Errors in the leafnodes block: the same words from both."
    errs = {k: _start_error(k, tmp_path, f'leafnodes {{ listen: "127.0.0.1:-1"\n{block} }}\n') for k in KINDS}
    norm = {k: re.sub(r'^.*?server\.conf:\d+(:\d+)?: ', '', (e or '').strip().splitlines()[0] if e else '') for k, e in errs.items()}
    assert norm['jsnb'] and norm['jsnb'] == norm['nats-server'], errs



def test_leaf_over_websocket(hubs):
    "A leaf node dials the hub's WebSocket port (`ws://`): the same leaf connection, framed."
    async def scenario(h):
        m = re.search(r'websocket clients on (?:ws://)?(\S+):(\d+)', h.proc.log_text())
        h.dial(url=f'ws://127.0.0.1:{m.group(2)}')
        return await _pub_both_ways(h, dial=False)
    j, r = both(hubs, scenario, extra='websocket { listen: "127.0.0.1:-1", no_tls: true }\n')
    assert j == r
    assert [g[2] for g in j] == [b'one', b'two', b'three', b'four']


def test_account_leaf_limit(hubs):
    "`limits { max_leafnodes: 1 }`: a second leaf node in the account is turned away with the error of a full account."
    acc = ('accounts { A: { users: [ {user: a, password: a} ], limits { max_leafnodes: 1 } } }\n')
    async def scenario(h):
        h.dial('a:a')
        first = h.leaf
        h.dial('a:a', wait=False)                      # a second leaf node, also for account A
        until(lambda: 'Leafnode Error' in h.leaf.log_text())
        until(lambda: 'Maximum Account' in h.proc.log_text())
        out = (_norm_log(h.proc.log_text(), ['maximum account', 'Maximum Account'])[:3],
               _norm_log(h.leaf.log_text(), ['Leafnode Error'])[:1], h.get('/leafz')['leafnodes'])
        first.stop()
        return out
    j, r = both(hubs, scenario, extra=acc)
    assert j == r
    assert j[1:] == (["[ERR] LEAF - Leafnode Error 'maximum account active connections exceeded'"], 1)


def test_leaf_with_user_jwt(hubs, tmp_path):
    "Operator mode: the leaf logs in with a user JWT (a .creds file) and is bound to its account; a user not allowed LEAFNODE is refused."
    from test_jwt_reference import keys, account, user, operator_conf
    aseed, apub = keys('account')
    def creds(name, **n):
        useed, upub = keys('user')
        f = tmp_path / f'{name}.creds'
        f.write_text(f'-----BEGIN NATS USER JWT-----\n{user(upub, aseed, **n)}\n------END NATS USER JWT------\n\n'
                     f'-----BEGIN USER NKEY SEED-----\n{useed.decode()}\n------END USER NKEY SEED------\n')
        return f
    good, standard_only = creds('good'), creds('std', allowed_connection_types=['STANDARD'])
    client = creds('client')
    async def scenario(h):
        h.leaf = ServerProc('nats-server', ['-a', '127.0.0.1'], f'server_name: leaf\nhttp: "127.0.0.1:-1"\nleafnodes {{ remotes: [ '
                            f'{{url: "nats-leaf://127.0.0.1:{h.leaf_port}", credentials: "{good}"}} ] }}\n').start()
        h.leaf_http = int(_HTTP_PORT.search(h.leaf.log_text()).group(2))
        until(lambda: h.get('/leafz')['leafnodes'] == 1)
        lz = h.get('/leafz')['leafs'][0]['account'] == apub
        hc = await nats.connect(h.proc.url, user_credentials=str(client))
        lc = await nats.connect(h.leaf.url)
        s = await lc.subscribe('jwt.x'); await lc.flush()
        until(lambda: h.hub_sees('jwt.x'))
        await hc.publish('jwt.x', b'signed'); await hc.flush()
        got = _msg(await s.next_msg(5))
        await hc.close(); await lc.close(); h.leaf.stop()
        h.leaf = ServerProc('nats-server', ['-a', '127.0.0.1'], f'server_name: leaf2\nleafnodes {{ remotes: [ '
                            f'{{url: "nats-leaf://127.0.0.1:{h.leaf_port}", credentials: "{standard_only}"}} ] }}\n').start()
        until(lambda: 'Authorization Violation' in h.leaf.log_text())
        return lz, got, h.get('/leafz')['leafnodes']
    conf = operator_conf({apub: account(apub, 'A')})
    j, r = both(hubs, scenario, extra=conf)
    assert j == r == (True, ('jwt.x', '', b'signed', {}), 0)


PERMS = ('authorization { users: [ {user: leaf, password: p, permissions: { publish: ["up.>", "svc.*"], '
         'subscribe: { allow: ["down.>", "_INBOX.>"], deny: ["down.secret"] } } }, {user: c, password: c} ] }\n')

async def _permissions(h):
    "The leaf logged in as a user with permissions: it hears of, sends and receives only what that user may."
    h.dial('leaf:p')
    hc = await nats.connect(h.proc.url, user='c', password='c')
    lc = await nats.connect(h.leaf.url)
    up, other = await hc.subscribe('up.x'), await hc.subscribe('elsewhere')
    wide = await hc.subscribe('svc.>')                 # wider than the permission: told, the leaf keeps to svc.*
    await hc.flush()
    until(lambda: h.leaf_sees('up.x'))
    time.sleep(0.3)
    heard = [h.leaf_sees(s) for s in ('up.x', 'elsewhere', 'svc.>')]
    down = await lc.subscribe('down.>'); await lc.flush()
    until(lambda: h.hub_sees('down.>'))
    for s in ('down.a', 'down.secret', 'down.b'): await hc.publish(s, s.encode())
    await hc.flush()
    got = [(await down.next_msg(5)).subject, (await down.next_msg(5)).subject]
    await lc.publish('up.x', b'ok'); await lc.publish('elsewhere', b'no'); await lc.flush()
    sent = [(await up.next_msg(5)).data]
    try: sent.append((await other.next_msg(0.5)).data)
    except nats.errors.TimeoutError: pass
    await hc.close(); await lc.close()
    return heard, got, sent, h.get('/leafz')['leafnodes']


def test_leaf_user_permissions(hubs):
    j, r = both(hubs, _permissions, extra=PERMS)
    assert j == r
    assert j == ([True, False, True], ['down.a', 'down.b'], [b'ok'], 1)


def test_leaf_past_its_permissions(hubs):
    "A leaf that subscribes or publishes past its user's permissions (here a raw connection) is told and closed by both."
    from rawclient import Raw
    login = b'CONNECT {"name":"raw","user":"leaf","pass":"p","headers":true,"compress_mode":"off","protocol":3}\r\n'
    out = {}
    for kind, h in hubs(extra=PERMS).items():
        got = []
        for op in (b'LS+ elsewhere\r\n', b'LMSG elsewhere 2\r\nno\r\n'):
            r = Raw(h.leaf_port, connect=login)
            data, closed = r.read(0.5)                     # the INFO after login and the interest
            r.send(op)
            data, closed = r.read(1)
            got.append((re.findall(rb"-ERR '[^']*'", data), closed))
            r.s.close()
        out[kind] = got, _norm_log(h.proc.log_text(), ['Violation on'])
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][0] == [([b"-ERR 'Permissions Violation for Subscription to \"elsewhere\"'"], True),
                              ([b"-ERR 'Permissions Violation for Publish to \"elsewhere\"'"], True)]


def test_leaf_nkey_login(hubs):
    "`authorization { nkey }`: the leaf signs the nonce with the seed (`nkey` of the remote); a wrong seed is refused."
    from test_jwt_reference import keys
    seed, pub = keys('user')
    other = keys('user')[0]
    async def scenario(h):
        h.leaf = ServerProc('nats-server', ['-a', '127.0.0.1'], f'server_name: leaf\nleafnodes {{ remotes: [ '
                            f'{{url: "nats-leaf://127.0.0.1:{h.leaf_port}", nkey: "{seed.decode()}"}} ] }}\n').start()
        until(lambda: h.get('/leafz')['leafnodes'] == 1)
        ok = h.get('/leafz')['leafs'][0]['account']
        h.leaf.stop()
        h.leaf = ServerProc('nats-server', ['-a', '127.0.0.1'], f'server_name: leaf2\nleafnodes {{ remotes: [ '
                            f'{{url: "nats-leaf://127.0.0.1:{h.leaf_port}", nkey: "{other.decode()}"}} ] }}\n').start()
        until(lambda: 'Authorization Violation' in h.leaf.log_text())
        return ok, h.get('/leafz')['leafnodes']
    j, r = both(hubs, scenario, extra=ACCOUNTS, leafnodes=f'authorization {{ nkey: "{pub}", account: B }}')
    assert j == r == ('B', 0)


def test_isolated_leaf_interest(hubs):
    "`isolate_leafnode_interest`: a leaf node is not told of another leaf node's interest, only of the hub's."
    async def scenario(h):
        h.dial()
        first = h.leaf
        lc = await nats.connect(first.url)
        await lc.subscribe('from.leaf1'); await lc.flush()
        until(lambda: h.hub_sees('from.leaf1'))
        hc = await nats.connect(h.proc.url)
        await hc.subscribe('from.hub'); await hc.flush()
        h.leaf = ServerProc('nats-server', ['-a', '127.0.0.1'], f'server_name: leaf2\nhttp: "127.0.0.1:-1"\nleafnodes {{ remotes: [ '
                            f'{{url: "nats-leaf://127.0.0.1:{h.leaf_port}"}} ] }}\n').start()
        h.leaf_http = int(_HTTP_PORT.search(h.leaf.log_text()).group(2))
        until(lambda: h.leaf_sees('from.hub'))
        seen = h.leaf_sees('from.leaf1'), [l.get('is_isolated', False) for l in h.get('/leafz')['leafs']]
        await lc.close(); await hc.close(); first.stop()
        return seen
    j, r = both(hubs, scenario, leafnodes='isolate_leafnode_interest: true')
    assert j == r == (False, [True, True])


def test_leafnode_urls_in_a_cluster():
    "Servers of a cluster tell each other their leaf node URLs; a leaf node is told all of them, and again when one joins."
    from rawclient import Raw
    out = {}
    for kind in KINDS:
        a = Hub(kind, extra='cluster { name: c1, listen: "127.0.0.1:-1" }\n').start()
        rport = int(_ROUTE_PORT.search(a.proc.log_text()).group(2))
        raw = Raw(a.leaf_port, connect=b'CONNECT {"name":"raw","headers":true,"compress_mode":"off","protocol":3}\r\n')
        first = json.loads(raw.info)
        b = ServerProc(kind, ['-a', '127.0.0.1'], f'server_name: b\nleafnodes {{ listen: "127.0.0.1:-1", compression: off }}\n'
                       f'cluster {{ name: c1, listen: "127.0.0.1:-1", routes: ["nats-route://127.0.0.1:{rport}"] }}\n').start()
        try:
            b_leaf = int(_LEAF_PORT.search(b.log_text()).group(2))
            data = raw.until(b'%d' % b_leaf)
            infos = [json.loads(x) for x in re.findall(rb'INFO (\{.*?\}) \r\n', data)]
            update = infos[-1]
            out[kind] = (first['leafnode_urls'] == [f'127.0.0.1:{a.leaf_port}'], first.get('cluster'),
                         sorted(update['leafnode_urls']) == sorted([f'127.0.0.1:{a.leaf_port}', f'127.0.0.1:{b_leaf}']),
                         update.get('cluster'), 'client_id' in update, 'nonce' in update)
        finally: raw.s.close(); b.stop(); a.stop()
    assert out['jsnb'] == out['nats-server'] == (True, 'c1', True, 'c1', False, False)


def test_leaf_user_allow_responses(hubs):
    "`allow_responses`: a leaf logged in as such a user may answer a request it was sent (once), not publish there unasked."
    from rawclient import Raw
    perms = ('authorization { users: [ {user: leaf, password: p, permissions: { publish: ["up.>"], subscribe: ["svc"], '
             'allow_responses: true } }, {user: c, password: c} ] }\n')
    login = b'CONNECT {"name":"raw","user":"leaf","pass":"p","headers":true,"compress_mode":"off","protocol":3}\r\n'
    async def scenario(h):
        r = Raw(h.leaf_port, connect=login + b'LS+ svc\r\n')
        r.read(0.5)
        hc = await nats.connect(h.proc.url, user='c', password='c')
        inbox = await hc.subscribe('reply.box'); await hc.flush()
        until(lambda: h.hub_sees('svc'))
        await hc.publish('svc', b'?', reply='reply.box'); await hc.flush()
        asked = b'LMSG svc reply.box 1' in r.until(b'LMSG svc')
        r.send(b'LMSG reply.box 6\r\nanswer\r\n')
        got = (await inbox.next_msg(5)).data
        r.send(b'LMSG reply.box 5\r\nagain\r\n')          # a second answer: past the one allowed
        data, closed = r.read(1)
        await hc.close(); r.s.close()
        return asked, got, re.findall(rb"-ERR '[^']*'", data), closed
    j, r = both(hubs, scenario, extra=perms)
    assert j == r
    assert j[:2] == (True, b'answer')


class Spoke(Hub):
    "A reference hub, and a leaf node dialling it that is jsnb or the reference (`kind`)."
    def start(self):
        conf = f'server_name: hub\nhttp: "127.0.0.1:-1"\n{self.extra}leafnodes {{ listen: "127.0.0.1:-1"\n{self.leafnodes} }}\n'
        self.proc = ServerProc('nats-server', ['-a', '127.0.0.1'], conf).start()
        text = self.proc.log_text()
        self.leaf_port, self.http = int(_LEAF_PORT.search(text).group(2)), int(_HTTP_PORT.search(text).group(2))
        return self

    def dial(self, cred='', account='', wait=True, tls='', url=''):
        at = f'{cred}@' if cred else ''
        url = url or f'nats-leaf://{at}127.0.0.1:{self.leaf_port}'
        conf = (f'server_name: leaf\nhttp: "127.0.0.1:-1"\n{ACCOUNTS if account else ""}'
                f'leafnodes {{ remotes: [ {{url: "{url}"{", account: " + account if account else ""}}} ] }}\n')
        self.leaf = ServerProc(self.kind, ['-a', '127.0.0.1'], conf).start()
        self.leaf_http = int(_HTTP_PORT.search(self.leaf.log_text()).group(2))
        if wait: until(lambda: self.get('/leafz')['leafnodes'] == 1)
        return self


@pytest.fixture
def spokes():
    "Factory: a reference hub with a jsnb leaf node, and one with a reference leaf node."
    yield from _one_of_each(Spoke)


@pytest.mark.parametrize('scenario', [_pub_both_ways, _queues, _unsub, _requests])
def test_jsnb_as_leaf(spokes, scenario):
    "jsnb dials a reference hub as its leaf node: the same scenarios give the same outcome as with a reference leaf node."
    j, r = both(spokes, scenario)
    assert j == r


def test_jsnb_leaf_monitoring(spokes):
    async def scenario(h):
        h.dial()
        lz = h.get('/leafz', leaf=True)['leafs'][0]
        v = h.get('/varz', leaf=True)['leaf']
        return ({k: lz[k] for k in ('name', 'is_spoke', 'account', 'ip', 'port', 'compression')} | {'port': lz['port'] == h.leaf_port},
                {k: (v[k] if k != 'remotes' else [dict(r, urls=len(r['urls'])) for r in v[k]]) for k in v},
                h.get('/leafz')['leafs'][0]['name'])
    j, r = both(spokes, scenario, leafnodes='compression: off')
    assert j == r, (j, r)


def test_jsnb_leaf_refused(spokes):
    "A jsnb leaf node with wrong credentials logs the hub's error as a reference leaf node does, and keeps trying."
    async def scenario(h):
        h.dial('leaf:wrong', wait=False)
        until(lambda: h.leaf.log_text().count('Leafnode Error') >= 2)
        return _norm_log(h.leaf.log_text(), ['Leafnode Error', 'Leafnode connection closed'])[:2]
    j, r = both(spokes, scenario, leafnodes='authorization { user: leaf, password: s3cr3t }')
    assert j == r
    assert j == ["[ERR] LEAF - Leafnode Error 'Authorization Violation'", '[INF] LEAF - Leafnode connection closed: Client Closed - Remote: hub']


async def _local_account(h):
    "The leaf binds its account A to the hub: A's clients on the leaf share the hub's subjects, B's do not."
    h.dial(account='A')
    hc = await nats.connect(h.proc.url)
    la = await nats.connect(h.leaf.url, user='a', password='a')
    lb = await nats.connect(h.leaf.url, user='b', password='b')
    sa, sb = await la.subscribe('shared'), await lb.subscribe('shared')
    await la.flush(); await lb.flush()
    until(lambda: h.hub_sees('shared'))
    await hc.publish('shared', b'x'); await hc.flush()
    got = [_msg(await sa.next_msg(5))]
    try: got.append(_msg(await sb.next_msg(0.5)))
    except nats.errors.TimeoutError: pass
    acc = h.get('/leafz', leaf=True)['leafs'][0]['account']
    for c in (hc, la, lb): await c.close()
    return got, acc


def test_jsnb_leaf_local_account(spokes):
    j, r = both(spokes, _local_account)
    assert j == r == ([('shared', '', b'x', {})], 'A')


def test_jsnb_leaf_with_jsnb_hub(hubs):
    "Both ends jsnb: a jsnb hub and a jsnb leaf node, against a reference pair."
    out = {}
    for kind, h in hubs().items():
        h.leaf = ServerProc(kind, ['-a', '127.0.0.1'], f'server_name: leaf\nhttp: "127.0.0.1:-1"\n'
                            f'leafnodes {{ remotes: [ {{url: "nats-leaf://127.0.0.1:{h.leaf_port}"}} ] }}\n').start()
        h.leaf_http = int(_HTTP_PORT.search(h.leaf.log_text()).group(2))
        until(lambda: h.get('/leafz')['leafnodes'] == 1)
        out[kind] = asyncio.run(_pub_both_ways(h, dial=False)), asyncio.run(_requests_dialled(h))
    assert out['jsnb'] == out['nats-server']


async def _requests_dialled(h):
    hc, lc = await _clients(h)
    async def echo(m): await m.respond(b'echo:' + m.data)
    await hc.subscribe('svc.hub', cb=echo); await lc.subscribe('svc.leaf', cb=echo)
    await hc.flush(); await lc.flush()
    until(lambda: h.hub_sees('svc.leaf') and h.leaf_sees('svc.hub'))
    out = [(await lc.request('svc.hub', b'1', timeout=5)).data, (await hc.request('svc.leaf', b'2', timeout=5)).data]
    await hc.close(); await lc.close()
    return out
