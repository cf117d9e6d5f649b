"""Differential tests: `jsnb.nats.config` against the reference `nats-server` (2.15.1).

`nats-server -t -c FILE` checks a configuration file and, when it is valid, prints the sha256 of the
parsed configuration encoded as JSON. Encoding jsnb's parse the same way and comparing the digests shows
that both read exactly the same values, not just that both accept the file. A running reference server
also reports the options it applied in `/varz`, which `options_from_config` must match.
"""
import hashlib, json, math, os, re, shutil, socket, subprocess, time, urllib.request
from datetime import datetime

import pytest

from jsnb.nats.conf_format import ConfigError, load_config
from jsnb.nats.config import options_from_config

NATS = shutil.which("nats-server")
pytestmark = [pytest.mark.skipif(NATS is None, reason="nats-server is not on PATH"), pytest.mark.reference]


def ref_check(path, env=None):
    "Run `nats-server -t -c path`: (valid, digest or None, message)."
    r = subprocess.run([NATS, "-t", "-c", str(path)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **(env or {})})
    m = re.search(r"\(sha256:([0-9a-f]{64})\)", r.stderr)
    return r.returncode == 0, m and m[1], r.stderr.strip()


def go_json(v) -> str:
    "Encode `v` the way Go's encoding/json does for the reference's config digest."
    if isinstance(v, dict): return "{" + ",".join(f"{go_json(k)}:{go_json(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, list): return "[" + ",".join(go_json(o) for o in v) + "]"
    if isinstance(v, bool): return "true" if v else "false"
    if isinstance(v, int): return str(v)
    if isinstance(v, float): return str(int(v)) if v.is_integer() and abs(v) < 1e21 else repr(v)
    if isinstance(v, datetime): v = v.strftime("%Y-%m-%dT%H:%M:%SZ")
    s = json.dumps(v, ensure_ascii=False)
    for c, e in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(c, e)
    return s


def digest(d) -> str: return hashlib.sha256((go_json(d) + "\n").encode()).hexdigest()


def write(tmp_path, files):
    "Write `{name: text}` under tmp_path (with `{tmp}` replaced); return the path of the first one."
    paths = []
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text.replace("{tmp}", str(tmp_path)))
        paths.append(p)
    return paths[0]


# (id, files, environment, expected ServerOptions values)
VALID = [
    ("realistic", {"jsnb.conf": """
# a realistic server
port: 4333
server_name: "edge-1"
http_port: 8333
ping_interval: "30s"
write_deadline: '5s'
max_payload: 2MB
jetstream {
  store_dir: "{tmp}/js"
  max_mem: 1G
  max_file: "2G"
}
authorization {
  user: app
  password: "s3cret"
  timeout: 3
}
"""}, {}, dict(port=4333, server_name="edge-1", http_port=8333, ping_interval=30.0, write_deadline=5.0,
               max_payload=2 << 20, jetstream=True, max_memory_store=10**9, max_file_store=2 << 30,
               user="app", password="s3cret", auth_timeout=3.0)),
    ("separators", {"a.conf": "port = 4333\nserver_name: sep\nmax_payload 65536\n"
                              "debug: yes; trace: OFF\nping_max 5, max_connections: 100 # end\n// last\n"},
     {}, dict(port=4333, server_name="sep", max_payload=65536, debug=True, trace=False, ping_max=5, max_connections=100)),
    ("json-like", {"a.conf": '{\n  "port": 4333,\n  "server_name": "json",\n  "max_payload": 1024\n}\n'},
     {}, dict(port=4333, server_name="json", max_payload=1024)),
    ("quoted and upper-case keys", {"a.conf": "\"port\": 4333\n'server_name': q\nMAX_PAYLOAD: 2048\nDebug: true\n"},
     {}, dict(port=4333, server_name="q", max_payload=2048, debug=True)),
    ("variables", {"a.conf": """
PORT = 4333
NAME: "vars"
port: $PORT
server_name: $NAME
jetstream {
  SIZE = 1GB
  max_mem: $SIZE
  max_file: $SIZE
  store_dir: "{tmp}/js"
}
"""}, {}, dict(port=4333, server_name="vars", max_memory_store=1 << 30, max_file_store=1 << 30, jetstream=True)),
    ("environment", {"a.conf": "port: $JSNB_REF_PORT\nserver_name: $JSNB_REF_NAME\nmax_payload: $JSNB_REF_SIZE\n"},
     {"JSNB_REF_PORT": "4444", "JSNB_REF_NAME": "from-env", "JSNB_REF_SIZE": "512KB"},
     dict(port=4444, server_name="from-env", max_payload=512 << 10)),
    ("includes", {"main.conf": "port: 4333\ninclude 'sub/limits.conf'\nauthorization {\n  include \"auth.conf\"\n}\n",
                  "sub/limits.conf": "max_payload: 64KB\nmax_pending: 32MB\ninclude more.conf\n",
                  "sub/more.conf": "server_name: inc\n",
                  "auth.conf": "token: t0k\n"},
     {}, dict(port=4333, max_payload=65536, max_pending=32 << 20, server_name="inc", token="t0k")),
    ("arrays and nested blocks", {"a.conf": """
server_tags: ["region:eu", zone, 'rack:1',]
accounts {
  A {
    users: [
      {user: a, password: b}   # one
      {user: c, password: d}   // two
    ]
  }
  B: { users = [ {user: e, password: f} ] }
}
"""}, {}, dict(server_tags=("region:eu", "zone", "rack:1"))),
    ("strings and escapes", {"a.conf": "logfile: \"/tmp/a\\x41\\tb.log\"\npid_file: /tmp/x\\x42.pid\n"
                                       "server_name: 'lit\\n'\nlisten: 127.0.0.1:4333\nhttp: localhost:8333\n"},
     {}, dict(logfile="/tmp/aA\tb.log", pid_file="/tmp/xB.pid", server_name="lit\\n", host="127.0.0.1", port=4333,
              http_host="localhost", http_port=8333)),
    ("raw text", {"a.conf": "logfile: (\n/tmp/raw.log\n)\nport: 4333\n"}, {}, dict(logfile="\n/tmp/raw.log\n", port=4333)),
    ("numbers", {"a.conf": "max_payload: 1MB\nmax_pending: 64MB\nmax_control_line: 8KB\nmax_connections: 1K\n"
                           "authorization { token: abc, timeout: 1.5 }\nlisten :4333\n"},
     {}, dict(max_payload=1 << 20, max_pending=64 << 20, max_control_line=8192, max_connections=1000,
              auth_timeout=1.5, port=4333)),
    ("jetstream forms", {"a.conf": "jetstream: enabled\nstore_dir: '{tmp}/sd'\n"}, {}, dict(jetstream=True)),
    ("jetstream block disabled", {"a.conf": "jetstream { enabled: false, max_mem: 64MB }\n"},
     {}, dict(jetstream=False, max_memory_store=64 << 20)),
    ("durations", {"a.conf": "ping_interval: \"1h30m\"\nwrite_deadline: \"500ms\"\nauthorization { user: u, pass: p, timeout: \"2s\" }\n"},
     {}, dict(ping_interval=5400.0, write_deadline=0.5, user="u", password="p", auth_timeout=2.0)),
    ("bcrypt password", {"a.conf": "authorization { user: a, password: $2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG }\n"},
     {}, dict(user="a", password="$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG")),
    ("unquoted oddities", {"a.conf": "server_name: 10ms\nlogfile: abc#def\npid_file: 1e5'\nhost: 0.0.0.0\n"},
     {}, dict(server_name="10ms", logfile="abc#def", pid_file="1e5", host="0.0.0.0")),
    ("any free port", {"a.conf": "listen: 127.0.0.1:-1\n"}, {}, dict(host="127.0.0.1", port=-1)),
]


@pytest.mark.parametrize("name,files,env,expected", VALID, ids=[c[0] for c in VALID])
def test_valid_configs_agree(tmp_path, monkeypatch, name, files, env, expected):
    path = write(tmp_path, files)
    ok, ref_digest, msg = ref_check(path, env)
    assert ok, f"the reference refuses the {name!r} case: {msg}"
    for k, v in env.items(): monkeypatch.setenv(k, v)
    d = load_config(path)
    assert digest(d) == ref_digest, f"jsnb parsed {d!r}, which is not what the reference parsed"
    if expected is None:                  # read alike, but options jsnb does not implement: refused
        with pytest.raises(ConfigError, match="jsnb does not support"): options_from_config(d)
        return
    opts, warns = options_from_config(d)
    for field, value in expected.items():
        assert getattr(opts, field) == value, field


# Files both must refuse while reading them (syntax, variables, includes).
SYNTAX_ERRORS = [
    "port:\n",
    "port = 4222\nserver_name: \"abc\n",
    "server_name: 'abc\n",
    "jetstream {\n max_mem: 1G\n",
    "server_tags = [a, b\n",
    "server_tags = [,a]\n",
    'server_name: "a\\qb"\n',
    'server_name: "a\\xZZb"\n',
    "port: $JSNB_REF_NOT_SET\n",
    "port = $p\np = 4333\n",
    ": 4222\n",
    "port: .5\n",
    "port: 1.\n",
    "ping_interval: 1.5s\n",
    "port: 12-3\n",
    "port: 99999999999999999999\n",
    "max_payload: 1kbb\n",
    "port: -x\n",
    "server_name: (\nabc\n",
    "port 4222 4223\n",
    "port: 4222 ;;\n",
    'server_name: "abc" x\n',
    "jetstream { max_mem: 1G ] }\n",
    "jetstream { max_mem: 1G,, max_file: 1G }\n",
    "jetstream{ max_mem: 1G }\n",
    "include nope.conf\n",
    "include\n",
    "include {a: 1}\n",
    "port\n",
    '"port: 4222\n',
    "server_name: it's\n",
]


@pytest.mark.parametrize("text", SYNTAX_ERRORS)
def test_syntax_errors_agree(tmp_path, text):
    path = write(tmp_path, {"bad.conf": text})
    ok, _, msg = ref_check(path)
    assert not ok, f"the reference accepts {text!r}"
    with pytest.raises(ConfigError) as e: load_config(path)
    assert re.match(rf"{re.escape(str(path))}:\d+: ", str(e.value)), str(e.value)  # names the file and the line


# Files that parse but hold a value of the wrong type or an impossible combination.
VALUE_ERRORS = [
    'port: "4222"\n',
    'server_name: "my server"\n',
    "debug: 1\n",
    "max_payload: 4GB\n",
    "jetstream: maybe\n",
    "jetstream { max_mem: lots }\n",
    "jetstream { enabled: 1 }\n",
    "authorization: secret\n",
    "authorization { user: a, token: t }\n",
    "store_dir: /a\njetstream { store_dir: /b }\n",
    "listen: 'host:port'\n",
    "ping_interval: '2 minutes'\n",
    "max_connections: many\n",
    "http_port: true\n",
    "authorization { timeout: [1] }\n",
]


@pytest.mark.parametrize("text", VALUE_ERRORS)
def test_value_errors_agree(tmp_path, text):
    path = write(tmp_path, {"bad.conf": text})
    ok, _, msg = ref_check(path)
    assert not ok, f"the reference accepts {text!r}"
    with pytest.raises(ConfigError) as e: options_from_config(load_config(path))
    assert re.match(rf"{re.escape(str(path))}:\d+: '", str(e.value)), str(e.value)  # file, line and key


# The differences documented in the notebook: (text, reference accepts, what jsnb does).
DIFFERENCES = [
    ("port: 4222\nserver_tags: [1, 2]\n", False, "refused"),  # the reference needs a space before ']'; jsnb
                                                            # reads it, then refuses tags that are not strings
    ("port\n4222\n", True, "error"),                       # a value on the next line
    ("jetstream {\n  max_mem:\n  1G\n}\n", True, "error"),
    ("port: 4222 }\n", True, "error"),                      # unbalanced braces
    ("port: 4222\n{ debug: true\n", True, "error"),
    ("authorization { /user: a, password: b }\n", True, "refused"),  # unknown key "/user"
    ("jetstream { max_mem: \"1GB\" }\n", False, "ok"),       # more size strings
    ("jetstream { max_mem: \"100\" }\n", False, "ok"),
    ("max_payload: \"1MB\"\n", False, "ok"),
    ("listen: localhost\n", False, "ok"),                   # a host without a port
]


@pytest.mark.parametrize("text,ref_ok,jsnb", DIFFERENCES)
def test_documented_differences(tmp_path, text, ref_ok, jsnb):
    path = write(tmp_path, {"a.conf": text})
    assert ref_check(path)[0] == ref_ok
    try: d = load_config(path)
    except ConfigError: outcome = "error"
    else:
        try: options_from_config(d); outcome = "ok"
        except ConfigError: outcome = "refused"
    assert outcome == jsnb


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ref_varz(path, http_port, timeout=15.0) -> dict:
    "Start the reference with the file at `path` and return its /varz."
    p = subprocess.Popen([NATS, "-c", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=2) as r: return json.load(r)
            except OSError:
                if p.poll() is not None: raise AssertionError(f"the reference exited: {p.stderr.read().decode()}")
                if time.monotonic() > deadline: raise
                time.sleep(0.1)
    finally:
        p.terminate()
        try: p.wait(10)
        except subprocess.TimeoutExpired: p.kill(); p.wait()


def test_applied_options_match_varz(tmp_path):
    "The options jsnb takes from a file are the ones a running reference server reports."
    port, hport = free_port(), free_port()
    path = write(tmp_path, {"jsnb.conf": f"""
listen: 127.0.0.1:{port}
http: 127.0.0.1:{hport}
server_name: varz-check
max_payload: 2MB
max_pending: 32MB
max_control_line: 8KB
max_connections: 500
ping_interval: "30s"
ping_max: 3
write_deadline: "5s"
jetstream {{
  store_dir: "{tmp_path}/js"
  max_mem: 256MB
  max_file: "2G"
}}
authorization {{ user: app, password: s3cret, timeout: 3 }}
"""})
    opts, warns = options_from_config(load_config(path))
    assert warns == []
    v = ref_varz(path, hport)
    js = v["jetstream"]["config"]
    assert (v["host"], v["port"], v["http_host"], v["http_port"]) == (opts.host, opts.port, opts.http_host, opts.http_port)
    assert v["server_name"] == opts.server_name
    assert (v["max_payload"], v["max_pending"], v["max_control_line"], v["max_connections"]) == \
           (opts.max_payload, opts.max_pending, opts.max_control_line, opts.max_connections)
    assert (v["ping_interval"] / 1e9, v["ping_max"], v["write_deadline"] / 1e9) == \
           (opts.ping_interval, opts.ping_max, opts.write_deadline)
    assert math.isclose(v["auth_timeout"], opts.auth_timeout) and v["auth_required"] == opts.auth_required
    assert (js["max_memory"], js["max_storage"]) == (opts.max_memory_store, opts.max_file_store)
    assert js["store_dir"] == os.path.join(opts.store_dir, "jetstream")
