"""Lame duck mode and the other signals, against jsnb and the reference: `SIGUSR2` on one server of a
cluster tells its clients (`ldm`, the other servers only), makes the peer stop advertising it, closes the
clients after the grace period and stops the server; `SIGHUP` and `SIGUSR1` leave it running."""
import asyncio, json, os, signal, socket, time
import pytest
import nats
from test_routes_reference import Node, wait_mesh

pytestmark = pytest.mark.reference

LDM_CONF = 'lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n'


def cluster_conf(routes=()):
    r = ', '.join(f'"{u}"' for u in routes)
    return LDM_CONF + f'cluster {{ name: c1, listen: "127.0.0.1:-1", routes: [{r}] }}\n'


@pytest.fixture
def pair():
    started = []
    def make(kind):
        a = Node(kind, 'a', config=cluster_conf()).start(); started.append(a)
        b = Node(kind, 'b', config=cluster_conf([a.route_url])).start(); started.append(b)
        wait_mesh([a, b]); return a, b
    yield make
    for n in started: n.stop()


def watcher(port):
    "A raw client that takes `INFO` updates (protocol 1); read them with `read_for`."
    s = socket.create_connection(('127.0.0.1', port), timeout=5)
    s.sendall(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
    return s


def infos(data: bytes) -> list[dict]:
    return [json.loads(l[5:]) for l in data.split(b'\r\n') if l.startswith(b'INFO ')]


def read_for(s, seconds):
    out, end = b'', time.time() + seconds
    s.settimeout(0.1)
    while time.time() < end:
        try: d = s.recv(65536)
        except socket.timeout: continue
        if not d: break
        out += d
    return out


@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
async def test_lame_duck_in_a_cluster(pair, kind):
    a, b = pair(kind)
    url_b = f'127.0.0.1:{b.proc.port}'
    told, closed = asyncio.Event(), asyncio.Event()
    async def ldm(): told.set()
    async def gone(): closed.set()
    nc = await nats.connect(a.url, lame_duck_mode_cb=ldm, closed_cb=gone, allow_reconnect=False)
    watch_a, watch_b = watcher(a.proc.port), watcher(b.proc.port)
    await asyncio.sleep(0.5); read_for(watch_a, 0.2); read_for(watch_b, 0.2)
    a.proc.proc.send_signal(signal.SIGUSR2)
    await asyncio.wait_for(told.wait(), 5)
    got_a, got_b = infos(read_for(watch_a, 0.5)), infos(read_for(watch_b, 0.5))
    assert [(i.get('ldm'), i.get('connect_urls')) for i in got_a] == [(True, [url_b])]
    assert [('ldm' in i, i.get('connect_urls')) for i in got_b] == [(False, [url_b])]
    with pytest.raises(OSError): socket.create_connection(('127.0.0.1', a.proc.port), timeout=1)
    await asyncio.wait_for(closed.wait(), 10)                    # after the 1 s grace period
    assert a.proc.proc.wait(15) == 0
    log = a.proc.log_text()
    for line in ('Trapped "user defined signal 2" signal', 'Entering lame duck mode, stop accepting new clients',
                 'Closing existing clients'):
        assert line in log, (line, log)
    assert b.get('/varz')['connect_urls'] == [url_b]
    watch_a.close(); watch_b.close(); await nc.close()


@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
async def test_lame_duck_alone(kind, tmp_path):
    "Without a cluster: the `INFO` says `ldm` and has no other server to offer; SIGTERM during it does not cut it short."
    n = Node(kind, 'solo', config=LDM_CONF + 'cluster { name: c1, listen: "127.0.0.1:-1" }\n').start()
    try:
        told = asyncio.Event()
        async def ldm(): told.set()
        nc = await nats.connect(n.url, lame_duck_mode_cb=ldm, allow_reconnect=False)
        w = watcher(n.proc.port); await asyncio.sleep(0.3); read_for(w, 0.2)
        n.proc.proc.send_signal(signal.SIGUSR2)
        await asyncio.wait_for(told.wait(), 5)
        assert [(i.get('ldm'), 'connect_urls' in i) for i in infos(read_for(w, 0.3))] == [(True, False)]
        n.proc.proc.send_signal(signal.SIGTERM)                  # ignored in lame duck mode
        await asyncio.sleep(0.3)
        assert n.proc.proc.poll() is None
        assert n.proc.proc.wait(15) == 0
        w.close(); await nc.close()
    finally: n.stop()


@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
def test_hup_and_usr1_keep_serving(kind, tmp_path):
    "SIGHUP (reload) and SIGUSR1 (reopen the log) leave the server running; the log is reopened after rotation."
    n = Node(kind, 'sig', config=LDM_CONF + 'cluster { name: c1, listen: "127.0.0.1:-1" }\n').start()
    try:
        log = n.proc.log
        os.rename(log, str(log) + '.1')
        n.proc.proc.send_signal(signal.SIGUSR1)
        deadline = time.time() + 5
        while time.time() < deadline and not log.exists(): time.sleep(0.05)
        assert 'File log re-opened' in log.read_text()
        n.proc.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert n.proc.proc.poll() is None
        assert 'Trapped "hangup" signal' in log.read_text()
        socket.create_connection(('127.0.0.1', n.proc.port), timeout=2).close()
    finally: n.stop()


def _exit_seen(proc, out: dict):
    "Wait for the process in a thread and note when it exited (the harness's view: `wait()` returned)."
    import threading
    def wait(): proc.wait(); out['exit'] = time.perf_counter()
    t = threading.Thread(target=wait, daemon=True); t.start(); return t


async def _reconnected_before_exit(pair, kind) -> bool:
    "One round: SIGTERM on the server a client is on; whether the client was on the other server before the process exited."
    a, b = pair(kind)
    when = {}
    async def reconnected(): when.setdefault('reconnected', time.perf_counter())
    nc = await nats.connect(servers=[a.url, b.url], dont_randomize=True, reconnect_time_wait=0,
                            max_reconnect_attempts=-1, reconnected_cb=reconnected)
    try:
        await nc.flush()
        waiter = _exit_seen(a.proc.proc, when)
        a.proc.proc.send_signal(signal.SIGTERM)
        for _ in range(200):
            if 'reconnected' in when and 'exit' in when: break
            await asyncio.sleep(0.05)
        waiter.join(10)
        assert 'exit' in when and 'reconnected' in when, when
        return when['reconnected'] < when['exit']
    finally:
        await nc.close(); a.stop(); b.stop()


async def test_sigterm_exits_before_clients_are_elsewhere(pair):
    """SIGTERM on the server a client is on: the process exits as soon as it has closed its clients, before a client
    that reconnects at once is on the other server of the cluster. A harness that stops a server and then waits for
    the reconnection (as the newest nats.py client's own tests do) would otherwise wait for one that happened
    already. Counted over rounds, alternating the servers, and set against the reference's count in the same run
    (on a busy machine the reference's client sometimes wins the race too), not timed."""
    rounds, early = 5, {'jsnb': 0, 'nats-server': 0}
    for _ in range(rounds):
        for kind in early: early[kind] += await _reconnected_before_exit(pair, kind)
    assert early['jsnb'] <= early['nats-server'] + 2, early
