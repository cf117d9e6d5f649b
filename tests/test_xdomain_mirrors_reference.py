"""Mirrors and sources across JetStream domains: a leaf node (domain LEAF) copies streams of its hub
(domain HUB) through `$JS.HUB.API`, as stock clients set them up (`mirror: {name, domain}`).
The same scenario runs on a jsnb pair and a reference pair and the outcomes are compared; mixed
pairs (one server of each) show that the consumer protocol between them is the reference's."""
import asyncio, base64, json, re
import pytest
import nats
from conftest import ServerProc

pytestmark = pytest.mark.reference

_LEAF_PORT = re.compile(r'Listening for leafnode connections on (\S+):(\d+)')


def start_pair(hub_kind, leaf_kind, tmp_path):
    "A hub with JetStream domain HUB and a leaf node with domain LEAF dialling it."
    hub = ServerProc(hub_kind, ['-a', '127.0.0.1'],
                     f'server_name: HUB\njetstream {{ domain: HUB, store_dir: "{tmp_path}/hub" }}\n'
                     'leafnodes { listen: "127.0.0.1:-1" }\n').start()
    port = int(_LEAF_PORT.search(hub.log_text()).group(2))
    leaf = ServerProc(leaf_kind, ['-a', '127.0.0.1'],
                      f'server_name: LEAF\njetstream {{ domain: LEAF, store_dir: "{tmp_path}/leaf" }}\n'
                      f'leafnodes {{ remotes: [ {{ url: "nats-leaf://127.0.0.1:{port}" }} ] }}\n').start()
    return hub, leaf


async def until(fn, timeout=10.0):
    "Poll `fn()` until it returns something true; return its last value."
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        v = await fn()
        if v or asyncio.get_running_loop().time() > deadline: return v
        await asyncio.sleep(0.1)


async def api(nc, subject, body=None):
    return json.loads((await nc.request(subject, json.dumps(body).encode() if body is not None else b'', timeout=5)).data)


def _norm_source(h: str) -> tuple[str, int]:
    "A `Nats-Stream-Source` header without the upstream's identity hash (which differs), and how many tokens it had."
    parts = h.split(' ')
    return ' '.join(parts[:5]), len(parts)


async def scenario(hub, leaf):
    out = {}
    nc = await nats.connect(hub.url)
    lnc = await until(lambda: _connect_when_linked(leaf.url))
    js = nc.jetstream()
    kv = await js.create_key_value(bucket='TEST', history=5)
    await kv.put('name', b'derek'); await kv.put('age', b'22'); await kv.put('v', b'v'); await kv.delete('v')
    await js.add_stream(name='ORDERS', subjects=['ORDERS.*'])
    for i in range(6): await js.publish(f'ORDERS.{"eu" if i % 2 else "us"}', b'o%d' % i)
    await js.delete_msg('ORDERS', 3)

    # the KV mirror as stock clients create it: `domain` becomes `external.api`
    r = await api(lnc, '$JS.API.STREAM.CREATE.KV_MIRROR', dict(
        name='KV_MIRROR', mirror=dict(name='KV_TEST', external=dict(api='$JS.HUB.API')), mirror_direct=True,
        allow_direct=True, max_msgs_per_subject=5, deny_delete=True, allow_rollup_hdrs=True))
    out['create'] = (r['config']['mirror'], r['config']['mirror_direct'])
    await api(lnc, '$JS.API.STREAM.CREATE.M', dict(name='M', mirror=dict(name='ORDERS', external=dict(api='$JS.HUB.API'))))
    await api(lnc, '$JS.API.STREAM.CREATE.AGG', dict(name='AGG', sources=[
        dict(name='ORDERS', filter_subject='ORDERS.eu', external=dict(api='$JS.HUB.API'))]))

    async def state(name, want):
        si = await api(lnc, f'$JS.API.STREAM.INFO.{name}')
        return si if si['state']['messages'] == want else None
    for name, want in (('KV_MIRROR', 4), ('M', 5), ('AGG', 3)):
        si = await until(lambda: state(name, want)) or await api(lnc, f'$JS.API.STREAM.INFO.{name}')
        st = si['state']
        up = si.get('mirror') or si['sources'][0]
        out[name] = (st['messages'], st['first_seq'], st['last_seq'], st.get('num_deleted', 0),
                     sorted(up), up['name'], up.get('external'), up['lag'], up['active'] >= 0)

    # the mirror keeps the upstream's sequences and times; the source adds its header
    m5 = await api(lnc, "$JS.API.STREAM.MSG.GET.M", dict(seq=5))
    assert "message" in m5, (m5, out)
    h5 = await api(nc, '$JS.API.STREAM.MSG.GET.ORDERS', dict(seq=5))
    out['same msg'] = (m5['message']['subject'], m5['message']['data'], m5['message']['time'] == h5['message']['time'])
    a1 = (await api(lnc, '$JS.API.STREAM.MSG.GET.AGG', dict(seq=1)))['message']
    src = re.search(r'Nats-Stream-Source: ([^\r]*)', base64.b64decode(a1['hdrs']).decode()).group(1)
    out['source hdr'] = (a1['data'], a1['subject'], _norm_source(src))

    # writes to the origin through the domain prefix ($JS.HUB.API.$KV...) reach the mirror
    ack = json.loads((await lnc.request('$JS.HUB.API.$KV.TEST.name', b'rip', timeout=5)).data)
    out['edit'] = ack
    await until(lambda: state('KV_MIRROR', 5))
    g = await lnc.request('$JS.API.DIRECT.GET.KV_MIRROR', json.dumps(dict(last_by_subj='$KV.TEST.name')).encode(), timeout=5)
    out['mirror get'] = (g.data, g.headers['Nats-Sequence'], g.headers['Nats-Stream'])
    for i in range(3): await js.publish('ORDERS.eu', b'late%d' % i)
    out['AGG later'] = (await until(lambda: state('AGG', 6)) or {}).get('state', {}).get('messages')

    # each side's JetStream answers its own clients: the leaf's `$JS.API` is the leaf's
    out['leaf streams'] = sorted((await api(lnc, '$JS.API.STREAM.NAMES'))['streams'])
    out['hub streams'] = sorted((await api(lnc, '$JS.HUB.API.STREAM.NAMES'))['streams'])
    await nc.close(); await lnc.close()
    return out


async def _connect_when_linked(url):
    "A client of the leaf once the hub's JetStream answers through the leaf node."
    nc = await nats.connect(url)
    try:
        await nc.request('$JS.HUB.API.INFO', b'', timeout=0.5)
        return nc
    except Exception:
        await nc.close()
        return None


def run_pair(hub_kind, leaf_kind, tmp_path):
    hub, leaf = start_pair(hub_kind, leaf_kind, tmp_path)
    try: return asyncio.run(scenario(hub, leaf))
    finally:
        leaf.stop(); hub.stop()


def test_cross_domain_mirrors_and_sources(tmp_path):
    ref = run_pair('nats-server', 'nats-server', tmp_path / 'ref')
    mine = run_pair('jsnb', 'jsnb', tmp_path / 'jsnb')
    assert ref['M'][0] == 5 and ref['AGG later'] == 6          # the scenario means what it says
    assert mine == ref


@pytest.mark.parametrize('hub_kind,leaf_kind', [('nats-server', 'jsnb'), ('jsnb', 'nats-server')])
def test_cross_domain_with_the_reference(tmp_path, hub_kind, leaf_kind):
    "A jsnb leaf mirrors a reference hub, and a reference leaf mirrors a jsnb hub, with the same outcome."
    ref = run_pair('nats-server', 'nats-server', tmp_path / 'ref')
    mixed = run_pair(hub_kind, leaf_kind, tmp_path / 'mixed')
    assert mixed == ref
