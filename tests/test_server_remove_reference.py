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
        await nc.close(); await sys.close()
    finally: c.stop()
