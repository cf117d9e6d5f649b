"""The seed's walkthrough as the page `nbs/0_tutorials/05_the_seed_run.ipynb` runs it, run here against jsnb and against
nats-server 2.15.1: the same `jsnb` command lines in the same order, on a single server and on a three-server cluster
(tests/jsclusters.py), each output compared field by field (JSON) or line by line (text) once what varies from run to
run is taken out, as the page does. Stream templates run on jsnb only: nats-server 2.15.1 no longer has them, and the
commands say so. `test_the_page_runs_these_commands` checks that the page runs exactly these command lines.

Where jsnb and nats-server differ and jsnb is wrong, the difference has a test of its own below, marked
`xfail(strict=True)` with what differs: it fails loudly once jsnb is fixed, and the walkthrough's comparison leaves out
only that one value, saying why."""
import json, os, pathlib, re, time
import pytest

from jsnb.admin.core import Background, capture
from jsnb.admin.main import admin_parser
from jsclusters import JSCluster

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / 'nbs' / '0_tutorials' / '05_the_seed_run.ipynb'
KINDS = ['jsnb', 'nats-server']
CLI = admin_parser()
SYS = '--user system --password system'

# What varies from run to run (and server to server without being a difference): the page's placeholders.
_TIDY = [(r'\b(?!0001-)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z', '<timestamp>'),
         (r'\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b', 'YYYY-MM-DD hh:mm:ss'), (r'\b\d\d:\d\d:\d\d\b', 'hh:mm:ss'),
         (r'127\.0\.0\.1:\d+', '127.0.0.1:<port>'), (r'\bN[A-Z0-9]{55}\b', '<server id>'),
         (r'(rtt |RTT: )\d+(\.\d+)?(µs|ms)', r'\1<rtt>'), (r'Delay: \S+', 'Delay: <delay>'), (r'Client ID: \d+', 'Client ID: <id>'),
         (r'seen \d+(\.\d+)?s ago', 'seen <elapsed> ago'), (r'\[[A-Za-z0-9]{22}\]', '[<id>]'),
         (r'(_INBOX|\$JS\.SNAPSHOT\.RESTORE\.\w+)\.[A-Za-z0-9]{22}\b', r'\1.<id>'),
         (r'(\$JS\.ACK\.\S+)\.\d{19}\.(\d+)"', r'\1.<timestamp>.\2"'),
         (r' in \d+(\.\d+)?m?s\b', ' in <time taken>'), (r'\(\d+(\.\d+)? [KMG]?i?B/s\)', '(<rate>)'),
         # a backup's size is that of each server's own snapshot format, not a behaviour: jsnb's differs from nats-server's
         (r'(Received|Sent) \d+(\.\d+)? [KMG]?i?B\b', r'\1 <size>'), (r'^(\s+Bytes: )[\d,]+$', r'\1<size>')]
_ALWAYS_BLANK = ('Last Message', 'Last Delivery', 'Active', 'API Req', 'API Err')


def _blank(table, names):
    head = next((l for l in table if l.startswith('|')), None)
    if head is None: return table
    cols = [i for i, h in enumerate(head.split('|')) if h.strip() in names]
    out = []
    for l in table:
        if l.startswith('|') and l is not head:
            cells = l.split('|')
            for i in cols: cells[i] = (' …' if cells[i].strip() else '').ljust(len(cells[i]))
            l = '|'.join(cells)
        out.append(l)
    return out


def _servers_hidden(table):
    cell = lambda c: (' ' + ', '.join(sorted(c.strip().split(', '))) + ' ').ljust(len(c)) if re.fullmatch(r' ?n\?\*?(, n\?\*?)* *', c) else c
    table = ['|'.join(cell(c) for c in l.split('|')) if l.startswith('|') else l for l in table]
    seps = [i for i, l in enumerate(table) if l.startswith('+')]
    if len(seps) >= 3: table[seps[1] + 1:seps[2]] = sorted(table[seps[1] + 1:seps[2]])
    return table


def tidy(text: str, blank=(), servers=False) -> str:
    "The page's `tidy`: placeholders for what varies; in a cluster, server names as `n?` (leaders are elected)."
    for pat, rep in _TIDY: text = re.sub(pat, rep, text, flags=re.M)
    if servers: text = re.sub(r'\bn\d\b', 'n?', text)
    out, table = [], []
    for l in text.split('\n') + ['']:
        if l.startswith(('|', '+')): table.append(l); continue
        if table:
            table = _blank(table, set(blank) | set(_ALWAYS_BLANK))
            out += _servers_hidden(table) if servers else table
            table = []
        out.append(l)
    return '\n'.join(out[:-1])


def _events_in_order(text: str) -> str:
    """An advisory listener's output with its advisories sorted: nats-server deletes and restores a stream's consumers
    in no particular order (it walks a Go map), and their advisories interleave with the stream's own differently from
    one run to the next; jsnb sends them in the order the consumers were made. What is compared is which advisories
    came, each with its fields."""
    parts = re.split(r'(?m)^(?=\[hh:mm:ss\] \[<id>\] )', text)
    return parts[0] + ''.join(sorted(p if p.endswith('\n') else p + '\n' for p in parts[1:]))


# ---- the walkthrough, as steps: a command line (its output compared), or one of these ----
def fails(line): return ('fails', line)                        # a command expected to fail (its error compared)
def bg(line, until=''): return ('bg', line, until)             # a command started as in a second terminal
def done(line): return ('done', line)                          # its output, once it ended
def sleep(s): return ('sleep', s)
def do(f): return ('do', f)                                    # a look-up or a wait, not a command of the page
def jsnb_only(line): return ('jsnb', line)                     # stream templates: nats-server 2.15.1 has none
def timed(line): return ('timed', line)                        # a command whose duration matters too
def settling(line): return ('settling', line)                  # its output shows a group just made or just elected: the
                                                               # other members' state (current or not yet) is left out


def _save_orders_json(ctx):
    pathlib.Path('orders.json').write_text(json.dumps(json.loads(ctx['last'])['config'], indent=2))


def _until(f, timeout=60, every=0.2):
    deadline, why = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            if v := f(): return v
        except AssertionError as e: why = e
        time.sleep(every)
    raise TimeoutError(f'not within {timeout} s: {why}')


def quietly(line: str) -> str:
    rc, out, err = capture(CLI, line)
    assert rc == 0, err
    return out


def _wait_template_stream(ctx):
    if ctx['kind'] == 'jsnb': _until(lambda: 'CLIENT_acme' in quietly('str ls -n'))


SETUP = "--ack --max-msgs=-1 --max-bytes=-1 --max-age=1y --storage file --retention limits --max-msg-size=-1"
SINGLE_BEFORE_THE_CLUSTER = [
    'account info',
    f'str add ORDERS --subjects "ORDERS.*" {SETUP} --discard=old --dupe-window=2m',
    'str ls', 'str info ORDERS', 'str info ORDERS -j', do(_save_orders_json), 'str add ORDERS --config orders.json',
    'str cp ORDERS ARCHIVE --subjects "ORDERS_ARCHIVE.new" --max-age 2y', 'str edit ARCHIVE --subjects "ORDERS_ARCHIVE.*" -f',
    'str rm ARCHIVE -f',
    'pub ORDERS.scratch hello', 'req ORDERS.scratch hello', 'str state ORDERS',
    'str rmm ORDERS 1 -f', 'str purge ORDERS -f', 'str rm ORDERS -f', f'str add ORDERS --subjects "ORDERS.*" {SETUP}',
    'con ls ORDERS',
    'con add ORDERS NEW --filter ORDERS.received --ack explicit --pull --deliver all --max-deliver=20 --sample 100',
    'con add ORDERS DISPATCH --filter ORDERS.processed --ack explicit --pull --deliver all --sample 100 --max-deliver 20',
    "con add ORDERS MONITOR --ack none --target monitor.ORDERS --deliver last --replay instant --filter ''",
    'con ls ORDERS', 'con info ORDERS DISPATCH',
    *[f'pub ORDERS.processed "order {i}"' for i in (1, 2, 3)], 'con next ORDERS DISPATCH', 'con next ORDERS DISPATCH',
    "req '$JS.API.CONSUMER.MSG.NEXT.ORDERS.DISPATCH' ''",
    bg('sub monitor.ORDERS --count 4'), 'pub ORDERS.processed "order 4"', done('sub monitor.ORDERS --count 4'),
    bg('con events ORDERS NEW --count 1', '\n\n'), 'pub ORDERS.received "order 5"', 'con next ORDERS NEW',
    done('con events ORDERS NEW --count 1'), 'con info ORDERS NEW',
    'str purge ORDERS -f', 'pub ORDERS.processed "order {{Count}}" --count 3 --sleep 1s',
    'con add ORDERS REPLAY --target out.original --filter ORDERS.processed --ack none --deliver all --sample 100 --replay original',
    timed('sub -t out.original --count 3'),
    'str rm ORDERS -f', f'str add ORDERS --subjects "ORDERS.*" {SETUP} --dupe-window=2m',
    *[f'req -H Nats-Msg-Id:1 ORDERS.new hello{i}' for i in (1, 2, 3, 4)], 'str state ORDERS',
    "req ORDERS.new 'new order' -H Nats-Expected-Stream:ORDERS_DEVELOPMENT", "req ORDERS.new 'new order' -H Nats-Expected-Last-Sequence:1",
    "req ORDERS.new 'new order' -H Nats-Expected-Last-Sequence:3", "req ORDERS.new 'new order' -H Nats-Msg-Id:124",
    "req ORDERS.new 'new order' -H Nats-Msg-Id:125 -H Nats-Expected-Last-Msg-Id:124",
    "req ORDERS.new 'new order' -H Nats-Msg-Id:126 -H Nats-Expected-Last-Msg-Id:999",
    'str rm ORDERS -f', f'str add ORDERS --subjects "ORDERS.*" {SETUP}',
    'con add ORDERS DISPATCH --filter ORDERS.processed --ack explicit --pull --deliver all --sample 100 --max-deliver 20 --wait 1s',
    'str state ORDERS', 'con info ORDERS DISPATCH',
    'pub ORDERS.processed "order 4"', 'con next ORDERS DISPATCH', 'con info ORDERS DISPATCH',
    'pub ORDERS.processed "order 5"', 'con next ORDERS DISPATCH --no-ack', 'con info ORDERS DISPATCH',
    sleep(1.5), 'con next ORDERS DISPATCH --no-ack', 'con info ORDERS DISPATCH',
    sleep(1.5), 'con next ORDERS DISPATCH', 'con info ORDERS DISPATCH',
    'str rm ORDERS -f', f'str add ORDERS --subjects "ORDERS.*" {SETUP}', 'pub ORDERS.processed "order {{Count}}" --count 100 -J -q',
    *[s for name, where in (('ALL', 'all'), ('LAST', 'last'), ('TEN', '10'), ('2MIN', '2m'))
      for s in (f'con add ORDERS {name} --pull --filter ORDERS.processed --ack none --replay instant --deliver {where}', f'con next ORDERS {name}')],
    jsnb_only('str template add CLIENTS --subjects "CLIENT.*" --ack --max-msgs=-1 --max-bytes=-1 --max-age=1y --storage file '
              '--retention limits --max-msg-size 2048 --max-streams 1024 --discard old'),
    jsnb_only('pub CLIENT.acme hello'), do(_wait_template_stream), jsnb_only('str ls'), jsnb_only('str template info CLIENTS'),
    jsnb_only('str template rm CLIENTS -f'), jsnb_only('str ls -n'),
]

SINGLE_AFTER_THE_CLUSTER = [
    bg('event --js-advisory --count 13', '\n\n'), 'str backup ORDERS js-backup', 'str rm ORDERS -f', 'str restore ORDERS js-backup',
    done('event --js-advisory --count 13'),
    'con ls ORDERS', 'backup js-backup-all', 'str edit ORDERS --max-msgs 1000 -f', 'restore js-backup-all --update-streams',
]


def _group(what: str):
    "(leader, other members) of a stream or consumer group once every member is current, else None."
    cl = json.loads(quietly(f'{what} -j')).get('cluster') or {}
    reps = cl.get('replicas') or []
    return (cl.get('leader'), [r['name'] for r in reps]) if cl.get('leader') and all(r.get('current') for r in reps) else None


def _wait_group(what: str, followers: int):
    def wait(ctx): _until(lambda: (g := _group(what)) and len(g[1]) == followers)
    return wait


def _meta_ready(ctx):
    "Every server names the same meta leader, which sees the others as current (as the page waits)."
    c = ctx['cluster']
    def ready():
        metas = [c.jsz(i).get('meta_cluster') or {} for i in range(c.n)]
        leaders = {m.get('leader') for m in metas}
        if len(leaders) != 1 or not (lead := leaders.pop()) or not lead.startswith('n'): return False
        return sum(bool(r.get('current')) for r in metas[int(lead[1:])].get('replicas') or []) == c.n - 1
    _until(ready, 120)


def _pick_follower_of_returns(ctx):
    leader, (ctx['gone'],) = _until(lambda: (g := _group('str info RETURNS')) and len(g[1]) == 1 and g)


def _wait_returns_moved(ctx):
    _until(lambda: (g := _group('str info RETURNS')) and ctx['gone'] not in [g[0], *g[1]] and len(g[1]) == 1)


def _report(): return quietly(f'server report jetstream {SYS} --timeout 2s')


def _meta_current(ctx):
    """The meta group settled: every member online is current. A report taken just after a change can catch a follower
    one answer behind the leader's commit (on a busy machine, for a while), on either server."""
    behind = re.compile(r'(?m)^\|\s*n\d\s*\|[^|]*\|\s*false\s*\|\s*false\s*\|')
    _until(lambda: not behind.search(_report().split('RAFT Meta Group Information')[-1]))


def _stop_a_follower(ctx):
    "Stop (for good) a server that does not lead the meta group; the commands then go to the other two."
    c = ctx['cluster']
    lead = _until(lambda: json.loads(quietly(f'server request jetstream --leader {SYS}'))[0]['server']['name'])
    ctx['stopped'] = stopped = next(f'n{i}' for i in (2, 1, 0) if f'n{i}' != lead)
    c.procs[int(stopped[1:])].stop()
    os.environ['NATS_URL'] = ','.join(c.url(i) for i in range(c.n) if f'n{i}' != stopped)
    _until(lambda: re.search(rf'\| {stopped} +\| +\| false +\| true ', _report()), 120)


def _wait_removed(ctx): _until(lambda: f"| {ctx['stopped']} " not in _report(), 60)


CLUSTER = [
    do(_meta_ready),
    settling(f'str add ORDERS --subjects "ORDERS.*" {SETUP} --discard old --replicas 3'), do(_wait_group('str info ORDERS', 2)),
    'str info ORDERS', 'str report',
    settling('con add ORDERS NEW --filter ORDERS.received --ack explicit --pull --deliver all --max-deliver=20 --sample 100'),
    do(_wait_group('con info ORDERS NEW', 2)), 'con report ORDERS',
    settling('str cluster step-down ORDERS'), do(_wait_group('str info ORDERS', 2)), settling('con cluster step-down ORDERS NEW'),
    do(_wait_group('con info ORDERS NEW', 2)), fails('str cluster peer-remove ORDERS n2 -f'),
    settling('str add RETURNS --subjects "RETURNS.*" --storage file --replicas 2 --defaults'), do(_pick_follower_of_returns),
    'str cluster peer-remove RETURNS {gone} -f', do(_wait_returns_moved), 'str report', 'str rm RETURNS -f',
    do(_meta_current), f'server report jetstream {SYS}', f'server raft step-down {SYS}', do(_stop_a_follower),
    'server raft peer-remove {stopped} -f ' + SYS, do(_wait_removed), do(_meta_current), f'server report jetstream {SYS}',
]


def _fill(line: str, names: dict) -> str:
    "`line` with the servers chosen while the walkthrough runs (`{gone}`, `{stopped}`) filled in."
    for k in ('gone', 'stopped'): line = line.replace('{%s}' % k, names.get(k, '{%s}' % k))
    return line


def walk(steps, kind: str, ctx: dict) -> list[tuple[str, str]]:
    "Run `steps` against the server(s) in `$NATS_URL`: (command line, output) of each command."
    out, jobs = [], {}
    ctx['kind'] = kind
    for st in steps:
        if isinstance(st, str): st = ('run', st)
        what, arg = st[0], st[1]
        if what == 'do': arg(ctx); continue
        if what == 'sleep': time.sleep(arg); continue
        line = _fill(arg, ctx)
        if what == 'jsnb':
            if kind != 'jsnb':
                if arg.startswith('str template add'):                       # the reference says it has no templates
                    rc, o, e = capture(CLI, line + ' --timeout 2s')
                    assert rc == 1 and 'the server does not support stream templates' in e, (o, e)
                continue
        if what == 'bg':
            jobs[line] = Background(CLI, line)
            assert jobs[line].ready(st[2]), line
            continue
        if what == 'done':
            job = jobs.pop(line)
            try: rc, o, e = job.result()
            except TimeoutError as x: raise TimeoutError(f'{kind}: `{line}` {x}; its output so far: {job.out.getvalue()!r} {job.err.getvalue()!r}') from None
            assert rc == 0, (line, e)
            out.append((line + ' (its output)', o + e)); continue
        t0 = time.monotonic()
        rc, o, e = capture(CLI, line)
        if what == 'timed': ctx['took'] = time.monotonic() - t0
        if what == 'settling': o = re.sub(r'(?m)^(\s+Replica: \w+),.*$', r'\1, ...', o)
        assert (rc == 0) == (what != 'fails'), (kind, line, rc, o, e)
        ctx['last'] = o
        out.append((arg + (' (jsnb only)' if what == 'jsnb' else ''), o + e))     # (the line as written: `{gone}`)
    return out


def compare(got: dict, servers=False, blank=lambda line: ()):
    """Each step's output on jsnb against nats-server's: JSON field by field, text line by line (placeholders for what
    varies; `blank(line)`: the table columns left out of that command's output)."""
    a, b = [s for s in got['jsnb'] if not s[0].endswith(' (jsnb only)')], got['nats-server']
    assert [l for l, _ in a] == [l for l, _ in b]
    for (line, x), (_, y) in zip(a, b):
        x, y = tidy(x, blank(line), servers), tidy(y, blank(line), servers)
        if line.startswith('event '): x, y = _events_in_order(x), _events_in_order(y)
        try: x, y = json.loads(x), json.loads(y)
        except ValueError: x, y = x.split('\n'), y.split('\n')
        assert x == y, f'`jsnb {line}` differs (jsnb first, nats-server second)'


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    "A working directory per server kind (the commands write orders.json and backups there); `NATS_URL` restored after."
    monkeypatch.setenv('NATS_URL', '')
    def go(kind):
        d = tmp_path / kind; d.mkdir(); monkeypatch.chdir(d)
    return go


@pytest.fixture
def url(monkeypatch):
    "Set `NATS_URL` for the commands (restored after the test)."
    monkeypatch.setenv('NATS_URL', '')
    return lambda u: os.environ.__setitem__('NATS_URL', u)


def test_single_server(start_server, in_tmp):
    "Everything the page runs against its single server (before and after the cluster), on jsnb and nats-server."
    got, took = {}, {}
    for kind in KINDS:
        in_tmp(kind)
        os.environ['NATS_URL'] = start_server(kind, '-js').url
        ctx = {}
        got[kind] = walk(SINGLE_BEFORE_THE_CLUSTER + SINGLE_AFTER_THE_CLUSTER, kind, ctx)
        took[kind] = ctx['took']
    for kind in KINDS:
        o = dict(got[kind])
        assert 'order 3' in o["req '$JS.API.CONSUMER.MSG.NEXT.ORDERS.DISPATCH' ''"]
        assert re.findall(r'order \d', o['sub monitor.ORDERS --count 4 (its output)']) == ['order 1', 'order 2', 'order 3', 'order 4']
        assert 'Acknowledgement Sample' in o['con events ORDERS NEW --count 1 (its output)']
        assert took[kind] > 1.8, (kind, took[kind])                      # replayed a second apart, as published
        assert 'Redelivered Messages: 1' in [v for k, v in got[kind] if k == 'con info ORDERS DISPATCH'][-2]
        assert '100 messages, 4 consumers' in o['str backup ORDERS js-backup']
        assert len(re.findall(r'(?m)^\[\d\d:\d\d:\d\d\] \[', o['event --js-advisory --count 13 (its output)'])) == 13
    assert took['jsnb'] < 2 * took['nats-server'], took                 # paced as the reference paces it (no wall-clock bound)
    assert dict(got['jsnb'])['str template info CLIENTS (jsnb only)'].rstrip().endswith('CLIENT_acme')
    compare(got)


class _SeedCluster(JSCluster):
    "A `JSCluster` whose system account user is `system` (password `system`), as on the page."
    def config(self, i):
        return super().config(i).replace('{user: sys, password: sys}', '{user: system, password: system}')


def test_cluster(in_tmp):
    "The page's clustering section on three jsnb servers and on three nats-server servers."
    got = {}
    for kind in KINDS:
        in_tmp(kind)
        c = _SeedCluster(kind, n=3, system=True).start()
        try:
            os.environ['NATS_URL'] = ','.join(c.url(i) for i in range(c.n))
            got[kind] = walk(CLUSTER, kind, {'cluster': c})
        finally: c.stop()
    for kind in KINDS:
        o = dict(got[kind])
        assert 'peer remap failed (10075)' in o['str cluster peer-remove ORDERS n2 -f']
        assert tidy(o[f'server report jetstream {SYS}'], servers=True).split('RAFT Meta Group Information')[1].count('| n?') == 2
    # jsnb counts a consumer on the server leading it only, nats-server on every server holding a replica: that column is
    # left out here and its difference is `test_server_report_per_server_counts` (an expected failure until jsnb is fixed)
    compare(got, servers=True, blank=lambda line: ('Consumers',) if line.startswith('server report') else ())


def _seed_command_lines() -> list[str]:
    "The command lines of the walkthrough, in the page's order (names chosen while it runs as the page shows them: `n?`)."
    lines = []
    for st in SINGLE_BEFORE_THE_CLUSTER + CLUSTER + SINGLE_AFTER_THE_CLUSTER:
        if isinstance(st, str): st = ('run', st)
        if st[0] in ('run', 'fails', 'jsnb', 'timed', 'settling'): lines.append(_fill(st[1], {'gone': 'n?', 'stopped': 'n?'}))
        elif st[0] == 'bg': lines.append(st[1])
    return lines


def test_the_page_runs_these_commands():
    "The page's saved outputs show the same command lines, in the same order, as this test runs against both servers."
    shown = []
    for c in json.loads(PAGE.read_text())['cells']:
        for o in c.get('outputs', []):
            shown += [l[len('$ jsnb '):].removesuffix(' &') for l in ''.join(o.get('text', '')).splitlines() if l.startswith('$ jsnb ')]
    assert shown == _seed_command_lines()


# ---- differences found here and fixed in jsnb: each scenario on both servers ----

def test_removing_a_removed_message(start_server, url):
    "The seed's order: a purge, then `str rmm ORDERS 1 -f` (message 1 is gone)."
    got = {}
    for kind in KINDS:
        url(start_server(kind, '-js').url)
        quietly('str add ORDERS --subjects "ORDERS.*" --storage file --defaults -j')
        quietly('pub ORDERS.scratch hello -J')
        quietly('str purge ORDERS -f -j')
        got[kind] = capture(CLI, 'str rmm ORDERS 1 -f')
    assert got['jsnb'] == got['nats-server']


def test_replay_original_of_messages_stored_after_the_consumer(start_server, url):
    "The seed's order: the REPLAY consumer first, then the orders a second apart, then the subscriber."
    took = {}
    for kind in KINDS:
        url(start_server(kind, '-js').url)
        quietly('str add ORDERS --subjects "ORDERS.*" --defaults -j')
        quietly('con add ORDERS REPLAY --target out.original --filter ORDERS.processed --ack none --deliver all --replay original -j')
        quietly('pub ORDERS.processed "order {{Count}}" --count 2 --sleep 1s')
        t0 = time.monotonic()
        assert quietly('sub out.original --count 2 --raw --wait 10s').split() == ['order', '1', 'order', '2']
        took[kind] = time.monotonic() - t0
    # no wall-clock bound: jsnb waits no longer than the reference, give or take half the second between the orders
    # (replaying them at their original pace would add that second)
    assert took['jsnb'] < took['nats-server'] + 0.5, took


def test_server_report_per_server_counts(url):
    "An R3 stream and consumer on three servers; then a server stopped, as in the page's last cluster step."
    got = {}
    for kind in KINDS:
        c = _SeedCluster(kind, n=3, system=True).start()
        try:
            url(','.join(c.url(i) for i in range(c.n)))
            _meta_ready({'cluster': c})
            quietly('str add ORDERS --subjects "ORDERS.*" --replicas 3 --defaults -j')
            _wait_group('str info ORDERS', 2)({})
            quietly('con add ORDERS NEW --pull --deliver all --ack explicit --max-deliver=-1 --filter "" -j')
            _wait_group('con info ORDERS NEW', 2)({})
            rows = [l.split('|') for l in _report().split('RAFT Meta Group')[0].splitlines() if re.match(r'\| n\d', l)]
            ctx = {'cluster': c}
            _stop_a_follower(ctx)
            meta = [l.split('|') for l in _report().split('RAFT Meta Group')[1].splitlines() if l.startswith(f"| {ctx['stopped']} ")]
            got[kind] = {'consumers': sorted(r[4].strip() for r in rows), 'offline active': meta[0][5].strip() != 'never'}
        finally: c.stop()
    assert got['nats-server'] == {'consumers': ['1', '1', '1'], 'offline active': True}, got
    assert got['jsnb'] == got['nats-server'], got
