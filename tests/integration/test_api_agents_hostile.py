"""Hostile input on the agents' routes (/v1/responses, /v1/messages, count_tokens): each case
gets a 4xx in that API's error shape naming the problem, and the server keeps serving. A
client that disconnects mid-stream (or mid-request) on either route frees its KV blocks."""
import json

import pytest
import requests

from conftest import metrics, model_id, wait_engine_idle
from test_api_load import open_request

MODEL = model_id()
RESP = "/v1/responses"
MSGS = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
USER = [{"role": "user", "content": "hi"}]
DEEP = "[" * 100000 + "]" * 100000


def resp(**fields):
    return json.dumps({"model": MODEL, "input": "hi", "max_output_tokens": 2, **fields})


def msgs(**fields):
    return json.dumps({"model": MODEL, "max_tokens": 2, "messages": USER, **fields})


# (case id, path, body, status, OpenAI error param (Responses only) or None, message text)
CASES = [
    ("resp-input-number", RESP, resp(input=5), 400, "input", "string or an array"),
    ("resp-input-missing", RESP, json.dumps({"model": MODEL}), 400, "input", "required"),
    ("resp-input-empty", RESP, resp(input=[]), 400, "input", "at least one"),
    ("resp-10k-items", RESP, resp(input=[{"role": "user", "content": "x"}] * 10000), 400, "input", "at most"),
    ("resp-deep-nesting", RESP, '{"input": ' + DEEP + "}", 400, None, "deeper"),
    ("resp-item-not-object", RESP, resp(input=["hi"]), 400, "input", "object"),
    ("resp-item-unknown-type", RESP, resp(input=[{"type": "computer_call"}]), 400, "input", "not supported"),
    ("resp-image-part", RESP, resp(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
     400, "input", "text only"),
    ("resp-bad-role", RESP, resp(input=[{"role": "tool", "content": "x"}]), 400, "input", "role"),
    ("resp-unknown-call-id", RESP, resp(input=[{"role": "user", "content": "x"},
                                               {"type": "function_call_output", "call_id": "call_x", "output": "1"}]),
     400, "input", "call_x"),
    ("resp-function-call-args-object", RESP, resp(input=[{"type": "function_call", "call_id": "c", "name": "f",
                                                          "arguments": {"a": 1}}]), 400, "input", "arguments"),
    ("resp-previous-unknown", RESP, resp(previous_response_id="resp_does_not_exist"), 404, "previous_response_id",
     "resp_does_not_exist"),
    ("resp-previous-number", RESP, resp(previous_response_id=5), 400, "previous_response_id", "string"),
    ("resp-temperature-string", RESP, resp(temperature="hot"), 400, "temperature", "number"),
    ("resp-top-p-zero", RESP, resp(top_p=0), 400, "top_p", "(0, 1]"),
    ("resp-max-output-string", RESP, resp(max_output_tokens="9"), 400, "max_output_tokens", "integer"),
    ("resp-max-output-zero", RESP, resp(max_output_tokens=0), 400, "max_tokens", "[1,"),
    ("resp-over-context", RESP, resp(max_output_tokens=100000), 400, "max_tokens", "maximum context length"),
    ("resp-web-search-tool", RESP, resp(tools=[{"type": "web_search"}]), 400, "tools", "function tools only"),
    ("resp-tool-no-name", RESP, resp(tools=[{"type": "function"}]), 400, "tools", "name"),
    ("resp-tool-choice-unknown", RESP, resp(tools=[{"type": "function", "name": "a"}],
                                            tool_choice={"type": "function", "name": "b"}), 400, "tool_choice",
     "not among"),
    ("resp-json-schema-without-schema", RESP, resp(text={"format": {"type": "json_schema", "name": "x"}}), 400,
     "text.format", "needs a 'schema'"),
    ("resp-format-unknown-type", RESP, resp(text={"format": {"type": "yaml"}}), 400, "text.format", "json_schema"),
    ("resp-reasoning-effort", RESP, resp(reasoning={"effort": "extreme"}), 400, "reasoning", "effort"),
    ("resp-store-string", RESP, resp(store="yes"), 400, "store", "true or false"),
    ("resp-stream-string", RESP, resp(stream="true"), 400, "stream", "true or false"),
    ("resp-background", RESP, resp(background=True), 400, "background", "not supported"),
    ("resp-unknown-model", RESP, resp(model="gpt-5"), 404, "model", "does not exist"),
    ("msgs-no-max-tokens", MSGS, json.dumps({"model": MODEL, "messages": USER}), 400, None, "'max_tokens' is required"),
    ("msgs-max-tokens-string", MSGS, msgs(max_tokens="5"), 400, None, "integer"),
    ("msgs-max-tokens-zero", MSGS, msgs(max_tokens=0), 400, None, "[1,"),
    ("msgs-over-context", MSGS, msgs(max_tokens=100000), 400, None, "maximum context length"),
    ("msgs-messages-object", MSGS, msgs(messages={"role": "user"}), 400, None, "array"),
    ("msgs-messages-empty", MSGS, msgs(messages=[]), 400, None, "at least one"),
    ("msgs-10k-messages", MSGS, msgs(messages=USER * 10000), 400, None, "at most"),
    ("msgs-deep-nesting", MSGS, '{"max_tokens": 2, "messages": ' + DEEP + "}", 400, None, "deeper"),
    ("msgs-bad-role", MSGS, msgs(messages=[{"role": "system", "content": "x"}]), 400, None, "user or assistant"),
    ("msgs-content-number", MSGS, msgs(messages=[{"role": "user", "content": 5}]), 400, None, "content"),
    ("msgs-image-block", MSGS, msgs(messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}]), 400, None, "not supported"),
    ("msgs-unknown-tool-result", MSGS, msgs(messages=[{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_nope", "content": "1"}]}]), 400, None, "toolu_nope"),
    ("msgs-tool-use-input-string", MSGS, msgs(messages=[{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", "input": "{}"}]}]), 400, None, "input"),
    ("msgs-tool-without-schema", MSGS, msgs(tools=[{"name": "f"}]), 400, None, "input_schema"),
    ("msgs-server-tool", MSGS, msgs(tools=[{"type": "web_search_20250305", "name": "web_search"}]), 400, None,
     "client tools"),
    ("msgs-tool-choice-bad", MSGS, msgs(tool_choice={"type": "sometimes"}), 400, None, "auto, any, tool or none"),
    ("msgs-tool-choice-unknown", MSGS, msgs(tools=[{"name": "a", "input_schema": {"type": "object"}}],
                                            tool_choice={"type": "tool", "name": "b"}), 400, None, "not among"),
    ("msgs-stop-10k", MSGS, msgs(stop_sequences=[f"s{i}" for i in range(10000)]), 400, None, "stop_sequences"),
    ("msgs-stop-empty", MSGS, msgs(stop_sequences=[""]), 400, None, "empty"),
    ("msgs-temperature-nan", MSGS, '{"max_tokens": 2, "messages": [], "temperature": NaN}', 400, None,
     "not valid JSON"),
    ("msgs-temperature-string", MSGS, msgs(temperature="hot"), 400, None, "number"),
    ("msgs-top-k-below", MSGS, msgs(top_k=-2), 400, None, "top_k"),
    ("msgs-thinking-bad", MSGS, msgs(thinking={"type": "maybe"}), 400, None, "thinking"),
    ("msgs-system-number", MSGS, msgs(system=5), 400, None, "system"),
    ("msgs-output-format-without-schema", MSGS, msgs(output_config={"format": {"type": "json_schema"}}), 400,
     None, "needs a 'schema'"),
    ("msgs-output-config-string", MSGS, msgs(output_config="json"), 400, None, "output_config"),
    ("msgs-unknown-model", MSGS, msgs(model="claude-unknown"), 404, None, "claude-unknown"),
    ("msgs-not-json", MSGS, '{"messages": [', 400, None, "not valid JSON"),
    ("count-messages-number", COUNT, json.dumps({"model": MODEL, "messages": 5}), 400, None, "array"),
    ("count-unknown-tool-result", COUNT, json.dumps({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "nope", "content": "1"}]}]}), 400, None, "nope"),
    # Accepted.
    ("resp-unknown-fields-ignored", RESP, resp(frobnicate=[1], metadata={"a": "b"}, include=[]), 200, None, None),
    ("msgs-unknown-fields-ignored", MSGS, msgs(frobnicate=[1], metadata={"user_id": "u"}), 200, None, None),
    ("count-needs-no-max-tokens", COUNT, json.dumps({"model": MODEL, "messages": USER}), 200, None, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_case(api_server, case):
    name, path, body, status, param, text = case
    r = requests.post(api_server.url + path, data=body.encode("utf-8"),
                      headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == status, r.text[:500]
    if status == 200:
        assert r.json()
    elif path == RESP:
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["type"]
        assert err["param"] == param, err
        assert text in err["message"], err["message"]
    else:
        body = r.json()
        assert set(body) == {"type", "error"} and body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
        expected_type = {400: "invalid_request_error", 404: "not_found_error"}[status]
        assert body["error"]["type"] == expected_type, body
        assert text in body["error"]["message"], body
    assert requests.get(api_server.url + "/health", timeout=5).status_code == 200


def test_anthropic_shape_for_errors_outside_the_handler(api_server):
    r = requests.get(api_server.url + MSGS, timeout=10)
    assert r.status_code == 405 and r.json()["type"] == "error"
    r = requests.post(api_server.url + MSGS, headers={"Content-Length": str(10 ** 10)}, timeout=10)
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"


LONG_RESP = {"model": MODEL, "input": "Count from one to a thousand:", "max_output_tokens": 300, "temperature": 0,
             "ignore_eos": True}
LONG_MSGS = {"model": MODEL, "messages": [{"role": "user", "content": "Count from one to a thousand:"}],
             "max_tokens": 300, "temperature": 0, "ignore_eos": True}


@pytest.mark.parametrize("path,body", [(RESP, LONG_RESP), (MSGS, LONG_MSGS)], ids=["responses", "messages"])
def test_disconnect_mid_stream_frees_the_kv_blocks(api_server, path, body):
    wait_engine_idle(api_server.url)
    before = metrics(api_server.url)["vllm:generation_tokens_total"]
    s = open_request(api_server.url, path, {**body, "stream": True})
    got = b""
    while got.count(b"delta\ndata: ") < 3:  # three text delta events arrived: the request is decoding
        chunk = s.recv(4096)
        assert chunk, got[-500:]
        got += chunk
    s.close()
    after = wait_engine_idle(api_server.url)  # no running request and no KV block in use
    generated = after["vllm:generation_tokens_total"] - before
    print(f"{path}: stream closed after 3 deltas, {generated:.0f} of 300 tokens generated")
    assert generated < 300


def test_disconnect_while_waiting_for_a_whole_answer(api_server):
    wait_engine_idle(api_server.url)
    before = metrics(api_server.url)["vllm:generation_tokens_total"]
    s = open_request(api_server.url, MSGS, LONG_MSGS)
    for _ in range(1000):  # bounded: until the request is decoding
        m = metrics(api_server.url)
        if m["vllm:num_requests_running"] == 1 and m["vllm:generation_tokens_total"] > before:
            break
    s.close()
    after = wait_engine_idle(api_server.url)
    assert after["vllm:generation_tokens_total"] - before < 300
