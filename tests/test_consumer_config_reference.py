"""Consumer create requests against the reference nats-server, compared with `jsnb.js.consumer_config`.

Every scenario is a list of raw create requests sent with nats-py. The reference's reply (its `config`,
or its `error`) must equal what `consumer_config_for_create` returns or raises for the same body, given
the stream configuration the reference reported and the consumers created so far in the scenario.
Consumers are deleted between scenarios."""
import asyncio, json, re, shutil, socket, subprocess, tempfile, time
import pytest
import nats

from jsnb.js.errors import JSApiError
from jsnb.js.consumer_config import consumer_config_for_create, filters_overlap, new_consumer_name

pytestmark = pytest.mark.reference
if shutil.which('nats-server') is None: pytest.skip('reference nats-server not installed', allow_module_level=True)

NS = 1_000_000_000
T = '2024-01-01T00:00:00Z'
STREAMS = [
    {'name': 'S', 'subjects': ['s.>']},
    {'name': 'I', 'subjects': ['i.>'], 'retention': 'interest'},
    {'name': 'W', 'subjects': ['w.>'], 'retention': 'workqueue'},
    {'name': 'L', 'subjects': ['l.>'], 'consumer_limits': {'max_ack_pending': 50, 'inactive_threshold': 60 * NS}},
    {'name': 'M', 'subjects': ['m.>'], 'storage': 'memory', 'max_consumers': 1},
]


def subj(stream='S', name=None, filt=None, durable=False):
    if durable: return f'$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{name}'
    return '.'.join(['$JS.API.CONSUMER.CREATE', stream] + ([name] if name else []) + ([filt] if filt else []))


def c(cfg, name=None, stream='S', filt=None, durable=False, **kw):
    "One create request: (subject, body)."
    return (subj(stream, name, filt, durable), {'stream_name': stream, 'config': cfg, **kw})


def d(cfg, stream='S', **kw):
    "A request for the durable `D` through the subject API."
    return c({'durable_name': 'D', **cfg}, 'D', stream, **kw)


P = {'deliver_subject': 'dx.x'}  # push
E = {'ack_policy': 'explicit'}
SINGLE = [
    # the request, the subject and the names
    c({}), c(P), c({'name': 'N1'}), c({'durable_name': 'D1'}, 'D1'), c({'name': 'Q'}, 'N'), c({'durable_name': 'D', 'name': 'D'}, 'D'),
    c({'durable_name': 'D2', 'ack_policy': 'none', 'deliver_subject': 'x.y'}, 'D2', durable=True),
    c({'durable_name': 'D', 'name': 'X'}, 'D', durable=True), c({}, 'D', durable=True), c({'durable_name': 'E'}, 'D', durable=True),
    c({'durable_name': 'a.b'}, 'D', durable=True), c({'durable_name': 'D'}), c({'durable_name': 'D'}, 'E'),
    c({'durable_name': 'D', 'name': 'E'}), c({'name': 'E', 'durable_name': 'D'}, 'D'),
    c({'name': 'a.b'}), c({'name': 'a b'}), c({'name': 'a/b'}), c({'name': 'a\\b'}), c({'name': 'a*'}), c({}, 'a\\b'),
    c({'durable_name': 'a/b'}, 'a/b', durable=True), c({}, stream_name='X'), ('$JS.API.CONSUMER.CREATE.S', {'config': {}}),
    c({}, stream='NOPE'), c({'num_replicas': 3}, stream='NOPE'), c({'num_replicas': -1}, stream='NOPE'),
    c({'num_replicas': -1}), c({'num_replicas': 1}), c({'num_replicas': 2}),
    c({'name': 'x' * 300}), c({'durable_name': 'y' * 300}), c({}, 'y' * 300), c({'durable_name': 'y' * 300}, 'y' * 300),
    c({'mem_storage': True}, 'z' * 300, stream='M'), c({}, 'z' * 300, stream='M'),
    # decoding
    c({'ack_wait': '1s'}), c({'max_deliver': 'x'}), c({'opt_start_seq': -1}), c({'opt_start_seq': 1.0}), c({'max_deliver': 1e30}),
    c({'deliver_subject': 5}), c({'flow_control': 'yes'}), c({'filter_subjects': 'a'}), c({'filter_subjects': [1]}),
    c({'metadata': {'a': 1}}), c({'metadata': []}), c({'backoff': ['1s']}), c({'backoff': [1.5]}), c({'backoff': 5}),
    c({'opt_start_time': 'bad'}), c({'opt_start_time': 5}), c({'opt_start_time': True, 'deliver_policy': 'by_start_time'}),
    c({'deliver_policy': 'bogus'}), c({'deliver_policy': None}), c({'deliver_policy': 5}), c({'ack_policy': None}),
    c({'replay_policy': 'x'}), c({'priority_policy': 'x'}), c({'priority_policy': None}), c({'deliver_policy': 'undefined'}),
    c({'foo': 1}), c({'foo': 1, 'deliver_policy': 'x'}), c({'deliver_policy': 'x', 'foo': 1}), c({'max_deliver': 'x', 'deliver_policy': 'x'}),
    c({}, foo=1), c({}, pedantic='x'), c({}, action='bogus'), c({}, action=None), c({}, action=5), c({}, action='Create'),
    c({}, action=''), c({}, pedantic=None), c(None), c([]), c('x'), c({}, stream_name=5),
    ('$JS.API.CONSUMER.CREATE.S', {'config': {'max_deliver': 'x'}, 'action': 5}),
    ('$JS.API.CONSUMER.CREATE.S', {'action': 5, 'config': {'max_deliver': 'x'}}),
    c({'Durable_Name': 'D'}, 'D'), c({'ACK_POLICY': 'explicit', 'ack_policy': 'all'}),
    c({'ack_wait': None, 'durable_name': None, 'pause_until': None, 'opt_start_time': None, 'description': None}),
    c({'backoff': None, 'filter_subjects': None, 'metadata': None}), c({'filter_subjects': [None]}), c({'metadata': {'a': None}}),
    c({'max_deliver': 9223372036854775808}), c({'max_deliver': -9223372036854775808}), c({'rate_limit_bps': 18446744073709551616}),
    c({'ack_wait': True}), c({'deliver_subject': [1]}), c({'deliver_subject': {}}),
    # times
    *[c({'deliver_policy': 'by_start_time', 'opt_start_time': t}) for t in (
        '2024-01-01T00:00:00+02:00', '2024-01-01T00:00:00.500000000+00:00', '2024-13-01T00:00:00Z', '2024-01-01T00:00:00',
        '2024-01-01T00:00:00+25:00', '2024-01-01t00:00:00Z', '2024-02-30T00:00:00Z', '2024-01-01T00:00:00Zjunk',
        '24-01-01T00:00:00Z', '2024-1-01T00:00:00Z', '2024-01-01T24:00:00Z', '2024-01-01T00:00:60Z', '2024-01-01T00:00:00.Z',
        '2024-01-01T00:00:00.1234567891Z', '2024-01-01T00:00:00+0100', '', '2024-01-01T00:00:00-00:00', '0001-01-01T00:00:00Z',
        '2024/01/01')],
    c({'pause_until': '2099-01-01T00:00:00+02:00'}), c({'pause_until': '0001-01-01T00:00:00Z'}),
    c({'pause_until': '2099-01-01T00:00:00.123456789123Z'}),
    # defaults, pedantic mode
    c({'ack_policy': 'all'}), c(E | {'backoff': [NS, 2 * NS]}), c({'ack_policy': 'none', 'backoff': [5]}), c({'ack_policy': 'none', 'ack_wait': 7}),
    c(E | {'max_ack_pending': -1}), c(E | {'max_ack_pending': -7}), c(E | {'max_ack_pending': -7}, pedantic=True),
    c({'max_deliver': -5}), c({'max_deliver': -5}, pedantic=True), c({'inactive_threshold': -1}), c({'inactive_threshold': -1}, pedantic=True),
    c(E | {'backoff': [2, 3]}, pedantic=True), c(E | {'backoff': [2, 3], 'ack_wait': 2}, pedantic=True),
    *[c({k: -1}, pedantic=p) for k in ('max_waiting', 'max_batch', 'max_expires', 'max_bytes', 'idle_heartbeat', 'priority_timeout')
      for p in (False, True)],
    c({'durable_name': 'D', 'inactive_threshold': 9}, 'D'),
    c({'inactive_threshold': 120 * NS}, stream='L'), c(P, stream='L'), c(E, stream='L'), c(E | {'max_ack_pending': 51}, stream='L'),
    c({}, stream='L', pedantic=True), c(E | {'max_ack_pending': 7, 'inactive_threshold': 30 * NS}, stream='L', pedantic=True),
    # acknowledgement
    c(E | {'backoff': [1, 2, 3], 'max_deliver': 2}), c(E | {'backoff': [1, 2, 3], 'max_deliver': 3}), c(E | {'backoff': [1, -2]}),
    c(E | {'backoff': [5 * NS], 'ack_wait': 1}), c(E | {'ack_wait': -1}),
    c({'ack_policy': 'flow_control'}), c({'ack_policy': 'flow_control', 'deliver_subject': 'dd'}),
    c({'ack_policy': 'flow_control', 'deliver_subject': 'dd', 'idle_heartbeat': 2 * NS}),
    c({'ack_policy': 'flow_control', 'deliver_subject': 'dd', 'ack_wait': 5}),
    c({'ack_policy': 'flow_control', 'deliver_subject': 'dd', 'max_deliver': 5}),
    c({'ack_policy': 'flow_control', 'deliver_subject': 'dd'}, pedantic=True),
    c({'ack_policy': 'flow_control', 'deliver_subject': 'dd', 'flow_control': True, 'idle_heartbeat': NS}, pedantic=True),
    c({'ack_policy': 'flow_control', 'deliver_subject': 'dd', 'max_ack_pending': -1}),
    c({'description': 'd' * 4096}), c({'description': 'd' * 4097}),
    # push and pull
    c(P | {'max_waiting': 5}), c({'deliver_subject': 'd.*'}), c({'deliver_subject': 'd..x'}), c({'deliver_subject': 's.x'}),
    c({'deliver_subject': '>'}), c(P | {'ack_policy': 'none', 'max_ack_pending': 10}), c(P | {'idle_heartbeat': 50_000_000}),
    c(P | {'idle_heartbeat': 100_000_000}), c(P | {'flow_control': True}), c(P | E | {'flow_control': True, 'idle_heartbeat': NS}),
    c({'deliver_group': 'g'}), c(P | {'deliver_group': 'g'}), c({'rate_limit_bps': 100}), c(P | {'rate_limit_bps': 100}),
    c({'idle_heartbeat': NS}), c({'flow_control': True}), c({'flow_control': True, 'idle_heartbeat': 1}),
    c({'max_waiting': 3}), c({'max_batch': 10, 'max_expires': 500_000, 'max_bytes': 100}), c({'max_expires': 1_000_000}),
    c(P | {'max_batch': 10}), c(P | {'max_expires': 10}), c(P | {'max_bytes': 10}), c({'headers_only': True}), c(P | {'headers_only': True}),
    c({'direct': True}), c(P | {'direct': True}), c({'sourcing': True}), c(P | {'sourcing': True, 'direct': True}),
    c({'mem_storage': True}),
    # filters and start
    c({'filter_subject': 's.a'}, 'N', filt='s.a'), c({'filter_subject': 's.b'}, 'N', filt='s.a'), c({}, 'N', filt='s.a'),
    c({'filter_subjects': ['s.a']}, 'N', filt='s.a'), c({'filter_subject': 's.*'}, 'N', filt='s.*'), c({'filter_subject': 'zz'}),
    c({'filter_subject': 's.a', 'filter_subjects': ['s.b']}), c({'filter_subjects': ['s.a', 's.*']}), c({'filter_subjects': ['s.a', '']}),
    c({'filter_subjects': ['s.a', 's..b']}), c({'filter_subject': 's..a'}), c({'filter_subject': ' '}), c({'filter_subject': 's.a '}),
    c({'filter_subjects': []}), c({'filter_subjects': ['s.a', 's.b']}), c({'filter_subjects': ['s.>', 's.a.b']}),
    c({'filter_subjects': ['s.a', 's.a']}), c({'filter_subject': '>'}), c({'backoff': []}),
    *[c({'deliver_policy': p, **x}) for p in ('all', 'last', 'new', 'last_per_subject') for x in ({}, {'opt_start_seq': 5}, {'opt_start_time': T})],
    c({'deliver_policy': 'last_per_subject', 'filter_subject': 's.a'}),
    c({'deliver_policy': 'by_start_sequence'}), c({'deliver_policy': 'by_start_sequence', 'opt_start_seq': 3}),
    c({'deliver_policy': 'by_start_sequence', 'opt_start_seq': 3, 'opt_start_time': T}),
    c({'deliver_policy': 'by_start_time'}), c({'deliver_policy': 'by_start_time', 'opt_start_time': T, 'opt_start_seq': 2}),
    c({'deliver_policy': 'by_start_time', 'opt_start_time': T}), c({'opt_start_seq': 0}),
    # sampling, metadata, priority groups
    c({'sample_freq': 'abc'}), c({'sample_freq': '-5%'}), c({'sample_freq': '50%'}), c({'sample_freq': '+50'}), c({'sample_freq': '%'}),
    c({'sample_freq': '99999999999999999999'}), c({'sample_freq': '150'}),
    c({'metadata': {'k': 'v', '_nats.ver': 'x', '_nats.req.level': '9'}}), c({'metadata': {}}),
    c({'metadata': {'k': 'v' * (128 * 1024 - 17)}}), c({'metadata': {'k': 'v' * (128 * 1024 - 16)}}),
    c({'priority_policy': 'pinned_client', 'priority_groups': ['A']}), c({'priority_policy': 'overflow'}),
    c({'priority_groups': ['A']}), c({'priority_timeout': 5}), c({'priority_policy': 'overflow', 'priority_groups': ['']}),
    c({'priority_policy': 'overflow', 'priority_groups': ['a.b']}), c({'priority_policy': 'overflow', 'priority_groups': ['x' * 17]}),
    c(P | {'priority_policy': 'overflow', 'priority_groups': ['A']}),
    c({'priority_policy': 'prioritized', 'priority_groups': ['A', 'b_2/=-'], 'priority_timeout': 7}), c({'priority_policy': 'none'}),
    # retention
    c({}, stream='W'), c(E, stream='W'), c({'ack_policy': 'all'}, stream='W'), c(E | {'deliver_policy': 'new'}, stream='W'),
    c(E | P, stream='W'), c(E | {'num_replicas': 1}, stream='W'), c(P | {'ack_policy': 'none'}, stream='W'),
    c(P | {'direct': True}, stream='W'), c({'ack_policy': 'flow_control', 'deliver_subject': 'dd'}, stream='W'),
    c({}, stream='I'), c({'num_replicas': 1}, stream='I'), c(P, stream='I'),
]

D0 = E  # the durable D's base configuration in the update scenarios
CHANGES = [{'max_ack_pending': 5}, {'description': 'x'}, {'ack_wait': 5}, {'max_deliver': 4}, {'filter_subject': 's.a'},
           {'sample_freq': '5'}, {'headers_only': True}, {'metadata': {'a': 'b'}}, {'backoff': [1, 2]},
           {'inactive_threshold': 10 * NS}, {'max_waiting': 7}, {'deliver_policy': 'new'}, {'ack_policy': 'all'},
           {'replay_policy': 'original'}, {'deliver_policy': 'by_start_sequence', 'opt_start_seq': 3}, {'mem_storage': True},
           {'pause_until': '2099-01-01T00:00:00Z'}, {'num_replicas': 1}, {'deliver_subject': 'd.y'}, {'max_batch': 5},
           {'max_bytes': 5}, {'rate_limit_bps': 1}, {'direct': True}, {'sourcing': True}]
PUSH_CHANGES = [{'idle_heartbeat': NS}, {'flow_control': True, 'idle_heartbeat': NS}, {'deliver_subject': 'd.y'},
                {'deliver_subject': ''}, {'deliver_group': 'g'}, {'rate_limit_bps': 1}, {'max_waiting': 0}]
WQ = {'ack_policy': 'explicit', 'durable_name': None}
N = lambda cfg, action=None, name='N': c(cfg, name, **({} if action is None else {'action': action}))
w = lambda name, cfg, **kw: c(E | cfg, name, stream='W', **kw)
MULTI = [
    *[[d(D0), d(D0 | x, action='update'), d(D0 | x, action='create'), d(D0 | x)] for x in CHANGES],
    *[[d(D0 | P), d(D0 | P | x, action='update')] for x in PUSH_CHANGES],
    [d(D0 | {'deliver_subject': 'di.x'}), ('sub', 'di.x'), d(D0 | {'deliver_subject': 'di.y'})],
    [d(D0 | {'deliver_subject': 'di.x'}), ('sub', 'di.x'), d(D0 | {'deliver_subject': 'di.x', 'description': 'still bound'})],
    [d(D0, action='update')],
    [d(D0, action='create'), d(D0, action='create'), d(D0, action=''), d(D0 | {'pause_until': '2099-01-01T00:00:00Z'}, action='create')],
    [d(D0 | {'pause_until': '2099-01-01T00:00:00+01:00'}), d(D0 | {'description': 'z'}, action='update'),
     d(D0 | {'pause_until': '2098-01-01T00:00:00+01:00'}, action='create'), d(D0 | {'pause_until': '2097-01-01T00:00:00Z'})],
    [N({}, 'create'), N({}, 'create'), N({'description': 'q'}), N({'inactive_threshold': 5 * NS}, 'create'),
     N({'inactive_threshold': 5 * NS, 'description': 'q'}, 'create')],
    [N({}, 'create'), c({'durable_name': 'N'}, 'N', action='update'), c({'durable_name': 'N'}, 'N', action='create')],
    [N({'inactive_threshold': 10 * NS}), N({})],
    [c({'name': 'LN'}), c({'name': 'LN'}, action='create'), c({'name': 'LN', 'inactive_threshold': 5 * NS}, action='create')],
    [d(D0 | {'deliver_policy': 'by_start_time', 'opt_start_time': T}),
     d(D0 | {'deliver_policy': 'by_start_time', 'opt_start_time': '2024-01-01T01:00:00+01:00'}, action='create'),
     d(D0 | {'deliver_policy': 'by_start_time', 'opt_start_time': '2024-01-01T01:00:00+01:00'}, action='update'),
     d(D0 | {'deliver_policy': 'by_start_time', 'opt_start_time': '2024-01-01T02:00:00+01:00'})],
    [d(D0 | {'max_ack_pending': 0}), d(D0 | {'max_ack_pending': 1000}, action='create'),
     d(D0 | {'ack_wait': 30 * NS, 'max_deliver': -1, 'max_waiting': 512}, action='create')],
    [d(D0 | {'metadata': {'a': '1'}}), d(D0 | {'metadata': {'a': '1', '_nats.req.level': '3'}}, action='create'),
     d(D0 | {'metadata': {'a': '2'}}, action='create')],
    [d(D0 | {'priority_policy': 'pinned_client', 'priority_groups': ['A']}),
     d(D0 | {'priority_policy': 'pinned_client', 'priority_groups': ['A', 'B']}),
     d(D0 | {'priority_policy': 'overflow', 'priority_groups': ['A']})],
    [d(D0), d({'ack_policy': 'none'}, action='update'), d(D0 | {'num_replicas': 2})],
    [w('A', {'filter_subject': 'w.a'}), w('B', {}), w('B', {'filter_subject': 'w.*'}), w('B', {'filter_subjects': ['w.b', 'w.a.x']}),
     w('B', {'filter_subject': 'w.b'}), w('B', {'filter_subject': 'w.a'}), w('B', {'filter_subject': 'w.c'}), w('B', {}, action='update'),
     w('A', {'filter_subject': 'w.b', 'deliver_policy': 'new'}, action='update'), w('A', {'ack_policy': 'none'}, action='update'),
     w('A', {'filter_subject': 'w.>'}), c(P | {'direct': True}, stream='W')],
    [w('A', {}), w('B', {'filter_subject': 'w.b'})],
    [c({'mem_storage': True}, 'A', stream='M'), c({}, 'B', stream='M'), c({'description': 'x'}, 'A', stream='M')],
]
OVERLAPS = [(['w.a'], ['w.b']), (['w.*'], ['w.b']), (['w.*.x'], ['w.>']), (['w.a.*'], ['w.*.b']), (['w.a.*'], ['w.*']),
            (['w.a', 'w.c'], ['w.b', 'w.c']), (['w.a', 'w.c'], ['w.b', 'w.d']), (['w.*.*'], ['w.a.>']), (['w.>'], ['w.a']),
            (['w.a.b'], ['w.a']), ([], ['w.a']), (['w.a'], [])]
fs = lambda f: {'filter_subjects': f} if len(f) > 1 else {'filter_subject': f[0]} if f else {}
MULTI += [[w('A', fs(a)), w('B', fs(b))] for a, b in OVERLAPS]
SCENARIOS = [[s] for s in SINGLE] + MULTI


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


async def _run_reference(port):
    "Send every scenario to the reference; return its stream configs and its reply to each step."
    nc = await asyncio.wait_for(nats.connect(f'nats://127.0.0.1:{port}'), 15)
    async def req(subject, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return json.loads((await nc.request(subject, data, timeout=5)).data)
    streams, replies = {}, []
    for s in STREAMS: streams[s['name']] = (await req(f"$JS.API.STREAM.CREATE.{s['name']}", s))['config']
    for scenario in SCENARIOS:
        out, made, subs = [], set(), []
        for step in scenario:
            if step[0] == 'sub':
                subs.append(await nc.subscribe(step[1])); await nc.flush(); out.append(None); continue
            reply = await req(*step)
            out.append(reply)
            if 'config' in reply: made.add((reply['stream_name'], reply['name']))
        for sub in subs: await sub.unsubscribe()
        for stream, name in made: await req(f'$JS.API.CONSUMER.DELETE.{stream}.{name}', b'')
        replies.append(out)
    await nc.close()
    return streams, replies


@pytest.fixture(scope='module')
def reference():
    port, workdir = _free_port(), tempfile.mkdtemp(prefix='ref-consumers-')
    proc = subprocess.Popen(['nats-server', '-js', '-sd', workdir, '-a', '127.0.0.1', '-p', str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try: socket.create_connection(('127.0.0.1', port), timeout=0.2).close(); break
            except OSError:
                if time.time() > deadline or proc.poll() is not None: raise RuntimeError('reference did not start')
                time.sleep(0.02)
        yield asyncio.run(_run_reference(port))
    finally:
        proc.terminate(); proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def _parse_subject(subject):
    t = subject.split('.')
    if t[3] == 'DURABLE':
        return dict(subject_stream=t[5], subject_consumer=t[6], subject_filter=None, durable_api=True)
    return dict(subject_stream=t[4], subject_consumer=t[5] if len(t) > 5 else None,
                subject_filter='.'.join(t[6:]) or None, durable_api=False)


def _ours(body, streams, consumers, subject, interest):
    "What jsnb answers: ('config', config) or ('error', error object)."
    kw = _parse_subject(subject)
    try:
        stream_consumers = consumers.setdefault(kw['subject_stream'], {})
        cfg = consumer_config_for_create(body, streams.get(kw['subject_stream']), consumers=stream_consumers,
                                         deliver_interest=interest, **kw)
        stream_consumers[cfg.get('name') or new_consumer_name(stream_consumers)] = cfg
        return 'config', cfg
    except JSApiError as e: return 'error', e.to_dict()


def _scenario_id(i):
    s = SCENARIOS[i]
    return f'{i}-' + re.sub(r'[^A-Za-z0-9_.:-]+', '', json.dumps(s[0][1] if len(s) == 1 else [x[1] for x in s if x[0] != 'sub'])[:60])


@pytest.mark.parametrize('i', range(len(SCENARIOS)), ids=_scenario_id)
def test_consumer_create_matches_reference(reference, i):
    streams, replies = reference
    consumers, bound = {}, set()
    for step, ref in zip(SCENARIOS[i], replies[i]):
        if step[0] == 'sub': bound.add(step[1]); continue
        subject, body = step
        kw, cfg = _parse_subject(subject), body.get('config') if isinstance(body, dict) else None
        name = kw['subject_consumer'] or (cfg.get('name') if isinstance(cfg, dict) else None)
        old = consumers.get(kw['subject_stream'], {}).get(name) if name else None
        interest = bool(old and old.get('deliver_subject') in bound)
        raw = json.dumps(body).encode()
        kind, ours = _ours(raw, streams, consumers, subject, interest)
        if 'error' in ref:
            assert (kind, ours) == ('error', ref['error']), f'{subject} {raw[:200]!r}'
            continue
        expected = ref['config']
        assert (kind, ours) == ('config', expected), f'{subject} {raw[:200]!r}'
        assert list(ours) == list(expected), 'field order'


def test_decoded_values_give_the_same_answers(reference):
    "The same requests given as `json.loads` values (not bytes) are answered alike."
    streams, replies = reference
    for scenario, ref in zip(SCENARIOS[:len(SINGLE)], replies):
        subject, body = scenario[0]
        kw = _parse_subject(subject)
        try: ours = consumer_config_for_create(json.loads(json.dumps(body)), streams.get(kw['subject_stream']), **kw)
        except JSApiError as e: ours = {'error': e.to_dict()}
        if 'error' in ref[0]: assert ours == {'error': ref[0]['error']}, subject
        else: assert set(ours) == set(ref[0]['config']), subject


def test_filters_overlap_agrees_with_workqueue_partitions(reference):
    "`filters_overlap` is true exactly where the reference refuses a second consumer on a workqueue stream."
    streams, replies = reference
    for (a, b), ref in zip(OVERLAPS, replies[-len(OVERLAPS):]):
        assert 'config' in ref[0]
        refused = ref[1].get('error', {}).get('err_code') in (10099, 10100)
        assert filters_overlap(a, b) == refused, (a, b, ref[1])
