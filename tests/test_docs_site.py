"""The documentation site, rendered by `jsnb-docs site` and checked in headless Chromium: every
page loads without errors, every link between pages resolves (anchors included), no saved output
is an error, the previous/next chain visits every page from `file://`, and three pages render to
screenshots of three pages (kept in .screenshots/).

The browser is driven with Playwright (the `playwright` package from PyPI) pointed at the
machine's Chromium with `executable_path`: it gives response statuses, page errors, DOM queries
and screenshots from one small API. The raw DevTools protocol would need a websocket client and
hand-written event handling, and Chromium's CLI modes (`--dump-dom`, `--screenshot`) start a
browser per page and report neither statuses nor script errors. Playwright's own browser
download is not used (and does not work on these machines)."""
import functools, http.server, os, pathlib, shutil, struct, subprocess, sys, threading
import pytest
from browser import BrowserThread, ensure_chromium

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(1200)        # a fresh machine may have to install Chromium first

@pytest.fixture(scope='session')
def chromium_path():
    """Chromium, as the test session's first step found or installed it (tests/browser.py); the reason it could not,
    said once on the terminal, otherwise. `JSNB_SKIP_BROWSER=1` skips the browser checks instead."""
    if os.environ.get('JSNB_SKIP_BROWSER', '') not in ('', '0'):
        pytest.skip('JSNB_SKIP_BROWSER is set: the documentation site is not checked in a browser')
    path = ensure_chromium()            # done already in the main process: this finds it, or the reason it is missing
    if path is None: pytest.fail(os.environ.get('JSNB_BROWSER_PROBLEM', 'Chromium is missing'), pytrace=False)
    return path


@pytest.fixture(scope='module')
def browser(chromium_path):
    "A browser whose Playwright calls all run in a thread of their own (tests/browser.py)."
    try: import playwright.sync_api  # noqa: F401
    except ImportError: pytest.fail('the `playwright` package is needed to check the documentation site: pip install playwright')
    t = BrowserThread(chromium_path)
    yield t.browser
    t.close()


def test_no_event_loop_is_left_in_the_tests_thread(browser):
    "With the browser open and in use, the tests' own thread has no running event loop: `asyncio.run` works in it."
    import asyncio
    page = browser.new_page(); page.set_content('<p>x</p>'); assert page.inner_text('p') == 'x'
    assert asyncio.run(asyncio.sleep(0, 'ok')) == 'ok'
    page.close()


_PAGES: list[str] = []      # the pages written, in sidebar order (notebooks may be added while the tests run)
_NOTEBOOK_PAGES: list[str] = []   # the pages of the notebooks found just before rendering
_PROBLEMS: list[str] = []         # what the browser reported while loading the pages


@pytest.fixture(scope='module')
def site_dir(tmp_path_factory):
    "The site as `jsnb-docs site` writes it."
    from jsnb.tools.docs import page_names, site, site_pages
    out = tmp_path_factory.mktemp('site') / '_docs'
    _NOTEBOOK_PAGES[:] = page_names((p for _, p in site_pages(ROOT / 'nbs')), ROOT / 'nbs').values()
    _PAGES[:] = [p.name for p in site(ROOT, out)]
    return out


@pytest.fixture(scope='module')
def http_url(site_dir):
    "The site served over HTTP by a static file server, as it would be published."
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Quiet, directory=str(site_dir)))
    t = threading.Thread(target=srv.serve_forever, daemon=True); t.start()
    yield f'http://127.0.0.1:{srv.server_address[1]}/'
    srv.shutdown(); srv.server_close()


def _expected_pages(): return list(_PAGES)


_PAGE_FACTS = '''() => ({
  title: document.querySelector('h1.title')?.textContent || '',
  summary: document.querySelector('.page-header .summary')?.textContent || '',
  navTitles: Array.from(document.querySelectorAll('nav.sidebar .nav a, .pager a'), a => a.textContent),
  width: document.documentElement.scrollWidth,
  toc: Array.from(document.querySelectorAll('.toc a'), a => a.getAttribute('href')),
  headings: Array.from(document.querySelectorAll('.notebook h2[id], .notebook h3[id]'), h => '#' + h.id),
  topnav: Array.from(document.querySelectorAll('.topbar .topnav a'), a => a.textContent),
  topnavCurrent: Array.from(document.querySelectorAll('.topbar .topnav a.current'), a => a.textContent),
  sidebar: Array.from(document.querySelectorAll('nav.sidebar .nav a'), a => a.getAttribute('href')),
  current: Array.from(document.querySelectorAll('nav.sidebar a.current'), a => a.getAttribute('href')),
  links: Array.from(document.querySelectorAll('a[href]'), a => a.href),
  ids: Array.from(document.querySelectorAll('[id]'), e => e.id),
  errors: document.querySelectorAll('.output_error').length,
  text: document.body.innerText,
  code: Array.from(document.querySelectorAll('.input_area'), e => e.textContent),
  cards: Array.from(document.querySelectorAll('.api-card > .api-title[id]'), e => e.id),
  brokenImages: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).length,
  images: document.images.length,
  stylesheet: getComputedStyle(document.querySelector('nav.sidebar')).position,
})'''


@pytest.fixture(scope='module')
def pages(browser, site_dir, http_url):
    "Load every page over HTTP once; keep what each one showed."
    names = _expected_pages()
    facts, page = {}, browser.new_page(viewport={'width': 1280, 'height': 800})
    problems = []
    page.on('pageerror', lambda e: problems.append(f'{page.url}: script error {e}'))
    page.on('console', lambda m: m.type == 'error' and problems.append(f'{page.url}: console error {m.text}'))
    page.on('requestfailed', lambda r: problems.append(f'{page.url}: failed to load {r.url}'))
    page.on('response', lambda r: r.status >= 400 and problems.append(f'{page.url}: {r.status} for {r.url}'))
    for name in names:
        r = page.goto(http_url + name)
        assert r is not None and r.status == 200, (name, r and r.status)
        facts[name] = page.evaluate(_PAGE_FACTS)
    page.close()
    _PROBLEMS[:] = problems
    return facts


def test_every_page_is_rendered(site_dir):
    "Every notebook has its page, listed in the sidebar or not, and the index comes first."
    names = _expected_pages()
    assert names[0] == 'index.html'
    assert set(_NOTEBOOK_PAGES) <= set(names), set(_NOTEBOOK_PAGES) - set(names)
    assert sorted(p.name for p in site_dir.glob('*.html')) == sorted(names)
    assert (site_dir / 'jsnb.css').stat().st_size > 1000


def test_console_script(tmp_path):
    "`jsnb-docs site --root R --out DIR` renders R's notebooks into DIR (here a project of one page)."
    (tmp_path / 'proj' / 'nbs').mkdir(parents=True)
    for f in ['index.ipynb', 'styles.css']: shutil.copy(ROOT / 'nbs' / f, tmp_path / 'proj' / 'nbs' / f)
    r = subprocess.run([sys.executable, '-c', 'import sys; from jsnb.tools.docs import main; sys.exit(main())', 'site',
                        '--root', str(tmp_path / 'proj'), '--out', str(tmp_path / 'out')], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('wrote 1 page to') and (tmp_path / 'out' / 'index.html').exists()


@pytest.mark.parametrize('what', ['site', 'readme', 'sidebar'])
def test_console_script_outside_a_project(tmp_path, what):
    "`jsnb-docs` run where there is no project says so on stderr, exits with status 1 and writes nothing."
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')]).rstrip(os.pathsep))
    r = subprocess.run([sys.executable, '-c', 'import sys; from jsnb.tools.docs import main; sys.exit(main())', what],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and 'no nbdev project' in r.stderr and r.stdout == '', (r.returncode, r.stdout, r.stderr)
    assert list(tmp_path.iterdir()) == []


def test_every_page_loads(pages):
    "Each page loads without a script error, a console error or a missing file, and shows the whole sidebar."
    assert not _PROBLEMS, '\n'.join(_PROBLEMS)
    names = _expected_pages()
    for name, f in pages.items():
        assert f['title'].strip(), f'{name}: no title'
        assert f['sidebar'] == names, f'{name}: the sidebar does not list every page in order'
        assert f['current'] == [name], f'{name}: the sidebar marks {f["current"]} as current'
        assert f['stylesheet'] == 'fixed', f'{name}: the stylesheet is not applied'
        assert f['brokenImages'] == 0, f'{name}: {f["brokenImages"]} images did not load'


def test_no_cell_error_in_any_output(pages):
    for name, f in pages.items():
        assert f['errors'] == 0, f'{name}: {f["errors"]} error outputs'
        assert 'Traceback (most recent call last)' not in f['text'], f'{name}: a traceback in the page'


def test_directives_are_applied(pages):
    "No `#|` line is shown; the code of `#| export` cells is there (folded)."
    for name, f in pages.items():
        for code in f['code']:
            assert not any(l.startswith('#|') for l in code.splitlines()), f'{name}: a directive is shown:\n{code}'
    assert any('def site(' in c for c in pages['docs.html']['code'])     # an `#| export` cell, shown as code


def test_every_link_resolves(pages, http_url, site_dir):
    "Every link to the site points at a page that exists and, with an anchor, at an element of it (source pages included)."
    import re
    bad, sources = [], {}
    for name, f in pages.items():
        for link in f['links']:
            if not link.startswith(http_url): continue       # external sites are not checked (no network here)
            target, _, frag = link[len(http_url):].partition('#')
            target = target or name
            if target.startswith('src/'):
                if target not in sources:
                    p = site_dir / target
                    sources[target] = set(re.findall(r'id="([^"]+)"', p.read_text())) if p.is_file() else None
                if sources[target] is None: bad.append(f'{name} -> {link}: no such source page')
                elif frag and frag not in sources[target]: bad.append(f'{name} -> {link}: no line #{frag}')
            elif target not in pages: bad.append(f'{name} -> {link}: no such page')
            elif frag and frag not in pages[target]['ids']: bad.append(f'{name} -> {link}: no element #{frag}')
    assert not bad, '\n'.join(bad)


def test_pager_walks_the_site_from_files(browser, site_dir):
    """From `file://`, following 'next' visits every page in sidebar order, and each page's 'prev' leads to the page
    before it (the link as the browser resolves it; the walk waits for each page's document, not its images)."""
    names = _expected_pages()
    page = browser.new_page()
    page.goto((site_dir / 'index.html').as_uri())
    def link(rel):
        a = page.locator(f'a[rel={rel}]')
        return a.evaluate('a => a.href').rsplit('/', 1)[1] if a.count() else None
    seen, back = [], []
    while True:
        seen.append(page.url.rsplit('/', 1)[1]); back.append(link('prev'))
        if link('next') is None: break
        page.locator('a[rel=next]').click(); page.wait_for_load_state('domcontentloaded')
    assert seen == names
    assert back == [None] + names[:-1]
    page.close()


SCREENSHOTS = ROOT / '.screenshots'      # kept after the run for inspection (ignored by git)


@pytest.mark.parametrize('name', ['index.html', 'direct_get.html', 'performance.html'])
def test_screenshots(browser, site_dir, name):
    "Three pages render to real pictures, saved under .screenshots/ for a person to look at."
    page = browser.new_page(viewport={'width': 1280, 'height': 900})
    page.goto((site_dir / name).as_uri())
    SCREENSHOTS.mkdir(exist_ok=True)
    shot = SCREENSHOTS / name.replace('/', '__').replace('.html', '.png')
    page.screenshot(path=str(shot), full_page=True)
    page.close()
    data = shot.read_bytes()
    assert data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 10_000
    width, height = struct.unpack('>II', data[16:24])
    assert width == 1280 and height >= 900


def test_titles_and_summaries_are_markdown(pages):
    "Titles and summaries are rendered as Markdown: no literal backtick is left in them, nor in the sidebar or the pager."
    bad = [(name, t) for name, f in pages.items() for t in [f['title'], f['summary'], *f['navTitles']] if '`' in t]
    assert not bad, bad
    assert any(f['summary'] for f in pages.values())


def _too_wide(browser, http_url, width):
    page, wide = browser.new_page(viewport={'width': width, 'height': 800}), []
    for name in _expected_pages():
        page.goto(http_url + name)
        w = page.evaluate('document.documentElement.scrollWidth')
        if w > width:
            culprits = page.evaluate('''(w) => Array.from(document.querySelectorAll('body *'))
                .filter(e => e.getBoundingClientRect().right > w + 1).slice(0, 3)
                .map(e => e.tagName.toLowerCase() + '.' + e.className)''', width)
            wide.append(f'{name}: {w}px wide ({culprits})')
    page.close()
    return wide


@pytest.mark.parametrize('width', [1280, 390])
def test_no_page_is_wider_than_the_screen(browser, http_url, pages, width):
    "On a laptop (1,280 px) and on a phone (390 px), no page scrolls sideways: wide plots, tables and code scroll in their own boxes."
    assert not _too_wide(browser, http_url, width)


def _hidden_code(nb_path):
    "The code of the cells of a notebook that the page must not show (`#| hide`, `include: false`, `echo: false`)."
    import json
    from jsnb.tools.docs import _directives, _keys
    out = []
    for c in json.loads(nb_path.read_text())['cells']:
        if c['cell_type'] != 'code': continue
        dirs, code = _directives(''.join(c['source']))
        k = _keys(dirs)
        if code.strip() and ('hide' in k or k.get('include') == 'false' or k.get('echo') == 'false'): out.append(code.strip())
    return out


def test_no_hidden_cell_appears(pages):
    "The code of cells marked `#| hide` (or `include: false`, `echo: false`) is on no page."
    from jsnb.tools.docs import page_names, site_pages
    nbs = ROOT / 'nbs'
    names, shown, n = page_names((p for _, p in site_pages(nbs)), nbs), [], 0
    for key, page in names.items():
        code = {' '.join(c.split()) for c in pages[page]['code']}
        for hidden in _hidden_code(nbs / f'{key}.ipynb'):
            n += 1
            if ' '.join(hidden.split()) in code: shown.append(f'{page}: {hidden[:80]!r}')
    assert n > 0 and not shown, shown


def test_top_bar_and_table_of_contents(pages):
    "Every page has the top bar with one link per layer, its own layer marked, and an 'On this page' list of its headings."
    from jsnb.tools.docs import site_pages
    sections = list(dict.fromkeys(s for s, _ in site_pages(ROOT / 'nbs') if s))
    for name, f in pages.items():
        assert f['topnav'] == sections, f'{name}: the top bar shows {f["topnav"]}'
        assert len(f['topnavCurrent']) == (name != 'index.html'), f'{name}: {f["topnavCurrent"]} marked as the current section'
        assert f['toc'] == f['headings'], f'{name}: the table of contents does not list the headings'
    assert sum(bool(f['toc']) for f in pages.values()) > len(pages) // 2


def _search(page, words):
    page.fill('#search', words)
    page.wait_for_selector('#search-results:not([hidden])')
    return [a.get_attribute('href') for a in page.query_selector_all('#search-results a')]


def test_search_finds_a_known_term(browser, http_url, site_dir):
    "The search box finds `up_to_seq` on the Direct Get page and `ClientConn`'s card, over HTTP and from `file://`; Enter opens the first result."
    for url in (http_url + 'stream.html', (site_dir / 'stream.html').as_uri()):
        page = browser.new_page()
        errors = []
        page.on('pageerror', lambda e: errors.append(str(e)))
        page.goto(url)
        hits = _search(page, 'multi_last up_to_seq')
        assert any(h.startswith('direct_get.html') for h in hits), hits
        assert _search(page, 'ClientConn')[0] == 'core.html#clientconn'
        assert _search(page, 'zzzz-no-such-word') == []
        assert 'Nothing found' in page.inner_text('#search-results')
        first = _search(page, 'Direct Get')[0]
        with page.expect_navigation(): page.press('#search', 'Enter')
        assert page.url.endswith('/' + first), (page.url, first)
        assert not errors, errors
        page.close()


def test_dark_mode(browser, site_dir):
    "A reader whose system asks for a dark theme gets light text on a dark page, code included."
    colours = {}
    for scheme in ('light', 'dark'):
        page = browser.new_page(color_scheme=scheme)
        page.goto((site_dir / 'direct_get.html').as_uri())
        colours[scheme] = page.evaluate('''() => [getComputedStyle(document.body).backgroundColor,
                                                   getComputedStyle(document.querySelector('.highlight .kn, .highlight .k')).color]''')
        page.close()
    assert colours['light'][0] == 'rgb(255, 255, 255)' and colours['dark'][0] == 'rgb(13, 17, 23)', colours
    assert colours['light'][1] != colours['dark'][1], colours


def _public_api():
    "(module, name, notebook key) of every function and class in the `__all__` of every module of the package, imported."
    import importlib, inspect, re
    out = []
    for path in sorted((ROOT / 'jsnb').rglob('*.py')):
        if path.name == '_modidx.py': continue
        module = '.'.join(path.relative_to(ROOT).with_suffix('').parts).removesuffix('.__init__')
        m = re.search(r'File to edit: (\S+)\.ipynb\.', path.read_text())
        if not m: continue
        key = (path.parent / m[1]).resolve().relative_to(ROOT / 'nbs').as_posix()
        mod = importlib.import_module(module)
        for name in getattr(mod, '__all__', []):
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj): out.append((module, name, key))
    return out


def test_every_public_name_has_an_api_card(pages):
    "Each function and class a module exports (its `__all__`) has a card on the page of the notebook that defines it."
    from jsnb.tools.docs import page_names, site_pages
    nbs = ROOT / 'nbs'
    names = page_names((p for _, p in site_pages(nbs)), nbs)
    api = _public_api()
    missing = [f'{module}.{name} on {names[key]}' for module, name, key in api if name.lower() not in pages[names[key]]['cards']]
    assert len(api) > 200 and not missing, missing


def test_sidebar_folds_and_shows_the_current_page(browser, http_url, pages):
    """The sidebar's sections fold: only the current page's is open, and a closed one opens on a click; the current
    page's entry is in view in the sidebar, marked, however far down the list it is."""
    page = browser.new_page(viewport={'width': 1280, 'height': 900})
    for name in ('direct_get.html', 'docs.html', 'nats.html'):
        page.goto(http_url + name)
        seen = page.evaluate('''() => {
            const side = document.querySelector('nav.sidebar'), cur = side.querySelector('a.current');
            const s = side.getBoundingClientRect(), c = cur.getBoundingClientRect();
            return {inView: c.top >= s.top && c.bottom <= s.bottom, listed: side.scrollHeight > side.clientHeight || side.scrollTop === 0,
                    open: Array.from(side.querySelectorAll('details[open] > summary'), e => e.textContent),
                    sections: side.querySelectorAll('details').length, marked: getComputedStyle(cur).fontWeight,
                    section: cur.closest('details')?.querySelector('summary').textContent}}''')
        assert seen['inView'] and seen['open'] == [seen['section']] and seen['sections'] >= 5 and int(seen['marked']) >= 600, (name, seen)
    closed = page.locator('nav.sidebar details:not([open]) > summary').first
    closed.click()
    assert page.evaluate('() => document.querySelectorAll("nav.sidebar details[open]").length') == 2
    page.close()


def test_code_has_copy_buttons(browser, http_url):
    "Every block of code has a Copy button that puts exactly that code on the clipboard."
    ctx = browser.new_context(permissions=['clipboard-read', 'clipboard-write'])
    page = ctx.new_page()
    page.goto(http_url + 'index.html')
    blocks = page.evaluate('() => [document.querySelectorAll(".input_area, .text_cell_render pre").length, document.querySelectorAll(".copyable > .copy").length]')
    assert blocks[0] > 3 and blocks[0] == blocks[1], blocks
    page.locator('.copyable > .copy').first.click()
    copied = page.evaluate('() => navigator.clipboard.readText()')
    first = page.evaluate('() => document.querySelector(".copyable pre").innerText')
    assert copied == first and 'jsnb.serve' in copied + page.evaluate('() => document.body.innerText'), copied
    assert page.locator('.copyable > .copy').first.inner_text() == 'Copied'
    ctx.close()


def _plot_luminance(page) -> float:
    "The mean brightness (0-255) of the first plot of the page as drawn on the screen."
    import io
    shot = page.locator('.notebook img').first.screenshot()
    from PIL import Image
    im = Image.open(io.BytesIO(shot)).convert('L')
    return sum(im.getdata()) / (im.width * im.height)


def test_theme_button_and_plots_in_the_dark(browser, http_url):
    """The ◐ button switches between light and dark whatever the system asks, and the choice holds on the next page;
    in the dark the plots are drawn light on dark (not white boxes), in the light as saved."""
    ctx = browser.new_context(color_scheme='light', viewport={'width': 1280, 'height': 900})
    page = ctx.new_page()
    page.goto(http_url + 'performance.html')
    bg = lambda: page.evaluate('() => getComputedStyle(document.body).backgroundColor')
    light_plot = _plot_luminance(page)
    assert bg() == 'rgb(255, 255, 255)' and light_plot > 180, (bg(), light_plot)
    page.click('.topbar .theme')
    assert bg() == 'rgb(13, 17, 23)' and page.evaluate('() => document.documentElement.dataset.theme') == 'dark'
    page.goto(http_url + 'performance.html')                      # kept in the browser, applied before the page is drawn
    assert bg() == 'rgb(13, 17, 23)'
    assert _plot_luminance(page) < 100, 'a plot stays a white box in the dark'
    page.click('.topbar .theme')
    assert bg() == 'rgb(255, 255, 255)'
    ctx.close()


def _png_dpi(data: bytes) -> float:
    "The resolution a PNG was drawn at (its pHYs chunk), 100 dots per inch (matplotlib's default) when it does not say."
    i = data.find(b'pHYs')
    if i < 0: return 100.0
    x, _, unit = struct.unpack('>IIB', data[i + 4:i + 13])
    return x * 0.0254 if unit == 1 else 100.0


def test_plots_are_legible(browser, http_url, site_dir, pages):
    """On a laptop (1,280 px) the smallest text of every plot (matplotlib's default, 10 pt, at the resolution the PNG was
    drawn at, scaled as the page shows it) is at least 11 px high: wide figures of several panels side by side shrink below
    that, so figures have one panel, or a grid that fits the column."""
    import base64
    page, small = browser.new_page(viewport={'width': 1280, 'height': 900}), []
    for name, f in pages.items():
        if not f['images']: continue
        page.goto(http_url + name)
        for src, shown, drawn in page.evaluate('() => Array.from(document.querySelectorAll(".notebook img"), i => [i.getAttribute("src"), i.clientWidth, i.naturalWidth])'):
            data = base64.b64decode(src.split(',', 1)[1]) if src.startswith('data:image/png') else \
                   (site_dir / src).read_bytes() if src.endswith('.png') else None
            if data is None or drawn < 200: continue
            px = 10 / 72 * _png_dpi(data) * shown / drawn
            if px < 11: small.append(f'{name}: {src[:20] if src.startswith("data:") else src} #{len(small)}: 10 pt text shown {px:.1f} px high '
                                     f'({drawn} px drawn at {_png_dpi(data):.0f} dpi, shown {shown} px wide)')
    page.close()
    assert not small, '\n'.join(small)


def test_repository_links(pages):
    "Every page links to the repository of `settings.ini` and, as nbdev's sites do, to edit its notebook and to report an issue."
    import configparser
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini')
    url, branch = cfg['DEFAULT']['git_url'], cfg['DEFAULT']['branch']
    from jsnb.tools.docs import page_names, site_pages
    nbs = ROOT / 'nbs'
    for key, name in page_names((p for _, p in site_pages(nbs)), nbs).items():
        links = pages[name]['links']
        assert url in links and f'{url}/edit/{branch}/nbs/{key}.ipynb' in links, (name, [l for l in links if url in l])
        assert any(l.startswith(f'{url}/issues/new?title=') for l in links), name


def test_page_names_are_readable(site_dir):
    "Page files are named after what they cover, without the numbers that order the notebooks (`js-cluster.html`, not `2_js_20_cluster.html`)."
    import re
    bad = [p.name for p in site_dir.glob('*.html') if not re.fullmatch(r'[a-z][a-z_]*(-[a-z][a-z_]*)*(-\d+)?\.html', p.name)]
    assert not bad, bad


def test_no_notebook_is_copied_into_the_site(site_dir):
    "Only what pages show is copied: no notebook (a code listing that mentions `href=\"x.ipynb\"` copied one once)."
    assert sorted(p.relative_to(site_dir).as_posix() for p in site_dir.rglob('*.ipynb')) == []


def test_signatures_wrap_on_a_phone(browser, http_url, pages):
    "On a phone (390 px) an API card's signature wraps: none is cut off or scrolls sideways."
    page, cut = browser.new_page(viewport={'width': 390, 'height': 800}), []
    for name in [n for n, f in pages.items() if f['cards']][:12]:
        page.goto(http_url + name)
        cut += [f'{name}: {w}' for w in page.evaluate('() => Array.from(document.querySelectorAll(".api-sig")).filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.slice(0, 60))')]
    page.close()
    assert not cut, cut


def test_search_results_by_keyboard(browser, http_url):
    "In the search results the arrow keys move the choice (down, and back up), and Enter opens the one chosen."
    page = browser.new_page()
    page.goto(http_url + 'index.html')
    hits = _search(page, 'Direct Get')
    assert len(hits) >= 3, hits
    for key in ('ArrowDown', 'ArrowDown', 'ArrowDown', 'ArrowUp'): page.press('#search', key)
    chosen = page.evaluate('() => Array.from(document.querySelectorAll("#search-results a"), a => a.classList.contains("selected"))')
    assert chosen.index(True) == 1 and chosen.count(True) == 1, chosen
    with page.expect_navigation(): page.press('#search', 'Enter')
    assert page.url.endswith('/' + hits[1]), (page.url, hits[1])
    page.close()
