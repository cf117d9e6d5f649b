"A notebook's leftovers end with its test (`procgroup.run_group`)."
import pathlib, sys, time
from procgroup import run_group

LEAVE = 'import subprocess, sys; p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]); print(p.pid)'


def _gone(pid: int, within: float = 60) -> bool:
    "Whether process `pid` ended (absent, or a zombie waiting for its new parent to reap it)."
    end = time.monotonic() + within
    while time.monotonic() < end:
        try: state = pathlib.Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError): return True
        if state in ('Z', 'X'): return True
        time.sleep(0.05)
    return False


def test_a_process_left_running_is_ended():
    rc, out, _ = run_group([sys.executable, '-c', LEAVE], 120)
    assert rc == 0 and _gone(int(out))


def test_at_the_timeout_the_whole_group_is_ended():
    rc, out, err = run_group([sys.executable, '-c', LEAVE + '; sys.stdout.flush(); print("started", file=sys.stderr, end=""); '
                              'sys.stderr.flush(); import time; time.sleep(600)'], 5)
    assert (rc, err) == (-9, 'started\n(killed after 5 s)') and _gone(int(out))
