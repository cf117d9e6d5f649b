"""Monitoring over TLS (`https`, `https_port`) against the reference: the same configuration run by jsnb and
nats-server 2.15.1 must serve the endpoints over TLS with the `tls {}` certificate (no client certificate asked even
when the client port verifies them), answer plain HTTP on that port the same way, and refuse the same start-ups."""
import json, re, socket, ssl, time, urllib.request

import pytest

from conftest import KINDS, REF_BIN
from test_auth_reference import certs, client_tls, tls_conf, log_lines, run_briefly, nats_outcome  # noqa: F401 (fixture)

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

_MON = re.compile(r'Starting (https?) monitor on (\S+):(\d+)')


def monitor(server):
    "(scheme, port) of the monitor the server's log announces."
    m = _MON.search(server.log_text())
    return m.group(1), int(m.group(3))


def get(port, path, ctx) -> dict:
    with urllib.request.urlopen(f'https://127.0.0.1:{port}{path}', context=ctx, timeout=5) as r: return json.loads(r.read())


def raw(port, data: bytes) -> bytes:
    s = socket.create_connection(('127.0.0.1', port), timeout=5)
    s.sendall(data); out = b''
    try:
        while d := s.recv(4096): out += d
    except (socket.timeout, ConnectionResetError): pass
    s.close(); return out


@pytest.mark.parametrize('how', ['https: "127.0.0.1:-1"', 'https_port: -1'])
def test_endpoints_over_tls(start_server, certs, how):
    conf = tls_conf(certs, f'  ca_file: "{certs}/ca.pem"\n  verify: true\n') + how + '\n'
    servers = {k: start_server(k, config=conf) for k in KINDS}
    got = {}
    for k, s in servers.items():
        scheme, port = monitor(s)
        v = get(port, '/varz', client_tls(certs))                 # no client certificate: the monitor does not ask for one
        c = get(port, '/connz', client_tls(certs))
        h = get(port, '/healthz', client_tls(certs))
        got[k] = dict(scheme=scheme, https_port=v['https_port'], http_port=v['http_port'],
                      tls=(v.get('tls_required'), v.get('tls_verify')), connz=sorted(c) and c['num_connections'], healthz=h,
                      http_host=v['http_host'] if how.startswith('https:') else None,
                      plain=raw(port, b'GET /varz HTTP/1.1\r\nHost: x\r\n\r\n'), garbage=raw(port, b'hello there\r\n'))
        for _ in range(100):                                      # the reference writes these lines after answering
            if len(log_lines(s, 'monitoring: TLS handshake error')) >= 2: break
            time.sleep(0.05)
        got[k]['logs'] = sorted(re.sub(r'from \S+:', 'from ADDR:', l) for l in log_lines(s, 'monitoring: TLS handshake error'))
    assert got['jsnb'] == got['nats-server']
    j = got['jsnb']
    assert j['scheme'] == 'https' and j['https_port'] == -1 and j['http_port'] == 0 and j['healthz'] == {'status': 'ok'}
    assert j['plain'] == b'HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n'
    assert j['garbage'] == b'' and len(j['logs']) == 2
    with pytest.raises(Exception): get(monitor(servers['jsnb'])[1], '/varz', ssl.create_default_context())   # unknown CA


def test_https_flag(start_server, certs):
    servers = {k: start_server(k, '-ms', '-1', config=tls_conf(certs)) for k in KINDS}
    for s in servers.values():
        scheme, port = monitor(s)
        assert scheme == 'https' and get(port, '/varz', client_tls(certs))['https_port'] == -1, s.kind


@pytest.mark.parametrize('case', ['no tls', 'both ports'])
def test_refused_start(tmp_path, certs, case):
    conf = {'no tls': 'https_port: -1\n', 'both ports': tls_conf(certs) + 'https_port: -1\nhttp_port: -1\n'}[case]
    said = {'no tls': "Can't start monitoring: TLS cert and key required for HTTPS",
            'both ports': "Can't start monitoring: can't specify both HTTP (-1) and HTTPs (-1) ports"}[case]
    path = tmp_path / 'm.conf'; path.write_text(conf)
    out = {k: run_briefly(k, path, seconds=15) for k in KINDS}
    for k, (rc, text) in out.items():
        assert rc == 1, (k, rc, text)
        assert said in text, (k, text)
