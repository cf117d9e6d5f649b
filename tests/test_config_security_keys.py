"""Every configuration key jsnb's reader knows is accounted for: refused at start (checked by
`test_auth_reference.test_every_key_jsnb_does_not_implement_is_refused`), or security-relevant and enforced (with the
differential test that shows it named here, and that test must exist), or not security-relevant (named here too).
A key added to the reader without being placed in one of these lists fails this test. The server-wide limits that
had no differential test of their own get one here."""
import ast, pathlib

import pytest

from conftest import KINDS, REF_BIN
from rawclient import Raw

HERE = pathlib.Path(__file__).parent

# security-relevant keys jsnb implements -> the test (file::function) that compares them with the reference
ENFORCED = {
    'top': {
        **dict.fromkeys(['authorization'], 'test_auth_reference.py::test_users_plain_and_bcrypt'),
        **dict.fromkeys(['accounts'], 'test_accounts_reference.py::test_isolation_and_imports'),
        **dict.fromkeys(['no_auth_user'], 'test_auth_reference.py::test_no_auth_user'),
        **dict.fromkeys(['tls'], 'test_auth_reference.py::test_tls_client_certificates'),
        'allow_non_tls': 'test_tls_map_reference.py::test_allow_non_tls',
        **dict.fromkeys(['https', 'https_port'], 'test_https_monitor_reference.py::test_endpoints_over_tls'),
        **dict.fromkeys(['max_subscriptions', 'max_subs'], 'test_auth_reference.py::test_max_subscriptions'),
        **dict.fromkeys(['max_connections', 'max_conn'], 'test_config_security_keys.py::test_server_connection_limit'),
        **dict.fromkeys(['max_payload'], 'test_config_security_keys.py::test_server_payload_limit'),
        **dict.fromkeys(['operator', 'operators', 'root', 'root_operator', 'root_operators', 'roots', 'resolver', 'resolver_preload',
                         'account_resolver', 'accounts_resolver'], 'test_jwt_reference.py::test_who_gets_in'),
        **dict.fromkeys(['trusted', 'trusted_keys'], 'test_jwt_reference.py::test_operator_signing_keys_and_strict_use'),
        **dict.fromkeys(['resolver_pinned_accounts', 'system_account', 'system'], 'test_jwt_reference.py::test_user_info'),
        **dict.fromkeys(['websocket', 'ws'], 'test_websocket_reference.py::test_websocket_authentication'),
        **dict.fromkeys(['leafnodes', 'leaf'], 'test_leafnodes_reference.py::test_refused_login'),
    },
    'authorization': {
        **dict.fromkeys(['user', 'username', 'password', 'pass', 'token'], 'test_auth_reference.py::test_single_user_or_token'),
        **dict.fromkeys(['users'], 'test_auth_reference.py::test_users_plain_and_bcrypt'),
        **dict.fromkeys(['permissions', 'default_permissions', 'default_permission'],
                        'test_auth_reference.py::test_publish_and_subscribe_permissions'),
        'timeout': 'test_auth_reference.py::test_auth_timeout',
    },
    'tls': {
        **dict.fromkeys(['cert_file', 'key_file', 'timeout'], 'test_auth_reference.py::test_tls_after_info'),
        **dict.fromkeys(['ca_file', 'verify'], 'test_auth_reference.py::test_tls_client_certificates'),
        **dict.fromkeys(['handshake_first', 'first', 'immediate'], 'test_auth_reference.py::test_tls_handshake_first'),
        'verify_and_map': 'test_tls_map_reference.py::test_users_mapped_from_certificates',
        'min_version': 'test_auth_reference.py::test_check_accepts_like_the_reference',
    },
    'cluster': {
        'tls': 'test_route_tls_reference.py::test_mixed_cluster_over_tls',
        'authorization': 'test_cluster_security_reference.py::test_route_password_hash',
    },
    'cluster.authorization': {
        **dict.fromkeys(['user', 'username', 'password', 'pass'], 'test_internal_security_reference.py::test_bcrypt_passwords_of_routes_and_leaf_nodes'),
        'timeout': 'test_cluster_security_reference.py::test_silent_route_peer_timed_out',
    },
    'account': {
        **dict.fromkeys(['users', 'exports', 'imports'], 'test_accounts_reference.py::test_isolation_and_imports'),
        'default_permissions': 'test_security_matrix_reference.py::test_matrix',
        'jetstream': 'test_accounts_reference.py::test_account_limits',
        'limits': 'test_config_account_limits_reference.py::test_account_limits',
    },
}

# keys of the reader's tables that do not decide who connects, what they see or whether traffic is encrypted
NOT_SECURITY = {
    'top': set('cluster debug host http http_port jetstream lame_duck_duration lame_duck_grace_period listen log_file logfile '
               'max_control_line max_pending max_pings_outstanding monitor_port net pid_file pidfile ping_interval ping_max '
               'port ports_file_dir server_name server_tags store_dir storedir trace write_deadline'.split()),
    'authorization': set(),
    'cluster': set('advertise cluster_advertise compression connect_backoff connect_retries host listen name net no_advertise '
                   'pool_size port routes'.split()),
    'jetstream': set('domain enable enabled max_buffered_msgs max_buffered_size max_file max_file_store max_mem max_mem_store '
                     'max_memory_store store store_dir storedir sync sync_interval'.split()),
}


def _test_exists(ref: str) -> bool:
    f, name = ref.split('::')
    tree = ast.parse((HERE / f).read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def test_every_key_is_accounted_for():
    from jsnb.nats import config
    for table, block in ((config._TOP_KEYS, 'top'), (config._AUTH_KEYS, 'authorization'), (config._JS_KEYS, 'jetstream'),
                         (config._CLUSTER_KEYS, 'cluster'), (config._CLUSTER_AUTH_KEYS, 'cluster.authorization')):
        for key, entry in table.items():
            if entry is None: continue                  # refused at start, walked by test_auth_reference
            enforced, other = key in ENFORCED.get(block, {}), key in NOT_SECURITY.get(block, set())
            assert enforced != other, f'{block}.{key}: place it in ENFORCED (with its test) or NOT_SECURITY, and in one only'


def test_tls_and_account_keys_are_accounted_for():
    "The keys of the `tls {}` and account blocks are read in code, not tables: every one the reference has is placed."
    from jsnb.nats.tls import parse_tls, _TLS_LATER
    from jsnb.nats.accounts import _ACCOUNT_LATER, parse_accounts
    from jsnb.nats.credentials import AuthConfigError
    for key in ENFORCED['tls']:
        try: parse_tls({key: 'not a valid value'})
        except AuthConfigError as e: assert 'unknown field' not in str(e), key      # read (and checked), not unknown
    assert not set(ENFORCED['tls']) & _TLS_LATER
    for key in ENFORCED['account']:
        assert key not in _ACCOUNT_LATER
        try: parse_accounts({'A': {key: 'not a valid value'}})
        except AuthConfigError as e: assert 'unknown field' not in str(e).lower(), key


@pytest.mark.parametrize('block', sorted(ENFORCED))
def test_the_named_tests_exist(block):
    missing = sorted({ref for ref in ENFORCED[block].values() if not _test_exists(ref)})
    assert not missing


# ---------------------------------------------------------------- server-wide limits, against the reference

ref_only = pytest.mark.skipif(REF_BIN is None, reason='reference nats-server not installed')


def _session(port, then=b'PING\r\n'):
    r = Raw(port, connect=b'CONNECT {"verbose":false,"pedantic":false}\r\n' + then)
    return r, r.read(0.4)


@ref_only
def test_server_connection_limit(start_server):
    servers = {k: start_server(k, config='max_connections: 2\n') for k in KINDS}
    got = {}
    for k, s in servers.items():
        keep = [_session(s.port) for _ in range(3)]
        got[k] = [x[1] for x in keep]
        for r, _ in keep: r.close()
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][2] == (b"-ERR 'maximum connections exceeded'\r\n", True)


@ref_only
def test_server_payload_limit(start_server):
    servers = {k: start_server(k, config='max_payload: 8\n') for k in KINDS}
    got = {}
    for k, s in servers.items():
        r, first = _session(s.port, b'PUB x 8\r\n12345678\r\nPUB x 9\r\n123456789\r\nPING\r\n')
        got[k] = (first, Raw(s.port, connect=None).info and b'"max_payload":8' in Raw(s.port, connect=None).info)
        r.close()
    assert got['jsnb'] == got['nats-server']
    assert got['jsnb'][0] == (b"-ERR 'Maximum Payload Violation'\r\n", True) and got['jsnb'][1]
