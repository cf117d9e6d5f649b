"""The rig of the fault-injection suite (`test_faults.py`): publishers that are stock nats-py clients, the faults done
to a `JSCluster`'s servers, and the checks made once the cluster is quiet, with the figures they add up to.

Every check is clock-independent: an acknowledged publish is looked for in the stream (lost), at the sequence its
acknowledgement named (misplaced); a message id is stored once (duplicated); the replicas hold the same state
(divergent); a message whose `AckSync` was confirmed is not delivered again (redelivered-after-ack). Times (recovery:
from a fault to the first acknowledged publish sent after it) are printed, not asserted on; a fault after which nothing
is acknowledged for two minutes counts as unrecovered."""
import asyncio, collections, hashlib, json, os, shutil, signal, statistics, tempfile, time, urllib.error, urllib.request
from dataclasses import dataclass, field
from pathlib import Path
import nats, nats.errors, nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from jsclusters import JSCluster

NOT_YET = (nats.errors.Error, TimeoutError)    # not acknowledged (yet): timeouts, no responders, API errors, reconnects
NS = 1_000_000_000


@dataclass
class Figures:
    "What one scenario did to one kind of server, summed over its rounds."
    kind: str
    scenario: str
    rounds: int = 0
    acked: int = 0                                         # publishes (updates, for KV) acknowledged
    lost: set = field(default_factory=set)                 # acknowledged, not stored
    duplicated: set = field(default_factory=set)           # stored more than once (KV: a compare-and-set won twice)
    misplaced: set = field(default_factory=set)            # acknowledged at a sequence that holds another message
    divergent: int = 0                                     # replicas that disagreed with the majority after quiet
    redelivered: int | None = None                         # deliveries after a confirmed AckSync (consumer scenarios)
    undelivered: int | None = None                         # acknowledged publishes the consumer never delivered
    recovery: list = field(default_factory=list)           # seconds from each fault to the first acknowledged publish
    failed: int = 0                                        # publish attempts that failed (timeout, error)
    attempts: int = 0
    notes: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)              # what a scenario counts besides

    def summary(self) -> dict:
        rec = [r for r in self.recovery if r is not None]
        return dict(scenario=self.scenario, server=self.kind, rounds=self.rounds, acked=self.acked, lost=len(self.lost),
                    dup=len(self.duplicated), misseq=len(self.misplaced), divergent=self.divergent,
                    redeliv='-' if self.redelivered is None else self.redelivered,
                    undeliv='-' if self.undelivered is None else self.undelivered,
                    rec_med=f'{statistics.median(rec):.2f}' if rec else '-', rec_max=f'{max(rec):.2f}' if rec else '-',
                    unrecovered=len(self.recovery) - len(rec), failed=f'{self.failed}/{self.attempts}')


def table(figs: list[Figures]) -> str:
    "The figures as a fixed-width table, one row per scenario and server."
    rows = [f.summary() for f in figs]
    if not rows: return ''
    cols = list(rows[0])
    w = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    line = lambda r: '  '.join(str(r[c]).rjust(w[c]) if c not in ('scenario', 'server') else str(r[c]).ljust(w[c]) for c in cols)
    return '\n'.join([line({c: c for c in cols})] + [line(r) for r in rows])


class Publisher:
    """A nats-py client publishing at most every `interval` seconds, each message with its id (`<prefix>-<n>`) as
    `Nats-Msg-Id`, sent again until acknowledged (a stream that stored the first copy drops the second). `plan(n)` gives
    the subject and extra headers of message `n`. `acks`: id -> (sequence, time the acknowledged attempt was sent,
    time of the acknowledgement)."""
    def __init__(self, urls: list[str], subject: str, prefix: str, interval: float = 0.02, timeout: float = 1.0, plan=None):
        self.urls, self.prefix, self.interval, self.timeout = urls, prefix, interval, timeout
        self.plan = plan or (lambda n: (subject, {}))
        self.acks: dict[str, tuple[int, float, float]] = {}
        self.failures: list[float] = []
        self.attempts, self.stopping, self.task, self.nc = 0, False, None, None

    async def start(self):
        self.nc = await nats.connect(servers=self.urls, dont_randomize=True, max_reconnect_attempts=-1, reconnect_time_wait=0.1,
                                     ping_interval=1, max_outstanding_pings=3, connect_timeout=2)
        self.js = self.nc.jetstream()
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self):
        n = 0
        while not self.stopping:
            mid, t0 = f'{self.prefix}-{n}', time.time()
            subject, extra = self.plan(n)
            while not self.stopping:
                self.attempts += 1
                sent = time.time()
                try: a = await self.js.publish(subject, mid.encode(), timeout=self.timeout, headers={'Nats-Msg-Id': mid, **extra})
                except NOT_YET:
                    self.failures.append(sent); await asyncio.sleep(0.05); continue
                self.acks[mid] = (a.seq, sent, time.time()); break
            n += 1
            await asyncio.sleep(max(0.0, self.interval - (time.time() - t0)))

    async def stop(self):
        self.stopping = True
        if self.task: await self.task
        if self.nc: await self.nc.close()


class Prober(Publisher):
    """Probes: a publish every `interval` seconds whether the ones before were acknowledged or not, each with its own id
    and tried once (`timeout`): during an outage, every probe sent fails, so the failures count the outage's length in
    probes, which is how a leader's handover is compared with the reference's."""
    async def _run(self):
        n, flying = 0, set()
        while not self.stopping:
            t = asyncio.create_task(self._probe(n)); flying.add(t); t.add_done_callback(flying.discard)
            n += 1
            await asyncio.sleep(self.interval)
        if flying: await asyncio.wait(flying)

    async def _probe(self, n: int):
        mid, sent = f'{self.prefix}-{n}', time.time()
        subject, extra = self.plan(n)
        self.attempts += 1
        try: a = await self.js.publish(subject, mid.encode(), timeout=self.timeout, headers={'Nats-Msg-Id': mid, **extra})
        except NOT_YET: self.failures.append(sent); return
        self.acks[mid] = (a.seq, sent, time.time())


def first_ack_after(pubs, t: float) -> float | None:
    "Seconds from `t` to the first acknowledgement of a publish sent after `t` (None: none was acknowledged)."
    after = [ack for p in pubs for (_, sent, ack) in p.acks.values() if sent >= t]
    return min(after) - t if after else None


async def until(cond, timeout: float, what: str, pause: float = 0.1):
    "Wait until `cond()` (a coroutine function or a plain one) is true."
    deadline = time.time() + timeout
    while True:
        r = cond()
        if asyncio.iscoroutine(r): r = await r
        if r: return r
        if time.time() > deadline: raise TimeoutError(what)
        await asyncio.sleep(pause)


async def request(nc, subject: str, body=None, timeout: float = 5) -> dict:
    "A JetStream API request; its decoded answer."
    m = await nc.request(subject, json.dumps(body).encode() if body is not None else b'', timeout=timeout)
    return json.loads(m.data)


def disagreeing(states: list) -> int:
    "How many replicas' states differ from the one most of them hold (a server that gave none counts as differing)."
    keys = [json.dumps(st, sort_keys=True) for st in states]
    top = collections.Counter(keys).most_common(1)[0][0]
    return sum(k != top for k in keys) if json.loads(top) else len(keys)


class Rig:
    "A cluster and the faults done to it: kill -9, SIGSTOP/SIGCONT, SIGTERM, a wiped store, a partition; and the checks."
    def __init__(self, c: JSCluster):
        self.c, self.kind, self.paused = c, c.kind, set()

    def urls(self, first: int = 0, only=None) -> list[str]:
        "Client URLs of every server (or of `only`), starting with `first`."
        order = [(first + j) % self.c.n for j in range(self.c.n)]
        return [self.c.url(i) for i in order if only is None or i in only]

    async def connect(self, first: int = 0, only=None):
        return await nats.connect(servers=self.urls(first, only), dont_randomize=True, max_reconnect_attempts=-1,
                                  reconnect_time_wait=0.1, ping_interval=1, max_outstanding_pings=3, connect_timeout=2)

    async def api(self, nc, subject: str, body=None, timeout: float = 60) -> dict:
        "An API request asked again while the cluster cannot answer (no leader yet, 10008 and the like)."
        deadline = time.time() + timeout
        while True:
            try:
                r = await request(nc, subject, body, timeout=3)
                if 'error' not in r or r['error'].get('code') not in (503, 500, 408) and r['error'].get('err_code') != 10008: return r
            except NOT_YET: r = None
            if time.time() > deadline: raise TimeoutError(f'{subject}: {r}')
            await asyncio.sleep(0.2)

    async def create_stream(self, nc, cfg: dict) -> dict:
        "Create the R3 stream `cfg` afresh (a copy left over from an earlier run, a test run again, is deleted first)."
        name = cfg['name']
        await self.api(nc, f'$JS.API.STREAM.DELETE.{name}')
        r = await self.api(nc, f'$JS.API.STREAM.CREATE.{name}', {'num_replicas': 3, **cfg})
        assert 'error' not in r, r
        return r

    async def leader(self, nc, stream: str, not_this: int | None = None, timeout: float = 60) -> int:
        "The index of the stream's leader (other than `not_this`), once there is one."
        return await self._leader(nc, f'$JS.API.STREAM.INFO.{stream}', not_this, timeout)

    async def consumer_leader(self, nc, stream: str, consumer: str, not_this: int | None = None, timeout: float = 60) -> int:
        "The index of the consumer's leader (other than `not_this`), once there is one."
        return await self._leader(nc, f'$JS.API.CONSUMER.INFO.{stream}.{consumer}', not_this, timeout)

    async def _leader(self, nc, subject: str, not_this: int | None, timeout: float) -> int:
        deadline = time.time() + timeout
        while True:
            name = ((await self.api(nc, subject, timeout=timeout)).get('cluster') or {}).get('leader') or ''
            if name and int(name[1:]) != not_this: return int(name[1:])
            if time.time() > deadline: raise TimeoutError(f'{subject}: no leader')
            await asyncio.sleep(0.2)

    # the faults ------------------------------------------------------------------------------------------------------
    def _proc(self, i: int): return self.c.procs[i].proc

    async def kill(self, i: int):
        "kill -9."
        await asyncio.to_thread(self.c.kill, i)

    async def term(self, i: int, timeout: float = 30):
        "SIGTERM, and wait until the server has exited (kill -9 after `timeout`)."
        p = self._proc(i)
        p.send_signal(signal.SIGTERM)
        try: await asyncio.to_thread(p.wait, timeout)
        except Exception: await self.kill(i)

    def pause(self, i: int): os.kill(self._proc(i).pid, signal.SIGSTOP); self.paused.add(i)

    def resume(self, i: int): os.kill(self._proc(i).pid, signal.SIGCONT); self.paused.discard(i)

    def wipe(self, i: int):
        "Remove the (stopped) server's whole store directory."
        shutil.rmtree(self.c.root / f'n{i}' / 'store', ignore_errors=True)

    async def start(self, i: int):
        "Start a stopped server again, with its store, ports and name; wait until its `/healthz` says ok."
        await asyncio.to_thread(self.c.start, i)
        await self.healthy(i)

    def _health(self, i: int) -> bool:
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{self.c.http[i]}/healthz', timeout=3) as r: return r.status == 200
        except (OSError, urllib.error.HTTPError): return False

    async def healthy(self, i: int, timeout: float = 120):
        await until(lambda: asyncio.to_thread(self._health, i), timeout, f'n{i} never healthy', 0.2)

    async def repair(self):
        "Undo whatever a scenario left: resume paused servers, heal the partition, start servers that are down."
        for i in list(self.paused): self.resume(i)
        self.c.heal()
        for i in range(self.c.n):
            if i not in self.c.up(): await self.start(i)
        await asyncio.to_thread(self.c.wait_meta, 120)

    # the checks -------------------------------------------------------------------------------------------------------
    def _jsz(self, i: int, query: str = '') -> dict:
        with urllib.request.urlopen(f'http://127.0.0.1:{self.c.http[i]}/jsz{query}', timeout=5) as r: return json.load(r)

    def replica(self, i: int, stream: str) -> dict | None:
        """Server `i`'s own state of `stream`, as `/jsz?accounts=true&streams=true` reports it (per-replica messages,
        bytes, first and last sequence); on jsnb also a digest of every message in its store (sequence, subject,
        headers, data and time), read from a copy of the store on disk, and the figures themselves from there while
        jsnb's `/jsz` gives no stream details. None: the server is down."""
        if i not in self.c.up() or i in self.paused: return None
        try: d = self._jsz(i, '?accounts=true&streams=true')
        except OSError: return None
        st = None
        if 'account_details' in d:
            found = [s for a in d['account_details'] or [] for s in a.get('stream_detail') or [] if s['name'] == stream]
            st = {k: found[0]['state'].get(k, 0) for k in ('messages', 'bytes', 'first_seq', 'last_seq')} if found else {'missing': True}
        if self.kind != 'jsnb': return st or {'unreadable': True}
        disk = self._disk_state(i, stream)
        return disk if st is None or 'digest' not in disk else dict(st, digest=disk['digest'])

    def _disk_state(self, i: int, stream: str) -> dict:
        from jsnb.js.filestore import FileStore
        src = self.c.root / f'n{i}' / 'store' / 'jetstream' / '$G' / 'streams' / stream / 'msgs'
        if not src.exists(): return {'missing': True}
        with tempfile.TemporaryDirectory(prefix='replica-') as tmp:
            try: shutil.copytree(src, Path(tmp) / stream / 'msgs')
            except (OSError, shutil.Error): return {'unreadable': True}    # a block rewritten while copied: read again
            fs = FileStore(Path(tmp) / stream)
            try:
                st, h = fs.state(), hashlib.sha256()
                for q in range(st['first_seq'], st['last_seq'] + 1):
                    m = fs.load_msg(q)
                    if m is not None: h.update(repr((m.seq, m.subject, m.hdr, m.data, m.ts)).encode())
            finally: fs.stop()
        return dict({k: st[k] for k in ('messages', 'bytes', 'first_seq', 'last_seq')}, digest=h.hexdigest()[:16])

    async def quiet(self, stream: str, timeout: float = 60, still: float = 10) -> tuple[int, list]:
        """Wait (publishing stopped) until every replica of `stream` holds the same state; the number of replicas that
        disagree with the majority when they have not come together in `timeout` seconds, or when no replica's state
        changed for `still` seconds (0: all the same), and the states."""
        deadline, last, changed = time.time() + timeout, None, time.time()
        while True:
            states = [await asyncio.to_thread(self.replica, i, stream) for i in range(self.c.n)]
            keys = [json.dumps(s, sort_keys=True) for s in states]
            if len(set(keys)) == 1 and states[0] and 'missing' not in states[0] and 'unreadable' not in states[0]: return 0, states
            if keys != last: last, changed = keys, time.time()
            if time.time() > deadline or time.time() - changed > still: return disagreeing(states), states
            await asyncio.sleep(0.5)

    async def read_back(self, nc, stream: str, subject: str, timeout: float = 120) -> list[tuple[int, str, str | None, bytes]]:
        "Every message of `stream` on `subject`, through an ephemeral pull consumer: (sequence, subject, message id, data)."
        js = nc.jetstream()
        deadline = time.time() + timeout
        while True:
            try:
                sub = await js.pull_subscribe(subject, stream=stream, config=ConsumerConfig(
                    ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30, num_replicas=1, mem_storage=True))
                want = (await sub.consumer_info()).num_pending
                got = {}
                while len(got) < want:
                    for m in await sub.fetch(min(500, want - len(got)), timeout=5):
                        got[m.metadata.sequence.stream] = (m.subject, (m.headers or {}).get('Nats-Msg-Id'), m.data)
                await sub.unsubscribe()
                return [(q, *got[q]) for q in sorted(got)]
            except NOT_YET:
                if time.time() > deadline: raise
                await asyncio.sleep(0.5)

