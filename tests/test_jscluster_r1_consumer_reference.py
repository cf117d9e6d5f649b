"""A consumer of one replica on a stream of three, against nats-server and jsnb: a durable one (`num_replicas: 1`), an
ephemeral one (which asks for no replicas at all, or for one), and a pause asked while such a consumer's server is down.

The reference gives such a consumer a group of one server, picked among the stream's servers when it is created, and
runs it there only: its info names that server as its leader (and no replicas), its pull requests, acks and API
requests reach it through any server, it stays where it is when the stream's leader changes (and a leader stepdown
asked of it succeeds and moves nothing). A pull request waiting at it when its server shuts down hears so (`409`,
for an ephemeral one too, which asks for no replicas). While its server is down it is offline: its info is refused
with `10119`, its pull requests and acks find no responders, a stepdown gets no answer, the stream's list names it
`missing`, and it can still be deleted (it is gone when the server is back) or paused (the pause is answered, and the
consumer is paused once its server is back). Once the server is back, the consumer goes on from its state (one kept
in memory from its first); an ephemeral one is not deleted for its inactivity while its server is down, and is once
its `inactive_threshold` has passed after. Which server is picked is random on both: the scenarios record what follows
from the pick, not the pick. `last_active` is left out of the states compared: the reference does not keep it across
a restart."""
import asyncio, json, time
import pytest
import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

from jsclusters import JSCluster, request, publish_acked

pytestmark = [pytest.mark.reference, pytest.mark.timeout(600)]

R1 = {'ack_policy': 'explicit', 'num_replicas': 1}


async def _until(fn, ok, timeout: float = 30, every: float = 0.2):
    "Call `fn()` until `ok(result)` (at most `timeout` seconds); the last result (a request not answered in time counts as an error)."
    end = time.time() + timeout
    while True:
        try: r = await fn()
        except (NatsTimeout, asyncio.TimeoutError) as e:
            if time.time() > end: raise
            r = {'error': repr(e)}
        if ok(r) or time.time() > end: return r
        await asyncio.sleep(every)


async def _pull(nc, name: str, secs: float = 2.0):
    "One pull request (batch 1) for consumer `name` of stream S through `nc`: the message (or status) it gets."
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(f'$JS.API.CONSUMER.MSG.NEXT.S.{name}', json.dumps({'batch': 1, 'expires': int(secs * 1e9)}).encode(), reply=inbox)
        return await sub.next_msg(timeout=secs + 5)
    finally: await sub.unsubscribe()


async def _create(nc, name: str, **cfg) -> dict:
    return await _until(lambda: request(nc, f'$JS.API.CONSUMER.CREATE.S.{name}', {'stream_name': 'S', 'config': dict(R1, durable_name=name, **cfg)}),
                        lambda r: 'error' not in r)


def _state(info: dict) -> tuple:
    "A consumer's counts, without `last_active`."
    return ((info['delivered']['consumer_seq'], info['delivered']['stream_seq']), (info['ack_floor']['consumer_seq'], info['ack_floor']['stream_seq']),
            info['num_ack_pending'], info['num_pending'])


async def _consume(ncs, order, got: list, acks: list, name: str = 'P'):
    "Pull one message of consumer `name` through each server of `order`, and acknowledge it (`AckSync`) through the next one."
    for k, i in enumerate(order):
        m = await _until(lambda: _pull(ncs[i], name), lambda m: not m.headers)   # (a server just back may not reach it yet)
        got.append(m.data.decode())
        a = await ncs[order[(k + 1) % len(order)]].request(m.reply, b'', timeout=5)
        acks.append(a.data.decode())


async def _finish(ncs, down: int, other: int, name: str, out: dict, got: list, acks: list, state: str = ''):
    """The end of a scenario, its consumer's server back: consume what is left through every server, (`state`: note the
    consumer's state as `out[state]`), delete it, list the stream's consumers, close the connections."""
    await _consume(ncs, [down, other, 3 - down - other], got, acks, name)
    out['pulled'], out['acks'] = got, acks
    if state: out[state] = _state(await request(ncs[down], f'$JS.API.CONSUMER.INFO.S.{name}'))
    out['deleted'] = (await request(ncs[other], f'$JS.API.CONSUMER.DELETE.S.{name}')).get('success')
    out['names at the end'] = (await request(ncs[down], '$JS.API.CONSUMER.NAMES.S'))['consumers']
    for nc in ncs: await nc.close()


async def _on_both(scenario) -> dict:
    "Run `scenario(kind)` on the reference and on jsnb; the same outcome on both, the reference's returned."
    got = {}
    for kind in ('nats-server', 'jsnb'):
        try: got[kind] = await scenario(kind)
        except Exception as e: raise AssertionError(f'on {kind}: {got}') from e
    assert got['jsnb'] == got['nats-server'], got
    return got['nats-server']


async def _scenario(kind: str) -> dict:
    out = {}
    c = JSCluster(kind)
    try:
        c.start(); c.wait_meta()
        ncs = [await nats.connect(c.url(i)) for i in range(3)]
        r = await _until(lambda: request(ncs[0], '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s.>'], 'num_replicas': 3}),
                         lambda r: 'error' not in r)
        peers = {r['cluster']['leader']} | {p['name'] for p in r['cluster']['replicas']}
        js = ncs[0].jetstream()
        for i in range(12): await publish_acked(js, 's.x', b'%d' % i, time.time() + 30)

        pushed = await ncs[0].subscribe('push.q')
        p, q = await _create(ncs[1], 'P'), await _create(ncs[2], 'Q', deliver_subject='push.q')
        home = {'P': p['cluster']['leader'], 'Q': q['cluster']['leader']}
        out['created'] = [(x['cluster']['name'], list(x['cluster']), x['cluster']['leader'] in peers, x['config']['num_replicas']) for x in (p, q)]
        for k in range(30):                          # one more on P's server (to delete while that server is down)
            x = await _create(ncs[k % 3], f'X{k}')
            home[f'X{k}'] = x['cluster']['leader']
            if home[f'X{k}'] == home['P']: break
        out['placed on the stream servers'] = set(home.values()) <= peers
        spare = next(n for n in home if n.startswith('X') and home[n] == home['P'])
        for n in [n for n in home if n.startswith('X') and n != spare]:
            await request(ncs[0], f'$JS.API.CONSUMER.DELETE.S.{n}'); del home[n]

        infos = [await request(ncs[i], '$JS.API.CONSUMER.INFO.S.P') for i in range(3)]
        out['info from every server'] = [(x['cluster'] == {'name': 'c1', 'leader': home['P']}, _state(x)) for x in infos]
        got, acks = [], []
        await _consume(ncs, [0, 1, 2], got, acks)
        msgs = [await pushed.next_msg(timeout=10) for _ in range(3)]
        for i, m in enumerate(msgs): await ncs[i].request(m.reply, b'', timeout=5)
        out['push delivered'] = [m.data.decode() for m in msgs]
        out['P after pulls'] = _state(await request(ncs[2], '$JS.API.CONSUMER.INFO.S.P'))
        out['Q after acks'] = _state(await _until(lambda: request(ncs[1], '$JS.API.CONSUMER.INFO.S.Q'), lambda r: r['ack_floor']['stream_seq'] == 3))
        names = sorted(home)
        out['names'] = (await request(ncs[1], '$JS.API.CONSUMER.NAMES.S'))['consumers'] == names
        lst = await request(ncs[2], '$JS.API.CONSUMER.LIST.S')
        out['list'] = ([x['name'] for x in lst['consumers']] == names, all(x['cluster'] == {'name': 'c1', 'leader': home[x['name']]} for x in lst['consumers']),
                       'missing' in lst)
        out['consumer_count'] = (await request(ncs[1], '$JS.API.STREAM.INFO.S'))['state']['consumer_count']
        out['/jsz counts each where it runs'] = [c.jsz(i)['consumers'] == list(home.values()).count(f'n{i}') for i in range(3)]

        lead = (await request(ncs[0], '$JS.API.STREAM.INFO.S'))['cluster']['leader']
        out['stream stepdown'] = (await request(ncs[0], '$JS.API.STREAM.LEADER.STEPDOWN.S')).get('success')
        si = await _until(lambda: request(ncs[0], '$JS.API.STREAM.INFO.S'), lambda r: r.get('cluster', {}).get('leader') not in (None, lead))
        out['stream leader moved'] = si['cluster']['leader'] != lead
        info = await request(ncs[lead == 'n0'], '$JS.API.CONSUMER.INFO.S.P')
        out['P after the stream leader moved'] = (info['cluster'], _state(info)) == ({'name': 'c1', 'leader': home['P']}, out['P after pulls'])
        await _consume(ncs, [2, 0, 1], got, acks)
        out['consumer stepdown'] = (await request(ncs[1], '$JS.API.CONSUMER.LEADER.STEPDOWN.S.P')).get('success')
        out['P after its stepdown'] = (await request(ncs[0], '$JS.API.CONSUMER.INFO.S.P'))['cluster'] == {'name': 'c1', 'leader': home['P']}

        down = int(home['P'][1:])
        other = next(i for i in range(3) if i != down)
        await ncs[down].close(); c.procs[down].stop()
        r = await _until(lambda: request(ncs[other], '$JS.API.CONSUMER.INFO.S.P'), lambda r: 'error' in r)
        out['info while its server is down'] = r.get('error')
        m = await _pull(ncs[other], 'P', 1)
        out['pull while down'] = (m.headers or {}).get('Status')
        try: await ncs[other].request(f'$JS.ACK.S.P.1.1.1.{time.time_ns()}.0', b'', timeout=2); out['ack while down'] = 'answered'
        except NoRespondersError: out['ack while down'] = 'no responders'
        try: await ncs[other].request('$JS.API.CONSUMER.LEADER.STEPDOWN.S.P', b'', timeout=2); out['stepdown while down'] = 'answered'
        except NatsTimeout: out['stepdown while down'] = 'no answer'
        lst = await request(ncs[other], '$JS.API.CONSUMER.LIST.S', timeout=15)
        gone = sorted(n for n in home if home[n] == home['P'])
        out['list while down'] = (sorted(lst.get('missing') or []) == gone, lst['total'], sorted(x['name'] for x in lst['consumers']) == sorted(
            [''] * len(gone) + [n for n in names if n not in gone]))
        out['names while down'] = (await request(ncs[other], '$JS.API.CONSUMER.NAMES.S'))['consumers'] == names
        out['delete while down'] = (await request(ncs[other], f'$JS.API.CONSUMER.DELETE.S.{spare}')).get('success')

        c.start(down); c.wait_meta()
        ncs[down] = await nats.connect(c.url(down))
        info = await _until(lambda: request(ncs[other], '$JS.API.CONSUMER.INFO.S.P'), lambda r: 'error' not in r and r['num_pending'] == 6, timeout=60)
        out['P after its server is back'] = (info['cluster'] == {'name': 'c1', 'leader': home['P']}, _state(info))
        r = await _until(lambda: request(ncs[down], f'$JS.API.CONSUMER.INFO.S.{spare}'), lambda r: 'error' in r)   # (the reference may
        out['deleted while down, after'] = r.get('error', {}).get('err_code')     # show it for a moment, from its disk)
        await _finish(ncs, down, other, 'P', out, got, acks, state='P at the end')
    finally: c.stop()
    return out


async def test_a_durable_consumer_of_one_replica_runs_on_one_server():
    ref = await _on_both(_scenario)                 # (what the reference does, spelled out below)
    assert ref['info while its server is down'] == {'code': 500, 'err_code': 10119, 'description': 'consumer is offline'}
    assert (ref['pull while down'], ref['ack while down'], ref['stepdown while down']) == ('503', 'no responders', 'no answer')
    assert ref['P after the stream leader moved'] and ref['P after its server is back'][0] and ref['pulled'] == [str(i) for i in range(9)]


LONG = 600 * 10**9           # an inactive_threshold longer than a scenario


async def _placed_away(ncs, lead: str, cfg) -> dict | None:
    """Create consumers of configuration `cfg(k)` through each server in turn until one is placed on a server other
    than the stream's leader `lead` (the others are deleted): its create answer, or None when none is in 30 tries."""
    for k in range(30):
        cf = cfg(k)
        subject = '$JS.API.CONSUMER.CREATE.S' + (f".{cf['name']}" if 'name' in cf else '')
        r = await _until(lambda: request(ncs[k % 3], subject, {'stream_name': 'S', 'config': cf}), lambda r: 'error' not in r)
        if r['cluster']['leader'] != lead: return r
        await request(ncs[0], f"$JS.API.CONSUMER.DELETE.S.{r['name']}")
    return None


async def _ephemeral_scenario(kind: str) -> dict:
    out = {}
    c = JSCluster(kind)
    try:
        c.start(); c.wait_meta()
        ncs = [await nats.connect(c.url(i)) for i in range(3)]
        r = await _until(lambda: request(ncs[0], '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s.>'], 'num_replicas': 3}),
                         lambda r: 'error' not in r)
        lead, peers = r['cluster']['leader'], {r['cluster']['leader']} | {p['name'] for p in r['cluster']['replicas']}
        js = ncs[0].jetstream()
        for i in range(12): await publish_acked(js, 's.x', b'%d' % i, time.time() + 30)

        kinds = {'ephemeral': lambda k: {'ack_policy': 'explicit', 'inactive_threshold': LONG},
                 'named, one replica': lambda k: {'name': f'N{k}', 'num_replicas': 1, 'ack_policy': 'explicit', 'inactive_threshold': LONG},
                 'ordered': lambda k: {'deliver_subject': f'push.o{k}', 'ack_policy': 'none', 'flow_control': True, 'idle_heartbeat': 5 * 10**9,
                                       'mem_storage': True, 'num_replicas': 1, 'inactive_threshold': LONG}}
        made = {what: await _placed_away(ncs, lead, cfg) for what, cfg in kinds.items()}
        out['placed away from the stream leader'] = {w: (x is not None, x and list(x['cluster']), x and x['cluster']['leader'] in peers,
                                                         x and x['config']['num_replicas']) for w, x in made.items()}
        if None in made.values():                    # (all on the stream's leader: nothing more to compare)
            for nc in ncs: await nc.close()
            return out
        o = made['ordered']
        pushed = await ncs[0].subscribe(o['config']['deliver_subject'])
        out['ordered delivers through a route'] = [(await pushed.next_msg(timeout=10)).data.decode() for _ in range(3)]
        for x in (made['named, one replica'], o): await request(ncs[0], f"$JS.API.CONSUMER.DELETE.S.{x['name']}")
        E, home = made['ephemeral']['name'], made['ephemeral']['cluster']['leader']

        infos = [await request(ncs[i], f'$JS.API.CONSUMER.INFO.S.{E}') for i in range(3)]
        out['info from every server'] = [(x['cluster'] == {'name': 'c1', 'leader': home}, _state(x)) for x in infos]
        got, acks = [], []
        await _consume(ncs, [0, 1, 2], got, acks, E)
        out['after pulls'] = _state(await request(ncs[2], f'$JS.API.CONSUMER.INFO.S.{E}'))
        out['names'] = (await request(ncs[1], '$JS.API.CONSUMER.NAMES.S'))['consumers'] == [E]
        lst = await request(ncs[2], '$JS.API.CONSUMER.LIST.S')
        out['list'] = [(x['name'] == E, x['cluster'] == {'name': 'c1', 'leader': home}) for x in lst['consumers']]
        out['consumer_count'] = (await request(ncs[1], '$JS.API.STREAM.INFO.S'))['state']['consumer_count']
        async def where(): return [c.jsz(i)['consumers'] == (home == f'n{i}') for i in range(3)]
        out['/jsz counts it where it runs'] = await _until(where, all, timeout=10)

        lead = (await request(ncs[0], '$JS.API.STREAM.INFO.S'))['cluster']['leader']
        out['stream stepdown'] = (await request(ncs[0], '$JS.API.STREAM.LEADER.STEPDOWN.S')).get('success')
        await _until(lambda: request(ncs[0], '$JS.API.STREAM.INFO.S'), lambda r: r.get('cluster', {}).get('leader') not in (None, lead))
        info = await request(ncs[2], f'$JS.API.CONSUMER.INFO.S.{E}')
        out['after the stream leader moved'] = (info['cluster'] == {'name': 'c1', 'leader': home}, _state(info))

        down = int(home[1:])
        other = next(i for i in range(3) if i != down)
        f = None
        for k in range(30):                          # one that goes idle, on the same server, just before that server stops
            x = await _until(lambda: request(ncs[k % 3], '$JS.API.CONSUMER.CREATE.S', {'stream_name': 'S', 'config': {
                'ack_policy': 'explicit', 'inactive_threshold': 6 * 10**9, 'mem_storage': True, 'deliver_policy': 'new'}}),
                lambda r: 'error' not in r)
            if x['cluster']['leader'] == home: f = x['name']; break
            await request(ncs[0], f"$JS.API.CONSUMER.DELETE.S.{x['name']}")
        waiting = await nats.connect(c.url(down), allow_reconnect=False)     # a pull request waits at it (nothing new to deliver)
        inbox = waiting.new_inbox()
        wsub = await waiting.subscribe(inbox)
        await waiting.publish(f'$JS.API.CONSUMER.MSG.NEXT.S.{f}', json.dumps({'batch': 1, 'expires': 60 * 10**9}).encode(), reply=inbox)
        await waiting.flush(); await asyncio.sleep(0.5)
        await ncs[down].close()
        stopping = asyncio.get_running_loop().run_in_executor(None, c.procs[down].stop)
        try: out['the waiting pull at its shutdown'] = ((await wsub.next_msg(timeout=20)).headers or {}).get('Status')
        except NatsTimeout: out['the waiting pull at its shutdown'] = 'nothing'
        await stopping
        down_at = time.time()
        try: await waiting.close()
        except Exception: pass
        r = await _until(lambda: request(ncs[other], f'$JS.API.CONSUMER.INFO.S.{E}'), lambda r: 'error' in r)
        out['info while its server is down'] = r.get('error')
        m = await _pull(ncs[other], E, 1)
        out['pull while down'] = (m.headers or {}).get('Status')
        try: await ncs[other].request(f'$JS.ACK.S.{E}.1.1.1.{time.time_ns()}.0', b'', timeout=2); out['ack while down'] = 'answered'
        except NoRespondersError: out['ack while down'] = 'no responders'
        lst = await request(ncs[other], '$JS.API.CONSUMER.LIST.S', timeout=15)
        out['list while down'] = (sorted(lst.get('missing') or []) == sorted([E, f]), lst['total'])
        await asyncio.sleep(max(0.0, down_at + 10 - time.time()))     # past the idle one's threshold
        out['idle one while down'] = (await request(ncs[other], f'$JS.API.CONSUMER.INFO.S.{f}')).get('error')

        c.start(down); c.wait_meta()
        ncs[down] = await nats.connect(c.url(down))
        info = await _until(lambda: request(ncs[other], f'$JS.API.CONSUMER.INFO.S.{E}'), lambda r: 'error' not in r, timeout=60)
        out['after its server is back'] = (info['cluster'] == {'name': 'c1', 'leader': home}, _state(info))
        r = await _until(lambda: request(ncs[other], f'$JS.API.CONSUMER.INFO.S.{f}'), lambda r: 'error' in r, timeout=60)
        out['idle one, once back'] = [(await _until(lambda: request(ncs[i], f'$JS.API.CONSUMER.INFO.S.{f}'), lambda r: 'error' in r,
                                                    timeout=10)).get('error', {}).get('err_code') for i in range(3)]
        await _finish(ncs, down, other, E, out, got, acks)
    finally: c.stop()
    return out


async def test_an_ephemeral_consumer_runs_on_one_server():
    ref = await _on_both(_ephemeral_scenario)
    assert ref['placed away from the stream leader']['ephemeral'] == (True, ['name', 'leader'], True, 0)
    assert ref['info while its server is down']['err_code'] == 10119 and ref['idle one while down']['err_code'] == 10119
    assert ref['idle one, once back'] == [10014, 10014, 10014] and ref['pulled'] == [str(i) for i in range(6)]
    assert ref['the waiting pull at its shutdown'] == '409' and ref['names at the end'] == []


async def _pause_scenario(kind: str) -> dict:
    out = {}
    c = JSCluster(kind)
    try:
        c.start(); c.wait_meta()
        ncs = [await nats.connect(c.url(i)) for i in range(3)]
        await _until(lambda: request(ncs[0], '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s.>'], 'num_replicas': 3}),
                     lambda r: 'error' not in r)
        js = ncs[0].jetstream()
        for i in range(3): await publish_acked(js, 's.x', b'%d' % i, time.time() + 30)
        home = (await _create(ncs[0], 'P'))['cluster']['leader']
        down = int(home[1:])
        other = next(i for i in range(3) if i != down)
        got, acks = [], []
        await _consume(ncs, [other], got, acks)

        await ncs[down].close(); c.procs[down].stop()
        await _until(lambda: request(ncs[other], '$JS.API.CONSUMER.INFO.S.P'), lambda r: 'error' in r)
        until = '2099-01-01T00:00:00Z'
        r = await _until(lambda: request(ncs[other], '$JS.API.CONSUMER.PAUSE.S.P', {'pause_until': until}), lambda r: 'error' not in r)
        out['pause while down'] = ({k: v for k, v in r.items() if k != 'pause_remaining'}, r.get('pause_remaining', 0) > 0)
        lst = await _until(lambda: request(ncs[other], '$JS.API.CONSUMER.LIST.S', timeout=15),     # (the reference answers the
                           lambda r: r['consumers'][0]['config'].get('pause_until'), timeout=10)   # pause before it applies it)
        out['list while down'] = ([x['config'].get('pause_until') for x in lst['consumers']], lst.get('missing'))

        c.start(down); c.wait_meta()
        ncs[down] = await nats.connect(c.url(down))
        info = await _until(lambda: request(ncs[other], '$JS.API.CONSUMER.INFO.S.P'), lambda r: r.get('paused'), timeout=60)
        out['once its server is back'] = (info.get('paused'), info.get('pause_remaining', 0) > 0, info.get('config', {}).get('pause_until'),
                                          info.get('config', {}).get('metadata', {}).get('_nats.req.level'), _state(info),
                                          info.get('cluster') == {'name': 'c1', 'leader': home})
        info = await request(ncs[down], '$JS.API.CONSUMER.INFO.S.P')
        out['on its server'] = (info.get('paused'), info['config'].get('pause_until'))
        m = await _pull(ncs[other], 'P', 1)
        out['pull while paused'] = (m.headers or {}).get('Status')
        r = await request(ncs[down], '$JS.API.CONSUMER.PAUSE.S.P', {})
        out['resumed'] = r
        await _consume(ncs, [down, other], got, acks)
        out['pulled'], out['acks'] = got, acks
        for nc in ncs: await nc.close()
    finally: c.stop()
    return out


async def test_a_pause_while_the_consumer_server_is_down_is_kept():
    ref = await _on_both(_pause_scenario)
    assert ref['pause while down'] == ({'type': 'io.nats.jetstream.api.v1.consumer_pause_response', 'paused': True,
                                        'pause_until': '2099-01-01T00:00:00Z'}, True)
    assert ref['once its server is back'][:3] == (True, True, '2099-01-01T00:00:00Z') and ref['pulled'] == ['0', '1', '2']
