"""Embedders and rerankers served over HTTP ([model] role = "embed" / "rerank"), checked against
Hugging Face transformers and driven by real clients.

The tiny Qwen3-Embedding-style embedder and Qwen3-Reranker-style reranker of tests/golden/models
(tests/gen/gen_pooling_models.py) carry their golden outputs: transformers' last-token embeddings
(L2-normalised) of six texts, and P(yes) of five query-document pairs in Qwen3-Reranker's prompt.
The same models as GGUF files (tests/gen/gguf_pooling.py, written here as llama.cpp's converter
writes them) must give the same numbers. On the emulated CUDA server (cuda_path) the limits are
BF16's.
"""
import base64
import concurrent.futures
import json

import numpy as np
import openai
import pytest
import requests

from conftest import EMULATED_GPU, REPO, check_embedding, health_ok, pooled_server
from gguf_pooling import write_pooling_gguf

pytestmark = pytest.mark.cuda_path

MODELS = REPO / "tests" / "golden" / "models"
EMBED = MODELS / "qwen3_embed"
RERANK = MODELS / "qwen3_rerank"
GOLDEN_EMBED = json.loads((EMBED / "golden.json").read_text())
GOLDEN_RERANK = json.loads((RERANK / "golden.json").read_text())
# f32 on the CPU; the CUDA backend runs Qwen in BF16 (measured on the emulator: cosine 0.99999,
# 1.8e-3 largest difference in a unit vector, 1.3e-3 in a score).
COSINE = 0.9999 if EMULATED_GPU else 0.99999
MAX_ABS = 5e-3 if EMULATED_GPU else 1e-4
SCORE_TOL = 5e-3 if EMULATED_GPU else 1e-4
SETTINGS = {"model.max_model_len": 512, "engine.max_num_seqs": 16}


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pooling-gguf")
    write_pooling_gguf(str(EMBED), str(d / "embed.gguf"), rerank=False)
    write_pooling_gguf(str(RERANK), str(d / "rerank.gguf"), rerank=True)
    return d


@pytest.fixture(scope="module", params=["hf", "gguf"])
def embedder(request, ggufs):
    path = EMBED if request.param == "hf" else ggufs / "embed.gguf"
    with pooled_server(request.param, path, "embed", "emb", SETTINGS) as s:
        yield s


@pytest.fixture(scope="module", params=["hf", "gguf"])
def reranker(request, ggufs):
    path = RERANK if request.param == "hf" else ggufs / "rerank.gguf"
    with pooled_server(request.param, path, "rerank", "rr", SETTINGS) as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def check_vector(got, want):
    check_embedding(got, want, COSINE, MAX_ABS)


def test_embeddings_equal_transformers(embedder):
    # The SDK asks for base64 unless told otherwise, and decodes it.
    r = client(embedder).embeddings.create(model="emb", input=GOLDEN_EMBED["texts"])
    assert [d.index for d in r.data] == list(range(len(GOLDEN_EMBED["texts"])))
    for d, want in zip(r.data, GOLDEN_EMBED["embeddings"]):
        check_vector(d.embedding, want)
    assert r.usage.prompt_tokens == sum(len(i) for i in GOLDEN_EMBED["ids"])
    assert r.usage.total_tokens == r.usage.prompt_tokens


def test_embeddings_floats_base64_and_token_ids_agree(embedder):
    c = client(embedder)
    floats = c.embeddings.create(model="emb", input=GOLDEN_EMBED["texts"][:3], encoding_format="float")
    raw = c.embeddings.create(model="emb", input=GOLDEN_EMBED["texts"][:3], encoding_format="base64")
    ids = c.embeddings.create(model="emb", input=GOLDEN_EMBED["ids"][:3])
    for f, b, i, want in zip(floats.data, raw.data, ids.data, GOLDEN_EMBED["embeddings"]):
        decoded = np.frombuffer(base64.b64decode(b.embedding), dtype="<f4")
        assert np.array_equal(decoded, np.asarray(f.embedding, dtype=np.float32))
        check_vector(i.embedding, want)
    one = c.embeddings.create(model="emb", input=GOLDEN_EMBED["ids"][4])  # a single list of ids
    check_vector(one.data[0].embedding, GOLDEN_EMBED["embeddings"][4])


@pytest.mark.parametrize("dims", [1, 8, 32])
def test_dimensions_truncate_and_renormalise(embedder, dims):
    r = client(embedder).embeddings.create(model="emb", input=GOLDEN_EMBED["texts"][0], dimensions=dims)
    want = np.asarray(GOLDEN_EMBED["embeddings"][0][:dims])
    check_vector(r.data[0].embedding, want / np.linalg.norm(want))


def test_langchain_openai_embeddings(embedder):
    from langchain_openai import OpenAIEmbeddings
    # check_embedding_ctx_length=False: send the texts (LangChain would otherwise tokenize them
    # with OpenAI's tiktoken vocabulary, which is not this model's).
    emb = OpenAIEmbeddings(model="emb", base_url=embedder.url + "/v1", api_key="none", check_embedding_ctx_length=False)
    docs = emb.embed_documents(GOLDEN_EMBED["texts"][:2])
    query = emb.embed_query(GOLDEN_EMBED["texts"][2])
    for got, want in zip(docs + [query], GOLDEN_EMBED["embeddings"][:3]):
        check_vector(got, want)


def test_embeddings_alone_equal_embeddings_in_a_batch(embedder):
    """Each input embedded alone equals the same input among 31 others sent at once."""
    texts = [GOLDEN_EMBED["texts"][i % 6] + " " * (i // 6) for i in range(32)]
    c = client(embedder)
    alone = [np.asarray(c.embeddings.create(model="emb", input=t, encoding_format="float").data[0].embedding)
             for t in texts[:6]]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda t: c.embeddings.create(model="emb", input=t, encoding_format="float"), texts))
    for i in range(6):
        assert np.max(np.abs(np.asarray(together[i].data[0].embedding) - alone[i])) < (MAX_ABS if EMULATED_GPU else 1e-5)


def test_context_boundary(embedder):
    url = embedder.url + "/v1/embeddings"
    assert requests.post(url, json={"input": [5] * 512}).status_code == 200  # fills the context exactly
    r = requests.post(url, json={"input": [[5] * 3, [5] * 513]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[1]", r.text
    r = requests.post(url, json={"input": [[7] * 600], "truncate_prompt_tokens": 100, "encoding_format": "float"})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 100, r.text


HOSTILE_EMBED = [
    ({}, "input"),
    ({"input": []}, "input"),
    ({"input": ""}, "input"),
    ({"input": ["a", ""]}, "input"),
    ({"input": ["a"] * 10000}, "input"),
    ({"input": [[1, "a"]]}, "input[0]"),
    ({"input": [["a"]]}, "input[0]"),
    ({"input": ["a", [1]]}, "input"),
    ({"input": [[]]}, "input"),
    ({"input": [99999]}, "input"),
    ({"input": [[1], [-1]]}, "input[1]"),
    ({"input": {"text": "a"}}, "input"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a", "dimensions": 0}, "dimensions"),
    ({"input": "a", "dimensions": 65}, "dimensions"),
    ({"input": "a", "dimensions": "8"}, "dimensions"),
    ({"input": "a", "truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    ({"input": "a", "model": "other"}, "model"),
]


@pytest.mark.parametrize("body,param", HOSTILE_EMBED, ids=[str(i) for i in range(len(HOSTILE_EMBED))])
def test_hostile_embedding_requests(embedder, body, param):
    r = requests.post(embedder.url + "/v1/embeddings", json=body)
    assert r.status_code in (400, 404), r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert health_ok(embedder.url)


def test_an_embedder_answers_only_its_routes(embedder):
    r = requests.post(embedder.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "embedder" in r.json()["error"]["message"], r.text
    r = requests.post(embedder.url + "/v1/rerank", json={"query": "a", "documents": ["b"]})
    assert r.status_code == 400 and "/v1/embeddings" in r.json()["error"]["message"], r.text
    assert requests.get(embedder.url + "/v1/models").json()["data"][0]["id"] == "emb"


def golden_cases(server):
    # The GGUF's template has the default instruction baked in, as llama.cpp writes it.
    cases = GOLDEN_RERANK["cases"]
    return [c for c in cases if c["instruction"].startswith("Given a web search")] if server.kind == "gguf" else cases


def test_rerank_scores_equal_transformers(reranker):
    for c in golden_cases(reranker):
        body = {"model": "rr", "query": c["query"], "documents": [c["document"]]}
        if reranker.kind == "hf":
            body["instruction"] = c["instruction"]
        r = requests.post(reranker.url + "/v1/rerank", json=body)
        assert r.status_code == 200, r.text
        got = r.json()["results"][0]["relevance_score"]
        assert abs(got - c["score"]) < SCORE_TOL, (got, c["score"])
        assert r.json()["usage"]["prompt_tokens"] == len(c["ids"])


def test_rerank_as_rag_clients_send_it(reranker):
    """Cohere- and Jina-style bodies (LangChain's and LlamaIndex's rerankers send these): documents as
    strings or {"text": ...}, top_n, return_documents; results sorted by score."""
    docs = [c["document"] for c in GOLDEN_RERANK["cases"][:3]]
    query = GOLDEN_RERANK["cases"][0]["query"]
    for path in ("/v1/rerank", "/rerank"):
        r = requests.post(reranker.url + path, json={"model": "rr", "query": query, "documents": [{"text": d} for d in docs],
                                                      "top_n": 2, "return_documents": False})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert len(results) == 2 and all("document" not in x for x in results)
        full = requests.post(reranker.url + path, json={"query": query, "documents": docs}).json()["results"]
        assert [x["relevance_score"] for x in full] == sorted((x["relevance_score"] for x in full), reverse=True)
        assert sorted(x["index"] for x in full) == [0, 1, 2]
        assert all(x["document"]["text"] == docs[x["index"]] for x in full)
        assert [x["index"] for x in results] == [x["index"] for x in full[:2]]


def test_score_pairs(reranker):
    cases = golden_cases(reranker)[:3]
    r = requests.post(reranker.url + "/v1/score", json={"model": "rr", "text_1": cases[0]["query"],
                                                         "text_2": [c["document"] for c in cases]})
    assert r.status_code == 200, r.text
    got = r.json()["data"]
    same_query = [c for c in GOLDEN_RERANK["cases"] if c["query"] == cases[0]["query"]]
    assert [d["index"] for d in got] == [0, 1, 2]
    for d, c in zip(got, cases):
        if c in same_query and (reranker.kind == "gguf" or c["instruction"].startswith("Given a web search")):
            assert abs(d["score"] - c["score"]) < SCORE_TOL
    r = requests.post(reranker.url + "/v1/score", json={"text_1": [c["query"] for c in cases],
                                                         "text_2": [c["document"] for c in cases]})
    for d, c in zip(r.json()["data"], cases):
        if c["instruction"].startswith("Given a web search"):
            assert abs(d["score"] - c["score"]) < SCORE_TOL


HOSTILE_RERANK = [
    ("/v1/rerank", {"documents": ["a"]}, "query"),
    ("/v1/rerank", {"query": "q"}, "documents"),
    ("/v1/rerank", {"query": "q", "documents": []}, "documents"),
    ("/v1/rerank", {"query": "q", "documents": "a"}, "documents"),
    ("/v1/rerank", {"query": "q", "documents": [1]}, "documents[0]"),
    ("/v1/rerank", {"query": "q", "documents": [{"txt": "a"}]}, "documents[0]"),
    ("/v1/rerank", {"query": "q", "documents": ["a"] * 10000}, "documents"),
    ("/v1/rerank", {"query": "q", "documents": ["a", "long " * 600]}, "documents[1]"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": -1}, "top_n"),
    ("/v1/rerank", {"query": ["q"], "documents": ["a"]}, "query"),
    ("/v1/score", {"text_1": ["a", "b"], "text_2": ["a", "b", "c"]}, "text_2"),
    ("/v1/score", {"text_1": "a"}, "text_2"),
    ("/v1/embeddings", {"input": "a"}, "model"),
]


@pytest.mark.parametrize("path,body,param", HOSTILE_RERANK, ids=[str(i) for i in range(len(HOSTILE_RERANK))])
def test_hostile_rerank_requests(reranker, path, body, param):
    r = requests.post(reranker.url + path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()
    assert health_ok(reranker.url)


def test_long_documents_are_truncated_when_asked(reranker):
    r = requests.post(reranker.url + "/v1/rerank", json={"query": "q", "documents": ["long " * 600],
                                                          "truncate_prompt_tokens": 512})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 512, r.text
