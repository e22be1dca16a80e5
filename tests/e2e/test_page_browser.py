"""The exporter's pages in a real browser: the distribution's Chromium, headless, driven by
selenium through chromium-driver (scripts/setup.sh installs both), against the exporter
as a process behind basic auth, started on a seeded journal (tests/support/pages.py).

What a browser proves that the unit tests cannot: the pages load with no console error
(a CSP violation, a failed fetch, a script error all land there), the links lead where
they say, a failed transfer's cause is on its page, and hostile text from the config and
the journal is shown as text: no alert opens and no script element exists."""

from __future__ import annotations

import base64
import secrets
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml

from bigbinf.service.recent import transfer_id

from ..support.exporter import ExporterProcess
from ..support.pages import HOSTILE, SECRET, STDERR_CAUSE, Seeded, seed

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
USER = "operator"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
        reason="chromium and chromium-driver are not installed (scripts/setup.sh installs them)",
    ),
]


class Pages:
    def __init__(self, exporter: ExporterProcess, seeded: Seeded, password: str, driver: object) -> None:
        self.exporter, self.seeded, self.password, self.driver = exporter, seeded, password, driver
        self.base = f"http://127.0.0.1:{exporter.port}/"

    def fetch(self, path: str, password: str | None = None) -> tuple[int, bytes, dict[str, str]]:
        request = urllib.request.Request(self.base + path.lstrip("/"))
        if password is not None:
            token = base64.b64encode(f"{USER}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    tmp = tmp_path_factory.mktemp("pages")
    seeded = seed(tmp)
    password = secrets.token_urlsafe(12)
    web = tmp / "web.yml"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=6)).decode()
    web.write_text(yaml.safe_dump({"basic_auth_users": {USER: hashed}}))
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with ExporterProcess(
        seeded.config, tmp / "exporter.log", extra_args=["--web.config.file", str(web)], auth=(USER, password)
    ) as exporter:
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
        try:
            driver.set_page_load_timeout(20)
            # Every request of the browser carries the credentials (basic auth as a client sends it).
            token = base64.b64encode(f"{USER}:{password}".encode()).decode()
            driver.execute_cdp_cmd("Network.enable", {})
            driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}})
            yield Pages(exporter, seeded, password, driver)
        finally:
            driver.quit()
    shutil.rmtree(tmp, ignore_errors=True)


def load(site: Pages, path: str) -> None:
    site.driver.get(site.base + path.lstrip("/"))  # type: ignore[attr-defined]
    assert_clean(site)


def assert_clean(site: Pages) -> None:
    """No console error, no alert, no script element: what an injection or a blocked
    fetch would leave."""
    driver = site.driver
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]  # type: ignore[attr-defined]
    assert errors == [], errors
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # type: ignore[attr-defined]  # noqa: B018
    assert driver.find_elements(By.TAG_NAME, "script") == []  # type: ignore[attr-defined]


def test_basic_auth_guards_every_page(site: Pages) -> None:
    for path in ("/", "/config", "/sweeps", f"/transfer/{transfer_id(site.seeded.ok)}", "/transfer/x"):
        status, body, headers = site.fetch(path)
        assert status == 401 and headers["WWW-Authenticate"] == "Basic" and b"bigbinf" not in body, path
        assert site.fetch(path, site.password + "x")[0] == 401
    status, _, headers = site.fetch("/", site.password)
    assert status == 200 and "default-src 'none'" in headers["Content-Security-Policy"]


def test_front_page_links_to_a_failed_transfer_that_shows_its_cause(site: Pages) -> None:
    load(site, "/")
    driver = site.driver
    assert "bigbinf exporter" in driver.title  # type: ignore[attr-defined]
    body = driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
    assert "rwnd_limited 81% of busy time" in body and "wire 3, sender 2 (kernel)" in body
    assert "Next" in body and "not scheduled" not in body  # the round an hour away
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg polyline")) >= 1  # type: ignore[attr-defined]
    failed = transfer_id(site.seeded.failed)
    driver.find_element(By.CSS_SELECTOR, f"a[href='transfer/{failed}']").click()  # type: ignore[attr-defined]
    assert driver.current_url == f"{site.base}transfer/{failed}"  # type: ignore[attr-defined]
    assert_clean(site)
    cause = driver.find_element(By.CSS_SELECTOR, "p.cause").text  # type: ignore[attr-defined]
    assert cause == f"failed: curl exited 7: {STDERR_CAUSE}"
    assert "curl --fail -o /var/tmp/bigbinf/a.bin http://198.18.9.2/a.bin" in driver.page_source  # type: ignore[attr-defined]
    # Every link of the navigation leads to a page that loads.
    for name, path in (("Configuration", "config"), ("Sweeps", "sweeps"), ("Transfers", "")):
        driver.find_element(By.LINK_TEXT, name).click()  # type: ignore[attr-defined]
        assert driver.current_url == site.base + path  # type: ignore[attr-defined]
        assert_clean(site)


def test_ok_transfer_page_has_its_evidence_and_its_pcap(site: Pages) -> None:
    key = transfer_id(site.seeded.ok)
    load(site, f"/transfer/{key}")
    body = site.driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
    for text in ("receive_window", "10.0 ms/11.0 ms/15.0 ms", "== path site (198.18.9.2)", "rwnd_limited_seconds"):
        assert text in body, text
    link = site.driver.find_element(By.LINK_TEXT, "download the pcap")  # type: ignore[attr-defined]
    assert link.get_attribute("href") == f"{site.base}transfer/{key}/pcap"
    status, data, headers = site.fetch(f"/transfer/{key}/pcap", site.password)
    assert status == 200 and data == site.seeded.pcap.read_bytes()
    assert headers["Content-Type"] == "application/vnd.tcpdump.pcap"


def test_hostile_text_shows_as_text(site: Pages) -> None:
    load(site, "/config")
    shown = site.driver.find_element(By.TAG_NAME, "pre").text  # type: ignore[attr-defined]
    assert f"--title={HOSTILE}" in shown and SECRET not in site.driver.page_source  # type: ignore[attr-defined]
    load(site, f"/transfer/{transfer_id(site.seeded.hostile)}")
    body = site.driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
    assert f"the tool said {HOSTILE}" in body
    load(site, "/sweeps")
    rows = site.driver.find_elements(By.CSS_SELECTOR, "tbody tr")  # type: ignore[attr-defined]
    assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows] == ["streams=4", "streams=1 (baseline)"]
