"""Stream snapshots and restores (`$JS.API.STREAM.SNAPSHOT` / `RESTORE`), against jsnb and the reference.

The client side is what `nats stream backup` and `nats stream restore` do, written for nats-py
(which has no helper for them): subscribe to an inbox, acknowledge each chunk, collect the bytes
until the empty end message; for a restore, send the bytes as requests and an empty message last.
Every scenario runs against both servers and the records are compared after blanking per-run
values; snapshots are also restored across the two servers in both directions."""
import asyncio, json, os, re, time
import pytest
import nats

from jsdiff import blank
from jsnb.js.archive import S2Reader, ArchiveReader, s2_frames, archive_entry, ARCHIVE_MAGIC

pytestmark = pytest.mark.reference

V1_FIXTURE = '/work/ref/nats-server/test/configs/jetstream/restore_bad_stream'


async def connect(s): return await asyncio.wait_for(nats.connect(s.url), 10)


async def api(nc, subject, body=None):
    data = b'' if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    return json.loads((await nc.request(subject, data, timeout=5)).data)


class Chunks:
    "The messages a snapshot sends to a deliver subject, as received."
    def __init__(self): self.msgs = []

    @property
    def data(self): return b''.join(m.data for m in self.msgs)


async def backup(nc, stream, ack=True, **opts):
    "Snapshot `stream`: (reply, Chunks); every chunk with a reply subject is acknowledged when `ack`."
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    reply = await api(nc, f'$JS.API.STREAM.SNAPSHOT.{stream}', dict(deliver_subject=inbox, **opts))
    got = Chunks()
    if 'error' in reply: return reply, got
    while True:
        m = await sub.next_msg(timeout=15)
        got.msgs.append(m)
        if m.reply and ack: await nc.publish(m.reply, b'')
        if not m.data: break
    await sub.unsubscribe()
    return reply, got


async def restore(nc, config, state, data, chunk=8192, name=None):
    "Restore: (the request's reply, the final reply or None)."
    name = name if name is not None else config['name']
    r = await api(nc, f'$JS.API.STREAM.RESTORE.{name}', dict(config=config, state=state))
    if 'error' in r: return r, None
    for i in range(0, len(data), chunk):
        a = await nc.request(r['deliver_subject'], data[i:i + chunk], timeout=5)
        assert a.data == b'', a.data
    return r, json.loads((await nc.request(r['deliver_subject'], b'', timeout=5)).data)


def entries(data: bytes) -> list[tuple]:
    "The archive entries of a snapshot's bytes."
    return ArchiveReader().feed(S2Reader().feed(data))


def readable(es):
    "Archive entries with per-run values blanked: JSON documents decoded, message times dropped."
    out = []
    for name, ts, seq, hs, ps, body in es:
        if name == b'state.json' or name.startswith(b'consumers/'):
            doc = json.loads(body)
            st = doc.get('state') or {}
            for k, p in st.get('pending', {}).items():
                p['Timestamp'] = '<v>'
                # a redelivered message: the reference keeps its first delivery sequence, jsnb's consumers the latest
                if k in (st.get('redelivered') or {}): p['Sequence'] = '<redelivered>'
            out.append((name.decode(), blank(doc)))
        else: out.append((name.decode(), seq, body[:hs].decode(), body[hs:].decode()))
    return out


async def populate(nc):
    "A stream with headers, a deleted message, a gap at the end, and three consumers in different states."
    js = nc.jetstream()
    await js.add_stream(name='ORDERS', subjects=['orders.*'])
    for i in range(1, 41):
        await js.publish(f'orders.{("new", "paid")[i % 2]}', f'order {i}'.encode(),
                         headers={'Nats-Msg-Id': f'id-{i}', 'X-Kind': 'test'} if i % 5 == 0 else None)
    await js.delete_msg('ORDERS', 7)
    await js.delete_msg('ORDERS', 40)                                  # the last sequence is deleted
    await js.add_consumer('ORDERS', durable_name='PAID', filter_subject='orders.paid', ack_policy='explicit')
    await js.add_consumer('ORDERS', durable_name='ALL', ack_policy='explicit', ack_wait=1.0)
    await js.add_consumer('ORDERS', durable_name='IDLE', ack_policy='explicit')
    paid = await js.pull_subscribe_bind('PAID', 'ORDERS')
    for m in await paid.fetch(4): await m.ack()
    al = await js.pull_subscribe_bind('ALL', 'ORDERS')
    ms = await al.fetch(3)
    await ms[1].ack()                                                  # 1 and 3 pending, 2 acknowledged
    await asyncio.sleep(1.3)
    ms = await al.fetch(1)                                             # message 1 again: redelivered once
    assert ms[0].metadata.num_delivered == 2
    return js


async def consumer_view(js, stream, name):
    ci = await js.consumer_info(stream, name)
    return dict(delivered=ci.delivered.stream_seq, dseq=ci.delivered.consumer_seq, floor=ci.ack_floor.stream_seq,
                fseq=ci.ack_floor.consumer_seq, ack_pending=ci.num_ack_pending, redelivered=ci.num_redelivered,
                pending=ci.num_pending)


async def stream_view(nc, stream):
    "The stream's state and every message, as a client reads them."
    si = await api(nc, f'$JS.API.STREAM.INFO.{stream}')
    st = blank(si['state'])
    msgs = []
    for seq in range(si['state']['first_seq'], si['state']['last_seq'] + 1):
        r = await api(nc, f'$JS.API.STREAM.MSG.GET.{stream}', {'seq': seq})
        msgs.append((seq, r['message']['subject'], r['message'].get('hdrs'), r['message'].get('data')) if 'message' in r else (seq, None))
    return st, msgs


# ---------------------------------------------------------------- request checks

async def test_snapshot_request_errors(start_server):
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        await nc.jetstream().add_stream(name='S', subjects=['s.>'])
        rec = []
        for body in [b'', b'{}', b' {} ', b'{"deliver_subject":"a.*"}', b'{"deliver_subject":"a.>"}', b'{"deliver_subject":"a b"}',
                     b'{"deliver_subject":"x","foo":1}', b'{"deliver_subject":1}', b'{"deliver_subject":"x"', b'[]',
                     b'{"deliver_subject":"x","chunk_size":"big"}']:
            rec.append((body, await api(nc, '$JS.API.STREAM.SNAPSHOT.S', body)))
        rec.append(('missing', await api(nc, '$JS.API.STREAM.SNAPSHOT.NOPE', b'{"deliver_subject":"x"}')))
        rec.append(('missing, empty', await api(nc, '$JS.API.STREAM.SNAPSHOT.NOPE', b'')))
        await nc.close()
        out[kind] = rec
    assert out['jsnb'] == out['nats-server']


async def test_restore_request_errors(start_server):
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        await nc.jetstream().add_stream(name='S', subjects=['s.>'])
        reply, got = await backup(nc, 'S')
        cfg, st = reply['config'], reply['state']
        rec = [('exists', await api(nc, '$JS.API.STREAM.RESTORE.S', dict(config=cfg, state=st))),
               ('empty', await api(nc, '$JS.API.STREAM.RESTORE.S', b'')),
               ('{}', await api(nc, '$JS.API.STREAM.RESTORE.S', b'{}')),
               ('mismatch', await api(nc, '$JS.API.STREAM.RESTORE.T', dict(config=cfg, state=st))),
               ('bad json', await api(nc, '$JS.API.STREAM.RESTORE.S', b'{"config":')),
               ('unknown field', await api(nc, '$JS.API.STREAM.RESTORE.S', dict(config=cfg, state=st, foo=1))),
               ('bad type', await api(nc, '$JS.API.STREAM.RESTORE.S', dict(config=dict(cfg, max_msgs='x'), state=st))),
               ('bad state type', await api(nc, '$JS.API.STREAM.RESTORE.S', dict(config=cfg, state=dict(st, messages=-1)))),
               ('bad config', await api(nc, '$JS.API.STREAM.RESTORE.U', dict(config=dict(cfg, name='U', max_age=-5), state=st))),
               ('path', await api(nc, '$JS.API.STREAM.RESTORE.a/b', dict(config=dict(cfg, name='a/b'), state=st)))]
        # an empty name takes the subject's: accepted, and then refused because the subjects overlap with S
        r, final = await restore(nc, dict(cfg, name=''), st, got.data, name='T')
        rec.append(('empty name', blank(dict(r, deliver_subject=r.get('deliver_subject', '')[:len('$JS.SNAPSHOT.RESTORE.T.')])), final))
        await nc.close()
        out[kind] = rec
    assert out['jsnb'] == out['nats-server']


# ---------------------------------------------------------------- snapshots

async def test_snapshot_chunks_and_end_marker(start_server):
    "Chunk sizes, acknowledgement subjects, the short last chunk without one, the end marker with and without 204."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.>'])
        x = 1
        for i in range(20):                                           # 20 KB that does not compress
            payload = bytearray(1000)
            for j in range(1000): x = (x * 1103515245 + 12345) & 0x7fffffff; payload[j] = x >> 16 & 0xff
            await js.publish(f's.{i % 3}', bytes(payload))
        rec = []
        for opts in (dict(chunk_size=1024), dict(chunk_size=10), dict(), dict(chunk_size=4096, window_size=1)):
            reply, got = await backup(nc, 'S', **opts)
            ack_re = re.compile(r'^\$JS\.SNAPSHOT\.ACK\.S\.[A-Za-z0-9]{22}\.(\d+)\.(\d+)$')
            shape = []
            for m in got.msgs:
                mm = ack_re.match(m.reply) if m.reply else None
                shape.append((bool(m.data), m.reply if not mm else ('ack', int(mm[1]), int(mm[2])), m.headers))
            sizes = [len(m.data) for m in got.msgs]
            es = entries(got.data)
            rec.append((opts, blank(reply), sizes[:-2] == [sizes[0]] * (len(sizes) - 2), shape[0], shape[-2:],
                        [e[2] for e in es], es[-1][:5]))
        await nc.close()
        out[kind] = rec
    # the reference compresses; jsnb does not: the number and size of chunks differ, not their form
    for r, o in zip(out['nats-server'], out['jsnb']):
        assert o[0] == r[0] and o[1] == r[1] and o[2] == r[2] and o[5] == r[5] and o[6] == r[6]
        assert o[3][0] == r[3][0] and (o[3][1] == '') == (r[3][1] == '') and o[3][2] == r[3][2]
        assert [(d, rp if isinstance(rp, str) else rp[0], h) for d, rp, h in o[4]] == [(d, rp if isinstance(rp, str) else rp[0], h) for d, rp, h in r[4]]
        if isinstance(r[3][1], tuple): assert o[3][1][1:] == r[3][1][1:]


async def test_snapshot_point_in_time_while_publishing(start_server):
    "The snapshot holds exactly the messages of the state in its reply, while a publisher goes on."
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.>'])
        for i in range(200): await js.publish('s.a', b'%d' % i)
        running = True
        async def publisher():
            i = 0
            while running: await js.publish('s.b', b'late %d' % i); i += 1
        task = asyncio.create_task(publisher())
        await asyncio.sleep(0.05)
        reply, got = await backup(nc, 'S', chunk_size=1024, window_size=2048)
        await asyncio.sleep(0.05)
        running = False; await task
        st = reply['state']
        es = entries(got.data)
        assert json.loads(es[0][5])['last_seq'] == st['last_seq']
        assert [e[2] for e in es[1:-1]] == list(range(1, st['last_seq'] + 1)), kind
        assert st['last_seq'] > 200 and (await js.stream_info('S')).state.last_seq > st['last_seq'], kind
        await js.delete_stream('S')
        _, final = await restore(nc, reply['config'], st, got.data)
        assert 'error' not in final, final
        assert {k: final['state'][k] for k in ('messages', 'bytes', 'first_seq', 'last_seq')} == {k: st[k] for k in ('messages', 'bytes', 'first_seq', 'last_seq')}
        await nc.close()


async def test_snapshot_contents_and_restore(start_server):
    "Same stream and consumers on both servers: same archive entries, and the same stream and consumers after restoring."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = await populate(nc)
        before = await stream_view(nc, 'ORDERS')
        cons_before = {n: await consumer_view(js, 'ORDERS', n) for n in ('PAID', 'ALL', 'IDLE')}
        reply, got = await backup(nc, 'ORDERS')
        es = readable(entries(got.data))
        es = [es[0]] + sorted(e for e in es if e[0].startswith('consumers/')) + [e for e in es[1:] if not e[0].startswith('consumers/')]
        _, final_exists = await restore(nc, reply['config'], reply['state'], got.data)
        await js.delete_stream('ORDERS')
        _, final = await restore(nc, reply['config'], reply['state'], got.data)
        after = await stream_view(nc, 'ORDERS')
        cons_after = {n: await consumer_view(js, 'ORDERS', n) for n in ('PAID', 'ALL', 'IDLE')}
        ack = await js.publish('orders.new', b'next')
        dup = json.loads((await nc.request('orders.new', b'again', headers={'Nats-Msg-Id': 'id-35'}, timeout=5)).data)
        out[kind] = dict(reply=blank(reply), entries=es, exists=final_exists, final=blank(final), before=before, after=after,
                         cons_before=cons_before, cons_after=cons_after, next_seq=ack.seq, duplicate=dup)
        await nc.close()
    ref, ours = out['nats-server'], out['jsnb']
    for k in ref: assert ours[k] == ref[k], k
    assert ref['after'] == ref['before']
    assert ref['next_seq'] == 41


async def test_restored_stream_survives_a_restart(start_server):
    "A restored file stream and its consumers are kept on disk: the same after a restart as before it."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = await populate(nc)
        reply, got = await backup(nc, 'ORDERS')
        await js.delete_stream('ORDERS')
        await restore(nc, reply['config'], reply['state'], got.data)
        views = [await stream_view(nc, 'ORDERS')]
        cons = [{n: await consumer_view(js, 'ORDERS', n) for n in ('PAID', 'IDLE')}]
        await nc.close()
        s.restart()
        nc = await connect(s)
        js = nc.jetstream()
        views.append(await stream_view(nc, 'ORDERS'))
        cons.append({n: await consumer_view(js, 'ORDERS', n) for n in ('PAID', 'IDLE')})
        assert views[0] == views[1] and cons[0] == cons[1], kind
        out[kind] = (views[1], cons[1], (await js.publish('orders.new', b'x')).seq)
        await nc.close()
    assert out['jsnb'] == out['nats-server']


async def test_restore_in_tiny_chunks(start_server):
    "A restore takes chunks of any size: 7 bytes at a time cuts every frame and every entry somewhere."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = await populate(nc)
        before = await stream_view(nc, 'ORDERS')
        reply, got = await backup(nc, 'ORDERS', chunk_size=1024)
        await js.delete_stream('ORDERS')
        _, final = await restore(nc, reply['config'], reply['state'], got.data, chunk=7)
        assert 'error' not in final, (kind, final)
        assert await stream_view(nc, 'ORDERS') == before, kind
        out[kind] = {n: await consumer_view(js, 'ORDERS', n) for n in ('PAID', 'IDLE')}
        await nc.close()
    assert out['jsnb'] == out['nats-server']


async def test_snapshot_without_consumers(start_server):
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = await populate(nc)
        reply, got = await backup(nc, 'ORDERS', no_consumers=True)
        es = readable(entries(got.data))
        await js.delete_stream('ORDERS')
        _, final = await restore(nc, reply['config'], reply['state'], got.data)
        names = await api(nc, '$JS.API.CONSUMER.NAMES.ORDERS')
        out[kind] = (blank(reply), es, blank(final), names)
        await nc.close()
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][1][0][1]['consumer_count'] == 0 and out['jsnb'][0]['state']['consumer_count'] == 3


async def test_cross_restore(start_server):
    "A snapshot of the reference restores into jsnb, and one of jsnb into the reference: the same stream and consumers."
    ref, ours = start_server('nats-server', '-js'), start_server('jsnb', '-js')
    rc, oc = await connect(ref), await connect(ours)
    try:
        views = {}
        for src, dst, label in ((rc, oc, 'ref->jsnb'), (oc, rc, 'jsnb->ref')):
            js = await populate(src)
            before = await stream_view(src, 'ORDERS')
            cons_before = {n: await consumer_view(js, 'ORDERS', n) for n in ('PAID', 'ALL', 'IDLE')}
            reply, got = await backup(src, 'ORDERS')
            await js.delete_stream('ORDERS')
            _, final = await restore(dst, reply['config'], reply['state'], got.data)
            assert 'error' not in final, (label, final)
            djs = dst.jetstream()
            after = await stream_view(dst, 'ORDERS')
            cons_after = {n: await consumer_view(djs, 'ORDERS', n) for n in ('PAID', 'ALL', 'IDLE')}
            assert after == before, label
            assert cons_after == cons_before, label
            assert (await djs.publish('orders.new', b'next')).seq == 41, label
            views[label] = (after, cons_after)
            await djs.delete_stream('ORDERS')
        assert views['ref->jsnb'] == views['jsnb->ref']
    finally:
        await rc.close(); await oc.close()


async def test_cross_restore_memory_and_ttl(start_server):
    "A memory stream with per-message TTLs, across both directions; a message whose TTL passed keeps only its sequence."
    ref, ours = start_server('nats-server', '-js'), start_server('jsnb', '-js')
    rc, oc = await connect(ref), await connect(ours)
    try:
        for src, dst in ((rc, oc), (oc, rc)):
            js = src.jetstream()
            await api(src, '$JS.API.STREAM.CREATE.M', dict(name='M', subjects=['m.>'], storage='memory', allow_msg_ttl=True))
            await js.publish('m.keep', b'live')
            await js.publish('m.gone', b'short', headers={'Nats-TTL': '1s'})
            await js.publish('m.long', b'long', headers={'Nats-TTL': '1h'})
            reply, got = await backup(src, 'M')
            await js.delete_stream('M')
            await asyncio.sleep(1.5)
            _, final = await restore(dst, reply['config'], reply['state'], got.data)
            assert 'error' not in final, final
            assert (final['state']['messages'], final['state']['last_seq']) == (2, 3), final['state']
            assert final['config']['storage'] == 'memory'
            assert (await dst.jetstream().publish('m.keep', b'x')).seq == 4
            await dst.jetstream().delete_stream('M')
    finally:
        await rc.close(); await oc.close()


async def test_restore_mirror_sources_sealed_ephemeral(start_server):
    "A mirror, a stream with a source, a sealed stream with an ephemeral push consumer: each snapshotted and restored."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        rec = []
        await js.add_stream(name='O', subjects=['o.>'])
        for i in range(5): await js.publish('o.x', b'%d' % i)
        await api(nc, '$JS.API.STREAM.CREATE.M', dict(name='M', mirror=dict(name='O')))
        await api(nc, '$JS.API.STREAM.CREATE.SRC', dict(name='SRC', subjects=['src.>'], sources=[dict(name='O')]))
        await asyncio.sleep(1.5)
        await api(nc, '$JS.API.STREAM.CREATE.Z', dict(name='Z', subjects=['z.>']))
        await js.publish('z.1', b'1')
        cfg = (await api(nc, '$JS.API.STREAM.INFO.Z'))['config']
        rec.append(('seal', blank(await api(nc, '$JS.API.STREAM.UPDATE.Z', dict(cfg, sealed=True))).get('error')))
        await api(nc, '$JS.API.CONSUMER.CREATE.Z.E', dict(stream_name='Z', config=dict(name='E', deliver_subject='dz', ack_policy='explicit')))
        for name in ('M', 'SRC', 'Z'):
            reply, got = await backup(nc, name)
            await js.delete_stream(name)
            r, final = await restore(nc, reply['config'], reply['state'], got.data)
            rec.append((name, r.get('error'), blank(final)))
            await js.publish('o.x', b'more')
            await asyncio.sleep(1.0)
            rec.append((name, 'after', blank((await api(nc, f'$JS.API.STREAM.INFO.{name}')).get('state'))))
        consumers = (await api(nc, '$JS.API.CONSUMER.LIST.Z'))['consumers']
        rec.append(('consumers of Z', [blank(c['config']) for c in consumers]))
        rec.append(('publish to sealed Z', (await api(nc, 'z.2', b'x')).get('error')))
        out[kind] = rec
        await nc.close()
    assert out['jsnb'] == out['nats-server']


# ---------------------------------------------------------------- flow control

async def test_snapshot_no_flow_response(start_server):
    "Chunks not acknowledged: the snapshot ends with 408 No Flow Response 5 s after the last chunk, and the advisory says so."
    out, took = {}, {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.>'])
        for i in range(20): await js.publish('s.x', os.urandom(1000))
        advs = await nc.subscribe('$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_COMPLETE.S')
        t0 = time.monotonic()
        reply, got = await backup(nc, 'S', ack=False, chunk_size=1024, window_size=2048)
        took[kind] = time.monotonic() - t0
        adv = json.loads((await advs.next_msg(timeout=5)).data)
        out[kind] = ([(len(m.data), bool(m.reply), m.headers) for m in got.msgs], adv['error'], sorted(adv))
        await nc.close()
    assert out['jsnb'] == out['nats-server']
    assert all(t > 4.5 for t in took.values()) and took['jsnb'] < 1.4 * took['nats-server'], took   # the 5 s wait, as long as the reference's
    assert out['jsnb'][0][-1][2] == {'Status': '408', 'Description': 'No Flow Response'}


async def test_snapshot_receiver_leaves(start_server):
    "The receiver unsubscribes midway: the snapshot ends, with the error `no interest` in the advisory."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.>'])
        for i in range(20): await js.publish('s.x', os.urandom(1000))
        advs = await nc.subscribe('$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_COMPLETE.S')
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await api(nc, '$JS.API.STREAM.SNAPSHOT.S', dict(deliver_subject=inbox, chunk_size=1024, window_size=1024))
        first = await sub.next_msg(timeout=5)
        await sub.unsubscribe(); await nc.flush()
        await nc.publish(first.reply, b'')
        adv = json.loads((await advs.next_msg(timeout=5)).data)
        out[kind] = (len(first.data), adv.get('error'))
        await nc.close()
    assert out['jsnb'] == out['nats-server'] == (1024, 'no interest')


async def test_snapshot_of_a_deleted_stream(start_server):
    "The stream is deleted during its snapshot: nothing more arrives, not even the end marker; the advisory says `no flow response`."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.>'])
        for i in range(100): await js.publish('s.x', os.urandom(1000))
        advs = await nc.subscribe('$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_COMPLETE.S')
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await api(nc, '$JS.API.STREAM.SNAPSHOT.S', dict(deliver_subject=inbox, chunk_size=1024, window_size=2048))
        first = await sub.next_msg(timeout=5)
        await sub.next_msg(timeout=5)
        await js.delete_stream('S')
        t0 = time.monotonic()
        await nc.publish(first.reply, b'')
        adv = json.loads((await advs.next_msg(timeout=9)).data)
        took = time.monotonic() - t0
        rest = []
        try:
            while True: rest.append((await sub.next_msg(timeout=0.5)).headers)
        except nats.errors.TimeoutError: pass
        out[kind] = (adv.get('error'), rest, took > 4)
        await nc.close()
    assert out['jsnb'] == out['nats-server'] == ('no flow response', [], True)      # not before the 5 s wait (9 s at most: a wait above)


async def test_snapshot_waits_for_receiver(start_server):
    "Nobody subscribed yet: the server waits (up to 2 s) for the deliver subject to have a subscriber."
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.>'])
        await js.publish('s.x', b'one')
        inbox = nc.new_inbox()
        await api(nc, '$JS.API.STREAM.SNAPSHOT.S', dict(deliver_subject=inbox))
        await asyncio.sleep(0.5)
        sub = await nc.subscribe(inbox)
        msgs = [await sub.next_msg(timeout=5), await sub.next_msg(timeout=5)]
        assert [bool(m.data) for m in msgs] == [True, False], kind
        assert msgs[1].headers is None, kind                          # one short chunk: the end marker has no header
        assert [e[2] for e in entries(msgs[0].data)] == [0, 1, 0], kind
        await nc.close()


# ---------------------------------------------------------------- restore failures

async def refusals(nc, cfg, st, data):
    "Restore damaged snapshots one after the other: the final replies, and which streams exist after each."
    js = nc.jetstream()
    half = entries(data)
    cut_archive = ARCHIVE_MAGIC + b''.join(archive_entry(n, t, q, b[:h], b[h:]) for n, t, q, h, p, b in half[:len(half) // 2])
    bad = bytearray(data); bad[len(bad) // 2] ^= 0xff
    cases = [('garbage', b'hello world, this is not a snapshot' * 50), ('crc', bytes(bad)), ('cut frame', data[:len(data) // 2]),
             ('no end entry', s2_frames(cut_archive)), ('empty archive', s2_frames(ARCHIVE_MAGIC)),
             ('no state', s2_frames(ARCHIVE_MAGIC + archive_entry(b'x.json', 0, 0, b'', b'{}'))),
             ('bad state', s2_frames(ARCHIVE_MAGIC + archive_entry(b'state.json', 0, 0, b'', b'{"messages":"x"}'))),
             ('snappy magic', b'\xff\x06\x00\x00sNaPpY' + s2_frames(ARCHIVE_MAGIC + archive_entry(b'state.json', 0, 0, b'', b'{"first_seq":1}') + archive_entry(b''), header=False)),
             ('wrong consumer', s2_frames(ARCHIVE_MAGIC + archive_entry(b'state.json', 0, 0, b'', b'{"first_seq":1,"consumer_count":1}') + archive_entry(b'foo', 0, 0, b'', b'{}'))),
             ('bad consumer state', s2_frames(ARCHIVE_MAGIC + archive_entry(b'state.json', 0, 0, b'', b'{"first_seq":1,"consumer_count":1}')
                 + archive_entry(b'consumers/C', 0, 0, b'', b'{"config":{"durable_name":"C","ack_policy":"explicit"},"state":{"delivered":{"consumer_seq":1,"stream_seq":1},"ack_floor":{"consumer_seq":2,"stream_seq":1}}}'))),
             ('out of order', s2_frames(ARCHIVE_MAGIC + archive_entry(b'state.json', 0, 0, b'', b'{"first_seq":1}') + archive_entry(b's.a', 1, 2, b'', b'x')
                 + archive_entry(b's.a', 1, 2, b'', b'y') + archive_entry(b''))),
             ('no sequence', s2_frames(ARCHIVE_MAGIC + archive_entry(b'state.json', 0, 0, b'', b'{"first_seq":1}') + archive_entry(b's.a', 5, 0, b'', b'x')))]
    rec = []
    for i, (label, d) in enumerate(cases):
        c = dict(cfg, name=f'R{i}')                     # a new name each time: the reference removes a deleted stream's files late
        _, final = await restore(nc, c, st, d)
        names = (await api(nc, '$JS.API.STREAM.NAMES'))['streams']
        info = await api(nc, f'$JS.API.STREAM.INFO.{c["name"]}')
        rec.append((label, final.get('error') or 'ok', names, blank(info.get('state'))))
        if names: await js.delete_stream(c['name'])
    return rec


async def test_restore_refusals(start_server):
    """Damaged and incomplete snapshots, the same bytes to both servers (made by each of them in turn): the reference's
    errors; a stream restored up to the damage stays, as with the reference."""
    servers = {kind: start_server(kind, '-js') for kind in ('nats-server', 'jsnb')}
    conns = {kind: await connect(s) for kind, s in servers.items()}
    try:
        made = {}
        for kind, nc in conns.items():
            js = nc.jetstream()
            await js.add_stream(name='S', subjects=['s.>'])
            for i in range(50): await js.publish(f's.{i % 3}', b'x' * 100)
            reply, got = await backup(nc, 'S')
            await js.delete_stream('S')
            made[kind] = (reply['config'], reply['state'], got.data)
        for maker, (cfg, st, data) in made.items():
            out = {kind: await refusals(nc, cfg, st, data) for kind, nc in conns.items()}
            diffs = [(r, o) for r, o in zip(out['nats-server'], out['jsnb']) if r != o]
            assert not diffs, (maker, diffs)
    finally:
        for nc in conns.values(): await nc.close()


async def test_restore_chunk_without_reply_and_stall(start_server):
    "A chunk without a reply subject ends the restore; so do 5 seconds without a chunk: the subject stops answering."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.>'])
        await js.publish('s.a', b'x')
        reply, got = await backup(nc, 'S')
        await js.delete_stream('S')
        rec = []
        r = await api(nc, '$JS.API.STREAM.RESTORE.S', dict(config=reply['config'], state=reply['state']))
        await nc.publish(r['deliver_subject'], got.data[:10]); await nc.flush()
        try: await nc.request(r['deliver_subject'], b'', timeout=1); rec.append('answered')
        except nats.errors.NoRespondersError: rec.append('no responders')
        rec.append((await api(nc, '$JS.API.STREAM.NAMES'))['streams'])
        r = await api(nc, '$JS.API.STREAM.RESTORE.S', dict(config=reply['config'], state=reply['state']))
        await nc.request(r['deliver_subject'], got.data[:10], timeout=2)
        await asyncio.sleep(6)
        try: await nc.request(r['deliver_subject'], got.data[10:], timeout=1); rec.append('answered')
        except nats.errors.NoRespondersError: rec.append('no responders')
        rec.append((await api(nc, '$JS.API.STREAM.NAMES'))['streams'])
        out[kind] = rec
        await nc.close()
    assert out['jsnb'] == out['nats-server'] == ['no responders', None, 'no responders', None]


async def test_restore_over_the_account_limit(start_server):
    "A snapshot larger than the server allows: 10047, on both."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        await js.add_stream(name='S', subjects=['s.>'])
        for i in range(30): await js.publish('s.a', b'x' * 10_000)
        reply, got = await backup(nc, 'S')
        await nc.close()
        small = start_server(kind, '-js', config='jetstream { max_file_store: 100KB }\n')
        nc = await connect(small)
        _, final = await restore(nc, reply['config'], reply['state'], got.data)
        names = (await api(nc, '$JS.API.STREAM.NAMES'))['streams']
        out[kind] = (final.get('error'), names)
        await nc.close()
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][0]['err_code'] == 10047


@pytest.mark.skipif(not os.path.isdir(V1_FIXTURE), reason='the reference source tree is not here')
async def test_older_format_is_refused_clearly(start_server):
    "A snapshot in the tar format of nats-server before 2.15: jsnb says it does not restore it (the reference unpacks it)."
    s = start_server('jsnb', '-js')
    nc = await connect(s)
    req = json.load(open(os.path.join(V1_FIXTURE, 'backup.json')))
    data = open(os.path.join(V1_FIXTURE, 'stream.tar.s2'), 'rb').read()
    assert S2Reader().feed(data)[257:262] == b'ustar'                  # the reference's S2 frames decode: it is a tar
    _, final = await restore(nc, req['config'], req['state'], data, chunk=1024)
    assert final['error']['err_code'] == 10062 and 'older format' in final['error']['description'], final
    assert (await api(nc, '$JS.API.STREAM.NAMES'))['streams'] is None
    await nc.close()


# ---------------------------------------------------------------- advisories

async def test_advisories(start_server):
    "SNAPSHOT_CREATE, SNAPSHOT_COMPLETE, RESTORE_CREATE, RESTORE_COMPLETE: same subjects, types and fields."
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await connect(s)
        js = nc.jetstream()
        got = []
        async def cb(m): got.append((m.subject, json.loads(m.data)))
        await nc.subscribe('$JS.EVENT.ADVISORY.STREAM.>', cb=cb)
        await nc.subscribe('$JS.EVENT.ADVISORY.CONSUMER.>', cb=cb)
        await js.add_stream(name='S', subjects=['s.>'])
        await js.add_consumer('S', durable_name='C', ack_policy='explicit')
        await js.publish('s.a', b'x')
        reply, data = await backup(nc, 'S')
        await js.delete_stream('S')
        await restore(nc, reply['config'], reply['state'], data.data)
        await asyncio.sleep(0.5)
        def shape(subject, d):
            b = blank(d)
            if 'end' in b: b['end'] = '<v>'
            if 'bytes' in b: b['bytes'] = '<v>' if d['bytes'] > 0 else 0       # the reference compresses
            b['client'] = sorted(d.get('client') or {})
            return subject, b
        out[kind] = sorted((shape(sj, d) for sj, d in got if 'SNAPSHOT' in sj or 'RESTORE' in sj or 'CREATED' in sj), key=repr)   # (the
        # reference sends a restore's CREATED and RESTORE_COMPLETE advisories in either order: it queues them internally)
        await nc.close()
    assert out['jsnb'] == out['nats-server']
