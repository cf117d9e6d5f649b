"""A stream's bounded ingest queue (`jetstream { max_buffered_msgs, max_buffered_size }`), against jsnb and the reference.

A publish that finds the queue full is answered `429 Too Many Requests` with the error 10167 and not
stored. The size bound is exact on both servers (a message counts its subject, reply subject,
headers and payload, and one larger than the bound is refused however empty the queue is); the
messages are sent one at a time, so each finds the queue empty. The bound on the number of messages
depends on how fast the queue drains, so a burst is checked for what both servers guarantee."""
import asyncio, json
import pytest
import nats

pytestmark = pytest.mark.reference

CONFIG = 'jetstream { max_buffered_size: 200, max_buffered_msgs: 3 }\n'


async def _answers(nc, sends, timeout=10, wait=False):
    """Publish each `(subject, payload, headers)` with its own reply subject `r.NN` (`wait`: each once the one before is
    answered); the status and body of each answer, in order."""
    got = {}
    done = asyncio.Event()
    async def cb(m):
        got[m.subject] = ((m.headers or {}).get('Status'), json.loads(m.data))
        if len(got) == len(sends): done.set()
    sub = await nc.subscribe('r.*', cb=cb)
    for i, (subject, data, hdrs) in enumerate(sends):
        await nc.publish(subject, data, reply=f'r.{i:02d}', headers=hdrs)
        if wait:
            await nc.flush()
            for _ in range(500):
                if f'r.{i:02d}' in got: break
                await asyncio.sleep(0.01)
    await asyncio.wait_for(done.wait(), timeout)
    await sub.unsubscribe()
    return [got[f'r.{i:02d}'] for i in range(len(sends))]


def _blank(a):
    status, body = a
    return status, {k: v for k, v in body.items() if k != 'domain'}


async def _scenario(nc):
    js = nc.jetstream()
    out = []
    for cfg in (dict(name='BULK', subjects=['q.a']),                                     # the plain path (an inbox per read)
                dict(name='LIMITED', subjects=['q.b'], max_msgs=10, discard='new'),      # message by message
                dict(name='MEM', subjects=['q.c'], storage='memory')):
        await js.add_stream(**cfg)
        subj = cfg['subjects'][0]
        # subject (3) + reply (4) + payload: 200 bytes fit, 201 do not; headers count too
        sends = [(subj, b'x' * 193, None), (subj, b'x' * 194, None), (subj, b'x' * 10, None),
                 (subj, b'x' * 100, {'A': 'b' * 60}), (subj, b'x' * 100, {'A': 'b' * 120}), (subj, b'', None)]
        out.append((cfg['name'], [_blank(a) for a in await _answers(nc, sends, wait=True)]))
        info = await js.stream_info(cfg['name'])
        out.append((cfg['name'], info.state.messages, info.state.last_seq))
    return out


async def test_size_bound_is_exact(start_server):
    runs = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js', config=CONFIG)
        nc = await asyncio.wait_for(nats.connect(s.url), 15)
        try: runs[kind] = await _scenario(nc)
        finally: await nc.close()
    assert runs['jsnb'] == runs['nats-server']
    refused = [a for _, answers in runs['jsnb'][::2] for a in answers if a[0]]
    assert refused and all(a == ('429', {'error': {'code': 429, 'err_code': 10167, 'description': 'too many requests'},
                                         'stream': a[1]['stream'], 'seq': 0}) for a in refused)


@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
async def test_burst_beyond_the_count_bound(start_server, kind):
    "500 small publishes in one write: some are refused with 429, and what was acknowledged is exactly what the stream holds."
    s = start_server(kind, '-js', config='jetstream { max_buffered_msgs: 2 }\n')
    nc = await asyncio.wait_for(nats.connect(s.url), 15)
    try:
        await nc.jetstream().add_stream(name='B', subjects=['q.a'])
        answers = await _answers(nc, [('q.a', b'y', None)] * 500, timeout=30)
        ok = [b for st, b in answers if st is None]
        refused = [b for st, b in answers if st == '429']
        assert len(ok) + len(refused) == 500 and refused and len(ok) >= 2
        assert sorted(b['seq'] for b in ok) == list(range(1, len(ok) + 1))
        assert {json.dumps(b, sort_keys=True) for b in refused} == {json.dumps(
            {'error': {'code': 429, 'err_code': 10167, 'description': 'too many requests'}, 'stream': 'B', 'seq': 0}, sort_keys=True)}
        assert (await nc.jetstream().stream_info('B')).state.messages == len(ok)
    finally: await nc.close()
    assert any('Dropping messages due to excessive stream ingest rate' in l for l in s.log_text().splitlines())
