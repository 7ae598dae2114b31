"""Drives the status page in headless Chromium (Debian's chromium and
chromedriver, through Selenium) and checks what a person would see.

    check_status.py BASE_URL SCREENSHOT_PATH

Exits non-zero, saying what failed, when a check fails.
"""

import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

BASE, SHOT = sys.argv[1], sys.argv[2]
DEADLINE = 20  # seconds for anything to appear


def browser(javascript=True):
    o = webdriver.ChromeOptions()
    o.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        o.add_argument(a)
    if not javascript:
        o.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


class NotYet(Exception):
    """A check not met yet, saying what it saw instead."""


def wait(check, what):
    start = time.time()
    last = "nothing read"
    while time.time() - start < DEADLINE:
        try:
            if check():
                return
            last = "not yet"
        except Exception as e:  # the page is being replaced under us, or not yet
            last = f"{type(e).__name__}: {e}".strip()[:500]
        time.sleep(0.1)
    raise SystemExit(f"timed out: {what}; last seen: {last}")


def rows(d):
    return {
        r.get_attribute("data-state"): r
        for r in d.find_elements(By.CSS_SELECTOR, "#status tbody tr")
        if r.is_displayed()
    }


def visible_ids(d):
    return sorted(
        r.find_element(By.CSS_SELECTOR, "th").text
        for r in d.find_elements(By.CSS_SELECTOR, "#status tbody tr")
        if r.is_displayed()
    )


d = browser()
try:
    d.get(BASE + "/")
    # Every server, with its state in words.
    wait(lambda: visible_ids(d) == ["gone", "good", "xss"], "all servers listed")
    wait(
        lambda: "unhealthy" in d.find_element(By.XPATH, "//tr[th='gone']").text
        and "healthy" in d.find_element(By.XPATH, "//tr[th='good']").text,
        "states shown",
    )
    d.save_screenshot(SHOT)
    # Refreshed in place: the data changes, the page is never reloaded.
    d.execute_script("window.__stay = 1")
    first = d.find_element(By.ID, "status").get_attribute("data-generation")
    wait(
        lambda: d.find_element(By.ID, "status").get_attribute("data-generation") != first
        and d.execute_script("return window.__stay") == 1,
        "refreshed without a reload",
    )
    # The filter, as you type: state, then text.
    Select(d.find_element(By.NAME, "state")).select_by_value("unhealthy")
    wait(lambda: visible_ids(d) == ["gone"], "state filter")
    Select(d.find_element(By.NAME, "state")).select_by_value("")
    d.find_element(By.NAME, "q").send_keys("goo")
    wait(lambda: visible_ids(d) == ["good"], "text filter")
    wait(lambda: d.find_element(By.ID, "shown").text == "1", "shown count")
    # A hostile server name is text, and runs nothing.
    d.get(BASE + "/servers/xss")
    wait(lambda: "<script>" in d.find_element(By.TAG_NAME, "main").text, "payload shown as text")
    if d.title == "pwned" or d.find_elements(By.ID, "pwned") or d.execute_script("return window.pwned"):
        raise SystemExit("the server's name ran as code")
finally:
    d.quit()

# With JavaScript off: the page and its filter still work (a GET form).
d = browser(javascript=False)
try:
    d.get(BASE + "/?state=healthy")
    wait(lambda: visible_ids(d) == ["good", "xss"] or visible_ids(d) == ["good"], "no-JS filter")
    ids = visible_ids(d)
    if "gone" in ids:
        raise SystemExit(f"no-JS filter kept an unhealthy server: {ids}")
    d.get(BASE + "/servers/gone")
    wait(lambda: "unhealthy" in d.find_element(By.TAG_NAME, "main").text, "no-JS server page")
finally:
    d.quit()


def history_shown(d, server, bar, uptime, state):
    """The server page's history: 90 bars, today's of class `bar`, the
    24 h uptime in words, and a state change to `state` listed."""
    d.get(BASE + "/servers/" + server)
    bars = d.find_elements(By.CSS_SELECTOR, "figure.bars rect")
    if len(bars) != 90:
        raise NotYet(f"{len(bars)} bars")
    today = bars[-1]
    uptimes = dict(
        zip(
            [e.text for e in d.find_elements(By.CSS_SELECTOR, ".uptimes dt")],
            [e.text for e in d.find_elements(By.CSS_SELECTOR, ".uptimes dd")],
        )
    )
    changes = [e.text for e in d.find_elements(By.CSS_SELECTOR, "table.transitions td:nth-child(2)")]
    seen = (today.get_attribute("class"), uptimes.get("Uptime, 24 h"), changes)
    if seen[0] != bar or seen[1] != uptime or state not in changes:
        raise NotYet(f"today's bar, 24 h uptime, state changes: {seen}")
    return True


# The history, with JavaScript off and on a phone's screen: the bars, the
# uptimes, the latency chart and the state changes, all server-rendered.
d = browser(javascript=False)
try:
    d.set_window_size(390, 844)
    wait(lambda: history_shown(d, "good", "d-good", "100%", "healthy"), "good's history")
    chart = d.find_elements(By.CSS_SELECTOR, "figure.latency polyline.p50")
    if not chart or len(chart[0].get_attribute("points").split()) < 1:
        raise SystemExit("no latency chart for good")
    wait(lambda: history_shown(d, "gone", "d-bad", "0.000%", "unhealthy"), "gone's history")
    # The fleet page's 30 days per server, today's cell last.
    def today(server):
        d.get(BASE + "/")
        cells = d.find_elements(By.XPATH, f"//tr[th='{server}']//span[contains(@class,'days')]/span")
        return len(cells) == 30 and cells[-1].get_attribute("class")
    wait(lambda: today("good") == "cell d-good" and today("gone") == "cell d-bad", "the fleet page's 30 days")
    d.get(BASE + "/servers/gone")
    wide = d.execute_script("return document.documentElement.scrollWidth > window.innerWidth")
    if wide:
        raise SystemExit("the server page scrolls sideways on a phone")
    # A badge renders as an image.
    d.get(BASE + "/api/v1/servers/good/health/badge.svg")
    size = d.execute_script(
        "const s = document.querySelector('svg'); const b = s.getBBox(); return [b.width, b.height]"
    )
    if not (size[0] > 40 and size[1] >= 18):
        raise SystemExit(f"the badge did not render: {size}")
finally:
    d.quit()
print("ok")
