"""A cluster as clients meet it while it starts and as a server leaves, on jsnb and on the reference nats-server: a
server takes clients only once its configured routes are up, so the first `INFO` a client gets names every server
already routed (no "discovered" server that was there all along); a new JetStream cluster asked at once for a
replicated stream gives it, as a client that tries a few times (as libnats' own tests do) expects; and a server that
shuts down sends its clients no `INFO` dropping the servers they are about to reconnect to."""
import asyncio, json, signal, time, urllib.request
import pytest
import nats
from nats.errors import TimeoutError as NatsTimeout
from conftest import ServerProc
from jsclusters import JSCluster, free_ports

pytestmark = pytest.mark.reference
KINDS = ['jsnb', 'nats-server']


def _seed_and_two(kind):
    """A seed without routes (monitored), then two servers that dial it, each started once the one before answers;
    returned once the seed has both routes (a dialling server answering does not mean the seed has its route yet)."""
    client, route, (monitor,) = free_ports(3), free_ports(3), free_ports(1)
    procs = []
    try:
        for i in range(3):
            args = ['-a', '127.0.0.1', '-cluster', f'nats://127.0.0.1:{route[i]}', '-cluster_name', 'abc']
            args += ['-routes', f'nats://127.0.0.1:{route[0]}'] if i else ['-m', str(monitor)]
            procs.append(ServerProc(kind, args).start(client[i]))
        for _ in range(200):
            if len(_routed(monitor)) == 2: break
            time.sleep(0.05)
        assert len(_routed(monitor)) == 2, _routed(monitor)
    except BaseException:
        for p in procs: p.stop()
        raise
    return procs


def _routed(monitor: int) -> set:
    "The servers the seed has a route with, by name (the reference may pool several connections per server)."
    with urllib.request.urlopen(f'http://127.0.0.1:{monitor}/routez', timeout=5) as r:
        return {x.get('remote_name') or x['remote_id'] for x in json.load(r).get('routes') or ()}


@pytest.mark.parametrize('kind', KINDS)
def test_first_info_names_the_whole_cluster(kind):
    procs = _seed_and_two(kind)
    try:
        async def go():
            discovered = []
            async def found(): discovered.append(1)
            nc = await nats.connect(procs[0].url, discovered_server_cb=found)
            urls = sorted(nc._server_info.get('connect_urls') or ())
            await nc.flush(); await asyncio.sleep(0.5)
            await nc.close()
            return urls, discovered
        urls, discovered = asyncio.run(go())
        assert urls == sorted(f'127.0.0.1:{p.port}' for p in procs)
        assert discovered == []
    finally:
        for p in procs: p.stop()


async def _create_like_libnats(url: str) -> dict:
    "STREAM.CREATE of an R3 stream at once, tried up to 10 times 100 ms apart (each try waits 5 s for its answer)."
    nc = await nats.connect(url)
    try:
        answer = None
        for _ in range(10):
            try:
                m = await nc.request('$JS.API.STREAM.CREATE.TEST', json.dumps(
                    {'name': 'TEST', 'subjects': ['foo'], 'num_replicas': 3}).encode(), timeout=5)
                answer = json.loads(m.data)
                if 'error' not in answer: return answer
            except NatsTimeout: answer = 'timeout'
            await asyncio.sleep(0.1)
        return answer
    finally: await nc.close()


@pytest.mark.parametrize('kind', KINDS)
def test_new_cluster_creates_a_stream_when_asked_at_once(kind):
    c = JSCluster(kind, open=True)
    try:
        c.start()
        answer = asyncio.run(_create_like_libnats(c.url(0)))
        assert isinstance(answer, dict) and 'error' not in answer, answer
        assert answer['config']['num_replicas'] == 3
    finally: c.stop()


@pytest.mark.parametrize('kind', KINDS)
def test_a_stopping_server_does_not_take_the_others_off_its_clients_lists(kind):
    """A client that takes INFO updates, on the seed of three servers, sees every INFO up to the seed's exit (SIGINT):
    the last one still names the two others, so the client has somewhere to reconnect to."""
    procs = _seed_and_two(kind)
    try:
        async def go():
            r, w = await asyncio.open_connection('127.0.0.1', procs[0].port)
            w.write(b'CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\nPING\r\n'); await w.drain()
            buf = b''
            while b'PONG\r\n' not in buf: buf += await asyncio.wait_for(r.read(65536), 10)
            procs[0].proc.send_signal(signal.SIGINT)
            while chunk := await asyncio.wait_for(r.read(65536), 10): buf += chunk
            w.close()
            return [json.loads(line[5:]) for line in buf.split(b'\r\n') if line.startswith(b'INFO ')]
        infos = asyncio.run(go())
        assert sorted(infos[-1].get('connect_urls') or ()) == sorted(f'127.0.0.1:{p.port}' for p in procs)
    finally:
        for p in procs: p.stop()
