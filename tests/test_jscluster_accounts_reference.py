"""JetStream in accounts other than `$G` on a cluster, against nats-server and jsnb.

Three servers with accounts A and B (both with JetStream) and a system account. Each account creates a stream of the
same name with three replicas and uses it: the two stay apart (their messages, their consumers), each is replicated
on the three servers, a stepdown of A's stream leaves B's leader alone, and after one server is killed and started
again both streams take messages and every replica of both is current."""
import asyncio, json, time
import pytest
import nats

from jsclusters import JSCluster, request, publish_acked

pytestmark = [pytest.mark.reference, pytest.mark.timeout(300)]

ACCOUNTS = ('accounts {\n  A: { users: [{user: a, password: a}], jetstream: enabled }\n'
            '  B: { users: [{user: b, password: b}], jetstream: enabled }\n'
            '  SYS: { users: [{user: sys, password: sys}] }\n}\nsystem_account: SYS\n')


class _Accounts(JSCluster):
    "Three servers whose clients are in account A or B (users a/a, b/b); SYS is the system account."
    def config(self, i: int) -> str: return ACCOUNTS + super().config(i)


async def _retried(nc, subject, body=None, tries: int = 60, ok=lambda r: 'error' not in r) -> dict:
    "An API request asked again (every 0.5 s) until `ok` (no error by default): a new account's meta group may still be electing."
    for _ in range(tries):
        try: r = await request(nc, subject, body)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError): r = {'error': 'no answer'}
        if ok(r): return r
        await asyncio.sleep(0.5)
    return r


async def _current(nc, stream: str, timeout: float = 60) -> dict:
    "The stream's info once it has a leader and two current replicas."
    ok = lambda r: 'error' not in r and (r.get('cluster') or {}).get('leader') and \
        sum(bool(p.get('current')) for p in r['cluster'].get('replicas') or []) == 2
    return await _retried(nc, f'$JS.API.STREAM.INFO.{stream}', tries=int(timeout * 2), ok=ok)


def _servers(info: dict) -> list:
    cl = info.get('cluster') or {}
    return sorted([cl.get('leader')] + [p['name'] for p in cl.get('replicas') or []])


async def _scenario(kind: str) -> dict:
    out = {}
    c = _Accounts(kind)
    try:
        c.start(); c.wait_meta()
        ncs = {u: await nats.connect(c.url(0, u)) for u in ('a', 'b')}
        for u, n in (('a', 5), ('b', 3)):
            r = await _retried(ncs[u], '$JS.API.STREAM.CREATE.ORDERS', {'name': 'ORDERS', 'subjects': ['orders.>'], 'num_replicas': 3})
            out[f'{u} created'] = r.get('config', {}).get('num_replicas'), len(_servers(r)), r.get('error')
            js = ncs[u].jetstream()
            for k in range(n): await publish_acked(js, 'orders.new', f'{u} order {k}'.encode(), time.time() + 30)
        for u in ('a', 'b'):
            info = await _current(ncs[u], 'ORDERS')
            out[f'{u} stream'] = info['state']['messages'], _servers(info)
            names = await _retried(ncs[u], '$JS.API.STREAM.NAMES')
            out[f'{u} streams'] = names.get('streams')
            m = await _retried(ncs[u], '$JS.API.STREAM.MSG.GET.ORDERS', {'seq': 1})
            out[f'{u} first'] = m.get('message', {}).get('data')
        r = await _retried(ncs['a'], '$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.D', {'stream_name': 'ORDERS',
                           'config': {'durable_name': 'D', 'ack_policy': 'explicit'}})
        sub = await ncs['a'].jetstream().pull_subscribe_bind('D', 'ORDERS')
        msgs = await sub.fetch(5, timeout=10)
        for m in msgs: await m.ack_sync()
        ci = await _retried(ncs['a'], '$JS.API.CONSUMER.INFO.ORDERS.D')
        out['a consumer'] = len(msgs), ci.get('num_ack_pending'), ci.get('delivered', {}).get('stream_seq')
        out['b consumers'] = (await _retried(ncs['b'], '$JS.API.CONSUMER.NAMES.ORDERS')).get('consumers')
        before = {u: (await _current(ncs[u], 'ORDERS'))['cluster']['leader'] for u in ('a', 'b')}
        r = await _retried(ncs['a'], '$JS.API.STREAM.LEADER.STEPDOWN.ORDERS')
        after = {}
        for _ in range(100):
            after = {u: (await _current(ncs[u], 'ORDERS'))['cluster']['leader'] for u in ('a', 'b')}
            if after['a'] != before['a']: break
            await asyncio.sleep(0.2)
        out['stepdown of a'] = r.get('success'), after['a'] != before['a'], after['b'] == before['b']
        for nc in ncs.values(): await nc.close()
        c.kill(2); c.start(2); c.wait_meta()
        ncs = {u: await nats.connect(c.url(0, u)) for u in ('a', 'b')}
        for u in ('a', 'b'):
            js = ncs[u].jetstream()
            for k in range(2): await publish_acked(js, 'orders.new', f'{u} later {k}'.encode(), time.time() + 60)
            info = await _current(ncs[u], 'ORDERS', timeout=90)
            out[f'{u} after a restart'] = info['state']['messages'], _servers(info)
        for nc in ncs.values(): await nc.close()
    finally: c.stop()
    return out


async def test_accounts_with_jetstream_in_a_cluster():
    got = {}
    for kind in ('nats-server', 'jsnb'):
        try: got[kind] = await _scenario(kind)
        except Exception as e: raise AssertionError(f'on {kind}: {got}') from e
    three = ['n0', 'n1', 'n2']
    b64 = lambda s: __import__('base64').b64encode(s.encode()).decode()
    assert got['jsnb'] == got['nats-server'] == {
        'a created': (3, 3, None), 'b created': (3, 3, None),
        'a stream': (5, three), 'b stream': (3, three), 'a streams': ['ORDERS'], 'b streams': ['ORDERS'],
        'a first': b64('a order 0'), 'b first': b64('b order 0'),
        'a consumer': (5, 0, 5), 'b consumers': [], 'stepdown of a': (True, True, True),
        'a after a restart': (7, three), 'b after a restart': (5, three)}, got
