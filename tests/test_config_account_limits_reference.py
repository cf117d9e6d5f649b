"""`limits {}` of configured accounts against the reference: the same configuration run by jsnb and nats-server
2.15.1 must admit the same number of connections per account, cut subscriptions and payloads at the same place with
the same errors, and refuse the same mistakes in the block."""
import pytest

from conftest import KINDS, REF_BIN
from rawclient import Raw
from test_auth_reference import check_config, log_lines

pytestmark = [pytest.mark.reference, pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')]

LIMITS = '''
accounts {
  A: { users: [ {user: a, password: a}, {user: a2, password: a} ], limits { max_conn: 2, max_subs: 2, max_payload: 16 } }
  B: { users: [ {user: b, password: b} ], limits { max_connections: 1, max_subscriptions: 0 } }
  C: { users: [ {user: c, password: c} ], limits { max_pay: 8, max_leafs: 1 } }
}
max_subscriptions: 5
'''


def login(port, user):
    r = Raw(port, connect=f'CONNECT {{"verbose":false,"pedantic":false,"user":"{user}","pass":"{user[0]}"}}\r\nPING\r\n'.encode())
    return r, r.read(0.4)


def scenario(port) -> list:
    out, keep = [], []
    for u in ('a', 'a2', 'a'):                       # the third connection of A is over its max_conn
        r, got = login(port, u); keep.append(r); out.append((u, got))
    a = keep[0]
    out.append(('subs', a.send(b'SUB x 1\r\nSUB y 2\r\nSUB z 3\r\nPING\r\n').read(0.4)))
    out.append(('payload ok', a.send(b'PUB x 16\r\n0123456789abcdef\r\nPING\r\n').read(0.4)))
    out.append(('payload over', a.send(b'PUB x 17\r\n0123456789abcdefg\r\nPING\r\n').read(0.4)))
    r, got = login(port, 'b'); keep.append(r)     # -ERR comes from a goroutine: before or after the PONG (lines sorted)
    out.append(('b: no subscription allowed', (sorted(got[0].splitlines()), got[1])))
    r, got = login(port, 'c'); keep.append(r); out.append(('c', got))
    out.append(('c payload over', r.send(b'PUB x 9\r\n012345678\r\nPING\r\n').read(0.4)))
    for r in keep: r.close()
    r, got = login(port, 'a'); out.append(('a again, once the others left', got)); r.close()
    return out


def test_account_limits(start_server):
    servers = {k: start_server(k, config=LIMITS) for k in KINDS}
    got = {k: scenario(s.port) for k, s in servers.items()}
    assert got['jsnb'] == got['nats-server']
    said = dict(got['jsnb'])
    assert got['jsnb'][2][1] == (b"-ERR 'maximum account active connections exceeded'\r\n", True)
    assert b"-ERR 'maximum subscriptions exceeded'" in said['subs'][0]
    assert said['payload over'] == (b"-ERR 'Maximum Payload Violation'\r\n", True)
    assert said['b: no subscription allowed'] == ([b"-ERR 'maximum subscriptions exceeded'", b'PONG'], True)
    logs = {k: log_lines(s, 'maximum account active connections') for k, s in servers.items()}
    assert logs['jsnb'] and [x.split(' - ', 1)[-1] for x in logs['jsnb']] == [x.split(' - ', 1)[-1] for x in logs['nats-server']]


BAD = {
    'unknown field': ('accounts { A: { limits { max_conn: 1, bogus: 3 } } }', 'Unknown field "bogus" parsing account limits'),
    'not a number': ('accounts { A: { limits { max_subs: "x" } } }', 'interface conversion: interface {} is string, not int64'),
    'not a block': ('accounts { A: { limits: 5 } }', 'Expected account limits to be a map/struct, got 5'),
}


@pytest.mark.parametrize('case', list(BAD))
def test_limits_mistakes(tmp_path, case):
    conf, msg = BAD[case]
    path = tmp_path / 'bad.conf'; path.write_text(conf + '\n')
    out = {k: check_config(k, path) for k in KINDS}
    assert all(rc != 0 and msg in text for rc, text in out.values()), out
