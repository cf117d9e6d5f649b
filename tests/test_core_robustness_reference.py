"""Core NATS under odd or hostile clients, each scenario against jsnb and the reference nats-server.

- CONNECT and INFO documents that are odd JSON (Go's decoding rules decide what the reference accepts),
  and control lines at and past the control-line limit: the same bytes back, the same close or not.
"""
import re, socket, time
import pytest
from conftest import ServerProc, log_lines
from rawclient import Raw

pytestmark = pytest.mark.reference
C = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'


def connect_case(body: bytes, then: bytes = b'PING\r\n') -> tuple[bytes, bytes]:
    return b'', b'CONNECT ' + body + b'\r\n' + then


CASES = {
    # CONNECT: protocol numbers
    'protocol -5': connect_case(b'{"verbose":false,"protocol":-5}'),
    'protocol 2^31': connect_case(b'{"verbose":false,"protocol":2147483648}'),
    'protocol 2': connect_case(b'{"verbose":false,"protocol":2}'),
    'protocol 2^63': connect_case(b'{"verbose":false,"protocol":9223372036854775808}'),
    'protocol 1.0': connect_case(b'{"verbose":false,"protocol":1.0}'),
    'protocol "1"': connect_case(b'{"verbose":false,"protocol":"1"}'),
    'protocol null': connect_case(b'{"verbose":false,"protocol":null}'),
    'protocol -0': connect_case(b'{"verbose":false,"protocol":-0}'),
    'second CONNECT, bad protocol': connect_case(b'{"verbose":true,"protocol":1}', b'CONNECT {"protocol":-1}\r\nPING\r\n'),
    # CONNECT: documents that are not objects, and null
    'null': connect_case(b'null'),
    'null with spaces': connect_case(b'  null  '),
    'empty object': connect_case(b'{}'),
    'array': connect_case(b'[]'),
    'string': connect_case(b'"x"'),
    'two objects': connect_case(b'{} {}'),
    'trailing garbage': connect_case(b'{"verbose":false}x'),
    # CONNECT: field names and values
    'field null': connect_case(b'{"verbose":null,"pedantic":false}'),
    'field upper case': connect_case(b'{"VERBOSE":false}'),
    'field mixed case': connect_case(b'{"Verbose":false,"Pedantic":false}'),
    'field folded long s': connect_case(b'{"verbo\xc5\xbfe":false,"pedantic":false}'),
    'field not folded dotless i': connect_case(b'{"verbose":false,"pedant\xc4\xb1c":false}', b'PUB foo.* 1\r\nx\r\nPING\r\n'),
    'field repeated': connect_case(b'{"verbose":false,"Verbose":true,"verbose":false}'),
    'name a number': connect_case(b'{"verbose":false,"name":5}'),
    'name null': connect_case(b'{"verbose":false,"name":null}'),
    'name not UTF-8': connect_case(b'{"verbose":false,"name":"\xff\xfe"}'),
    'name lone surrogate': connect_case(b'{"verbose":false,"name":"\\ud800x"}'),
    'verbose a string': connect_case(b'{"verbose":"true"}'),
    'echo a number': connect_case(b'{"verbose":false,"echo":0}'),
    'unknown field object': connect_case(b'{"verbose":false,"zzz":{"a":[1,2]}}'),
    'unknown field 1e400': connect_case(b'{"verbose":false,"zzz":1e400}'),
    'unknown field 30 digits': connect_case(b'{"verbose":false,"zzz":123456789012345678901234567890}'),
    'unknown field NaN': connect_case(b'{"verbose":false,"zzz":NaN}'),
    'unknown field nested 2000': connect_case(b'{"verbose":false,"zzz":' + b'[' * 2000 + b']' * 2000 + b'}'),
    'account': connect_case(b'{"verbose":false,"account":"A"}'),
    'account empty': connect_case(b'{"verbose":false,"account":""}'),
    'account a number': connect_case(b'{"verbose":false,"account":1}'),
    'new_account': connect_case(b'{"verbose":false,"new_account":true}'),
    'no_responders without headers': connect_case(b'{"verbose":false,"no_responders":true}'),
    'import wrong type': connect_case(b'{"verbose":false,"import":{"allow":5}}'),
    'import ALLOW wrong type': connect_case(b'{"verbose":false,"import":{"ALLOW":5}}'),
    'import an object': connect_case(b'{"verbose":false,"import":{"allow":["a"]}}'),
    'proxy_sig a number': connect_case(b'{"verbose":false,"proxy_sig":5}'),
    'second CONNECT keeps verbose': connect_case(b'{"verbose":false}', b'CONNECT {"verbose":true}\r\nPING\r\n'),
    # how the CONNECT line itself is read
    'CONNECT without space': (b'', b'CONNECT{"verbose":false}\r\nPING\r\n'),
    'CONNECTX': (b'', b'CONNECTX {"verbose":false}\r\nPING\r\n'),
    'CONNECT 5000 spaces': (b'', b'CONNECT' + b' ' * 5000 + b'{"verbose":false}\r\nPING\r\n'),
    'CONNECT argument 4093 bytes': connect_case(b'{"verbose":false,"name":"' + b'n' * 4066 + b'"}'),
    'CONNECT argument 5000 bytes': connect_case(b'{"verbose":false,"name":"' + b'n' * 5000 + b'"}'),
    # INFO from a client
    'INFO fine': (C, b'INFO {"server_id":"x","port":5}\r\nPING\r\n'),
    'INFO null': (C, b'INFO null\r\nPING\r\n'),
    'INFO empty': (C, b'INFO\r\nPING\r\n'),
    'INFO not JSON': (C, b'INFO xx\r\nPING\r\n'),
    'INFO port a string': (C, b'INFO {"port":"5"}\r\nPING\r\n'),
    'INFO max_payload 2^31': (C, b'INFO {"max_payload":2147483648}\r\nPING\r\n'),
    'INFO client_id -1': (C, b'INFO {"client_id":-1}\r\nPING\r\n'),
    'INFO urls with null': (C, b'INFO {"connect_urls":[null,"a"]}\r\nPING\r\n'),
    'INFO bad base64': (C, b'INFO {"gateway_cmd_payload":"!!"}\r\nPING\r\n'),
    # control lines and the control-line limit
    'PING + 5000 spaces': (C, b'PING' + b' ' * 5000 + b'\r\nPING\r\n'),
    'PING + 100 KB garbage': (C, b'PING' + b'\x01z' * 50000 + b'\r\n'),
    'PONG + 5000 bytes': (C, b'PONG' + b'x' * 5000 + b'\r\nPING\r\n'),
    '+OK + 5000 bytes': (C, b'+OK' + b'x' * 5000 + b'\r\nPING\r\n'),
    'PINGPONG': (C, b'PINGPONG\r\n'),
    'SUB 5000 spaces': (C, b'SUB' + b' ' * 5000 + b'foo 1\r\nPING\r\n'),
    'PUB 5000 spaces': (C, b'SUB foo 1\r\nPUB' + b' ' * 5000 + b'foo 2\r\nhi\r\nPING\r\n'),
    'SUB arguments 4096': (C, b'SUB ' + b'a' * 4094 + b' 1\r\nPING\r\n'),
    'SUB arguments 4097': (C, b'SUB ' + b'a' * 4095 + b' 1\r\nPING\r\n'),
    'PUB arguments 4096': (C, b'PUB ' + b'a' * 4094 + b' 2\r\nhi\r\nPING\r\n'),
    'PUB arguments 4097': (C, b'PUB ' + b'a' * 4095 + b' 2\r\nhi\r\nPING\r\n'),
    'HPUB arguments 4096': (C, b'HPUB ' + b'a' * 4092 + b' 0 2\r\nhi\r\nPING\r\n'),
    'UNSUB arguments 4097': (C, b'UNSUB ' + b'1' * 4097 + b'\r\nPING\r\n'),
    'unfinished: unknown name': (C, b'XYZ'),
    'unfinished: PZ': (C, b'PZ'),
    'unfinished: SUBX': (C, b'SUBX'),
    'unfinished: MSG': (C, b'MSG foo'),
    'unfinished: HMSG': (C, b'HMSG foo'),
    'unfinished: PING + 6000 bytes': (C, b'PING' + b'x' * 6000),
    'unfinished: SUB + 6000 spaces': (C, b'SUB' + b' ' * 6000),
    'unfinished: CONNECT + 6000 spaces': (b'', b'CONNECT' + b' ' * 6000),
    'unfinished: CONNECT argument 6000': (b'', b'CONNECT {' + b' ' * 6000),
    'HMSG': (C, b'HMSG foo 1 0 2\r\nhi\r\nPING\r\n'),
    '-ERR without space': (C, b'-ERRx\r\n'),
    '-ERR alone': (C, b'-ERR\r\n'),
    'UNSUB and a tab': (C, b'UNSUB\t\r\n'),
    'PUB and a space': (C, b'PUB \r\n'),
    '+OK with text': (C, b'+OK x\r\nPING\r\n'),
    'PING, CR, PING': (C, b'PING\rPING\r\n'),
}


def answer(port: int, connect: bytes, data: bytes) -> tuple[bytes, bool]:
    "What the server sends back and whether it closes (read until it closes, or a quiet spell after the last PONG)."
    r = Raw(port, connect)
    r.send(data)
    out, closed = b'', False
    end = time.time() + 5
    r.s.settimeout(0.3)
    while time.time() < end:
        try: d = r.s.recv(1 << 16)
        except socket.timeout: break
        except ConnectionResetError: closed = True; break
        if not d: closed = True; break
        out += d
        if out.endswith(b'PONG\r\n') and data.endswith(b'PING\r\n'): r.s.settimeout(0.05)
    r.close()
    return out, closed


@pytest.fixture(scope='module')
def pair():
    servers = [ServerProc('nats-server').start(), ServerProc('jsnb').start()]
    yield servers
    for s in servers: s.stop()


@pytest.mark.parametrize('case', list(CASES))
def test_connect_and_control_lines(pair, case):
    ref, ours = [answer(s.port, *CASES[case]) for s in pair]
    assert ours == ref, f'{case}: jsnb {ours!r:.300} != reference {ref!r:.300}'


def test_still_serving_after_the_cases(pair):
    "Every case above touched only its own connection."
    for s in pair:
        assert answer(s.port, C, b'PING\r\n') == (b'PONG\r\n', False)


def until_pong_or_close(port: int, connect: bytes, data: bytes) -> tuple[bytes, bool]:
    "What the server sends back until its PONG or its close (a big document may take a busy machine a while)."
    r = Raw(port, connect)
    r.send(data)
    out = b''; r.s.settimeout(60)
    while not out.endswith(b'PONG\r\n'):
        try: d = r.s.recv(1 << 16)
        except ConnectionResetError: d = b''
        if not d: r.close(); return out, True
        out += d
    r.close()
    return out, False


def nested(depth: int, kind: str) -> bytes:
    "A CONNECT whose unknown field holds arrays or objects nested so that the document is `depth` deep."
    inner = b'[' * (depth - 1) + b']' * (depth - 1) if kind == 'arrays' else b'{"a":' * (depth - 2) + b'{}' + b'}' * (depth - 2)
    return b'{"verbose":false,"zzz":' + inner + b'}'


@pytest.mark.parametrize('kind', ['arrays', 'objects'])
@pytest.mark.parametrize('depth', [1025, 10_000, 10_001, 30_000])
def test_connect_nested_past_the_decoders_limits(start_server, depth, kind):
    """With a control line long enough, a CONNECT nested 10,000 deep is fine and one level more is refused, as Go's
    decoder does: the connection is closed without -ERR and the log says `exceeded max depth`, on every Python."""
    servers = [start_server(k, config='max_control_line: 1000000\n') for k in ('nats-server', 'jsnb')]
    ref, ours = [until_pong_or_close(s.port, *connect_case(nested(depth, kind))) for s in servers]
    assert ours == ref == ((b'PONG\r\n', False) if depth <= 10_000 else (b'', True)), (ours, ref)
    if depth > 10_000:
        deadline = time.time() + 10
        while not all('exceeded max depth' in s.log_text() for s in servers) and time.time() < deadline: time.sleep(0.05)
        assert [log_lines(s, 'exceeded max depth') for s in servers] == [['[ERR] CLIENT - exceeded max depth']] * 2


# ---------------------------------------------------------------------------------------------- monitoring port

def http_get(port: int, path: str, timeout: float = 3) -> bytes:
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    s.sendall(f'GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'.encode())
    out = b''
    try:
        while b'\r\n\r\n' not in out or not out.rstrip().endswith(b'}'):
            d = s.recv(65536)
            if not d: break
            out += d
    finally: s.close()
    return out


def test_monitor_port_closes_half_sent_requests(start_server):
    """300 connections each send half a request head and stop: the reference closes them when its 5 s header
    timeout runs out, and so does jsnb; meanwhile /varz is answered at once."""
    servers = {kind: start_server(kind, '-m', '-1') for kind in ('nats-server', 'jsnb')}
    ports = {}
    for kind, s in servers.items():
        m = __import__('re').search(r'Starting http monitor on \S+:(\d+)', s.log_text())
        ports[kind] = int(m.group(1))
    slow, made = {kind: [] for kind in servers}, {}
    for kind, port in ports.items():
        made[kind] = time.time()                          # each server's clock starts with its own connections
        for _ in range(300):
            c = socket.create_connection(('127.0.0.1', port)); c.sendall(b'GET /varz HTTP/1.1\r\nHost: x\r\n')
            slow[kind].append(c)
    t0 = time.time()
    for kind, port in ports.items():
        t = time.time(); body = http_get(port, '/varz')
        assert body.startswith(b'HTTP/1.1 200 OK') and b'"server_id"' in body, kind
    closed_at = {}
    for kind, conns in slow.items():
        for c in conns:
            c.settimeout(max(0.1, t0 + 60 - time.time()))
            try: assert c.recv(100) == b''                 # closed without an answer
            except socket.timeout: pytest.fail(f'{kind} kept a half-sent request open for 60 s')
            except ConnectionResetError: pass
            c.close()
        closed_at[kind] = time.time() - made[kind]
    assert all(t > 3 for t in closed_at.values()), closed_at        # not before the header timeout (5 s)...
    assert closed_at['jsnb'] < 1.5 * closed_at['nats-server'], closed_at      # ...and about when the reference closes them


# ---------------------------------------------------------------------------------------------- a client that floods

def ping_flood(port: int, seconds: float, limit: float) -> dict:
    """One client sends PINGs as fast as it can and never reads a PONG; another measures its own PING round trip
    every 50 ms for at least `seconds`, until a second after the flooder is cut off (at most `limit` seconds).
    Returns the other client's worst round trip and when the flooder was cut off (None: never)."""
    import threading
    f = socket.create_connection(('127.0.0.1', port)); f.recv(4096)
    f.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    f.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
    stop, cut, t0 = threading.Event(), [None], time.time()
    def flood():
        chunk = b'PING\r\n' * 20000
        f.settimeout(0.5)
        while not stop.is_set():
            try: f.sendall(chunk)
            except socket.timeout: continue
            except OSError: cut[0] = time.time() - t0; return
    th = threading.Thread(target=flood, daemon=True); th.start()
    other = Raw(port)
    worst = 0.0
    try:
        while time.time() - t0 < seconds or (cut[0] is None or time.time() - t0 < cut[0] + 1) and time.time() - t0 < limit:
            t = time.time(); other.send(b'PING\r\n')
            assert other.until(b'PONG\r\n', timeout=10).endswith(b'PONG\r\n'), 'no PONG within 10 s'
            worst = max(worst, time.time() - t)
            time.sleep(0.05)
    finally:
        stop.set(); th.join(5); f.close(); other.close()
    return dict(worst_rtt=worst, flooder_cut_at=cut[0])


@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
def test_ping_flood_does_not_starve_others(kind, start_server):
    """A PING flood from a client that never reads: everyone else keeps a quick round trip (the reference: about
    1 ms; jsnb: tens of ms at worst), and the flooder is cut off as a slow consumer once its writes have been
    stuck for `write_deadline` (here 2 s)."""
    s = start_server(kind, config='write_deadline: "2s"\n')
    r = ping_flood(s.port, 4, 20)
    assert r['flooder_cut_at'] is not None, r
    assert r['worst_rtt'] < r['flooder_cut_at'] / 4, r     # the others wait a small part of the flood, however busy the machine
    assert 'Slow Consumer Detected' in s.log_text()
    assert answer(s.port, C, b'PING\r\n') == (b'PONG\r\n', False)


# ---------------------------------------------------------------------------------------------- what test launchers use

class ScriptProc(ServerProc):
    "jsnb started through its `jsnb-server` program, as a launcher starts it (the ports file is named after the program)."
    def cmd(self, port_args):
        c = super().cmd(port_args)
        if self.kind == 'jsnb': c = [__import__('shutil').which('jsnb-server')] + c[3:]
        return c


@pytest.mark.parametrize('how', ['flag', 'config'])
def test_ports_file_and_server_tags(how, tmp_path):
    """`ports_file_dir` (flag or config key) gets `<program>_<pid>.ports` with the client and monitoring URLs
    (every interface address for 0.0.0.0, loopback first), removed on shutdown; `server_tags` shows in /varz
    lower-cased, trimmed and without repeats. jsnb writes what the reference writes."""
    import json, os, re, urllib.request
    got = {}
    for kind in ('nats-server', 'jsnb'):
        d = tmp_path / kind; d.mkdir()
        conf = 'server_tags: ["Region:East", " az:1 ", "", "REGION:east"]\n'
        args = ['-m', '-1']
        if how == 'flag': args += ['--ports_file_dir', str(d)]
        else: conf += f'ports_file_dir: "{d}"\n'
        s = ScriptProc(kind, args, conf).start()
        try:
            name, ports = s.ports_file(d)
            mport = int(re.search(r'Starting http monitor on \S+:(\d+)', s.log_text()).group(1))
            with urllib.request.urlopen(f'http://127.0.0.1:{mport}/varz', timeout=5) as r: tags = json.loads(r.read()).get('tags')
            prog = 'nats-server' if kind == 'nats-server' else 'jsnb-server'
            assert name == f'{prog}_{s.proc.pid}.ports', name
            assert ports['nats'][0] == f'nats://127.0.0.1:{s.port}' and ports['monitoring'][0] == f'http://127.0.0.1:{mport}'
            got[kind] = ([u.replace(f':{s.port}', ':P') for u in ports['nats']],
                         [u.replace(f':{mport}', ':M') for u in ports['monitoring']], sorted(ports), tags)
        finally: s.stop()
        assert os.listdir(d) == [], f'{kind} left {os.listdir(d)}'
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][3] == ['region:east', 'az:1']


def test_ports_file_with_cluster_and_websocket(tmp_path):
    """With a cluster and a WebSocket listener, the ports file has their URLs too (`cluster`, `websocket`), in the
    reference's shape, and is written only once every one of them listens: a launcher (nats.js's test servers) reads
    the file as soon as it appears and dials those ports."""
    import json, re, socket
    from urllib.parse import urlsplit
    got = {}
    for kind in ('nats-server', 'jsnb'):
        d = tmp_path / kind; d.mkdir()
        conf = ('server_name: x\ncluster { listen: "127.0.0.1:-1", name: c }\n'
                'websocket { listen: "127.0.0.1:-1", no_tls: true }\nleafnodes { listen: "127.0.0.1:-1" }\n')
        s = ScriptProc(kind, ['-m', '-1', '--ports_file_dir', str(d)], conf).start()
        try:
            _, ports = s.ports_file(d)
            for key in ('nats', 'monitoring', 'cluster', 'websocket'):
                u = urlsplit(ports[key][0])
                socket.create_connection((u.hostname, u.port), timeout=5).close()     # listening when the file says so
            got[kind] = {k: [re.sub(r':\d+$', ':N', u) for u in v] for k, v in ports.items()}
        finally: s.stop()
    assert got['jsnb'] == got['nats-server']


def test_ports_file_dir_that_does_not_exist(tmp_path):
    "Both servers log the error and run on."
    for kind in ('nats-server', 'jsnb'):
        s = ScriptProc(kind, ['--ports_file_dir', str(tmp_path / 'missing')]).start()
        try:
            time.sleep(0.3)
            assert re.search(r'\[ERR\] Error writing ports file \(\S+_%d\.ports\): open \S+: no such file or directory'
                             % s.proc.pid, s.log_text()), s.log_text()
            assert answer(s.port, C, b'PING\r\n') == (b'PONG\r\n', False)
        finally: s.stop()


# ---------------------------------------------------------------------------------------------- INFO

def test_info_carries_the_jetstream_api_level(start_server):
    """INFO has `api_lvl` right after the client's fields, with JetStream on or off, as the reference's; jsnb's value
    is its own constant, the level `$JS.API.INFO` and /jsz report."""
    import json, nats
    from jsnb.js.stream_config import JS_API_LEVEL
    got = {}
    for kind in ('nats-server', 'jsnb'):
        for js in (True, False):
            s = start_server(kind, *(['-js'] if js else []))
            info = json.loads(Raw(s.port, None).info)
            keys = [k for k in info if k != 'jsnb_version']
            got[kind, js] = keys, info.get('api_lvl')
    assert got['jsnb', True] == (got['nats-server', True][0], JS_API_LEVEL)
    assert got['jsnb', False] == (got['nats-server', False][0], JS_API_LEVEL)
    assert got['nats-server', True][1] == got['nats-server', False][1] == 5


async def test_api_level_is_the_same_everywhere(start_server):
    import json, nats
    s = start_server('jsnb', '-js')
    nc = await nats.connect(s.url)
    try:
        level = (await nc.jetstream().account_info()).api.level
        assert nc._server_info['api_lvl'] == level > 0
    finally: await nc.close()


# ---------------------------------------------------------------------------------------------- failures inside the server

async def test_failing_deferred_work_is_logged_with_its_traceback():
    """Work an internal handler defers fails: the log (in the reference's format) has the error and its traceback,
    the work queued after it runs, and the publishing client stays connected and served."""
    import asyncio, io, logging, nats
    from jsnb.nats.server import serve, RefFormatter, log
    out = io.StringIO(); h = logging.StreamHandler(out); h.setFormatter(RefFormatter())
    log.addHandler(h); old = log.level; log.setLevel(logging.INFO)
    server = await serve()
    try:
        core, done = server.core, []
        def handler(subject, reply, hdr, data, src):
            core.defer(lambda: {}['missing'])                    # a bug in deferred work
            core.defer(lambda: done.append(data))
        core.subscribe('work', handler, defers=True)
        nc = await nats.connect(server.url)
        await nc.publish('work', b'one'); await nc.flush(timeout=5)
        await nc.publish('work', b'two'); await nc.flush(timeout=5)
        assert done == [b'one', b'two'] and nc.is_connected
        await nc.close()
    finally:
        await server.stop(); log.removeHandler(h); log.setLevel(old)
    text = out.getvalue()
    assert text.count('[ERR] deferred work failed') == 2, text
    assert 'Traceback (most recent call last)' in text and "KeyError: 'missing'" in text and 'test_core_robustness_reference.py' in text
