"""XLM-RoBERTa encoders served as an embedder (BGE-M3's layout: CLS pooling, normalised) and as a
cross-encoder reranker (bge-reranker-v2-m3's: XLMRobertaForSequenceClassification), checked
against Hugging Face transformers.

The tiny models of tests/golden/models/xlmr_embed and xlmr_rerank (tests/gen/gen_encoder_models.py)
carry transformers' outputs: CLS embeddings of eight texts, and sigmoid(logit) of six
(query, document) pairs fed as the tokenizer's pair. The same models as `bert` GGUF files
(tests/gen/gguf_encoder.py, written here as llama.cpp's converter writes them) must give the same
numbers. On the emulated CUDA server (cuda_path) the limits are BF16's.
"""
import concurrent.futures
import json
import unicodedata

import numpy as np
import openai
import pytest
import requests

from conftest import EMULATED_GPU, REPO, Server, check_refuses, check_embedding, health_ok, pooled_server
from gguf_encoder import write_encoder_gguf

pytestmark = pytest.mark.cuda_path

MODELS = REPO / "tests" / "golden" / "models"
EMBED = MODELS / "xlmr_embed"
RERANK = MODELS / "xlmr_rerank"
GOLDEN_EMBED = json.loads((EMBED / "golden.json").read_text())
GOLDEN_RERANK = json.loads((RERANK / "golden.json").read_text())
CONTEXT = 64  # the tiny models' positions
BASE = {"model.max_model_len": CONTEXT}
COSINE = 0.9999 if EMULATED_GPU else 0.99999
MAX_ABS = 5e-3 if EMULATED_GPU else 1e-4
SCORE_TOL = 5e-3 if EMULATED_GPU else 1e-4


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    d = tmp_path_factory.mktemp("encoder-gguf")
    write_encoder_gguf(str(EMBED), str(d / "embed.gguf"))
    write_encoder_gguf(str(RERANK), str(d / "rerank.gguf"))
    return d


@pytest.fixture(scope="module", params=["hf", "gguf"])
def embedder(request, ggufs):
    path = EMBED if request.param == "hf" else ggufs / "embed.gguf"
    with pooled_server(request.param, path, "embed", "emb", {**BASE, "engine.max_num_seqs": 16}) as s:
        yield s


@pytest.fixture(scope="module", params=["hf", "gguf"])
def reranker(request, ggufs):
    path = RERANK if request.param == "hf" else ggufs / "rerank.gguf"
    with pooled_server(request.param, path, "rerank", "rr", BASE) as s:
        yield s


def check_vector(got, want):
    check_embedding(got, want, COSINE, MAX_ABS)


def embed(server, inputs, **kw):
    r = requests.post(server.url + "/v1/embeddings", json={"input": inputs, "encoding_format": "float", **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_embeddings_equal_transformers(embedder):
    # A GGUF keeps no NFKC normaliser (the tiny tokenizer's stands where XLM-R's charsmap does,
    # which llama.cpp's converter writes): texts that NFKC changes are compared by their ids below.
    cases = [(t, ids, e) for t, ids, e in zip(GOLDEN_EMBED["texts"], GOLDEN_EMBED["ids"], GOLDEN_EMBED["embeddings"])
             if embedder.kind == "hf" or unicodedata.normalize("NFKC", t) == t]
    c = openai.OpenAI(base_url=embedder.url + "/v1", api_key="none")
    r = c.embeddings.create(model="emb", input=[t for t, _, _ in cases])
    for d, (_, _, want) in zip(r.data, cases):
        check_vector(d.embedding, want)
    assert r.usage.prompt_tokens == sum(len(ids) for _, ids, _ in cases)
    # The tokenizer's ids (with <s> and </s>) give the same vectors.
    for d, want in zip(embed(embedder, GOLDEN_EMBED["ids"])["data"], GOLDEN_EMBED["embeddings"]):
        check_vector(d["embedding"], want)


def test_each_input_attends_only_to_itself(embedder):
    """Attention is bidirectional within an input and never across inputs: each input embedded
    alone equals the same input among 31 others of other lengths, sent at once and concurrently."""
    texts = [GOLDEN_EMBED["texts"][i % 8] + " a" * (i // 8) for i in range(32)]
    alone = [np.asarray(embed(embedder, t)["data"][0]["embedding"]) for t in texts[:8]]
    together = embed(embedder, texts)["data"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        concurrent_ones = list(pool.map(lambda t: embed(embedder, t)["data"][0]["embedding"], texts[:8]))
    for i in range(8):
        assert np.max(np.abs(np.asarray(together[i]["embedding"]) - alone[i])) < (MAX_ABS if EMULATED_GPU else 1e-5)
        assert np.max(np.abs(np.asarray(concurrent_ones[i]) - alone[i])) < (MAX_ABS if EMULATED_GPU else 1e-5)


def test_context_is_the_learned_positions(embedder):
    assert embed(embedder, [5] * CONTEXT)["usage"]["prompt_tokens"] == CONTEXT
    r = requests.post(embedder.url + "/v1/embeddings", json={"input": [[5] * 3, [5] * (CONTEXT + 1)]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[1]", r.text
    assert embed(embedder, [[7] * 200], truncate_prompt_tokens=20)["usage"]["prompt_tokens"] == 20
    assert health_ok(embedder.url)


def test_an_input_runs_whole_in_one_step():
    """Every token attends to every other, so an input is never split across steps: the context is
    cut to engine.max_num_batched_tokens, and inputs up to it are exact."""
    settings = {**BASE, "model.role": "embed", "model.name": "emb", "engine.max_num_batched_tokens": 16}
    with Server(settings=settings, model=EMBED) as s:
        s.wait_ready()
        long = [ids for ids in GOLDEN_EMBED["ids"] if len(ids) > 16]
        fits = [(ids, e) for ids, e in zip(GOLDEN_EMBED["ids"], GOLDEN_EMBED["embeddings"]) if len(ids) <= 16]
        assert long and fits
        r = requests.post(s.url + "/v1/embeddings", json={"input": long[0]})
        assert r.status_code == 400 and "16" in r.json()["error"]["message"], r.text
        got = embed(s, [ids for ids, _ in fits])["data"]
        for d, (_, want) in zip(got, fits):
            check_vector(d["embedding"], want)


def test_rerank_scores_equal_transformers(reranker):
    for c in GOLDEN_RERANK["cases"]:
        r = requests.post(reranker.url + "/v1/rerank", json={"model": "rr", "query": c["query"], "documents": [c["document"]]})
        assert r.status_code == 200, r.text
        got = r.json()["results"][0]["relevance_score"]
        assert abs(got - c["score"]) < SCORE_TOL, (got, c["score"])
        assert r.json()["usage"]["prompt_tokens"] == len(c["ids"])


def test_rerank_sorts_a_batch_and_score_pairs(reranker):
    cases = GOLDEN_RERANK["cases"]
    query = cases[0]["query"]
    same = [c for c in cases if c["query"] == query]
    r = requests.post(reranker.url + "/rerank", json={"query": query, "documents": [{"text": c["document"]} for c in same],
                                                       "top_n": len(same)})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["relevance_score"] for x in results] == sorted((x["relevance_score"] for x in results), reverse=True)
    for x in results:
        assert abs(x["relevance_score"] - same[x["index"]]["score"]) < SCORE_TOL
    r = requests.post(reranker.url + "/v1/score", json={"text_1": [c["query"] for c in cases],
                                                         "text_2": [c["document"] for c in cases]})
    assert r.status_code == 200, r.text
    for d, c in zip(r.json()["data"], cases):
        assert abs(d["score"] - c["score"]) < SCORE_TOL


def test_hostile_rerank_requests(reranker):
    for body, param in [({"query": "q", "documents": ["a", "long " * 200]}, "documents[1]"),
                        ({"query": "q", "documents": [[1]]}, "documents[0]"),
                        ({"query": "q", "documents": []}, "documents")]:
        r = requests.post(reranker.url + "/v1/rerank", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    r = requests.post(reranker.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400, r.text
    assert health_ok(reranker.url)


def test_an_encoder_is_not_a_chat_model():
    check_refuses(EMBED, "encoder", "role")
