"""`/healthz` as nats-server 2.15.1 answers it: the same HTTP status and the same JSON (or plain-text refusal) for the
same query, on one server with JetStream on or off, and in a 3-server cluster, where a restarted server says `ok`
only once it has caught up (a meta leader known, its replica of a stream holding what the others hold)."""
import asyncio, json, time, urllib.error, urllib.request
import pytest
import nats
from conftest import ServerProc
from jsclusters import JSCluster, free_ports, publish_acked

pytestmark = pytest.mark.reference


def get(port: int, path: str) -> tuple[int, object]:
    "GET `path` on monitoring port `port`: (HTTP status, the body decoded as JSON, or as text when it is not)."
    try:
        with urllib.request.urlopen(f'http://127.0.0.1:{port}{path}', timeout=5) as r: status, body = r.status, r.read()
    except urllib.error.HTTPError as e: status, body = e.code, e.read()
    try: return status, json.loads(body)
    except ValueError: return status, body.decode()


QUERIES = ['', '?js-enabled-only=true', '?js-server-only=true', '?details=true', '?js-meta-only=true', '?js-enabled=1',
           '?js-enabled-only=foo', '?details=maybe', '?stream=S', '?consumer=C', '?stream=S&details=true',
           '?account=%24G', '?account=nope', '?account=nope&details=true', '?account=%24G&stream=S',
           '?account=%24G&stream=S&consumer=C', '?account=%24G&stream=S&consumer=X', '?account=%24G&stream=Z&details=true',
           '?account=%24G&stream=S&consumer=X&details=1', '?account=%24G&stream=Z&consumer=C']


def _answers(kind: str, tmp_path, js: bool, setup=None, broken: bool = False) -> dict:
    "Every query's answer from a server of `kind` (JetStream on or off); `setup(url)` runs first; `broken`: restarted with a stream folder it cannot read."
    http, = free_ports(1)
    sd = tmp_path / kind
    s = ServerProc(kind, (['-js', '-sd', str(sd)] if js else []) + ['-m', str(http)]).start()
    try:
        if setup: asyncio.run(setup(s.url))
        if broken:
            s.stop()
            (sd / 'jetstream' / '$G' / 'streams' / 'BROKEN').mkdir(parents=True)
            s.start()
        return {q: get(http, '/healthz' + q) for q in QUERIES}
    finally: s.stop()


async def _stream_and_consumer(url: str):
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name='S', subjects=['s.>'])
    await js.publish('s.a', b'x')
    await js.add_consumer('S', durable_name='C', ack_policy='explicit')
    await nc.close()


@pytest.mark.parametrize('js,setup,broken', [(False, None, False), (True, None, False), (True, _stream_and_consumer, False),
                                             (True, _stream_and_consumer, True)],
                         ids=['no-jetstream', 'empty', 'stream-and-consumer', 'unrecovered-stream'])
def test_single_server_healthz_matches_reference(tmp_path, js, setup, broken):
    ref = _answers('nats-server', tmp_path, js, setup, broken)
    ours = _answers('jsnb', tmp_path, js, setup, broken)
    assert {q: ours[q] for q in QUERIES} == {q: ref[q] for q in QUERIES}
    if setup is not None and not broken: assert ref['?account=%24G&stream=S&consumer=C'] == (200, {'status': 'ok'})
    if broken: assert ref[''][0] == 503 and 'BROKEN' in ref[''][1]['error']


def _wait_ok(c: JSCluster, i: int, timeout: float = 60) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if get(c.http[i], '/healthz')[0] == 200: return time.time()
        except OSError: pass
        time.sleep(0.02)
    raise TimeoutError(f'n{i} never healthy: {get(c.http[i], "/healthz?details=true")}')


N = 3000


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
def test_restarted_server_is_not_healthy_until_caught_up(kind):
    """A server of a 3-server cluster is stopped while an R3 stream takes `N` messages, then started again: the first
    `ok` from its `/healthz` comes only once it knows the meta leader and its replica holds all `N` messages (its own
    `/jsz?streams=true`). Before that it answers 503 with the reference's reasons (`still recovering meta layer`, then
    `group node unhealthy`). The reference usually has the messages by then too, but not always: the stream group's
    check passes before its first contact with the leader. jsnb waits for that contact."""
    c = JSCluster(kind)
    try:
        c.start(); c.wait_meta()

        async def setup():
            nc = await nats.connect(c.url(0))
            js = nc.jetstream()
            for k in range(20):
                try: await js.add_stream(name='HZ', subjects=['hz.>'], num_replicas=3); break
                except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError): await asyncio.sleep(0.5)
            await js.add_consumer('HZ', durable_name='D', ack_policy='explicit', num_replicas=3)
            await nc.close()
        asyncio.run(setup())
        for i in range(3): _wait_ok(c, i)
        c.procs[2].stop()

        async def fill():
            nc = await nats.connect(c.url(0))
            js = nc.jetstream()
            deadline = time.time() + 120
            for k in range(0, N, 100):
                await asyncio.gather(*(publish_acked(js, 'hz.x', b'%d' % q, deadline, headers={'Nats-Msg-Id': str(q)})
                                       for q in range(k, k + 100)))
            await nc.close()
        asyncio.run(fill())
        c.start(2)
        seen = []
        deadline = time.time() + 60
        while time.time() < deadline:
            try: st, body = get(c.http[2], '/healthz?details=true')
            except OSError: time.sleep(0.02); continue
            if st == 200: break
            seen.append((st, body))
            time.sleep(0.02)
        else: raise TimeoutError(f'never healthy: {seen[-3:]}')
        jsz = get(c.http[2], '/jsz?streams=true')[1]
        assert jsz.get('meta_cluster', {}).get('leader'), jsz.get('meta_cluster')
        here = {d['name']: d['state'] for a in jsz.get('account_details') or () for d in a.get('stream_detail') or ()}
        if kind == 'jsnb': assert here.get('HZ', {}).get('last_seq') == N, here.get('HZ')   # (the reference, now and then, not yet)
        assert all(s == 503 and b['status'] == 'error' and b['errors'] for s, b in seen), seen[-3:]
        assert seen, 'a restarted server answered ok at once'
    finally: c.stop()
