"""The agent frameworks and gateways people put in front of an inference server, from PyPI
(pinned in tests/requirements.txt), each driven through a multi-turn conversation against the
real server: LiteLLM (chat, streaming, tools, json_schema, async concurrency, its Anthropic
route), the OpenAI Agents SDK (tool loops on its Responses and its chat-completions model, a
streamed run), pydantic-ai (tool and native structured output), LangChain's ChatOpenAI with
bound tools, the anthropic SDK's tool-use loop and the openai SDK's chat.completions.parse.

Every test runs twice: on SmolLM2 with its own chat template (which concatenates
message['content'], so a tool-call message sent with "content": null or without content
must be normalised before the template sees it), and on SmolLM2's weights with Qwen3's chat
template (tests/fixtures/tokenizers/qwen3; Hermes <tool_call> blocks, <think> handling,
thinking switched off per request as Qwen3 users do; the tiny Qwen3 checkpoints of
tests/golden/models have a 256-token vocabulary that cannot spell the template). Tool calls
are forced with tool_choice (the tiny model would not call on its own), sampling is greedy
and outputs short. No client may reach anything but 127.0.0.1: telemetry is off, and a
connection elsewhere raises and fails the server fixture.
"""
import asyncio
import json
import os
import signal
import socket
import subprocess

# Before the clients are imported: no telemetry, tracing, cost-map or price downloads.
for _name, _value in {"OPENAI_AGENTS_DISABLE_TRACING": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                      "LITELLM_TELEMETRY": "False", "LANGCHAIN_TRACING_V2": "false", "LANGSMITH_TRACING": "false",
                      "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "LOGFIRE_IGNORE_NO_CONFIG": "1"}.items():
    os.environ[_name] = _value

_real_connect, _real_connect_ex = socket.socket.connect, socket.socket.connect_ex
_elsewhere = []  # the addresses a client tried to reach beyond loopback (the fixture fails on any)


def _loopback_only(address):
    if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
        _elsewhere.append(address)
        raise ConnectionRefusedError(f"test_real_clients: a client tried to reach {address!r}")


def _guarded_connect(self, address):
    _loopback_only(address)
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    _loopback_only(address)
    return _real_connect_ex(self, address)


def _guard(on):
    socket.socket.connect = _guarded_connect if on else _real_connect
    socket.socket.connect_ex = _guarded_connect_ex if on else _real_connect_ex


import anthropic
import jsonschema
import openai
import pytest
from openai.types.responses import ResponseTextDeltaEvent
from pydantic import BaseModel, Field, HttpUrl

from conftest import API_SETTINGS, FIXTURES, Server, model_id

litellm = langchain_tool = None  # and the other frameworks: imported by import_frameworks()
# pydantic warns about ReadOnly TypedDict items while LiteLLM builds its models.
pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")


def import_frameworks():
    """The frameworks' imports take seconds (LiteLLM most), so they happen once the first test
    here runs, not whenever tests/integration is collected; under the guard, so an import that
    phones home fails."""
    global litellm, Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
    global HumanMessage, SystemMessage, ToolMessage, langchain_tool, ChatOpenAI
    global PydanticAgent, NativeOutput, ToolOutput, RetryPromptPart, OpenAIChatModel, OpenAIProvider
    if litellm is not None:
        return
    import litellm as _litellm
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                        function_tool, set_tracing_disabled)
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool as langchain_tool
    from langchain_openai import ChatOpenAI
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai import NativeOutput, ToolOutput
    from pydantic_ai.messages import RetryPromptPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    set_tracing_disabled(True)
    _litellm.telemetry = False
    _litellm.suppress_debug_info = True
    litellm = _litellm


MODEL_ID = model_id()
MAX_TOKENS = 32  # a forced call fits (constrained outputs finish within it)
OBJECT_TOKENS = 100  # a City or a Site object fits
ANSWER_TOKENS = 16
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                  "required": ["city"], "additionalProperties": False}
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                                 "parameters": WEATHER_SCHEMA}}
FORCE_WEATHER = {"type": "function", "function": {"name": "get_weather"}}


def weather(city):
    return f"Sunny and 21 C in {city}."


class City(BaseModel):
    name: str = Field(max_length=20)
    country: str = Field(max_length=20)
    population: int = Field(ge=0, le=50_000_000)


class Site(BaseModel):
    """pydantic writes HttpUrl as {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083}."""
    name: str = Field(max_length=20)
    url: HttpUrl


class Served:
    """One server and what a client sends to it: the OpenAI base URL, and the fields that turn
    thinking off on the Qwen3 template (none on SmolLM2's)."""

    def __init__(self, kind, server):
        self.kind, self.server = kind, server
        self.url, self.v1 = server.url, server.url + "/v1"
        qwen = kind == "qwen3"
        self.extra_body = {"chat_template_kwargs": {"enable_thinking": False}} if qwen else {}
        self.thinking = {"thinking": {"type": "disabled"}} if qwen else {}

    def openai(self):
        return openai.OpenAI(base_url=self.v1, api_key="unused", max_retries=0, timeout=120)

    def async_openai(self):
        return openai.AsyncOpenAI(base_url=self.v1, api_key="unused", max_retries=0, timeout=120)

    def lite(self, **kw):
        """LiteLLM's OpenAI-compatible route to this server."""
        extra = {"extra_body": self.extra_body} if self.extra_body else {}
        return dict(model="openai/" + MODEL_ID, api_base=self.v1, api_key="unused", temperature=0,
                    num_retries=0, timeout=120, **extra, **kw)


@pytest.fixture(scope="module", params=["smollm2", "qwen3"])
def served(request, tmp_path_factory):
    settings = dict(API_SETTINGS, **{"model.max_model_len": 1024, "engine.max_num_seqs": 8})
    if request.param == "qwen3":
        config = json.loads((FIXTURES / "tokenizers" / "qwen3" / "tokenizer_config.json").read_text())
        template = tmp_path_factory.mktemp("qwen3-template") / "chat_template.jinja"
        template.write_text(config["chat_template"])
        settings["model.chat_template"] = str(template)
    s = Server(settings=settings).wait_ready()
    _guard(True)
    try:
        import_frameworks()
        yield Served(request.param, s)
    finally:
        _guard(False)
        # The clients' pooled keep-alive connections hold a drained server's exit for 5 s; a
        # second SIGTERM ends it at once, with status 1 (nothing is in flight by then).
        s.proc.send_signal(signal.SIGTERM)
        try:
            s.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        s.stop()
    assert not _elsewhere, f"clients tried to reach beyond 127.0.0.1 (telemetry?): {_elsewhere}"


def valid_args(arguments, schema=WEATHER_SCHEMA):
    """Tool arguments (a JSON string or an object) that parse and validate against the schema."""
    value = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(value, schema)
    return value


# ---- LiteLLM ----------------------------------------------------------------------------

def test_litellm_chat_two_turns_and_streaming(served):
    messages = [{"role": "user", "content": "Say hello to Ada."}]
    first = litellm.completion(messages=messages, **served.lite(max_tokens=ANSWER_TOKENS))
    assert first.choices[0].message.content.strip(), first
    assert 0 < first.usage.completion_tokens <= ANSWER_TOKENS
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Now say goodbye to her."}]
    second = litellm.completion(messages=messages, **served.lite(max_tokens=ANSWER_TOKENS))
    whole = second.choices[0].message.content
    assert whole.strip() and second.usage.prompt_tokens > first.usage.prompt_tokens
    # The same greedy turn streamed: the pieces assemble into the whole answer.
    chunks = list(litellm.completion(messages=messages, stream=True, **served.lite(max_tokens=ANSWER_TOKENS)))
    assert len(chunks) > 2
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_litellm_forced_tool_call_then_answer(served):
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    r = litellm.completion(messages=messages, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER,
                           **served.lite(max_tokens=MAX_TOKENS))
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and message.tool_calls, r
    call = message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id
    args = valid_args(call.function.arguments)
    messages.append(message)  # as LiteLLM's docs do: the response message itself
    messages.append({"role": "tool", "tool_call_id": call.id, "name": "get_weather", "content": weather(args["city"])})
    answer = litellm.completion(messages=messages, tools=[WEATHER_TOOL], **served.lite(max_tokens=ANSWER_TOKENS))
    assert answer.choices[0].message.content.strip() and not answer.choices[0].message.tool_calls, answer


def test_litellm_json_schema_two_turns(served):
    messages = [{"role": "user", "content": "Describe Paris as JSON."}]
    r = litellm.completion(messages=messages, response_format=City, **served.lite(max_tokens=OBJECT_TOKENS))
    paris = City.model_validate_json(r.choices[0].message.content)
    messages += [{"role": "assistant", "content": r.choices[0].message.content},
                 {"role": "user", "content": "Now Rome."}]
    r2 = litellm.completion(messages=messages, response_format={
        "type": "json_schema", "json_schema": {"name": "city", "schema": City.model_json_schema(), "strict": True}},
        **served.lite(max_tokens=OBJECT_TOKENS))
    assert isinstance(City.model_validate_json(r2.choices[0].message.content), City) and paris.name


def test_litellm_async_concurrency(served):
    prompts = ["Name a color.", "Name a fruit.", "Name a color.", "Name a fruit."]

    async def all_at_once():
        return await asyncio.gather(*[
            litellm.acompletion(messages=[{"role": "user", "content": p}], **served.lite(max_tokens=8))
            for p in prompts])

    results = asyncio.run(all_at_once())
    texts = [r.choices[0].message.content for r in results]
    assert all(t.strip() for t in texts), texts
    assert len({r.id for r in results}) == 4
    # Greedy and batch invariant: the same prompt gives the same answer beside others.
    assert texts[0] == texts[2] and texts[1] == texts[3], texts


def test_litellm_anthropic_route_tool_loop(served):
    lite = dict(model="anthropic/" + MODEL_ID, api_base=served.url, api_key="unused", temperature=0,
                num_retries=0, timeout=120, **served.thinking)
    if served.thinking:  # LiteLLM passes `thinking` on only for the models it knows unless allowed
        lite["allowed_openai_params"] = ["thinking"]
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    r = litellm.completion(messages=messages, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER,
                           max_tokens=MAX_TOKENS, **lite)
    message = r.choices[0].message
    assert message.tool_calls and message.tool_calls[0].function.name == "get_weather", r
    call = message.tool_calls[0]
    args = valid_args(call.function.arguments)
    messages += [message, {"role": "tool", "tool_call_id": call.id, "content": weather(args["city"])}]
    answer = litellm.completion(messages=messages, tools=[WEATHER_TOOL], max_tokens=ANSWER_TOKENS, **lite)
    assert answer.choices[0].message.content.strip(), answer
    assert answer.choices[0].finish_reason in ("stop", "length")


# ---- OpenAI Agents SDK ------------------------------------------------------------------

def agents_model(served, kind):
    client = served.async_openai()
    if kind == "responses":
        return OpenAIResponsesModel(model=MODEL_ID, openai_client=client)
    return OpenAIChatCompletionsModel(model=MODEL_ID, openai_client=client)


def weather_agent(served, kind, cities):
    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        cities.append(city)
        return weather(city)

    # Forced on each run's first turn; the SDK resets tool_choice after a call (reset_tool_choice).
    settings = ModelSettings(tool_choice="get_weather", temperature=0, max_tokens=MAX_TOKENS,
                             extra_body=served.extra_body or None)
    return Agent(name="weather", instructions="You are a helpful assistant.", tools=[get_weather],
                 model=agents_model(served, kind), model_settings=settings)


def tool_items(result):
    return [i for i in result.new_items if i.type == "tool_call_item"]


@pytest.mark.parametrize("kind", ["responses", "chat_completions"])
def test_openai_agents_tool_loop_then_streamed_run(served, kind):
    cities = []
    agent = weather_agent(served, kind, cities)

    async def two_runs():  # one event loop: the client's connections belong to it
        first = await Runner.run(agent, "What is the weather in Oslo?", max_turns=4)
        assert len(cities) == 1 and cities[0].strip(), cities
        assert len(tool_items(first)) == 1
        assert isinstance(first.final_output, str) and first.final_output.strip(), first.new_items
        # A second user turn, streamed, on the whole history (the first run's call and its output).
        history = first.to_input_list() + [{"role": "user", "content": "And in Bergen?"}]
        second = Runner.run_streamed(agent, history, max_turns=4)
        deltas, tool_events = [], 0
        async for event in second.stream_events():
            if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
                deltas.append(event.data.delta)
            elif event.type == "run_item_stream_event" and event.name == "tool_called":
                tool_events += 1
        return second, deltas, tool_events

    second, deltas, tool_events = asyncio.run(two_runs())
    assert len(cities) == 2 and tool_events == 1 and len(tool_items(second)) == 1
    assert isinstance(second.final_output, str) and second.final_output.strip(), second.new_items
    # The streamed pieces assemble into the final answer.
    assert len(deltas) > 1 and "".join(deltas) == second.final_output


# ---- pydantic-ai ------------------------------------------------------------------------

def pydantic_agent(served, output_type):
    model = OpenAIChatModel(MODEL_ID, provider=OpenAIProvider(base_url=served.v1, api_key="unused"))
    settings = {"temperature": 0, "max_tokens": OBJECT_TOKENS}
    if served.extra_body:
        settings["extra_body"] = served.extra_body
    return PydanticAgent(model, output_type=output_type, model_settings=settings, retries=0)


def no_retries(result):
    return not [p for m in result.all_messages() for p in getattr(m, "parts", []) if isinstance(p, RetryPromptPart)]


@pytest.mark.parametrize("output", ["tool", "native"])
def test_pydantic_ai_structured_output_two_runs(served, output):
    agent = pydantic_agent(served, ToolOutput(City) if output == "tool" else NativeOutput(City))
    first = agent.run_sync("Tell me about Paris.")
    assert isinstance(first.output, City) and no_retries(first)
    # The second run carries the first one's messages (for ToolOutput: its output tool call and return).
    second = agent.run_sync("Now tell me about Rome.", message_history=first.all_messages())
    assert isinstance(second.output, City) and no_retries(second)
    assert len(second.all_messages()) == len(first.all_messages()) + 2 + (output == "tool")


def test_pydantic_ai_url_field_native_output(served):
    agent = pydantic_agent(served, NativeOutput(Site))
    r = agent.run_sync("Name a website.")
    assert isinstance(r.output, Site) and r.output.url.scheme in ("http", "https") and no_retries(r)


# ---- LangChain --------------------------------------------------------------------------

def test_langchain_bind_tools_two_rounds(served):
    @langchain_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return weather(city)

    llm = ChatOpenAI(model=MODEL_ID, base_url=served.v1, api_key="unused", temperature=0, max_tokens=MAX_TOKENS,
                     max_retries=0, timeout=120, extra_body=served.extra_body or None)
    forced = llm.bind_tools([get_weather], tool_choice="get_weather")
    free = llm.bind_tools([get_weather])
    schema = get_weather.tool_call_schema.model_json_schema()
    messages = [SystemMessage("You are a helpful assistant.")]
    for question in ("What is the weather in Oslo?", "And in Bergen?"):
        messages.append(HumanMessage(question))
        ai = forced.invoke(messages)
        assert len(ai.tool_calls) == 1 and ai.tool_calls[0]["name"] == "get_weather", ai
        args = valid_args(ai.tool_calls[0]["args"], schema)
        messages += [ai, ToolMessage(get_weather.invoke(args), tool_call_id=ai.tool_calls[0]["id"])]
        answer = free.invoke(messages)  # the tool result fed back: an answer, no further call
        assert isinstance(answer.content, str) and answer.content.strip() and not answer.tool_calls, answer
        messages.append(answer)
    assert len(messages) == 9


# ---- anthropic SDK ----------------------------------------------------------------------

def test_anthropic_sdk_tool_use_loop(served):
    claude = anthropic.Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=120)
    tools = [{"name": "get_weather", "description": "The weather in a city.", "input_schema": WEATHER_SCHEMA}]
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    greedy = {"extra_body": {"temperature": 0}, **served.thinking}  # this SDK version has no temperature argument
    m = claude.messages.create(model=MODEL_ID, max_tokens=MAX_TOKENS, messages=messages, tools=tools,
                               tool_choice={"type": "tool", "name": "get_weather"}, **greedy)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather", m
    args = valid_args(uses[0].input)
    messages += [{"role": "assistant", "content": m.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                               "content": weather(args["city"])}]}]
    answer = claude.messages.create(model=MODEL_ID, max_tokens=ANSWER_TOKENS, messages=messages, tools=tools, **greedy)
    assert answer.stop_reason in ("end_turn", "max_tokens"), answer
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text.strip()


# ---- openai SDK -------------------------------------------------------------------------

def test_openai_parse_pydantic_two_turns(served):
    client = served.openai()
    messages = [{"role": "user", "content": "Describe Paris."}]
    kw = dict(model=MODEL_ID, temperature=0, max_tokens=OBJECT_TOKENS, response_format=City,
              extra_body=served.extra_body or None)
    r = client.chat.completions.parse(messages=messages, **kw)
    assert isinstance(r.choices[0].message.parsed, City), r
    messages += [{"role": "assistant", "content": r.choices[0].message.content},
                 {"role": "user", "content": "Now Rome."}]
    r2 = client.chat.completions.parse(messages=messages, **kw)
    assert isinstance(r2.choices[0].message.parsed, City), r2
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens
