"""Where a JetStream cluster listens and how its servers find each other, on jsnb and on nats-server with the same
configuration: Raft rides the routes, so a server listens on exactly the client, route and monitoring ports its
configuration names, each on its configured host; and servers that listen on every interface but advertise
addresses of their own (127.0.0.2, 127.0.0.3, 127.0.0.4 stand for three machines) form a cluster that replicates."""
import asyncio, json, shutil, tempfile, time, urllib.request
from pathlib import Path
import pytest
import nats
from nats.errors import TimeoutError as NatsTimeout, NoRespondersError
from conftest import ServerProc
from jsclusters import JSCluster, request, publish_acked, free_ports
from test_internal_security_reference import listening

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']


async def _replicate(url: str, stream: str, n: int = 20) -> dict:
    "Create an R3 file stream through `url` and publish `n` acknowledged messages to it; its info."
    nc = await nats.connect(url)
    try:
        deadline = time.time() + 60
        while True:
            try: r = await request(nc, f'$JS.API.STREAM.CREATE.{stream}', {'name': stream, 'subjects': [f'{stream}.>'], 'num_replicas': 3}, timeout=5)
            except (NatsTimeout, NoRespondersError): r = {'error': 'no answer'}
            if 'error' not in r or time.time() > deadline: break
            await asyncio.sleep(0.5)                 # (the meta group may still be electing its leader)
        assert 'error' not in r, r
        js = nc.jetstream()
        for k in range(n): await publish_acked(js, f'{stream}.x', b'm%d' % k, time.time() + 30)
        return await request(nc, f'$JS.API.STREAM.INFO.{stream}')
    finally: await nc.close()


@pytest.mark.parametrize('kind', KINDS)
def test_cluster_listens_only_on_its_configured_ports(kind):
    "A 3-server cluster with an R3 stream: each server listens on its client, route and monitoring ports, on 127.0.0.1, and on nothing else."
    if shutil.which('ss') is None: pytest.skip('ss (iproute2) not installed')
    c = JSCluster(kind).start()
    try:
        c.wait_meta()
        info = asyncio.run(_replicate(c.url(0), 'LISTEN'))
        assert len(info['cluster']['replicas']) == 2
        for i, p in enumerate(c.procs):
            want = sorted([('127.0.0.1', c.client[i]), ('127.0.0.1', c.route[i]), ('127.0.0.1', c.http[i])])
            assert listening(p.proc.pid) == want, (kind, i)
    finally: c.stop()


def _cross_host_config(i: int, hosts: list[str], route: list[int], http: list[int], store: Path) -> str:
    "Server `i` listens on every interface (routes, clients) and advertises `hosts[i]`; it dials the others at their addresses."
    routes = ', '.join(f'"nats-route://ru:rp@{hosts[j]}:{route[j]}"' for j in range(len(hosts)) if j != i)
    return (f'server_name: x{i}\nhost: 0.0.0.0\nhttp: 127.0.0.1:{http[i]}\n'
            f'jetstream {{ store_dir: "{store}" }}\n'
            f'cluster {{ name: xh, listen: 0.0.0.0:{route[i]}, advertise: "{hosts[i]}:{route[i]}", '
            f'authorization {{ user: ru, password: rp }}, routes: [{routes}] }}\n')


@pytest.mark.parametrize('kind', KINDS)
def test_cross_host_cluster_replicates(kind):
    """Servers on 0.0.0.0 advertising 127.0.0.2, .3, .4 (three machines): the routes go to the advertised addresses, the
    cluster forms, and an R3 stream created through one server has its messages on all three."""
    hosts = ['127.0.0.2', '127.0.0.3', '127.0.0.4']
    ports = free_ports(9)
    client, route, http = ports[:3], ports[3:6], ports[6:]
    root = Path(tempfile.mkdtemp(prefix=f'xhost-{kind}-'))
    procs = []
    try:
        for i in range(3):
            d = root / f'x{i}'; d.mkdir()
            procs.append(ServerProc(kind, [], _cross_host_config(i, hosts, route, http, d / 'store'), workdir=str(d),
                                    isolate_store=False).start(client[i]))
        info = asyncio.run(_replicate(f'nats://{hosts[1]}:{client[1]}', 'XHOST'))
        assert sorted([info['cluster']['leader']] + [r['name'] for r in info['cluster']['replicas']]) == ['x0', 'x1', 'x2']
        deadline = time.time() + 30
        while time.time() < deadline:          # every server stored the 20 messages
            counts = []
            for i in range(3):
                with urllib.request.urlopen(f'http://127.0.0.1:{http[i]}/jsz', timeout=5) as r: counts.append(json.load(r)['messages'])
            if counts == [20, 20, 20]: break
            time.sleep(0.2)
        assert counts == [20, 20, 20], counts
        for i, p in enumerate(procs):          # each server's routes reach the other two (nats-server pools several per peer)
            with urllib.request.urlopen(f'http://127.0.0.1:{http[i]}/routez', timeout=5) as r: rz = json.load(r)
            assert {x['remote_name'] for x in rz['routes']} == {f'x{j}' for j in range(3) if j != i}
    finally:
        for p in procs: p.stop()
