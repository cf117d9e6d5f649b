"""Bad input, byte for byte: each case runs against jsnb and the reference nats-server.

For every case the test records what the server answers and whether it closes the
connection, compares jsnb with the reference, and checks that another client is still
served afterwards (the server and other connections stay up)."""
import pytest
from rawclient import Raw

C = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
PED = b'CONNECT {"verbose":false,"pedantic":true}\r\n'
VERB = b'CONNECT {"verbose":true,"pedantic":false}\r\n'

CASES = {
    'ping': (C, b'PING\r\n'),
    'ping_trailing_text': (C, b'PING extra\r\n'),
    'unknown_op': (C, b'FOO bar\r\n'),
    'empty_line': (C, b'\r\nPING\r\n'),
    'msg_from_client': (C, b'MSG foo 1 2\r\nhi\r\n'),
    'pub_no_size': (C, b'PUB foo\r\n'),
    'pub_bad_size': (C, b'PUB foo abc\r\nhi\r\n'),
    'pub_negative_size': (C, b'PUB foo -1\r\n'),
    'pub_too_many_args': (C, b'PUB foo bar baz 2\r\nhi\r\n'),
    'pub_payload_too_long': (C, b'PUB foo 2\r\nhello\r\n'),
    'pub_bad_trailer': (C, b'PUB foo 2\r\nhiXYPING\r\n'),
    'max_payload': (C, b'PUB foo 2000000\r\n'),
    'max_payload_hpub': (C, b'HPUB foo 12 1048577\r\n'),
    'control_line_too_long': (C, b'PUB ' + b'a' * 5000 + b' 2\r\nhi\r\n'),
    'control_line_no_newline': (C, b'SUB ' + b'a' * 5000),
    'sub_no_args': (C, b'SUB\r\n'),
    'sub_one_arg': (C, b'SUB foo\r\n'),
    'sub_too_many_args': (C, b'SUB a b c d\r\n'),
    'sub_invalid_subject': (C, b'SUB foo..bar 1\r\nPING\r\n'),
    'sub_invalid_subject_trailing_dot': (C, b'SUB foo. 1\r\nPING\r\n'),
    'sub_fwc_not_last': (C, b'SUB foo.>.bar 1\r\nPING\r\n'),
    'unsub_no_args': (C, b'UNSUB\r\n'),
    'unsub_bad_max': (C, b'UNSUB 1 x\r\nPING\r\n'),
    'unsub_unknown_sid': (C, b'UNSUB 99\r\nPING\r\n'),
    'hpub_header_bigger_than_total': (C, b'HPUB foo 20 10\r\n'),
    'hpub_without_headers_option': (b'CONNECT {"verbose":false,"headers":false}\r\n', b'SUB h 1\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n'),
    'connect_bad_json': (b'', b'CONNECT {bad json\r\nPING\r\n'),
    'connect_no_arg': (b'', b'CONNECT\r\nPING\r\n'),
    'connect_wrong_type': (b'', b'CONNECT {"verbose":"yes"}\r\nPING\r\n'),
    'connect_unknown_field': (b'', b'CONNECT {"verbose":false,"zzz":1}\r\nPING\r\n'),
    'client_err': (C, b"-ERR 'x'\r\n"),
    'client_ok_and_info': (C, b'+OK\r\nINFO {}\r\nPONG\r\nPING\r\n'),
    'lowercase_and_tabs': (C, b'sub\tfoo\t1\r\npub foo 2\r\nhi\r\nPING\r\n'),
    'bare_newlines': (C, b'SUB foo 1\nPUB foo 2\nhi\r\nPING\r\n'),
    'pedantic_wildcard_publish': (PED, b'SUB foo.* 1\r\nPUB foo.* 2\r\nhi\r\nPING\r\n'),
    'pedantic_invalid_publish': (PED, b'PUB foo..x 2\r\nhi\r\nPING\r\n'),
    'pedantic_invalid_subscribe': (PED, b'SUB foo..x 1\r\nPING\r\n'),
    'verbose_acks': (VERB, b'SUB x 1\r\nPUB x 2\r\nhi\r\nUNSUB 1\r\nUNSUB 7\r\nSUB a..b 2\r\nPING\r\n'),
    'defaults_before_connect': (b'', b'PUB foo 2\r\nhi\r\nPING\r\n'),
    'omitted_pedantic_defaults_on': (b'', b'CONNECT {"verbose":false}\r\nPUB foo.* 2\r\nhi\r\nPING\r\n'),
    'duplicate_sid_ignored': (C, b'SUB d 1\r\nSUB e 1\r\nPUB d 1\r\na\r\nPUB e 1\r\nb\r\nPING\r\n'),
    'unsub_max': (C, b'SUB u 1\r\nUNSUB 1 2\r\nPUB u 1\r\na\r\nPUB u 1\r\nb\r\nPUB u 1\r\nc\r\nPING\r\n'),
    'unsub_max_already_reached': (C, b'SUB u 1\r\nPUB u 1\r\na\r\nUNSUB 1 1\r\nPUB u 1\r\nb\r\nPING\r\n'),
    'echo_off': (b'CONNECT {"verbose":false,"echo":false}\r\n', b'SUB e 1\r\nPUB e 2\r\nhi\r\nPING\r\n'),
    'no_responders': (C, b'SUB inbox.1 9\r\nPUB nobody inbox.1 0\r\n\r\nPING\r\n'),
    'no_responders_not_requested': (b'CONNECT {"verbose":false,"headers":true}\r\n', b'SUB inbox.1 9\r\nPUB nobody inbox.1 0\r\n\r\nPING\r\n'),
    'headers_byte_exact': (C, b'SUB h 1\r\nHPUB h r 31 33\r\nNATS/1.0\r\nA: b\r\nA:  c \r\nX:y\r\n\r\nhi\r\nPING\r\n'),
    'headers_to_client_without_headers': (b'CONNECT {"verbose":false,"headers":false}\r\n', b'SUB h 1\r\nPING\r\n'),
    'queue_and_plain': (C, b'SUB q g 1\r\nSUB q g 2\r\nSUB q 3\r\nPUB q 1\r\na\r\nPING\r\n'),
    'wildcard_in_publish_subject': (C, b'SUB foo.* 1\r\nSUB foo.> 2\r\nPUB foo.* 2\r\nhi\r\nPING\r\n'),
}


def normalise(case, out: bytes) -> bytes:
    "Remove what legitimately differs (which queue member won a random draw)."
    if case == 'queue_and_plain': return out.replace(b'MSG q 2 ', b'MSG q 1 ')
    return out


def run_case(port, case):
    connect, payload = CASES[case]
    r = Raw(port, connect)
    r.send(payload)
    out, closed = r.read()
    r.close()
    return normalise(case, out), closed


def also_still_serving(port):
    "Another client connects and is answered: the server is up and serving."
    other = Raw(port)
    other.send(b'PING\r\n')
    out = other.until(b'PONG\r\n', timeout=2)
    other.close()
    assert out.startswith(b'PONG\r\n'), out


@pytest.mark.reference
@pytest.mark.parametrize('case', sorted(CASES))
def test_same_answer_as_reference(case, start_server):
    ref, ours = start_server('nats-server'), start_server('jsnb')
    if case == 'headers_to_client_without_headers':
        results = [headers_to_plain_client(s.port) for s in (ref, ours)]
    else:
        results = [run_case(s.port, case) for s in (ref, ours)]
    assert results[1] == results[0], f'{case}: jsnb {results[1]!r} != reference {results[0]!r}'
    also_still_serving(ours.port)


def headers_to_plain_client(port):
    "A message published with headers, received by a client that did not announce header support."
    sub = Raw(port, b'CONNECT {"verbose":false,"headers":false}\r\n')
    sub.send(b'SUB h 1\r\nPING\r\n'); sub.until(b'PONG')
    pub = Raw(port)
    pub.send(b'HPUB h 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\nPING\r\n'); pub.until(b'PONG')
    out = sub.read(0.3)
    sub.close(); pub.close()
    return out


@pytest.mark.reference
@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
def test_auth_errors(kind, start_server):
    s = start_server(kind, '--user', 'alice', '--pass', 'secret')
    for connect in [b'CONNECT {"verbose":false,"user":"alice","pass":"bad"}\r\nPING\r\n',
                    b'CONNECT {"verbose":false}\r\nPING\r\n', b'PING\r\n', b'PUB a 1\r\nx\r\n']:
        r = Raw(s.port, None)
        assert b'"auth_required":true' in r.info
        r.send(connect)
        assert r.read() == (b"-ERR 'Authorization Violation'\r\n", True), connect
    r = Raw(s.port, b'CONNECT {"verbose":false,"user":"alice","pass":"secret"}\r\nPING\r\n')
    assert r.read() == (b'PONG\r\n', False)


@pytest.mark.reference
@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
def test_auth_timeout(kind, start_server):
    s = start_server(kind, '--auth', 'tok')
    r = Raw(s.port, None)
    assert r.read(3.5) == (b"-ERR 'Authentication Timeout'\r\n", True)


@pytest.mark.reference
@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
def test_stale_connection(kind, start_server):
    s = start_server(kind, config='ping_interval: "200ms"\nping_max: 2\n')
    r = Raw(s.port)
    out = r.until(b'Stale Connection', timeout=5)
    assert out == b"PING\r\nPING\r\n-ERR 'Stale Connection'\r\n"
    assert r.read(1) == (b'', True)
    also_still_serving(s.port)


@pytest.mark.reference
@pytest.mark.parametrize('kind', ['nats-server', 'jsnb'])
def test_pong_keeps_connection(kind, start_server):
    s = start_server(kind, config='ping_interval: "100ms"\nping_max: 2\n')
    r = Raw(s.port)
    for _ in range(6):
        assert r.until(b'PING\r\n', timeout=3).endswith(b'PING\r\n')
        r.send(b'PONG\r\n')
    r.send(b'PING\r\n')
    assert b'PONG\r\n' in r.until(b'PONG\r\n')
