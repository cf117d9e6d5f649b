"""The Spark test modules' session: jsnb's `local_session` (this interpreter's workers, the `jetstream` source
registered) on `local[2,2]`, so that a failed task is retried once, as on a cluster, with Spark's own logging off."""
from jsnb.clients.spark import local_session


def local_spark(app: str, **conf):
    "A session named `app`, with `conf` (Spark settings) on top of `local_session`'s."
    s = local_session(app, **{'spark.master': 'local[2,2]', **conf})
    s.sparkContext.setLogLevel('OFF')
    return s
