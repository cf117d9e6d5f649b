"""INFO as the reference sends it: every field, in the reference's order and JSON types, on the client, route and leaf
node ports and in /varz. Clients rely on it (the `nats-core` client reads `go` unconditionally)."""
import json, socket, urllib.request
import pytest
from conftest import KINDS
from rawclient import Raw


def _types(d: dict) -> dict: return {k: type(v).__name__ for k, v in d.items()}


def _info(port: int) -> dict:
    "The INFO a connection to `port` is sent first."
    with socket.create_connection(('127.0.0.1', port), timeout=5) as s:
        buf = b''
        while b'\r\n' not in buf: buf += s.recv(4096)
    assert buf.startswith(b'INFO ')
    return json.loads(buf[5:buf.index(b'\r\n')])


@pytest.mark.parametrize('flags', [(), ('-js',), ('--user', 'u', '--pass', 'p')], ids=['plain', 'jetstream', 'auth'])
def test_client_info_fields_order_and_types(start_server, flags):
    got = {}
    for kind in KINDS:
        info = json.loads(Raw(start_server(kind, *flags).port, None).info)
        info.pop('jsnb_version', None)            # jsnb's own extra: every official client ignores fields it does not know
        got[kind] = list(info), _types(info)
    assert got['jsnb'] == got['nats-server']


def test_info_values_say_what_runs(start_server):
    "`go` names the runtime, `git_commit` the build, `xkey` a curve public key (an nkey starting with X)."
    from jsnb.nats.core import GO_VERSION, GIT_COMMIT
    info = json.loads(Raw(start_server('jsnb', '-js').port, None).info)
    assert info['go'] == GO_VERSION and info['go'].startswith('cpython3.')
    assert info.get('git_commit', '') == GIT_COMMIT
    assert info['xkey'][0] == 'X' and len(info['xkey']) == 56
    other = json.loads(Raw(start_server('jsnb').port, None).info)
    assert other['xkey'] != info['xkey']          # a key pair per server


async def test_nats_core_style_client_reads_go(start_server):
    "What the newest nats.py client reads from INFO on connect (`info['go']`, `info['version']`, `info['proto']`) is there."
    for kind in KINDS:
        info = json.loads(Raw(start_server(kind).port, None).info)
        assert isinstance(info['go'], str) and isinstance(info['version'], str) and isinstance(info['proto'], int)


def _conf_server(start_server, kind, tmp: str):
    conf = (f'server_name: {kind}-x\nhttp: 127.0.0.1:-1\ncluster {{ listen: "127.0.0.1:-1", name: c }}\n'
            'leafnodes { listen: "127.0.0.1:-1" }\n')
    return start_server(kind, config=conf)


def _listen_port(server, what: str) -> int:
    import re
    m = re.search(rf'Listening for {what} connections on \S+:(\d+)', server.log_text())
    return int(m.group(1))


def test_route_leaf_and_varz_carry_runtime_and_commit(start_server, tmp_path):
    "Route INFO has `go`, leaf node INFO `git_commit` and `go`, /varz both, as the reference's."
    got = {}
    for kind in KINDS:
        s = _conf_server(start_server, kind, str(tmp_path))
        route, leaf = _info(_listen_port(s, 'route')), _info(_listen_port(s, 'leafnode'))
        http = int(__import__('re').search(r'Starting http monitor on \S+:(\d+)', s.log_text()).group(1))
        varz = json.load(urllib.request.urlopen(f'http://127.0.0.1:{http}/varz', timeout=5))
        got[kind] = [[k for k in d if k in ('version', 'proto', 'git_commit', 'go', 'host')] for d in (route, leaf, varz)]
    if 'git_commit' not in got['jsnb'][1]:      # a jsnb installed without a commit (no checkout, no COMMIT file) leaves it out
        for part in got['nats-server']: part[:] = [k for k in part if k != 'git_commit']
    assert got['jsnb'] == got['nats-server']
