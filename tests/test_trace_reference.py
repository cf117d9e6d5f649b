"""Message tracing (`Nats-Trace-Dest`, `Nats-Trace-Only`) against jsnb and the reference: the event's shape and
contents for deliveries, queue groups, the publisher's own subscription, streams, trace-only dry runs, and the
messages that are dropped or not traced."""
import json
import pytest
import nats
from nats.errors import TimeoutError as NatsTimeout

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']
VOLATILE = {'ts', 'cid'}


def shape(ev: dict, names: dict) -> dict:
    "An event without what differs between runs: times, ids and sequence; cids named by their client."
    server = {k: v for k, v in ev['server'].items() if k not in ('id', 'time', 'seq', 'feature_flags', 'host')}
    events = []
    for e in ev['events']:
        d = {k: ('_INBOX...' if isinstance(v, str) and v.startswith('_INBOX.') else v) for k, v in e.items() if k not in VOLATILE}
        if 'cid' in e: d['client'] = names.get(e['cid'], e['cid'])
        events.append(d)
    ingress, rest = events[0], sorted(events[1:], key=lambda d: json.dumps(d, sort_keys=True))
    return dict(keys=list(ev), server=server, request=ev['request'], events=[ingress] + rest)


async def run(start_server, kind, scenario):
    s = start_server(kind, '-js', '-n', 'S1')
    pub = await nats.connect(s.url, name='pubber')
    other = await nats.connect(s.url, name='subber')
    names = {pub._client_id: 'pubber', other._client_id: 'subber'}
    traces = await pub.subscribe('traces')
    try: return await scenario(pub, other, traces, names)
    finally: await pub.close(); await other.close()


async def next_event(traces, names):
    return shape(json.loads((await traces.next_msg(timeout=3)).data), names)


async def nothing(sub, wait=0.4):
    try: m = await sub.next_msg(timeout=wait); return m.subject
    except NatsTimeout: return None


async def deliveries_and_stream(pub, other, traces, names):
    "Two subscribers (one in a queue group), the publisher's own subscription and a stream, traced then trace-only."
    js = pub.jetstream()
    await js.add_stream(name='S', subjects=['foo'])
    plain, grouped, own = await other.subscribe('foo'), await other.subscribe('foo', queue='g'), await pub.subscribe('foo')
    await other.flush(); await pub.flush()
    out = []
    await pub.publish('foo', b'hello', headers={'Nats-Trace-Dest': 'traces', 'X': 'y'})
    out.append(await next_event(traces, names))
    out.append([(await s.next_msg(timeout=3)).data for s in (plain, grouped, own)])
    stored = await js.get_msg('S', 1)
    out.append(stored.headers)
    await pub.publish('foo', b'hello', headers={'Nats-Trace-Dest': 'traces', 'Nats-Trace-Only': 'true'})
    out.append(await next_event(traces, names))
    out.append([await nothing(s) for s in (plain, grouped, own)])
    out.append((await js.stream_info('S')).state.messages)
    return out


async def no_interest_and_drops(pub, other, traces, names):
    "Nobody listening; trace-only without a destination (dropped); a wildcard destination (not traced, delivered)."
    sub = await other.subscribe('bar'); await other.flush()
    out = []
    await pub.publish('nobody', b'x', headers={'Nats-Trace-Dest': 'traces'})
    out.append(await next_event(traces, names))
    await pub.publish('bar', b'x', headers={'Nats-Trace-Only': 'true'})
    out.append(await nothing(sub))
    await pub.publish('bar', b'x', headers={'Nats-Trace-Dest': 'traces.*'})
    out.append((await sub.next_msg(timeout=3)).data)
    await pub.publish('bar', b'x', headers={'Nats-Trace-Dest': 'trace disabled'})
    out.append((await sub.next_msg(timeout=3)).data)
    out.append(await nothing(traces))
    return out


async def requests(pub, other, traces, names):
    "A traced request is answered; a trace-only one is not delivered, so it gets no answer and no 503 either."
    async def echo(m): await m.respond(b'pong')
    await other.subscribe('svc', cb=echo); await other.flush()
    out = [(await pub.request('svc', b'', timeout=3, headers={'Nats-Trace-Dest': 'traces'})).data]
    out.append(await next_event(traces, names))
    try: await pub.request('svc', b'', timeout=1, headers={'Nats-Trace-Dest': 'traces', 'Nats-Trace-Only': 'true'}); out.append('answered')
    except NatsTimeout: out.append('timeout')
    out.append(await next_event(traces, names))
    return out


@pytest.mark.parametrize('scenario', [deliveries_and_stream, no_interest_and_drops, requests], ids=lambda f: f.__name__)
async def test_trace_like_reference(start_server, scenario):
    ref = await run(start_server, 'nats-server', scenario)
    ours = await run(start_server, 'jsnb', scenario)
    assert ours == ref


async def test_no_echo_is_reported(start_server):
    "The publisher's own subscription, with `echo: false`, is listed with the reason it was skipped."
    async def one(kind):
        s = start_server(kind, '-n', 'S1')
        nc = await nats.connect(s.url, name='quiet', no_echo=True)
        traces = await nc.subscribe('traces'); await nc.subscribe('foo'); await nc.flush()
        await nc.publish('foo', b'', headers={'Nats-Trace-Dest': 'traces'})
        ev = await next_event(traces, {nc._client_id: 'quiet'})
        await nc.close(); return ev
    assert await one('jsnb') == await one('nats-server')
