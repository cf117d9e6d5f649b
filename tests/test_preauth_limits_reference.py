"""What a peer may send before it has authenticated, on every listener, against jsnb and nats-server 2.15.1 with the
same configuration: the first operation must be `CONNECT`, so a route's `RMSG`, a leaf node's `LMSG`, a client's
`PUB` (over TCP or WebSocket) announcing a huge payload is refused at its first byte, and a `CONNECT` line that never
ends is cut at the control line limit (4096 bytes for clients, 16 times that between servers). Each flood is cut
after a few MB at most (what the kernel's socket buffers hold), the same lines are logged, the server stays up and
a client already connected goes on working. `-m soak` floods every listener from several connections at once."""
import re, socket, threading, time
import pytest
from conftest import KINDS, REF_BIN, ServerProc

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

CONF = '''authorization { user: u, password: p }
cluster { name: c, listen: "127.0.0.1:-1", authorization { user: r, password: p } }
leafnodes { listen: "127.0.0.1:-1", authorization { user: l, password: p } }
websocket { listen: "127.0.0.1:-1", no_tls: true, compression: true }
'''
WORDS = {'route': 'route connections', 'leafnode': 'leafnode connections', 'websocket': 'websocket clients'}
HUGE = 2_000_000_000
FIRST = {'route': b'RMSG $G foo %d\r\n' % HUGE, 'leafnode': b'LMSG foo %d\r\n' % HUGE, 'client': b'PUB foo 900000\r\n',
         'websocket': b'PUB foo 900000\r\n'}
CUT = 16 << 20           # more than loopback's socket buffers take in before a reset is seen (about 3 MB here)


def port_of(s, what: str) -> int:
    if what == 'client': return s.port
    return int(re.search(rf'Listening for {WORDS[what]} on \S+?:(\d+)', s.log_text()).group(1))


def ws_open(port: int) -> socket.socket:
    "A WebSocket connection past the upgrade (and the server's INFO frame), not yet authenticated."
    c = socket.create_connection(('127.0.0.1', port), timeout=5)
    c.sendall(b'GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
              b'Sec-WebSocket-Key: MDEyMzQ1Njc4OWFiY2RlZg==\r\nSec-WebSocket-Version: 13\r\n\r\n')
    got = b''
    while b'\r\n\r\n' not in got: got += c.recv(4096)
    return c


def flood(what: str, port: int, first: bytes, total: int) -> tuple[bool, int]:
    "Send `first` then junk, `total` bytes in all, as fast as the server takes them: (cut off before the end, bytes sent)."
    if what == 'websocket':
        c = ws_open(port)
        first = bytes([0x82, 0xFF]) + (total + len(first)).to_bytes(8, 'big') + b'\0\0\0\0' + first   # one endless frame, zero mask
    else:
        c = socket.create_connection(('127.0.0.1', port), timeout=5)
    c.settimeout(10)
    sent, chunk = 0, b'x' * 65536
    try:
        c.sendall(first); sent = len(first)
        while sent < total: c.sendall(chunk); sent += len(chunk)
        c.settimeout(5)                      # all taken: does the server close it now?
        while c.recv(65536): pass
        return True, sent
    except (BrokenPipeError, ConnectionResetError): return True, sent
    except socket.timeout: return False, sent
    finally: c.close()


def logged(s, since: int) -> list[str]:
    "Error and close lines logged after byte `since` of the log, without times, addresses and connection ids."
    out = []
    for line in s.log_text()[since:].splitlines():
        if '[ERR]' not in line and 'connection closed' not in line: continue
        line = re.sub(r'^\[\d+\] \S+ \S+ ', '', line)
        out.append(re.sub(r'\S+:\d+ - (cid|rid|lid|wid):\d+', 'PEER', line))
    return out


def client_works(port: int) -> bool:
    "An authenticated client gets its own message back."
    c = socket.create_connection(('127.0.0.1', port), timeout=5); c.recv(4096)
    c.sendall(b'CONNECT {"user":"u","pass":"p","verbose":false}\r\nSUB ok 1\r\nPUB ok 2\r\nhi\r\nPING\r\n')
    got, end = b'', time.time() + 5
    while b'PONG' not in got and time.time() < end: got += c.recv(4096)
    c.close()
    return b'MSG ok 1 2\r\nhi\r\n' in got


def _settle(pred, timeout=5.0):
    end = time.time() + timeout
    while not pred() and time.time() < end: time.sleep(0.05)


@pytest.fixture(scope='module')
def servers():
    "jsnb and the reference, each with a client, route, leaf node and WebSocket port that require credentials."
    out = {k: ServerProc(k, [], CONF).start() for k in KINDS}
    yield out
    for s in out.values(): s.stop()


def _keeper(port: int) -> socket.socket:
    c = socket.create_connection(('127.0.0.1', port), timeout=5); c.recv(4096)
    c.sendall(b'CONNECT {"user":"u","pass":"p","verbose":false}\r\nPING\r\n')
    got = b''
    while b'PONG' not in got: got += c.recv(4096)
    return c


def _still_there(c: socket.socket) -> bool:
    "A connection made before the flood still answers PING."
    c.sendall(b'PING\r\n'); c.settimeout(5)
    got = b''
    try:
        while b'PONG' not in got:
            d = c.recv(4096)
            if not d: return False
            got += d
    except OSError: return False
    return True


@pytest.mark.parametrize('what', ['route', 'leafnode', 'client', 'websocket'])
@pytest.mark.parametrize('start', ['payload', 'endless CONNECT'])
def test_flood_before_authentication(servers, what, start):
    """An unauthenticated peer that starts a message with a 2 GB payload, or a CONNECT line that never ends, is cut
    within a few MB; the same lines are logged; the server and a client connected before go on."""
    first = FIRST[what] if start == 'payload' else b'CONNECT {"user":"' + b'u' * 100
    got = {}
    for k, s in servers.items():
        keeper = _keeper(s.port)
        since = len(s.log_text())
        cut, sent = flood(what, port_of(s, what), first, 64 << 20)
        _settle(lambda: len(logged(s, since)) >= (1 if what in ('client', 'websocket') else 2))
        got[k] = (cut, sent < CUT, logged(s, since), _still_there(keeper), client_works(s.port), s.proc.poll() is None)
        keeper.close()
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][:2] == (True, True) and got['jsnb'][3:] == (True, True, True)


def test_compressed_message_before_authentication(servers):
    """A WebSocket client that has not authenticated sends a permessage-deflate message that inflates to 200 MB:
    both servers cut it without inflating it all, and stay up."""
    import zlib
    body = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = body.compress(b'PUB x 1\r\n' + b'\0' * (200 << 20)) + body.flush(zlib.Z_SYNC_FLUSH)
    got = {}
    for k, s in servers.items():
        c = socket.create_connection(('127.0.0.1', port_of(s, 'websocket')), timeout=5)
        c.sendall(b'GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Extensions: permessage-deflate\r\n'
                  b'Sec-WebSocket-Key: MDEyMzQ1Njc4OWFiY2RlZg==\r\nSec-WebSocket-Version: 13\r\n\r\n')
        head = b''
        while b'\r\n\r\n' not in head: head += c.recv(4096)
        p = bomb[:-4]
        c.sendall(bytes([0xC2, 0xFF]) + len(p).to_bytes(8, 'big') + b'\0\0\0\0' + p)
        c.settimeout(5)
        try:
            while c.recv(65536): pass
            closed = True
        except ConnectionResetError: closed = True
        except socket.timeout: closed = False
        c.close()
        hwm = int(re.search(r'VmHWM:\s+(\d+)', open(f'/proc/{s.proc.pid}/status').read()).group(1))
        got[k] = (b'permessage-deflate' in head, closed, hwm < 150_000, client_works(s.port))
    assert got['jsnb'] == got['nats-server'] == (True, True, True, True)


@pytest.mark.soak
def test_flood_soak(servers):
    """Every listener flooded from 4 connections at once, 10 rounds of 256 MB each: every flood is cut, the memory
    stays bounded, and a client connected all along keeps getting its messages back."""
    for k, s in servers.items():
        keeper = _keeper(s.port)
        for _ in range(10):
            results = []
            def one(what):
                results.append(flood(what, port_of(s, what), FIRST[what], 256 << 20))
            ts = [threading.Thread(target=one, args=(w,)) for w in FIRST for _ in range(4)]
            for t in ts: t.start()
            for t in ts: t.join()
            assert all(cut and sent < CUT for cut, sent in results), (k, results)
            assert _still_there(keeper) and client_works(s.port), k
        hwm = int(re.search(r'VmHWM:\s+(\d+)', open(f'/proc/{s.proc.pid}/status').read()).group(1))
        assert hwm < 200_000, (k, hwm)
        keeper.close()
