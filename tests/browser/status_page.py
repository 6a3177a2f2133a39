"""readerd's status page in a real browser: headless Chromium driven through chromedriver
by selenium (Debian's `chromium` and `chromium-driver`; `tests/run.sh` installs them).

Run by `tests/tests/status_page.rs`, which starts the servers and consumers first:

- `--url`: a server with `--auth-tokens`, two consumers of container `--container`
  (a shared reader named `steady`, whose trainer steps 50 ms an element, and one named
  `starved`, read through a slow object store by a trainer with no step), and a reader
  of `--hidden` that the token may not see;
- `--cluster-url`: a replica of a 2-replica cluster serving the shared reader `cluster`.

Checks that the page needs the token (login form, no data), then shows both consumers
with their input-bound fractions on the right side of 50% and plots with points, and
nothing of the hidden container; that the cluster page shows both replicas and the
job's splits. Saves a screenshot of each page. Exits non-zero, saying why, otherwise.
"""

import argparse
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def browser():
    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1300,1500"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def wait_for(what, check, timeout=60.0):
    """Polls `check` (returning a true value when done) until `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as err:  # the page re-renders under us: try again
            last_error = err
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_error})")


def reader_card(driver, name):
    return driver.find_element(By.CSS_SELECTOR, f'.reader[data-reader="{name}"]')


def consumer_bound(driver, name):
    """The input-bound fraction the page shows for the only consumer of reader `name`."""
    cell = reader_card(driver, name).find_element(By.CSS_SELECTOR, "tr.consumer [data-input-bound]")
    value = cell.get_attribute("data-input-bound")
    return float(value) if value else None


def plot_points(driver, name):
    lines = reader_card(driver, name).find_elements(By.CSS_SELECTOR, "svg.plot polyline")
    return min(int(line.get_attribute("data-points")) for line in lines[:2])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--container", required=True)
    parser.add_argument("--hidden", required=True)
    parser.add_argument("--cluster-url", required=True)
    parser.add_argument("--screenshot", required=True)
    parser.add_argument("--cluster-screenshot", required=True)
    args = parser.parse_args()
    steady, starved = f"{args.container}/steady", f"{args.container}/starved"

    driver = browser()
    try:
        driver.get(args.url)
        login = wait_for("the login form", lambda: driver.find_element(By.ID, "login").is_displayed())
        assert login and not driver.find_elements(By.CSS_SELECTOR, ".reader"), "data shown without a token"
        driver.find_element(By.NAME, "token").send_keys(args.token)
        driver.find_element(By.CSS_SELECTOR, "#login button").click()

        # Both consumers reported, and the plots have at least two points each.
        wait_for("both consumers' figures", lambda: consumer_bound(driver, steady) is not None
                 and consumer_bound(driver, starved) is not None)
        wait_for("plots with points", lambda: plot_points(driver, steady) >= 3 and plot_points(driver, starved) >= 3,
                 timeout=90)
        bounds = {name: consumer_bound(driver, name) for name in (steady, starved)}
        print("input-bound fractions on the page:", bounds)
        assert bounds[steady] < 0.5, f"a trainer stepping 50 ms an element shows as input-bound: {bounds}"
        assert bounds[starved] > 0.5, f"a trainer starved by a slow object store shows as not input-bound: {bounds}"
        names = [card.get_attribute("data-reader") for card in driver.find_elements(By.CSS_SELECTOR, ".reader")]
        assert not [n for n in names if n.startswith(args.hidden + "/")], f"another container's readers: {names}"
        # The server's memory is plotted once, in its own card, not in every reader's; each
        # plot has its axes: 0 and its top in its unit, and the minutes before now.
        assert len(driver.find_elements(By.CSS_SELECTOR, "#memory svg.plot")) == 1, "the memory plot, once"
        assert not reader_card(driver, steady).find_elements(By.CSS_SELECTOR, "svg.plot[data-title^='memory']")
        for svg in driver.find_elements(By.CSS_SELECTOR, "svg.plot"):
            ticks = [t.text for t in svg.find_elements(By.CSS_SELECTOR, "text.tick")]
            assert len(ticks) == 4 and ticks[-1] == "now" and ticks[-2].startswith("−"), ticks
        y_ticks = [t.text for t in reader_card(driver, steady).find_elements(By.CSS_SELECTOR, "text[data-axis=y]")]
        assert y_ticks[0].endswith("/s") and y_ticks[2:] == ["100%", "0%"], y_ticks
        bars = reader_card(driver, starved).find_elements(By.CSS_SELECTOR, ".bar [data-stage]")
        widths = {bar.get_attribute("data-stage"): bar.value_of_css_property("width") for bar in bars}
        print("stage bar of the starved reader:", widths)
        assert len(bars) == 5, widths
        driver.save_screenshot(args.screenshot)

        driver.get(args.cluster_url)
        try:
            wait_for("both replicas", lambda: len(driver.find_elements(By.CSS_SELECTOR, "tr.replica")) == 2)
        except AssertionError:
            print("the cluster page shows:", driver.find_element(By.TAG_NAME, "body").text, file=sys.stderr)
            raise
        epochs = wait_for("the job's splits", lambda: driver.find_elements(By.CSS_SELECTOR, "tr.epoch"))
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.replica"):
            cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            assert cells[3].startswith("alive, ") and cells[3].endswith(" s ago"), f"a replica's heartbeat: {cells}"
        print("cluster: replicas", len(driver.find_elements(By.CSS_SELECTOR, "tr.replica")), "epochs", len(epochs))
        driver.save_screenshot(args.cluster_screenshot)
    finally:
        driver.quit()
    print("status page: ok")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as err:
        print(f"status page: {err}", file=sys.stderr)
        sys.exit(1)
