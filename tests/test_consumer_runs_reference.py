"""Runs of new messages a consumer sends at once, against nats-server.

jsnb here compiles its kernels at start (`JSNB_JIT_AT_START`), so a push consumer's or a pull request's run to
a plain subscription is written as frames by the consumer's kernel (`encode_run`); a subject that is not ASCII
makes its run go frame by frame. What a plain subscription receives (subject, reply subject with its timestamp
token blanked, headers, payload) and the consumer counters must be what nats-server gives."""
import asyncio, json
import pytest
import nats

pytestmark = pytest.mark.reference

HDR = {'K': 'v'}


async def api(nc, subject, body=None) -> dict:
    r = await nc.request(subject, b'' if body is None else json.dumps(body).encode(), timeout=5)
    return json.loads(r.data)


def shape(m) -> tuple:
    t = m.reply.split('.') if m.reply else []
    if len(t) == 9: t[7] = '<ts>'
    return '<inbox>' if m.subject.startswith('_INBOX.') else m.subject, '.'.join(t), dict(m.headers or {}), m.data


def counters(ci) -> dict:
    return dict(delivered={k: v for k, v in ci['delivered'].items() if k != 'last_active'},
                ack_floor={k: v for k, v in ci['ack_floor'].items() if k != 'last_active'}, num_ack_pending=ci['num_ack_pending'],
                num_pending=ci['num_pending'], num_waiting=ci['num_waiting'])


async def collect(nc, subject):
    got = []
    async def cb(m): got.append(m)
    return got, await nc.subscribe(subject, cb=cb)


async def pull(nc, stream: str, consumer: str, req: dict) -> list:
    "What one pull request `req` gets on its own inbox within half a second, as `shape`s."
    inbox = nc.new_inbox()
    got, sub = await collect(nc, inbox)
    await nc.publish(f'$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}', json.dumps(req).encode(), reply=inbox)
    await nc.flush(); await asyncio.sleep(0.5)
    await sub.unsubscribe()
    return [shape(m) for m in got]


async def until(pred, timeout=10):
    end = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < end:
        if pred(): return
        await asyncio.sleep(0.02)


async def scenario(nc, storage: str) -> dict:
    out = {}
    r = await api(nc, '$JS.API.STREAM.CREATE.RUNS', {'name': 'RUNS', 'subjects': ['runs.>'], 'storage': storage})
    assert 'error' not in r, r
    for i in range(60):
        subject = 'runs.é' if i == 45 else f'runs.{i % 4}'
        await nc.publish(subject, b'p%d' % i * (i % 7), headers=HDR if i % 3 == 0 else None)
    await nc.flush()
    # a push consumer without acks: every message, in runs
    got, _ = await collect(nc, 'dlv.none')
    await api(nc, '$JS.API.CONSUMER.CREATE.RUNS.NONE', {'stream_name': 'RUNS', 'config': {
        'durable_name': 'NONE', 'deliver_subject': 'dlv.none', 'ack_policy': 'none'}})
    await until(lambda: len(got) >= 60)
    out['push none'] = [shape(m) for m in got]
    out['push none info'] = counters(await api(nc, '$JS.API.CONSUMER.INFO.RUNS.NONE'))
    # a push consumer with explicit acks, held by max_ack_pending
    got, _ = await collect(nc, 'dlv.ack')
    await api(nc, '$JS.API.CONSUMER.CREATE.RUNS.ACK', {'stream_name': 'RUNS', 'config': {
        'durable_name': 'ACK', 'deliver_subject': 'dlv.ack', 'ack_policy': 'explicit', 'max_ack_pending': 25,
        'filter_subject': 'runs.*'}})
    await until(lambda: len(got) >= 25); await asyncio.sleep(0.2)
    out['push ack'] = [shape(m) for m in got]
    for m in got[:10]: await nc.publish(m.reply, b'')
    await nc.flush(); await until(lambda: len(got) >= 35); await asyncio.sleep(0.2)
    out['push ack more'] = [shape(m) for m in got[25:]]
    out['push ack info'] = counters(await api(nc, '$JS.API.CONSUMER.INFO.RUNS.ACK'))
    # pull requests: a batch, one cut by max_bytes, one whose first message is larger than max_bytes
    await api(nc, '$JS.API.CONSUMER.CREATE.RUNS.PULL', {'stream_name': 'RUNS', 'config': {
        'durable_name': 'PULL', 'ack_policy': 'explicit'}})
    for label, req in (('batch', {'batch': 20}), ('max_bytes', {'batch': 30, 'max_bytes': 200}),
                       ('too small', {'batch': 5, 'max_bytes': 3}), ('rest', {'batch': 40, 'no_wait': True})):
        out[f'pull {label}'] = await pull(nc, 'RUNS', 'PULL', req)
    out['pull info'] = counters(await api(nc, '$JS.API.CONSUMER.INFO.RUNS.PULL'))
    # a request that ends with its max_bytes in the middle of a run: the messages that fit, then the 409
    await api(nc, '$JS.API.STREAM.CREATE.CUT', {'name': 'CUT', 'subjects': ['cut.>'], 'storage': storage})
    for i in range(40): await nc.publish('cut.a', b'%020d' % i)
    await nc.flush()
    await api(nc, '$JS.API.CONSUMER.CREATE.CUT.P', {'stream_name': 'CUT', 'config': {'durable_name': 'P', 'ack_policy': 'explicit'}})
    for label, req in (('cut', {'batch': 30, 'max_bytes': 300}), ('cut again', {'batch': 30, 'max_bytes': 1000})):
        out[f'pull {label}'] = await pull(nc, 'CUT', 'P', req)
    out['pull cut info'] = counters(await api(nc, '$JS.API.CONSUMER.INFO.CUT.P'))
    return out


@pytest.mark.parametrize('storage', ['memory', 'file'])
async def test_consumer_runs(start_server, storage, monkeypatch):
    monkeypatch.setenv('JSNB_JIT_AT_START', '1')
    res = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await asyncio.wait_for(nats.connect(s.url), 15)
        try: res[kind] = await scenario(nc, storage)
        finally: await nc.close()
    ref, ours = res['nats-server'], res['jsnb']
    assert len(ref['push none']) == 60 and len(ref['push ack']) == 25 and len(ref['pull batch']) == 20
    assert ref['pull too small'][0][2].get('Status') == '409'
    assert len(ref['pull cut']) > 2 and ref['pull cut'][-1][2].get('Status') == '409'
    for k in ref: assert ours[k] == ref[k], f'{k}:\n jsnb: {ours[k]}\n  ref: {ref[k]}'
