"""Push consumers across accounts against the reference: a consumer in one account delivers to a subject another
account imports (as in nats.js's "jetstream - cross account subscribe" and "kv - cross account history/watch").
Interest in the exporting account follows the importer's subscriptions: the consumer is bound (`push_bound`) only while
someone in the importing account listens, a subscriber appearing there gets what waited, acks come back through a
service import, and unsubscribing unbinds the consumer."""
import asyncio, json, re

import pytest
import nats

from conftest import KINDS, REF_BIN

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

PUSH = '''
accounts {
  JS: { users: [ {user: js, password: js} ], jetstream: enabled,
        exports: [ {service: "$JS.API.>", response_type: stream}, {service: "$JS.ACK.>", response_type: stream},
                   {stream: "deliver.>", accounts: [B]} ] }
  B: { users: [ {user: b, password: b} ],
       imports: [ {service: {account: JS, subject: "$JS.API.>"}, to: "IPA.>"}, {service: {account: JS, subject: "$JS.ACK.>"}},
                  {stream: {account: JS, subject: "deliver.>"}} ] }
}
'''


def run_both(start_server, config, script) -> dict:
    servers = {k: start_server(k, '-js', config=config) for k in KINDS}
    return {k: asyncio.run(script(s.url)) for k, s in servers.items()}


def connect(url, user, **kw):
    return nats.connect(url.replace('nats://', f'nats://{user}:{user}@'), allow_reconnect=False, **kw)


async def api(nc, subject, body=b'') -> dict:
    r = await nc.request(subject, body if isinstance(body, bytes) else json.dumps(body).encode(), timeout=3)
    return json.loads(r.data)


def state(ci: dict) -> dict:
    "What a consumer info says about binding and progress."
    return dict(push_bound=ci.get('push_bound', False), num_pending=ci['num_pending'], ack_pending=ci['num_ack_pending'],
                delivered=ci['delivered']['stream_seq'], ack_floor=ci['ack_floor']['stream_seq'])


async def until(get, want, tries=100):
    "`get()` until it answers `want` (or tries run out): the last answer."
    for _ in range(tries):
        v = await get()
        if want(v): return v
        await asyncio.sleep(0.02)
    return v


async def push_across(url) -> list:
    js, b = await connect(url, 'js'), await connect(url, 'b')
    out = []
    await api(js, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s.>']})
    for i in (1, 2): await api(js, f's.{i}', f'm{i}'.encode())
    # created through the import, from B, as nats.js does
    ci = await api(b, 'IPA.CONSUMER.CREATE.S.C', {'stream_name': 'S', 'config': {
        'durable_name': 'C', 'deliver_subject': 'deliver.x', 'ack_policy': 'explicit'}})
    info = lambda: api(b, 'IPA.CONSUMER.INFO.S.C')
    out.append(('created', state(ci)))
    await asyncio.sleep(0.2)                                   # nobody listens in B: nothing delivered, not bound
    out.append(('nobody listens', state(await info())))
    got, q = [], asyncio.Queue()
    async def cb(m): got.append((m.subject, re.sub(r'\.\d{10,}\.', '.TS.', m.reply), m.data.decode())); await q.put(m)
    sub = await b.subscribe('deliver.x', cb=cb)
    await b.flush()
    msgs = [await asyncio.wait_for(q.get(), 5) for _ in range(2)]
    out.append(('bound', state(await until(info, lambda v: v['num_ack_pending'] == 2 and v.get('push_bound')))))
    out.append(('ack reply', (await b.request(msgs[0].reply, b'+ACK', timeout=3)).data.decode()))   # an ack that asks for an answer
    await b.publish(msgs[1].reply, b'+ACK')
    await b.flush()
    out.append(('acked', state(await until(info, lambda v: v['ack_floor']['stream_seq'] == 2))))
    await sub.unsubscribe()
    await b.flush()
    out.append(('unsubscribed', state(await until(info, lambda v: not v.get('push_bound')))))
    await api(js, 's.3', b'm3')                                # waits for interest
    await asyncio.sleep(0.2)
    out.append(('waiting', state(await info())))
    sub = await b.subscribe('deliver.x', cb=cb)              # a new subscriber in B wakes the consumer
    await b.flush()
    m = await asyncio.wait_for(q.get(), 5)
    await m.ack()
    out.append(('woken', state(await until(info, lambda v: v['ack_floor']['stream_seq'] == 3))))
    out.append(('got', got))
    for nc in (js, b): await nc.close()
    return out


def test_push_consumer_across_accounts(start_server):
    out = run_both(start_server, PUSH, push_across)
    assert out['jsnb'] == out['nats-server']
    r = dict(out['jsnb'])
    assert not r['nobody listens']['push_bound'] and r['nobody listens']['delivered'] == 0
    assert r['bound']['push_bound'] and r['acked']['ack_floor'] == 2 and not r['unsubscribed']['push_bound']
    assert r['woken']['ack_floor'] == 3 and [g[2] for g in r['got']] == ['m1', 'm2', 'm3']


KV = '''
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: enabled,
       exports: [ {service: "$JS.API.>"}, {service: "$KV.>"}, {stream: "forb.>"} ] }
  B: { users: [ {user: b, password: b} ],
       imports: [ {service: {subject: "$KV.>", account: A}, to: "froma.$KV.>"}, {service: {subject: "$JS.API.>", account: A}, to: "froma.>"},
                  {stream: {subject: "forb.>", account: A}} ] }
}
'''


async def kv_across(url) -> list:
    "A bucket of account A read by B through its imports: history of what is there, then a watch of what comes."
    a, b = await connect(url, 'a'), await connect(url, 'b', inbox_prefix='forb')
    kva = await a.jetstream().create_key_value(bucket='a', history=5)
    await kva.put('A', b'A'); await kva.put('B', b'B'); await kva.delete('B')
    await b.request('froma.$KV.a.C', b'C', timeout=3)          # a put from B, through the `$KV.>` import
    kvb = await b.jetstream(prefix='froma').key_value('a')
    history = [(e.key, e.value, e.operation) for e in await kvb.history('*')]
    w = await kvb.watchall()
    seen = []
    async for e in w:
        if e is None: break                                     # end of what was stored
        seen.append((e.key, e.value, e.operation))
    await kva.put('D', b'D')
    e = await asyncio.wait_for(w.__anext__(), 5)
    seen.append((e.key, e.value, e.operation))
    await w.stop()
    for nc in (a, b): await nc.close()
    return [history, seen]


def test_kv_across_accounts(start_server):
    out = run_both(start_server, KV, kv_across)
    assert out['jsnb'] == out['nats-server']
    history, seen = out['jsnb']
    assert [h[0] for h in history] == ['A', 'B', 'B', 'C'] and seen[-1][:2] == ('D', b'D')


TRACE = '''
accounts {
  A: { users: [ {user: a, password: a} ], exports: [ {stream: "foo.>"} ] }
  B: { users: [ {user: b, password: b} ], imports: [ {stream: {account: A, subject: "foo.>"}, prefix: pre} ] }
}
'''


async def traced_across(url) -> list:
    "A traced message crossing a stream import: an `se` event for the export, no `eg` event in the importing account."
    a, b = await connect(url, 'a'), await connect(url, 'b')
    out = []
    for only in (False, True):
        got, tr = [], asyncio.Queue()
        async def cb(m): got.append(m.subject)
        async def tcb(m):
            await tr.put([{k: v for k, v in e.items() if k not in ('ts', 'cid', 'name')} for e in json.loads(m.data)['events']])
        subs = [await b.subscribe('pre.foo.>', cb=cb), await a.subscribe('foo.bar', cb=cb), await a.subscribe('trace.x', cb=tcb)]
        await b.flush(); await a.flush()
        h = {'Nats-Trace-Dest': 'trace.x', **({'Nats-Trace-Only': 'true'} if only else {})}
        await a.publish('foo.bar', b'x', headers=h)
        events = await asyncio.wait_for(tr.get(), 5)
        await a.publish('foo.bar', b'untraced')                   # after it: what was delivered so far has arrived
        await a.flush(); await b.flush()
        for _ in range(100):
            if got.count('pre.foo.bar') and got.count('foo.bar') and len(got) >= (2 if only else 4): break
            await asyncio.sleep(0.02)
        out.append((only, events, sorted(got)))
        for s in subs: await s.unsubscribe()
    for nc in (a, b): await nc.close()
    return out


def test_trace_across_stream_import(start_server):
    servers = {k: start_server(k, config=TRACE) for k in KINDS}
    out = {k: asyncio.run(traced_across(s.url)) for k, s in servers.items()}
    assert out['jsnb'] == out['nats-server']
    (_, events, got), (_, only_events, only_got) = out['jsnb']
    assert [e['type'] for e in events] == ['in', 'se', 'eg'] and events[1] == {'type': 'se', 'acc': 'B', 'to': 'pre.foo.bar'}
    assert got == ['foo.bar', 'foo.bar', 'pre.foo.bar', 'pre.foo.bar'] and only_got == ['foo.bar', 'pre.foo.bar']


LOOP = '''
accounts {
  A: { users: [ {user: a, password: a} ], exports: [ {service: "svc.>"}, {stream: "svc.>"} ] }
  B: { users: [ {user: b, password: b} ],
       imports: [ {service: {account: A, subject: "svc.x"}}, {stream: {account: A, subject: "svc.>"}, prefix: p} ] }
}
'''


async def service_not_streamed(url) -> list:
    "A request B sends through a service import is not handed back to B by its stream import of the same subjects."
    a, b = await connect(url, 'a'), await connect(url, 'b')
    got = []
    async def cb(m): got.append((m.subject, m.data.decode()))
    async def svc(m): got.append(('svc', m.subject)); await m.respond(b'ok')
    await b.subscribe('p.svc.>', cb=cb); await a.subscribe('svc.>', cb=svc)
    await b.flush(); await a.flush()
    r = await b.request('svc.x', b'q', timeout=3)
    await a.publish('svc.y', b'published in A')                # what A publishes itself does come through
    await a.flush()
    for _ in range(100):
        if ('p.svc.y', 'published in A') in got: break
        await asyncio.sleep(0.02)
    for nc in (a, b): await nc.close()
    return [r.data.decode(), sorted(got)]


def test_service_request_not_streamed_back(start_server):
    servers = {k: start_server(k, config=LOOP) for k in KINDS}
    out = {k: asyncio.run(service_not_streamed(s.url)) for k, s in servers.items()}
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'] == ['ok', [('p.svc.y', 'published in A'), ('svc', 'svc.x'), ('svc', 'svc.y')]]
