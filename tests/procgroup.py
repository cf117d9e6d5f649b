"""A test's subprocess in a process group of its own, ended with everything it started.

A notebook that fails between starting a server and stopping it (or that is killed at its timeout)
would otherwise leave that server running after the test, holding ports and CPU for the tests after it.
The output goes to files, not pipes: a process left running would hold a pipe open, and reading it to its
end would wait for that process."""
import os, signal, subprocess, tempfile


def end_group(pgid: int):
    "Kill every process left in process group `pgid`."
    try: os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError: pass


def run_group(cmd: list[str], timeout: float, quiet: bool = False, **kw) -> tuple[int, str, str]:
    """Run `cmd` in a new session: (return code, stdout, stderr; stdout is '' with `quiet`). Once it ends, or at
    `timeout` s (the return code is then -9 and stderr says so), every process it left in its group is killed."""
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL if quiet else out, stderr=err, start_new_session=True, **kw)
        try: proc.wait(timeout)
        except subprocess.TimeoutExpired: end_group(proc.pid); proc.wait(); err.seek(0, 2); err.write(f'\n(killed after {timeout} s)')
        end_group(proc.pid)
        out.seek(0); err.seek(0)
        return proc.returncode, out.read(), err.read()
