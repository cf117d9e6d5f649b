"""Clusters on loopback: jsnb servers routed to each other, and mixed clusters of jsnb and the
reference nats-server (both directions of who dials whom), with stock nats-py clients connected
to different servers. The mixed clusters are the proof that jsnb speaks the reference's route
protocol."""
import asyncio, json, os, re, time, urllib.request
import pytest
import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from conftest import ServerProc
from rawclient import Raw

pytestmark = pytest.mark.reference

_ROUTE_PORT = re.compile(r'Listening for route connections on (\S+):(\d+)')
_HTTP_PORT = re.compile(r'Starting http monitor on (\S+):(\d+)')


class Node:
    "One server of a test cluster (jsnb or the reference), on free loopback ports."
    def __init__(self, kind, name, cluster='c1', routes=(), cluster_port=-1, extra=(), config=None):
        self.kind, self.name, self.cluster, self.routes, self.extra, self.config = kind, name, cluster, list(routes), list(extra), config
        self.cluster_port, self.proc, self.http = cluster_port, None, None

    def args(self):
        a = ['-a', '127.0.0.1', '-n', self.name, '-m', '-1']
        if self.config is None:
            a += ['--cluster', f'nats://127.0.0.1:{self.cluster_port}']
            if self.cluster: a += ['--cluster_name', self.cluster]
            if self.routes: a += ['--routes', ','.join(self.routes)]
        return a + self.extra

    def start(self, port=None):
        self.proc = ServerProc(self.kind, self.args(), self.config).start(port)
        deadline = time.time() + 20
        while time.time() < deadline:
            text = self.proc.log_text()
            if (r := _ROUTE_PORT.search(text)) and (h := _HTTP_PORT.search(text)):
                self.cluster_port, self.http = int(r.group(2)), int(h.group(2)); return self
            time.sleep(0.02)
        raise RuntimeError(f'{self.name}: no route port in the log: {self.proc.log_text()}')

    @property
    def url(self): return self.proc.url
    @property
    def route_url(self): return f'nats-route://127.0.0.1:{self.cluster_port}'

    def get(self, path):
        with urllib.request.urlopen(f'http://127.0.0.1:{self.http}{path}', timeout=5) as r: return json.load(r)

    def peers(self) -> set[str]:
        "The names of the servers this one has routes to (the reference pools several routes per server)."
        return {r['remote_name'] for r in self.get('/routez')['routes']}

    def kill(self):
        "Stop at once, as `kill -9` does (no goodbye to the peers)."
        self.proc.proc.kill(); self.proc.proc.wait()
        if self.proc.proc.stderr: self.proc.proc.stderr.close()

    def stop(self):
        if self.proc: self.proc.stop()


@pytest.fixture
def nodes():
    "Factory: `nodes(kind, name, ...)` starts a cluster node; all are stopped at the end."
    started = []
    def make(*a, **kw):
        n = Node(*a, **kw).start(); started.append(n); return n
    yield make
    for n in started: n.stop()


def wait_mesh(servers, timeout=20):
    "Wait until every server has a route to every other one."
    names, deadline = {s.name for s in servers}, time.time() + timeout
    while time.time() < deadline:
        if all(s.peers() == names - {s.name} for s in servers): return
        time.sleep(0.1)
    raise AssertionError({s.name: s.peers() for s in servers})


async def connect(url, **kw):
    kw.setdefault('allow_reconnect', False)
    return await asyncio.wait_for(nats.connect(url, **kw), 15)


async def settle(*ncs, pause=0.3):
    "Let interest reach every server (subscriptions travel over the routes)."
    for nc in ncs: await nc.flush()
    await asyncio.sleep(pause)


async def wait_interest(node, subject, present=True, timeout=10):
    "Wait until `node` sees (or no longer sees) routed interest matching `subject`."
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = node.get(f'/subsz?subs=1&test={subject}')['total'] if node.kind == 'jsnb' else \
            sum(1 for r in node.get('/routez?subs=1')['routes'] for s in r.get('subscriptions_list', []) if s == subject)
        if bool(found) == present: return
        await asyncio.sleep(0.05)
    raise AssertionError(f'{node.name}: interest in {subject} {"never came" if present else "never left"}')


def three(nodes, kinds=('jsnb', 'jsnb', 'jsnb')):
    "Three servers, the second and third given only the first as a route (the seed)."
    seed = nodes(kinds[0], 's1')
    rest = [nodes(k, f's{i}', routes=[seed.route_url]) for i, k in enumerate(kinds[1:], 2)]
    servers = [seed] + rest
    wait_mesh(servers)
    return servers


# ---------------------------------------------------------------- jsnb clusters

async def test_full_mesh_from_one_seed(nodes):
    s1, s2, s3 = three(nodes)
    rz = s2.get('/routez')
    assert rz['num_routes'] == 2
    seed_route = next(r for r in rz['routes'] if r['remote_name'] == 's1')
    assert (seed_route['did_solicit'], seed_route['is_configured']) == (True, True)
    other = next(r for r in rz['routes'] if r['remote_name'] == 's3')
    assert other['is_configured'] is False
    v = s3.get('/varz')
    assert (v['cluster']['name'], v['cluster']['urls'], v['routes'], v['remotes']) == ('c1', [f'127.0.0.1:{s1.cluster_port}'], 2, 2)


async def test_pub_sub_and_request_reply_across_servers(nodes):
    s1, s2, s3 = three(nodes)
    a, b, c = await connect(s1.url), await connect(s2.url), await connect(s3.url)
    sub = await c.subscribe('orders.>')
    async def echo(m): await m.respond(b'from s2: ' + m.data)
    await b.subscribe('svc.echo', cb=echo)
    await settle(a, b, c)
    for i in range(100): await a.publish(f'orders.{i}', b'%d' % i)
    await a.flush()
    got = [await sub.next_msg(timeout=5) for _ in range(100)]
    assert [m.data for m in got] == [b'%d' % i for i in range(100)]      # in order, each once
    with pytest.raises(NatsTimeout): await sub.next_msg(timeout=0.3)
    r = await a.request('svc.echo', b'hi', timeout=5)
    assert r.data == b'from s2: hi'
    with pytest.raises(NoRespondersError): await a.request('svc.nobody', b'', timeout=5)
    for nc in (a, b, c): await nc.close()


async def test_queue_group_once_across_the_cluster(nodes):
    servers = three(nodes)
    ncs = [await connect(s.url) for s in servers]
    got = [[] for _ in servers]
    for i, nc in enumerate(ncs):
        for _ in range(2):
            async def cb(m, i=i): got[i].append(m.data)
            await nc.subscribe('work', queue='workers', cb=cb)
    plain = await ncs[2].subscribe('work')
    await settle(*ncs)
    for i in range(600): await ncs[i % 3].publish('work', b'%d' % i)
    for nc in ncs: await nc.flush()
    assert len([await plain.next_msg(timeout=5) for _ in range(600)]) == 600
    await asyncio.sleep(0.5)
    all_got = sorted(int(x) for g in got for x in g)
    assert all_got == list(range(600))                  # every message to exactly one member
    assert all(len(g) > 60 for g in got), [len(g) for g in got]
    for nc in ncs: await nc.close()


async def test_headers_cross_routes_byte_for_byte(nodes):
    s1 = nodes('jsnb', 's1')
    s2 = nodes('jsnb', 's2', routes=[s1.route_url])
    wait_mesh([s1, s2])
    rx = Raw(s2.proc.port)
    rx.send(b'SUB h.* 1\r\nPING\r\n'); rx.until(b'PONG')
    await wait_interest(s1, 'h.*')
    tx = Raw(s1.proc.port)
    hdr = b'NATS/1.0\r\nX-Trace: a b\r\nX-Trace: c\r\nX-Empty:\r\n\r\n'
    tx.send(b'HPUB h.x _INBOX.r %d %d\r\n%spayload\r\nPUB h.y 0\r\n\r\n' % (len(hdr), len(hdr) + 7, hdr))
    m1, m2 = rx.msgs(2)
    assert (m1.subject, m1.reply, m1.hdr, m1.payload) == (b'h.x', b'_INBOX.r', hdr, b'payload')
    assert (m2.subject, m2.hdr, m2.payload) == (b'h.y', b'', b'')
    rx.close(); tx.close()


async def test_interest_withdrawn_on_unsubscribe_and_disconnect(nodes):
    s1 = nodes('jsnb', 's1')
    s2 = nodes('jsnb', 's2', routes=[s1.route_url])
    wait_mesh([s1, s2])
    pub = await connect(s1.url)
    sub_nc = await connect(s2.url)
    sub = await sub_nc.subscribe('svc.a')
    await settle(sub_nc); await wait_interest(s1, 'svc.a')
    await sub.unsubscribe(); await sub_nc.flush()
    await wait_interest(s1, 'svc.a', present=False)
    with pytest.raises(NoRespondersError): await pub.request('svc.a', b'', timeout=5)
    raw = Raw(s2.proc.port)
    raw.send(b'SUB svc.b 1\r\nSUB svc.b g 2\r\nPING\r\n'); raw.until(b'PONG')
    await wait_interest(s1, 'svc.b')
    raw.close()                                                      # gone without unsubscribing
    await wait_interest(s1, 'svc.b', present=False)
    with pytest.raises(NoRespondersError): await pub.request('svc.b', b'', timeout=5)
    await pub.close(); await sub_nc.close()


async def test_killed_server_and_the_cluster_reforming(nodes):
    s1, s2, s3 = three(nodes)
    nc3 = await connect(s3.url)
    sub = await nc3.subscribe('ping')
    await settle(nc3)
    s2.kill()                                                        # s2's routes and interest vanish
    deadline = time.time() + 10
    while time.time() < deadline and (s1.peers() != {'s3'} or s3.peers() != {'s1'}): time.sleep(0.1)
    assert (s1.peers(), s3.peers()) == ({'s3'}, {'s1'})
    s2.start(s2.proc.port)                                           # same client port; it dials the seed again
    wait_mesh([s1, s2, s3])
    nc2 = await connect(s2.url)
    await asyncio.sleep(0.3)
    await nc2.publish('ping', b'back'); await nc2.flush()
    assert (await sub.next_msg(timeout=5)).data == b'back'
    port = s1.cluster_port                                           # now the seed: the others keep dialling it
    s1.kill()
    deadline = time.time() + 10
    while time.time() < deadline and s2.peers() != {'s3'}: time.sleep(0.1)
    assert (s2.peers(), s3.peers()) == ({'s3'}, {'s2'})             # the mesh without the seed stays up
    s1.cluster_port = port
    s1.start(s1.proc.port)
    wait_mesh([s1, s2, s3], timeout=30)
    await nc2.close(); await nc3.close()


async def test_cluster_name_mismatch_refused(nodes):
    s1 = nodes('jsnb', 's1', cluster='east')
    s2 = nodes('jsnb', 's2', cluster='west', routes=[s1.route_url])
    deadline = time.time() + 5
    while time.time() < deadline and ('does not match' not in s1.proc.log_text()
                                      or 'Cluster Name Conflict' not in s2.proc.log_text()): time.sleep(0.1)
    assert 'Rejecting connection, cluster name "west" does not match "east"' in s1.proc.log_text()
    assert 'Cluster Name Conflict' in s2.proc.log_text()
    assert (s1.peers(), s2.peers()) == (set(), set())
    time.sleep(2.5)                                                  # retried about once a second, not in a loop
    assert s1.proc.log_text().count('does not match') <= 5


async def test_route_authorization(nodes):
    def conf(routes=''):
        return ('cluster {\n name: c1\n listen: 127.0.0.1:-1\n authorization { user: ruser, password: "s3cret" }\n'
                f' routes: [{routes}]\n}}\nhttp: 127.0.0.1:-1\n')
    s1 = nodes('jsnb', 's1', config=conf())
    bad = nodes('jsnb', 'bad', routes=[f'nats-route://ruser:wrong@127.0.0.1:{s1.cluster_port}'])
    good = nodes('jsnb', 'good', config=conf(f'nats-route://ruser:s3cret@127.0.0.1:{s1.cluster_port}'))
    wait_mesh([s1, good])
    assert s1.peers() == {'good'} and bad.peers() == set()
    assert "Route Error 'Authorization Violation'" in bad.proc.log_text()
    # s3 is given only `good`; it learns of s1 from it and dials s1 with its own cluster credentials
    s3 = nodes('jsnb', 's3', config=conf(f'nats-route://ruser:s3cret@127.0.0.1:{good.cluster_port}'))
    wait_mesh([s1, good, s3])
    assert bad.peers() == set()


async def test_connect_urls_and_failover(nodes):
    s1, s2, s3 = three(nodes)
    raw = Raw(s1.proc.port, connect=None)
    info = json.loads(raw.info)
    assert info['cluster'] == 'c1'
    assert sorted(info['connect_urls']) == sorted(f'127.0.0.1:{s.proc.port}' for s in (s1, s2, s3))
    raw.close()
    reconnected = asyncio.Event()
    async def on_reconnect(): reconnected.set()
    nc = await connect(s2.url, allow_reconnect=True, reconnect_time_wait=0.2, max_reconnect_attempts=20,
                       reconnected_cb=on_reconnect, dont_randomize=True)
    assert sorted(str(u.netloc) for u in nc.servers) == sorted(f'127.0.0.1:{s.proc.port}' for s in (s1, s2, s3))
    watcher = await connect(s3.url)
    sub = await watcher.subscribe('after.failover')
    await settle(watcher)
    s2.kill()
    await asyncio.wait_for(reconnected.wait(), 20)
    assert nc.connected_url.port in (s1.proc.port, s3.proc.port)
    await nc.publish('after.failover', b'ok'); await nc.flush()
    assert (await sub.next_msg(timeout=5)).data == b'ok'
    await nc.close(); await watcher.close()


async def test_no_advertise(nodes):
    s1 = nodes('jsnb', 's1', extra=['--no_advertise'])
    s2 = nodes('jsnb', 's2', routes=[s1.route_url])
    wait_mesh([s1, s2])
    raw = Raw(s1.proc.port, connect=None)
    assert 'connect_urls' not in json.loads(raw.info)
    raw.close()


# ---------------------------------------------------------------- mixed clusters

@pytest.mark.parametrize('dialler', ['jsnb', 'nats-server'])
async def test_mixed_pair(nodes, dialler):
    "One jsnb and one nats-server, each way round: messages, headers, requests and queue groups cross."
    acceptor = nodes('nats-server' if dialler == 'jsnb' else 'jsnb', 'acc')
    dial = nodes(dialler, 'dial', routes=[acceptor.route_url])
    wait_mesh([acceptor, dial])
    js, ref = (dial, acceptor) if dialler == 'jsnb' else (acceptor, dial)
    ours, theirs = js.get('/routez')['routes'][0], ref.get('/routez')['routes'][0]
    assert list(ours) == list(theirs)                                # the reference's fields, in its order
    assert (ours['did_solicit'], theirs['did_solicit']) == ((True, False) if dialler == 'jsnb' else (False, True))
    assert (ours['remote_name'], theirs['remote_name']) == (ref.name, js.name)
    vj, vr = js.get('/varz'), ref.get('/varz')
    assert set(vj['cluster']) - {'urls'} <= set(vr['cluster']) and vj['cluster']['name'] == vr['cluster']['name'] == 'c1'
    assert ('urls' in vj['cluster'], 'urls' in vr['cluster']) == ((True, False) if dialler == 'jsnb' else (False, True))
    assert (vj['routes'], vr['remotes']) == (1, 1)
    both_urls = sorted(f'127.0.0.1:{n.proc.port}' for n in (js, ref))         # each lists itself and its peer
    assert (sorted(vj['connect_urls']), sorted(vr['connect_urls'])) == (both_urls, both_urls)
    for x, y in ((acceptor, dial), (dial, acceptor)):
        a, b = await connect(x.url), await connect(y.url)
        sub = await b.subscribe('mix.>')
        async def echo(m): await m.respond(b're:' + m.data)
        await b.subscribe('mix.svc', cb=echo)
        got = {0: 0, 1: 0}
        for i, nc in enumerate((a, b)):
            async def cb(m, i=i): got[i] += 1
            await nc.subscribe('mix.q', queue='g', cb=cb)
        await settle(a, b)
        await a.publish('mix.h', b'data', headers={'K': 'v', 'Nats-Msg-Id': '1'})
        m = await sub.next_msg(timeout=5)
        assert (m.subject, m.data, m.headers) == ('mix.h', b'data', {'K': 'v', 'Nats-Msg-Id': '1'})
        assert (await a.request('mix.svc', b'x', timeout=5)).data == b're:x'
        for i in range(400): await a.publish('mix.q', b'%d' % i)
        await a.flush()
        await asyncio.sleep(0.7)
        assert sum(got.values()) == 400 and min(got.values()) > 80, got
        with pytest.raises(NoRespondersError): await a.request('nomix.none', b'', timeout=5)
        await a.close(); await b.close()


@pytest.mark.parametrize('kinds', [('nats-server', 'nats-server', 'jsnb'), ('jsnb', 'nats-server', 'nats-server'),
                                   ('nats-server', 'jsnb', 'jsnb'), ('jsnb', 'jsnb', 'nats-server')])
async def test_mixed_three(nodes, kinds):
    "Three servers of both kinds from one seed: gossip through either kind makes the full mesh, and traffic flows everywhere."
    servers = three(nodes, kinds)
    ncs = [await connect(s.url) for s in servers]
    subs = [await nc.subscribe('all') for nc in ncs]
    got = [0, 0, 0]
    for i, nc in enumerate(ncs):
        async def cb(m, i=i): got[i] += 1
        await nc.subscribe('qall', queue='g', cb=cb)
    await settle(*ncs, pause=0.5)
    for i, nc in enumerate(ncs): await nc.publish('all', b'%d' % i)
    for i in range(300): await ncs[i % 3].publish('qall', b'x')
    for nc in ncs: await nc.flush()
    for s in subs: assert sorted([(await s.next_msg(timeout=5)).data for _ in range(3)]) == [b'0', b'1', b'2']
    await asyncio.sleep(0.7)
    assert sum(got) == 300 and min(got) > 40, got
    for nc in ncs: await nc.close()


async def test_mixed_interest_follows_clients(nodes):
    "The reference withdraws the interest of a jsnb client that leaves, and jsnb that of a reference client."
    ref = nodes('nats-server', 'ref')
    js = nodes('jsnb', 'js', routes=[ref.route_url])
    wait_mesh([ref, js])
    for sub_node, pub_node in ((js, ref), (ref, js)):
        pub = await connect(pub_node.url)
        raw = Raw(sub_node.proc.port)
        raw.send(b'SUB gone.x 1\r\nPING\r\n'); raw.until(b'PONG')
        await wait_interest(pub_node, 'gone.x')
        raw.close()
        await wait_interest(pub_node, 'gone.x', present=False)
        with pytest.raises(NoRespondersError): await pub.request('gone.x', b'', timeout=5)
        await pub.close()


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_queue_member_choice_like_reference(nodes, kind):
    "A message published on a server goes to a member drawn across the cluster, not always to the local one (as the reference draws)."
    a = nodes(kind, 'a')
    b = nodes(kind, 'b', routes=[a.route_url])
    wait_mesh([a, b])
    na, nb = await connect(a.url), await connect(b.url)
    got = [0, 0]
    async def local(m): got[0] += 1
    async def remote(m): got[1] += 1
    await na.subscribe('pick', queue='g', cb=local); await nb.subscribe('pick', queue='g', cb=remote)
    await settle(na, nb)
    for i in range(1000): await na.publish('pick', b'')
    await na.flush(); await asyncio.sleep(1)
    assert sum(got) == 1000 and min(got) > 300, got
    await na.close(); await nb.close()


async def test_ports_file_lists_the_cluster_port(nodes, tmp_path):
    s = nodes('jsnb', 's1', extra=['--ports_file_dir', str(tmp_path)])
    ports = s.proc.ports_file(tmp_path)[1]
    assert ports['cluster'] == [f'nats://127.0.0.1:{s.cluster_port}']


async def test_a_route_that_stops_reading_is_cut_off(nodes):
    "A peer that takes nothing is cut off like a slow consumer once max_pending is passed; clients are not held up."
    s = nodes('jsnb', 's1', config='max_pending: 1MB\ncluster { name: c1, listen: 127.0.0.1:-1 }\nhttp: 127.0.0.1:-1\n')
    import socket
    peer = socket.create_connection(('127.0.0.1', s.cluster_port))
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peer.sendall(b'CONNECT {"echo":true,"verbose":false,"pedantic":false,"headers":true,"name":"NSTALL","cluster":"c1"}\r\n'
                 b'INFO {"server_id":"NSTALL","server_name":"stall","version":"2.15.1","proto":2,"host":"127.0.0.1","port":1,'
                 b'"headers":true,"max_payload":1048576,"cluster":"c1"}\r\nRS+ $G flood\r\n')
    deadline = time.time() + 5
    while time.time() < deadline and s.peers() != {'stall'}: time.sleep(0.05)
    pub = await connect(s.url)
    for i in range(10000): await pub.publish('flood', b'x' * 2048)
    await pub.flush()
    deadline = time.time() + 15
    while time.time() < deadline and s.peers(): time.sleep(0.1)
    assert s.peers() == set()
    assert 'Slow Consumer Detected' in s.proc.log_text()
    other = await connect(s.url)                                              # the server itself carries on
    sub = await other.subscribe('after'); await other.flush()
    await pub.publish('after', b'ok'); await pub.flush()
    assert (await sub.next_msg(timeout=5)).data == b'ok'
    peer.close(); await pub.close(); await other.close()


async def test_jsnb_cluster_command(tmp_path):
    "`jsnb cluster --size 3`: three servers in a mesh, logs prefixed by server name, all stopped together."
    import subprocess, sys, signal, socket
    for attempt in range(3):    # the command picks free ports before its servers bind them: a test beside it may take one
        p = subprocess.Popen([sys.executable, '-c', 'import sys; from jsnb.cli import jsnb_main; sys.exit(jsnb_main())',
                              'cluster', '--size', '3', '--name', 'dev'], stdout=subprocess.PIPE, text=True)
        urls = [p.stdout.readline().split()[1] for _ in range(3)]
        lines, deadline = [], time.time() + 20
        while time.time() < deadline and sum('Server is ready' in l for l in lines) < 3 and p.poll() is None:
            lines.append(p.stdout.readline())
        if attempt < 2 and p.poll() is not None and any('address already in use' in l for l in lines + p.stdout.readlines()):
            p.stdout.close(); continue
        break
    try:
        assert {l.split()[0] for l in lines if 'Server is ready' in l} == {'[dev-1]', '[dev-2]', '[dev-3]'}, lines
        ncs = [await connect(u) for u in urls]
        sub = await ncs[2].subscribe('hello')
        deadline = time.time() + 10
        while time.time() < deadline:
            await ncs[2].flush()
            try: await ncs[0].request('hello', b'', timeout=0.3)
            except NoRespondersError: await asyncio.sleep(0.1); continue
            except NatsTimeout: break                          # interest arrived: someone got it, nobody answered
        await ncs[0].publish('hello', b'world'); await ncs[0].flush()
        msgs = [await sub.next_msg(timeout=5) for _ in range(2)]
        assert msgs[-1].data == b'world'
        for nc in ncs: await nc.close()
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0
        p.stdout.close()
    for u in urls:                                             # every server is gone
        with pytest.raises(OSError): socket.create_connection(('127.0.0.1', int(u.rsplit(':', 1)[1])), timeout=1).close()


def test_jsnb_cluster_ends_with_a_killed_server():
    "`jsnb cluster`: a server killed ends the command with that server's status (128 + 9), says which, and stops the others."
    import subprocess, sys, signal, socket
    p = subprocess.Popen([sys.executable, '-c', 'import sys; from jsnb.cli import jsnb_main; sys.exit(jsnb_main())',
                          'cluster', '--size', '2', '--name', 'dead'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        urls = [p.stdout.readline().split()[1] for _ in range(2)]
        ports = [int(u.rsplit(':', 1)[1]) for u in urls]
        deadline = time.time() + 60
        while time.time() < deadline:                     # the second server accepts connections
            try: socket.create_connection(('127.0.0.1', ports[1]), timeout=1).close(); break
            except OSError: time.sleep(0.2)
        pid = int(subprocess.run(['pgrep', '-f', '--', '-n dead-2'], capture_output=True, text=True).stdout.split()[0])
        os.kill(pid, signal.SIGKILL)
        assert p.wait(30) == 137
        assert 'jsnb cluster: dead-2 ended (signal 9); stopping the others' in p.stderr.read()
    finally:
        if p.poll() is None: p.kill()
        p.stdout.close(); p.stderr.close()
    with pytest.raises(OSError): socket.create_connection(('127.0.0.1', ports[0]), timeout=1).close()


_DENY_ONE = '''authorization { users = [
  {user: admin, password: a}
  {user: app, password: p, permissions: {subscribe: {allow: ">", deny: "jobs.secret"}}}
] }
cluster { name: c1, listen: "127.0.0.1:-1" %s }
'''


def _login(port, user, pw, then: bytes) -> Raw:
    r = Raw(port, connect=b'CONNECT {"verbose":false,"pedantic":false,"user":"%s","pass":"%s"}\r\n' % (user, pw) + then + b'PING\r\n')
    assert r.until(b'PONG').endswith(b'PONG\r\n')
    return r


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
@pytest.mark.parametrize('where', ['same server', 'other server'])
def test_queue_member_refused_by_permissions_passes_the_message_on(nodes, kind, where):
    """A queue group member whose permissions deny a message's subject at delivery (a wildcard subscription that
    covers a denied subject) does not lose the message: another member of the group gets it, on the same server
    of a cluster or on another one, as the reference does."""
    a = nodes(kind, 'a', config=_DENY_ONE % '')
    b = nodes(kind, 'b', config=_DENY_ONE % f', routes: ["{a.route_url}"]') if where == 'other server' else a
    if b is not a: wait_mesh([a, b])
    refused = _login(a.proc.port, b'app', b'p', b'SUB jobs.* g 1\r\n')
    taker = _login(b.proc.port, b'admin', b'a', b'SUB jobs.* g 1\r\n')
    pub = _login(a.proc.port, b'admin', b'a', b'')
    if b is not a: asyncio.run(wait_interest(a, 'jobs.*'))
    pub.send(b''.join(b'PUB jobs.secret 1\r\n%d\r\nPUB jobs.open 1\r\n%d\r\n' % (i % 10, i % 10) for i in range(40)) + b'PING\r\n')
    assert pub.until(b'PONG').endswith(b'PONG\r\n')
    got = [m.subject for m in taker.msgs(80, timeout=3)] + [m.subject for m in refused.msgs(80, timeout=1)]
    assert got.count(b'jobs.secret') == 40, got.count(b'jobs.secret')     # every one, to the member that may take it
    assert got.count(b'jobs.open') == 40
    for r in (refused, taker, pub): r.close()
