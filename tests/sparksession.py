"""What the Spark test modules share: their session (jsnb's `local_session` on `local[2,2]`, so that a failed task
is retried once, as on a cluster, with Spark's own logging off), a module-scoped `spark` fixture made of it, and a
look at what Spark's Python workers wrote to stderr."""
import time
import pytest
from jsnb.clients.spark import local_session


def local_spark(app: str, **conf):
    "A session named `app`, with `conf` (Spark settings) on top of `local_session`'s."
    s = local_session(app, **{'spark.master': 'local[2,2]', **conf})
    s.sparkContext.setLogLevel('OFF')
    return s


@pytest.fixture(scope='module')
def spark(request):
    "One local session for the test module (named after it)."
    s = local_spark(request.module.__name__.replace('_', '-'))
    yield s
    s.stop()


def stderr_until(request, text, timeout=15):
    """What Spark's Python workers wrote to stderr, once `text` is in it (their output reaches us a little later).

    The session's JVM (and the workers it starts) write to the file pytest captured stderr into when
    the JVM started, so that is where to look."""
    capman = request.config.pluginmanager.getplugin('capturemanager')
    if capman is None or not capman.is_globally_capturing(): pytest.skip('stderr is not captured (-s)')
    err, end = '', time.time() + timeout
    while text not in err and time.time() < end:
        time.sleep(0.2); err += capman.read_global_capture()[1]
    return err


def failed_tasks(spark, group: str) -> int:
    "How many task attempts failed in the jobs run under the job group `group` (`sparkContext.setJobGroup`)."
    t = spark.sparkContext.statusTracker()
    stages = [s for j in t.getJobIdsForGroup(group) if (job := t.getJobInfo(j)) for s in job.stageIds]
    return sum(info.numFailedTasks for s in stages if (info := t.getStageInfo(s)))
