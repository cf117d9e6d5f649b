"""More of the stream API through stock nats-py and raw requests, against jsnb and the reference.

Each scenario records a transcript (API replies, pub acks, what nats-py returns or raises);
the transcripts from both servers must be equal once per-run values are blanked. All the steps
that differ are reported together."""
import asyncio, json
import pytest
import nats
from nats.js.api import StreamConfig, StorageType
from nats.js.errors import APIError

pytestmark = pytest.mark.reference

from jsdiff import VOLATILE, blank, run_both as _run_both


class Transcript:
    def __init__(self, nc): self.nc, self.js, self.log = nc, nc.jetstream(), []

    def note(self, label, value): self.log.append((label, value)); return value

    async def api(self, subject, body=None, codes_only=False):
        "An API request and its reply; `codes_only` keeps just the error's code and err_code (for free-form descriptions)."
        data = b'' if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        label = f'{subject} {body!r}'
        try: d = json.loads((await self.nc.request(subject, data, timeout=2)).data)
        except nats.errors.TimeoutError: return self.note(label, 'no reply (timeout)')
        out = blank(d)
        if codes_only and 'error' in d: out = {**out, 'error': {k: v for k, v in d['error'].items() if k != 'description'}}
        self.log.append((label, out)); return d

    async def pub(self, subject, data=b'', headers=None, timeout=5):
        "A publish expecting a reply: the ack or error, or what nats-py raised (a timeout, no responders)."
        label = f'pub {subject} {headers!r}'
        try: r = await self.nc.request(subject, data, timeout=timeout, headers=headers)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as e: return self.note(label, type(e).__name__)
        d = json.loads(r.data) if r.data else {'headers': dict(r.headers or {})}
        return self.note(label, blank(d))

    async def py(self, label, coro):
        "What a nats-py JetStream call returns (as a dict) or the API error it raises."
        try: r = await coro
        except APIError as e: return self.note(label, ('APIError', e.code, e.err_code, e.description))
        if hasattr(r, 'as_dict'): r = r.as_dict()
        return self.note(label, blank(_plain(r)))


def _plain(x):
    "nats-py results as plain data (enums as their values, dataclasses as dicts)."
    if hasattr(x, 'as_dict'): x = x.as_dict()
    if isinstance(x, dict): return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list): return [_plain(v) for v in x]
    if hasattr(x, 'value') and not isinstance(x, (int, str)): return x.value
    if hasattr(x, 'isoformat'): return '<time>'
    return x


async def run_both(start_server, scenario):
    return await _run_both(start_server, scenario, Transcript)


async def test_update_stream_nats_py(start_server):
    async def scenario(t):
        js = t.js
        await t.py('add', js.add_stream(name='U', subjects=['u.a'], description='first', max_msgs=10))
        for i in range(5): await t.pub('u.a', b'%d' % i)
        await t.py('update subjects', js.update_stream(StreamConfig(name='U', subjects=['u.a', 'u.b'], description='first', max_msgs=10)))
        await t.pub('u.b', b'b')
        await t.py('update max_msgs', js.update_stream(StreamConfig(name='U', subjects=['u.a', 'u.b'], description='first', max_msgs=3)))
        await t.py('update description', js.update_stream(StreamConfig(name='U', subjects=['u.a', 'u.b'], description='second', max_msgs=3)))
        await t.py('drop description', js.update_stream(StreamConfig(name='U', subjects=['u.a', 'u.b'], max_msgs=3)))
        await t.py('update storage', js.update_stream(StreamConfig(name='U', subjects=['u.a', 'u.b'], max_msgs=3, storage=StorageType.MEMORY)))
        await t.py('update missing', js.update_stream(StreamConfig(name='NOPE', subjects=['nope'])))
        await t.py('update overlapping', js.update_stream(StreamConfig(name='U', subjects=['u.*', 'u.a'])))
        await t.py('add other', js.add_stream(name='V', subjects=['v.>']))
        await t.py('update onto other', js.update_stream(StreamConfig(name='U', subjects=['v.x'])))
        await t.py('update subjects only', js.update_stream(name='U', subjects=['u.>']))
        await t.py('info', js.stream_info('U'))
        await t.api('$JS.API.STREAM.UPDATE.U', {'name': 'U', 'subjects': ['u.>'], 'storage': 'memory'})
        await t.api('$JS.API.STREAM.UPDATE.U', {'name': 'U', 'subjects': ['u.>'], 'retention': 'workqueue'})
        await t.api('$JS.API.STREAM.UPDATE.U', {'name': 'OTHER', 'subjects': ['u.>']})
        await t.api('$JS.API.STREAM.UPDATE.U', {'name': 'U', 'subjects': ['u.>'], 'max_msgs': 3, 'max_consumers': 5})
        await t.api('$JS.API.STREAM.INFO.U')
    await run_both(start_server, scenario)


async def test_list_and_names_paging(start_server):
    async def scenario(t):
        for n in 'CAB': await t.api(f'$JS.API.STREAM.CREATE.{n}', {'name': n, 'subjects': [n.lower() + '.>']})
        for off in (0, 1, 2, 3, 5, -1):
            await t.api('$JS.API.STREAM.NAMES', {'offset': off})
            await t.api('$JS.API.STREAM.LIST', {'offset': off})
        await t.api('$JS.API.STREAM.NAMES', {'offset': 1, 'subject': 'a.x'})
        await t.api('$JS.API.STREAM.NAMES', {'offset': 0, 'subject': '>'})
        await t.api('$JS.API.STREAM.NAMES', {'offset': 2, 'subject': '>'})
        await t.api('$JS.API.STREAM.LIST', {'offset': 1, 'subject': 'b.*'})
        await t.api('$JS.API.STREAM.LIST', {'offset': 2, 'subject': '>'})
        await t.api('$JS.API.STREAM.NAMES', {'offset': 'x'}, codes_only=True)
        await t.api('$JS.API.STREAM.LIST', {'offset': 'x'}, codes_only=True)
        await t.api('$JS.API.STREAM.NAMES', b'{"offset": 1')
        await t.api('$JS.API.STREAM.LIST', b'{"offset": 1')
    await run_both(start_server, scenario)


async def test_info_subjects_filter_paging(start_server):
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.A', {'name': 'A', 'subjects': ['a.>']})
        for i in range(5):
            for _ in range(i + 1): await t.pub(f'a.s{4 - i}.x')
        for body in ({'subjects_filter': '>'}, {'subjects_filter': '>', 'offset': 1}, {'subjects_filter': '>', 'offset': 2},
                     {'subjects_filter': '>', 'offset': 4}, {'subjects_filter': '>', 'offset': 5}, {'subjects_filter': '>', 'offset': 9},
                     {'subjects_filter': '>', 'offset': -3}, {'subjects_filter': 'a.s1.x', 'offset': 0}, {'subjects_filter': 'a.s1.x', 'offset': 1},
                     {'subjects_filter': 'a.*.x', 'offset': 3}, {'subjects_filter': 'nomatch', 'offset': 1}, {'offset': 2},
                     {'subjects_filter': '>', 'offset': 3, 'deleted_details': True}):
            await t.api('$JS.API.STREAM.INFO.A', body)
        await t.py('nats-py subjects_filter', t.js.stream_info('A', subjects_filter='a.s3.*'))
    await run_both(start_server, scenario)


async def test_expected_last_subject_sequence_subject(start_server):
    H = 'Nats-Expected-Last-Subject-Sequence'
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.A', {'name': 'A', 'subjects': ['a.>', 'b.>']})
        await t.pub('a.one', b'1'); await t.pub('a.two', b'2'); await t.pub('b.one', b'3')
        await t.pub('a.one', b'x', {H: '1', H + '-Subject': 'a.one'})         # seq 4
        await t.pub('a.three', b'x', {H: '4', H + '-Subject': 'a.one'})       # checks a.one, stores a.three: seq 5
        await t.pub('a.three', b'x', {H: '4', H + '-Subject': 'a.one'})       # a.one still at 4
        await t.pub('a.three', b'x', {H: '5', H + '-Subject': 'a.*'})         # last of a.*: 6
        await t.pub('a.three', b'x', {H: '6', H + '-Subject': 'a.>'})         # wrong: 7 now
        await t.pub('a.three', b'x', {H: '7', H + '-Subject': 'a.>'})
        await t.pub('a.four', b'x', {H: '0', H + '-Subject': 'a.none'})
        await t.pub('a.four', b'x', {H: '0', H + '-Subject': 'a.*'})
        await t.pub('a.four', b'x', {H + '-Subject': 'a.one'})                # the subject header alone
        await t.pub('a.four', b'x', {H: '1', H + '-Subject': 'c.other'})      # outside the stream
        await t.pub('a.four', b'x', {H: '1', H + '-Subject': 'bad..subj'})
        await t.pub('a.four', b'x', {H: '3', H + '-Subject': 'b.one'})
        await t.pub('a.four', b'x', {H: 'nan', H + '-Subject': 'b.one'})
        await t.pub('a.four', b'x', {H: '3', H + '-Subject': ''})
        await t.api('$JS.API.STREAM.INFO.A', {'subjects_filter': '>'})
    await run_both(start_server, scenario)


@pytest.mark.parametrize('storage', ['file', 'memory'])
async def test_max_age_expiry(start_server, storage):
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.E', {'name': 'E', 'subjects': ['e.>'], 'max_age': 1_000_000_000, 'storage': storage})
        for i in range(3): await t.pub(f'e.{i}', b'x')
        await t.api('$JS.API.STREAM.INFO.E')
        await asyncio.sleep(1.5)
        for _ in range(20):                    # loose timing: wait (up to 2 s more) until everything has expired
            d = json.loads((await t.nc.request('$JS.API.STREAM.INFO.E', b'', timeout=5)).data)
            if d['state']['messages'] == 0: break
            await asyncio.sleep(0.1)
        await t.api('$JS.API.STREAM.INFO.E')
        await t.api('$JS.API.STREAM.INFO.E', {'subjects_filter': '>'})
        await t.api('$JS.API.STREAM.MSG.GET.E', {'seq': 1})
        await t.pub('e.new', b'y')
        await t.api('$JS.API.STREAM.INFO.E')
        await t.api('$JS.API.STREAM.CREATE.F', {'name': 'F', 'subjects': ['f.>'], 'max_age': 500_000_000, 'duplicate_window': 2_000_000_000})
        await t.api('$JS.API.STREAM.CREATE.G', {'name': 'G', 'subjects': ['g.>'], 'max_age': 500_000})
    await run_both(start_server, scenario)


async def test_no_ack_stream(start_server):
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.N', {'name': 'N', 'subjects': ['n.>'], 'no_ack': True})
        await t.pub('n.a', b'1', timeout=0.5)
        await t.pub('n.b', b'2', {'Nats-Msg-Id': 'x'}, timeout=0.5)
        await t.pub('n.b', b'2', {'Nats-Msg-Id': 'x'}, timeout=0.5)     # a duplicate: still no reply
        await t.pub('n.c', b'3', {'Nats-Expected-Last-Sequence': '99'}, timeout=0.5)   # a failed check: no reply either
        await t.pub('nothing.here', b'3', timeout=0.5)
        await t.api('$JS.API.STREAM.INFO.N')
        await t.api('$JS.API.STREAM.MSG.GET.N', {'seq': 2})
        await t.api('$JS.API.STREAM.UPDATE.N', {'name': 'N', 'subjects': ['n.>'], 'no_ack': False})
        await t.pub('n.d', b'4')
        await t.api('$JS.API.STREAM.UPDATE.N', {'name': 'N', 'subjects': ['n.>'], 'no_ack': True})
        await t.pub('n.e', b'5', timeout=0.5)
        await t.api('$JS.API.STREAM.INFO.N')
    await run_both(start_server, scenario)


async def test_first_seq(start_server):
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.F', {'name': 'F', 'subjects': ['f.>'], 'first_seq': 100})
        await t.api('$JS.API.STREAM.INFO.F')
        await t.pub('f.a', b'1'); await t.pub('f.b', b'2')
        await t.api('$JS.API.STREAM.INFO.F')
        await t.api('$JS.API.STREAM.MSG.GET.F', {'seq': 1})
        await t.api('$JS.API.STREAM.MSG.GET.F', {'seq': 100})
        await t.api('$JS.API.STREAM.UPDATE.F', {'name': 'F', 'subjects': ['f.>'], 'first_seq': 500})
        await t.api('$JS.API.STREAM.CREATE.F', {'name': 'F', 'subjects': ['f.>'], 'first_seq': 100})
        await t.api('$JS.API.STREAM.PURGE.F')
        await t.api('$JS.API.STREAM.INFO.F')
        await t.api('$JS.API.STREAM.CREATE.M', {'name': 'M', 'subjects': ['m.>'], 'first_seq': 7, 'storage': 'memory'})
        await t.pub('m.a', b'1')
        await t.api('$JS.API.STREAM.CREATE.Z', {'name': 'Z', 'subjects': ['z.>'], 'first_seq': 0})
        await t.api('$JS.API.STREAM.CREATE.NEG', {'name': 'NEG', 'subjects': ['neg.>'], 'first_seq': -5})
        await t.py('nats-py first_seq', t.js.add_stream(name='P', subjects=['p.>'], first_seq=42))
    await run_both(start_server, scenario)


async def test_purge_by_seq(start_server):
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.P', {'name': 'P', 'subjects': ['p.>']})
        for i in range(10): await t.pub(f'p.{"ab"[i % 2]}', b'%d' % i)
        await t.api('$JS.API.STREAM.PURGE.P', {'seq': 3})                      # removes 1 and 2
        await t.api('$JS.API.STREAM.INFO.P', {'subjects_filter': '>'})
        await t.api('$JS.API.STREAM.PURGE.P', {'seq': 3})                      # nothing left below 3
        await t.api('$JS.API.STREAM.PURGE.P', {'seq': 7, 'filter': 'p.a'})     # 3 and 5
        await t.api('$JS.API.STREAM.INFO.P', {'subjects_filter': '>'})
        await t.api('$JS.API.STREAM.PURGE.P', {'seq': 1000})
        await t.api('$JS.API.STREAM.INFO.P')
        await t.pub('p.a', b'after')
        await t.api('$JS.API.STREAM.PURGE.P', {'seq': 0})
        await t.api('$JS.API.STREAM.INFO.P')
        await t.api('$JS.API.STREAM.PURGE.P', {'seq': 5, 'keep': 1})
        await t.py('nats-py purge seq', t.js.purge_stream('P', seq=12))
        await t.api('$JS.API.STREAM.INFO.P')
    await run_both(start_server, scenario)


@pytest.mark.parametrize('storage', ['file', 'memory'])
async def test_deleting_a_message_that_is_gone(start_server, storage):
    "The file store tells a sequence before its first (purged, dropped by a limit, deleted at the front) or past its end apart from an interior one; the memory store does not."
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.D', {'name': 'D', 'subjects': ['d.>'], 'storage': storage, 'max_msgs': 4})
        await t.api('$JS.API.STREAM.MSG.DELETE.D', {'seq': 0})                 # an empty stream
        for i in range(6): await t.pub('d.a', b'%d' % i)                      # 1 and 2 dropped by max_msgs
        for seq in (1, 4, 4, 3, 3, 0, 9, 6):                                  # dropped, interior twice, the first twice, zero, past the end, the last
            await t.api('$JS.API.STREAM.MSG.DELETE.D', {'seq': seq})
        await t.api('$JS.API.STREAM.PURGE.D')
        await t.api('$JS.API.STREAM.MSG.DELETE.D', {'seq': 5})
        await t.api('$JS.API.STREAM.INFO.D')
    await run_both(start_server, scenario)


async def test_compression_s2(start_server):
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.Z', {'name': 'Z', 'subjects': ['z.>'], 'compression': 's2'})
        for i in range(5): await t.pub('z.a', b'compressible ' * 50)
        await t.api('$JS.API.STREAM.MSG.GET.Z', {'seq': 3})
        await t.api('$JS.API.STREAM.INFO.Z')
        await t.api('$JS.API.STREAM.CREATE.ZM', {'name': 'ZM', 'subjects': ['zm.>'], 'compression': 's2', 'storage': 'memory'})
        await t.api('$JS.API.STREAM.CREATE.ZN', {'name': 'ZN', 'subjects': ['zn.>'], 'compression': 'none'})
        await t.api('$JS.API.STREAM.CREATE.ZB', {'name': 'ZB', 'subjects': ['zb.>'], 'compression': 'lz4'})
        await t.api('$JS.API.STREAM.CREATE.ZE', {'name': 'ZE', 'subjects': ['ze.>'], 'compression': ''})
        await t.api('$JS.API.STREAM.UPDATE.ZN', {'name': 'ZN', 'subjects': ['zn.>'], 'compression': 's2'})
        await t.api('$JS.API.STREAM.UPDATE.Z', {'name': 'Z', 'subjects': ['z.>'], 'compression': 'none'})
        await t.api('$JS.API.STREAM.MSG.GET.Z', {'seq': 3})
    await run_both(start_server, scenario)


async def test_discard_new_per_subject(start_server):
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.Q1', {'name': 'Q1', 'subjects': ['q1.>'], 'discard_new_per_subject': True})
        await t.api('$JS.API.STREAM.CREATE.Q2', {'name': 'Q2', 'subjects': ['q2.>'], 'discard_new_per_subject': True, 'discard': 'new'})
        await t.api('$JS.API.STREAM.CREATE.Q', {'name': 'Q', 'subjects': ['q.>'], 'discard': 'new', 'discard_new_per_subject': True,
                                                 'max_msgs_per_subject': 2, 'max_msgs': 5})
        for subj in ('q.a', 'q.a', 'q.a', 'q.b', 'q.b', 'q.c', 'q.c', 'q.d'): await t.pub(subj, subj.encode())
        await t.api('$JS.API.STREAM.INFO.Q', {'subjects_filter': '>'})
        await t.api('$JS.API.STREAM.MSG.DELETE.Q', {'seq': 1})
        await t.pub('q.a', b'room again')
        await t.api('$JS.API.STREAM.UPDATE.Q', {'name': 'Q', 'subjects': ['q.>'], 'discard': 'new', 'discard_new_per_subject': False,
                                                 'max_msgs_per_subject': 2, 'max_msgs': 5})
        await t.pub('q.a', b'per subject off')
        await t.api('$JS.API.STREAM.UPDATE.Q', {'name': 'Q', 'subjects': ['q.>'], 'discard': 'old', 'discard_new_per_subject': True,
                                                 'max_msgs_per_subject': 2})
        await t.api('$JS.API.STREAM.INFO.Q', {'subjects_filter': '>'})
    await run_both(start_server, scenario)


async def test_allow_direct_round_trip(start_server):
    async def direct(t, stream, body, label):
        try: r = await t.nc.request(f'$JS.API.DIRECT.GET.{stream}', json.dumps(body).encode(), timeout=1)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as e: return t.note(label, type(e).__name__)
        hdrs = {getattr(k, 'value', k): ('<v>' if k == 'Nats-Time-Stamp' else v) for k, v in (r.headers or {}).items()}
        return t.note(label, {'data': r.data, 'headers': hdrs})
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.D', {'name': 'D', 'subjects': ['d.>'], 'allow_direct': True})
        await t.api('$JS.API.STREAM.INFO.D')
        await t.pub('d.a', b'hello', {'X': 'y'})
        await direct(t, 'D', {'seq': 1}, 'direct get seq 1')
        await direct(t, 'D', {'last_by_subj': 'd.a'}, 'direct get last_by_subj')
        await direct(t, 'D', {'seq': 9}, 'direct get missing')
        await t.api('$JS.API.STREAM.UPDATE.D', {'name': 'D', 'subjects': ['d.>'], 'allow_direct': False})
        await t.api('$JS.API.STREAM.INFO.D')
        await direct(t, 'D', {'seq': 1}, 'direct get after disabling')
        await t.api('$JS.API.STREAM.UPDATE.D', {'name': 'D', 'subjects': ['d.>'], 'allow_direct': True})
        await direct(t, 'D', {'seq': 1}, 'direct get after enabling again')
        await t.py('nats-py allow_direct', t.js.add_stream(name='P', subjects=['p.>'], allow_direct=True))
        await t.api('$JS.API.STREAM.LIST')
    await run_both(start_server, scenario)


async def test_required_api_level_header(start_server):
    "`Nats-Required-Api-Level` above ours (or not a number) is refused by every API, pull requests and Direct Get."
    async def scenario(t):
        nc = t.nc
        await t.api('$JS.API.STREAM.CREATE.L', {'name': 'L', 'subjects': ['l'], 'allow_direct': True})
        await t.pub('l', b'x')
        await t.api('$JS.API.CONSUMER.CREATE.L.C', {'stream_name': 'L', 'config': {'durable_name': 'C', 'ack_policy': 'explicit'}})
        for subject, body in [('$JS.API.STREAM.INFO.L', b''), ('$JS.API.CONSUMER.INFO.L.C', b''), ('$JS.API.STREAM.NAMES', b''),
                              ('$JS.API.INFO', b''), ('$JS.API.STREAM.MSG.GET.L', b'{"seq":1}')]:
            for level in ('6', '5', '-1', '+2', 'x', ''):
                r = await nc.request(subject, body, headers={'Nats-Required-Api-Level': level}, timeout=2)
                d = json.loads(r.data)
                t.note(f'{subject} level {level!r}', d.get('error') or sorted(d))
        for subject, body in [('$JS.API.CONSUMER.MSG.NEXT.L.C', b'{"batch":1}'), ('$JS.API.DIRECT.GET.L', b'{"seq":1}')]:
            r = await nc.request(subject, body, headers={'Nats-Required-Api-Level': '9'}, timeout=2)
            t.note(f'{subject} level 9', (dict(r.headers or {}), r.data))
    await run_both(start_server, scenario)


async def test_cluster_only_requests_on_one_server(start_server):
    "Stepdowns and peer removal on a server without a cluster: 10010 (clustering required), for a stream that exists or not; the meta stepdown and server removal are not answered."
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.X', {'name': 'X', 'subjects': ['x']})
        await t.api('$JS.API.CONSUMER.CREATE.X.C', {'stream_name': 'X', 'config': {'durable_name': 'C'}})
        for subject, body in [('$JS.API.STREAM.LEADER.STEPDOWN.X', None), ('$JS.API.CONSUMER.LEADER.STEPDOWN.X.C', None),
                              ('$JS.API.STREAM.PEER.REMOVE.X', {'peer': 'a'}), ('$JS.API.STREAM.PEER.REMOVE.NOPE', {'peer': 'a'}),
                              ('$JS.API.META.LEADER.STEPDOWN', {}), ('$JS.API.SERVER.REMOVE', {'peer': 'a'})]:
            await t.api(subject, body)
    await run_both(start_server, scenario)
