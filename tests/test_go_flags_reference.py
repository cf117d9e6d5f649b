"""Flags written as Go's `flag` package reads them: a long flag with one dash (`-config`, `-auth`, `-user`, `-pass`,
`-routes`, `-cluster_name`), as libnats's test suite starts its servers, against jsnb and the reference."""
import asyncio
import pytest
import nats
from nats.errors import NoServersError
from conftest import ServerProc

pytestmark = pytest.mark.reference


async def _connects(url: str) -> bool:
    try: nc = await asyncio.wait_for(nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5), 15)
    except (NoServersError, nats.errors.Error, OSError): return False
    await nc.close(); return True


@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
async def test_one_dash_long_flags(kind, tmp_path):
    conf = tmp_path / 'named.conf'; conf.write_text('server_name: "from_config"\n')
    s = ServerProc(kind, ['-user', 'ivan', '-pass', 'pwd', '-config', str(conf), '-cluster_name', 'abc',
                          '-cluster', 'nats://127.0.0.1:-1', '-addr', '127.0.0.1']).start()
    try:
        host = f'127.0.0.1:{s.port}'
        assert (await _connects(f'nats://{host}'), await _connects(f'nats://ivan:pwd@{host}')) == (False, True)
        nc = await nats.connect(f'nats://ivan:pwd@{host}')
        try: assert (nc._server_info['server_name'], nc._server_info.get('cluster')) == ('from_config', 'abc')
        finally: await nc.close()
    finally: s.stop()
    s = ServerProc(kind, ['-auth', 'testSecret']).start()
    try:
        assert (await _connects(f'nats://127.0.0.1:{s.port}'), await _connects(f'nats://testSecret@127.0.0.1:{s.port}')) == (False, True)
    finally: s.stop()
