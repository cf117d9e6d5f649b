"""Three-server JetStream clusters on loopback, of jsnb or of the reference nats-server, for the clustering tests:
the same configuration file shape for both (server names n0..n2, route credentials, every route listed)."""
import asyncio, hashlib, json, socket, tempfile, time, urllib.request
import nats
from nats.errors import TimeoutError as NatsTimeout, NoRespondersError
from nats.js.errors import NoStreamResponseError
from pathlib import Path
from conftest import ServerProc
from faultproxy import FaultProxy

USER, PASSWORD = 'ru', 'rp'


async def request(nc, subject: str, body=None, timeout: float = 10) -> dict:
    "An API request with `body` as JSON (None: empty); the decoded answer."
    m = await nc.request(subject, json.dumps(body).encode() if body is not None else b'', timeout=timeout)
    return json.loads(m.data)


async def publish_acked(js, subject: str, data: bytes, deadline: float, headers=None, more: tuple = ()):
    """Publish until acknowledged (a publish that times out was not acknowledged, and is sent again; it may have been
    stored, so a test that counts sequences gives a message id, and the stream drops the second copy). `more`: other
    exceptions that mean "not acknowledged yet" (nats-server raises some just after a stream is created). No responders
    (`NoStreamResponseError` from a JetStream publish): the servers do not know the stream's new leader yet."""
    while time.time() < deadline:
        try: return await js.publish(subject, data, timeout=1, headers=headers)
        except (NatsTimeout, NoRespondersError, NoStreamResponseError, asyncio.TimeoutError, *more): await asyncio.sleep(0.1)
    raise TimeoutError(f'{data!r} never acknowledged')


def free_ports(n: int) -> list[int]:
    "`n` ports the OS has free on loopback now."
    socks = [socket.socket() for _ in range(n)]
    for s in socks: s.bind(('127.0.0.1', 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    return ports


def free_ladder(rungs: int, width: int, step: int = 10) -> int:
    """A base port such that `base + step * i + j` (i < `rungs`, j < `width`) are all free on loopback now, for a command
    that counts ports up from the ones it is given. Drawn below the kernel's range for outgoing connections, so that no
    client socket of another test takes one of them between this check and the server's bind."""
    import random
    rng = Path('/proc/sys/net/ipv4/ip_local_port_range')
    lo = int(rng.read_text().split()[0]) if rng.exists() else 32768
    for _ in range(200):
        base = random.randrange(10000, lo - rungs * step - width)
        socks = []
        try:
            for p in (base + step * i + j for i in range(rungs) for j in range(width)):
                socks.append(socket.socket()); socks[-1].bind(('127.0.0.1', p))
            return base
        except OSError: pass
        finally:
            for s in socks: s.close()
    raise RuntimeError('no free run of ports below the ephemeral range')


class JSCluster:
    "`n` servers of `kind` (jsnb or nats-server) with JetStream, routed to each other (with credentials unless `open`)."
    def __init__(self, kind: str, n: int = 3, name: str = 'c1', open: bool = False, no_js: tuple = (), tags: dict | None = None,
                 partitions: bool = False, env: dict | None = None, system: bool = False):
        self.kind, self.n, self.name, self.open, self.no_js = kind, n, name, open, no_js     # no_js: servers without JetStream
        self.system = system     # a system account SYS with user sys/sys (clients without credentials are `g`, in `$G`)
        self.env = env or {}                                                                 # variables for every server
        self.tags = tags or {}                                                               # server -> its server_tags
        ports = free_ports(3 * n)
        self.client, self.route, self.http = ports[:n], ports[n:2 * n], ports[2 * n:]
        self.hosts = ['127.0.0.1'] * n
        self.proxies = {}
        if partitions:       # every link between two servers through a proxy that `isolate` can cut (see `config`);
            # on jsnb the routes carry the Raft traffic too, so cutting them partitions Raft
            self.hosts = [f'127.0.0.{11 + i}' for i in range(n)]    # each server's route port on a loopback address of its own
            self.proxies = {(i, j): FaultProxy((self.hosts[j], self.route[j])) for i in range(n) for j in range(n) if i != j}
            self.nowhere = free_ports(n)
        self.root = Path(tempfile.mkdtemp(prefix=f'jsc-{kind}-'))
        self.procs: list[ServerProc | None] = [None] * n

    def config(self, i: int) -> str:
        cred, auth = ('', '') if self.open else (f'{USER}:{PASSWORD}@', f'authorization {{ user: {USER}, password: {PASSWORD} }}, ')
        routes = ', '.join(f'"nats-route://{cred}127.0.0.1:{p}"' for p in self.route)
        listen = f'127.0.0.1:{self.route[i]}'
        if self.proxies:     # server i dials j through proxy (i, j) only; what it is advertised as (gossip) is a port
            # nobody listens on, so no server dials another one around the proxies
            routes = ', '.join(f'"nats-route://{cred}127.0.0.1:{self.proxies[i, j].port}"' for j in range(self.n) if j != i)
            listen = f'{self.hosts[i]}:{self.route[i]}, advertise: "127.0.0.1:{self.nowhere[i]}"'
        system = ('accounts { SYS: { users: [{user: sys, password: sys}] } }\nsystem_account: SYS\n'
                  'authorization { users: [{user: g, password: g}] }\nno_auth_user: g\n') if self.system else ''
        return (f'server_name: n{i}\nhttp: 127.0.0.1:{self.http[i]}\n' + system + (f'server_tags: {json.dumps(self.tags[i])}\n' if i in self.tags else '')
                + ('jetstream: disabled\n' if i in self.no_js else f'jetstream {{ store_dir: "{self.root / f"n{i}" / "store"}" }}\n')
                + f'cluster {{ name: {self.name}, listen: {listen}, {auth}routes: [{routes}] }}\n')

    def start(self, i: int | None = None):
        "Start server `i` (all of them when None); a restarted server keeps its store and its ports."
        for j in (range(self.n) if i is None else [i]):
            env = dict(self.env) or None
            p = ServerProc(self.kind, ['-a', '127.0.0.1'], self.config(j), workdir=str(self.root / f'n{j}'), isolate_store=False, env=env)
            p.dir.mkdir(parents=True, exist_ok=True)
            self.procs[j] = p.start(self.client[j])
        return self

    def url(self, i: int, user: str = '') -> str: return f'nats://{user + ":" + user + "@" if user else ""}127.0.0.1:{self.client[i]}'

    def jsz(self, i: int) -> dict:
        with urllib.request.urlopen(f'http://127.0.0.1:{self.http[i]}/jsz', timeout=5) as r: return json.load(r)

    def kill(self, i: int):
        "Stop server `i` at once, as `kill -9` does."
        p = self.procs[i].proc
        p.kill(); p.wait()
        if p.stderr: p.stderr.close()

    def stop(self):
        for p in self.procs:
            if p is not None: p.stop()
        for x in self.proxies.values(): x.close()

    def isolate(self, i: int):
        "Cut server `i` off from the others (its routes, which carry Raft traffic too), as a network partition does; it keeps running."
        for pair, x in self.proxies.items():
            if i in pair: x.sever()

    def heal(self):
        for x in self.proxies.values(): x.heal()

    def up(self) -> list[int]: return [i for i, p in enumerate(self.procs) if p is not None and p.proc.poll() is None]

    def routes(self, i: int) -> int:
        "How many routes server `i` has (`/routez`)."
        with urllib.request.urlopen(f'http://127.0.0.1:{self.http[i]}/routez', timeout=5) as r: return json.load(r)['num_routes']

    def wait_meta(self, timeout: float = 60):
        """Wait until every running server reports the same meta leader, and has a route to every other running server
        (a server without a route to another counts it offline when it places a new stream)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            up = self.up()
            try:
                leaders = {self.jsz(i).get('meta_cluster', {}).get('leader') for i in up if i not in self.no_js}
                meshed = self.proxies or all(self.routes(i) >= len(up) - 1 for i in up)
            except OSError: leaders, meshed = {None}, False
            if meshed and len(leaders) == 1 and None not in leaders and '' not in leaders: return leaders.pop()
            time.sleep(0.2)
        raise TimeoutError('no meta leader')

    def streams(self, timeout: float = 30) -> list[str]:
        "The names of the cluster's streams."
        return asyncio.run(self._api(lambda nc: nc.request('$JS.API.STREAM.NAMES', b'', timeout=timeout)))['streams'] or []

    def delete(self, names, timeout: float = 30):
        "Delete the streams `names`."
        async def go(nc):
            for name in names: await nc.request(f'$JS.API.STREAM.DELETE.{name}', b'', timeout=timeout)
        asyncio.run(self._api(go))

    async def _api(self, fn):
        nc = await nats.connect(self.url(self.up()[0]))
        try:
            r = await fn(nc)
            return json.loads(r.data) if r is not None else None
        finally: await nc.close()

    def stores(self, stream: str) -> list[list[tuple]]:
        "Every server's file store of `stream` read from disk (servers stopped): (sequence, subject, data hash, time) per message."
        from jsnb.js.filestore import FileStore
        out = []
        for i in range(self.n):
            fs = FileStore(self.root / f'n{i}' / 'store' / 'jetstream' / '$G' / 'streams' / stream)
            st = fs.state()
            rows = []
            for q in range(st['first_seq'], st['last_seq'] + 1):
                m = fs.load_msg(q)
                if m is not None: rows.append((m.seq, m.subject, hashlib.sha256(m.data).hexdigest()[:16], m.ts))
            fs.stop(); out.append(rows)
        return out
