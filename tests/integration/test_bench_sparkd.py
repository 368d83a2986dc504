"""`sparkd bench` against a real sparkd serving SmolLM2 on the CPU, checked by an independent
client that measures the same run.

What "the same run" means here: bench talks to sparkd through independent_client.py, a
relay that forwards every request with the official openai SDK and times it with its own
code as the tokens come back. Both therefore see the very same requests and the very same
tokens; neither number comes from the other's code. (Timing a second run of identical
prompts would compare two different runs, whose CPU timings differ by more than the 5%
being checked; and a server-side log would come from the code under test's neighbour.)

The relay sits one hop closer to the server, so bench's TTFT includes the relay's
forwarding of the request (a few milliseconds of Python) on top of what the SDK saw; TPOT
is a difference of two times seen through the same relay, so that overhead cancels.
Checked: per-request output tokens equal usage.completion_tokens; the totals equal their
sum; throughput is tokens over the run's wall time, and that wall time matches the span
the relay saw; mean TTFT and TPOT agree within 5% (per request within 5% plus the relay's
overhead)."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Server, run_sparkd

RELAY = Path(__file__).with_name("independent_client.py")
# The relay's own share of a TTFT: reading, parsing and re-sending the first chunk. The relay
# is a Python process; on a busy 2-core machine its thread can wake tens of ms late. Bench's
# own timing accuracy is checked to well under a millisecond against the stub's send log.
RELAY_MS = 25


class Relay:
    def __init__(self, upstream, log):
        self.log = log
        self.proc = subprocess.Popen([sys.executable, str(RELAY), "--upstream", upstream, "--log", str(log)],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.url = f"http://127.0.0.1:{int(line.split()[-1])}"

    def records(self):
        return [json.loads(l) for l in Path(self.log).read_text().splitlines() if l.strip()]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def sparkd_server():
    s = Server().wait_ready()
    yield s
    s.stop()


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_bench_agrees_with_an_independent_openai_client(sparkd_server, tmp_path, endpoint):
    out = tmp_path / "bench.json"
    n, in_len, out_len = 4, 32, 12
    with Relay(sparkd_server.url, tmp_path / "relay.jsonl") as relay:
        p = run_sparkd("bench", "--url", relay.url, "--endpoint", endpoint, "--num-prompts", n,
                       "--concurrency", 1, "--input-len", in_len, "--output-len", out_len,
                       "--json", out, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        seen = relay.records()
    data = json.loads(out.read_text())
    s = data["summary"]
    assert s["succeeded"] == n and s["failed"] == 0, p.stdout
    measured = sorted(data["requests"], key=lambda r: r["start_ms"])
    assert len(seen) == n + 1  # the warm-up, then the measured requests in the same order
    sdk = seen[1:]

    # Token counts: bench's come from the usage chunk, and equal what the SDK received.
    for b, r in zip(measured, sdk):
        assert b["output_tokens_from_usage"]
        assert b["output_tokens"] == r["completion_tokens"] == out_len
        assert b["prompt_tokens"] == r["prompt_tokens"]
    assert s["output_tokens"] == sum(r["completion_tokens"] for r in sdk)
    assert s["input_tokens"] == sum(r["prompt_tokens"] for r in sdk)
    if endpoint == "completions":
        # Prompt lengths were hit exactly with sparkd's /tokenize.
        assert all(r["prompt_tokens"] == in_len for r in sdk)

    # Throughput is tokens over wall time, and the wall time is the span of the run.
    assert s["output_throughput"] == pytest.approx(s["output_tokens"] / s["duration_s"], rel=1e-9)
    assert s["total_token_throughput"] == pytest.approx(
        (s["input_tokens"] + s["output_tokens"]) / s["duration_s"], rel=1e-9)
    relay_span = sdk[-1]["end"] - sdk[0]["arrival"]
    assert s["duration_s"] == pytest.approx(relay_span, rel=0.05)

    # Latencies: the same requests timed by two clients.
    for b, r in zip(measured, sdk):
        print(f"TTFT bench {b['ttft_ms']:.1f} sdk {r['ttft_s'] * 1000:.1f}; "
              f"TPOT bench {b['tpot_ms']:.2f} sdk {r['tpot_s'] * 1000:.2f}")
    for b, r in zip(measured, sdk):
        assert b["ttft_ms"] >= r["ttft_s"] * 1000 - 1  # bench is one hop further away
        assert b["ttft_ms"] == pytest.approx(r["ttft_s"] * 1000, rel=0.05, abs=RELAY_MS)
        # TPOT spans first to last token: a first token the relay passed on late shortens the
        # bench's by that delay over the remaining tokens.
        assert b["tpot_ms"] == pytest.approx(r["tpot_s"] * 1000, rel=0.05, abs=RELAY_MS / (out_len - 1))
    mean_ttft = sum(r["ttft_s"] for r in sdk) / n * 1000
    mean_tpot = sum(r["tpot_s"] for r in sdk) / n * 1000
    assert s["tpot_ms"]["mean"] == pytest.approx(mean_tpot, rel=0.05, abs=RELAY_MS / (out_len - 1) / 2)
    assert s["ttft_ms"]["mean"] == pytest.approx(mean_ttft, rel=0.05, abs=RELAY_MS / 2)
    print(f"\n{endpoint}: bench TTFT {s['ttft_ms']['mean']:.1f} ms vs SDK {mean_ttft:.1f} ms; "
          f"bench TPOT {s['tpot_ms']['mean']:.2f} ms vs SDK {mean_tpot:.2f} ms; "
          f"duration {s['duration_s']:.3f} s vs relay span {relay_span:.3f} s")


def test_bench_prefix_len_shows_cached_tokens_from_sparkd(sparkd_server, tmp_path):
    out = tmp_path / "bench.json"
    p = run_sparkd("bench", "--url", sparkd_server.url, "--num-prompts", 3, "--prefix-len", 64,
                   "--input-len", 16, "--output-len", 4, "--json", out, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    assert data["summary"]["succeeded"] == 3
    for r in data["requests"]:
        assert r["prompt_tokens"] == 80
        # The warm-up left the shared prefix in the prefix cache (full blocks of it).
        assert r["cached_tokens"] is not None and r["cached_tokens"] >= 48
