"""Shared pieces of the differential tests: blanking the values that differ between any two runs."""

VOLATILE = {'created', 'ts', 'first_ts', 'last_ts', 'time', 'leader', 'server', 'id', 'timestamp', 'start', 'rtt'}


def blank(x):
    "`x` with every per-run value (times, ids, server names) replaced by `'<v>'`."
    if isinstance(x, dict): return {k: ('<v>' if k in VOLATILE else blank(v)) for k, v in x.items()}
    if isinstance(x, list): return [blank(v) for v in x]
    return x
