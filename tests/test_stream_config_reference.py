"""Differential tests: `jsnb.js.stream_config` against the reference `nats-server` (2.15.1, single server).

Each case sends a raw `$JS.API.STREAM.CREATE.<name>` (or `UPDATE`) request to one reference server and
compares its answer with what `stream_config_for_create` / `stream_config_for_update` return or raise:
the whole `config` object on success, the whole `error` object on failure. Requests given as Python
values are checked twice on the jsnb side, as decoded JSON and as the bytes sent to the reference.
"""
import asyncio, json, shutil, socket, subprocess, tempfile, threading, time
from pathlib import Path

import pytest

from jsnb.js.errors import JSApiError
from jsnb.js.stream_config import stream_config_for_create, stream_config_for_update, subjects_overlap

NATS = shutil.which("nats-server")
pytestmark = [pytest.mark.skipif(NATS is None, reason="nats-server is not on PATH"), pytest.mark.reference]

MAX_MEMORY, MAX_FILE = 64 << 20, 1 << 30  # the reference's store limits (no other streams reserve anything)
SEC, MS = 1_000_000_000, 1_000_000


class Reference:
    "One reference server and a nats-py connection driven from a background event loop."
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ref-streamcfg-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0)); self.port = s.getsockname()[1]
        conf = Path(self.dir) / "js.conf"
        conf.write_text(f'jetstream {{ store_dir: "{self.dir}", max_memory_store: {MAX_MEMORY}, max_file_store: {MAX_FILE} }}\n')
        self.proc = subprocess.Popen([NATS, "-a", "127.0.0.1", "-p", str(self.port), "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try: socket.create_connection(("127.0.0.1", self.port), 0.2).close(); break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None: raise RuntimeError("reference did not start")
                time.sleep(0.02)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = self.run(self._connect())

    async def _connect(self):
        import nats
        return await asyncio.wait_for(nats.connect(f"nats://127.0.0.1:{self.port}"), 10)

    def run(self, coro): return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def request(self, subject: str, payload: bytes) -> dict:
        "The decoded reply to one API request."
        return json.loads(self.run(self.nc.request(subject, payload, timeout=5)).data)

    def delete(self, name: str): self.request(f"$JS.API.STREAM.DELETE.{name}", b"")

    def close(self):
        self.run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop); self.thread.join(5)
        self.proc.terminate(); self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ref():
    r = Reference()
    yield r
    r.close()


def payload(body) -> bytes: return body if isinstance(body, bytes) else json.dumps(body).encode()


def ours(fn, *args, **kw) -> dict:
    "jsnb's answer in the reference's shape: {'config': ...} or {'error': ...}."
    try: return {"config": fn(*args, **kw)}
    except JSApiError as e: return {"error": e.to_dict()}


def theirs(reply: dict) -> dict:
    return {"error": reply["error"]} if "error" in reply else {"config": reply["config"]}


def check_create(ref, name: str, body) -> dict:
    "Create on both sides and compare; return the reference's answer (the stream is left in place)."
    reply = theirs(ref.request(f"$JS.API.STREAM.CREATE.{name}", payload(body)))
    kw = dict(max_memory=MAX_MEMORY, max_file=MAX_FILE)
    assert ours(stream_config_for_create, payload(body), name, **kw) == reply
    if not isinstance(body, bytes): assert ours(stream_config_for_create, body, name, **kw) == reply
    return reply


def nats_py_body(**kw) -> dict:
    "A create request exactly as nats-py builds it."
    from nats.js import api
    return json.loads(json.dumps(api.StreamConfig(**kw).as_dict()))


def nats_py_update(old: dict) -> dict:
    "An update request as nats-py builds it from a stream's reported configuration."
    from nats.js import api
    return json.loads(json.dumps(api.StreamConfig.from_response(dict(old)).as_dict()))


def big(n: int) -> str: return "x" * n


# (id, stream name in the subject, request body)
CREATE = [
    # names, description, metadata
    ("minimal", "S", {"name": "S"}),
    ("nats-py", "S", nats_py_body(name="S", subjects=["s.>"])),
    ("nats-py-kv", "KV_b", nats_py_body(name="KV_b", subjects=["$KV.b.>"], allow_direct=True, allow_rollup_hdrs=True,
                                        deny_delete=True, discard="new", max_msgs_per_subject=1, num_replicas=1,
                                        max_bytes=-1, max_age=0, max_msg_size=-1, storage="file")),
    ("nulls", "S", {"name": "S", "description": None, "subjects": None, "max_age": None, "mirror": None,
                    "sources": None, "metadata": None, "placement": None, "consumer_limits": None}),
    ("name-mismatch", "S", {"name": "T"}),
    ("name-missing", "S", {}),
    ("name-dot", "a", {"name": "a.b"}),
    ("name-star", "a*b", {"name": "a*b"}),
    ("name-gt", "a>b", {"name": "a>b"}),
    ("name-slash", "a/b", {"name": "a/b"}),
    ("name-backslash", "a\\b", {"name": "a\\b"}),
    ("name-255", big(255), {"name": big(255)}),
    ("name-256", big(256), {"name": big(256)}),
    ("name-case-key", "S", {"NAME": "S", "Subjects": ["q"]}),
    ("description", "S", {"name": "S", "description": "orders, all of them"}),
    ("description-4097", "S", {"name": "S", "description": big(4097)}),
    ("metadata", "S", {"name": "S", "metadata": {"owner": "team", "_nats.ver": "9", "_nats.level": "9", "_nats.req.level": "7"}}),
    ("metadata-at-limit", "S", {"name": "S", "metadata": {"k": big(131055)}}),
    ("metadata-over-limit", "S", {"name": "S", "metadata": {"k": big(131056)}}),
    # limits
    ("limits-normalized", "S", {"name": "S", "max_msgs": -5, "max_bytes": -7, "max_consumers": -9,
                                "max_msgs_per_subject": 0, "max_msg_size": -3}),
    ("limits-set", "S", {"name": "S", "max_msgs": 10, "max_bytes": 1 << 20, "max_consumers": 3,
                         "max_msgs_per_subject": 2, "max_msg_size": 1024}),
    ("max-msg-size-over-payload", "S", {"name": "S", "max_msg_size": 8 << 20}),
    ("pedantic-max-msgs", "S", {"name": "S", "max_msgs": -5, "pedantic": True}),
    ("pedantic-max-consumers", "S", {"name": "S", "max_consumers": -2, "pedantic": True}),
    ("pedantic-ok", "S", {"name": "S", "pedantic": True, "max_msgs": -1}),
    ("max-age-100ms", "S", {"name": "S", "max_age": 100 * MS}),
    ("max-age-50ms", "S", {"name": "S", "max_age": 50 * MS}),
    ("max-age-negative", "S", {"name": "S", "max_age": -1}),
    ("max-age-pedantic", "S", {"name": "S", "max_age": 60 * SEC, "pedantic": True}),
    ("max-age-long", "S", {"name": "S", "max_age": 3600 * SEC}),
    ("dup-over-age", "S", {"name": "S", "max_age": 3600 * SEC, "duplicate_window": 7200 * SEC}),
    ("dup-50ms", "S", {"name": "S", "duplicate_window": 50 * MS}),
    ("dup-negative", "S", {"name": "S", "duplicate_window": -1}),
    ("dup-set", "S", {"name": "S", "duplicate_window": 30 * SEC}),
    ("replicas-0", "S", {"name": "S", "num_replicas": 0}),
    ("replicas-3", "S", {"name": "S", "num_replicas": 3}),
    ("replicas-6", "S", {"name": "S", "num_replicas": 6}),
    ("replicas-negative", "S", {"name": "S", "num_replicas": -1}),
    ("memory-too-big", "S", {"name": "S", "storage": "memory", "max_bytes": 128 << 20}),
    ("memory-fits", "S", {"name": "S", "storage": "memory", "max_bytes": 32 << 20}),
    ("file-too-big", "S", {"name": "S", "max_bytes": 2 << 30}),
    ("file-too-big-explicit", "S", {"name": "S", "storage": "file", "max_bytes": 2 << 30, "subjects": ["$JS.API.>"]}),
    # enums
    ("enums", "S", {"name": "S", "retention": "workqueue", "discard": "NEW", "storage": "memory", "compression": "s2"}),
    ("retention-interest", "S", {"name": "S", "retention": "interest"}),
    ("retention-bad", "S", {"name": "S", "retention": "Limits"}),
    ("retention-null", "S", {"name": "S", "retention": None}),
    ("storage-bad", "S", {"name": "S", "storage": "disk"}),
    ("discard-bad", "S", {"name": "S", "discard": "oldest"}),
    ("compression-bad", "S", {"name": "S", "compression": "S2"}),
    ("compression-number", "S", {"name": "S", "compression": 1}),
    ("persist-empty", "S", {"name": "S", "persist_mode": ""}),
    ("persist-async", "S", {"name": "S", "persist_mode": "async"}),
    ("persist-async-memory", "S", {"name": "S", "persist_mode": "async", "storage": "memory"}),
    ("persist-async-atomic", "S", {"name": "S", "persist_mode": "async", "allow_atomic": True}),
    ("persist-bad", "S", {"name": "S", "persist_mode": "sync"}),
    # JSON types and syntax
    ("unknown-field", "S", {"name": "S", "foo": 1}),
    ("unknown-before-type", "S", {"name": "S", "foo": 1, "max_msgs": "x"}),
    ("type-first", "S", {"name": "S", "max_msgs": "x", "retention": "bad"}),
    ("no-case-insensitive-underscores", "S", {"name": "S", "maxmsgs": 5}),
    ("type-string-int", "S", {"name": "S", "max_msgs": "5"}),
    ("type-float", "S", {"name": "S", "max_age": 1.5}),
    ("type-bool", "S", {"name": "S", "no_ack": 1}),
    ("type-int32-overflow", "S", {"name": "S", "max_msg_size": 3_000_000_000}),
    ("type-uint-negative", "S", {"name": "S", "first_seq": -1}),
    ("type-list", "S", {"name": "S", "subjects": "a"}),
    ("type-list-item", "S", {"name": "S", "subjects": ["a", 1]}),
    ("type-null-item", "S", {"name": "S", "subjects": [None, "x"]}),
    ("type-map", "S", {"name": "S", "metadata": {"a": 1}}),
    ("type-map-null", "S", {"name": "S", "metadata": {"a": None}}),
    ("type-struct", "S", {"name": "S", "placement": 5}),
    ("type-nested", "S", {"name": "S", "sources": [{"name": "B"}, {"name": "C", "subject_transforms": [{"src": 1}]}]}),
    ("type-body-array", "S", []),
    ("bytes-empty", "S", b""),
    ("bytes-syntax", "S", b'{"name":"S",}'),
    ("bytes-eof", "S", b'{"name":"S"'),
    ("bytes-two-values", "S", b'{"name":"S"} {"subjects":["q"]}'),
    ("bytes-literal", "S", b'{"name":"S","no_ack":nul}'),
    ("bytes-control-in-key", "S", b'{"na\nme":"S"}'),
    ("bytes-bad-escape", "S", b'{"name":"S","description":"a\\qb"}'),
    ("bytes-bad-unicode-escape", "S", b'{"name":"S","description":"a\\u12g4"}'),
    ("bytes-lone-surrogate", "S", b'{"name":"S","description":"\\ud800\\ud83d\\ude00"}'),
    ("bytes-bom", "S", b'\xef\xbb\xbf{"name":"S"}'),
    ("bytes-trailing", "S", b'{"name":"S"}x'),
    ("bytes-number-then-garbage", "S", b'5x'),
    ("bytes-null-then-garbage", "S", b'nullx'),
    ("bytes-minus", "S", b'{"name":"S","max_msgs":-}'),
    ("bytes-leading-zero", "S", b'{"name":"S","max_msgs":01}'),
    ("bytes-exponent", "S", b'{"name":"S","max_msgs":1e}'),
    ("bytes-int64-min", "S", b'{"name":"S","max_msgs":-9223372036854775808}'),
    ("bytes-int64-under", "S", b'{"name":"S","max_msgs":-9223372036854775809}'),
    ("bytes-single-quotes", "S", b"{'name':'S'}"),
    ("bytes-raw-object-enum", "S", b'{"name":"S","retention":{"a": 1}}'),
    ("bytes-invalid-byte", "S", b'{"name":"S","max_msgs":\xff}'),
    ("bytes-int-literal", "S", b'{"name":"S","max_msgs":1.0}'),
    ("bytes-escape", "S", b'{"name":"S","retention":"\\u006cimits"}'),
    ("bytes-bad-utf8", "S", b'{"name":"S","description":"\xe2\x82\xff"}'),
    ("bytes-duplicate-keys", "S", b'{"name":"S","max_msgs":10,"max_msgs":null,"placement":{"cluster":"x"},"placement":{"tags":["t"]}}'),
    ("bytes-time", "S", b'{"name":"S","sources":[{"name":"B","opt_start_time":"2024-01-01T00:00:00.500+01:00"}]}'),
    ("bytes-time-bad", "S", b'{"name":"S","sources":[{"name":"B","opt_start_time":"2024-02-30T00:00:00Z"}]}'),
    ("bytes-time-hour", "S", b'{"name":"S","sources":[{"name":"B","opt_start_time":"2024-01-01T1:00:00Z"}]}'),
    ("bytes-time-comma", "S", b'{"name":"S","sources":[{"name":"B","opt_start_time":"2024-01-01T00:00:00,25Z"}]}'),
    ("bytes-time-escape", "S", b'{"name":"S","sources":[{"name":"B","opt_start_time":"2024-01-01T00:00:00\\u005a"}]}'),
    ("bytes-time-offset-24", "S", b'{"name":"S","sources":[{"name":"B","opt_start_time":"2024-01-01T00:00:00+23:60"}]}'),
    ("bytes-time-offset-25", "S", b'{"name":"S","mirror":{"name":"B","opt_start_time":"2024-01-01T00:00:00+25:00"}}'),
    ("bytes-time-number", "S", b'{"name":"S","sources":[{"name":"B","opt_start_time":5}]}'),
    # feature flags
    ("sealed", "S", {"name": "S", "sealed": True}),
    ("mirror-direct-alone", "S", {"name": "S", "mirror_direct": True}),
    ("flags", "S", {"name": "S", "no_ack": True, "allow_direct": True, "deny_delete": True, "deny_purge": True,
                    "first_seq": 100, "consumer_limits": {"inactive_threshold": 5 * SEC, "max_ack_pending": 10}}),
    ("rollup-no-purge", "S", {"name": "S", "deny_purge": True, "allow_rollup_hdrs": True}),
    ("discard-new-per-old", "S", {"name": "S", "discard_new_per_subject": True, "max_msgs_per_subject": 1}),
    ("discard-new-per-no-max", "S", {"name": "S", "discard_new_per_subject": True, "discard": "new"}),
    ("discard-new-per", "S", {"name": "S", "discard_new_per_subject": True, "discard": "new", "max_msgs_per_subject": 1}),
    ("ttl", "S", {"name": "S", "allow_msg_ttl": True}),
    ("sdm", "S", {"name": "S", "subject_delete_marker_ttl": 2 * SEC, "deny_purge": True}),
    ("sdm-short", "S", {"name": "S", "subject_delete_marker_ttl": 500 * MS}),
    ("sdm-negative", "S", {"name": "S", "subject_delete_marker_ttl": -1}),
    ("sdm-pedantic", "S", {"name": "S", "subject_delete_marker_ttl": 2 * SEC, "pedantic": True}),
    ("sdm-pedantic-rollup", "S", {"name": "S", "subject_delete_marker_ttl": 2 * SEC, "allow_msg_ttl": True, "pedantic": True}),
    ("atomic", "S", {"name": "S", "allow_atomic": True}),
    ("batched", "S", {"name": "S", "allow_batched": True, "allow_msg_ttl": True}),
    ("counter", "S", {"name": "S", "allow_msg_counter": True}),
    ("counter-discard-new", "S", {"name": "S", "allow_msg_counter": True, "discard": "new"}),
    ("counter-ttl", "S", {"name": "S", "allow_msg_counter": True, "allow_msg_ttl": True}),
    ("counter-interest", "S", {"name": "S", "allow_msg_counter": True, "retention": "interest"}),
    ("schedules", "S", {"name": "S", "allow_msg_schedules": True, "deny_purge": True}),
    ("schedules-discard-new", "S", {"name": "S", "allow_msg_schedules": True, "discard": "new"}),
    ("schedules-sources", "S", {"name": "S", "allow_msg_schedules": True, "sources": [{"name": "O"}]}),
    # subjects
    ("subjects-empty", "S", {"name": "S", "subjects": []}),
    ("subjects-dup", "S", {"name": "S", "subjects": ["a", "a"]}),
    ("subjects-overlap", "S", {"name": "S", "subjects": ["a.*", "a.b"]}),
    ("subjects-invalid", "S", {"name": "S", "subjects": ["a..b"]}),
    ("subjects-space", "S", {"name": "S", "subjects": ["a b"]}),
    ("subjects-vtab", "S", {"name": "S", "subjects": ["a\x0bb"]}),
    ("subjects-all", "S", {"name": "S", "subjects": [">"]}),
    ("subjects-all-noack", "S", {"name": "S", "subjects": [">"], "no_ack": True}),
    ("subjects-js-api", "S", {"name": "S", "subjects": ["$JS.API.>"]}),
    ("subjects-js-api-noack", "S", {"name": "S", "subjects": ["$JS.API.>"], "no_ack": True}),
    ("subjects-js-event", "S", {"name": "S", "subjects": ["$JS.EVENT.>"]}),
    ("subjects-jsc", "S", {"name": "S", "subjects": ["$JSC.x"]}),
    ("subjects-nrg", "S", {"name": "S", "subjects": ["$NRG.>"]}),
    ("subjects-js-star", "S", {"name": "S", "subjects": ["*.API.x"]}),
    ("subjects-sys", "S", {"name": "S", "subjects": ["$SYS.>"]}),
    ("subjects-sys-account", "S", {"name": "S", "subjects": ["$SYS.ACCOUNT.>"]}),
    ("subjects-wildcards", "S", {"name": "S", "subjects": ["a.*", "b.>", "*.c.d"]}),
    # transforms and republish
    ("transform", "S", {"name": "S", "subjects": ["in.*"], "subject_transform": {"src": "in.*", "dest": "out.$1"}}),
    ("transform-range", "S", {"name": "S", "subject_transform": {"src": "in.*", "dest": "out.$2"}}),
    ("transform-src", "S", {"name": "S", "subject_transform": {"src": "in..x", "dest": "out"}}),
    ("transform-left", "S", {"name": "S", "subject_transform": {"src": "in.*", "dest": "out.{{left(1,2)}}"}}),
    ("transform-right-args", "S", {"name": "S", "subject_transform": {"src": "in.*", "dest": "out.{{right(1)}}"}}),
    ("transform-unknown", "S", {"name": "S", "subject_transform": {"src": "in.*", "dest": "out.{{middle(1)}}"}}),
    ("transform-random", "S", {"name": "S", "subject_transform": {"src": "in", "dest": "out.{{random(5)}}"}}),
    ("transform-wildcard-literal-src", "S", {"name": "S", "subject_transform": {"src": "in", "dest": "out.{{wildcard(1)}}"}}),
    ("transform-space", "S", {"name": "S", "subject_transform": {"src": "in.*", "dest": "out.a b"}}),
    ("transform-after-fwc", "S", {"name": "S", "subject_transform": {"src": "in.>", "dest": "out.>.x"}}),
    ("transform-split", "S", {"name": "S", "subject_transform": {"src": "in.*", "dest": "out.{{split(1,- )}}"}}),
    ("transform-partition", "S", {"name": "S", "subjects": ["in.*.*"], "subject_transform": {"src": "in.*.*", "dest": "p.{{partition(3,1,2)}}.$1"}}),
    ("transform-wildcard-empty", "S", {"name": "S", "subject_transform": {"src": "in.*", "dest": "out.{{wildcard( )}}"}}),
    ("transform-no-dest", "S", {"name": "S", "subject_transform": {"src": "in.*", "dest": ""}}),
    ("transform-fwc-mismatch", "S", {"name": "S", "subject_transform": {"src": "in.>", "dest": "out"}}),
    ("republish", "S", {"name": "S", "subjects": ["a.>"], "republish": {"src": "a.*", "dest": "r.$1", "headers_only": True}}),
    ("republish-no-src", "S", {"name": "S", "subjects": ["a.>"], "republish": {"dest": "r.>"}}),
    ("republish-no-src-pedantic", "S", {"name": "S", "subjects": ["a.>"], "republish": {"dest": "r.>"}, "pedantic": True}),
    ("republish-cycle", "S", {"name": "S", "subjects": ["a.>"], "republish": {"src": "a.>", "dest": "a.x"}}),
    ("republish-invalid", "S", {"name": "S", "subjects": ["a.>"], "republish": {"src": "a.*", "dest": "r.$2"}}),
    ("republish-implicit", "S", {"name": "S", "subjects": ["in.*"], "subject_transform": {"src": "in.*", "dest": "out.$1"},
                                 "republish": {"src": ">", "dest": ">"}}),
    ("republish-no-dest", "S", {"name": "S", "subjects": ["a.>"], "republish": {"src": "a.>"}}),
    # placement
    ("placement-empty", "S", {"name": "S", "placement": {}}),
    ("placement-tags-empty", "S", {"name": "S", "placement": {"tags": []}}),
    ("placement-cluster", "S", {"name": "S", "placement": {"cluster": "c", "tags": ["t"]}}),
    ("placement-preferred", "S", {"name": "S", "placement": {"preferred": "srv"}}),
    # mirrors
    ("mirror", "M", {"name": "M", "mirror": {"name": "O", "opt_start_seq": 5}}),
    ("mirror-direct", "M", {"name": "M", "mirror": {"name": "O"}, "mirror_direct": True}),
    ("mirror-time", "M", {"name": "M", "mirror": {"name": "O", "opt_start_time": "2024-06-01T10:00:00.250000Z"}}),
    ("mirror-subjects", "M", {"name": "M", "mirror": {"name": "O"}, "subjects": ["m"]}),
    ("mirror-first-seq", "M", {"name": "M", "mirror": {"name": "O"}, "first_seq": 5}),
    ("mirror-sources", "M", {"name": "M", "mirror": {"name": "O"}, "sources": [{"name": "P"}]}),
    ("mirror-counter", "M", {"name": "M", "mirror": {"name": "O"}, "allow_msg_counter": True}),
    ("mirror-atomic", "M", {"name": "M", "mirror": {"name": "O"}, "allow_atomic": True}),
    ("mirror-batched", "M", {"name": "M", "mirror": {"name": "O"}, "allow_batched": True}),
    ("mirror-schedules", "M", {"name": "M", "mirror": {"name": "O"}, "allow_msg_schedules": True}),
    ("mirror-sdm", "M", {"name": "M", "mirror": {"name": "O"}, "subject_delete_marker_ttl": 2 * SEC}),
    ("mirror-name", "M", {"name": "M", "mirror": {"name": "a.b"}}),
    ("mirror-self", "M", {"name": "M", "mirror": {"name": "M"}}),
    ("mirror-filter", "M", {"name": "M", "mirror": {"name": "O", "filter_subject": "a.*"}}),
    ("mirror-filter-invalid", "M", {"name": "M", "mirror": {"name": "O", "filter_subject": "a..b"}}),
    ("mirror-filters-both", "M", {"name": "M", "mirror": {"name": "O", "filter_subject": "a", "subject_transforms": [{"src": "b", "dest": ""}]}}),
    ("mirror-transforms", "M", {"name": "M", "mirror": {"name": "O", "subject_transforms": [{"src": "a.*", "dest": "x.$1"}, {"src": "b.>", "dest": ""}]}}),
    ("mirror-transforms-overlap", "M", {"name": "M", "mirror": {"name": "O", "subject_transforms": [{"src": "a.*", "dest": ""}, {"src": "a.b", "dest": ""}]}}),
    ("mirror-transform-src", "M", {"name": "M", "mirror": {"name": "O", "subject_transforms": [{"src": "a..", "dest": ""}]}}),
    ("mirror-transform-dest", "M", {"name": "M", "mirror": {"name": "O", "subject_transforms": [{"src": "a.*", "dest": "x.$3"}]}}),
    ("mirror-consumer", "M", {"name": "M", "mirror": {"name": "O", "consumer": {"name": "C", "deliver_subject": "d.m"}}}),
    ("mirror-consumer-wild", "M", {"name": "M", "mirror": {"name": "O", "consumer": {"name": "C", "deliver_subject": "d.*"}}}),
    ("mirror-consumer-start", "M", {"name": "M", "mirror": {"name": "O", "opt_start_seq": 3, "consumer": {"name": "C", "deliver_subject": "d"}}}),
    ("mirror-external", "M", {"name": "M", "mirror": {"name": "O", "external": {"api": "$JS.hub.API", "deliver": "dlv"}}}),
    ("mirror-external-js-api", "M", {"name": "M", "mirror": {"name": "O", "external": {"api": "$JS.API", "deliver": ""}}}),
    ("mirror-external-api-wild", "M", {"name": "M", "mirror": {"name": "O", "external": {"api": "$JS.*.API", "deliver": ""}}}),
    ("mirror-external-deliver-wild", "M", {"name": "M", "mirror": {"name": "O", "external": {"api": "", "deliver": "d.>"}}}),
    ("mirror-external-bad-name", "M", {"name": "M", "mirror": {"name": "a.b", "external": {"api": "$JS.hub.API"}}}),
    # sources
    ("sources", "S", {"name": "S", "sources": [{"name": "A"}, {"name": "B", "filter_subject": "b.*"},
                                               {"name": "C", "subject_transforms": [{"src": "c.*", "dest": "x.$1"}]}]}),
    ("sources-and-subjects", "S", {"name": "S", "subjects": ["s"], "sources": [{"name": "A"}]}),
    ("sources-empty-list", "S", {"name": "S", "sources": []}),
    ("sources-null", "S", {"name": "S", "sources": [None]}),
    ("sources-name", "S", {"name": "S", "sources": [{"name": "a*"}]}),
    ("sources-dup", "S", {"name": "S", "sources": [{"name": "A"}, {"name": "A", "filter_subject": ">"}]}),
    ("sources-same-origin", "S", {"name": "S", "sources": [{"name": "A", "filter_subject": "a"}, {"name": "A", "filter_subject": "b"}]}),
    ("sources-filter-invalid", "S", {"name": "S", "sources": [{"name": "A", "filter_subject": "a..b"}]}),
    ("sources-filters-both", "S", {"name": "S", "sources": [{"name": "A", "filter_subject": "a", "subject_transforms": [{"src": "b", "dest": ""}]}]}),
    ("sources-transform-overlap", "S", {"name": "S", "sources": [{"name": "A", "subject_transforms": [{"src": "a.*", "dest": ""}, {"src": "a.b", "dest": ""}]}]}),
    ("sources-transform-collide", "S", {"name": "S", "sources": [{"name": "A", "subject_transforms": [{"src": "a.*", "dest": ""}, {"src": "*.b", "dest": ""}]}]}),
    ("sources-transform-dest", "S", {"name": "S", "sources": [{"name": "A", "subject_transforms": [{"src": "a", "dest": "b.{{nope()}}"}]}]}),
    ("sources-self", "S", {"name": "S", "subjects": ["s.>"], "sources": [{"name": "S"}]}),
    ("sources-self-other-subjects", "S", {"name": "S", "subjects": ["s.>"], "sources": [{"name": "S", "filter_subject": "t.>"}]}),
    ("sources-consumers-dup", "S", {"name": "S", "sources": [{"name": "A", "filter_subject": "", "consumer": {"name": "C", "deliver_subject": "d1"}},
                                                             {"name": "A", "subject_transforms": [{"src": "x", "dest": ""}], "consumer": {"name": "C", "deliver_subject": "d2"}}]}),
    ("sources-consumer-filter", "S", {"name": "S", "sources": [{"name": "A", "filter_subject": "a", "consumer": {"name": "C", "deliver_subject": "d"}}]}),
    ("sources-external", "S", {"name": "S", "sources": [{"name": "A", "external": {"api": "$JS.leaf.API", "deliver": "x.y"}}, {"name": "A"}]}),
    ("sources-external-deliver-wild", "S", {"name": "S", "sources": [{"name": "A", "external": {"api": "", "deliver": "x.*"}}]}),
    ("sources-time", "S", {"name": "S", "sources": [{"name": "A", "opt_start_time": "2024-01-01T00:00:00+02:00"}]}),
    ("sources-consumer", "S", {"name": "S", "sources": [{"name": "A", "consumer": {"name": "C", "deliver_subject": "d"}}]}),
    ("sources-first-seq-dup", "S", {"name": "S", "sources": [{"name": "A"}], "first_seq": 9, "duplicate_window": 5 * SEC}),
    ("sources-replace", "S", b'{"name":"S","sources":[{"name":"A"},{"name":"B"}],"sources":[{"name":"C"}]}'),
    # more corners
    ("unicode-name", "\u00f1and\u00fa", {"name": "\u00f1and\u00fa"}),
    ("unicode-name-real", "ñandú", {"name": "ñandú"}),
    ("description-4096", "S", {"name": "S", "description": big(4096)}),
    ("nested-unknown", "S", {"name": "S", "consumer_limits": {"max_ack_pending": 1, "bogus": 2}}),
    ("metadata-digit-key", "S", {"name": "S", "metadata": {"0": 5}}),
    ("subjects-fwc-middle", "S", {"name": "S", "subjects": ["a.>.b"]}),
    ("subjects-sys-noack", "S", {"name": "S", "subjects": ["$SYS.>"], "no_ack": True}),
    ("republish-src-elsewhere", "S", {"name": "S", "subjects": ["a.>"], "republish": {"src": "z.>", "dest": "r.>"}}),
    ("republish-implicit-pedantic", "S", {"name": "S", "subjects": ["in.*"], "subject_transform": {"src": "in.*", "dest": "out.$1"},
                                          "republish": {"src": ">", "dest": ">"}, "pedantic": True}),
    ("transform-empty-src", "S", {"name": "S", "subjects": ["in.>"], "subject_transform": {"src": "", "dest": "x.>"}}),
    ("mirror-dup-window", "M", {"name": "M", "mirror": {"name": "O"}, "duplicate_window": 5 * SEC, "max_age": 60 * SEC}),
    ("mirror-ttl", "M", {"name": "M", "mirror": {"name": "O"}, "allow_msg_ttl": True}),
    ("mirror-consumer-filter", "M", {"name": "M", "mirror": {"name": "O", "filter_subject": "x", "consumer": {"name": "C", "deliver_subject": "d"}}}),
    ("memory-s2", "S", {"name": "S", "storage": "memory", "compression": "s2"}),
    ("counter-direct", "S", {"name": "S", "allow_msg_counter": True, "allow_direct": True}),
    ("sealed-false", "S", {"name": "S", "sealed": False}),
    ("everything", "E", {"name": "E", "description": "all", "subjects": ["e.>"], "retention": "interest", "max_consumers": 4,
                         "max_msgs": 100, "max_bytes": 1 << 20, "max_age": 3600 * SEC, "max_msgs_per_subject": 3,
                         "max_msg_size": 4096, "discard": "new", "storage": "memory", "num_replicas": 1, "no_ack": False,
                         "duplicate_window": 60 * SEC, "placement": {"cluster": "c", "tags": ["a", "b"]},
                         "compression": "none", "first_seq": 7, "subject_transform": {"src": "e.>", "dest": "f.>"},
                         "republish": {"src": "f.>", "dest": "g.>", "headers_only": False}, "allow_direct": True,
                         "mirror_direct": False, "discard_new_per_subject": True, "sealed": False, "deny_delete": True,
                         "deny_purge": False, "allow_rollup_hdrs": True, "consumer_limits": {"inactive_threshold": SEC, "max_ack_pending": 9},
                         "allow_msg_ttl": True, "subject_delete_marker_ttl": 10 * SEC, "allow_msg_counter": False,
                         "allow_atomic": True, "allow_msg_schedules": False, "persist_mode": "default", "allow_batched": True,
                         "metadata": {"x": "y"}, "pedantic": False}),
]


@pytest.mark.parametrize("name,body", [c[1:] for c in CREATE], ids=[c[0] for c in CREATE])
def test_create_matches_reference(ref, name, body):
    try: check_create(ref, name, body)
    finally: ref.delete(name)


# (id, create body, [update bodies applied in turn], stream name in the update subject (default: the stream's))
UPDATE = [
    ("subjects", {"name": "U", "subjects": ["a"]}, [{"name": "U", "subjects": ["a", "b.>"], "max_msgs": 100}]),
    ("nats-py-resend", {"name": "U", "subjects": ["a"]}, ["REPLY"]),
    ("metadata", {"name": "U", "metadata": {"a": "1"}}, [{"name": "U", "metadata": {"b": "2", "_nats.req.level": "3"}}, {"name": "U"}]),
    ("name-mismatch", {"name": "U"}, [{"name": "V"}]),
    ("invalid", {"name": "U"}, [{"name": "U", "max_age": MS}]),
    ("unknown-field", {"name": "U"}, [{"name": "U", "nope": True}]),
    ("storage", {"name": "U"}, [{"name": "U", "storage": "memory"}]),
    ("retention-interest", {"name": "U"}, [{"name": "U", "retention": "interest"}, {"name": "U"}]),
    ("retention-workqueue", {"name": "U"}, [{"name": "U", "retention": "workqueue"}]),
    ("retention-from-workqueue", {"name": "U", "retention": "workqueue"}, [{"name": "U", "retention": "limits"}]),
    ("replicas", {"name": "U"}, [{"name": "U", "num_replicas": 3}]),
    ("seal", {"name": "U", "max_age": 3600 * SEC, "allow_rollup_hdrs": True}, [
        {"name": "U", "max_age": 3600 * SEC, "allow_rollup_hdrs": True, "sealed": True}, {"name": "U", "sealed": False}]),
    ("seal-pedantic", {"name": "U"}, [{"name": "U", "sealed": True, "pedantic": True}]),
    ("deny-delete", {"name": "U", "deny_delete": True}, [{"name": "U"}]),
    ("deny-purge", {"name": "U", "deny_purge": True}, [{"name": "U", "deny_delete": True}]),
    ("deny-on", {"name": "U"}, [{"name": "U", "deny_delete": True, "deny_purge": True}]),
    ("ttl-off", {"name": "U", "allow_msg_ttl": True}, [{"name": "U"}]),
    ("ttl-on", {"name": "U"}, [{"name": "U", "allow_msg_ttl": True, "subject_delete_marker_ttl": 5 * SEC}]),
    ("counter-on", {"name": "U"}, [{"name": "U", "allow_msg_counter": True}]),
    ("counter-off", {"name": "U", "allow_msg_counter": True}, [{"name": "U"}]),
    ("schedules-off", {"name": "U", "allow_msg_schedules": True}, [{"name": "U", "allow_rollup_hdrs": True}]),
    ("schedules-on", {"name": "U"}, [{"name": "U", "allow_msg_schedules": True}]),
    ("persist", {"name": "U"}, [{"name": "U", "persist_mode": "async"}]),
    ("atomic-batched", {"name": "U"}, [{"name": "U", "allow_atomic": True}, {"name": "U", "allow_batched": True}, {"name": "U"}]),
    ("discard-new-per", {"name": "U", "discard": "new", "max_msgs_per_subject": 5}, [
        {"name": "U", "discard": "new", "max_msgs_per_subject": 5, "discard_new_per_subject": True},
        {"name": "U", "discard_new_per_subject": True, "max_msgs_per_subject": 5}]),
    ("mirror-change", {"name": "U", "mirror": {"name": "O"}}, [{"name": "U", "mirror": {"name": "O", "opt_start_seq": 2}}]),
    ("mirror-same", {"name": "U", "mirror": {"name": "O", "filter_subject": "x"}}, [{"name": "U", "mirror": {"name": "O", "filter_subject": "x"}, "max_msgs": 5}]),
    ("mirror-promote", {"name": "U", "mirror": {"name": "O"}}, [{"name": "U"}]),
    ("mirror-direct-alone", {"name": "U"}, [{"name": "U", "mirror_direct": True}]),
    ("sources-change", {"name": "U", "sources": [{"name": "A"}]}, [{"name": "U", "sources": [{"name": "A"}, {"name": "B"}]}, {"name": "U", "sources": [{"name": "B", "filter_subject": "x..y"}]}]),
    ("republish-no-dest", {"name": "U", "subjects": ["a.>"], "republish": {"src": "a.>"}}, [{"name": "U", "subjects": ["a.>"], "republish": {"src": "a.>"}}]),
    ("republish-no-src", {"name": "U", "subjects": ["a.>"]}, [{"name": "U", "subjects": ["a.>"], "republish": {"dest": "r.>"}}]),
    ("memory-grow", {"name": "U", "storage": "memory", "max_bytes": 32 << 20}, [
        {"name": "U", "storage": "memory", "max_bytes": 60 << 20}, {"name": "U", "storage": "memory", "max_bytes": 80 << 20}]),
    ("consumer-limits", {"name": "U"}, [{"name": "U", "consumer_limits": {"max_ack_pending": 50}}]),
    ("no-name", {"name": "U"}, [{"subjects": ["x"]}]),
    ("pedantic", {"name": "U"}, [{"name": "U", "max_bytes": -4, "pedantic": True}, {"name": "U", "max_bytes": -4}]),
    ("transforms", {"name": "U", "subjects": ["in.*"]}, [
        {"name": "U", "subjects": ["in.*"], "subject_transform": {"src": "in.*", "dest": "out.$1"}, "description": "d"},
        {"name": "U", "subjects": ["in.*"], "subject_transform": {"src": "in.*", "dest": "out.$2"}}]),
    ("sealed-again", {"name": "U"}, [{"name": "U", "sealed": True}, {"name": "U", "sealed": True, "max_msgs": 3}]),
    ("nats-py-from-info", {"name": "U", "subjects": ["a.>"], "max_age": 60 * SEC, "allow_direct": True}, ["NATS-PY"]),
    ("bytes", {"name": "U"}, [b'{"name":"U","subjects":["x"]} {"max_msgs":7}', b'{"name":"U","max_msgs":"7"}']),
]


@pytest.mark.parametrize("create,updates", [c[1:3] for c in UPDATE], ids=[c[0] for c in UPDATE])
def test_update_matches_reference(ref, create, updates):
    name = create["name"]
    try:
        created = check_create(ref, name, create)
        assert "config" in created, created
        old = created["config"]
        for body in updates:
            if body == "REPLY": body = json.loads(json.dumps(old))  # a client sending back what it was told
            if body == "NATS-PY": body = nats_py_update(old)
            reply = theirs(ref.request(f"$JS.API.STREAM.UPDATE.{name}", payload(body)))
            kw = dict(max_memory=MAX_MEMORY - max(old["max_bytes"], 0) if old["storage"] == "memory" else MAX_MEMORY,
                      max_file=MAX_FILE - max(old["max_bytes"], 0) if old["storage"] == "file" else MAX_FILE)
            assert ours(stream_config_for_update, old, payload(body), name, **kw) == reply
            if not isinstance(body, bytes): assert ours(stream_config_for_update, old, body, name, **kw) == reply
            if "config" in reply: old = reply["config"]
    finally:
        ref.delete(name)


# Two streams: does the reference refuse the second one's subjects (10065)?
OVERLAP = [
    (["a.>"], ["a.b"]), (["a.*"], ["a.b.c"]), (["a.*.c"], ["a.b.*"]), (["foo"], ["bar"]), (["a.*"], ["*.b"]),
    (["a.b.>"], ["a.*"]), (["*.*"], ["a.>"]), (["a.*x"], ["a.b"]), (["a.*x"], ["a.*"]), (["x", "y.*"], ["z", "y.q"]),
    (["a.b"], ["a.b"]), (["a"], ["a.>"]), (["a.>"], ["b.>"]), (["*"], ["a"]), ([">"], ["x.y.z"]), (["a.*.*"], ["a.>"]),
]


@pytest.mark.parametrize("first,second", OVERLAP, ids=[f"{a}-{b}" for a, b in OVERLAP])
def test_overlap_matches_reference(ref, first, second):
    try:
        assert "config" in ref.request("$JS.API.STREAM.CREATE.O1", payload({"name": "O1", "subjects": first, "no_ack": True}))
        reply = ref.request("$JS.API.STREAM.CREATE.O2", payload({"name": "O2", "subjects": second, "no_ack": True}))
        refused = reply.get("error", {}).get("err_code") == 10065
        assert "config" in reply or refused, reply
        assert subjects_overlap(second, first) == refused == subjects_overlap(first, second)
    finally:
        ref.delete("O1"); ref.delete("O2")
