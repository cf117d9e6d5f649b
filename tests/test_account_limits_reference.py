"""Server-wide JetStream storage limits (`jetstream { max_memory_store, max_file_store }`), against jsnb and the reference.

Both servers start from the same config file; every scenario records a transcript of API replies
and pub acks through the client API only (no monitoring endpoints), and the transcripts must be
equal once per-run values are blanked."""
import asyncio, json
import pytest
import nats

pytestmark = pytest.mark.reference

CONFIG = 'jetstream { max_memory_store: 1MB, max_file_store: 2MB }\n'
MB = 1 << 20
from jsdiff import VOLATILE, blank, run_both as _run_both


class Transcript:
    def __init__(self, nc): self.nc, self.log = nc, []

    async def api(self, subject, body=None):
        data = b'' if body is None else json.dumps(body).encode()
        d = json.loads((await self.nc.request(subject, data, timeout=5)).data)
        self.log.append((subject, blank(d))); return d

    async def pub(self, subject, data=b''):
        d = json.loads((await self.nc.request(subject, data, timeout=5)).data)
        self.log.append(('pub ' + subject, blank(d))); return d

    async def fill(self, subject, size=10_000, most=400):
        "Publish `size`-byte messages until the first error: log how many were stored, the last ack and the error."
        last = None
        for i in range(most):
            d = json.loads((await self.nc.request(subject, b'x' * size, timeout=5)).data)
            if 'error' in d: break
            last = d
        self.log.append((f'fill {subject}', {'stored': i, 'last_ack': last, 'first_error': d if 'error' in d else None}))
        return i


async def run_both(start_server, scenario):
    return await _run_both(start_server, scenario, Transcript, config=CONFIG)


def mem(name, **kw): return {'name': name, 'subjects': [name.lower() + '.>'], 'storage': 'memory', **kw}
def fil(name, **kw): return {'name': name, 'subjects': [name.lower() + '.>'], 'storage': 'file', **kw}


async def test_info_and_reservations(start_server):
    async def scenario(t):
        await t.api('$JS.API.INFO')
        await t.api('$JS.API.STREAM.CREATE.M0', mem('M0', max_bytes=MB + 1))       # above the memory limit
        await t.api('$JS.API.STREAM.CREATE.MX', mem('MX', max_bytes=MB))           # exactly the limit
        await t.api('$JS.API.INFO')
        await t.api('$JS.API.STREAM.DELETE.MX')
        await t.api('$JS.API.STREAM.CREATE.M1', mem('M1', max_bytes=2 * MB))
        await t.api('$JS.API.STREAM.CREATE.M2', mem('M2', max_bytes=512 << 10))
        await t.api('$JS.API.STREAM.CREATE.M3', mem('M3', max_bytes=600 << 10))    # fits the limit, not what is left
        await t.api('$JS.API.STREAM.CREATE.M4', mem('M4', max_bytes=512 << 10))    # exactly what is left
        await t.api('$JS.API.STREAM.CREATE.M5', mem('M5'))                         # no max_bytes: no reservation
        await t.api('$JS.API.STREAM.CREATE.M6', mem('M6', max_bytes=0))
        await t.api('$JS.API.STREAM.CREATE.F1', fil('F1', max_bytes=3 * MB))
        await t.api('$JS.API.STREAM.CREATE.F2', fil('F2', max_bytes=MB))
        await t.api('$JS.API.STREAM.CREATE.F3', fil('F3', max_bytes=MB + 1))
        await t.api('$JS.API.STREAM.CREATE.F4', fil('F4'))
        await t.api('$JS.API.INFO')
        await t.api('$JS.API.STREAM.UPDATE.F2', fil('F2', max_bytes=3 * MB))       # grow past the limit
        await t.api('$JS.API.STREAM.UPDATE.F2', fil('F2', max_bytes=MB + 1))       # grow within it
        await t.api('$JS.API.STREAM.UPDATE.F2', fil('F2', max_bytes=MB // 2))      # shrink
        await t.api('$JS.API.STREAM.UPDATE.F4', fil('F4', max_bytes=2 * MB))       # start reserving
        await t.api('$JS.API.STREAM.UPDATE.F4', fil('F4', max_bytes=MB + (MB // 2)))
        await t.api('$JS.API.INFO')
        await t.api('$JS.API.STREAM.DELETE.M2')
        await t.api('$JS.API.STREAM.CREATE.M3', mem('M3', max_bytes=600 << 10))   # fits now
        await t.api('$JS.API.INFO')
        await t.api('$JS.API.STREAM.LIST')
    await run_both(start_server, scenario)


@pytest.mark.parametrize('storage', ['memory', 'file'])
async def test_publish_until_limit(start_server, storage):
    mk = mem if storage == 'memory' else fil
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.R', mk('R', max_bytes=512 << 10))       # reserved, stays empty
        await t.api('$JS.API.STREAM.CREATE.U', mk('U'))
        await t.fill('u.a')
        await t.api('$JS.API.INFO')
        await t.api('$JS.API.STREAM.INFO.U')
        await t.pub('u.a', b'tiny')                         # still over the limit
        await t.pub('r.a', b'tiny')                         # any stream of that storage type
        await t.api('$JS.API.STREAM.CREATE.O', mk('O'))    # a new stream can be created...
        await t.pub('o.a', b'tiny')                         # ... but takes nothing
        await t.api('$JS.API.STREAM.PURGE.U', {'keep': 10})
        await t.api('$JS.API.INFO')
        await t.fill('r.a')                                 # R discards old at its own max_bytes before the server limit
        await t.api('$JS.API.STREAM.INFO.R')
        await t.fill('o.a')
        await t.api('$JS.API.INFO')
        await t.api('$JS.API.STREAM.DELETE.U')
        await t.pub('o.a', b'tiny')
        await t.api('$JS.API.INFO')
    await run_both(start_server, scenario)


async def test_other_storage_unaffected(start_server):
    "Filling memory leaves file streams writable, and the other way round; limits are per storage type."
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.M', mem('M'))
        await t.api('$JS.API.STREAM.CREATE.F', fil('F'))
        await t.fill('m.a', size=50_000)
        await t.pub('f.a', b'x' * 1000)
        await t.fill('f.a', size=50_000)
        await t.pub('m.a', b'x')
        await t.api('$JS.API.INFO')
    await run_both(start_server, scenario)


async def test_discard_new_stream_limit_vs_server_limit(start_server):
    "A discard-new stream below the server limit reports its own limit, not the server's."
    async def scenario(t):
        await t.api('$JS.API.STREAM.CREATE.D', mem('D', max_bytes=100_000, discard='new'))
        await t.fill('d.a')
        await t.api('$JS.API.STREAM.CREATE.E', fil('E', max_bytes=100_000, discard='new', max_msgs=5))
        await t.fill('e.a', size=100)
        await t.api('$JS.API.INFO')
    await run_both(start_server, scenario)
