import pytest

from derivations import config as cfg


@pytest.fixture(scope="session")
def v3():
    return cfg.PRESETS["deepseek-v3"]


@pytest.fixture(scope="session")
def terms(v3):
    from derivations import build
    return build(v3)


@pytest.fixture(scope="session")
def paper_layout():
    return cfg.Layout()


# ----------------------------------------------------------------------------- the report's notebooks
def _shown(nb):
    """Each code cell's outputs, their execution counts left out (one kernel runs every notebook)."""
    return [[{k: v for k, v in o.items() if k != "execution_count"} for o in c.outputs]
            for c in nb.cells if c.cell_type == "code"]


@pytest.fixture
def same_in_a_kernel():
    """``check(paths)``: each notebook the report wrote, executed by nbclient in one kernel of this interpreter
    (its folder the current one), records the outputs the report wrote (IPython's display formatter in the
    report's process) and no error."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client import KernelManager

    def check(paths):
        km = KernelManager(kernel_name="python3")   # jupyter_client runs it with sys.executable
        km.start_kernel(cwd=str(paths[0].parent))
        kc = None
        try:
            for path in paths:
                written, nb = (nbformat.read(path, as_version=4) for _ in range(2))
                client = nbclient.NotebookClient(nb, km=km, timeout=120, record_timing=False, kernel_name="python3")
                client.kc = kc
                client.execute(cleanup_kc=False)   # a failing cell raises CellExecutionError
                kc = client.kc
                assert _shown(nb) == _shown(written), path.name
        finally:
            if kc is not None:
                kc.stop_channels()
            km.shutdown_kernel(now=True)
    return check


# ----------------------------------------------------------------------------- the calculator page (memsym page)
# shared by tests/test_page.py and tests/test_page_inputs.py: the page's data is generated once (minutes) and
# one headless Chromium serves both
@pytest.fixture(scope="session")
def generated():
    from memsym.page import data as page_data
    return page_data.generate()


@pytest.fixture(scope="session")
def page(generated, tmp_path_factory):
    from memsym.page import PAGE_NAME, render
    path = tmp_path_factory.mktemp("page") / PAGE_NAME
    path.write_text(render(data=generated), encoding="utf-8")
    return path


def _chromium():
    """The system's Chromium, or None (also when MEMSYM_WITHOUT lists ``browser``: CI's run of the README's test
    command as on a machine without it)."""
    import os
    import shutil
    if "browser" in os.environ.get("MEMSYM_WITHOUT", "").split(","):
        return None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium through the system chromedriver, networking off; skipped when either is missing
    unless MEMSYM_REQUIRE_BROWSER is set (then a failure)."""
    import os
    import shutil
    chrome, driver = _chromium(), shutil.which("chromedriver")
    if not (chrome and driver):
        if os.environ.get("MEMSYM_REQUIRE_BROWSER"):
            pytest.fail("MEMSYM_REQUIRE_BROWSER is set but chromium / chromedriver are not installed")
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        if os.environ.get("MEMSYM_REQUIRE_BROWSER"):
            raise
        pytest.skip("selenium is not installed (pip install memsym[test])")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    # networking off: every host resolves nowhere and any proxy is a closed port
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1700",
              "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=opts)
    yield d
    d.quit()


# ----------------------------------------------------------------------------- tests/test_random_traces.py
def pytest_terminal_summary(terminalreporter):
    """The random traces' seed, in every run's summary (a fresh one each run: MEMSYM_RANDOM_SEED replays it)."""
    seeds = {v for reps in terminalreporter.stats.values() for r in reps
             for k, v in getattr(r, "user_properties", ()) if k == "random_seed"}
    for s in sorted(seeds):
        terminalreporter.write_line(f"random traces (tests/test_random_traces*.py): seed {s}; replay with "
                                    f"MEMSYM_RANDOM_SEED={s} python -m pytest tests/test_random_traces.py "
                                    f"tests/test_random_traces_step.py "
                                    f"tests/test_random_traces_v4.py")


@pytest.fixture()
def run_trace(capsys):
    """``memsym trace ARGV`` in this process: (exit status, what it wrote to stderr)."""
    from memsym.cli import main

    def go(*argv):
        try:
            code = main(["trace", *argv])
        except SystemExit as exc:
            code = exc.code
        return code, capsys.readouterr().err
    return go
