"""Random input, as an attacker or a careless client sends it: the core protocol and the JetStream API.

After every case: each API request got exactly one reply, the server answers another client at once, and
its timers still run. The default run tries a bounded number of cases (seconds); `pytest -m soak` runs many
more (JSNB_FUZZ_CASES, default 2,000 per test)."""
import json, os, socket, time
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from conftest import ServerProc
from rawclient import Raw
from jsnb.js.api import ROUTES
from jsnb.nats.protocol import header_status

QUICK, SOAK = 40, int(os.environ.get('JSNB_FUZZ_CASES', '2000'))
COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
              derandomize=False)


@pytest.fixture(scope='module')
def server(tmp_path_factory):
    s = ServerProc('jsnb', ['-js', '-sd', str(tmp_path_factory.mktemp('fuzz'))]).start()
    yield s
    s.stop()


def api(raw: Raw, subject: str, body: bytes, inbox: str, timeout: float = 5) -> list:
    raw.send(b'PUB %s %s %d\r\n%s\r\n' % (subject.encode(), inbox.encode(), len(body), body))
    return raw.msgs(1, timeout)


def healthy(port: int):
    "Another client is answered at once, and a consumer's timer redelivers an unacknowledged message."
    r = Raw(port)
    t = time.monotonic(); r.send(b'PING\r\n')
    assert b'PONG' in r.until(b'PONG', 30), 'the server did not answer a PING'
    r.send(b'SUB _h.> 1\r\n')
    name = f'H{time.monotonic_ns()}'
    cfg = json.dumps({'name': name, 'subjects': [f'h.{name}'], 'storage': 'memory'}).encode()
    assert 'error' not in json.loads(api(r, f'$JS.API.STREAM.CREATE.{name}', cfg, '_h.1')[0].payload)
    c = json.dumps({'stream_name': name, 'config': {'durable_name': 'C', 'ack_policy': 'explicit', 'ack_wait': 200_000_000}}).encode()
    assert 'error' not in json.loads(api(r, f'$JS.API.CONSUMER.DURABLE.CREATE.{name}.C', c, '_h.2')[0].payload)
    r.send(b'PUB h.%s 1\r\nx\r\n' % name.encode())
    got = []
    for i in range(2):            # delivered, then redelivered once the ack wait runs out
        got += [m for m in api(r, f'$JS.API.CONSUMER.MSG.NEXT.{name}.C', b'{"batch":1,"expires":3000000000}', f'_h.n{i}')
                if m.reply.startswith(b'$JS.ACK.')]
        r.pending.clear()
    assert len(got) == 2 and got[1].reply.split(b'.')[4] == b'2', 'the consumer timer did not redeliver'
    api(r, f'$JS.API.STREAM.DELETE.{name}', b'', '_h.3')
    r.close()


# ---------------------------------------------------------------------------------------------- values

names = st.one_of(st.sampled_from(['S', 'C', 'ORDERS', 'd' * 255, 'x' * 256, 'a\x00b', 'é', 'A B', '']),
                  st.text(alphabet=st.characters(blacklist_characters=' .*>\r\n\t'), min_size=1, max_size=12))
big_ints = st.one_of(st.integers(-2**70, 2**70), st.sampled_from([0, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64]))
scalars = st.one_of(st.none(), st.booleans(), big_ints, st.floats(allow_nan=False), st.text(max_size=20),
                    st.sampled_from(['9999-12-31T23:59:59Z', '0001-01-01T00:00:00Z', '1h', 'limits', 'workqueue',
                                     'memory', 'file', 'explicit', 'all', 'last_per_subject', '>', 'orders.*']))
FIELDS = ['name', 'subjects', 'retention', 'storage', 'max_msgs', 'max_bytes', 'max_age', 'discard', 'num_replicas',
          'duplicate_window', 'sources', 'mirror', 'first_seq', 'allow_direct', 'allow_msg_ttl', 'subject_transform',
          'republish', 'stream_name', 'config', 'durable_name', 'ack_policy', 'deliver_policy', 'opt_start_seq',
          'opt_start_time', 'filter_subject', 'filter_subjects', 'max_deliver', 'backoff', 'ack_wait', 'max_ack_pending',
          'deliver_subject', 'pause_until', 'seq', 'keep', 'filter', 'last_by_subj', 'next_by_subj', 'batch', 'expires',
          'no_wait', 'offset', 'subject', 'subjects_filter', 'deleted_details', 'min_last_seq', 'multi_last', 'no_erase',
          'idle_heartbeat', 'max_bytes', 'metadata', 'inactive_threshold', 'priority_groups']
json_values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                          st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), kids, max_size=5)),
                           max_leaves=12)
bodies = st.one_of(st.just(b''), st.binary(max_size=64),
                   json_values.map(lambda v: json.dumps(v).encode()),
                   st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6).map(lambda v: json.dumps(v).encode()))
requests = st.tuples(st.sampled_from(sorted(ROUTES)), names, names, bodies)


def api_case(server, req):
    verb, stream, consumer, body = req
    raw = Raw(server.port); raw.send(b'SUB _f.> 1\r\n')
    subject = f'$JS.API.{verb}'
    if verb != 'INFO' and verb not in ('STREAM.NAMES', 'STREAM.LIST', 'STREAM.TEMPLATE.NAMES'): subject += f'.{stream}'   # (names take no token)
    if verb.startswith('CONSUMER.') and verb not in ('CONSUMER.NAMES', 'CONSUMER.LIST', 'CONSUMER.CREATE'): subject += f'.{consumer}'
    subject = ''.join(ch for ch in subject if ch.isprintable() and not ch.isspace())   # a space would split the PUB line
    got = api(raw, subject, body, '_f.1')
    assert len(got) == 1, f'no reply to {subject} {body[:200]!r}'
    status, _ = header_status(got[0].data[:got[0].hdr_len])
    if status == 503:                                       # no responders: as the reference, for an empty token
        assert subject.endswith('.') or '..' in subject, f'no responders for {subject}'
    else: json.loads(got[0].payload)                        # an API reply is always a JSON document
    more, _ = raw.read(0.05)
    assert b'MSG _f.1' not in more, f'two replies to {subject}'
    raw.close()


@settings(max_examples=QUICK, **COMMON)
@given(requests)
def test_api_requests_quick(server, req):
    api_case(server, req)


@pytest.mark.soak
@settings(max_examples=SOAK, **COMMON)
@given(requests)
def test_api_requests_soak(server, req):
    api_case(server, req)


# ---------------------------------------------------------------------------------------------- the core protocol

verbs = st.sampled_from([b'PUB', b'HPUB', b'SUB', b'UNSUB', b'PING', b'PONG', b'CONNECT', b'INFO', b'+OK', b'-ERR', b'pub', b'XYZ'])
args = st.lists(st.one_of(st.binary(max_size=12), st.integers(-5, 2**40).map(lambda i: str(i).encode()),
                          st.sampled_from([b'foo', b'$JS.API.INFO', b'_INBOX.x', b'*', b'>', b'a..b', b'\xff'])), max_size=5)
lines = st.tuples(verbs, args, st.binary(max_size=40)).map(lambda t: b' '.join([t[0]] + t[1]) + b'\r\n' + t[2] + b'\r\n')
streams = st.lists(lines, min_size=1, max_size=8).map(b''.join)


def protocol_case(server, data):
    s = socket.create_connection(('127.0.0.1', server.port), timeout=5); s.recv(4096)
    try:
        s.sendall(b'CONNECT {"verbose":false,"headers":true}\r\n' + data)
        time.sleep(0.01)
    except OSError: pass                                       # the server may close on bad input: that is fine
    finally: s.close()
    r = Raw(server.port); r.send(b'PING\r\n')
    assert b'PONG' in r.until(b'PONG', 5), 'the server stopped answering after a bad connection'
    r.close()


@settings(max_examples=QUICK, **COMMON)
@given(streams)
def test_protocol_quick(server, data):
    protocol_case(server, data)


@pytest.mark.soak
@settings(max_examples=SOAK, **COMMON)
@given(streams)
def test_protocol_soak(server, data):
    protocol_case(server, data)


def test_still_healthy_afterwards(server):
    "After all of the above (run in this order in the module), timers run and clients are served."
    healthy(server.port)
