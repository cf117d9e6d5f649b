"""Mirrors and sources in one server, against jsnb and the reference."""
import asyncio, json
import pytest
import nats

pytestmark = pytest.mark.reference


async def settle(js, name, want, timeout=10):
    "Wait until stream `name` holds `want` messages (copying is asynchronous in the reference)."
    for _ in range(int(timeout / 0.1)):
        si = await js.stream_info(name)
        if si.state.messages == want: return si
        await asyncio.sleep(0.1)
    return await js.stream_info(name)


async def msgs(js, name):
    si = await js.stream_info(name)
    out = []
    for seq in range(si.state.first_seq, si.state.last_seq + 1):
        try: m = await js.get_msg(name, seq)
        except nats.js.errors.NotFoundError: continue
        hdrs = dict(m.headers or {})
        if 'Nats-Stream-Source' in hdrs:                      # the last token hashes the upstream's creation time
            parts = hdrs['Nats-Stream-Source'].split(' ')
            assert len(parts) == 6 and len(parts[5]) == 8 and parts[5].isalnum(), parts
            hdrs['Nats-Stream-Source'] = ' '.join(parts[:5])
        out.append((m.seq, m.subject, m.data, hdrs))
    return out


async def scenario(s, restart):
    nc = await nats.connect(s.url); js = nc.jetstream()
    await js.add_stream(name='ORDERS', subjects=['ORDERS.*'])
    await js.add_stream(name='OTHER', subjects=['other.*'])
    for i in range(5): await js.publish('ORDERS.a' if i % 2 else 'ORDERS.b', b'o%d' % i)
    await js.publish('other.x', b'x1'); await js.publish('other.y', b'y1')
    await js.delete_msg('ORDERS', 2)
    await nc.request('$JS.API.STREAM.CREATE.M', json.dumps({'name': 'M', 'mirror': {'name': 'ORDERS'}}).encode(), timeout=5)
    await nc.request('$JS.API.STREAM.CREATE.MF', json.dumps({'name': 'MF', 'mirror': {'name': 'ORDERS', 'filter_subject': 'ORDERS.b'}}).encode(), timeout=5)
    await nc.request('$JS.API.STREAM.CREATE.AGG', json.dumps({'name': 'AGG', 'sources': [
        {'name': 'ORDERS'}, {'name': 'OTHER', 'filter_subject': 'other.x'}]}).encode(), timeout=5)
    await nc.request('$JS.API.STREAM.CREATE.MS', json.dumps({'name': 'MS', 'mirror': {'name': 'ORDERS', 'opt_start_seq': 4}}).encode(), timeout=5)
    out = {}
    out['M'] = (await settle(js, 'M', 4)).state.messages
    out['MF'] = (await settle(js, 'MF', 3)).state.messages
    out['AGG'] = (await settle(js, 'AGG', 5)).state.messages
    out['MS'] = (await settle(js, 'MS', 2)).state.messages
    for i in range(3): await js.publish('ORDERS.c', b'n%d' % i)
    out['M2'] = (await settle(js, 'M', 7)).state.messages
    out['AGG2'] = (await settle(js, 'AGG', 8)).state.messages
    if restart:
        await nc.close()
        await asyncio.get_running_loop().run_in_executor(None, s.restart)
        nc = await nats.connect(s.url); js = nc.jetstream()
        await js.publish('ORDERS.c', b'after restart')
        out['M3'] = (await settle(js, 'M', 8)).state.messages
        out['AGG3'] = (await settle(js, 'AGG', 9)).state.messages
        out['MS3'] = (await settle(js, 'MS', 6)).state.messages      # every mirror catches up before it is read
    for name in ('M', 'MF', 'AGG', 'MS'):
        out[name + ' msgs'] = await msgs(js, name)
        si = await js.stream_info(name)
        out[name + ' state'] = (si.state.first_seq, si.state.last_seq, si.state.num_deleted)
        raw = json.loads((await nc.request(f'$JS.API.STREAM.INFO.{name}', b'', timeout=5)).data)
        blocks = [raw['mirror']] if 'mirror' in raw else raw.get('sources', [])
        blocks = sorted(blocks, key=lambda b: b['name'])               # the reference lists sources in no fixed order
        out[name + ' info'] = [{k: v for k, v in b.items() if k != 'active'} for b in blocks] + [sorted(raw)]
        if name == 'AGG':                                               # sources interleave; each keeps its order
            got = out.pop(name + ' msgs')
            out[name + ' per source'] = {src: [m[1:] for m in got if m[3]['Nats-Stream-Source'].split(' ')[0] == src]
                                         for src in ('ORDERS', 'OTHER')}
    up = {m[0]: m for m in await msgs(js, 'ORDERS')}
    out['mirror keeps sequences'] = all(up.get(m[0], (None,) * 4)[1:3] == m[1:3] for m in out['M msgs'])
    await nc.close()
    return out


@pytest.mark.parametrize('restart', [False, True])
async def test_mirrors_and_sources(start_server, restart):
    results = {}
    for kind in ('nats-server', 'jsnb'):
        results[kind] = await scenario(start_server(kind, '-js'), restart)
    ref, ours = results['nats-server'], results['jsnb']
    assert ref['mirror keeps sequences']
    for k in ref: assert ours[k] == ref[k], f'{k}:\n jsnb: {ours[k]}\n  ref: {ref[k]}'


async def test_transforms_start_time_and_mirror_direct(start_server):
    "Sources with subject transforms and a start time; a mirror with `mirror_direct` answering its upstream's Direct Gets."
    results = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js')
        nc = await nats.connect(s.url); js = nc.jetstream(); out = {}
        await js.add_stream(name='UP', subjects=['up.*'], allow_direct=True)
        for i in range(3): await js.publish('up.a', b'early %d' % i)
        await asyncio.sleep(0.05)
        for i in range(2): await js.publish('up.b', b'late %d' % i)
        raw = json.loads((await nc.request('$JS.API.STREAM.MSG.GET.UP', b'{"seq": 4}', timeout=5)).data)
        mark = raw['message']['time']                     # the time of the first late message
        t = json.dumps({'name': 'TR', 'sources': [{'name': 'UP', 'subject_transforms': [{'src': 'up.*', 'dest': 'copied.$1'}]}]})
        out['tr create'] = json.loads((await nc.request('$JS.API.STREAM.CREATE.TR', t.encode(), timeout=5)).data).get('error')
        st = json.dumps({'name': 'ST', 'sources': [{'name': 'UP', 'opt_start_time': mark}]})
        out['st create'] = json.loads((await nc.request('$JS.API.STREAM.CREATE.ST', st.encode(), timeout=5)).data).get('error')
        md = json.dumps({'name': 'MD', 'mirror': {'name': 'UP'}, 'mirror_direct': True, 'allow_direct': True})
        out['md create'] = json.loads((await nc.request('$JS.API.STREAM.CREATE.MD', md.encode(), timeout=5)).data).get('error')
        await settle(js, 'TR', 5); await settle(js, 'ST', 2); await settle(js, 'MD', 5)
        out['counts'] = [(await js.stream_info(n)).state.messages for n in ('TR', 'ST', 'MD')]
        out['TR'] = [(m[1], m[2]) for m in await msgs(js, 'TR')]
        out['ST'] = [(m[1], m[2]) for m in await msgs(js, 'ST')]
        await js.delete_stream('UP')                      # only the mirror can answer now
        r = await nc.request('$JS.API.DIRECT.GET.UP', b'{"seq": 4}', timeout=5)
        out['direct via mirror'] = (r.data, (r.headers or {}).get('Nats-Sequence'), (r.headers or {}).get('Nats-Subject'))
        results[kind] = out
        await nc.close()
    assert results['jsnb'] == results['nats-server'], results


async def configs(s) -> dict:
    "The config returned for mirrors and sources created with and without Direct Get settings."
    nc = await nats.connect(s.url)
    async def api(subj, body):
        r = await nc.request(subj, json.dumps(body).encode(), timeout=5); return json.loads(r.data)
    await api('$JS.API.STREAM.CREATE.O', {'name': 'O', 'subjects': ['o.>']})
    await api('$JS.API.STREAM.CREATE.OD', {'name': 'OD', 'subjects': ['od.>'], 'allow_direct': True})
    out = {}
    for cfg in [{'name': 'M1', 'mirror': {'name': 'O'}, 'allow_direct': True},
                {'name': 'M2', 'mirror': {'name': 'O'}},
                {'name': 'M3', 'mirror': {'name': 'O'}, 'mirror_direct': True},
                {'name': 'M4', 'mirror': {'name': 'OD'}},
                {'name': 'M5', 'mirror': {'name': 'OD'}, 'allow_direct': True, 'mirror_direct': False},
                {'name': 'M6', 'mirror': {'name': 'ABSENT'}, 'mirror_direct': True},
                {'name': 'S1', 'sources': [{'name': 'O'}], 'allow_direct': True},
                {'name': 'S2', 'sources': [{'name': 'O', 'filter_subject': 'o.a'}, {'name': 'OD'}], 'subjects': ['s2']}]:
        r = await api(f'$JS.API.STREAM.CREATE.{cfg["name"]}', cfg)
        out[cfg['name']] = r.get('config', r.get('error'))
    r = await api('$JS.API.STREAM.UPDATE.M2', {'name': 'M2', 'mirror': {'name': 'O'}, 'mirror_direct': True})
    out['M2 updated'] = r.get('config', r.get('error'))
    await nc.close()
    for c in out.values(): c.pop('created', None)
    return out


async def test_mirror_and_source_configs_match_the_reference(start_server):
    "Every field of the returned config, defaults included; a mirror's `mirror_direct` follows its origin."
    ref, ours = [await configs(start_server(kind, '-js')) for kind in ('nats-server', 'jsnb')]
    assert ours == ref
    assert [ref[n]['mirror_direct'] for n in ('M1', 'M3', 'M4', 'M5', 'M6')] == [False, False, True, True, True]
