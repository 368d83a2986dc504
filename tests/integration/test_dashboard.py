"""The embedded dashboard in Debian's headless Chromium: the page loads clean, charts fill
while requests run, the playground streams and its stop button aborts server-side, API
keys are asked for; plus the snapshot's content and what the stats stream costs."""
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import REPO, Server

SHOTS = REPO / "build"
# A small KV cache (8 sequences of 2,560 tokens) keeps each server's start quick and light;
# long enough for the playground's stopped reply.
SMALL = {"model.max_model_len": 2560, "engine.max_num_seqs": 8}


def make_driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1440,1000", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=opts)


def wait_for(fn, timeout=30, what="condition"):
    """Polls fn() until it returns something truthy; fails naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value {last!r})")


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def chat(url, content, max_tokens=32, headers=None, **extra):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}
    r = requests.post(url + "/v1/chat/completions", json=body, headers=headers or {}, timeout=120)
    r.raise_for_status()
    return r.json()


@pytest.fixture(scope="module")
def dash_server():
    s = Server(settings=SMALL).wait_ready()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def driver():
    d = make_driver()
    yield d
    d.quit()


def test_page_loads_clean_and_charts_fill(dash_server, driver):
    driver.get(dash_server.url + "/")
    wait_for(lambda: driver.execute_script("return window.sparkdDash && window.sparkdDash.events >= 2"),
             what="two stats events")
    assert driver.find_element("id", "hdr-model").text == "SmolLM2-135M-Instruct.Q4_1"
    assert driver.find_element("id", "hdr-health").text == "ready"

    # A few requests run while the page watches; one system prompt repeats (prefix hits).
    system = "You are a terse assistant that answers in one short sentence. " * 6
    threads = [threading.Thread(target=chat, args=(dash_server.url, f"Name a color number {i}."),
                                kwargs={"max_tokens": 48, "ignore_eos": True}) for i in range(3)]
    for t in threads:
        t.start()
    for i in range(2):
        requests.post(dash_server.url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"hi {i}"}],
            "max_tokens": 8}).raise_for_status()
    for t in threads:
        t.join()

    peak = wait_for(lambda: driver.execute_script(
        "return Math.max(0, ...store.generation_tps.filter(v => v != null))"), what="generated tokens/s > 0")
    assert peak > 0
    points = driver.execute_script("return window.sparkdDash.charts.map(c => c.points())")
    assert len(points) == 8 and min(points) > 0  # 8 charts: speculation acceptance is the last
    wait_for(lambda: driver.execute_script("return store.ttft_p50.some(v => v != null)"), what="a TTFT percentile")
    wait_for(lambda: driver.execute_script("return store.prefix_hit_rate.some(v => v > 0)"), what="a prefix-cache hit")
    # The table is rebuilt every second: read it in one script call, not element by element.
    rows = wait_for(lambda: driver.execute_script(
        "const rows = [...document.querySelectorAll('#req-rows tr[data-id]')]"
        "  .map(tr => [...tr.children].map(td => td.textContent)).filter(c => c[1] === 'finished');"
        "return rows.length >= 5 ? rows : null"), what="five finished request rows")
    assert all(int(r[3].replace(",", "")) > 0 for r in rows)  # prompt tokens
    assert any(int(r[4].replace(",", "")) > 0 for r in rows)  # cached: the repeated system prompt
    assert all(r[9] in ("stop", "length") and r[6].endswith("s") for r in rows)  # finish, TTFT
    gen_tile = driver.find_element("id", "t-gen-sub").text
    assert "tokens in total" in gen_tile and not gen_tile.startswith("0 ")
    assert "api_keys" in driver.find_element("id", "cfg-body").text
    assert driver.find_element("id", "peer-fields").text.count("disabled") >= 1

    time.sleep(1.2)  # one more tick so the charts show the burst settling
    for theme in ("light", "dark"):
        if driver.execute_script("return document.documentElement.dataset.theme") != theme:
            driver.find_element("id", "theme-btn").click()
        assert driver.execute_script("return document.documentElement.dataset.theme") == theme
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.2)
        driver.save_screenshot(str(SHOTS / f"dashboard-{theme}.png"))
    errors = console_errors(driver)
    assert not errors, errors


def test_structured_outputs_panel(dash_server, driver):
    """The panel starts at zero and shows a constrained request, its mask and compile times
    and a refused schema within a stats tick or two."""
    driver.get(dash_server.url + "/")
    wait_for(lambda: driver.execute_script("return window.sparkdDash && window.sparkdDash.events >= 1"),
             what="the stats stream")
    read = ("return Object.fromEntries(['requests', 'kinds', 'refused', 'masks', 'mask-time', 'compile-time',"
            " 'cache-hits'].map(k => [k, document.getElementById('so-' + k).textContent]))")
    panel = driver.execute_script(read)
    assert panel["requests"] == "0" and panel["mask-time"] == "no masks yet", panel
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    out = chat(dash_server.url, "A number?", max_tokens=16, temperature=0,
               response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    assert out["usage"]["completion_tokens"] > 0
    refused = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": 1}}}
    r = requests.post(dash_server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "response_format": refused})
    assert r.status_code == 400, r.text
    panel = wait_for(lambda: (lambda p: p if p["refused"] == "1" and p["requests"] == "1" else None)(
        driver.execute_script(read)), what="the structured-outputs panel to count both requests")
    assert panel["kinds"] == "json_schema 1"
    assert int(panel["masks"]) >= out["usage"]["completion_tokens"]
    assert re.fullmatch(r"mean [0-9.]+ (µs|ms) · p99 [0-9.]+ (µs|ms)", panel["mask-time"]), panel
    assert re.fullmatch(r"p50 [0-9.]+ (µs|ms|s) · p99 [0-9.]+ (µs|ms|s) · 2 compiled", panel["compile-time"]), panel
    assert panel["cache-hits"] == "0"
    driver.execute_script("document.getElementById('structured').scrollIntoView({block: 'center'})")
    driver.save_screenshot(str(SHOTS / "dashboard-structured.png"))
    errors = console_errors(driver)
    assert not errors, errors


def click(driver, element_id):
    """Clicks a playground button through its DOM click(): the same handlers run as for a
    mouse click, whatever earlier tests left on screen (window size, overlays, the sticky
    header over a chat that has grown below the fold)."""
    el = driver.find_element("id", element_id)
    assert el.is_enabled(), f"#{element_id} is disabled"
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click();", el)


def test_playground_streams_and_stop_aborts(dash_server, driver):
    driver.get(dash_server.url + "/#playground")
    wait_for(lambda: driver.execute_script("return window.sparkdDash && window.sparkdDash.events >= 1"),
             what="the stats stream")
    driver.find_element("id", "pg-max").clear()
    driver.find_element("id", "pg-max").send_keys("24")
    driver.find_element("id", "pg-msg").send_keys("Say hello in three words.")
    click(driver, "pg-send")
    wait_for(lambda: driver.execute_script("return playground.state === 'done'"), what="the reply to finish")
    reply = driver.find_elements("css selector", "#pg-chat .msg.assistant")[-1].text
    assert reply.strip()
    assert "tok/s" in driver.find_element("id", "pg-stats").text

    # A long reply, stopped after its first tokens: the server must cancel it. The small
    # model sometimes ends a reply on its own before the click lands; then it tries again.
    def engine_aborts():
        m = re.search(r'^sparkd_requests_finished_total\{[^}]*reason="abort"[^}]*\} (\S+)$',
                      requests.get(dash_server.url + "/metrics", timeout=10).text, re.M)
        return float(m.group(1)) if m else 0.0

    driver.find_element("id", "pg-max").clear()
    driver.find_element("id", "pg-max").send_keys("2000")
    driver.find_element("id", "pg-system").send_keys("You write very long, detailed answers.")
    for attempt in range(4):
        before = engine_aborts()
        replies = driver.execute_script("return playground.replies")
        driver.find_element("id", "pg-msg").send_keys("Write a long story about a dragon who learns to count to 1000.")
        click(driver, "pg-send")
        wait_for(lambda: driver.execute_script(
            "const m = document.querySelectorAll('#pg-chat .msg.assistant');"
            "return playground.state !== 'streaming' || m[m.length - 1].textContent.length > 5"), what="streamed text")
        click(driver, "pg-stop")
        wait_for(lambda: driver.execute_script("return playground.replies") > replies, what="the reply to end")
        wait_for(lambda: not driver.execute_script("return [...requests.values()].some(r => r.status === 'running' || r.status === 'queued')"),
                 what="the request to end on the server", timeout=15)
        if driver.execute_script("return playground.state") == "stopped":
            try:
                wait_for(lambda: engine_aborts() > before, timeout=5, what="the engine's abort count")
                break
            except AssertionError:
                pass  # the engine had finished the reply before the cancel arrived
        driver.execute_script("document.getElementById('pg-clear').click()")  # may sit under the header
    else:
        raise AssertionError("no reply could be stopped in four attempts")

    def aborted():
        snap = requests.get(dash_server.url + "/api/snapshot", timeout=10).json()
        return [r for r in snap["requests"] if r["finish_reason"] == "abort"]

    rec = wait_for(aborted, timeout=15, what="the aborted request in the snapshot")
    assert rec[0]["generated_tokens"] < 2000 and rec[0]["error"] == "the client disconnected"
    metrics = requests.get(dash_server.url + "/metrics", timeout=10).text
    counted = re.search(r'^sparkd_requests_finished_total\{[^}]*reason="abort"[^}]*\} (\S+)$', metrics, re.M)
    assert counted and float(counted.group(1)) >= 1, metrics
    wait_for(lambda: driver.execute_script(
        "return [...document.querySelectorAll('#req-rows td.finish-abort')].length > 0"),
        what="the aborted request in the table")
    errors = console_errors(driver)
    assert not errors, errors


def test_snapshot_content(dash_server):
    snap = requests.get(dash_server.url + "/api/snapshot", timeout=10).json()
    s = snap["server"]
    assert s["model"] == "SmolLM2-135M-Instruct.Q4_1"
    assert s["backend"].startswith("cpu") and s["kv_blocks"] > 0 and s["max_model_len"] > 0
    assert snap["live"]["health"]["status"] == "ready"
    assert snap["peer"]["link_state"] == "disabled"
    for key in ("rtt_ms", "link_bytes_per_s", "tx_bytes", "rx_bytes", "last_error", "role", "address"):
        assert key in snap["peer"]
    cols = snap["series"]
    assert len(cols["t"]) >= 1 and len(cols["t"]) == len(cols["generation_tps"]) == len(cols["mem_free"])
    assert cols["mem_weights"][-1] > 0 and cols["mem_kv"][-1] > 0 and cols["kv_blocks_total"][-1] > 0
    assert cols["mem_state"][-1] == 0  # no recurrent layers in SmolLM2
    assert snap["config"]["model"]["path"].endswith(".gguf")
    # the assets come from the binary with a strict content policy
    page = requests.get(dash_server.url + "/", timeout=10)
    assert page.status_code == 200 and "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert requests.get(dash_server.url + "/static/dashboard.js", timeout=10).status_code == 200
    assert requests.get(dash_server.url + "/static/nope.js", timeout=10).status_code == 404


def test_api_keys_asked_and_redacted(driver):
    key = "sk-dash-secret-7f3a"
    with Server(settings={**SMALL, "server.api_keys": [key]}) as s:
        s.wait_ready()
        assert requests.get(s.url + "/api/snapshot", timeout=10).status_code == 401
        assert requests.get(s.url + "/api/stream", timeout=10).status_code == 401
        assert requests.get(s.url + "/", timeout=10).status_code == 200  # dashboard_auth = "public"
        snap = requests.get(s.url + "/api/snapshot", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert snap.status_code == 200 and key not in snap.text
        assert "redacted" in json.dumps(snap.json()["config"]["server"]["api_keys"])

        driver.get(s.url + "/")
        wait_for(lambda: driver.execute_script("return document.getElementById('key-dialog').open"),
                 what="the key dialog")
        driver.find_element("id", "key-input").send_keys("wrong-key")
        driver.find_element("id", "key-ok").click()
        wait_for(lambda: driver.execute_script(
            "const d = document.getElementById('key-dialog'); return d.open && !document.getElementById('key-error').hidden"),
            what="the refused-key message")
        driver.find_element("id", "key-input").send_keys(key)
        driver.find_element("id", "key-ok").click()
        wait_for(lambda: driver.execute_script("return window.sparkdDash.events >= 2"), what="stats with the key")
        assert driver.find_element("id", "hdr-model").text == "SmolLM2-135M-Instruct.Q4_1"
        assert key not in driver.page_source
        # 401s for the refused attempts are expected in the log; nothing else may fail
        errors = [e for e in console_errors(driver) if "401" not in e["message"]]
        assert not errors, errors


def test_dashboard_auth_api_key_protects_the_page(driver):
    key = "sk-page-key-19c"
    with Server(settings={**SMALL, "server.api_keys": [key], "server.dashboard_auth": "api_key"}) as s:
        s.wait_ready()
        page = requests.get(s.url + "/", timeout=10)
        assert page.status_code == 401 and "login.js" in page.text and "dashboard.js" not in page.text
        ok = requests.get(s.url + "/", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert ok.status_code == 200 and "dashboard.js" in ok.text
        driver.get(s.url + "/")
        driver.find_element("id", "key-input").send_keys(key)
        driver.find_element("id", "key-ok").click()
        wait_for(lambda: driver.execute_script("return !!window.sparkdDash && window.sparkdDash.events >= 1"),
                 what="the dashboard after logging in")
        driver.delete_all_cookies()


def proc_cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_stats_stream_cost_and_drain():
    """CPU time of the idle server with three stream subscribers vs none; streams end on drain."""
    s = Server(settings=SMALL).wait_ready()
    try:
        window = 6.0
        c0 = proc_cpu_seconds(s.proc.pid)
        time.sleep(window)
        idle = proc_cpu_seconds(s.proc.pid) - c0

        events = [0, 0, 0]
        ended = [threading.Event() for _ in events]

        def subscribe(i):
            with requests.get(s.url + "/api/stream", stream=True, timeout=30) as r:
                for line in r.iter_lines():
                    if line.startswith(b"event: stats"):
                        events[i] += 1
            ended[i].set()

        threads = [threading.Thread(target=subscribe, args=(i,), daemon=True) for i in range(len(events))]
        for t in threads:
            t.start()
        wait_for(lambda: min(events) >= 1, what="every subscriber's first event")
        c1 = proc_cpu_seconds(s.proc.pid)
        time.sleep(window)
        streaming = proc_cpu_seconds(s.proc.pid) - c1
        cost = max(0.0, streaming - idle) / window * 100
        tick = 1 / os.sysconf("SC_CLK_TCK")
        print(f"\nstats stream cost: {cost:.2f}% of one core with 3 subscribers "
              f"(idle {idle / window * 100:.2f}%, with streams {streaming / window * 100:.2f}%; "
              f"resolution {tick / window * 100:.2f}%)")
        assert min(events) >= window - 2
        assert cost < 1.0

        # Open streams neither hold up the drain nor count as requests in flight.
        t0 = time.monotonic()
        s.proc.send_signal(15)
        assert all(e.wait(10) for e in ended), "a stats stream did not end on drain"
        s.proc.wait(timeout=15)
        assert time.monotonic() - t0 < 8, "the drain waited for the stats streams"
        assert s.proc.returncode == 0
    finally:
        s.stop()
