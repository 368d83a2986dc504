"""More than two boxes: three sparkd replicas behind HAProxy, configured by the shipped
recipe (systemd/fleet/haproxy.cfg, rendered with the test's ports). Session affinity
against round robin (prefix-cache hit rate, TTFT), a replica killed and brought back, and
a replica drained by SIGTERM.

The workload is the issue's, scaled to a 2-core CI machine: concurrent multi-turn sessions,
each with a system prompt of its own. Each replica's KV cache holds about half of all the
sessions, as on real boxes, where one replica cannot cache every session's prompt: that is
what routing by session is for. SPARKD_FLEET_FULL=1 (`make fleet-bench`) runs the issue's
full shape: 16 sessions of 6 turns with ~1,500-token system prompts."""
import os
import random
import re
import signal
import statistics
import threading
import time

import pytest
import requests

from conftest import REPO, metrics
from fleet import RECIPE, Balancer, Fleet, chat

FULL = os.environ.get("SPARKD_FLEET_FULL") == "1"
SESSIONS, TURNS, SYSTEM_WORDS = (16, 6, 1480) if FULL else (12, 4, 220)
ANSWER_TOKENS = 8
API_KEY = "fleet-test-key-1"
OTHER_KEY = "fleet-test-key-2"
# max_num_seqs x max_model_len bounds each replica's KV cache (see conftest.Server); here
# to about half of what all sessions' prompts need at their last turn.
MAX_MODEL_LEN = 3328 if FULL else 640
REPLICA_SETTINGS = {"engine.cpu_threads": 1, "model.max_model_len": MAX_MODEL_LEN, "engine.max_num_seqs": 4,
                    "engine.max_num_batched_tokens": 512, "server.api_keys": [API_KEY, OTHER_KEY],
                    "server.drain_timeout_s": 60}

WORDS = ("agent tool file test build branch commit review patch error trace memory cache token model "
         "prompt queue batch kernel server client request stream header metric replica session retry "
         "health drain signal config value table index block layer weight tensor shape offset length "
         "parser schema field string number array object answer question summary plan step result "
         "check limit budget timeout socket thread engine backend device driver report issue merge").split()


class Session:
    def __init__(self, label, i, system_words, key_field):
        rng = random.Random(f"{label}-{i}")
        self.id = f"{label}-session-{i}"
        self.key_field = key_field
        notes = " ".join(rng.choice(WORDS) for _ in range(system_words))
        self.messages = [{"role": "system", "content": f"You are agent {i} of {label}. Your notes: {notes}"}]
        self.questions = [f"Step {t}: which {rng.choice(WORDS)} comes after {rng.choice(WORDS)} in your notes?"
                          for t in range(max(TURNS, 6))]
        self.answered = 0

    def turn(self, url, max_tokens=ANSWER_TOKENS, **kw):
        """Asks the next question with the history so far; an answer joins the history."""
        messages = self.messages + [{"role": "user", "content": self.questions[self.answered]}]
        r = chat(url, self.id, messages, max_tokens, key_field=self.key_field, api_key=API_KEY, **kw)
        if r["done"]:
            self.messages = messages + [{"role": "assistant", "content": r["text"]}]
            self.answered += 1
        return r


def make_sessions(label, count, system_words=SYSTEM_WORDS):
    # The session key travels in each of the ways the recipe reads it.
    fields = ("header", "user", "prompt_cache_key")
    return [Session(label, i, system_words, fields[i % len(fields)]) for i in range(count)]


def run_concurrently(fns):
    threads = [start(f) for f in fns]
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a client thread did not finish"


@pytest.fixture(scope="module")
def fleet():
    f = Fleet(3, REPLICA_SETTINGS)
    yield f
    f.stop()


@pytest.fixture
def affinity(fleet):
    """The recipe as shipped, with every replica up."""
    b = Balancer(fleet.ports())
    try:
        for i in range(len(fleet.replicas)):
            b.wait_status(fleet.name(i), "UP", timeout=30)
        yield b
    finally:
        b.stop()


def prefix_counters(fleet):
    out = {}
    for i, r in enumerate(fleet.replicas):
        m = metrics(r.url)
        out[fleet.name(i)] = (m["vllm:prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"])
    return out


def run_phase(fleet, balancer, label):
    """All sessions at once, each turn after the previous answer. Returns the per-request
    results (session, turn, result) and the per-replica prefix-cache deltas."""
    sessions = make_sessions(label, SESSIONS)
    before = prefix_counters(fleet)
    results = []

    def run(s):
        for t in range(TURNS):
            r = s.turn(balancer.url)
            results.append((s.id, t, r))
            if not r["done"]:
                break

    run_concurrently([lambda s=s: run(s) for s in sessions])
    failed = [(sid, t, r) for sid, t, r in results if not r["done"]]
    assert not failed and len(results) == SESSIONS * TURNS, failed[:3]
    after = prefix_counters(fleet)
    deltas = {name: (after[name][0] - before[name][0], after[name][1] - before[name][1]) for name in after}
    return results, deltas


def summarize(results, deltas):
    later = [r for _, t, r in results if t > 0]
    cached = sum(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in later)
    prompt = sum(r["usage"]["prompt_tokens"] for r in later)
    hits, queries = sum(h for h, _ in deltas.values()), sum(q for _, q in deltas.values())
    return {"hit_later": cached / prompt, "hit_all": hits / queries if queries else 0.0,
            "first_prompt": statistics.median(r["usage"]["prompt_tokens"] for _, t, r in results if t == 0),
            "ttft_first": statistics.median(r["ttft"] for _, t, r in results if t == 0),
            "ttft_later": statistics.median(r["ttft"] for r in later),
            "per_replica": {n: f"{int(h)}/{int(q)}" for n, (h, q) in sorted(deltas.items())}}


def test_readme_installs_the_recipe_and_quotes_it_exactly():
    section = (REPO / "README.md").read_text().split("## More than two boxes", 1)[1].split("\n## ", 1)[0]
    assert "install -m 644 systemd/fleet/haproxy.cfg /etc/haproxy/haproxy.cfg" in section
    recipe = RECIPE.read_text()
    quoted = re.findall(r"^ +# +(server spark\d .*)$", section, flags=re.M)
    assert len(quoted) == 3 and all(f"    {line}\n" in recipe for line in quoted), quoted


def test_recipe_routes_by_session_key_and_passes_authorization(fleet, affinity):
    """The same key lands on the same replica whichever way it travels; keys spread over the
    fleet; Authorization reaches sparkd untouched (sparkd, not HAProxy, answers 401)."""
    homes = {}
    for k in range(9):
        key = f"route-key-{k}"
        seen = set()
        for field in ("header", "prompt_cache_key", "user", "metadata", "header"):
            body = {"prompt": "hi"}
            headers = {"Authorization": f"Bearer {API_KEY}"}
            if field == "header":
                headers["X-Session-ID"] = key
            elif field == "metadata":
                body["metadata"] = {"user_id": key}
            else:
                body[field] = key
            r = requests.post(affinity.url + "/tokenize", json=body, headers=headers, timeout=30)
            assert r.status_code == 200, r.text
            seen.add(r.headers["X-Sparkd-Replica"])
        assert len(seen) == 1, f"{key} went to {seen}"
        homes[key] = seen.pop()
    assert len(set(homes.values())) >= 2, f"nine keys all on one replica: {homes}"
    # The header wins over a body field.
    a, b = next((a, b) for a in homes for b in homes if homes[a] != homes[b])
    r = requests.post(affinity.url + "/tokenize", json={"prompt": "hi", "user": b},
                      headers={"Authorization": f"Bearer {API_KEY}", "X-Session-ID": a}, timeout=30)
    assert r.headers["X-Sparkd-Replica"] == homes[a]

    # No session key: the API key is the key. Both keys are valid on every replica.
    for api_key in (API_KEY, OTHER_KEY):
        got = {requests.post(affinity.url + "/tokenize", json={"prompt": "hi"},
                             headers={"Authorization": f"Bearer {api_key}"}, timeout=30).headers["X-Sparkd-Replica"]
               for _ in range(3)}
        assert len(got) == 1, got
    bad = requests.post(affinity.url + "/tokenize", json={"prompt": "hi"},
                        headers={"Authorization": "Bearer not-a-key-at-all"}, timeout=30)
    assert bad.status_code == 401 and bad.headers.get("X-Sparkd-Replica"), bad.headers
    assert bad.json()["error"]["code"] == "invalid_api_key"
    # No key of any kind: round robin (sparkd answers 401, from every replica in turn).
    anonymous = [requests.post(affinity.url + "/tokenize", json={"prompt": "hi"}, timeout=30) for _ in range(6)]
    assert all(r.status_code == 401 for r in anonymous)
    assert len({r.headers["X-Sparkd-Replica"] for r in anonymous}) == 3


def test_affinity_keeps_prefix_cache_hits_round_robin_loses_them(fleet, capsys):
    rows = {}
    for mode, balance in (("affinity", None), ("round robin", "roundrobin")):
        b = Balancer(fleet.ports(), balance=balance)
        try:
            for i in range(len(fleet.replicas)):
                b.wait_status(fleet.name(i), "UP", timeout=30)
            results, deltas = run_phase(fleet, b, mode.replace(" ", "-"))
        finally:
            b.stop()
        rows[mode] = summarize(results, deltas)
        if mode == "affinity":
            by_session = {}
            for sid, _, r in results:
                by_session.setdefault(sid, set()).add(r["replica"])
            split = {sid: sorted(v) for sid, v in by_session.items() if len(v) > 1}
            assert not split, f"sessions answered by more than one replica: {split}"
    a, rr = rows["affinity"], rows["round robin"]
    load = os.getloadavg()[0]
    with capsys.disabled():
        print(f"\nfleet: 3 replicas, {SESSIONS} sessions x {TURNS} turns, first prompts of ~{a['first_prompt']:.0f} "
              f"tokens (load average {load:.1f})")
        print(f"  {'':34}{'affinity':>14}{'round robin':>14}")
        print(f"  {'prefix-cache hit, turns 2+ (usage)':34}{a['hit_later']:>14.1%}{rr['hit_later']:>14.1%}")
        print(f"  {'prefix-cache hit, all (/metrics)':34}{a['hit_all']:>14.1%}{rr['hit_all']:>14.1%}")
        print(f"  {'median TTFT, first turns':34}{a['ttft_first'] * 1000:>12.0f}ms{rr['ttft_first'] * 1000:>12.0f}ms")
        print(f"  {'median TTFT, turns 2+':34}{a['ttft_later'] * 1000:>12.0f}ms{rr['ttft_later'] * 1000:>12.0f}ms")
        print(f"  {'hits/queries by replica':34}" + "   ".join(f"{n} {v}" for n, v in a["per_replica"].items()))
        print(f"  {'':34}" + "   ".join(f"{n} {v}" for n, v in rr["per_replica"].items()))
        print(f"  TTFT turns 2+, round robin / affinity: {rr['ttft_later'] / a['ttft_later']:.2f}x")
    assert a["hit_later"] >= 0.80, rows
    assert rr["hit_later"] <= a["hit_later"] - 0.15, rows


def homes_of(sessions, url):
    """Each session's first turn; {session id: the replica that answered}."""
    homes = {}
    for s in sessions:
        r = s.turn(url, max_tokens=2)
        assert r["done"], r
        homes[s.id] = r["replica"]
    return homes


def start(fn):
    t = threading.Thread(target=fn)
    t.start()
    return t


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout} s: {what}")


def running(replica):
    m = metrics(replica.url)
    return m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"]


def test_sigkill_loses_only_its_in_flight_work_and_the_replica_rejoins(fleet, affinity, capsys):
    sessions = make_sessions("kill", 9, system_words=40)
    homes = homes_of(sessions, affinity.url)
    victim_name = max(set(homes.values()), key=lambda n: sum(1 for h in homes.values() if h == n))
    victim = fleet.replicas[int(victim_name[5:]) - 1]
    on_victim = [s for s in sessions if homes[s.id] == victim_name]
    elsewhere = [s for s in sessions if homes[s.id] != victim_name]
    assert len(on_victim) >= 3, homes

    # In flight at the kill: a started stream and a non-streamed request on the victim, and a
    # stream on another replica.
    cut, retried, unaffected = {}, {}, {}
    threads = [start(lambda: on_victim[0].turn(affinity.url, max_tokens=400, out=cut)),
               start(lambda: on_victim[-1].turn(affinity.url, max_tokens=64, stream=False, out=retried)),
               start(lambda: elsewhere[0].turn(affinity.url, max_tokens=48, out=unaffected))]
    wait_until(lambda: cut.get("ttft") is not None and running(victim) >= 2, 60, "both requests run on the victim")
    assert victim.proc.poll() is None
    seen = {}
    killed_at = time.monotonic()
    victim.proc.send_signal(signal.SIGKILL)
    watcher = start(lambda: seen.update(down=affinity.wait_status(victim_name, "DOWN", timeout=10)))

    # Its sessions go on at once, before the health checks notice: HAProxy retries elsewhere.
    for s in on_victim[1:-1]:
        r = s.turn(affinity.url)
        assert r["done"] and r["replica"] != victim_name, r
    for t in threads + [watcher]:
        t.join(timeout=300)
    assert "down" in seen, "HAProxy did not mark the killed replica DOWN within 10 s"
    down_after = seen["down"] - killed_at
    sent_to_victim = int(affinity.servers()[victim_name]["stot"])

    assert cut["ttft"] is not None and not cut["done"] and cut["error"], f"the started stream was not cut: {cut}"
    assert retried["status"] == 200 and retried["done"] and retried["replica"] != victim_name, retried
    assert unaffected["done"] and unaffected["replica"] == homes[elsewhere[0].id], unaffected
    assert down_after <= 5, f"HAProxy marked the killed replica DOWN after {down_after:.1f} s"

    # With the victim out, each of its sessions has one new home, where its prompt is cached
    # from the next turn on; the other sessions never moved.
    for s in on_victim[1:-1]:
        first, second = s.turn(affinity.url), s.turn(affinity.url)
        assert first["done"] and second["done"], (first, second)
        assert first["replica"] == second["replica"] != victim_name, (first, second)
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, second["usage"]
    for s in elsewhere[1:]:
        r = s.turn(affinity.url)
        assert r["done"] and r["replica"] == homes[s.id], (r, homes[s.id])
    assert int(affinity.servers()[victim_name]["stot"]) == sent_to_victim, "HAProxy still tries the DOWN replica"

    # Back on its port, it rejoins and gets its own sessions back.
    restarted_at = time.monotonic()
    fleet.restart(fleet.replicas.index(victim))
    up_after = affinity.wait_status(victim_name, "UP", timeout=30) - restarted_at
    for s in on_victim:
        r = s.turn(affinity.url)
        assert r["done"] and r["replica"] == victim_name, r
    stats = affinity.servers()[victim_name]
    with capsys.disabled():
        print(f"\nfleet: SIGKILL {victim_name} ({len(on_victim)} of {len(sessions)} sessions): DOWN after "
              f"{down_after:.2f} s, the started stream cut, the unanswered request retried on "
              f"{retried['replica']}; restarted: UP after {up_after:.1f} s (HAProxy retries {stats['wretr']}, "
              f"redispatches {stats['wredis']})")


def test_sigterm_drain_finishes_every_accepted_request(fleet, affinity, capsys):
    sessions = make_sessions("drain", 9, system_words=40)
    homes = homes_of(sessions, affinity.url)
    drained_name = max(set(homes.values()), key=lambda n: sum(1 for h in homes.values() if h == n))
    index = int(drained_name[5:]) - 1
    drained = fleet.replicas[index]
    on_drained = [s for s in sessions if homes[s.id] == drained_name]

    accepted_stream, accepted_plain = {}, {}
    assert len(on_drained) >= 3, homes
    threads = [start(lambda: on_drained[0].turn(affinity.url, max_tokens=48, out=accepted_stream)),
               start(lambda: on_drained[-1].turn(affinity.url, max_tokens=48, stream=False, out=accepted_plain))]
    wait_until(lambda: accepted_stream.get("ttft") is not None and running(drained) >= 2, 60,
               "both requests run on the replica to drain")
    seen = {}
    signalled_at = time.monotonic()
    drained.proc.send_signal(signal.SIGTERM)
    watcher = start(lambda: seen.update(down=affinity.wait_status(drained_name, "DOWN", timeout=10)))

    # New turns of its sessions while it drains: none fails (503 before any work is retried
    # on another replica, and the health checks soon take it out).
    during = []
    while time.monotonic() - signalled_at < 4:
        for s in on_drained[1:-1]:
            r = chat(affinity.url, s.id, [{"role": "user", "content": "Still there?"}], 2, key_field=s.key_field,
                     api_key=API_KEY)
            during.append(r)
    for t in threads + [watcher]:
        t.join(timeout=300)
    assert "down" in seen, "HAProxy did not mark the draining replica DOWN within 10 s"
    down_after = seen["down"] - signalled_at
    assert drained.proc.wait(timeout=60) == 0, drained.output()[-2000:]

    assert accepted_stream["done"] and accepted_stream["replica"] == drained_name, accepted_stream
    assert accepted_plain["done"] and accepted_plain["status"] == 200 and accepted_plain["replica"] == drained_name, \
        accepted_plain
    failed = [r for r in during if not r["done"]]
    assert not failed, failed[:3]
    assert all(r["replica"] != drained_name for r in during[len(during) // 2:]), "still sent to the draining replica"
    with capsys.disabled():
        print(f"\nfleet: SIGTERM {drained_name}: DOWN after {down_after:.2f} s; its 2 accepted requests finished; "
              f"{len(during)} new requests during the drain, all answered, by {sorted({r['replica'] for r in during})}")
    fleet.restart(index)
    affinity.wait_status(drained_name, "UP", timeout=30)
