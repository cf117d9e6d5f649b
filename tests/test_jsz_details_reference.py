"""`/jsz` with the reference's detail parameters (`accounts`, `acc`, `streams`, `consumers`, `config`, `offset`, `limit`,
`leader-only`, `raft`, `stream-leader-only`): the same accounts, streams and consumers, with the same fields and values
(times, ids and the server's name aside), and the same refusals, as nats-server 2.15.1 gives."""
import asyncio, time
import pytest
import nats
from conftest import ServerProc
from jsclusters import free_ports
from test_healthz_reference import get

pytestmark = pytest.mark.reference

VOLATILE = {'now', 'server_id', 'created', 'ts', 'first_ts', 'last_ts', 'last_active', 'store_dir', 'max_memory', 'max_storage',
            'leader', 'active'}


def normal(doc, key=''):
    """`doc` with what differs between two runs (times, ids, the server's name) blanked, and the streams in name order (the
    reference lists them in its map's order). An account's API count is left out: the reference counts its mirrors'
    internal consumer requests too."""
    if isinstance(doc, dict):
        return {k: '<x>' if k in VOLATILE and not isinstance(v, dict) else normal(v, k) for k, v in doc.items()
                if not (key == 'api' and k == 'total')}
    if isinstance(doc, list):
        out = [normal(x) for x in doc]
        return sorted(out, key=lambda x: x['name']) if key in ('stream_detail', 'consumer_detail') else out
    return doc


def diff(a, b, path='') -> list:
    "Where `a` and `b` differ: (path, a's value, b's value)."
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in diff(a.get(k, '<absent>'), b.get(k, '<absent>'), f'{path}.{k}')]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f'{path}[{i}]')]
    return [] if a == b else [(path, a, b)]


QUERIES = ['?accounts=true', '?streams=true', '?streams=true&consumers=true&config=true', '?consumers=1', '?acc=%24G',
           '?acc=%24G&streams=true&config=true', '?acc=nope&streams=1', '?accounts=true&limit=1&offset=1&streams=true',
           '?accounts=true&limit=1', '?accounts=true&offset=-4', '?streams=foo', '?offset=x', '?limit=1.5', '?leader-only=true',
           '?consumers=true&raft=true', '?streams=true&stream-leader-only=true', '?direct-consumers=true&consumers=true']
SAME_BUT = {'?direct-consumers=true&consumers=true'}   # the reference lists its mirrors' internal consumers as direct consumers; a
                                                       # jsnb mirror reads its origin without a consumer, so it has none to list
KEYS = ('streams', 'consumers', 'messages', 'bytes', 'account_details', 'streams_leader', 'consumers_leader', 'total', 'disabled')


async def _setup(url: str):
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name='S', subjects=['s.>'])
    await js.add_stream(name='T', subjects=['t.>'], storage='memory', max_msgs=10)
    for i in range(3): await js.publish('s.a', b'x%d' % i)
    await js.add_consumer('S', durable_name='C', ack_policy='explicit')
    await js.add_consumer('S', durable_name='P', deliver_subject='push.p', ack_policy='none')
    await js.add_stream(name='M', mirror={'name': 'S'})
    await nc.close()


def _answers(kind: str, tmp_path, js: bool = True) -> dict:
    http, = free_ports(1)
    s = ServerProc(kind, (['-js', '-sd', str(tmp_path / kind)] if js else []) + ['-m', str(http)]).start()
    try:
        if js:
            asyncio.run(_setup(s.url))
            for _ in range(100):                        # the mirror has copied (counting no API request)
                if get(http, '/jsz')[1]['messages'] == 6: break
                time.sleep(0.05)
        out = {}
        for q in QUERIES:
            st, body = get(http, '/jsz' + q)
            out[q] = (st, {k: normal(body[k], k) for k in KEYS if k in body} if isinstance(body, dict) else body)
        return out
    finally: s.stop()


@pytest.mark.parametrize('js', [True, False], ids=['jetstream', 'no-jetstream'])
def test_jsz_details_match_reference(tmp_path, js):
    ref, ours = _answers('nats-server', tmp_path, js), _answers('jsnb', tmp_path, js)
    assert {q: diff(ours[q], ref[q]) for q in QUERIES if ours[q] != ref[q] and q not in SAME_BUT} == {}
    if js:
        assert ours['?direct-consumers=true&consumers=true'] == ours['?consumers=1']
        direct = ref['?direct-consumers=true&consumers=true'][1]['account_details'][0]['stream_detail'][1]['direct_consumer_detail']
        assert [c['name'].startswith('JS_MIRROR_') for c in direct] == [True]
    if js:
        acc = ref['?streams=true&consumers=true&config=true'][1]['account_details'][0]
        assert [s['name'] for s in acc['stream_detail']] == ['M', 'S', 'T']
        assert [c['name'] for c in acc['stream_detail'][1]['consumer_detail']] == ['C', 'P']


ACCOUNTS = ('accounts { A: { jetstream: { max_mem: 1M, max_file: 10M }, users: [{user: a, password: a}] },\n'
            '           B: { users: [{user: b, password: b}] }, C: { jetstream: enabled, users: [{user: c, password: c}] } }\n')
ACCOUNT_QUERIES = ['/jsz?accounts=true&streams=true&config=true', '/jsz?acc=A&streams=true', '/jsz?acc=B&streams=true',
                   '/jsz?accounts=true&offset=1&limit=1', '/healthz', '/healthz?account=A&stream=S', '/healthz?account=B',
                   '/healthz?account=C', '/healthz?account=A&stream=S&consumer=X&details=true']


def test_accounts_with_jetstream_match_reference(tmp_path):
    "With accounts (A with limits, B without JetStream, C with it and no stream): each account's detail and `/healthz` as the reference's."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        http, = free_ports(1)
        s = ServerProc(kind, ['-js', '-sd', str(tmp_path / kind), '-m', str(http)], ACCOUNTS).start()
        async def setup():
            nc = await nats.connect(f'nats://a:a@127.0.0.1:{s.port}')
            js = nc.jetstream()
            await js.add_stream(name='S', subjects=['s.>'])
            await js.publish('s.x', b'1')
            await nc.close()
        try:
            asyncio.run(setup())
            got = {q: get(http, q) for q in ACCOUNT_QUERIES}
            out[kind] = {q: (st, {k: normal(b[k], k) for k in KEYS if k in b} if q.startswith('/jsz') else b) for q, (st, b) in got.items()}
        finally: s.stop()
    assert {q: diff(out['jsnb'][q], out['nats-server'][q]) for q in ACCOUNT_QUERIES if out['jsnb'][q] != out['nats-server'][q]} == {}
    assert [a['name'] for a in out['nats-server'][ACCOUNT_QUERIES[0]][1]['account_details']] == ['A', 'C']
