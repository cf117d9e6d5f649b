"""Direct Get (`$JS.API.DIRECT.GET.<stream>`) against jsnb and the reference.

Every request is published with a reply inbox watched by a plain subscription, so all the reply
messages are seen (a batch is several messages followed by an EOB status). The replies of both
servers, in order, must match: reply subject, headers in order (only the value of `Nats-Time-Stamp`
is blanked, after its format is checked), payload and count. All the steps that differ are reported
together. A few facts are also checked on the reference's replies, so that each scenario is known
to exercise what it claims."""
import asyncio, json, re
from datetime import datetime, timezone, timedelta
import pytest
import nats
from nats.js.errors import KeyNotFoundError, NotFoundError, APIError

pytestmark = pytest.mark.reference

TS_RE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{0,8}[1-9])?Z$')   # RFC 3339, nanoseconds, no trailing zeros
TIME_RE = re.compile(r'\d{4}-\d\d-\d\dT[\d:.]+Z')                            # per-run times, kept out of labels
FIRST_WAIT, QUIET, QUIET_AFTER_STATUS = 1.0, 0.12, 0.05


def rfc3339(dt: datetime) -> str: return dt.astimezone(timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


def now() -> str: return rfc3339(datetime.now(timezone.utc))


def _hdrs(h):
    "The headers as (name, value) pairs in the order received; a status line shows as `Status`/`Description`."
    if h is None: return None
    out = []
    for k, v in h.items():
        k = getattr(k, 'value', k)
        if k == 'Nats-Time-Stamp': v = '<ts>' if TS_RE.match(v) else f'<bad ts {v!r}>'
        out.append((k, v))
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
            wait = QUIET_AFTER_STATUS if 'Status' in dict(h or ()) else QUIET
        await sub.unsubscribe()
        label = label or TIME_RE.sub('<time>', f'{subject} {body!r}') + (f' headers={headers!r}' if headers else '')
        return self.note(label, replies)

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
        try:
            await scenario(t)
            t.note('client reconnects (the server closed the connection)', nc.stats['reconnects'])
        finally: await nc.close()
        return t.log
    ref, ours = await asyncio.gather(one('nats-server'), one('jsnb'))
    assert [s for s, _ in ours] == [s for s, _ in ref]
    diffs = [f'step {i} {label}:\n jsnb: {o}\n  ref: {r}' for i, ((label, r), (_, o)) in enumerate(zip(ref, ours)) if o != r]
    assert not diffs, f'{len(diffs)} of {len(ref)} steps differ:\n' + '\n'.join(diffs)
    return dict(ref)


# Summaries of a reply list, for the checks on the reference's replies.
def hdr(reply, name): return dict(reply['headers'] or ()).get(name)
def status(replies): return [hdr(r, 'Status') for r in replies]
def seqs(replies): return [int(hdr(r, 'Nats-Sequence')) for r in replies if hdr(r, 'Nats-Sequence')]
def desc(replies): return [hdr(r, 'Description') for r in replies]


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



@pytest.mark.parametrize('storage', ['file', 'memory', 'file-compiled'])
async def test_batches(start_server, storage, monkeypatch):
    """`batch` with `seq`, with `next_by_subj`, with `start_time`, cut by `max_bytes`, larger than what exists, matching nothing.
    `file-compiled`: jsnb compiles its kernels at start, so file batches are written by the frame kernel."""
    if storage == 'file-compiled': monkeypatch.setenv('JSNB_JIT_AT_START', '1')
    async def scenario(t):
        before, mid, after = await setup_d(t, storage.split('-')[0])
        for body in ({'seq': 1, 'batch': 3}, {'seq': 6, 'batch': 3}, {'seq': 7, 'batch': 2}, {'seq': 1, 'batch': 1},
                     {'seq': 12, 'batch': 5}, {'seq': 10, 'batch': 100}, {'seq': 13, 'batch': 5}, {'seq': 1000, 'batch': 2},
                     {'seq': 1, 'batch': 3, 'next_by_subj': 'd.a'}, {'seq': 2, 'batch': 2, 'next_by_subj': 'd.a'},
                     {'seq': 1, 'batch': 100, 'next_by_subj': 'd.>'}, {'batch': 2, 'next_by_subj': 'd.c.*'},
                     {'seq': 4, 'batch': 3, 'next_by_subj': 'd.*'}, {'seq': 1, 'batch': 5, 'next_by_subj': 'nomatch'},
                     {'seq': 1, 'batch': 5, 'next_by_subj': 'd.d'}, {'seq': 9, 'batch': 5, 'next_by_subj': 'd.c.y'},
                     {'seq': 1, 'batch': 10, 'max_bytes': 10}, {'seq': 1, 'batch': 10, 'max_bytes': 1},
                     {'seq': 1, 'batch': 10, 'max_bytes': 30}, {'seq': 1, 'batch': 10, 'next_by_subj': 'd.b', 'max_bytes': 20},
                     {'seq': 9, 'batch': 10, 'max_bytes': 110}, {'seq': 1, 'batch': 3, 'max_bytes': -1},
                     {'seq': 1, 'max_bytes': 1}, {'seq': 1, 'batch': 0}, {'seq': 1, 'batch': -1},
                     {'seq': 1, 'batch': 2, 'no_hdr': True}, {'seq': 4, 'batch': 3, 'next_by_subj': 'd.>', 'no_hdr': True},
                     {'seq': 1, 'batch': 2, 'up_to_seq': 1}):
            await t.dg(D, body)
        for label, st in (('before', before), ('between', mid), ('after', after)):
            await t.dg(D, {'start_time': st, 'batch': 3}, f'batch start_time {label}')
            await t.dg(D, {'start_time': st, 'batch': 3, 'next_by_subj': 'd.a'}, f'batch start_time {label} next_by_subj d.a')
            await t.dg(D, {'start_time': st, 'batch': 3, 'next_by_subj': 'd.>', 'max_bytes': 10}, f'batch start_time {label} max_bytes')
    ref = await run_both(start_server, scenario)
    r = ref["$JS.API.DIRECT.GET.D {'seq': 6, 'batch': 3}"]
    assert seqs(r) == [6, 8, 9] and status(r) == [None, None, None, '204'] and desc(r)[-1] == 'EOB'
    r = ref["$JS.API.DIRECT.GET.D {'seq': 1, 'batch': 100, 'next_by_subj': 'd.>'}"]
    assert seqs(r) == [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12] and hdr(r[-1], 'Nats-Num-Pending') == '0'
    r = ref["$JS.API.DIRECT.GET.D {'seq': 1, 'batch': 10, 'max_bytes': 10}"]
    assert 1 < len(seqs(r)) < 10 and status(r)[-1] == '204'
    assert status(ref["$JS.API.DIRECT.GET.D {'seq': 1, 'batch': 5, 'next_by_subj': 'nomatch'}"]) == ['404']
    assert seqs(ref['batch start_time between next_by_subj d.a']) == [12]


@pytest.mark.parametrize('storage', ['file', 'memory'])
async def test_multi_last(start_server, storage):
    "`multi_last` with literal and wildcard subjects, `up_to_seq`, `up_to_time`, `batch`, `max_bytes`, `seq`; no match."
    async def scenario(t):
        before, mid, after = await setup_d(t, storage)
        for ml, extra in ((['d.a', 'd.b'], {}), (['d.b', 'd.a'], {}), (['d.>'], {}), (['d.c.*', 'd.a'], {}), (['d.a', 'd.a'], {}),
                          (['d.a', 'd.>'], {}), (['>'], {}), (['d.*'], {}), (['d.d'], {}), (['nomatch'], {}), (['nomatch', 'd.e'], {}),
                          (['d.a'], {'up_to_seq': 5}), (['d.>'], {'up_to_seq': 3}), (['d.>'], {'up_to_seq': 7}),
                          (['d.>'], {'up_to_seq': 1000}), (['d.e'], {'up_to_seq': 10}),
                          (['d.>'], {'batch': 2}), (['d.>'], {'batch': 2, 'up_to_seq': 8}), (['d.>'], {'batch': 100}),
                          (['d.>'], {'max_bytes': 5}), (['d.>'], {'batch': 3, 'max_bytes': 1}),
                          (['d.>'], {'seq': 6}), (['d.>'], {'seq': 6, 'batch': 2}), (['d.>'], {'seq': 13}),
                          (['d.>'], {'no_hdr': True}), (['d.a'], {'start_time': before}), (['d.a'], {'up_to_seq': 0})):
            await t.dg(D, {'multi_last': ml, **extra})
        for label, st in (('before', before), ('between', mid), ('after', after)):
            await t.dg(D, {'multi_last': ['d.>'], 'up_to_time': st}, f'multi_last up_to_time {label}')
            await t.dg(D, {'multi_last': ['d.a', 'd.c.*'], 'up_to_time': st, 'batch': 2}, f'multi_last up_to_time {label} batch 2')
    ref = await run_both(start_server, scenario)
    r = ref["$JS.API.DIRECT.GET.D {'multi_last': ['d.a', 'd.b']}"]
    assert seqs(r) == [9, 12] and status(r)[-1] == '204' and hdr(r[-1], 'Nats-UpTo-Sequence') == '12'
    assert seqs(ref["$JS.API.DIRECT.GET.D {'multi_last': ['d.a'], 'up_to_seq': 5}"]) == [4]
    assert seqs(ref['multi_last up_to_time between']) == [3, 5, 6, 8]
    assert status(ref['multi_last up_to_time before']) == ['404']
    assert status(ref["$JS.API.DIRECT.GET.D {'multi_last': ['nomatch']}"]) == ['404']
    assert len(seqs(ref["$JS.API.DIRECT.GET.D {'multi_last': ['d.>'], 'batch': 2}"])) == 2


async def test_multi_last_too_many_subjects(start_server):
    "More than 1024 matching subjects is a 413, whatever the batch; exactly 1024 is served."
    async def scenario(t):
        r = await t.api('$JS.API.STREAM.CREATE.M', {'name': 'M', 'subjects': ['m.>'], 'allow_direct': True})
        assert 'error' not in r, r
        for i in range(1, 1101): await t.nc.publish(f'm.{i}', b'%d' % i)
        await t.nc.flush()
        for _ in range(100):
            if (await t.api('$JS.API.STREAM.INFO.M'))['state']['messages'] == 1100: break
            await asyncio.sleep(0.05)
        M = '$JS.API.DIRECT.GET.M'
        for body in ({'multi_last': ['m.>']}, {'multi_last': ['m.*']}, {'multi_last': ['m.>'], 'batch': 2},
                     {'multi_last': ['m.>'], 'up_to_seq': 1025, 'batch': 2}, {'multi_last': ['m.>'], 'up_to_seq': 1024, 'batch': 2},
                     {'multi_last': ['m.>'], 'up_to_seq': 1024}, {'multi_last': ['m.1', 'm.1100', 'm.5']},
                     {'multi_last': ['m.1', 'm.>']}, {'multi_last': ['m.no']}):
            await t.dg(M, body)
    ref = await run_both(start_server, scenario)
    M = '$JS.API.DIRECT.GET.M'
    assert status(ref[f"{M} {{'multi_last': ['m.>']}}"]) == ['413']
    assert status(ref[f"{M} {{'multi_last': ['m.>'], 'up_to_seq': 1025, 'batch': 2}}"]) == ['413']
    assert len(seqs(ref[f"{M} {{'multi_last': ['m.>'], 'up_to_seq': 1024}}"])) == 1024
    assert seqs(ref[f"{M} {{'multi_last': ['m.1', 'm.1100', 'm.5']}}"]) == [1, 5, 1100]


async def test_invalid_requests(start_server):
    "Empty, malformed, wrong types, unknown fields, every conflicting combination, `{}`; JSON is read like the reference reads it."
    async def scenario(t):
        before, mid, after = await setup_d(t)
        for body in (None, b'', b' ', b'{', b'not json', b'[]', b'[1]', b'"seq"', b'1', b'null', b'{}', b'{"seq":1}x', b'{"seq":1} ',
                     {'seq': '1'}, {'seq': -1}, {'seq': 1.5}, {'seq': 1e2}, b'{"seq":18446744073709551616}', {'seq': None},
                     {'seq': True}, {'last_by_subj': 5}, {'last_by_subj': ['d.a']}, {'next_by_subj': None}, {'batch': '2', 'seq': 1},
                     {'seq': 1, 'max_bytes': 'x'}, {'multi_last': 'd.a'}, {'multi_last': []}, {'multi_last': None},
                     {'start_time': 'yesterday'}, {'start_time': 5}, {'start_time': '2024-01-01'}, {'start_time': None},
                     {'multi_last': ['d.a'], 'up_to_time': 'bad'}, {'multi_last': ['d.a'], 'up_to_seq': -1},
                     {'seq': 1, 'no_hdr': 'true'}, {'seq': 1, 'no_hdr': 1},
                     {'foo': 1}, {'seq': 1, 'foo': 'bar'}, {'last_by_subj': 'd.a', 'extra': {'x': [1]}}, {'seq': 0},
                     {'last_by_subj': ''}, {'next_by_subj': ''}, {'batch': 3}, {'max_bytes': 10}, {'up_to_seq': 3},
                     {'up_to_time': mid}, {'no_hdr': True},
                     {'SEQ': 1}, {'Last_By_Subj': 'd.a'}, b'{"seq":1,"seq":2}', b'{"seq":2,"SEQ":3}',
                     # the conflicting combinations
                     {'seq': 1, 'last_by_subj': 'd.a'}, {'seq': 1, 'start_time': before}, {'start_time': before, 'last_by_subj': 'd.a'},
                     {'last_by_subj': 'd.a', 'next_by_subj': 'd.a'}, {'last_by_subj': 'd.a', 'batch': 2},
                     {'last_by_subj': 'd.a', 'multi_last': ['d.a']}, {'next_by_subj': 'd.a', 'multi_last': ['d.a']},
                     {'multi_last': ['d.a'], 'up_to_seq': 3, 'up_to_time': mid}, {'seq': 1, 'up_to_seq': 3, 'up_to_time': mid},
                     {'seq': 99, 'last_by_subj': 'nomatch'}, {'last_by_subj': 'd.a', 'batch': 1, 'seq': 1},
                     {'last_by_subj': 'd.a', 'batch': 0}, {'last_by_subj': 'd.a', 'max_bytes': 1}, {'last_by_subj': 'd.a', 'up_to_seq': 1},
                     {'multi_last': [1]}, {'multi_last': ['d.a', None]}, {'seq': 1}):
            await t.dg(D, body)
    ref = await run_both(start_server, scenario)
    assert desc(ref['$JS.API.DIRECT.GET.D None']) == ['Empty Request'] and status(ref['$JS.API.DIRECT.GET.D None']) == ['408']
    assert desc(ref["$JS.API.DIRECT.GET.D b'{'"]) == ['Malformed Request']
    assert desc(ref["$JS.API.DIRECT.GET.D {'seq': '1'}"]) == ['Malformed Request']
    assert desc(ref["$JS.API.DIRECT.GET.D b'{}'"]) == ['Empty Request']
    assert seqs(ref["$JS.API.DIRECT.GET.D {'seq': 1, 'foo': 'bar'}"]) == [1]
    for body in ("{'seq': 1, 'last_by_subj': 'd.a'}", "{'last_by_subj': 'd.a', 'batch': 2}",
                 "{'next_by_subj': 'd.a', 'multi_last': ['d.a']}"):
        r = ref[f'$JS.API.DIRECT.GET.D {body}']
        assert status(r) == ['408'] and desc(r) == ['Bad Request'], body


async def test_required_api_level_header(start_server):
    "A request whose `Nats-Required-Api-Level` header asks for more than the server has is refused with a 412."
    async def scenario(t):
        await setup_d(t)
        for level in ('999', 'abc', '0', '1', ''):
            await t.dg(D, {'seq': 1}, headers={'Nats-Required-Api-Level': level})
            await t.dg(D + '.d.a', None, headers={'Nats-Required-Api-Level': level})
    ref = await run_both(start_server, scenario)
    assert status(ref["$JS.API.DIRECT.GET.D {'seq': 1} headers={'Nats-Required-Api-Level': '999'}"]) == ['412']


async def test_subject_appended_form(start_server):
    "`$JS.API.DIRECT.GET.<stream>.<subject>`: the last message for the subject; a body may not ask for anything else."
    async def scenario(t):
        await setup_d(t)
        for subj in ('d.a', 'd.b', 'd.c.x', 'd.c.y', 'd.d', 'nomatch', 'd.a.b'): await t.dg(f'{D}.{subj}')
        for body in (b'', {'foo': 1}, {}, b'null', {'no_hdr': True}, {'max_bytes': 1}, {'up_to_seq': 0},
                     {'seq': 1}, {'last_by_subj': 'd.b'}, {'next_by_subj': 'd.b'}, {'multi_last': ['d.b']}, {'batch': 2},
                     {'start_time': '2000-01-01T00:00:00Z'}, {'up_to_seq': 3}, {'up_to_time': '2000-01-01T00:00:00Z'},
                     b'{', {'seq': 'x'}, b'[]'):
            await t.dg(f'{D}.d.a', body)
        await t.dg(f'{D}.', None, 'empty key')
        await t.dg(f'{D}..', None, 'two empty tokens')
        await t.dg(f'{D}.d..a', None, 'empty token inside')
        await t.dg('$JS.API.DIRECT.GET.NOPE.d.a', None, 'unknown stream')
        await t.dg('$JS.API.DIRECT.GET.NOPE', {'seq': 1}, 'unknown stream, body')
    ref = await run_both(start_server, scenario)
    assert seqs(ref[f'{D}.d.a None']) == [12]
    assert seqs(ref[f"{D}.d.a {{'foo': 1}}"]) == [12]
    r = ref[f"{D}.d.a {{'seq': 1}}"]
    assert status(r) == ['408'] and desc(r) == ['Bad Request']
    assert status(ref[f'{D}.nomatch None']) == ['404']


async def test_allow_direct_toggle(start_server):
    "No responder without `allow_direct`; one after enabling it by an update; none again after disabling it."
    async def scenario(t):
        r = await t.api('$JS.API.STREAM.CREATE.N', {'name': 'N', 'subjects': ['n.>']})
        t.note('created allow_direct', r['config'].get('allow_direct'))
        await t.pub('n.a', b'one', {'H': 'v'})
        N = '$JS.API.DIRECT.GET.N'
        async def probe(tag):
            await t.dg(N, {'seq': 1}, f'{tag}: seq 1')
            await t.dg(f'{N}.n.a', None, f'{tag}: appended')
            await t.dg(N, None, f'{tag}: empty body')
        await probe('off')
        r = await t.api('$JS.API.STREAM.UPDATE.N', {'name': 'N', 'subjects': ['n.>'], 'allow_direct': True})
        t.note('updated allow_direct', r['config'].get('allow_direct'))
        await probe('on')
        r = await t.api('$JS.API.STREAM.UPDATE.N', {'name': 'N', 'subjects': ['n.>'], 'allow_direct': False})
        t.note('disabled allow_direct', r['config'].get('allow_direct'))
        await probe('off again')
        r = await t.api('$JS.API.STREAM.CREATE.P', {'name': 'P', 'subjects': ['p.>'], 'max_msgs_per_subject': 3})
        t.note('max_msgs_per_subject allow_direct', r['config'].get('allow_direct'))
        await t.pub('p.a', b'x')
        await t.dg('$JS.API.DIRECT.GET.P', {'seq': 1}, 'max_msgs_per_subject: seq 1')
        await t.api('$JS.API.STREAM.DELETE.N')
        await t.dg(N, {'seq': 1}, 'deleted stream: seq 1')
    ref = await run_both(start_server, scenario)
    assert status(ref['off: seq 1']) == ['503'] and status(ref['off again: appended']) == ['503']
    assert seqs(ref['on: seq 1']) == [1] and seqs(ref['on: appended']) == [1]


async def test_api_total_unchanged(start_server):
    "Direct Get requests are not counted by `$JS.API.INFO`'s `api.total` (nor `api.errors`)."
    async def scenario(t):
        await setup_d(t)
        async def counters():
            a = (await t.api('$JS.API.INFO'))['api']; return a['total'], a['errors']
        t0, e0 = await counters(); t1, e1 = await counters()
        t.note('two INFO calls: total, errors', (t1 - t0, e1 - e0))
        for body in ({'seq': 1}, {'seq': 1, 'batch': 5}, {'multi_last': ['d.>']}, {'seq': 99}, None, b'{', {'seq': 1, 'last_by_subj': 'd.a'}):
            await t.dg(D, body)
        await t.dg(f'{D}.d.a')
        await t.dg(f'{D}.d.a', {'seq': 1})
        t2, e2 = await counters()
        t.note('after direct gets: total, errors', (t2 - t1, e2 - e1))
        await t.api('$JS.API.STREAM.MSG.GET.D', {'seq': 99})     # a control: an API request that fails is counted
        t3, e3 = await counters()
        t.note('after one failing MSG.GET: total, errors', (t3 - t2, e3 - e2))
    ref = await run_both(start_server, scenario)
    assert ref['after direct gets: total, errors'] == ref['two INFO calls: total, errors'] == (1, 0)
    assert ref['after one failing MSG.GET: total, errors'] == (2, 1)


async def test_msg_get_api_counting(start_server):
    "For contrast with Direct Get: how `$JS.API.STREAM.MSG.GET` requests move `api.total` / `api.errors`."
    async def scenario(t):
        await setup_d(t)
        async def counters():
            a = (await t.api('$JS.API.INFO'))['api']; return a['total'], a['errors']
        for body in ({'seq': 1}, {'last_by_subj': 'd.a'}, {'seq': 99}, {'seq': 1, 'batch': 2}, {}):
            c0 = await counters()
            await t.api('$JS.API.STREAM.MSG.GET.D', body)
            c1 = await counters()
            t.note(f'MSG.GET {body!r}: total, errors', (c1[0] - c0[0], c1[1] - c0[1]))
    await run_both(start_server, scenario)


async def test_kv_get_via_direct_get(start_server):
    "nats-py's KV `get` and `get(revision=...)` on a bucket created with `direct=True` go through Direct Get."
    async def scenario(t):
        spy = []
        async def watch(m): spy.append((m.subject, m.data))
        await t.nc.subscribe('$JS.API.DIRECT.GET.>', cb=watch)
        kv = await t.js.create_key_value(bucket='kv', direct=True, history=5)
        t.note('kv direct', kv._direct)
        si = await t.js.stream_info('KV_kv')
        t.note('stream allow_direct', si.config.allow_direct)
        for k, v in (('a', b'1'), ('a', b'2'), ('b', b'3'), ('c', b''), ('d.e', b'nested')): await kv.put(k, v)
        await kv.delete('b')
        await kv.put('a', b'4')
        async def get(label, coro):
            try: e = await coro
            except (KeyNotFoundError, NotFoundError, APIError) as err:
                return t.note(label, (type(err).__name__, getattr(err, 'code', None), getattr(err, 'description', None)))
            return t.note(label, (e.key, e.value, e.revision, e.operation))
        await get('get a', kv.get('a'))
        await get('get c (empty)', kv.get('c'))
        await get('get d.e', kv.get('d.e'))
        await get('get b (deleted)', kv.get('b'))
        await get('get zz (missing)', kv.get('zz'))
        for rev in (1, 2, 3, 6, 7, 99): await get(f'get a revision {rev}', kv.get('a', revision=rev))
        await get('get b revision 3', kv.get('b', revision=3))
        await get('get b revision 6 (delete marker)', kv.get('b', revision=6))
        await t.nc.flush(); await asyncio.sleep(0.05)
        t.note('direct get requests seen', spy)
        await t.dg('$JS.API.DIRECT.GET.KV_kv.$KV.kv.b', None, 'raw appended get of the delete marker')
        await t.dg('$JS.API.DIRECT.GET.KV_kv', {'multi_last': ['$KV.kv.>']}, 'raw multi_last over the bucket')
        kv2 = await t.js.create_key_value(bucket='plain', direct=False)
        t.note('kv without direct', kv2._direct)
    ref = await run_both(start_server, scenario)
    assert ref['get a'][1:3] == (b'4', 7)
    assert ref['get a revision 1'][1:3] == (b'1', 1)
    assert ref['get b (deleted)'][0] == 'KeyNotFoundError'
    assert ref['direct get requests seen'] and all(s.startswith('$JS.API.DIRECT.GET.KV_kv') for s, _ in ref['direct get requests seen'])
