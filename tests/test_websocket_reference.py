"""WebSocket clients against the reference: the same `websocket` block and the same client bytes, run against jsnb
and nats-server 2.15.1, must get the same upgrade answers, INFO fields, deliveries (across a WebSocket and a TCP
client), close frames (status and text) and monitoring output. Frames are written by hand here (masked, fragmented,
compressed, oversized, invalid) so that each case is exactly the same on both servers; `websocket-client` serves as
an independent client for the plain cases."""
import base64, json, os, re, socket, struct, time, urllib.request, zlib

import pytest
import websocket as wsc                                   # the websocket-client package

from conftest import KINDS, REF_BIN, ServerProc

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

_WS = re.compile(r'Listening for websocket clients on (wss?)://(\S+):(\d+)')
KEY = base64.b64encode(b'0123456789abcdef').decode()
ACCEPT = 'BACScCJPNqyz+UBoqMH89VmURoA='       # RFC 6455's hash of KEY, computed once by hand (see test_accept_value)


def both(start_server, ws_block='port: -1, no_tls: true', extra=''):
    "jsnb and the reference with the same configuration; each gets `.ws` (its WebSocket port)."
    out = {}
    for k in KINDS:
        s = start_server(k, config=f'http: "127.0.0.1:-1"\n{extra}\nwebsocket {{ {ws_block} }}\n')
        s.ws = int(_WS.search(s.log_text()).group(3))
        s.http = int(re.search(r'Starting http monitor on \S+:(\d+)', s.log_text()).group(1))
        out[k] = s
    return out


def mframe(op: int, payload: bytes, fin=True, rsv1=False, mask=True, key=b'\x9a\x0b\x7c\x33') -> bytes:
    "A frame as a client writes it."
    b0 = op | (0x80 if fin else 0) | (0x40 if rsv1 else 0)
    n = len(payload)
    ext = bytes([n]) if n <= 125 else bytes([126]) + n.to_bytes(2, 'big') if n < 65536 else bytes([127]) + n.to_bytes(8, 'big')
    if not mask: return bytes([b0, ext[0]]) + ext[1:] + payload
    masked = bytes(b ^ key[i & 3] for i, b in enumerate(payload))
    return bytes([b0, ext[0] | 0x80]) + ext[1:] + key + masked


class Ws:
    "A raw WebSocket client: sends exact bytes, reads the server's frames as (opcode, rsv1, payload)."
    def __init__(self, port, headers=(), request=None):
        self.s = socket.create_connection(('127.0.0.1', port), timeout=5)
        req = request or ('GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
                          'Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n' % (port, KEY, ''.join(h + '\r\n' for h in headers)))
        self.s.sendall(req.encode())
        self.buf = b''
        self.status, self.headers, self.body = self._response()

    def _response(self):
        while b'\r\n\r\n' not in self.buf:
            d = self.s.recv(65536)
            if not d: return None, {}, b''
            self.buf += d
        head, self.buf = self.buf.split(b'\r\n\r\n', 1)
        lines = head.decode().split('\r\n')
        h = {k.lower(): v.strip() for k, _, v in (l.partition(':') for l in lines[1:])}
        body = b''
        if 'content-length' in h:
            n = int(h['content-length'])
            while len(self.buf) < n: self.buf += self.s.recv(65536)
            body, self.buf = self.buf[:n], self.buf[n:]
        return lines[0], h, body

    def send(self, data: bytes): self.s.sendall(data)
    def pub(self, data: bytes): self.send(mframe(2, data))

    def frame(self, timeout=3.0):
        "The next frame, or None when the connection closed."
        self.s.settimeout(timeout)
        while True:
            f = self._take()
            if f is not None: return f
            try: d = self.s.recv(65536)
            except (ConnectionResetError, socket.timeout): return None
            if not d: return None
            self.buf += d

    def _take(self):
        b = self.buf
        if len(b) < 2: return None
        n, p = b[1] & 0x7F, 2
        if n == 126:
            if len(b) < 4: return None
            n, p = int.from_bytes(b[2:4], 'big'), 4
        elif n == 127:
            if len(b) < 10: return None
            n, p = int.from_bytes(b[2:10], 'big'), 10
        if len(b) < p + n: return None
        self.buf = b[p + n:]
        return b[0] & 0x0F, bool(b[0] & 0x40), b[p:p + n]

    def nats(self, until: bytes, timeout=3.0) -> bytes:
        "NATS bytes from data frames until `until` is seen (inflating compressed ones)."
        got, deadline = b'', time.time() + timeout
        while until not in got and time.time() < deadline:
            f = self.frame(max(deadline - time.time(), 0.01))
            if f is None: break
            op, rsv1, p = f
            if op in (0, 1, 2): got += zlib.decompressobj(-15).decompress(p + b'\x00\x00\xff\xff') if rsv1 else p
        return got

    def close_frame(self, timeout=3.0):
        "Data until the server's close frame: (status, text), or None if it closed without one."
        while (f := self.frame(timeout)) is not None:
            if f[0] == 8: return (int.from_bytes(f[2][:2], 'big') if f[2] else None), f[2][2:].decode()
        return None

    def closed(self, timeout=3.0) -> bool:
        "Whether the server closes the connection (anything still sent is skipped)."
        self.s.settimeout(timeout)
        try:
            while True:
                if not self.s.recv(65536): return True
        except ConnectionResetError: return True
        except socket.timeout: return False

    def close(self): self.s.close()


def connect(s, headers=(), mask=True):
    "A WebSocket client past INFO and CONNECT on server `s`; returns (client, info)."
    c = Ws(s.ws, headers)
    info = json.loads(c.nats(b'\r\n').split(b' ', 1)[1])
    c.send(mframe(2, b'CONNECT {"verbose":false}\r\nPING\r\n', mask=mask))
    assert c.nats(b'PONG\r\n').endswith(b'PONG\r\n')
    return c, info


def tcp(s):
    "A TCP client past CONNECT."
    t = socket.create_connection(('127.0.0.1', s.port), timeout=5)
    t.recv(65536)
    t.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
    got = b''
    while b'PONG' not in got: got += t.recv(65536)
    return t


def get(s, path):
    return json.loads(urllib.request.urlopen(f'http://127.0.0.1:{s.http}{path}', timeout=5).read())


def test_accept_value():
    import hashlib
    assert base64.b64encode(hashlib.sha1(KEY.encode() + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest()).decode() == ACCEPT


def test_upgrade_response(start_server):
    "The 101 answer, with compression and no-masking negotiated and configured headers, is the reference's."
    out = {}
    for k, s in both(start_server, 'port: -1, no_tls: true, compression: true, headers { X-Extra: "yes" }').items():
        plain = Ws(s.ws)
        asks = Ws(s.ws, ['Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits', 'Nats-No-Masking: true'])
        out[k] = [(c.status, c.headers) for c in (plain, asks)]
        plain.close(); asks.close()
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][0] == ('HTTP/1.1 101 Switching Protocols', {'upgrade': 'websocket', 'connection': 'Upgrade',
                                                                   'sec-websocket-accept': ACCEPT, 'x-extra': 'yes'})


BAD = {
    'post': 'POST / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n' % KEY,
    'no upgrade': 'GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n' % KEY,
    'no key': 'GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n',
    'short key': 'GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: c2hvcnQ=\r\nSec-WebSocket-Version: 13\r\n\r\n',
    'version': 'GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 8\r\n\r\n' % KEY,
    'origin': 'GET / HTTP/1.1\r\nHost: h\r\nOrigin: http://evil.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n' % KEY,
    'mqtt': 'GET /mqtt HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n' % KEY,
}


def test_bad_handshakes(start_server):
    "Refused upgrades: the same status, the same headers that matter, the same body, and the same log text."
    out = {}
    for k, s in both(start_server, 'port: -1, no_tls: true, allowed_origins: ["http://good.example"]').items():
        res = {}
        for name, req in BAD.items():
            c = Ws(s.ws, request=req)
            res[name] = (c.status, c.headers.get('sec-websocket-version'), c.headers.get('content-type'), c.body)
            c.close()
        time.sleep(0.2)
        res['log'] = sorted(re.sub(r'.*\] \S+:\d+ - ', '', l) for l in s.log_text().splitlines() if 'handshake error' in l)
        out[k] = res
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb']['post'][:2] == ('HTTP/1.1 405 Method Not Allowed', '13')
    assert out['jsnb']['origin'][0] == 'HTTP/1.1 403 Forbidden'
    assert 'websocket handshake error: origin not allowed: not in the allowed list' in out['jsnb']['log'], out['jsnb']['log']


def test_info_and_monitoring(start_server):
    "INFO over WebSocket names the WebSocket listener; /varz has the websocket block; /connz says `websocket`."
    srv = both(start_server, 'port: -1, no_tls: true, compression: true, handshake_timeout: "3s", same_origin: true')
    out = {}
    for k, s in srv.items():
        c, info = connect(s)
        c.pub(b'SUB foo 1\r\nPING\r\n'); c.nats(b'PONG')
        v, conns = get(s, '/varz')['websocket'], get(s, '/connz?subs=1')['connections']
        assert info['port'] == s.ws and v['port'] == s.ws
        out[k] = (sorted(info), info['host'], {**v, 'port': 0},
                  [(x['type'], x['kind'], x['subscriptions_list']) for x in conns])
        c.close()
    for k in out: out[k][0][:] = [f for f in out[k][0] if f != 'jsnb_version']
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][3] == [('websocket', 'Client', ['foo'])]


def test_pubsub_across_ws_and_tcp(start_server):
    "A TCP client's message reaches a WebSocket subscriber and the other way round."
    out = {}
    for k, s in both(start_server).items():
        c, _ = connect(s)
        t = tcp(s)
        c.pub(b'SUB from.tcp 1\r\nPING\r\n'); c.nats(b'PONG')
        t.sendall(b'SUB from.ws 7\r\nPUB from.tcp reply.x 5\r\nhello\r\nPING\r\n')
        got_ws = c.nats(b'hello\r\n')
        tb = b''
        while b'PONG' not in tb: tb += t.recv(65536)
        c.pub(b'PUB from.ws 3\r\nabc\r\n')
        while b'abc' not in tb: tb += t.recv(65536)
        out[k] = (got_ws, tb[tb.index(b'MSG'):])
        c.close(); t.close()
    assert out['jsnb'] == out['nats-server'] == (b'MSG from.tcp 1 reply.x 5\r\nhello\r\n', b'MSG from.ws 7 3\r\nabc\r\n')


def test_fragmented_and_masked(start_server):
    "A PUB split over a binary frame and continuations, each masked with its own key, sent a byte at a time."
    out = {}
    for k, s in both(start_server).items():
        c, _ = connect(s)
        c.pub(b'SUB frag 1\r\n')
        data = (mframe(2, b'PUB frag 11\r\nhel', fin=False, key=b'\x01\x02\x03\x04') + mframe(0, b'lo ', fin=False, key=b'abcd')
                + mframe(0, b'world\r\nPING\r\n', key=b'\xff\xee\xdd\xcc') + mframe(1, b'PING\r\n'))
        for i in range(len(data)): c.send(data[i:i + 1])
        out[k] = c.nats(b'PONG\r\nPONG\r\n')
        c.close()
    assert out['jsnb'] == out['nats-server'] == b'MSG frag 1 11\r\nhello world\r\nPONG\r\nPONG\r\n'


def test_ping_close_and_protocol_errors(start_server):
    """Pings are answered, a close is echoed; invalid frames are read errors: logged with the reference's text and the
    connection dropped (the reference prepares a 1002 close frame but drops the connection without flushing it)."""
    cases = {
        'close': mframe(8, (1000).to_bytes(2, 'big') + b'bye'),
        'empty close': mframe(8, b''),
        'bad status': mframe(8, (1005).to_bytes(2, 'big')),
        'unmasked': mframe(2, b'PING\r\n', mask=False),
        'long control': mframe(9, b'x' * 126),
        'fragmented control': mframe(9, b'x', fin=False),
        'continuation first': mframe(0, b'PING\r\n'),
        'rsv1 not negotiated': mframe(2, b'PING\r\n', rsv1=True),
        'opcode 3': mframe(3, b'x'),
        'interleaved': mframe(2, b'PI', fin=False) + mframe(2, b'NG\r\n'),
    }
    out = {}
    for k, s in both(start_server).items():
        res = {}
        c, _ = connect(s)
        c.send(mframe(9, b'are you there'))
        res['ping'] = c.frame()
        c.close()
        for name, data in cases.items():
            c, _ = connect(s)
            c.send(data)
            f = c.close_frame()
            if name not in ('close', 'empty close') and f is not None and f[0] == 1002:
                f = None      # the reference's write loop sometimes wins the race and sends the 1002 frame it prepared
            res[name] = (f, c.closed())
            c.close()
        time.sleep(0.2)
        res['log'] = [re.sub(r'.* - wid:\d+ - ', '', l) for l in s.log_text().splitlines() if 'read error' in l]
        out[k] = res
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb']['ping'] == (10, False, b'are you there')
    assert out['jsnb']['close'] == ((1000, 'bye'), True)
    assert out['jsnb']['unmasked'] == (None, True)
    assert 'read error: mask bit missing' in out['jsnb']['log']


def test_no_masking(start_server):
    "`Nats-No-Masking: true` lets the client send unmasked frames."
    out = {}
    for k, s in both(start_server).items():
        c, _ = connect(s, ['Nats-No-Masking: true'], mask=False)
        c.send(mframe(2, b'SUB nm 1\r\nPUB nm 2\r\nok\r\nPING\r\n', mask=False))
        out[k] = (c.headers.get('nats-no-masking'), c.nats(b'PONG'))
        c.close()
    assert out['jsnb'] == out['nats-server'] == ('true', b'MSG nm 1 2\r\nok\r\nPONG\r\n')


def test_oversized(start_server):
    "Past max_payload: -ERR, then close 1009; a compressed message that inflates past it closes with 1009 too."
    out = {}
    for k, s in both(start_server, 'port: -1, no_tls: true, compression: true', extra='max_payload: 1024').items():
        c, _ = connect(s)
        c.pub(b'PUB big 2000\r\n' + b'x' * 2000 + b'\r\n')
        res = [(c.nats(b'\r\n'), c.close_frame())]
        c.close()
        c, _ = connect(s, ['Sec-WebSocket-Extensions: permessage-deflate'])
        z = zlib.compressobj(6, zlib.DEFLATED, -15)
        body = (z.compress(b'PUB big 1\r\nx\r\n' * 200) + z.flush(zlib.Z_SYNC_FLUSH))[:-4]
        c.send(mframe(2, body, rsv1=True))
        res.append((c.close_frame(), c.closed()))
        c.close()
        out[k] = res
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][0] == (b"-ERR 'Maximum Payload Violation'\r\n", (1009, 'Maximum Message Payload Exceeded'))


def test_compression(start_server):
    "With permessage-deflate a large delivery comes compressed, and compressed PUBs (in fragments) are read."
    out = {}
    for k, s in both(start_server, 'port: -1, no_tls: true, compression: true').items():
        c, _ = connect(s, ['Sec-WebSocket-Extensions: permessage-deflate'])
        c.pub(b'SUB z 1\r\nPING\r\n'); c.nats(b'PONG')
        z = zlib.compressobj(6, zlib.DEFLATED, -15)
        body = (z.compress(b'PUB z 200\r\n' + b'a' * 200 + b'\r\n') + z.flush(zlib.Z_SYNC_FLUSH))[:-4]
        c.send(mframe(2, body[:4], fin=False, rsv1=True) + mframe(0, body[4:]))
        f = c.frame()
        out[k] = (c.headers.get('sec-websocket-extensions'), f[0], f[1],
                  zlib.decompressobj(-15).decompress(f[2] + b'\x00\x00\xff\xff'))
        c.close()
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][1:] == (2, True, b'MSG z 1 200\r\n' + b'a' * 200 + b'\r\n')


def test_auth_timeout_close_frame(start_server):
    "A WebSocket client that never sends CONNECT gets -ERR and close 1008, as over TCP."
    out = {}
    for k, s in both(start_server, extra='authorization { token: s3cr3t, timeout: 0.5 }').items():
        c = Ws(s.ws)
        info = json.loads(c.nats(b'\r\n').split(b' ', 1)[1])
        out[k] = (info.get('auth_required'), c.nats(b'\r\n'), c.close_frame())
        c.close()
    assert out['jsnb'] == out['nats-server'] == (True, b"-ERR 'Authentication Timeout'\r\n", (1008, 'Authentication Timeout'))


def test_websocket_client_library(start_server):
    "An independent client (websocket-client) connects, subscribes and receives on both."
    out = {}
    for k, s in both(start_server).items():
        c = wsc.create_connection(f'ws://127.0.0.1:{s.ws}', timeout=5)
        assert c.recv().startswith(b'INFO ')
        c.send_binary(b'CONNECT {"verbose":false}\r\nSUB lib 1\r\nPUB lib 2\r\nhi\r\nPING\r\n')
        got = b''
        while b'PONG' not in got: got += c.recv()
        c.close()
        out[k] = got
    assert out['jsnb'] == out['nats-server'] == b'MSG lib 1 2\r\nhi\r\nPONG\r\n'


def test_server_shutdown_close_frame(start_server):
    "When the server stops, a WebSocket client gets close 1001 `Server Shutdown`."
    out = {}
    for k, s in both(start_server).items():
        c, _ = connect(s)
        s.stop()
        out[k] = c.close_frame()
        c.close()
    assert out['jsnb'] == out['nats-server'] == (1001, 'Server Shutdown')


def test_ports_file(tmp_path):
    "The ports file lists the WebSocket URLs under `websocket`, as the reference writes them."
    out = {}
    for k in KINDS:
        d = tmp_path / k; d.mkdir()
        s = ServerProc(k, config=f'ports_file_dir: "{d}"\nwebsocket {{ listen: "127.0.0.1:-1", no_tls: true }}\n').start()
        try:
            ws = int(_WS.search(s.log_text()).group(3))
            ports = s.ports_file(d)[1]
            out[k] = (sorted(ports), ports['websocket'] == [f'ws://127.0.0.1:{ws}'])
        finally: s.stop()
    assert out['jsnb'] == out['nats-server'] == (['nats', 'websocket'], True)


CONFIG_ERRORS = {
    'no tls': ('websocket { port: -1 }', 'websocket requires TLS configuration'),
    'jwt cookie': ('websocket { port: -1, no_tls: true, jwt_cookie: "jwt" }',
                   'trusted operators or trusted keys configuration is required for JWT authentication via cookie "jwt"'),
    'bad origin': ('websocket { port: -1, no_tls: true, allowed_origins: ["ftp://x.example"] }',
                   'allowed origins must be absolute URLs with http or https scheme'),
    'bad header': ('websocket { port: -1, no_tls: true, headers { Connection: "x" } }', 'websocket: invalid header "Connection" not allowed'),
    'unknown key': ('websocket { port: -1, no_tls: true, bogus: 1 }', 'unknown field "bogus"'),
}


@pytest.mark.parametrize('case', CONFIG_ERRORS)
def test_config_errors(tmp_path, case):
    "Both refuse to start, and say the same thing."
    config, text = CONFIG_ERRORS[case]
    for k in KINDS:
        (tmp_path / k).mkdir()
        s = ServerProc(k, config=config, workdir=str(tmp_path / k))
        with pytest.raises(RuntimeError, match=re.escape(text)): s.start(timeout=10)


from test_auth_reference import certs       # noqa: F401,E402  (the auth tests' throwaway CA and server certificate)


def test_wss(start_server, certs):
    "`tls` in the websocket block: `wss://`; INFO says TLS is required and available; messages flow."
    import ssl
    block = f'port: -1, tls {{ cert_file: "{certs / "server.pem"}", key_file: "{certs / "server-key.pem"}" }}'
    out = {}
    for k, s in both(start_server, block).items():
        assert _WS.search(s.log_text()).group(1) == 'wss'
        c = wsc.create_connection(f'wss://localhost:{s.ws}', timeout=5, sslopt={'ca_certs': str(certs / 'ca.pem')})
        info = json.loads(c.recv()[5:])
        c.send_binary(b'CONNECT {"verbose":false}\r\nSUB s 1\r\nPUB s 3\r\nsec\r\nPING\r\n')
        got = b''
        while b'PONG' not in got: got += c.recv()
        c.close()
        ports = get(s, '/varz')['websocket']
        out[k] = ({f: info.get(f) for f in ('tls_required', 'tls_available', 'tls_verify', 'port')}, got, {**ports, 'port': 0})
        assert info['port'] == s.ws
        out[k][0]['port'] = 0
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][:2] == ({'tls_required': True, 'tls_available': True, 'tls_verify': None, 'port': 0}, b'MSG s 1 3\r\nsec\r\nPONG\r\n')


def ws_attempt(s, connect: dict, headers=()):
    "A WebSocket client's INFO auth_required, then what it gets for CONNECT `connect` + PING, and its close frame if closed."
    c = Ws(s.ws, headers)
    info = json.loads(c.nats(b'\r\n').split(b' ', 1)[1])
    c.pub(b'CONNECT ' + json.dumps({'verbose': False, **connect}).encode() + b'\r\nPING\r\n')
    got = c.nats(b'\r\n')
    closing = c.close_frame(1.0) if b'-ERR' in got else None
    c.close()
    return info.get('auth_required'), got, closing


def tcp_attempt(s, connect: dict) -> bytes:
    t = socket.create_connection(('127.0.0.1', s.port), timeout=5)
    t.recv(65536)
    t.sendall(b'CONNECT ' + json.dumps({'verbose': False, **connect}).encode() + b'\r\nPING\r\n')
    got = t.recv(65536)
    t.close()
    return got


WS_AUTH = {
    'token override': ('', 'authorization { token: wstok }',
                       [({'auth_token': 'wstok'}, ()), ({}, ()), ({'auth_token': 'no'}, ())], [{}]),
    'user and cookies': ('', 'authorization { user: wu, password: wp, timeout: 1 }, user_cookie: nu, pass_cookie: np',
                         [({'user': 'wu', 'pass': 'wp'}, ()), ({}, ('Cookie: nu=wu; np=wp',)), ({'user': 'wu'}, ('Cookie: np=wp',)),
                          ({}, ('Cookie: nu=wu; np=bad',))], [{}]),
    'no_auth_user': ('authorization { users [{user: a, password: pa}, {user: b, password: pb}] }', 'no_auth_user: b',
                     [({}, ()), ({'user': 'a', 'pass': 'pa'}, ()), ({'user': 'a', 'pass': 'x'}, ())], [{}, {'user': 'a', 'pass': 'pa'}]),
    'connection types': ('authorization { users [{user: w, password: pw, allowed_connection_types: ["WEBSOCKET"]}, '
                         '{user: t, password: pt, allowed_connection_types: ["STANDARD"]}] }', '',
                         [({'user': 'w', 'pass': 'pw'}, ()), ({'user': 't', 'pass': 'pt'}, ())],
                         [{'user': 'w', 'pass': 'pw'}, {'user': 't', 'pass': 'pt'}]),
}


@pytest.mark.parametrize('case', WS_AUTH)
def test_websocket_authentication(start_server, case):
    "The websocket block's own authentication (override, cookies, no_auth_user) and users limited to a connection type."
    top, block, ws_cases, tcp_cases = WS_AUTH[case]
    out = {}
    for k, s in both(start_server, f'port: -1, no_tls: true, {block}'.rstrip(', '), extra=top).items():
        out[k] = ([ws_attempt(s, c, h) for c, h in ws_cases], [tcp_attempt(s, c) for c in tcp_cases])
    assert out['jsnb'] == out['nats-server']
    assert any(b'PONG' in r[1] for r in out['jsnb'][0]) and any(b'-ERR' in r[1] for r in out['jsnb'][0])


def test_websocket_ping_interval(start_server):
    "`ping_interval` in the websocket block: WebSocket clients are pinged on that schedule."
    out = {}
    for k, s in both(start_server, 'port: -1, no_tls: true, ping_interval: "300ms"').items():
        c, _ = connect(s)
        out[k] = c.nats(b'PING\r\n', timeout=10)
        c.close()
    assert out['jsnb'] == out['nats-server'] == b'PING\r\n'


def test_cluster_ws_connect_urls(tmp_path):
    "In a cluster, WebSocket clients are told the WebSocket URLs of every server (an advertised one as given)."
    out = {}
    for k in KINDS:
        for n in ('a', 'b'): (tmp_path / k / n).mkdir(parents=True)
        a = ServerProc(k, config='listen: "127.0.0.1:-1"\nhttp: "127.0.0.1:-1"\nwebsocket { listen: "127.0.0.1:-1", no_tls: true }\n'
                                 'cluster { name: c, listen: "127.0.0.1:-1" }\n', workdir=str(tmp_path / k / 'a')).start()
        try:
            route = int(re.search(r'Listening for route connections on \S+:(\d+)', a.log_text()).group(1))
            b = ServerProc(k, config='listen: "127.0.0.1:-1"\nwebsocket { listen: "127.0.0.1:-1", no_tls: true, advertise: "ws.example:443" }\n'
                                     f'cluster {{ name: c, listen: "127.0.0.1:-1", routes: ["nats://127.0.0.1:{route}"] }}\n',
                           workdir=str(tmp_path / k / 'b')).start()
            try:
                a.ws, a.http = int(_WS.search(a.log_text()).group(3)), int(re.search(r'Starting http monitor on \S+:(\d+)', a.log_text()).group(1))
                deadline = time.time() + 10
                while time.time() < deadline and 'ws_connect_urls' not in get(a, '/varz'): time.sleep(0.1)
                c = Ws(a.ws)
                info = json.loads(c.nats(b'\r\n').split(b' ', 1)[1])
                c.close()
                v = get(a, '/varz')
                own = f'127.0.0.1:{a.ws}'
                out[k] = [[u.replace(own, 'OWN') for u in info.get('connect_urls')], [u.replace(own, 'OWN') for u in v.get('ws_connect_urls')],
                          len(v.get('connect_urls') or ())]
            finally: b.stop()
        finally: a.stop()
    assert out['jsnb'] == out['nats-server']
    assert out['jsnb'][0] == ['OWN', 'ws.example:443']


def test_forwarded_for_in_log(start_server):
    "A client's `X-Forwarded-For` address is named in its log lines, before the proxy's, as the reference does."
    out = {}
    for k, s in both(start_server).items():
        c, _ = connect(s, ['X-Forwarded-For: 203.0.113.7'])
        c.send(mframe(2, b'PING\r\n', mask=False))
        c.closed()
        c.close()
        time.sleep(0.2)
        out[k] = [re.sub(r'^\[\d+\] \S+ \S+ |127\.0\.0\.1:\d+|wid:\d+', 'X', l) for l in s.log_text().splitlines() if 'read error' in l]
    assert out['jsnb'] == out['nats-server'] == ['X[ERR] 203.0.113.7/X - X - read error: mask bit missing']
