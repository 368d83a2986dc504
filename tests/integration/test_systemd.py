"""The systemd unit verifies, and sparkd speaks the notify protocol: READY=1, WATCHDOG=1, STOPPING=1."""
import shutil
import signal
import socket
import subprocess
import time

import pytest
import requests

from conftest import REPO, SPARKD, SPARKD_TEST_HOOKS, Server


def test_unit_verifies(tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.fail("systemd-analyze is missing: `make deps` installs the systemd package")
    unit = (REPO / "systemd" / "sparkd.service").read_text()
    # verify checks that ExecStart exists; point it at the binary under test.
    unit = unit.replace("/usr/local/bin/sparkd", str(SPARKD))
    (tmp_path / "sparkd.service").write_text(unit)
    r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "sparkd.service")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_notify_ready_watchdog_stopping_in_order(tmp_path):
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.5)
    server = Server(env={"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "300000"})
    states = []

    def collect_until(predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = sock.recv(4096).decode()
            except socket.timeout:
                continue
            states.extend(line.split("=")[0] + "=" + line.split("=", 1)[1] for line in msg.splitlines())
            if predicate():
                return True
        return False

    try:
        assert collect_until(lambda: "READY=1" in states, 120), f"no READY=1; got {states}\n{server.output()}"
        assert collect_until(lambda: states.count("WATCHDOG=1") >= 2, 10), f"no WATCHDOG=1; got {states}"
        server.proc.send_signal(signal.SIGTERM)
        assert collect_until(lambda: "STOPPING=1" in states, 30), f"no STOPPING=1; got {states}"
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.stop()
        sock.close()
    ready, watchdog, stopping = states.index("READY=1"), states.index("WATCHDOG=1"), states.index("STOPPING=1")
    assert ready < watchdog < stopping, states


def test_wedged_engine_stops_the_watchdog_pings(tmp_path):
    """The test build's hook blocks the engine loop while a file exists (engine/util/test_hooks.h):
    pings stop within the stall limit, /health names the stall, and pings resume once the loop
    turns again."""
    sock_path, wedge = tmp_path / "notify.sock", tmp_path / "wedge"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.1)
    server = Server(binary=SPARKD_TEST_HOOKS, env={
        "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "200000",
        "SPARKD_TEST_WEDGE_FILE": str(wedge), "SPARKD_TEST_STALL_LIMIT_S": "1"})

    def pings_during(seconds):
        n, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                n += sock.recv(4096).decode().splitlines().count("WATCHDOG=1")
            except socket.timeout:
                pass
        return n

    try:
        server.wait_ready()
        assert pings_during(1.0) >= 3
        wedge.touch()
        pings_during(1.5)  # the stall limit passes; pings sent before it are drained
        silent = pings_during(2.0)
        health = requests.get(server.url + "/health", timeout=10)
        assert silent == 0, f"{silent} WATCHDOG=1 while the engine loop stood still"
        assert health.status_code == 503 and "has not advanced" in health.json()["error"]["message"], health.text
        wedge.unlink()
        assert pings_during(1.5) >= 3, "pings did not resume"
        assert requests.get(server.url + "/health", timeout=10).status_code == 200
    finally:
        if wedge.exists():
            wedge.unlink()
        server.stop()
        sock.close()
