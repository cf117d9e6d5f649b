"""Chromium for the documentation checks, set up once before any test runs, and Playwright kept in a thread of its own.

`ensure_chromium` runs once per test session, in pytest's main process (never in an xdist worker), before the tests
start: it finds Chromium, or installs it from Debian's packages when the run is root, waiting for the package
manager's lock when another program holds it. What it does and why it fails is written on the terminal as it happens;
the result is left in the environment (`JSNB_CHROMIUM`, or `JSNB_BROWSER_PROBLEM`) for the workers, which never try
again.

Playwright's sync API runs an asyncio event loop in the thread that uses it, and that loop stays "running" there
between calls: a test that calls `asyncio.run` later in the same thread fails. So the browser lives in a thread of
its own (`BrowserThread`), and tests reach it through a proxy that runs every call in that thread; the test's own
thread never has a loop of Playwright's."""
import os, queue, shutil, subprocess, sys, threading, time
from concurrent.futures import Future

CHROMIUM_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                  '--disable-background-networking', '--disable-component-update', '--disable-sync']
LOCK_WAIT = 1800          # seconds to wait for another program's apt or dpkg to finish


def find_chromium():
    for name in (os.environ.get('JSNB_CHROMIUM'), 'chromium', 'chromium-browser', 'google-chrome'):
        if name and (path := shutil.which(name)): return path
    return None


def _apt(args: list[str], say) -> subprocess.CompletedProcess:
    "Run apt-get, waiting while another program holds the package manager's lock (said once on the terminal)."
    env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
    deadline, said = time.monotonic() + LOCK_WAIT, False
    while True:
        r = subprocess.run(['apt-get', '-o', f'DPkg::Lock::Timeout={LOCK_WAIT}', *args], env=env, capture_output=True, text=True)
        locked = r.returncode != 0 and ('Could not get lock' in r.stderr or 'Unable to lock' in r.stderr)
        if not locked or time.monotonic() > deadline: return r
        if not said:
            held = next((l for l in r.stderr.splitlines() if 'held by' in l or 'lock' in l), '').strip()
            say(f'  another program holds the package manager\'s lock; waiting for it (at most {LOCK_WAIT // 60} min): {held}')
            said = True
        time.sleep(5)


def ensure_chromium(say=lambda text: print(text, file=sys.__stderr__, flush=True)) -> str | None:
    """Chromium's path, installing it when missing and running as root; None with `JSNB_BROWSER_PROBLEM` set when it
    cannot be had (or `JSNB_SKIP_BROWSER` asks not to). Sets `JSNB_CHROMIUM` for the workers."""
    if os.environ.get('JSNB_SKIP_BROWSER', '') not in ('', '0') or os.environ.get('JSNB_BROWSER_PROBLEM'): return None
    if path := find_chromium():
        os.environ['JSNB_CHROMIUM'] = path; return path
    if not (shutil.which('apt-get') and os.geteuid() == 0):
        problem = ('Chromium is needed to check the documentation site: install it (Debian: `apt-get install chromium`), '
                   'point JSNB_CHROMIUM at a Chromium or Chrome binary, or set JSNB_SKIP_BROWSER=1 to skip these checks')
    else:
        say('Chromium is not installed: installing it with `apt-get install chromium` (Debian packages, about 120 of them, '
            'a few minutes) to check the documentation site in a real browser. Set JSNB_SKIP_BROWSER=1 to skip these checks.')
        t = time.monotonic()
        _apt(['update', '-qq'], say)
        r = _apt(['install', '-y', '-qq', 'chromium'], say)
        if path := find_chromium():
            say(f'  Chromium installed in {time.monotonic() - t:.0f} s: {path}')
            os.environ['JSNB_CHROMIUM'] = path; return path
        problem = f'`apt-get install chromium` failed ({r.returncode}): ' + ' '.join((r.stderr or r.stdout).split()[-60:])
    say(f'  {problem}')
    os.environ['JSNB_BROWSER_PROBLEM'] = problem
    return None


class BrowserThread:
    "A Chromium browser driven by Playwright's sync API in a thread of its own; `call(fn, ...)` runs `fn` there."
    def __init__(self, chromium: str):
        self.jobs, ready = queue.Queue(), Future()
        self.thread = threading.Thread(target=self._main, args=(chromium, ready), name='playwright', daemon=True)
        self.thread.start()
        self.browser = Proxy(self, ready.result(timeout=300))

    def _main(self, chromium: str, ready: Future):
        try:
            from playwright.sync_api import sync_playwright
            with sync_playwright() as p:
                b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
                ready.set_result(b)
                while (job := self.jobs.get()) is not None:
                    fut, fn, a, k = job
                    try: fut.set_result(fn(*a, **k))
                    except BaseException as e: fut.set_exception(e)
                b.close()
        except BaseException as e:
            if not ready.done(): ready.set_exception(e)

    def call(self, fn, *a, **k):
        if threading.current_thread() is self.thread: return fn(*a, **k)
        fut = Future(); self.jobs.put((fut, fn, a, k))
        return fut.result()

    def close(self):
        self.jobs.put(None); self.thread.join(60)


def _wrap(runner: BrowserThread, v):
    if isinstance(v, list): return [_wrap(runner, x) for x in v]
    return Proxy(runner, v) if type(v).__module__.startswith('playwright.') else v


class Proxy:
    "A Playwright object whose every attribute, call and `with` block runs in the browser's thread."
    def __init__(self, runner: BrowserThread, obj): self._runner, self._obj = runner, obj

    def __getattr__(self, name):
        v = self._runner.call(getattr, self._obj, name)
        if not callable(v): return _wrap(self._runner, v)
        return lambda *a, **k: _wrap(self._runner, self._runner.call(v, *a, **k))

    def __enter__(self): return _wrap(self._runner, self._runner.call(self._obj.__enter__))
    def __exit__(self, *exc): return self._runner.call(self._obj.__exit__, *exc)
