"""Shared pieces of the differential tests: blanking the values that differ between any two runs."""

VOLATILE = {'created', 'ts', 'first_ts', 'last_ts', 'time', 'leader', 'server', 'id', 'timestamp', 'start', 'rtt'}


def blank(x):
    "`x` with every per-run value (times, ids, server names) replaced by `'<v>'`."
    if isinstance(x, dict): return {k: ('<v>' if k in VOLATILE else blank(v)) for k, v in x.items()}
    if isinstance(x, list): return [blank(v) for v in x]
    return x


async def run_both(start_server, scenario, transcript, *flags, config=None):
    "Run `scenario(transcript(nc))` on the reference and on jsnb; every step's record must be equal."
    import asyncio, nats
    out = {}
    for kind in ('nats-server', 'jsnb'):
        s = start_server(kind, '-js', *flags, config=config)
        nc = await asyncio.wait_for(nats.connect(s.url), 15)
        t = transcript(nc)
        try: await scenario(t)
        finally: await nc.close()
        out[kind] = t.log
    ref, ours = out['nats-server'], out['jsnb']
    assert [s for s, _ in ours] == [s for s, _ in ref]
    diffs = [f'step {i} {label}:\n jsnb: {o}\n  ref: {r}' for i, ((label, r), (_, o)) in enumerate(zip(ref, ours)) if o != r]
    assert not diffs, f'{len(diffs)} of {len(ref)} steps differ:\n' + '\n'.join(diffs)
    return ref
