"""The fault scenarios of `test_faults.py`, each written once for jsnb and nats-server: `run(name, rig, rounds)` creates
the scenario's R3 stream on the rig's cluster, runs `rounds` rounds (publish at a steady rate, do the fault, wait for
the first acknowledged publish, undo the fault, stop publishing, wait for quiet, check) and returns the figures.

Every round checks everything acknowledged so far, so a loss in a later round of a message acknowledged in an earlier
one is counted too."""
import asyncio, collections, time
from dataclasses import dataclass, field
import nats.js.errors
from faultrig import Figures, Publisher, Prober, Rig, NOT_YET, NS, first_ack_after, until

RECOVERY = 120          # seconds a scenario waits for the first acknowledgement after a fault before it counts it unrecovered


@dataclass
class Run:
    "One scenario on one cluster: its figures, its stream and what was acknowledged so far (id -> sequence)."
    rig: Rig
    fig: Figures
    stream: str
    nc: object = None
    soak: bool = False
    acked: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def subject(self) -> str: return f'{self.stream.lower()}.x'


async def recovered(pubs, t: float):
    "Wait until a publish sent after `t` is acknowledged (at most `RECOVERY` seconds; then the figures say unrecovered)."
    try: await until(lambda: first_ack_after(pubs, t) is not None, RECOVERY, 'no acknowledgement after the fault')
    except TimeoutError: pass


async def publishers(run: Run, k: int, firsts=(0, 1), only=None, plan=None, timeout: float = 1.0, kind=Publisher) -> list[Publisher]:
    "Publishers `r<k>p<j>`, the j-th connecting to server firsts[j] first (or to the servers `only[j]` alone)."
    return [await kind(run.rig.urls(f, None if only is None else only[j]), run.subject, f'r{k}p{j}', plan=plan,
                       timeout=timeout).start() for j, f in enumerate(firsts)]


async def verify(run: Run, pubs, subject: str | None = None, keep=lambda mid: True):
    """After a round: undo what is left of the fault, wait for quiet, compare the replicas, read the stream back and
    check it against everything acknowledged so far (the ids `keep` says can still be there)."""
    rig, fig = run.rig, run.fig
    for p in pubs: await p.stop()
    await settle(run)
    for p in pubs:
        run.acked.update({mid: a[0] for mid, a in p.acks.items() if keep(mid)})
        fig.acked += len(p.acks); fig.failed += len(p.failures); fig.attempts += p.attempts
    stored = await rig.read_back(run.nc, run.stream, subject or f'{run.stream.lower()}.>')
    check(fig, run.acked, stored)
    fig.rounds += 1
    return stored


async def settle(run: Run):
    "Undo what is left of the fault, wait for quiet and count the replicas that still disagree with the majority."
    await run.rig.repair()
    div, states = await run.rig.quiet(run.stream, 120 if run.soak else 90, 30 if run.soak else 20)
    run.fig.divergent += div
    if div: run.fig.notes.append(f'round {run.fig.rounds}: replicas {states}')


def check(fig: Figures, acked: dict, stored: list):
    """Ids acknowledged and not stored (lost), stored at another sequence than acknowledged (misplaced), stored twice
    (duplicated)."""
    where = collections.defaultdict(list)
    for q, _, mid, _ in stored:
        if mid is not None: where[mid].append(q)
    for mid, q in acked.items():
        if mid not in where: fig.lost.add(mid)
        elif q not in where[mid]: fig.misplaced.add(mid)
    fig.duplicated |= {mid for mid, qs in where.items() if len(qs) > 1}


# kill -9, SIGSTOP, a wiped follower, a rolling restart, a partition -------------------------------------------------
async def kill_leader(run: Run, k: int):
    "kill -9 of the stream leader under publishing; it is started again once a publish is acknowledged."
    pubs = await publishers(run, k)
    await asyncio.sleep(1)
    li = await run.rig.leader(run.nc, run.stream)
    t = time.time(); await run.rig.kill(li)
    await recovered(pubs, t)
    await run.rig.start(li)
    await asyncio.sleep(1)
    run.fig.recovery.append(first_ack_after(pubs, t))
    await verify(run, pubs)


async def pause_leader(run: Run, k: int):
    "SIGSTOP of the stream leader for some seconds (3; 5 to 15 in the soak), then SIGCONT."
    pubs = await publishers(run, k)
    await asyncio.sleep(1)
    li = await run.rig.leader(run.nc, run.stream)
    t = time.time(); run.rig.pause(li)
    await asyncio.sleep(5 + k % 11 if run.soak else 3)
    run.rig.resume(li)
    await recovered(pubs, t)
    await asyncio.sleep(1)
    run.fig.recovery.append(first_ack_after(pubs, t))
    await verify(run, pubs)


async def wipe_follower(run: Run, k: int):
    "A follower stopped (SIGTERM), its whole store directory removed, started again: it is rebuilt from its peers."
    pubs = await publishers(run, k)
    await asyncio.sleep(1)
    li = await run.rig.leader(run.nc, run.stream)
    fi = (li + 1 + k % 2) % 3
    t = time.time(); await run.rig.term(fi)
    run.rig.wipe(fi)
    await asyncio.sleep(1)
    await run.rig.start(fi)
    await recovered(pubs, t)
    await asyncio.sleep(1)
    run.fig.recovery.append(first_ack_after(pubs, t))
    await verify(run, pubs)


async def rolling_restart(run: Run, k: int):
    "Each server in turn stopped with SIGTERM and started again, the next one only once `/healthz` says ok."
    pubs = await publishers(run, k)
    await asyncio.sleep(1)
    for i in range(run.rig.c.n):
        t = time.time(); await run.rig.term(i)
        await run.rig.start(i)                              # waits for /healthz
        await recovered(pubs, t)
        run.fig.recovery.append(first_ack_after(pubs, t))
    await asyncio.sleep(1)
    await verify(run, pubs)


async def partition_leader(run: Run, k: int):
    """The stream leader cut off from the other two servers by the fault proxies every link between two servers goes
    through (the routes, which carry the Raft traffic too on both servers), for 2 seconds (5 in the soak), while a
    client of the majority and a client of the leader publish. Nothing may be acknowledged on the cut-off side."""
    rig, n = run.rig, run.rig.c.n
    li = await rig.leader(run.nc, run.stream)
    maj = [i for i in range(n) if i != li]
    pubs = await publishers(run, k, firsts=(maj[0], li), only=(maj, [li]))
    await asyncio.sleep(1)
    rig.c.isolate(li)
    t = time.time()
    await recovered(pubs[:1], t)
    await asyncio.sleep(5 if run.soak else 2)
    healed = time.time()
    rig.c.heal()
    await asyncio.sleep(2)
    run.fig.recovery.append(first_ack_after(pubs[:1], t))
    minority = [mid for mid, (_, sent, ack) in pubs[1].acks.items() if sent >= t and ack < healed]
    run.extra['minority_acks'] = run.extra.get('minority_acks', 0) + len(minority)
    if minority: run.fig.notes.append(f'round {k}: acknowledged on the cut-off side: {minority[:5]}')
    await verify(run, pubs)


async def sigterm_leader(run: Run, k: int):
    """SIGTERM of the stream leader while a client of the other two servers sends a probe every 20 ms (each tried once,
    1 s timeout): a leader that hands its groups over on the way out leaves almost no probe unacknowledged; one that
    just leaves makes the others wait for an election, and the probes sent meanwhile fail."""
    li = await run.rig.leader(run.nc, run.stream)
    pubs = await publishers(run, k, firsts=((li + 1) % 3,), only=([i for i in range(3) if i != li],), kind=Prober)
    await asyncio.sleep(1)
    t = time.time(); await run.rig.term(li)
    await recovered(pubs, t)
    await asyncio.sleep(1)
    run.fig.recovery.append(first_ack_after(pubs, t))
    await run.rig.start(li)
    await verify(run, pubs)


# per-message TTL and delete markers across a plain restart (issue 41, finding 1) --------------------------------------
def _ttl_plan(k: int):
    "Even messages expire after a second (each on a subject of its own, leaving a delete marker); odd ones stay."
    return lambda n: (f'ttl.e.{k}.{n}', {'Nats-TTL': '1s'}) if n % 2 == 0 else ('ttl.keep', {})


async def ttl_restart(run: Run, k: int):
    """Messages with a per-message TTL on a stream with subject delete markers (what a KV bucket with TTLs and limit
    markers is): a follower is stopped (SIGTERM) while messages expire, started again, and then made the leader. The
    replicas must hold the same messages and markers, and the messages that stay must sit where they were acknowledged."""
    pubs = await publishers(run, k, plan=_ttl_plan(k))
    await asyncio.sleep(1)
    li = await run.rig.leader(run.nc, run.stream)
    fi = (li + 1) % 3
    t = time.time(); await run.rig.term(fi)
    await asyncio.sleep(3 if run.soak else 2)                # what it stored expires meanwhile: markers on the others
    await run.rig.start(fi)
    await asyncio.sleep(1)
    for _ in range(10):                                      # (refused while it is not caught up yet)
        r = await run.rig.api(run.nc, f'$JS.API.STREAM.LEADER.STEPDOWN.{run.stream}', {'placement': {'preferred': f'n{fi}'}})
        if 'error' not in r: break
        await asyncio.sleep(0.5)
    else: run.fig.notes.append(f'round {k}: stepdown to n{fi}: {r["error"]}')
    await asyncio.sleep(1.5)
    run.fig.recovery.append(first_ack_after(pubs, t))
    for p in pubs: p.stopping = True
    await asyncio.sleep(3)                                   # the last ones expire, and their markers too
    await verify(run, pubs, keep=lambda mid: int(mid.rsplit('-', 1)[1]) % 2 == 1)


# KV compare-and-set under leader kills -----------------------------------------------------------------------------
async def kv_cas(run: Run, k: int):
    """Four clients (on all three servers) update one key of a KV bucket with compare-and-set as fast as they can while
    the bucket's stream leader is killed (kill -9) and started again. Checked: every update a client saw succeed is
    stored at the revision it was told (lost, misplaced); no two successes were based on the same revision, and every
    stored update was based on the revision just before it (a compare-and-set won twice counts as duplicated)."""
    rig, fig, based_on = run.rig, run.fig, run.extra.setdefault('based_on', {})
    wins, stop = [], asyncio.Event()
    counts = collections.Counter()

    async def worker(w: int):
        nc = await rig.connect(w % 3)
        kv = await nc.jetstream(timeout=1).key_value('CAS')
        i = 0
        while not stop.is_set():
            counts['attempts'] += 1
            try: rev = (await kv.get('k')).revision
            except NOT_YET: counts['failed'] += 1; await asyncio.sleep(0.05); continue
            value, sent = f'r{k}w{w}.{i}', time.time(); i += 1
            based_on[value] = rev
            try: wins.append((await kv.update('k', value.encode(), last=rev), value, sent, time.time()))
            except nats.js.errors.KeyWrongLastSequenceError: counts['refused'] += 1
            except NOT_YET: counts['failed'] += 1; await asyncio.sleep(0.05)
        await nc.close()

    tasks = [asyncio.create_task(worker(w)) for w in range(4)]
    await asyncio.sleep(1)
    li = await rig.leader(run.nc, run.stream)
    t = time.time(); await rig.kill(li)
    try: await until(lambda: any(sent >= t for _, _, sent, _ in wins), RECOVERY, 'no update after the kill')
    except TimeoutError: pass
    after = [ack for _, _, sent, ack in wins if sent >= t]
    fig.recovery.append(min(after) - t if after else None)
    await rig.start(li)
    await asyncio.sleep(1)
    stop.set(); await asyncio.gather(*tasks)
    await settle(run)
    run.extra.setdefault('wins', []).extend(wins)
    fig.acked += len(wins); fig.failed += counts['failed']; fig.attempts += counts['attempts']
    stored = await rig.read_back(run.nc, run.stream, '$KV.CAS.k')
    at = {data.decode(): q for q, _, _, data in stored}
    for rev, value, _, _ in run.extra['wins']:
        if value not in at: fig.lost.add(value)
        elif at[value] != rev: fig.misplaced.add(value)
    bases = collections.Counter(based_on[v] for _, v, _, _ in run.extra['wins'])
    fig.duplicated |= {v for _, v, _, _ in run.extra['wins'] if bases[based_on[v]] > 1}          # won twice
    fig.duplicated |= {data.decode() for (q0, _, _, _), (q, _, _, data) in zip(stored, stored[1:])
                       if based_on.get(data.decode(), q0) != q0}                             # stored on a stale revision
    fig.duplicated |= {v for v, c in collections.Counter(d.decode() for *_, d in stored).items() if c > 1}
    fig.rounds += 1


# a consumer acknowledging with AckSync across leader changes (issue 41, finding 2) -----------------------------------
ACK_WAIT = 15
STEPDOWNS = 3             # stepdowns with a batch held, a round


async def stepdown(run: Run, k: int) -> bool:
    """Ask the consumer's leader to step down; whether another server leads it within 5 s. A refusal (no replica
    caught up yet) or a success after which the same server still leads is noted."""
    old = await run.rig.consumer_leader(run.nc, run.stream, 'work')
    r = await run.rig.api(run.nc, f'$JS.API.CONSUMER.LEADER.STEPDOWN.{run.stream}.work')
    if 'error' in r: run.fig.notes.append(f'round {k}: consumer stepdown: {r["error"]["description"]}'); return False
    try: await run.rig.consumer_leader(run.nc, run.stream, 'work', not_this=old, timeout=5); return True
    except TimeoutError: run.fig.notes.append(f'round {k}: consumer stepdown answered success, n{old} still its leader 5 s later')
    return False


async def consumer_acks(run: Run, k: int):
    """A durable pull consumer (R3, explicit acks, 15 s ack wait) whose client acknowledges every message with AckSync
    while a publisher runs. Its leader changes four times a round: three stepdowns, each while the client holds a batch
    it fetched just before (it acknowledges the batch once the new leader is known, as a slow client would; a stepdown
    refused or without effect is tried again with another batch held), then kill -9 of the leader, started again
    afterwards. A message delivered again after its AckSync was confirmed counts as redelivered-after-ack (no pull
    request is outstanding while the batch is held, so no redelivery can be on its way when the acknowledgement is
    confirmed); every acknowledged publish must be delivered (undelivered otherwise). An AckSync not confirmed after
    ten tries is given up (counted as unconfirmed, printed): its first try may have been applied by a leader killed
    before it answered, and a consumer does not confirm an ack for a message it no longer
    has pending. Recovery: from each leader change to the first confirmed AckSync."""
    rig, fig, x = run.rig, run.fig, run.extra
    confirmed, redelivered, confirmed_at = x.setdefault('confirmed', set()), x.setdefault('redelivered', []), []
    delivered, unconfirmed = x.setdefault('delivered', set()), x.setdefault('unconfirmed', set())
    stop, gate, holding, again = asyncio.Event(), asyncio.Event(), asyncio.Event(), len(redelivered)
    gate.set()

    async def consume():
        nc = await rig.connect(1)
        sub = await nc.jetstream().pull_subscribe_bind('work', run.stream)
        while not stop.is_set():
            try: msgs = await sub.fetch(20, timeout=1)
            except NOT_YET: continue
            if msgs and not gate.is_set(): holding.set(); await gate.wait()
            for m in msgs:
                q = m.metadata.sequence.stream
                if q in confirmed: redelivered.append((q, m.metadata.num_delivered))
                delivered.add(q)
                for _ in range(10):
                    try: await m.ack_sync(timeout=1)
                    except NOT_YET: await asyncio.sleep(0.1); continue
                    confirmed.add(q); unconfirmed.discard(q); confirmed_at.append(time.time()); break
                else: unconfirmed.add(q)
        await sub.unsubscribe(); await nc.close()

    def since(t): return next((c - t for c in confirmed_at if c >= t), None)

    async def changed(t):
        try: await until(lambda: since(t) is not None, RECOVERY, 'no confirmed ack after the leader change')
        except TimeoutError: pass
        fig.recovery.append(since(t))

    pubs = await publishers(run, k, firsts=(0,))
    task = asyncio.create_task(consume())
    await asyncio.sleep(1.5)
    for _ in range(STEPDOWNS):
        for _ in range(4):      # a batch held across a stepdown that moves the leader (a refused one: another batch)
            gate.clear(); holding.clear()
            try: await asyncio.wait_for(holding.wait(), 30)     # the client holds a batch it has not acknowledged yet
            except TimeoutError: fig.notes.append(f'round {k}: the client never held a batch')
            t = time.time()
            if moved := await stepdown(run, k): break
            gate.set(); await asyncio.sleep(0.5)
        if not moved: fig.notes.append(f'round {k}: the consumer leader never moved (stepdowns refused or without effect)')
        gate.set()
        await changed(t)
        await asyncio.sleep(0.5)
    ci = await rig.consumer_leader(run.nc, run.stream, 'work')
    t = time.time(); await rig.kill(ci)
    await changed(t)
    await rig.start(ci)
    await asyncio.sleep(1)
    for p in pubs: await p.stop()
    want = {a[0] for p in pubs for a in p.acks.values()}
    try: await until(lambda: want <= confirmed | unconfirmed, 2 * ACK_WAIT + 30, 'consumer never caught up')
    except TimeoutError: pass
    stop.set(); gate.set(); await task
    await verify(run, pubs)
    x.setdefault('published', set()).update(want)
    fig.redelivered = len(redelivered)
    fig.undelivered = len(x['published'] - delivered)
    if unconfirmed: fig.notes.append(f'round {k}: AckSync never confirmed (given up after ten tries): {sorted(unconfirmed)[:8]}')
    if redelivered[again:]: fig.notes.append(f'round {k}: delivered again after a confirmed AckSync (sequence, num_delivered): {redelivered[again:][:8]}')


# the scenarios by name --------------------------------------------------------------------------------------------
def _plain(name): return dict(name=name, subjects=[f'{name.lower()}.>'], allow_direct=True)

SCENARIOS = {
    'kill9': (kill_leader, _plain('KILL9')),
    'sigstop': (pause_leader, _plain('STOP')),
    'wipe': (wipe_follower, _plain('WIPE')),
    'rolling': (rolling_restart, _plain('ROLL')),
    'partition': (partition_leader, _plain('PART')),
    'kv_cas': (kv_cas, dict(name='KV_CAS', subjects=['$KV.CAS.>'], allow_direct=True, allow_rollup_hdrs=True, deny_delete=True,
                            discard='new', max_msgs_per_subject=1_000_000)),
    'consumer': (consumer_acks, _plain('ACKS')),
    'ttl_restart': (ttl_restart, dict(_plain('TTL'), allow_msg_ttl=True, subject_delete_marker_ttl=NS)),
    'sigterm': (sigterm_leader, _plain('TERM')),
}


async def run(name: str, rig: Rig, rounds: int, soak: bool = False) -> Figures:
    "Run scenario `name` for `rounds` rounds on the rig's cluster (repaired first); its stream is deleted at the end."
    fn, cfg = SCENARIOS[name]
    await rig.repair()
    nc = await rig.connect()
    r = Run(rig, Figures(rig.kind, name), cfg['name'], nc, soak)
    try:
        await rig.create_stream(nc, cfg)
        if name == 'kv_cas': await nc.jetstream().publish('$KV.CAS.k', b'start')
        if name == 'consumer':
            c = await rig.api(nc, f'$JS.API.CONSUMER.DURABLE.CREATE.{r.stream}.work', {'stream_name': r.stream, 'config': dict(
                durable_name='work', ack_policy='explicit', ack_wait=ACK_WAIT * NS, max_ack_pending=100_000, max_deliver=-1)})
            assert 'error' not in c, c
        for k in range(rounds): await fn(r, k)
        if 'minority_acks' in r.extra: r.fig.notes.append(f"acknowledged on the cut-off side: {r.extra['minority_acks']}")
        r.fig.extra = r.extra
        return r.fig
    finally:
        try: await rig.repair(); await rig.api(nc, f'$JS.API.STREAM.DELETE.{r.stream}', timeout=30)
        except Exception: pass
        await nc.close()
