"""A fleet on loopback for the tests: sparkd replicas behind HAProxy, configured by the
shipped recipe (systemd/fleet/haproxy.cfg) rendered with the test's ports, never a copy of
it; and a chat client that records which replica answered and when the first token came."""
import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from conftest import REPO, Server, free_port

RECIPE = REPO / "systemd" / "fleet" / "haproxy.cfg"
BACKEND = "sparkd"  # the recipe's backend section


def render_recipe(replica_ports, port, stats_port, socket_path, balance=None):
    """The recipe with this machine's addresses; `balance` replaces its balance line."""
    text = RECIPE.read_text()

    def sub(pattern, replacement):
        nonlocal text
        text, n = re.subn(pattern, replacement, text, flags=re.M)
        assert n > 0, f"{RECIPE.name} has no line matching {pattern!r}: the fleet test renders it"

    sub(r"^(    stats socket )\S+", rf"\g<1>{socket_path}")
    sub(r"^    (user|group) haproxy\n", "")  # the test does not start as root
    sub(r"^    log /dev/log .*$", "    log stdout format raw local0")  # into the log file below
    sub(r"^    bind :8000$", f"    bind 127.0.0.1:{port}")
    sub(r"^    bind 127\.0\.0\.1:8404$", f"    bind 127.0.0.1:{stats_port}")
    servers = "".join(f"    server spark{i} 127.0.0.1:{p} id {i}\n" for i, p in enumerate(replica_ports, 1))
    sub(r"^    server spark\d+ .*\n(?:    server spark\d+ .*\n)*", servers)
    if balance:
        sub(r"^    balance hash .*$", f"    balance {balance}")
    return text


def haproxy_binary():
    path = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    assert path, "haproxy is missing: `make deps` installs the haproxy package"
    return path


class Balancer:
    """HAProxy in the foreground with the rendered recipe; its runtime API on a unix socket."""

    def __init__(self, replica_ports, balance=None):
        self.dir = Path(tempfile.mkdtemp(prefix="haproxy-test-"))
        self.port, self.stats_port = free_port(), free_port()
        self.socket = self.dir / "admin.sock"
        self.config = self.dir / "haproxy.cfg"
        self.config.write_text(render_recipe(replica_ports, self.port, self.stats_port, self.socket, balance))
        check = subprocess.run([haproxy_binary(), "-c", "-f", str(self.config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "haproxy.log", "w+")
        self.proc = subprocess.Popen([haproxy_binary(), "-db", "-f", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def command(self, line):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.socket))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def servers(self):
        """{server name: its row of `show stat`} for the sparkd backend."""
        header, *rows = [r for r in self.command("show stat").splitlines() if r]
        names = header.lstrip("# ").split(",")
        out = {}
        for row in rows:
            fields = dict(zip(names, row.split(",")))
            if fields["pxname"] == BACKEND and fields["svname"] not in ("BACKEND", "FRONTEND"):
                out[fields["svname"]] = fields
        return out

    def wait_status(self, name, wanted, timeout):
        """Polls until server `name` is `wanted` ("UP" or "DOWN"); returns the time.monotonic()
        at which it was seen."""
        t0 = time.monotonic()
        status = None
        while time.monotonic() - t0 < timeout:
            assert self.proc.poll() is None, f"haproxy exited:\n{self.output()}"
            try:
                status = self.servers()[name]["status"]
            except (OSError, KeyError):  # the socket comes up a moment after the process
                status = None
            if status == wanted:
                return time.monotonic()
            time.sleep(0.05)
        raise AssertionError(f"{name} is {status}, not {wanted}, after {timeout} s:\n{self.output()[-3000:]}")

    def output(self):
        self.log.flush()
        return (self.dir / "haproxy.log").read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Fleet:
    """Replicas spark1..N on loopback, named as the recipe names its servers."""

    def __init__(self, count, settings):
        self.settings = settings
        self.replicas = [self._start(i, None) for i in range(1, count + 1)]
        for r in self.replicas:
            r.wait_ready()

    def _start(self, i, port):
        extra = {"server.port": port} if port else {}
        return Server(settings={**self.settings, **extra, "server.replica_name": f"spark{i}"})

    def name(self, i):
        return f"spark{i + 1}"

    def ports(self):
        return [r.port for r in self.replicas]

    def restart(self, i):
        """Starts replica i again on its port (after a kill or a drain); waits until ready."""
        old = self.replicas[i]
        old.stop()
        self.replicas[i] = self._start(i + 1, old.port).wait_ready()

    def stop(self):
        for r in self.replicas:
            r.stop()


def chat(url, session, messages, max_tokens, key_field="header", api_key=None, stream=True, timeout=300, out=None):
    """One chat turn through `url`. The session key travels as the X-Session-ID header, or as
    the body field `key_field`. Fills and returns `out`: status, replica, ttft (s), text,
    usage, done (a complete answer), error; a thread that runs it can watch `out` fill."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}
    headers = {}
    if key_field == "header":
        headers["X-Session-ID"] = session
    elif key_field:
        body[key_field] = session
    if stream:
        body["stream_options"] = {"include_usage": True}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    out = {} if out is None else out
    out.update(status=None, replica=None, ttft=None, text="", usage=None, done=False, error=None)
    t0 = time.monotonic()
    try:
        r = requests.post(url + "/v1/chat/completions", json=body, headers=headers, stream=stream, timeout=timeout)
        out["status"], out["replica"] = r.status_code, r.headers.get("X-Sparkd-Replica")
        if r.status_code != 200 or not stream:
            j = r.json()
            out["error"] = j.get("error")
            if r.status_code == 200:
                out["text"], out["usage"] = j["choices"][0]["message"]["content"], j["usage"]
                out["done"] = True
            return out
        for line in r.iter_lines():
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                out["done"] = True
                break
            event = json.loads(line[6:])
            if "error" in event:
                out["error"] = event["error"]
                continue
            if event.get("usage"):
                out["usage"] = event["usage"]
            if event.get("choices") and out["ttft"] is None:  # sparkd's first chunk comes with the first token
                out["ttft"] = time.monotonic() - t0
            for choice in event.get("choices", []):
                out["text"] += choice.get("delta", {}).get("content") or ""
    except (requests.RequestException, ValueError) as e:  # a replica killed mid-stream cuts it
        out["error"] = repr(e)
    return out
