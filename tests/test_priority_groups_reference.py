"""Priority groups (pinned clients, overflow, prioritized), CONSUMER.UNPIN and CONSUMER.RESET, against the reference.

Every scenario runs with identical steps against nats-server and jsnb (`jsdiff.run_both`); each step
records what one client saw: the frames that reached an inbox (subject, ack reply with its timestamp
blanked, headers with the pin ids renamed in order of appearance, payload), an API reply (times
blanked, pin ids renamed), or the consumer advisories. Pull requests are raw `MSG.NEXT` messages:
nats-py knows nothing of priority groups (it drops the fields), nats.js sends exactly these fields.
Waits are generous; "nothing arrived" is checked over a short quiet window."""
import asyncio, json, time
import pytest

from jsdiff import VOLATILE, run_both

pytestmark = pytest.mark.reference
NS = 1_000_000_000
ZERO = '0001-01-01T00:00:00Z'


class T:
    "One run's transcript: steps of (label, what was seen)."
    def __init__(self, nc):
        self.nc, self.log, self.pins, self.boxes, self.events, self.audits = nc, [], {}, {}, [], []

    def pin(self, v):
        "A pin id, renamed `<pinN>` in order of appearance (empty stays empty)."
        return self.pins.setdefault(v, f'<pin{len(self.pins) + 1}>') if v else v

    def norm(self, x, key=''):
        if isinstance(x, dict): return {k: self.norm(v, k) for k, v in x.items()}
        if isinstance(x, list): return [self.norm(v) for v in x]
        if key in ('pinned_client_id', 'pinned_id', 'Nats-Pin-Id'): return self.pin(x)
        if key == 'pinned_ts': return x if x == ZERO else '<t>'
        if key in VOLATILE or key == 'last_active': return '<v>'
        if key == 'Nats-Stream-Identity': return '<identity>'
        return x

    def rec(self, label, value): self.log.append((label, value))

    async def start(self, streams=()):
        async def ev(m): self.events.append((m.subject, json.loads(m.data)))
        async def audit(m):
            d = json.loads(m.data)
            self.audits.append((d['subject'], (json.loads(d['response']).get('error') or {}).get('err_code')))
        await self.nc.subscribe('$JS.EVENT.ADVISORY.CONSUMER.>', cb=ev)
        await self.nc.subscribe('$JS.EVENT.ADVISORY.API', cb=audit)
        for st in streams: await self.api('', f"$JS.API.STREAM.CREATE.{st['name']}", st, record=False)
        return self

    async def box(self, *names):
        for name in names:
            self.boxes[name] = []
            async def cb(m, name=name): self.boxes[name].append(m)
            await self.nc.subscribe(name, cb=cb)
        await self.nc.flush()

    async def pull(self, consumer, inbox, body, stream='S', headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        await self.nc.publish(f'$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}', data, reply=inbox, headers=headers)
        await self.nc.flush()

    async def pub(self, subject, data=b'', headers=None, n=1):
        for i in range(n):
            r = await self.nc.request(subject, data or b'm%d' % i, timeout=5, headers=headers)
            assert 'error' not in json.loads(r.data)

    async def api(self, label, subject, body=None, headers=None, record=True, timeout=3):
        data = b'' if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        try:
            r = await self.nc.request(subject, data, timeout=timeout, headers=headers)
            out = (self.norm(dict(r.headers or {})), self.norm(json.loads(r.data)))
        except asyncio.TimeoutError: out = 'no answer'
        if record: self.rec(label, out)
        return out

    def frame(self, m):
        reply = m.reply or ''
        t = reply.split('.')
        if reply.startswith('$JS.ACK.') and len(t) == 9: t[7] = '<ts>'
        return (m.subject, '.'.join(t), self.norm(dict(m.headers or {})), m.data)

    async def frames(self, label, inbox, n=None, quiet=0.4, timeout=6):
        "Record what reached `inbox`: `n` messages (waiting up to `timeout`), then `quiet` seconds of nothing more."
        box, end = self.boxes[inbox], time.monotonic() + timeout
        while n is not None and len(box) < n and time.monotonic() < end: await asyncio.sleep(0.02)
        await asyncio.sleep(quiet)
        got, box[:] = list(box), []
        self.rec(label, [self.frame(m) for m in got])

    async def advisories(self, label, n, timeout=6):
        "Record the next `n` pinned/unpinned advisories (and that no other follows within a short wait)."
        end = time.monotonic() + timeout
        want = lambda: [e for e in self.events if '.PINNED.' in e[0] or '.UNPINNED.' in e[0]]
        while len(want()) < n and time.monotonic() < end: await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        got = want(); self.events[:] = [e for e in self.events if e not in got]
        self.rec(label, [(s, self.norm(d)) for s, d in got])

    async def audited(self, label, word):
        "Record the API audit advisories (subject, err_code) of requests whose subject contains `word`."
        await asyncio.sleep(0.3)
        self.rec(label, [a for a in self.audits if word in a[0]])

    async def info(self, label, consumer, stream='S', keys=('delivered', 'ack_floor', 'num_ack_pending', 'num_redelivered',
                                                           'num_waiting', 'num_pending', 'priority_groups')):
        _, d = await self.api('', f'$JS.API.CONSUMER.INFO.{stream}.{consumer}', record=False)
        self.rec(label, {k: d.get(k) for k in keys} if 'error' not in d else d)


async def consumer(t, name, stream='S', **cfg):
    _, r = await t.api('', f'$JS.API.CONSUMER.CREATE.{stream}.{name}', {'stream_name': stream, 'config': {
        'durable_name': name, 'ack_policy': 'explicit', **cfg}}, record=False)
    assert 'error' not in r, r
    t.rec(f'create {name}', {k: r.get(k) for k in ('priority_groups', 'num_waiting')})


async def burst(t, consumer, subject, n, data=b'', stream='S'):
    """Publish `n` messages so that `consumer` sees them all at once (its deliveries do not race the publishes): the first
    `n - 1` while it is paused; resuming through the API delivers nothing by itself, the last message wakes it."""
    P = f'$JS.API.CONSUMER.PAUSE.{stream}.{consumer}'
    await t.api('', P, {'pause_until': '2999-01-01T00:00:00Z'}, record=False)
    await t.pub(subject, data, n=n - 1)
    await t.api('', P, {}, record=False)
    await t.pub(subject, data)


def compare(start_server, scenario):
    return run_both(start_server, scenario, T)


S = {'name': 'S', 'subjects': ['s.>'], 'storage': 'memory'}
PIN = dict(priority_groups=['A', 'B'], priority_policy='pinned_client')
EXP = 60 * NS


# ---------------------------------------------------------------------------------------------- pinned client

async def test_pinned_client(start_server):
    "The first request is pinned; the other waits; the pin id on every message; bad requests refused."
    async def scenario(t):
        await t.start([S]); await t.box('a', 'b', 'c')
        await consumer(t, 'P', **PIN, priority_timeout=30 * NS)
        await t.pub('s.1', n=2); await t.pub('s.2', b'with header', headers={'H': 'v'}); await t.pub('s.3', n=3)
        await t.pull('P', 'a', {'batch': 3, 'expires': EXP, 'group': 'A'})
        await t.pull('P', 'b', {'batch': 3, 'expires': EXP, 'group': 'A'})
        await t.frames('a pinned', 'a', 3)
        await t.frames('b waits', 'b')
        await t.info('info pinned', 'P')
        await t.advisories('pinned advisory', 1)
        for label, body in [('wrong id', {'batch': 1, 'group': 'A', 'id': 'nope'}), ('no group', {'batch': 1}),
                            ('unknown group', {'batch': 1, 'group': 'C'}), ('priority 10', {'batch': 1, 'group': 'A', 'priority': 10}),
                            ('priority -1', {'batch': 1, 'group': 'A', 'priority': -1}),
                            ('min_pending', {'batch': 1, 'group': 'A', 'min_pending': 2}),
                            ('min_ack_pending', {'batch': 1, 'group': 'A', 'min_ack_pending': -1}),
                            ('bad type', {'batch': 1, 'group': 'A', 'id': 5}), ('bad group type', {'batch': 1, 'group': ['A']})]:
            await t.pull('P', 'c', body)
            await t.frames(label, 'c', 1, quiet=0.1)
        pin = next(k for k, v in t.pins.items() if v == '<pin1>')
        await t.pull('P', 'c', {'batch': 5, 'expires': EXP, 'group': 'B', 'id': pin})     # the other group, same pin
        await t.frames('pinned id, other group', 'c', 3)
        await t.pull('P', 'c', b'1')                                                         # a bare batch: waits behind the pin
        await t.frames('plain request waits', 'c')
        await t.pub('s.4')
        await t.frames('new message to the pinned request', 'c', 1)
        await t.frames('still nothing for b', 'b', quiet=0.1)
        await t.info('info end', 'P')
    await compare(start_server, scenario)


async def test_pinned_plain_request_pins_nobody(start_server):
    "A bare batch size on a pinned consumer with nobody pinned gets the message with an empty pin id, and pins nobody."
    async def scenario(t):
        await t.start([S]); await t.box('a', 'b')
        await consumer(t, 'P', **PIN)
        await t.pub('s.1', n=3)
        await t.pull('P', 'a', b'1')
        await t.frames('plain', 'a', 1)
        await t.info('nobody pinned', 'P')
        await t.pull('P', 'a', b'{"batch": 1, "group": "A"}')
        await t.frames('json pins', 'a', 1)
        await t.pull('P', 'b', b'1')
        await t.frames('plain waits now', 'b')
        await t.advisories('one pinned advisory', 1)
        await t.info('info', 'P')
    await compare(start_server, scenario)


async def test_pin_timeout(start_server):
    "A pinned client that stops pulling loses its pin after priority_timeout: UNPINNED (timeout), the standby is pinned."
    async def scenario(t):
        await t.start([S]); await t.box('a', 'b')
        await consumer(t, 'P', **PIN, priority_timeout=2 * NS)
        await t.pub('s.1', n=3)
        await t.pull('P', 'a', {'batch': 1, 'group': 'A'})
        await t.frames('a pinned', 'a', 1)
        pin = next(iter(t.pins))
        await t.pull('P', 'b', {'batch': 1, 'expires': EXP, 'group': 'A'})
        await t.frames('b waits', 'b', quiet=0.3)
        await t.frames('b pinned after the timeout', 'b', 1, quiet=0.2, timeout=8)
        await t.advisories('pinned, unpinned (timeout), pinned', 3)
        await t.pull('P', 'a', {'batch': 1, 'group': 'A', 'id': pin})
        await t.frames('old pin refused', 'a', 1, quiet=0.1)
        await t.info('info', 'P')
    await compare(start_server, scenario)


async def test_pinned_request_renews_and_wrong_pin_after_timeout(start_server):
    "Requests with the pin id renew it; a waiting request with a lapsed pin gets 423 Nats-Wrong-Pin-Id when its turn comes."
    async def scenario(t):
        await t.start([S]); await t.box('a', 'b')
        await consumer(t, 'P', **PIN, priority_timeout=2 * NS)
        await t.pub('s.1')
        await t.pull('P', 'a', {'batch': 1, 'group': 'A'})
        await t.frames('a pinned', 'a', 1, quiet=0)
        pin = next(iter(t.pins))
        for _ in range(5):                                    # keeps the pin past its timeout by pulling
            await asyncio.sleep(0.5)
            await t.pull('P', 'a', {'batch': 1, 'expires': 20 * NS, 'group': 'A', 'id': pin})
        await t.frames('a waiting, nothing yet', 'a', quiet=0.1)
        await t.info('still pinned', 'P')
        await asyncio.sleep(2.5)                             # now it lapses
        await t.advisories('pinned, then unpinned', 2)
        await t.pull('P', 'b', {'batch': 2, 'expires': 20 * NS, 'group': 'A'})
        await burst(t, 'P', 's.2', 2)
        await t.frames('a: wrong pin', 'a', 3)
        await t.frames('b: new pin', 'b', 2)
        await t.advisories('new pin', 1)
    await compare(start_server, scenario)


async def test_pinned_max_bytes(start_server):
    "A request that claims the pin but cannot take the message releases it; a standby's max_bytes is not used up."
    async def scenario(t):
        await t.start([S]); await t.box('a', 'b', 'c')
        await consumer(t, 'P', **PIN)
        await t.pub('s.1', b'x' * 200)
        await t.pull('P', 'a', {'batch': 1, 'max_bytes': 10, 'expires': EXP, 'group': 'A'})
        await t.frames('too big', 'a', 1)
        await t.info('pin released', 'P')
        await t.pull('P', 'b', {'batch': 100, 'expires': EXP, 'group': 'A'})
        await t.frames('b pinned', 'b', 1)
        await t.pull('P', 'c', {'batch': 100, 'max_bytes': 500, 'expires': EXP, 'group': 'A'})
        await burst(t, 'P', 's.2', 4, b'y' * 200)
        await t.frames('b takes all', 'b', 4)
        await t.frames('c untouched', 'c')
        await t.advisories('advisories', 2)
    await compare(start_server, scenario)


# ---------------------------------------------------------------------------------------------- unpin

async def test_unpin(start_server):
    "UNPIN: success (any consumer having the group), every error, the subject's shape, the API level, the counters."
    async def scenario(t):
        await t.start([S]); await t.box('a', 'b')
        await consumer(t, 'P', **PIN, priority_timeout=30 * NS)
        await consumer(t, 'O', priority_groups=['A'], priority_policy='overflow')
        await consumer(t, 'N')
        await t.pub('s.1', n=2)
        await t.pull('P', 'a', {'batch': 10, 'expires': EXP, 'group': 'A'})
        await t.frames('a pinned', 'a', 2)
        await t.pull('P', 'b', {'batch': 10, 'expires': EXP, 'group': 'A'})
        U = '$JS.API.CONSUMER.UNPIN.'
        for label, subj, body, hdr in [
                ('unknown group', 'S.P', {'group': 'C'}, None), ('missing stream', 'X.P', {'group': 'A'}, None),
                ('missing consumer', 'S.X', {'group': 'A'}, None), ('empty group', 'S.P', {'group': ''}, None),
                ('no body', 'S.P', None, None), ('blank body', 'S.P', b'  ', None), ('null', 'S.P', b'null', None),
                ('bad name', 'S.P', {'group': 'a b'}, None), ('long name', 'S.P', {'group': 'x' * 17}, None),
                ('number', 'S.P', {'group': 5}, None), ('array', 'S.P', b'[]', None), ('bad json', 'S.P', b'{x', None),
                ('no groups', 'S.N', {'group': 'A'}, None), ('level', 'S.P', {'group': 'A'}, {'Nats-Required-Api-Level': '99'}),
                ('level ok', 'S.O', {'group': 'A'}, {'Nats-Required-Api-Level': '1'}),
                ('short subject', 'S', {'group': 'A'}, None), ('long subject', 'S.P.X', {'group': 'A'}, None),
                ('short with level', 'S', {'group': 'A'}, {'Nats-Required-Api-Level': '99'}),
                ('overflow consumer', 'S.O', {'group': 'A'}, None), ('other group', 'S.P', {'group': 'B', 'x': 1}, None)]:
            await t.api(label, U + subj, body, hdr, timeout=1 if 'subject' in label else 3)
        await t.advisories('unpinned advisories (admin)', 3)
        await t.info('still pinned? no: group B unpinned it', 'P')
        await burst(t, 'P', 's.2', 3)
        await t.frames('b pinned now', 'b', 3)
        await t.frames('a: wrong pin', 'a', 1)
        await t.advisories('pinned b', 1)
        await t.api('unpin', U + 'S.P', {'group': 'A'})
        await t.info('unpinned', 'P')
        await t.api('counters', '$JS.API.INFO')
        await t.audited('audited', '.UNPIN.')
    await compare(start_server, scenario)


# ---------------------------------------------------------------------------------------------- overflow

async def test_overflow(start_server):
    "Overflow: requests with min_pending / min_ack_pending wait until the consumer is that far behind."
    async def scenario(t):
        await t.start([S]); await t.box('far', 'near', 'ack', 'nw')
        await consumer(t, 'O', priority_groups=['A'], priority_policy='overflow')
        await t.pull('O', 'far', {'batch': 10, 'expires': EXP, 'group': 'A', 'min_pending': 3})
        await t.pub('s.1', n=2)
        await t.frames('backlog 2: far waits', 'far')
        await t.pub('s.1')
        await t.frames('backlog 3: far takes one', 'far', 1)
        await burst(t, 'O', 's.1', 3)
        await t.frames('backlog 5: far takes three', 'far', 3)
        await t.info('info', 'O')
        await t.pull('O', 'nw', {'batch': 5, 'no_wait': True, 'group': 'A', 'min_pending': 10})
        await t.frames('no_wait with a minimum', 'nw', 1)
        await t.pull('O', 'near', {'batch': 10, 'expires': EXP, 'group': 'A'})
        await t.frames('near takes the rest', 'near', 2)
        await t.frames('far still waiting', 'far', quiet=0.1)
        await t.pull('O', 'ack', {'batch': 10, 'expires': EXP, 'group': 'A', 'min_ack_pending': 12})
        await burst(t, 'O', 's.2', 3)
        await t.frames('ack pending 8 then more', 'near', 1)
        await t.frames('min_ack_pending reached?', 'ack', 1)
        await t.frames('far', 'far', quiet=0.1)
        await t.pull('O', 'near', {'batch': 1, 'group': 'A', 'min_pending': 0, 'min_ack_pending': 0})
        await t.frames('zeros: a plain request', 'near', quiet=0.3)
        await t.info('info end', 'O')
    await compare(start_server, scenario)


async def test_overflow_min_ack_pending(start_server):
    "min_ack_pending: served once enough messages wait for an ack, and then while they do."
    async def scenario(t):
        await t.start([S]); await t.box('ack', 'near')
        await consumer(t, 'O', priority_groups=['A'], priority_policy='overflow')
        await t.pub('s.1', n=6)
        await t.pull('O', 'ack', {'batch': 5, 'expires': EXP, 'group': 'A', 'min_ack_pending': 2})
        await t.frames('nothing pending: waits', 'ack')
        await t.pull('O', 'near', {'batch': 2, 'expires': EXP, 'group': 'A'})
        await t.frames('near takes two', 'near', 2)
        await t.frames('then ack takes the rest', 'ack', 4)
        await t.info('info', 'O')
    await compare(start_server, scenario)


# ---------------------------------------------------------------------------------------------- prioritized

async def test_prioritized(start_server):
    "Prioritized: lower numbers first, requests of one priority take turns, a bare batch size last."
    async def scenario(t):
        await t.start([S]); await t.box('p5', 'p0', 'p0b', 'plain', 'p9', 'bad')
        await consumer(t, 'Q', priority_groups=['A'], priority_policy='prioritized')
        await t.pull('Q', 'p5', {'batch': 3, 'expires': EXP, 'group': 'A', 'priority': 5})
        await t.pull('Q', 'plain', b'2')
        await t.pull('Q', 'p0', {'batch': 2, 'expires': EXP, 'group': 'A', 'priority': 0})
        await t.pull('Q', 'p9', {'batch': 1, 'expires': EXP, 'group': 'A', 'priority': 9})
        await t.pull('Q', 'p0b', {'batch': 2, 'expires': EXP, 'group': 'A'})                  # priority 0 by default
        for body in ({'batch': 1, 'group': 'A', 'priority': 10}, {'batch': 1, 'priority': 1}, {'batch': 1, 'group': 'A', 'id': 'x'}):
            await t.pull('Q', 'bad', body)
        await t.frames('refused', 'bad', 3)
        await t.info('waiting', 'Q')
        await burst(t, 'Q', 's.1', 9)
        for box, n in (('p0', 2), ('p0b', 2), ('p5', 3), ('p9', 1), ('plain', 1)):
            await t.frames(box, box, n, quiet=0.05)
        await t.info('after', 'Q')
    await compare(start_server, scenario)


async def test_requests_arriving_together(start_server):
    """Pull requests that reach the server together (one write), with messages already stored: all of them wait before
    the first delivery. Without a policy they take turns; `prioritized` serves the lowest number first, whichever came
    first (nats-jetstream's `test_consumer_prioritized_messages_stream` relies on it)."""
    async def scenario(t):
        await t.start([S]); await t.box('lo', 'hi', 'x', 'y', 'z')
        await consumer(t, 'Q', priority_groups=['A'], priority_policy='prioritized')
        await consumer(t, 'N')
        await t.pub('s.1', n=12)
        for box, p in (('lo', 1), ('hi', 0)):
            await t.nc.publish('$JS.API.CONSUMER.MSG.NEXT.S.Q', json.dumps({'batch': 4, 'expires': EXP, 'group': 'A', 'priority': p}).encode(), reply=box)
        await t.nc.flush()
        await t.frames('priority 0 first', 'hi', 4, quiet=0.05); await t.frames('then priority 1', 'lo', 4)
        for box, n in (('x', 3), ('y', 2), ('z', 3)):
            await t.nc.publish('$JS.API.CONSUMER.MSG.NEXT.S.N', json.dumps({'batch': n, 'expires': EXP}).encode(), reply=box)
        await t.nc.flush()
        for box, n in (('x', 3), ('y', 2), ('z', 3)): await t.frames(f'{box} in turns', box, n, quiet=0.05)
        await t.info('Q after', 'Q'); await t.info('N after', 'N')
    await compare(start_server, scenario)


async def test_no_wait_waits_for_acks(start_server):
    """A `no_wait` request stopped by `max_ack_pending` is not at the end of the stream: it waits, and acknowledgements
    let it have the rest of its batch; only the end of the stream answers `404 No Messages` (libnats's
    `JetStreamSubscribePullAsync`, "multi-fetch NOWAIT, partially fulfilled")."""
    async def scenario(t):
        await t.start([S]); await t.box('a')
        await consumer(t, 'M', max_ack_pending=3)
        await t.pub('s.1', n=7)
        await t.pull('M', 'a', {'batch': 5, 'no_wait': True})
        await t.frames('three, then it waits', 'a', 3)
        await t.info('waiting', 'M')
        for seq in (1, 2, 3): await t.nc.publish(f'$JS.ACK.S.M.1.{seq}.{seq}.0.0', b'+ACK')
        await t.frames('the other two, on the acks', 'a', 2)
        for seq in (4, 5): await t.nc.publish(f'$JS.ACK.S.M.1.{seq}.{seq}.0.0', b'+ACK')
        await t.pull('M', 'a', {'batch': 5, 'no_wait': True})
        await t.frames('the last two, then the end', 'a', 3)
        await t.info('after', 'M')
    await compare(start_server, scenario)


async def test_priority_fields_without_policy(start_server):
    "A consumer without a policy: group is not needed, but the other fields are still checked."
    async def scenario(t):
        await t.start([S]); await t.box('a')
        await consumer(t, 'C')
        await t.pub('s.1', n=3)
        for label, body in [('group ignored', {'batch': 1, 'group': 'anything'}), ('priority 3', {'batch': 1, 'priority': 3}),
                            ('priority 10', {'batch': 1, 'priority': 10}), ('id', {'batch': 1, 'id': 'x'}),
                            ('min_pending', {'batch': 1, 'min_pending': 1}), ('min_ack_pending', {'batch': 1, 'min_ack_pending': 1})]:
            await t.pull('C', 'a', body)
            await t.frames(label, 'a', 1, quiet=0.1)
        await t.info('info', 'C')
    await compare(start_server, scenario)


# ---------------------------------------------------------------------------------------------- waiting requests take turns

async def test_requests_take_turns_and_batch_completed(start_server):
    "Without a policy, waiting requests share messages in turns; a batch done with bytes to spare says 409 Batch Completed."
    async def scenario(t):
        await t.start([S]); await t.box('a', 'b', 'c')
        await consumer(t, 'C')
        await t.pull('C', 'a', {'batch': 5, 'expires': EXP})
        await t.pull('C', 'b', {'batch': 5, 'expires': EXP})
        await burst(t, 'C', 's.1', 4)
        await t.frames('a', 'a', 2); await t.frames('b', 'b', 2)
        await t.pull('C', 'c', {'batch': 1, 'max_bytes': 1000})
        await t.frames('a again', 'a', 1)
        await t.pub('s.2')
        await t.frames('b or c', 'b', quiet=0.2); await t.frames('c', 'c', quiet=0.2); await t.frames('a', 'a', quiet=0.2)
        await burst(t, 'C', 's.3', 3)
        await t.frames('after', 'a', quiet=0.2); await t.frames('b after', 'b', quiet=0.2); await t.frames('c after', 'c', quiet=0.2)
    await compare(start_server, scenario)


# ---------------------------------------------------------------------------------------------- reset

async def test_reset(start_server):
    "RESET: to the ack floor, to a sequence, what each deliver policy allows, bad requests, the level and identity headers."
    async def scenario(t):
        await t.start([S]); await t.box('a')
        await t.pub('s.1', n=10)
        cfgs = {'A': {}, 'B': {'deliver_policy': 'by_start_sequence', 'opt_start_seq': 4}, 'L': {'deliver_policy': 'last'},
                'N': {'deliver_policy': 'new'}, 'T': {'deliver_policy': 'by_start_time', 'opt_start_time': '2000-01-01T00:00:00Z'},
                'U': {'deliver_subject': 'push.u'}, 'K': {'ack_policy': 'all'},
                'LP': {'deliver_policy': 'last_per_subject', 'filter_subject': 's.>'}}
        for name, cfg in cfgs.items(): await consumer(t, name, **cfg)
        await t.pull('A', 'a', {'batch': 5})
        await t.frames('five', 'a', 5)
        for seq in (2, 1): await t.nc.publish(f'$JS.ACK.S.A.1.{seq}.{seq}.0.0', b'+ACK')
        await t.nc.flush(); await asyncio.sleep(0.1)
        R = '$JS.API.CONSUMER.RESET.'
        for label, subj, body, hdr in [
                ('to the ack floor', 'S.A', None, None), ('to 7', 'S.A', {'seq': 7}, None), ('past the end', 'S.A', {'seq': 70}, None),
                ('negative', 'S.A', {'seq': -1}, None), ('fraction', 'S.A', {'seq': 1.5}, None), ('blank', 'S.A', b' ', None),
                ('empty object', 'S.A', b'{}', None), ('null', 'S.A', b'null', None), ('zero', 'S.A', {'seq': 0}, None),
                ('bad json', 'S.A', b'{x', None), ('array', 'S.A', b'[]', None), ('unknown field', 'S.A', {'seq': 3, 'x': 1}, None),
                ('identity', 'S.A', {'seq': 2}, {'Nats-Stream-Identity': 'whatever'}),
                ('level', 'S.A', {'seq': 2}, {'Nats-Required-Api-Level': '99'}), ('level ok', 'S.A', {'seq': 1}, {'Nats-Required-Api-Level': '5'}),
                ('below start seq', 'S.B', {'seq': 2}, None), ('start seq', 'S.B', {'seq': 5}, None), ('B floor', 'S.B', None, None),
                ('last', 'S.L', {'seq': 5}, None), ('last floor', 'S.L', None, None), ('new', 'S.N', {'seq': 5}, None),
                ('by time', 'S.T', {'seq': 5}, None), ('push', 'S.U', {'seq': 5}, None), ('ack all', 'S.K', {'seq': 5}, None),
                ('last per subject', 'S.LP', {'seq': 1}, None), ('last per subject floor', 'S.LP', None, None),
                ('largest', 'S.A', {'seq': 2**64 - 1}, None), ('past uint64', 'S.A', {'seq': 2**64}, None),
                ('missing consumer', 'S.X', None, None), ('missing stream', 'X.A', None, None), ('short', 'S', None, None),
                ('long', 'S.A.X', None, None), ('missing with level', 'S.X', None, {'Nats-Required-Api-Level': '99'})]:
            await t.api(label, R + subj, body, hdr, timeout=1 if 'missing' in label or label in ('short', 'long') else 3)
        await t.api('back to 3', R + 'S.A', {'seq': 3})
        await t.pull('A', 'a', {'batch': 3})
        await t.frames('delivered again from 3, consumer sequence 1', 'a', 3)
        await t.info('info', 'A')
        await t.api('counters: resets are not counted', '$JS.API.INFO')
        await t.audited('nor audited', '.RESET.')
    await compare(start_server, scenario)


async def test_reset_with_waiting_and_pending(start_server):
    "A reset redelivers to a waiting request at once; acks of the old deliveries no longer count."
    async def scenario(t):
        await t.start([S]); await t.box('a', 'b')
        await consumer(t, 'A', max_deliver=3)
        await t.pub('s.1', n=4)
        await t.pull('A', 'a', {'batch': 4})
        await t.frames('four', 'a', 4)
        await t.pull('A', 'b', {'batch': 10, 'expires': EXP})
        _, r = await t.api('', '$JS.API.CONSUMER.RESET.S.A', record=False)
        t.rec('reset', {k: r[k] for k in ('type', 'ack_floor', 'reset_seq')})    # its counters race the redeliveries there
        await t.frames('again', 'b', 4)
        await t.nc.publish('$JS.ACK.S.A.1.1.1.0.0', b'+ACK'); await t.nc.flush(); await asyncio.sleep(0.2)
        await t.info('old ack applies to the same stream sequence', 'A')
    await compare(start_server, scenario)


async def test_reset_interest_stream(start_server):
    "On an interest stream, messages a reset skips and no other consumer wants are removed."
    async def scenario(t):
        st = {'name': 'I', 'subjects': ['i.>'], 'storage': 'memory', 'retention': 'interest'}
        await t.start([st])
        await consumer(t, 'X', stream='I'); await consumer(t, 'Y', stream='I')
        await t.pub('i.1', n=6)
        await t.api('X to 4', '$JS.API.CONSUMER.RESET.I.X', {'seq': 4})
        _, si = await t.api('', '$JS.API.STREAM.INFO.I', record=False)
        t.rec('state', {k: si['state'][k] for k in ('messages', 'first_seq', 'last_seq')})
        await t.api('Y to 5', '$JS.API.CONSUMER.RESET.I.Y', {'seq': 5})
        _, si = await t.api('', '$JS.API.STREAM.INFO.I', record=False)
        t.rec('state', {k: si['state'][k] for k in ('messages', 'first_seq', 'last_seq')})
        await t.api('Y back to 1', '$JS.API.CONSUMER.RESET.I.Y', {'seq': 1})
    await compare(start_server, scenario)
