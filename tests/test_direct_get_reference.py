"""Direct Get (`$JS.API.DIRECT.GET.<stream>`) against jsnb and the reference.

Every request is published with a reply inbox watched by a plain subscription, so all the reply
messages are seen (a batch is several messages followed by an EOB status). The replies of both
servers, in order, must match: reply subject, headers (only the value of `Nats-Time-Stamp` is
blanked, after its format is checked), payload and count. All the steps that differ are reported
together. A few facts are also checked on the reference's replies, so that each scenario is known
to exercise what it claims."""
import asyncio, json, re, time
from datetime import datetime, timezone, timedelta
import pytest
import nats
from nats.js.errors import KeyNotFoundError, NotFoundError, APIError

pytestmark = pytest.mark.reference

TS_RE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{0,8}[1-9])?Z$')   # RFC 3339, nanoseconds, no trailing zeros
FIRST_WAIT, QUIET, QUIET_AFTER_STATUS = 1.0, 0.12, 0.05


def rfc3339(dt: datetime) -> str: return dt.astimezone(timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


def now() -> str: return rfc3339(datetime.now(timezone.utc))


def _hdrs(h):
    if h is None: return None
    out = {}
    for k, v in h.items():
        k = getattr(k, 'value', k)
        if k == 'Nats-Time-Stamp': v = '<ts>' if TS_RE.match(v) else f'<bad ts {v!r}>'
        out[k] = v
    return out


class Transcript:
    def __init__(self, kind, nc):
        self.kind, self.nc, self.js, self.log = kind, nc, nc.jetstream(), []

    def note(self, label, value): self.log.append((label, value)); return value

    async def dg(self, subject, body=None, label=None, headers=None, first_wait=FIRST_WAIT):
        "Publish a request (dict → JSON, bytes as is, None → empty) and collect every reply message."
        data = b'' if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        inbox = self.nc.new_inbox()
        q = asyncio.Queue()
        async def cb(m): q.put_nowait(m)
        sub = await self.nc.subscribe(inbox, cb=cb)
        await self.nc.publish(subject, data, reply=inbox, headers=headers)
        replies, wait = [], first_wait
        while True:
            try: m = await asyncio.wait_for(q.get(), wait)
            except asyncio.TimeoutError: break
            h = _hdrs(m.headers)
            replies.append({'subject': m.subject.replace(inbox, '<inbox>'), 'reply': m.reply, 'headers': h, 'data': m.data})
            wait = QUIET_AFTER_STATUS if h and 'Status' in h else QUIET
        await sub.unsubscribe()
        return self.note(label or f'{subject} {body!r}' + (f' headers={headers!r}' if headers else ''), replies)

    async def api(self, subject, body=None):
        data = b'' if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        return json.loads((await self.nc.request(subject, data, timeout=5)).data)

    async def pub(self, subject, data=b'', headers=None):
        ack = await self.js.publish(subject, data, headers=headers)
        return ack.seq


async def run_both(start_server, scenario):
    "Run `scenario` on both servers at once; every step's replies must be equal. Returns the reference's steps by label."
    servers = {kind: start_server(kind, '-js') for kind in ('nats-server', 'jsnb')}
    async def one(kind):
        nc = await asyncio.wait_for(nats.connect(servers[kind].url), 15)
        t = Transcript(kind, nc)
        try: await scenario(t)
        finally: await nc.close()
        return t.log
    ref, ours = await asyncio.gather(one('nats-server'), one('jsnb'))
    assert [s for s, _ in ours] == [s for s, _ in ref]
    diffs = [f'step {i} {label}:\n jsnb: {o}\n  ref: {r}' for i, ((label, r), (_, o)) in enumerate(zip(ref, ours)) if o != r]
    assert not diffs, f'{len(diffs)} of {len(ref)} steps differ:\n' + '\n'.join(diffs)
    return dict(ref)


# Summaries of a reply list, for the checks on the reference's replies.
def status(replies): return [(r['headers'] or {}).get('Status') for r in replies]
def seqs(replies): return [int(r['headers']['Nats-Sequence']) for r in replies if r['headers'] and 'Nats-Sequence' in r['headers']]
def desc(replies): return [(r['headers'] or {}).get('Description') for r in replies]


D = '$JS.API.DIRECT.GET.D'
# seq: subject, payload, own headers. Seq 7 is deleted after publishing; the gap in time is between 8 and 9.
MSGS = [('d.a', b'a1', None), ('d.b', b'b1', {'X-One': '1'}), ('d.c.x', b'', None),
        ('d.a', b'a2', {'X-Two': '2', 'X-Three': 'three'}), ('d.b', b'', {'X-Empty': 'e'}), ('d.c.y', b'cy', None),
        ('d.d', b'to delete', None), ('d.a', b'a3', None),
        ('d.b', b'b2', None), ('d.c.x', b'cx2', {'X-Four': '4'}), ('d.e', b'e' * 100, None), ('d.a', b'', None)]


async def setup_d(t, storage='file'):
    "Stream D with MSGS; returns (before all, between seq 8 and 9, after all) as RFC 3339 times."
    r = await t.api('$JS.API.STREAM.CREATE.D', {'name': 'D', 'subjects': ['d.>'], 'allow_direct': True, 'storage': storage})
    assert 'error' not in r, r
    for s, data, h in MSGS[:8]: await t.pub(s, data, h)
    await asyncio.sleep(0.15); mid = now(); await asyncio.sleep(0.15)
    for s, data, h in MSGS[8:]: await t.pub(s, data, h)
    r = await t.api('$JS.API.STREAM.MSG.DELETE.D', {'seq': 7})
    assert r.get('success'), r
    return '2000-01-01T00:00:00Z', mid, rfc3339(datetime.now(timezone.utc) + timedelta(hours=1))


@pytest.mark.parametrize('storage', ['file', 'memory'])
async def test_single_message_forms(start_server, storage):
    "`seq`, `last_by_subj`, `next_by_subj` (with and without `seq`), `start_time` (with and without `next_by_subj`), `no_hdr`."
    async def scenario(t):
        before, mid, after = await setup_d(t, storage)
        for seq in (1, 2, 3, 5, 7, 12, 13, 1000): await t.dg(D, {'seq': seq})
        for subj in ('d.a', 'd.b', 'd.c.x', 'd.c.*', 'd.>', 'd.*', 'd.d', 'nomatch', 'x.>'): await t.dg(D, {'last_by_subj': subj})
        for body in ({'next_by_subj': 'd.a'}, {'next_by_subj': 'd.c.*'}, {'next_by_subj': 'd.>'}, {'next_by_subj': 'nomatch'},
                     {'seq': 2, 'next_by_subj': 'd.a'}, {'seq': 4, 'next_by_subj': 'd.a'}, {'seq': 5, 'next_by_subj': 'd.a'},
                     {'seq': 4, 'next_by_subj': 'd.c.*'}, {'seq': 7, 'next_by_subj': 'd.>'}, {'seq': 7, 'next_by_subj': 'd.d'},
                     {'seq': 13, 'next_by_subj': 'd.>'}, {'seq': 1, 'next_by_subj': 'd.*'}, {'seq': 3, 'next_by_subj': '>'}):
            await t.dg(D, body)
        for label, st in (('before', before), ('between', mid), ('after', after)):
            await t.dg(D, {'start_time': st}, f'start_time {label}')
            for subj in ('d.a', 'd.c.*', 'd.d', 'nomatch'):
                await t.dg(D, {'start_time': st, 'next_by_subj': subj}, f'start_time {label} next_by_subj {subj}')
        for body in ({'seq': 2, 'no_hdr': True}, {'seq': 3, 'no_hdr': True}, {'seq': 5, 'no_hdr': True}, {'last_by_subj': 'd.c.x', 'no_hdr': True},
                     {'seq': 1, 'next_by_subj': 'd.b', 'no_hdr': True}, {'seq': 7, 'no_hdr': True}, {'seq': 2, 'no_hdr': False}):
            await t.dg(D, body)
        # The time stamp sent is the message's own, to the nanosecond (the reply of MSG.GET has it too).
        r = await t.nc.request(D, b'{"seq":4}', timeout=2)
        m = await t.api('$JS.API.STREAM.MSG.GET.D', {'seq': 4})
        t.note('direct time == stored time', r.headers.get('Nats-Time-Stamp') == m['message']['time'])
    ref = await run_both(start_server, scenario)
    assert seqs(ref["$JS.API.DIRECT.GET.D {'seq': 1}"]) == [1]
    assert status(ref["$JS.API.DIRECT.GET.D {'seq': 7}"]) == ['404']
    assert seqs(ref["$JS.API.DIRECT.GET.D {'last_by_subj': 'd.c.*'}"]) == [10]
    assert seqs(ref["$JS.API.DIRECT.GET.D {'seq': 4, 'next_by_subj': 'd.c.*'}"]) == [6]
    assert seqs(ref['start_time between']) == [9]
    assert seqs(ref['start_time between next_by_subj d.a']) == [12]
    assert status(ref['start_time after']) == ['404']
    assert ref["$JS.API.DIRECT.GET.D {'seq': 2, 'no_hdr': True}"] == [{'subject': '<inbox>', 'reply': '', 'headers': None, 'data': b'b1'}]
    assert ref['direct time == stored time'] is True

