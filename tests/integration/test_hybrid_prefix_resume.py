"""Prefix reuse on a hybrid (the tiny Qwen3.5-MoE, Qwen3-Next and Nemotron-H, whose Mamba-2
state the CPU backend checkpoints alike; the test marked cuda_path on the emulated CUDA server
too, on the tiny Qwen3.5). A recurrent
layer's state holds the whole prefix at one position, so a cached KV prefix is worth nothing
without the state at its end: the engine keeps state checkpoints (engine.state_checkpoints)
at the end of every prompt, at the end of every answer (the state after prompt and answer
less the last sampled token, which was never fed back) and where a new prompt leaves an
earlier one, and a request resumes from the longest prefix that has both.

An agent's conversation is the case that pays: each turn's prompt is the previous prompt, the
answer and a little more (a tool result, a user message), so from turn two on nearly all of
it must come from cache (usage.prompt_tokens_details.cached_tokens). Resuming must not change
a single number: every token and its logprob equals what a server with
engine.enable_prefix_caching = false computes from scratch for the same prompt. Prompts are
token ids and answers are read back as ids (each token of the test tokenizer is one
character: test_serve_tiny_models.char_tokenizer), so nothing is re-tokenised between turns.
"""
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import EMULATED_GPU, Server, wait_engine_idle
from test_serve_tiny_models import BASE, served_copy


# The tiny models have 256 positions: conversation c's first prompt has 24 + 2c tokens and
# grows by at most 12 answer + 6 new tokens a turn, so 16 conversations of 10 turns end
# within 54 + 9 x 18 + 12 = 228.
COMMON = {"engine.cpu_threads": 1, "engine.max_num_seqs": 8, "model.max_model_len": 256}
NO_CACHE = {**COMMON, "engine.enable_prefix_caching": False}
CONVERSATIONS, TURNS = 8, 10
# The emulated CUDA server computes these models in BF16, and a step's shape picks its
# kernels (its GEMMs by row count), so under concurrency a resumed turn and the same turn
# from scratch round differently (measured 1.25e-2); one at a time they agree exactly.
LOGPROB_TOLERANCE = 5e-2 if EMULATED_GPU else 1e-4


# The emulated CUDA server runs the tests marked cuda_path on the dense tiny Qwen3.5: BF16's
# rounding, which differs between a resumed turn and the same turn from scratch, tips the
# tiny MoE models' near-uniform routers now and then.
@pytest.fixture(scope="module", params=["qwen3_5"] if EMULATED_GPU else ["qwen3_5_moe", "qwen3_next", "nemotron_h"])
def model(request, tmp_path_factory):
    return served_copy(request.param, tmp_path_factory.mktemp(request.param))


def complete(url, prompt, max_tokens):
    """A greedy answer to token-id `prompt`: (answer ids, their logprobs, cached_tokens)."""
    r = requests.post(url + "/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "logprobs": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    lp = body["choices"][0]["logprobs"]
    # logprobs.tokens decodes each token alone, special ones included (the text leaves EOS
    # out): one character each, so one id each.
    assert all(len(t) == 1 for t in lp["tokens"]), lp["tokens"]
    ids = [ord(t) - BASE for t in lp["tokens"]]
    assert len(ids) == max_tokens == len(lp["token_logprobs"])
    assert body["usage"]["prompt_tokens"] == len(prompt)
    return ids, lp["token_logprobs"], body["usage"]["prompt_tokens_details"]["cached_tokens"]


def conversation(url, c):
    """Conversation `c` of TURNS turns, each prompt built from the last and its answer:
    [(prompt, max_tokens, (ids, logprobs, cached_tokens))] a turn."""
    rng = random.Random(c)
    prompt = [rng.randrange(3, 256) for _ in range(24 + 2 * c)]  # distinct from the first token
    turns = []
    for t in range(TURNS):
        max_tokens = 8 + (c + t) % 5
        answer = complete(url, prompt, max_tokens)
        turns.append((prompt, max_tokens, answer))
        tool_result = [rng.randrange(3, 256) for _ in range(3 + (c + 2 * t) % 4)]
        prompt = prompt + answer[0] + tool_result
    return turns


def run_conversations(url, n=CONVERSATIONS):
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda c: conversation(url, c), range(n)))


def replay(url, conversations):
    """The same prompts, each conversation's in order, on another server: [[answer a turn]]."""
    with ThreadPoolExecutor(len(conversations)) as pool:
        return list(pool.map(lambda turns: [complete(url, p, n) for p, n, _ in turns], conversations))


def assert_same_answers(got, want, what):
    """Token for token, and every logprob within LOGPROB_TOLERANCE."""
    assert got[0] == want[0], f"{what}: tokens {got[0]} != {want[0]} from scratch"
    worst = max(abs(a - b) for a, b in zip(got[1], want[1]))
    assert worst <= LOGPROB_TOLERANCE, f"{what}: a logprob differs by {worst:.3g} from scratch"


@pytest.mark.cuda_path
def test_agent_turns_resume_from_the_last_answer(model):
    with Server(COMMON, model=model) as s:
        s.wait_ready()
        cached = run_conversations(s.url)
    with Server(NO_CACHE, model=model) as s:
        s.wait_ready()
        scratch = replay(s.url, cached)
    for c, (turns, plain) in enumerate(zip(cached, scratch)):
        for t, ((prompt, _, answer), from_scratch) in enumerate(zip(turns, plain)):
            assert from_scratch[2] == 0, "prefix caching off, yet tokens came from cache"
            assert_same_answers(answer, from_scratch, f"conversation {c} turn {t + 1}")
    short = []
    for c, turns in enumerate(cached):
        for t in range(1, TURNS):
            previous_prompt, _, (previous_answer, _, _) = turns[t - 1]
            prompt, _, (_, _, got) = turns[t]
            # The answer's last token was never fed back: the state after it does not exist.
            need = len(previous_prompt) + len(previous_answer) - 1
            assert got < len(prompt), f"conversation {c} turn {t + 1}: all {len(prompt)} tokens cached"
            if got < need:
                short.append((c, t + 1, got, need))
    assert not short, f"{len(short)} of {CONVERSATIONS * (TURNS - 1)} turns resumed short of the last " \
                      f"answer (conversation, turn, cached_tokens, at least): {short[:6]}"


@pytest.mark.cuda_path  # state and tail-block copies on the device too
def test_prompts_sharing_a_system_prompt_resume_where_they_part(model):
    """A = S + a, then B = S + b, then C = S + c: B leaves A's path after S and keeps a
    checkpoint there, from which C resumes."""
    rng = random.Random(1000)
    system = [rng.randrange(3, 256) for _ in range(100)]
    heads = rng.sample(range(3, 256), 3)  # the tails differ from their first token on
    prompts = [system + [h] + [rng.randrange(3, 256) for _ in range(9)] for h in heads]
    with Server(COMMON, model=model) as s:
        s.wait_ready()
        cached = [complete(s.url, p, 8) for p in prompts]
    with Server(NO_CACHE, model=model) as s:
        s.wait_ready()
        scratch = [complete(s.url, p, 8) for p in prompts]
    for name, got, want in zip("ABC", cached, scratch):
        assert_same_answers(got, want, f"request {name}")
    assert len(system) <= cached[2][2] < len(prompts[2]), f"C resumed {cached[2][2]} tokens, not S's {len(system)}"


def test_two_checkpoints_serve_many_conversations(model):
    """With engine.state_checkpoints = 2, 16 conversations at 8 at a time evict checkpoints
    all along: answers stay those from scratch, a conversation alone afterwards still resumes
    from its last answer, and at the end nothing is held."""
    few = {**COMMON, "engine.state_checkpoints": 2}
    with Server(few, model=model) as s:
        s.wait_ready()
        with ThreadPoolExecutor(8) as pool:
            many = list(pool.map(lambda c: conversation(s.url, c), range(16)))
        rng = random.Random(2000)
        first = [rng.randrange(3, 256) for _ in range(30)]
        answer = complete(s.url, first, 10)
        second = first + answer[0] + [rng.randrange(3, 256) for _ in range(5)]
        resumed = complete(s.url, second, 10)
        m = wait_engine_idle(s.url)
    assert m["sparkd_kv_blocks_used"] == 0 and m["vllm:kv_cache_usage_perc"] == 0
    with Server(NO_CACHE, model=model) as s:
        s.wait_ready()
        scratch = replay(s.url, many)
    for c, (turns, plain) in enumerate(zip(many, scratch)):
        for t, ((_, _, got), want) in enumerate(zip(turns, plain)):
            assert_same_answers(got, want, f"conversation {c} turn {t + 1}")
    assert len(first) + len(answer[0]) - 1 <= resumed[2] < len(second), resumed[2]
