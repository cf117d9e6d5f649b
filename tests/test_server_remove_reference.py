"""`$JS.API.SERVER.REMOVE` and `$JS.API.META.LEADER.STEPDOWN` from the system account, on a 3-server cluster of
jsnb and one of the reference, given the same requests: the answers byte for byte, the meta group after a removal,
and what becomes of the removed server's streams (an R3 stream goes on with the two others, an R1 stream starts
again, empty, elsewhere). The clusters have a system account `SYS` (user `sys`); other clients are in `$G`."""
import asyncio, json, shutil, time
import pytest
import nats
from jsclusters import JSCluster, publish_acked

pytestmark = pytest.mark.reference

ERR = lambda code, err_code, desc: {'type': 'io.nats.jetstream.api.v1.meta_server_remove_response',
                                    'error': {'code': code, 'err_code': err_code, 'description': desc}}


async def ask(nc, subject, body: bytes = b'', timeout=5):
    "The decoded answer, or 'no answer'."
    try: return json.loads((await nc.request(subject, body, timeout=timeout)).data)
    except nats.errors.TimeoutError: return 'no answer'


async def until(fn, timeout=30):
    "Poll async `fn` until it returns something true; that value (or the last one)."
    deadline, v = time.time() + timeout, None
    while time.time() < deadline:
        if v := await fn(): return v
        await asyncio.sleep(0.25)
    return v


async def removal(c: JSCluster) -> dict:
    out = {}
    g = await nats.connect(c.url(0)); sys = await nats.connect(c.url(0, 'sys'))
    js = g.jetstream()
    out['sys_info'] = await ask(sys, '$JS.API.INFO')
    out['sys_names'] = await ask(sys, '$JS.API.STREAM.NAMES', b'{}')
    out['from_g'] = await ask(g, '$JS.API.SERVER.REMOVE', b'{"peer":"n2"}', timeout=2)
    out['refusals'] = [await ask(sys, '$JS.API.SERVER.REMOVE', b) for b in (b'', b' {} ', b'{', b'{"server":"n2"}', b'"n2"', b'{"peer":"nope"}')]
    await js.add_stream(name='R3', subjects=['r3'], num_replicas=3)
    for i in range(3): await publish_acked(js, 'r3', b'%d' % i, time.time() + 30)
    gone = (await js.add_stream(name='ONE', subjects=['one'])).cluster.leader    # the server removed: the one with the R1 stream
    await publish_acked(js, 'one', b'x', time.time() + 30)
    others = sorted({'n0', 'n1', 'n2'} - {gone})
    if c.wait_meta() == gone:                          # (removing the meta leader itself is another story)
        await ask(sys, '$JS.API.META.LEADER.STEPDOWN', json.dumps({'placement': {'preferred': others[0]}}).encode())
        deadline = time.time() + 20
        while c.wait_meta() == gone and time.time() < deadline: await asyncio.sleep(0.2)
    k = int(gone[1])
    if k == 0:                                         # the clients go to a server that stays
        await g.close(); await sys.close()
        g = await nats.connect(c.url(1)); sys = await nats.connect(c.url(1, 'sys')); js = g.jetstream()
    c.kill(k)
    body = json.dumps({'peer': gone}).encode()
    out['removed'] = await ask(sys, '$JS.API.SERVER.REMOVE', body, timeout=10)
    out['again'] = await ask(sys, '$JS.API.SERVER.REMOVE', body, timeout=10)
    me = c.up()[0]

    seen = []
    async def meta():
        mc = c.jsz(me).get('meta_cluster') or {}
        seen[:] = [(mc.get('cluster_size'), sorted([f'n{me}'] + [r['name'] for r in mc.get('replicas') or ()]))]
        return seen[0] if seen[0] == (2, others) else None
    out['meta'] = await until(meta) or seen

    async def r3():
        try: info = await js.stream_info('R3')
        except Exception as e: seen[:] = [repr(e)]; return None
        names = sorted([info.cluster.leader] + [r.name for r in info.cluster.replicas or ()])
        seen[:] = [(names, info.state.messages, info.config.num_replicas)]
        return seen[0] if names == others else None
    out['r3'] = await until(r3) or seen
    out['r3_publish'] = (await publish_acked(js, 'r3', b'after', time.time() + 30)).seq

    async def moved():
        try: info = await js.stream_info('ONE')
        except Exception: return None
        return (info.cluster.leader in others, info.state.messages) if info.cluster.leader in others else None
    out['r1'] = await until(moved, 40)
    out['r1_publish'] = (await publish_acked(js, 'one', b'y', time.time() + 30)).seq
    await g.close(); await sys.close()
    out['others'] = others
    return out


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_server_remove(kind):
    c = JSCluster(kind, system=True)
    try:
        c.start(); c.wait_meta()
        out = await removal(c)
    finally: c.stop()
    not_enabled = {'code': 503, 'err_code': 10039, 'description': 'JetStream not enabled for account'}
    assert out == {
        'sys_info': {'type': 'io.nats.jetstream.api.v1.account_info_response', 'error': not_enabled},
        'sys_names': {'type': 'io.nats.jetstream.api.v1.system_response', 'error': not_enabled},
        'from_g': 'no answer',
        'refusals': [ERR(400, 10003, 'bad request'), ERR(400, 10003, 'bad request'), ERR(400, 10025, 'invalid JSON: unexpected EOF'),
                     ERR(400, 10025, 'invalid JSON: json: unknown field "server"'),
                     ERR(400, 10025, 'invalid JSON: json: cannot unmarshal string into Go value of type server.JSApiMetaServerRemoveRequest'),
                     ERR(400, 10044, 'server is not a member of the cluster')],
        'removed': {'type': 'io.nats.jetstream.api.v1.meta_server_remove_response', 'success': True},
        'again': ERR(400, 10044, 'server is not a member of the cluster'),
        'meta': (2, out['others']),
        'r3': (out['others'], 3, 3),
        'r3_publish': 4,
        'r1': (True, 0),
        'r1_publish': 1,
        'others': out['others'],
    }, out


@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_meta_leader_stepdown_from_the_system_account(kind):
    c = JSCluster(kind, system=True)
    try:
        c.start(); old = c.wait_meta()
        sys = await nats.connect(c.url(0, 'sys'))
        t = 'io.nats.jetstream.api.v1.meta_leader_stepdown_response'
        other = next(n for n in ('n0', 'n1', 'n2') if n != old)
        got = [await ask(sys, '$JS.API.META.LEADER.STEPDOWN', json.dumps({'placement': {'preferred': other}}).encode())]
        deadline = time.time() + 20
        while c.wait_meta() != other and time.time() < deadline: await asyncio.sleep(0.2)
        got.append(c.wait_meta())
        got.append(await ask(sys, '$JS.API.META.LEADER.STEPDOWN', json.dumps({'placement': {'preferred': other}}).encode()))
        got.append(await ask(sys, '$JS.API.META.LEADER.STEPDOWN', b'{"foo":1}'))
        await sys.close()
    finally: c.stop()
    assert got == [{'type': t, 'success': True}, other,
                   {'type': t, 'error': {'code': 400, 'err_code': 10005, 'description': f'preferred server "{other}" is already leader'}},
                   {'type': t, 'error': {'code': 400, 'err_code': 10025, 'description': 'invalid JSON: json: unknown field "foo"'}}]


async def held_out(c: JSCluster, mode: str) -> dict:
    """A server other than the meta leader, with a copy of an R3 stream and the R1 stream (its consumer too), is removed
    while it runs or (`mode` 'down') while it is down, and restarted with its store. While it is kept out: the stream and
    consumer advisories its peers' clients hear, and its own `/jsz` `meta_cluster` (the group it waits for)."""
    out, lead = {}, c.wait_meta()
    gone = max(n for n in ('n0', 'n1', 'n2') if n != lead); k = int(gone[1])
    at = next(i for i in range(3) if i != k)
    nc = await nats.connect(c.url(at)); js = nc.jetstream(); sys = await nats.connect(c.url(at, 'sys'))
    async def created():
        r = await ask(nc, '$JS.API.STREAM.CREATE.OLD', json.dumps({'name': 'OLD', 'subjects': ['old'], 'num_replicas': 3}).encode())
        return isinstance(r, dict) and 'error' not in r
    await until(created)
    await js.add_consumer('OLD', durable_name='D', ack_policy='explicit')
    one = await ask(nc, '$JS.API.STREAM.CREATE.ONE', json.dumps({'name': 'ONE', 'subjects': ['one'], 'placement': {'tags': [f's{k}']}}).encode())
    await js.add_consumer('ONE', durable_name='D1', ack_policy='explicit')
    for subject in ('old', 'one'): await publish_acked(js, subject, b'x', time.time() + 30)
    out['ONE on it'] = one['cluster']['leader'] == gone
    if mode == 'down': c.kill(k)
    out['removed'] = (await ask(sys, '$JS.API.SERVER.REMOVE', json.dumps({'peer': gone}).encode(), 10)).get('success')
    if mode == 'running':
        async def disabled(): return c.jsz(k).get('disabled') is True
        await until(disabled); c.procs[k].stop()
    heard = []
    async def advisory(m): heard.append(m.subject)
    for subject in ('$JS.EVENT.ADVISORY.STREAM.>', '$JS.EVENT.ADVISORY.CONSUMER.>'): await nc.subscribe(subject, cb=advisory)
    await nc.flush()
    c.start(k)
    async def waiting():                                   # its /jsz names a leader it hears (and no longer its old group)
        mc = c.jsz(k).get('meta_cluster') or {}
        return mc if mc.get('cluster_size') == 2 and any(r['current'] for r in mc.get('replicas') or ()) else None
    mc = await until(waiting, 60) or c.jsz(k).get('meta_cluster') or {}
    reps = mc.get('replicas') or []
    out['meta_cluster'] = dict(keys=sorted(mc), leader=mc.get('leader') == lead, size=mc.get('cluster_size'), quorum=mc.get('quorum_needed'),
                               pending=mc.get('pending'), peer=mc.get('peer') == c.jsz(int(lead[1]))['meta_cluster']['peer'],
                               replicas=[(r['name'] == lead, r['current'], r['active'] > 0, sorted(r)) for r in sorted(reps, key=lambda r: r['name'] != lead)])
    out['copies dropped or made'] = [s for s in heard if '.DELETED.' in s or '.CREATED.' in s]
    await nc.close(); await sys.close()
    return out


@pytest.mark.parametrize('mode', ['running', 'down'])
@pytest.mark.parametrize('kind', ['jsnb', 'nats-server'])
async def test_a_removed_server_while_it_is_kept_out(kind, mode):
    """Until the meta leader lets it back in (five minutes after its removal), a removed server that was restarted drops
    its copies of the streams without a word (no stream or consumer deletion advisory: none was deleted), and its `/jsz`
    shows the group it waits for: its leader (current, heard lately), the two members, and their size."""
    c = JSCluster(kind, system=True, tags={i: [f's{i}'] for i in range(3)})
    try:
        c.start()
        out = await held_out(c, mode)
    finally: c.stop()
    rkeys = ['active', 'current', 'name', 'peer']
    assert out == {'ONE on it': True, 'removed': True,
                   'meta_cluster': dict(keys=['cluster_size', 'leader', 'name', 'peer', 'pending', 'pending_infos', 'pending_requests', 'quorum_needed', 'replicas', 'snapshot'],
                                        leader=True, size=2, quorum=2, pending=0, peer=True, replicas=[(True, True, True, rkeys), (False, False, False, rkeys)]),
                   'copies dropped or made': []}, out


async def test_a_removed_server_stops_its_jetstream_and_comes_back():
    """jsnb: a running server that is removed stops its JetStream (the reference's log line and advisory) and keeps its
    files; a server removed while it was down finds out from its peers when it comes back. Either one, restarted (with
    its store, or with an empty one), drops its copies of the streams, asks to join again and is let in once the hold
    after its removal is over (a few seconds here: `JSNB_PEER_REMOVE_HOLD`; five minutes by default, as the reference's,
    see test_jscluster_return_reference.py); the R3 stream left on two servers grows back onto it. The clients of both
    keep using JetStream through the others meanwhile."""
    c = JSCluster('jsnb', system=True, env={'JSNB_PEER_REMOVE_HOLD': '3'})
    try:
        c.start(); meta = c.wait_meta()
        gone = next(n for n in ('n0', 'n1', 'n2') if n != meta); k = int(gone[1])
        down = next(n for n in ('n0', 'n1', 'n2') if n not in (meta, gone)); d = int(down[1])
        ask_at = int(meta[1])
        sys = await nats.connect(c.url(ask_at, 'sys'))
        nc = await nats.connect(c.url(ask_at)); js = nc.jetstream()
        deleted = []                                           # R3 is never deleted: its copies on the returning servers go quietly
        async def on_deleted(m): deleted.append(m.subject)
        for subject in ('$JS.EVENT.ADVISORY.STREAM.DELETED.R3', '$JS.EVENT.ADVISORY.CONSUMER.DELETED.R3.>'): await nc.subscribe(subject, cb=on_deleted)
        await js.add_stream(name='R3', subjects=['r3'], num_replicas=3)
        await publish_acked(js, 'r3', b'1', time.time() + 30)
        async def served(js):                                  # a client reaches the stream (through the others)
            try: return (await js.stream_info('R3')).state.messages >= 1
            except Exception: return False
        async def members(n: int):                             # every server counts `n` members of the meta group
            return all(c.jsz(i).get('meta_cluster', {}).get('cluster_size') == n for i in range(3))
        async def r3_on_three():                               # R3, left on two servers by a removal, has its three again
            try: info = await js.stream_info('R3')
            except Exception: return False
            return len(info.cluster.replicas or ()) == 2 and all(r.current for r in info.cluster.replicas)
        # removed while it was down: it comes back at its restart
        c.kill(d)
        assert (await ask(sys, '$JS.API.SERVER.REMOVE', json.dumps({'peer': down}).encode(), 10)).get('success') is True
        c.start(d)
        async def returning(): return 'it drops its copies of the streams and asks to join again' in c.procs[d].log_text()
        assert await until(returning)
        assert 'DISABLED' not in c.procs[d].log_text() and not c.jsz(d).get('disabled')
        g = await nats.connect(c.url(d)); assert await until(lambda: served(g.jetstream())); await g.close()
        assert await until(lambda: members(3)) and await until(r3_on_three)
        # removed while running, leading an interest stream (nothing it does while stopping may reach the others)
        for _ in range(30):                                    # on `gone` and the meta leader (placement draws two of three)
            si = await js.add_stream(name='INT', subjects=['int'], num_replicas=2, retention='interest')
            if {si.cluster.leader, *(r.name for r in si.cluster.replicas or ())} == {gone, meta}: break
            await js.delete_stream('INT')
        await js.add_consumer('INT', durable_name='D', ack_policy='explicit')
        for i in range(5): await publish_acked(js, 'int', b'%d' % i, time.time() + 30)
        async def led():
            info = await js.stream_info('INT')
            if info.cluster.leader == gone: return True
            await ask(nc, '$JS.API.STREAM.LEADER.STEPDOWN.INT', json.dumps({'placement': {'preferred': gone}}).encode())
            return False
        assert await until(led)
        g = await nats.connect(c.url(k)); gjs = g.jetstream()
        advisories = await sys.subscribe('$JS.EVENT.ADVISORY.SERVER.REMOVED')     # in the system account
        await sys.flush()
        assert (await ask(sys, '$JS.API.SERVER.REMOVE', json.dumps({'peer': gone}).encode(), 10)).get('success') is True
        adv = json.loads((await advisories.next_msg(timeout=10)).data)
        assert (adv['type'], adv['server'], adv['cluster']) == ('io.nats.jetstream.advisory.v1.server_removed', gone, 'c1')
        assert 'JetStream being DISABLED, our server was removed from the cluster' in c.procs[k].log_text()
        assert c.jsz(k).get('disabled') is True
        assert (c.root / gone / 'store' / 'jetstream' / '$G' / 'streams' / 'R3').exists()    # its files are kept, untouched
        assert await until(lambda: served(gjs))
        async def kept():
            try: return (await js.stream_info('INT')).state.messages == 5 and (await js.stream_info('INT')).cluster.leader != gone
            except Exception: return False
        assert await until(kept)
        await asyncio.sleep(3)                                 # (the hold is over: a running removed server still stays out)
        assert c.jsz(k).get('disabled') is True and c.jsz(ask_at)['meta_cluster']['cluster_size'] == 2
        await g.close()
        # restarted, here with an empty store: it comes back
        c.procs[k].stop(); shutil.rmtree(c.root / gone / 'store'); c.start(k)
        assert await until(lambda: members(3)) and await until(r3_on_three)
        assert not c.jsz(k).get('disabled')
        assert (await publish_acked(js, 'r3', b'2', time.time() + 30)).seq == 2
        assert deleted == []
        await nc.close(); await sys.close()
    finally: c.stop()
