"""Faults in a 3-server jsnb JetStream cluster on loopback: the stream leader killed with `kill -9` under acknowledged
publishing, a server restarted, a majority lost. The promise: nothing acknowledged is lost, a new leader takes over,
a restarted server catches up, and once quiet every replica's store holds the same messages."""
import asyncio, json, shutil, signal, time, urllib.request
import pytest
import nats, nats.js.errors
from nats.errors import TimeoutError as NatsTimeout, NoRespondersError
from jsclusters import JSCluster, request as _req, publish_acked as _publish_acked


def _wait(cond, timeout: float = 60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if cond(): return
        except OSError: pass
        time.sleep(0.2)
    raise TimeoutError


async def _ask(nc, subject: str, body, timeout: float = 30) -> dict:
    "An API request asked again while the stream's group is between leaders or its new leader is catching up (10008)."
    deadline = time.time() + timeout
    while True:
        r = await _req(nc, subject, body, timeout=timeout)
        if (r.get('error') or {}).get('err_code') != 10008 or time.time() > deadline: return r
        await asyncio.sleep(0.2)


async def _fetch_n(sub, n: int, timeout: float = 60) -> list:
    "Fetch `n` messages, asked again while a new replicated consumer is not running yet on its leader."
    got, deadline = [], time.time() + timeout
    while len(got) < n:
        try: got += await sub.fetch(n - len(got), timeout=3)
        except (NatsTimeout, asyncio.TimeoutError, nats.js.errors.ServiceUnavailableError):
            if time.time() > deadline: raise
    return got


async def _info(nc, stream: str, timeout: float = 30) -> dict:
    "Stream info, asked again while the group is between leaders (10008)."
    deadline = time.time() + timeout
    while True:
        info = await _req(nc, f'$JS.API.STREAM.INFO.{stream}')
        if 'error' not in info or time.time() > deadline: return info
        await asyncio.sleep(0.2)


def _quiet(cluster, messages: int):
    "Wait until every server's store holds `messages` (followers apply what the leader has committed a heartbeat later)."
    _wait(lambda: all(cluster.jsz(i)['messages'] == messages for i in range(cluster.n)))


@pytest.fixture
def cluster():
    c = JSCluster('jsnb')
    try:
        c.start(); c.wait_meta()
        yield c
    finally: c.stop()


async def _create(c, name='S', **cfg) -> str:
    nc = await nats.connect(c.url(0))
    r = await _req(nc, f'$JS.API.STREAM.CREATE.{name}', dict(name=name, subjects=[f'{name.lower()}.>'], num_replicas=3, **cfg))
    await nc.close()
    assert 'error' not in r, r
    return r['cluster']['leader']


async def test_kill_the_leader_loses_nothing_acknowledged(cluster):
    leader = await _create(cluster, allow_direct=True)
    li = int(leader[1:])
    ncs = [await nats.connect(cluster.url(i), max_reconnect_attempts=-1, reconnect_time_wait=0.2) for i in range(3)]
    acked = {}
    js = ncs[(li + 1) % 3].jetstream()
    for k in range(20):
        a = await js.publish('s.x', f'm{k}'.encode()); acked[a.seq] = f'm{k}'.encode()
    cluster.kill(li)
    for k in range(20, 40):                            # publishing resumes once another replica leads
        a = await _publish_acked(js, 's.x', f'm{k}'.encode(), time.time() + 60); acked[a.seq] = f'm{k}'.encode()
    other = ncs[(li + 2) % 3]
    info = await _info(other, 'S')
    assert info['cluster']['leader'] != leader
    assert info['state']['last_seq'] >= max(acked)
    for seq, data in acked.items():                    # every acknowledged message is there, at its sequence
        for _ in range(100):                           # a follower answering Direct Get may not have applied it yet
            m = await other.request('$JS.API.DIRECT.GET.S', json.dumps({'seq': seq}).encode(), timeout=10)
            if m.data == data: break
            await asyncio.sleep(0.1)
        assert m.data == data
    cluster.start(li)                                  # the killed server comes back and catches up from its peers
    _quiet(cluster, info['state']['messages'])
    total = info['state']['messages']
    for nc in ncs: await nc.close()
    cluster.stop()
    stores = cluster.stores('S')
    assert len(stores[0]) == total and stores[0] == stores[1] == stores[2]   # same sequences, subjects, data and times


async def test_no_quorum_no_acknowledgement(cluster):
    leader = await _create(cluster, 'Q')
    li = int(leader[1:])
    nc = await nats.connect(cluster.url(li))
    js = nc.jetstream()
    assert (await js.publish('q.x', b'one')).seq == 1
    for i in range(3):
        if i != li: cluster.kill(i)                    # the leader is alone: a minority
    with pytest.raises((NatsTimeout, asyncio.TimeoutError)):
        await js.publish('q.x', b'not committed', timeout=3)
    await nc.close()
    for i in range(3):
        if i != li: cluster.start(i)
    nc = await nats.connect(cluster.url((li + 1) % 3))
    a = await _publish_acked(nc.jetstream(), 'q.x', b'two', time.time() + 60)
    info = await _info(nc, 'Q')
    await nc.close()
    assert info['state']['last_seq'] == a.seq
    try: _quiet(cluster, info['state']['messages'])
    except TimeoutError: raise AssertionError(f"stores hold {[cluster.jsz(i)['messages'] for i in range(3)]} messages, not {info['state']['messages']}")
    cluster.stop()
    stores = cluster.stores('Q')
    assert stores[0] == stores[1] == stores[2]
    datas = [row[2] for row in stores[0]]
    assert len(datas) == a.seq                         # 'one', 'two', and the unacknowledged one only if it was committed


async def test_restart_keeps_the_meta_group_and_streams(cluster):
    await _create(cluster, 'K')
    nc = await nats.connect(cluster.url(1))
    r1 = await _req(nc, '$JS.API.STREAM.CREATE.ONE', {'name': 'ONE', 'subjects': ['one.>']})
    assert 'error' not in r1
    for k in range(5): await nc.jetstream().publish('k.x', f'{k}'.encode())
    r = await _req(nc, '$JS.API.STREAM.CREATE.MEM', {'name': 'MEM', 'subjects': ['mem.>'], 'num_replicas': 3, 'storage': 'memory'})
    assert 'error' not in r, r
    for k in range(3): await nc.jetstream().publish('mem.x', f'{k}'.encode())
    await nc.close()
    cluster.stop()
    cluster.start()
    cluster.wait_meta()
    nc = await nats.connect(cluster.url(2))
    deadline = time.time() + 60
    info = await _info(nc, 'K', 60)
    assert info['state']['messages'] == 5
    assert (await _req(nc, '$JS.API.STREAM.NAMES'))['streams'] == ['K', 'MEM', 'ONE']
    while True:                                        # a memory stream is rebuilt from its group's log
        mem = await _req(nc, '$JS.API.STREAM.INFO.MEM')
        if mem.get('state', {}).get('messages') == 3 or time.time() > deadline: break
        await asyncio.sleep(0.2)
    assert mem['state']['messages'] == 3
    a = await _publish_acked(nc.jetstream(), 'k.x', b'after the restart', time.time() + 60)
    assert a.seq == 6
    await nc.close()


async def test_consumer_on_a_stream_held_by_another_server(cluster):
    "A stream with one replica lives on one server; clients of the other servers use it and its consumers through the routes."
    nc0 = await nats.connect(cluster.url(0))
    r = await _req(nc0, '$JS.API.STREAM.CREATE.ONE', {'name': 'ONE', 'subjects': ['one.>']})
    host = int(r['cluster']['leader'][1:])
    other = (host + 1) % 3
    nc = await nats.connect(cluster.url(other))
    js = nc.jetstream()
    for k in range(5): assert (await js.publish('one.x', f'{k}'.encode())).seq == k + 1
    with pytest.raises(NoRespondersError):                # no Direct Get on that stream: no responders, from any server
        await nc.request('$JS.API.DIRECT.GET.ONE', b'{"seq": 1}', timeout=5)
    sub = await js.pull_subscribe('one.>', 'worker', stream='ONE')
    msgs = await sub.fetch(5, timeout=10)
    assert [m.data for m in msgs] == [f'{k}'.encode() for k in range(5)]
    for m in msgs: await m.ack_sync(timeout=10)
    info = await _req(nc, '$JS.API.CONSUMER.INFO.ONE.worker')
    assert (info['num_ack_pending'], info['ack_floor']['stream_seq']) == (0, 5)
    r = await _req(nc, '$JS.API.STREAM.UPDATE.ONE', {'name': 'ONE', 'subjects': ['one.>', 'uno.>']})
    assert r['config']['subjects'] == ['one.>', 'uno.>'] and r['cluster']['leader'] == f'n{host}'
    names = await _req(nc0, '$JS.API.STREAM.NAMES', {'subject': 'uno.x'})   # the meta group has the new subjects
    assert names['streams'] == ['ONE']
    r = await _req(nc, '$JS.API.STREAM.UPDATE.ONE', {'name': 'ONE', 'subjects': ['one.>'], 'num_replicas': 3}, timeout=30)
    assert (r['config']['num_replicas'], r['state']['messages']) == (3, 5), r
    info = await _req(nc, '$JS.API.CONSUMER.INFO.ONE.worker')        # the consumer's state came along
    assert (info['num_ack_pending'], info['ack_floor']['stream_seq']) == (0, 5), info
    r = await _req(nc, '$JS.API.STREAM.UPDATE.ONE', {'name': 'ONE', 'subjects': ['one.>'], 'num_replicas': 2}, timeout=30)
    assert (r['config']['num_replicas'], len(r['cluster']['replicas']), r['state']['messages']) == (2, 1, 5), r
    info = await _req(nc, '$JS.API.CONSUMER.INFO.ONE.worker')        # and through a move of the group (R3 to R2)
    assert (info['num_ack_pending'], info['ack_floor']['stream_seq']) == (0, 5), info
    await nc.close(); await nc0.close()


async def _fetch(sub, n: int, deadline: float) -> list:
    "Fetch up to `n` messages, asking again while the stream's group is between leaders."
    while time.time() < deadline:
        try: return await sub.fetch(n, timeout=2)
        except (NatsTimeout, asyncio.TimeoutError, NoRespondersError): await asyncio.sleep(0.1)
        except nats.js.errors.APIError: await asyncio.sleep(0.2)
    return []


async def _ack_sync(m, deadline: float):
    while time.time() < deadline:
        try: return await m.ack_sync(timeout=2)
        except (NatsTimeout, asyncio.TimeoutError, NoRespondersError): await asyncio.sleep(0.1)
    raise TimeoutError('ack never confirmed')


async def _durable_after(cluster, name: str, n: int, acks: int, creplicas: int = 0, **cfg):
    """An R3 stream `name` (`cfg`) with `n` messages published through a follower, and a durable pull consumer `work`
    (explicit acks, 2 s ack wait, `creplicas` replicas: 0 for the stream's) that fetched 10 and acknowledged the first `acks` with `AckSync`: (the stream's
    leader, its index, the connection, the consumer's create response, the subscription, the acknowledged sequences)."""
    leader = await _create(cluster, name, **cfg)
    li = int(leader[1:])
    nc = await nats.connect(cluster.url((li + 1) % 3), max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    js = nc.jetstream()
    for k in range(n): await js.publish(f'{name.lower()}.x', f'{k}'.encode())
    r = await _req(nc, f'$JS.API.CONSUMER.DURABLE.CREATE.{name}.work',
                   {'stream_name': name, 'config': {'durable_name': 'work', 'ack_policy': 'explicit', 'ack_wait': 2_000_000_000,
                                                    **({'num_replicas': creplicas} if creplicas else {})}})
    assert 'error' not in r, r
    sub = await js.pull_subscribe_bind('work', name)
    acked = set()
    for m in (await sub.fetch(10, timeout=10))[:acks]:
        await m.ack_sync(timeout=10); acked.add(m.metadata.sequence.stream)
    return leader, li, nc, r, sub, acked


async def _take_rest(sub, done) -> list:
    "Fetch and acknowledge (asking again across a leader change) until `done(stream sequences seen)`; the sequences seen."
    seen, deadline = [], time.time() + 90
    while not done(seen) and time.time() < deadline:
        for m in await _fetch(sub, 5, deadline):
            seen.append(m.metadata.sequence.stream)
            await _ack_sync(m, deadline)
    return seen


@pytest.mark.parametrize('creplicas', [0, 1])
async def test_consumer_survives_the_stream_leader(cluster, creplicas):
    """A durable pull consumer of an R3 stream (of the stream's replicas, or of one): after the stream's leader is killed,
    no acknowledged message is redelivered and no unacknowledged one is lost. The replicated consumer moves with the
    stream's leader; one of one replica runs on one server of the stream's (as in the reference) and stays there: the
    leader killed is then another server."""
    leader, li, nc, r, sub, acked = await _durable_after(cluster, 'W', 20, 6, creplicas)
    home = r['cluster']['leader']
    assert home == leader if creplicas == 0 else home in {'n0', 'n1', 'n2'}
    assert len(r['cluster'].get('replicas', [])) == (0 if creplicas == 1 else 2)
    if creplicas == 1 and home == leader:                # its server stays up: the stream's leader moves to the third server first
        to = f'n{(li + 2) % 3}'                          # (not the one the client is connected to)
        assert (await _req(nc, '$JS.API.STREAM.LEADER.STEPDOWN.W', {'placement': {'preferred': to}})).get('success')
        deadline = time.time() + 30
        while (await _info(nc, 'W'))['cluster'].get('leader') != to and time.time() < deadline: await asyncio.sleep(0.2)
        leader, li = to, int(to[1:])
    info = await _req(nc, '$JS.API.CONSUMER.INFO.W.work')
    assert (info['delivered']['stream_seq'], info['ack_floor']['stream_seq'], info['num_ack_pending']) == (10, 6, 4)
    cluster.kill(li)
    seen = await _take_rest(sub, lambda seen: len(set(seen) - acked) >= 14)   # 4 pending (after ack_wait) and 10 never delivered
    assert not acked & set(seen), f'acknowledged messages redelivered: {sorted(acked & set(seen))}'
    assert set(seen) == set(range(7, 21))
    info = await _info(nc, 'W')
    assert info['cluster']['leader'] != leader
    ci = await _req(nc, '$JS.API.CONSUMER.INFO.W.work')
    assert (ci['ack_floor']['stream_seq'], ci['num_ack_pending'], ci['num_pending']) == (20, 0, 0)
    assert ci['cluster']['leader'] == (home if creplicas == 1 else info['cluster']['leader'])
    await nc.close()


async def test_work_queue_on_three_replicas(cluster):
    """A work queue of three replicas: an acknowledged message leaves every replica's store (the leader decides, the
    log carries the removal); after the leader is killed, the new one hands out only what was not acknowledged, and
    the replicas' stores end up the same."""
    leader, li, nc, _, sub, acked = await _durable_after(cluster, 'Q', 30, 8, retention='workqueue')
    _quiet(cluster, 22)                                  # removed on every replica, not only on the leader
    cluster.kill(li)
    seen = await _take_rest(sub, lambda seen: len(set(seen)) >= 22)
    assert not acked & set(seen), f'acknowledged messages handed out again: {sorted(acked & set(seen))}'
    assert set(seen) == set(range(9, 31))
    info = await _info(nc, 'Q')
    assert info['state']['messages'] == 0 and info['cluster']['leader'] != leader
    await nc.close()
    _wait(lambda: all(cluster.jsz(i)['messages'] == 0 for i in cluster.up()))
    cluster.start(li)                                    # the old leader catches up: the removals reach it through the log
    _quiet(cluster, 0)
    cluster.stop()
    stores = cluster.stores('Q')
    assert stores[0] == stores[1] == stores[2] == []


async def test_expiry_decided_once(cluster):
    """Per-message TTLs and subject delete markers on three replicas: the leader decides each expiry once, so every
    replica removes the same messages and stores the same markers, at the same sequences and times."""
    await _create(cluster, 'T', allow_msg_ttl=True, subject_delete_marker_ttl=60_000_000_000, max_age=3_000_000_000)
    nc = await nats.connect(cluster.url(0))
    js = nc.jetstream()
    for k in range(5): await js.publish(f't.{k}', b'x', headers={'Nats-TTL': '1s'})
    await js.publish('t.keep', b'y', headers={'Nats-TTL': 'never'})
    await js.publish('t.old', b'z')                      # goes with max_age, leaving a marker too
    deadline = time.time() + 30
    while (info := await _info(nc, 'T'))['state']['last_seq'] < 13 and time.time() < deadline: await asyncio.sleep(0.2)
    assert (info['state']['messages'], info['state']['last_seq']) == (7, 13)
    _wait(lambda: all(cluster.jsz(i)['messages'] == 7 for i in range(cluster.n)), 30)
    await nc.close()
    cluster.stop()
    stores = cluster.stores('T')
    assert stores[0] == stores[1] == stores[2]
    assert [(q, subject) for q, subject, _, _ in stores[0]] == [(6, 't.keep')] + [(8 + k, f't.{k}') for k in range(5)] + [(13, 't.old')]


async def test_expiry_while_a_follower_is_stopped(cluster):
    """A follower stopped while messages expire with delete markers comes back with the same store as the others: at
    its start it does not expire on its own clock (which would leave out the markers and shift its later sequences),
    it takes the leader's decisions."""
    leader = await _create(cluster, 'X', allow_msg_ttl=True, subject_delete_marker_ttl=1_000_000_000)
    nc = await nats.connect(cluster.url(int(leader[1:])))              # (not the server stopped below)
    js = nc.jetstream()
    for k in range(5): await js.publish(f'x.{k}', b'x', headers={'Nats-TTL': '2s'})
    _quiet(cluster, 5)
    off = next(i for i in range(cluster.n) if f'n{i}' != leader)
    cluster.procs[off].stop()                                          # a plain stop (SIGTERM), then a restart
    deadline = time.time() + 30                                      # they expire meanwhile: five markers take their place
    while (await _info(nc, 'X'))['state']['last_seq'] < 10 and time.time() < deadline: await asyncio.sleep(0.2)
    cluster.start(off)
    cluster.wait_meta()
    for k in range(3): await _publish_acked(js, f'x.new{k}', b'y', time.time() + 60)
    assert (await _info(nc, 'X'))['state']['last_seq'] == 13
    _wait(lambda: all(cluster.jsz(i)['messages'] == 3 for i in range(cluster.n)), 60)   # (the markers expire in turn)
    await nc.close()
    cluster.stop()
    stores = cluster.stores('X')
    assert stores[0] == stores[1] == stores[2]
    assert [(q, subject) for q, subject, *_ in stores[0]] == [(11 + k, f'x.new{k}') for k in range(3)]


async def test_schedules_fire_once_on_three_replicas(cluster):
    """Message schedules on three replicas: the leader's timer decides, and every replica fires what is due at the
    leader's time, so a one-off schedule leaves one copy, and a repeating one the same copies, on every replica."""
    await _create(cluster, 'SC', allow_msg_schedules=True)
    nc = await nats.connect(cluster.url(1))
    js = nc.jetstream()
    at = '@at ' + time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + 2))
    await js.publish('sc.once', b'one', headers={'Nats-Schedule': at, 'Nats-Schedule-Target': 'sc.out.once'})
    await js.publish('sc.every', b'tick', headers={'Nats-Schedule': '@every 1s', 'Nats-Schedule-Target': 'sc.out.every'})
    deadline = time.time() + 30
    while (info := await _info(nc, 'SC'))['state']['last_seq'] < 6 and time.time() < deadline: await asyncio.sleep(0.2)
    await js.publish('sc.every', b'stop')                # a plain message ends the repeating schedule
    await asyncio.sleep(1.5)
    info = await _info(nc, 'SC')
    last = info['state']['last_seq']
    _wait(lambda: all(cluster.jsz(i)['messages'] == info['state']['messages'] for i in range(cluster.n)), 30)
    await nc.close()
    cluster.stop()
    stores = cluster.stores('SC')
    assert stores[0] == stores[1] == stores[2]           # same sequences, subjects, data and times everywhere
    subjects = [subject for _, subject, _, _ in stores[0]]
    assert subjects.count('sc.out.once') == 1 and subjects.count('sc.out.every') >= 3 and stores[0][-1][0] <= last


async def test_kv_compare_and_set_on_three_replicas(cluster):
    """A key-value bucket of three replicas, one key updated with compare-and-set by six clients spread over the three
    servers at once: every revision in the key's history was written by an update based on the revision just before
    it (so no revision is won twice, whatever the clients heard), every update a client saw succeed is there, and the
    replicas' stores end up the same."""
    ncs = [await nats.connect(cluster.url(i % 3)) for i in range(6)]
    kv = await ncs[0].jetstream().create_key_value(bucket='CAS', history=64, replicas=3)
    await kv.put('k', b'start')
    based_on, wins, refused = {}, [], 0                  # value -> the revision its update named; (revision, value) won

    async def worker(w: int):
        nonlocal refused
        b = await ncs[w].jetstream().key_value('CAS')
        for i in range(12):
            try: rev = (await b.get('k')).revision
            except Exception: continue
            value = f'{w}.{i}'; based_on[value] = rev
            try: wins.append((await b.update('k', value.encode(), last=rev), value))
            except nats.js.errors.KeyWrongLastSequenceError: refused += 1
            except (NatsTimeout, asyncio.TimeoutError, nats.js.errors.APIError): pass    # stored or not: the history says
    await asyncio.gather(*(worker(w) for w in range(6)))
    assert wins and refused, (len(wins), refused)        # the clients did race
    history = await kv.history('k')
    assert history[0].value == b'start'
    for prev, e in zip(history, history[1:]):
        assert based_on[e.value.decode()] == prev.revision, f'{e.value!r} stored at {e.revision}, based on {based_on[e.value.decode()]}'
    assert set(wins) <= {(e.revision, e.value.decode()) for e in history}
    for nc in ncs: await nc.close()
    cluster.stop()
    stores = cluster.stores('KV_CAS')
    assert stores[0] == stores[1] == stores[2] and len(stores[0]) == len(history)


async def test_push_and_ephemeral_consumers_and_a_restart(cluster):
    "Push and ephemeral consumers of an R3 stream through a server that does not lead it; a durable's state survives a restart of the whole cluster."
    leader = await _create(cluster, 'P')
    li = int(leader[1:])
    nc = await nats.connect(cluster.url((li + 1) % 3))
    js = nc.jetstream()
    for k in range(5): await js.publish('p.x', f'{k}'.encode())
    got = asyncio.Queue()
    async def cb(m):
        await m.ack_sync(timeout=10); await got.put(m.metadata.sequence.stream)
    push = await js.subscribe('p.x', stream='P', cb=cb, manual_ack=True)        # an ephemeral push consumer
    assert sorted([await asyncio.wait_for(got.get(), 10) for _ in range(5)]) == [1, 2, 3, 4, 5]
    ci = await push.consumer_info()
    assert (ci.ack_floor.stream_seq, ci.num_ack_pending, ci.cluster.leader in ('n0', 'n1', 'n2'), ci.cluster.replicas) == (5, 0, True, None)   # placed: one replica
    await push.unsubscribe()
    eph = await js.pull_subscribe('p.x', stream='P')                             # an ephemeral pull consumer
    assert [m.metadata.sequence.stream for m in await eph.fetch(5, timeout=10)] == [1, 2, 3, 4, 5]
    r = await _req(nc, '$JS.API.CONSUMER.DURABLE.CREATE.P.keep', {'stream_name': 'P', 'config': {'durable_name': 'keep', 'ack_policy': 'explicit'}})
    assert 'error' not in r, r
    dur = await js.pull_subscribe_bind('keep', 'P')
    for m in await dur.fetch(3, timeout=10): await m.ack_sync(timeout=10)
    r = await _req(nc, '$JS.API.CONSUMER.CREATE.P', {'stream_name': 'P', 'config': {'ack_policy': 'explicit', 'num_replicas': 5}})
    assert r['error'] == {'code': 400, 'err_code': 10126, 'description': 'consumer config replica count exceeds parent stream'}
    await nc.close()
    cluster.stop(); cluster.start(); cluster.wait_meta()
    nc = await nats.connect(cluster.url(li))
    deadline = time.time() + 60
    while True:
        ci = await _req(nc, '$JS.API.CONSUMER.INFO.P.keep')
        if 'error' not in ci or time.time() > deadline: break
        await asyncio.sleep(0.2)
    assert (ci['delivered']['stream_seq'], ci['ack_floor']['stream_seq'], ci['num_ack_pending'], ci['num_pending']) == (3, 3, 0, 2)
    dur = await nc.jetstream().pull_subscribe_bind('keep', 'P')
    assert [m.metadata.sequence.stream for m in await _fetch(dur, 5, time.time() + 60)] == [4, 5]
    await nc.close()


async def test_scale_down_to_one_replica(cluster):
    "R3 -> R1 by updating `num_replicas`: the leader keeps the stream and its consumers, the others drop their replicas; it survives a restart, and goes back to R3."
    leader = await _create(cluster, 'D')
    li = int(leader[1:])
    nc = await nats.connect(cluster.url((li + 1) % 3))
    js = nc.jetstream()
    for k in range(5): await js.publish('d.x', f'{k}'.encode())
    r = await _req(nc, '$JS.API.CONSUMER.DURABLE.CREATE.D.keep', {'stream_name': 'D', 'config': {'durable_name': 'keep', 'ack_policy': 'explicit'}})
    assert 'error' not in r, r
    sub = await js.pull_subscribe_bind('keep', 'D')
    for m in await sub.fetch(2, timeout=10): await m.ack_sync(timeout=10)
    r = await _req(nc, '$JS.API.STREAM.UPDATE.D', {'name': 'D', 'subjects': ['d.>'], 'num_replicas': 1})
    assert 'error' not in r, r
    assert (r['config']['num_replicas'], r['cluster'], r['state']['messages']) == (1, {'name': 'c1', 'leader': leader}, 5)
    _wait(lambda: [cluster.jsz(i)['streams'] for i in range(3)] == [1 if i == li else 0 for i in range(3)])
    assert (await js.publish('d.x', b'5')).seq == 6
    ci = await _req(nc, '$JS.API.CONSUMER.INFO.D.keep')
    assert (ci['ack_floor']['stream_seq'], ci['num_pending'], ci['cluster']) == (2, 4, {'name': 'c1', 'leader': leader})
    assert [m.metadata.sequence.stream for m in await sub.fetch(4, timeout=10)] == [3, 4, 5, 6]
    await nc.close()
    cluster.stop(); cluster.start(); cluster.wait_meta()
    nc = await nats.connect(cluster.url((li + 2) % 3))
    info = await _info(nc, 'D', 60)
    assert (info['config']['num_replicas'], info['state']['messages'], info['cluster']['leader']) == (1, 6, leader)
    assert (await _publish_acked(nc.jetstream(), 'd.x', b'6', time.time() + 60, headers={'Nats-Msg-Id': 'd6'})).seq == 7
    r = await _req(nc, '$JS.API.STREAM.UPDATE.D', {'name': 'D', 'subjects': ['d.>'], 'num_replicas': 3}, timeout=30)
    assert (r['config']['num_replicas'], r['state']['messages']) == (3, 7), r    # up again: the old group's journals are not replayed
    assert (await _publish_acked(nc.jetstream(), 'd.x', b'7', time.time() + 60, headers={'Nats-Msg-Id': 'd7'})).seq == 8
    _quiet(cluster, 8)
    await nc.close()


async def test_empty_disk_rebuilt_from_peers(cluster):
    "A server whose store is wiped comes back under its name: it rejoins the meta group and every replicated stream, and its replicas are rebuilt from the peers' logs."
    await _create(cluster, 'E')
    nc = await nats.connect(cluster.url(0))
    js = nc.jetstream()
    for k in range(30): await js.publish('e.x', f'm{k}'.encode())
    kv = await js.create_key_value(bucket='B', history=5, replicas=3)
    await kv.put('k', b'v1'); await kv.put('k', b'v2')
    lost = 2
    cluster.kill(lost)
    shutil.rmtree(cluster.root / f'n{lost}' / 'store')
    for k in range(30, 40): await _publish_acked(js, 'e.x', f'm{k}'.encode(), time.time() + 60)
    cluster.start(lost)
    assert cluster.wait_meta() and len(cluster.jsz(lost)['meta_cluster']['replicas']) == 2
    for k in range(40, 45): await _publish_acked(js, 'e.x', f'm{k}'.encode(), time.time() + 60)
    _wait(lambda: cluster.jsz(lost)['streams'] == 2)
    _quiet(cluster, 45 + 2)
    assert 'has no state on disk: rejoining' in cluster.procs[lost].log_text()
    await nc.close()
    nc = await nats.connect(cluster.url(lost))                    # the rebuilt server's clients see the bucket as before
    kv = await nc.jetstream().key_value('B')
    assert [e.value for e in await kv.history('k')] == [b'v1', b'v2']
    await nc.close()
    cluster.stop()
    stores = cluster.stores('E')
    assert len(stores[0]) == 45 and stores[0] == stores[1] == stores[2]
    kvs = cluster.stores('KV_B')
    assert len(kvs[0]) == 2 and kvs[0] == kvs[1] == kvs[2]


async def test_scale_up_from_one_replica(cluster):
    "R1 -> R3 by updating `num_replicas`: the first server's store (deleted sequences and times included) and its consumer are copied to two new replicas; publishing and the consumer go on through the group, across a leader change; the stores end equal."
    nc = await nats.connect(cluster.url(0), max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    js = nc.jetstream()
    r = await _req(nc, '$JS.API.STREAM.CREATE.U', {'name': 'U', 'subjects': ['u.>']})
    holder = int(r['cluster']['leader'][1:])
    for k in range(20): await js.publish(f'u.{k % 3}', f'm{k}'.encode(), headers={'Nats-Msg-Id': f'id-{k}'})
    for seq in (5, 20): assert (await _req(nc, '$JS.API.STREAM.MSG.DELETE.U', {'seq': seq}))['success']   # a gap, and a last sequence with no message
    r = await _req(nc, '$JS.API.CONSUMER.DURABLE.CREATE.U.c', {'stream_name': 'U', 'config': {'durable_name': 'c', 'ack_policy': 'explicit'}})
    assert 'error' not in r, r
    sub = await js.pull_subscribe_bind('c', 'U')
    for m in await sub.fetch(3, timeout=10): await m.ack_sync(timeout=10)
    r = await _req(nc, '$JS.API.STREAM.UPDATE.U', {'name': 'U', 'subjects': ['u.>'], 'num_replicas': 3}, timeout=30)
    assert r['type'] == 'io.nats.jetstream.api.v1.stream_update_response', r
    assert (r['config']['num_replicas'], len(r['cluster']['replicas'])) == (3, 2)
    assert (r['state']['messages'], r['state']['first_seq'], r['state']['last_seq'], r['state']['num_deleted']) == (18, 1, 20, 2)
    _wait(lambda: [cluster.jsz(i)['streams'] for i in range(3)] == [1, 1, 1])
    assert (await _publish_acked(js, 'u.x', b'after', time.time() + 60, headers={'Nats-Msg-Id': 'after'})).seq == 21
    _quiet(cluster, 19)
    ci = await _req(nc, '$JS.API.CONSUMER.INFO.U.c')
    assert (ci['ack_floor']['stream_seq'], ci['num_pending'], ci['config']['num_replicas']) == (3, 16, 0), ci
    cluster.kill(holder)                                           # the group goes on with the two copies only
    assert (await _publish_acked(js, 'u.x', b'after kill', time.time() + 60, headers={'Nats-Msg-Id': 'after-kill'})).seq == 22
    again = await _publish_acked(js, 'u.0', b'm6', time.time() + 60, headers={'Nats-Msg-Id': 'id-6'})
    assert (again.seq, again.duplicate) == (7, True)               # a copy's duplicate window has the copied ids
    got = []
    deadline = time.time() + 60
    while len(got) < 2 and time.time() < deadline:                 # the consumer resumes after its ack floor on the new leader
        try: got += [m.metadata.sequence.stream for m in await sub.fetch(2 - len(got), timeout=2)]
        except (NatsTimeout, asyncio.TimeoutError, nats.js.errors.ServiceUnavailableError): pass
    assert got == [4, 6]
    cluster.start(holder)
    _quiet(cluster, 20)
    await nc.close()
    cluster.stop()
    stores = cluster.stores('U')
    assert [row[0] for row in stores[0]] == [q for q in range(1, 23) if q not in (5, 20)]
    assert stores[0] == stores[1] == stores[2]                     # same sequences, subjects, data and times


async def test_peer_remove_and_replica_changes():
    "On four servers: `STREAM.PEER.REMOVE` of a follower, then of the leader, moves the replica to the server left out; R3 -> R4 -> R2 by updates; the consumer and the messages follow; the holders' stores end equal."
    c = JSCluster('jsnb', n=4)
    try:
        c.start(); c.wait_meta()
        nc = await nats.connect(c.url(0), max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        js = nc.jetstream()
        r = await _req(nc, '$JS.API.STREAM.CREATE.P', {'name': 'P', 'subjects': ['p.>'], 'num_replicas': 3})
        assert 'error' not in r, r
        for k in range(10): await js.publish('p.x', f'm{k}'.encode())
        r = await _req(nc, '$JS.API.CONSUMER.DURABLE.CREATE.P.c', {'stream_name': 'P', 'config': {'durable_name': 'c', 'ack_policy': 'explicit'}})
        assert 'error' not in r, r
        sub = await js.pull_subscribe_bind('c', 'P')
        for m in await _fetch_n(sub, 3): await m.ack_sync(timeout=10)

        def holders(): return sorted(f'n{i}' for i in range(4) if c.jsz(i)['streams'])
        async def members():
            info = await _info(nc, 'P')
            return sorted([info['cluster']['leader']] + [p['name'] for p in info['cluster'].get('replicas', [])])
        async def remove(peer):
            r = await _ask(nc, '$JS.API.STREAM.PEER.REMOVE.P', {'peer': peer})
            assert r == {'type': 'io.nats.jetstream.api.v1.stream_remove_peer_response', 'success': True}, r
        info = await _info(nc, 'P')
        follower = info['cluster']['replicas'][0]['name']
        await remove(follower)
        _wait(lambda: len(holders()) == 3 and follower not in holders())
        assert (await _publish_acked(js, 'p.x', b'm10', time.time() + 60, headers={'Nats-Msg-Id': 'm10'})).seq == 11
        await remove((await _info(nc, 'P'))['cluster']['leader'])                      # the leader itself
        _wait(lambda: len(holders()) == 3 and follower in holders())                  # the one left out takes its place
        assert (await _publish_acked(js, 'p.x', b'm11', time.time() + 60, headers={'Nats-Msg-Id': 'm11'})).seq == 12
        assert sorted(await members()) == holders()
        r = await _req(nc, '$JS.API.STREAM.PEER.REMOVE.P', {'peer': 'nobody'})
        assert r['error'] == {'code': 400, 'err_code': 10040, 'description': 'peer not a member'}
        r = await _ask(nc, '$JS.API.STREAM.UPDATE.P', {'name': 'P', 'subjects': ['p.>', 'q.>'], 'num_replicas': 4})
        assert (r['config']['num_replicas'], len(r['cluster']['replicas']), r['state']['messages']) == (4, 3, 12), r
        _wait(lambda: holders() == ['n0', 'n1', 'n2', 'n3'])
        for k in range(3):                          # every replica took the new subject too, whichever leads
            assert (await _publish_acked(js, 'q.x', f'q{k}'.encode(), time.time() + 60, headers={'Nats-Msg-Id': f'q{k}'})).seq == 13 + k
            deadline = time.time() + 30
            while not (await _ask(nc, '$JS.API.STREAM.LEADER.STEPDOWN.P', None)).get('success'):    # (10005 while no follower is
                assert time.time() < deadline; await asyncio.sleep(0.2)                             # caught up to take over)
        assert (await _publish_acked(js, 'q.x', b'q3', time.time() + 60, headers={'Nats-Msg-Id': 'q3'})).seq == 16
        r = await _ask(nc, '$JS.API.STREAM.PEER.REMOVE.P', {'peer': 'n0'})        # no server left to take its place
        assert r['error'] == {'code': 503, 'err_code': 10075, 'description': 'peer remap failed'}
        r = await _ask(nc, '$JS.API.STREAM.UPDATE.P', {'name': 'P', 'subjects': ['p.>', 'q.>'], 'num_replicas': 2})
        assert (r['config']['num_replicas'], len(r['cluster']['replicas']), r['state']['messages']) == (2, 1, 16), r
        _wait(lambda: len(holders()) == 2)
        assert (await _publish_acked(js, 'p.x', b'm12', time.time() + 60, headers={'Nats-Msg-Id': 'm12'})).seq == 17
        ci = await _ask(nc, '$JS.API.CONSUMER.INFO.P.c', None)                    # (10008 while the group settles)
        assert ((ci.get('ack_floor') or {}).get('stream_seq'), ci.get('num_pending')) == (3, 14), ci   # (an error shows whole)
        kept = [int(h[1:]) for h in holders()]
        _wait(lambda: all(c.jsz(i)['messages'] == 17 for i in kept))
        await nc.close()
        c.stop()
        stores = c.stores('P')
        assert len(stores[kept[0]]) == 17 and stores[kept[0]] == stores[kept[1]]
    finally: c.stop()


async def test_peer_remove_of_a_stream_of_one_replica_whose_server_is_gone(cluster):
    """The only server of a stream is killed, and removed from it through another server: the meta leader starts the
    stream again, empty, on a third server (its durable consumer is lost with the server that held it); the removed
    server, back, drops its old copy, files and all. While it was up, the same request moved the consumer too."""
    nc = await nats.connect(cluster.url(0))
    js = nc.jetstream()
    r = await _req(nc, '$JS.API.STREAM.CREATE.M1', {'name': 'M1', 'subjects': ['m1'], 'num_replicas': 1})
    assert 'error' not in r, r
    old = int(r['cluster']['leader'][1:])
    for k in range(3): await js.publish('m1', b'%d' % k)
    r = await _req(nc, '$JS.API.CONSUMER.DURABLE.CREATE.M1.d', {'stream_name': 'M1', 'config': {'durable_name': 'd', 'ack_policy': 'explicit'}})
    assert 'error' not in r, r
    await nc.close()
    cluster.kill(old)
    via = (old + 1) % 3
    nc = await nats.connect(cluster.url(via))
    js = nc.jetstream()
    deadline = time.time() + 30
    while True:                                 # until the servers left see that the killed one is gone (its routes closed)
        try: r = await _req(nc, '$JS.API.STREAM.PEER.REMOVE.M1', {'peer': f'n{old}'}, timeout=3); break
        except NatsTimeout: assert time.time() < deadline
    assert r == {'type': 'io.nats.jetstream.api.v1.stream_remove_peer_response', 'success': True}, r
    info = await _info(nc, 'M1')
    assert info['cluster']['leader'] not in ('', f'n{old}') and (info['state']['messages'], info['state']['last_seq']) == (0, 0), info
    assert (await _req(nc, '$JS.API.CONSUMER.INFO.M1.d'))['error']['err_code'] == 10014
    assert (await js.publish('m1', b'new')).seq == 1
    await nc.close()
    cluster.start(old); cluster.wait_meta()
    store = cluster.root / f'n{old}' / 'store' / 'jetstream' / '$G' / 'streams' / 'M1'
    _wait(lambda: cluster.jsz(old)['streams'] == 0 and not store.exists())
    assert cluster.jsz(int(info['cluster']['leader'][1:]))['messages'] == 1

async def test_no_new_replicated_stream_on_a_server_that_is_down(cluster):
    """A server with no route to it counts as offline when a new stream's servers are chosen: with one of three down,
    an R3 stream is refused at once with the reference's words for it (before, its group waited forever for the third
    server), an R1 stream goes to a server that is up, and a stream whose leader is gone is deleted once a new one leads."""
    nc = await nats.connect(cluster.url(0))
    assert 'error' not in await _req(nc, '$JS.API.STREAM.CREATE.D3', {'name': 'D3', 'subjects': ['d3'], 'num_replicas': 3})
    cluster.kill(2)
    def routes(i):
        with urllib.request.urlopen(f'http://127.0.0.1:{cluster.http[i]}/routez', timeout=5) as f: return json.load(f)['num_routes']
    _wait(lambda: routes(0) == routes(1) == 1)          # the servers left have seen its routes close
    r = await _req(nc, '$JS.API.STREAM.CREATE.N3', {'name': 'N3', 'subjects': ['n3'], 'num_replicas': 3})
    assert r['error'] == {'code': 400, 'err_code': 10005, 'description': 'no suitable peers for placement, peer offline'}
    r = await _req(nc, '$JS.API.STREAM.CREATE.N1', {'name': 'N1', 'subjects': ['n1'], 'num_replicas': 1})
    assert r['cluster']['leader'] in ('n0', 'n1'), r
    assert (await _ask(nc, '$JS.API.STREAM.DELETE.D3', None)).get('success') is True
    await nc.close()

async def test_meta_log_compaction():
    """With a small threshold, the meta log is compacted while a server is down and streams are deleted and created; the
    server comes back and takes the leader's snapshot (the deleted streams leave its disk, it knows the new ones, and
    its replicated stream catches up); then every server restarts from its own snapshot with the same streams."""
    c = JSCluster('jsnb', env={'JSNB_META_COMPACT': '3000'})
    snap = [c.root / f'n{i}' / 'store' / 'jetstream' / '_meta_' / 'journal.snapshot' for i in range(3)]
    try:
        c.start(); c.wait_meta()
        nc = await nats.connect(c.url(0))
        for i in range(3):
            assert 'error' not in await _req(nc, f'$JS.API.STREAM.CREATE.A{i}', {'name': f'A{i}', 'subjects': [f'a{i}'], 'num_replicas': 3})
            for k in range(3): await nc.jetstream().publish(f'a{i}', b'%d' % k)
        _wait(lambda: all(c.jsz(i)['messages'] == 9 for i in range(3)))
        await nc.close()
        c.kill(2)
        nc = await nats.connect(c.url(0))
        for i in range(2): assert (await _ask(nc, f'$JS.API.STREAM.DELETE.A{i}', None)).get('success'), i
        for k in range(2): await _publish_acked(nc.jetstream(), 'a2', b'more', time.time() + 30)
        names, k = ['A2'], 0
        while k < 8 or not snap[0].exists():             # until the meta log was compacted (tried again after a refusal)
            assert k < 60, 'the meta log was never compacted'
            r = await _ask(nc, f'$JS.API.STREAM.CREATE.B{k}', {'name': f'B{k}', 'subjects': [f'b{k}'], 'num_replicas': 1})
            assert 'error' not in r, r
            names.append(f'B{k}'); k += 1
        await nc.close()
        c.start(2); c.wait_meta()
        gone = [c.root / 'n2' / 'store' / 'jetstream' / '$G' / 'streams' / f'A{i}' for i in range(2)]
        _wait(lambda: (c.jsz(2)['streams'], c.jsz(2)['messages']) == (1, 5) and not any(p.exists() for p in gone))
        assert snap[2].exists()                          # (the leader's, installed: the entries it missed were compacted)
        nc = await nats.connect(c.url(2))
        assert sorted((await _req(nc, '$JS.API.STREAM.NAMES'))['streams']) == sorted(names)
        await nc.close()
        c.stop(); c.start(); c.wait_meta()
        assert all(p.exists() for p in snap)
        nc = await nats.connect(c.url(1))
        assert sorted((await _req(nc, '$JS.API.STREAM.NAMES'))['streams']) == sorted(names)
        assert (await _publish_acked(nc.jetstream(), 'a2', b'z', time.time() + 60)).seq == 6
        await nc.close()
        _wait(lambda: sum(c.jsz(i)['streams'] for i in range(3)) == 3 + len(names) - 1 and c.jsz(2)['messages'] == 6)
    finally: c.stop()


async def test_runs_of_messages_on_three_replicas(cluster):
    "Many publishes in one write reach the leader in one read and are one entry of the log, stored as one run by every replica: acks, duplicates within the run and against the window, and the stores (times included) as for one message at a time."
    await _create(cluster, 'RUN')
    nc = await nats.connect(cluster.url(1))
    assert (await nc.jetstream().publish('run.x', b'first', headers={'Nats-Msg-Id': 'id-0'})).seq == 1
    inbox = nc.new_inbox()
    acks = []
    async def took(m): acks.append(json.loads(m.data))
    sub = await nc.subscribe(inbox, cb=took)
    for k in range(300):                                # ids 0..199, each id of 100..199 twice; id-0 is already stored
        await nc.publish('run.x', f'm{k}'.encode(), reply=inbox, headers={'Nats-Msg-Id': f'id-{k if k < 200 else k - 100}'})
    for k in range(300, 400): await nc.publish('run.y', f'm{k}'.encode(), reply=inbox)       # and a run without headers
    await nc.flush()
    deadline = time.time() + 30
    while len(acks) < 400 and time.time() < deadline: await asyncio.sleep(0.05)
    assert len(acks) == 400 and not [a for a in acks if 'error' in a]
    fresh = [a['seq'] for a in acks if not a.get('duplicate')]
    assert sorted(fresh) == list(range(2, 2 + 199 + 100))              # id-1..id-199 and the 100 without ids, once each
    assert sum(1 for a in acks if a.get('duplicate')) == 101
    await sub.unsubscribe(); await nc.close()
    _quiet(cluster, 1 + 199 + 100)
    cluster.stop()
    stores = cluster.stores('RUN')
    assert len(stores[0]) == 300 and stores[0] == stores[1] == stores[2]


async def _publish_id(js, subject: str, data: bytes, deadline: float):
    "Publish with a message id until acknowledged; a retry of a publish that was committed is a duplicate the stream drops."
    return await _publish_acked(js, subject, data, deadline, headers={'Nats-Msg-Id': data.decode()})


@pytest.mark.soak
@pytest.mark.parametrize('rounds', [20])
async def test_kill_the_leader_soak(cluster, rounds):
    "Kill the stream leader `rounds` times under acknowledged publishing; report rounds, messages, lost, duplicated, divergent."
    await _create(cluster, allow_direct=True)
    ncs = [await nats.connect(cluster.url(i), max_reconnect_attempts=-1, reconnect_time_wait=0.2) for i in range(3)]
    acked, k = {}, 0
    for r in range(rounds):
        leader = (await _info(ncs[r % 3], 'S'))['cluster']['leader']
        li = int(leader[1:])
        js = ncs[(li + 1) % 3].jetstream()
        for _ in range(10):
            a = await _publish_id(js, 's.x', f'm{k}'.encode(), time.time() + 60); acked[f'm{k}'.encode()] = a.seq; k += 1
        cluster.kill(li)
        for _ in range(10):
            a = await _publish_id(js, 's.x', f'm{k}'.encode(), time.time() + 60); acked[f'm{k}'.encode()] = a.seq; k += 1
        cluster.start(li)
        _quiet(cluster, (await _info(ncs[(li + 1) % 3], 'S'))['state']['messages'])
    for nc in ncs: await nc.close()
    cluster.stop()
    stores = cluster.stores('S')
    import hashlib
    stored = {h: seq for seq, _, h, _ in stores[0]}
    lost = sum(1 for data in acked if hashlib.sha256(data).hexdigest()[:16] not in stored)
    duplicated = len(stores[0]) - len(stored)
    divergent = sum(1 for s in stores[1:] if s != stores[0])
    print(f'rounds={rounds} messages={len(acked)} stored={len(stores[0])} lost={lost} duplicated={duplicated} divergent={divergent}')
    assert (lost, duplicated, divergent) == (0, 0, 0)


async def test_jsnb_cluster_command_with_jetstream(tmp_path):
    "`jsnb cluster --size 3 --js`: three servers whose JetStream is replicated; an R3 stream works through any of them."
    import signal, subprocess, sys
    p = subprocess.Popen([sys.executable, '-c', 'import sys; from jsnb.cli import jsnb_main; sys.exit(jsnb_main())',
                          'cluster', '--size', '3', '--name', 'dev', '--js', '--dir', str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        urls = [p.stdout.readline().split()[1] for _ in range(3)]
        nc = None
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                nc = nc or await nats.connect(urls[0])
                r = await _req(nc, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s.>'], 'num_replicas': 3}, timeout=2)
                if 'error' not in r: break
            except (OSError, NatsTimeout, NoRespondersError): pass
            await asyncio.sleep(0.3)
        assert r['config']['num_replicas'] == 3 and len(r['cluster']['replicas']) == 2
        other = await nats.connect(urls[2])
        assert (await other.jetstream().publish('s.x', b'hi')).seq == 1
        await other.close(); await nc.close()
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
        p.stdout.close()
    assert sorted(d.name for d in tmp_path.iterdir() if d.is_dir()) == ['dev-1', 'dev-2', 'dev-3']   # a store per server


async def test_lagging_follower_hands_reads_to_the_leader():
    """The read-after-write spec's testing recipe with a follower paused: server n2 applies its log 3 s late
    (`JSNB_APPLY_LAG`). A Direct Get with `min_last_seq` that n2 cannot satisfy yet is handed to the stream leader,
    which answers it: every request succeeds with the message just written, none gets `412 Min Last Sequence`."""
    import os
    c = JSCluster('jsnb')
    try:
        for i in range(3):
            if i == 2: os.environ['JSNB_APPLY_LAG'] = '3'
            try: c.start(i)
            finally: os.environ.pop('JSNB_APPLY_LAG', None)
        c.wait_meta()
        leader = await _create(c, allow_direct=True)
        nc0 = await nats.connect(c.url(0))
        for _ in range(10):                                   # n2 must be a follower
            if leader != 'n2': break
            await _req(nc0, '$JS.API.STREAM.LEADER.STEPDOWN.S')
            await asyncio.sleep(1)
            leader = (await _info(nc0, 'S'))['cluster']['leader']
        assert leader != 'n2'
        _wait(lambda: c.jsz(2)['streams'] == 1)               # n2 has applied the stream's assignment (late)
        await asyncio.sleep(3.5)                              # and everything before the publish below
        nc2 = await nats.connect(c.url(2))
        ack = await nc2.jetstream().publish('s.x', b'one')
        assert c.jsz(2)['messages'] == 0                      # n2 has not applied it: a plain read there would be stale
        statuses = []
        for _ in range(12):                                   # Direct Get's queue group picks any replica, n2 among them
            m = await nc2.request('$JS.API.DIRECT.GET.S', json.dumps({'seq': ack.seq, 'min_last_seq': ack.seq}).encode(), timeout=5)
            statuses.append((m.headers or {}).get('Status'))
            assert m.data == b'one' and m.headers['Nats-Sequence'] == str(ack.seq), (m.headers, m.data)
        assert c.jsz(2)['messages'] == 0, 'the lag ended during the reads: nothing was shown'
        assert statuses == [None] * 12
        await nc0.close(); await nc2.close()
    finally: c.stop()


@pytest.fixture
def compacting():
    "Three servers whose streams' groups compact their logs every 16 KiB of entries (`JSNB_RAFT_COMPACT`)."
    import os
    c = JSCluster('jsnb')
    os.environ['JSNB_RAFT_COMPACT'] = str(16 << 10)
    try:
        try: c.start()
        finally: os.environ.pop('JSNB_RAFT_COMPACT', None)
        c.wait_meta()
        yield c
    finally: c.stop()


def _snapshots(c, i: int) -> list:
    return sorted((c.root / f'n{i}' / 'store').rglob('*.journal.snapshot'))


async def _lead_on(nc, stream: str, server: str):
    "Hand the stream's leadership to `server` (a stepdown that prefers it; asked again while it is not caught up)."
    for _ in range(60):
        if (await _info(nc, stream))['cluster']['leader'] == server: return
        await _req(nc, f'$JS.API.STREAM.LEADER.STEPDOWN.{stream}', {'placement': {'preferred': server}})
        await asyncio.sleep(0.5)
    raise TimeoutError(f'{server} never led {stream}')


async def test_compacted_log_catch_up_from_a_peer(compacting):
    """The stream's log is compacted while a replica is down: it comes back, is handed the snapshot, and fetches what
    it lacks from a peer's store: messages, deletions, the configuration and the consumer's state. Its store ends
    equal to the others', and as the stream's leader it does not redeliver what was acknowledged while it was down."""
    c = compacting
    leader = await _create(c, 'C')
    down = next(i for i in range(3) if f'n{i}' != leader)
    nc = await nats.connect(c.url(next(i for i in range(3) if i != down)))
    js = nc.jetstream()
    for k in range(100): await js.publish('c.x' if k % 10 else 'c.purge', b'%03d' % k + b'.' * 200)
    await js.add_consumer('C', durable_name='D', ack_policy='explicit')
    sub = await js.pull_subscribe_bind('D', 'C')
    _wait(lambda: all(_snapshots(c, i) for i in range(3)))           # every replica has compacted its log
    c.kill(down)
    for m in await _fetch_n(sub, 10): await m.ack_sync()              # acknowledged while the replica is down
    for k in range(100, 400): await _publish_acked(js, 'c.x', b'%03d' % k + b'.' * 200, time.time() + 60)
    assert (await _ask(nc, '$JS.API.STREAM.MSG.DELETE.C', {'seq': 55}))['success']
    assert (await _ask(nc, '$JS.API.STREAM.PURGE.C', {'filter': 'c.purge'}))['success']
    r = await _ask(nc, '$JS.API.STREAM.UPDATE.C', {'name': 'C', 'subjects': ['c.>'], 'num_replicas': 3, 'description': 'after'})
    assert r['config']['description'] == 'after', r
    await asyncio.sleep(1)                                            # the others compact again past what it had
    c.start(down)
    _wait(lambda: 'caught up from' in c.procs[down].log_text())
    await _publish_acked(js, 'c.x', b'last', time.time() + 60)
    _quiet(c, 400 - 10 - 1 + 1)
    nc2 = await nats.connect(c.url(down))
    await _lead_on(nc2, 'C', f'n{down}')
    info = await _info(nc2, 'C')
    assert info['config']['description'] == 'after'
    assert (info['state']['messages'], info['state']['first_seq'], info['state']['last_seq']) == (390, 2, 401)
    sub2 = await nc2.jetstream().pull_subscribe_bind('D', 'C')
    first = (await _fetch_n(sub2, 1))[0]
    assert first.metadata.sequence.stream == 12 and first.metadata.num_delivered == 1, first.metadata   # 1..11 acked or purged (10 is)
    await nc.close(); await nc2.close()
    c.stop()
    stores = c.stores('C')
    assert len(stores[0]) == 390 and stores[0] == stores[1] == stores[2]


async def test_memory_replica_and_empty_disk_after_compaction(compacting):
    """A memory replica restarts empty, and a server comes back with no disk at all, after the log was compacted: both
    are rebuilt from a peer's store, not from the (dropped) log."""
    c = compacting
    leader = await _create(c, 'M', storage='memory')
    await _create(c, 'F')
    nc = await nats.connect(c.url(int(leader[1:])))
    js = nc.jetstream()
    for k in range(150):
        await js.publish('m.x', b'%03d' % k + b'.' * 200); await js.publish('f.x', b'%03d' % k + b'.' * 200)
    follower = next(i for i in range(3) if f'n{i}' != leader)
    _wait(lambda: all(_snapshots(c, i) for i in range(3)))
    c.kill(follower); c.start(follower)                               # its memory replica starts empty
    _wait(lambda: 'caught up from' in c.procs[follower].log_text())
    _quiet(c, 300)
    wiped = next(i for i in range(3) if i != follower and f'n{i}' != leader)
    c.kill(wiped)
    shutil.rmtree(c.root / f'n{wiped}' / 'store')
    for k in range(150, 200): await _publish_acked(js, 'f.x', b'%03d' % k + b'.' * 200, time.time() + 60)
    c.start(wiped)
    _wait(lambda: c.jsz(wiped)['streams'] == 2)
    _quiet(c, 350)
    await nc.close()
    c.stop()
    stores = c.stores('F')
    assert len(stores[0]) == 200 and stores[0] == stores[1] == stores[2]


async def test_replicated_mirror_and_source(cluster):
    """An R3 mirror and an R3 source of a stream on one server: only each group's leader copies, into the group's log;
    after a leader change the new leader goes on from its own store; every replica holds the same copies."""
    c = cluster
    nc = await nats.connect(c.url(0)); js = nc.jetstream()
    r = await _req(nc, '$JS.API.STREAM.CREATE.UP', {'name': 'UP', 'subjects': ['up.>']})
    up_server = r['cluster']['leader']
    for k in range(20): await js.publish('up.x' if k % 2 else 'up.y', b'%d' % k)
    for name, cfg in (('MR', {'mirror': {'name': 'UP'}}), ('SR', {'sources': [{'name': 'UP', 'filter_subject': 'up.x'}]})):
        r = await _ask(nc, f'$JS.API.STREAM.CREATE.{name}', {'name': name, 'num_replicas': 3, **cfg})
        assert 'error' not in r, r

    async def counts():
        return [(await _info(nc, n))['state']['messages'] for n in ('MR', 'SR')]
    async def until(want):
        deadline = time.time() + 30
        while await counts() != want:
            assert time.time() < deadline, await counts()
            await asyncio.sleep(0.2)
    await until([20, 10])
    for name in ('MR', 'SR'):                                     # another leader, not on the upstream's server
        old = (await _info(nc, name))['cluster']['leader']
        for _ in range(10):
            await _ask(nc, f'$JS.API.STREAM.LEADER.STEPDOWN.{name}', None); await asyncio.sleep(1)
            now = (await _info(nc, name))['cluster']['leader']
            if now != old and now != up_server: break
    for k in range(20, 40): await js.publish('up.x' if k % 2 else 'up.y', b'%d' % k)
    await until([40, 20])
    info = await _info(nc, 'MR')
    assert info['mirror']['name'] == 'UP' and info['mirror']['lag'] == 0, info['mirror']
    m = await js.get_msg('SR', 20)
    assert m.data == b'39' and m.headers['Nats-Stream-Source'].startswith('UP 40 ')
    await nc.close()
    await asyncio.sleep(1)
    c.stop()
    for name, n in (('MR', 40), ('SR', 20)):
        stores = c.stores(name)
        assert len(stores[0]) == n and stores[0] == stores[1] == stores[2], name


async def test_a_clustered_server_warms_its_kernels_at_start(monkeypatch, tmp_path):
    "With `JSNB_JIT_AT_START`, a clustered server compiles its kernels as it starts, as a single server does (it starts as one)."
    from jsnb.app import serve
    from jsnb.nats.config import ServerOptions
    from jsnb.js import kernels
    warmed = []
    monkeypatch.setattr(kernels, 'AT_START', True)
    monkeypatch.setattr(kernels, 'warm', lambda: warmed.append('warm') or 0.0)     # (compiling itself is tests/test_kernels.py's)
    s = await serve(ServerOptions(server_name='n1', jetstream=True, store_dir=str(tmp_path), cluster_name='c1',
                                  cluster_host='127.0.0.1', cluster_port=-1))
    try: assert (type(s.js).__name__, warmed) == ('ClusteredJetStream', ['warm'])
    finally: await s.stop()


async def test_direct_get_answered_by_the_replica_of_the_server_asked(cluster):
    """A Direct Get sent to a server holding a replica of the stream is answered by that replica (routing's
    `LOCAL_FIRST`): with the two other servers paused (SIGSTOP, their routes still open), every request to a follower
    is answered. Before, the queue group drew any replica and two requests in three waited on a paused server;
    nats-server draws among all of them too (14 and 17 of 30 answered in this setting)."""
    leader = await _create(cluster, allow_direct=True)
    nc = await nats.connect(cluster.url(0)); js = nc.jetstream()
    for i in range(5): await js.publish('s.x', b'm%d' % i)
    await nc.close()
    _quiet(cluster, 5)
    asked = next(i for i in range(3) if f'n{i}' != leader)
    nc = await nats.connect(cluster.url(asked))
    paused = [cluster.procs[i].proc for i in range(3) if i != asked]
    for p in paused: p.send_signal(signal.SIGSTOP)
    try: got = [await nc.request('$JS.API.DIRECT.GET.S', json.dumps({'seq': 1 + k % 5}).encode(), timeout=5) for k in range(30)]
    finally:
        for p in paused: p.send_signal(signal.SIGCONT)
    assert [m.data for m in got] == [b'm%d' % (k % 5) for k in range(30)]
    await nc.close()
