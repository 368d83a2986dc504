"""A tiny OpenAI-compatible server for testing `sparkd bench`: streams known tokens at known
times and fails on request in known ways.

Every generation request (POST /v1/completions or /v1/chat/completions) takes the next
action of --script, cycling; the warm-up is the first. Actions:
  ok            stream max_tokens tokens: the first --ttft-ms after the request arrived,
                then one every --itl-ms (deadlines are absolute, so sleep jitter does not
                accumulate), finish_reason on the last, a usage chunk, then [DONE]
  400, 429, 500, 503   an OpenAI-shaped JSON error with that status
  cut           stream half the tokens, then drop the connection mid-chunk
  malformed     stream a token, then a data line that is not JSON
  stream_error  stream a token, then {"error": {...}} inside the 200 stream
  no_finish     stream the tokens, then end the body cleanly without finish_reason or [DONE]
  no_done       a complete stream (finish_reason, usage) that ends without [DONE]
  stall         send nothing for --stall-s seconds (to trip the client's timeout)

Token counting mimics a server with one token per whitespace-separated word plus a BOS
token, for /tokenize and usage.prompt_tokens. usage.prompt_tokens_details.cached_tokens
is the longest word prefix shared with an earlier prompt (a toy prefix cache).
With --log FILE, one JSON line per generation request records its server-side times
(time.monotonic()): arrival, when each token's write began, the end.

Usage: stub_openai_server.py [--port 0] [--ttft-ms 200] [--itl-ms 20] [--script ok,...]
                             [--no-usage] [--no-tokenize] [--log FILE]
Prints "listening on PORT" on stdout once it accepts connections. GET /stub/requests
answers {"count": generation requests received so far}, for tests to wait on.
"""
import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "stub-model"


class State:
    def __init__(self, args):
        self.args = args
        self.script = [a.strip() for a in args.script.split(",") if a.strip()]
        self.lock = threading.Lock()
        self.count = 0
        self.prompts = []
        self.log = open(args.log, "a", buffering=1) if args.log else None

    def next_action(self):
        with self.lock:
            index = self.count
            self.count += 1
        return index, self.script[index % len(self.script)]

    def cached_tokens(self, words):
        with self.lock:
            best = 0
            for prev in self.prompts:
                n = 0
                for a, b in zip(prev, words):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self.prompts.append(words)
        # The BOS token is shared too once any word is.
        return best + 1 if best > 0 else 0

    def record(self, entry):
        if self.log:
            with self.lock:
                self.log.write(json.dumps(entry) + "\n")


def prompt_words(body):
    if "messages" in body:
        text = " ".join(str(m.get("content", "")) for m in body["messages"])
    else:
        text = body.get("prompt", "")
    return text.split()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def setup(self):
        super().setup()
        # Small SSE writes must leave at once, not wait for Nagle's algorithm.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif self.path == "/stub/requests":  # how many generation requests have arrived
            self.send_json(200, {"count": self.state.count})
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "not_found_error"}})

    def do_POST(self):
        body = self.read_body()
        if self.path == "/tokenize" and not self.state.args.no_tokenize:
            words = body.get("prompt", "").split()
            self.send_json(200, {"tokens": list(range(len(words) + 1)), "count": len(words) + 1})
        elif self.path in ("/v1/completions", "/v1/chat/completions"):
            self.generate(body, chat=self.path.endswith("chat/completions"))
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "not_found_error"}})

    def chunk(self, payload):
        data = payload if isinstance(payload, bytes) else payload.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def event(self, obj):
        self.chunk("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n")

    def token_chunk(self, chat, i, finish):
        if chat:
            choice = {"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": f" tok{i}", "finish_reason": finish}
        return {"id": "cmpl-stub", "object": "chat.completion.chunk" if chat else "text_completion",
                "model": MODEL, "choices": [choice]}

    def generate(self, body, chat):
        arrival = time.monotonic()
        index, action = self.state.next_action()
        words = prompt_words(body)
        n_tokens = int(body.get("max_tokens", 16))
        entry = {"index": index, "action": action, "path": self.path, "arrival": arrival,
                 "prompt_words": len(words), "max_tokens": n_tokens, "tokens": []}
        try:
            self.respond(body, chat, action, arrival, words, n_tokens, entry)
        finally:
            self.finish_entry(entry)

    def finish_entry(self, entry):
        # Written before the stream's last bytes, so a client that has seen the end of a
        # stream can rely on the record being there.
        if "end" not in entry:
            entry["end"] = time.monotonic()
            self.state.record(entry)

    def respond(self, body, chat, action, arrival, words, n_tokens, entry):
        args = self.state.args
        if action.isdigit():
            status = int(action)
            self.send_json(status, {"error": {"message": f"stub error {status}", "type": "stub_error",
                                              "param": None, "code": status}})
            return
        if action == "stall":
            time.sleep(args.stall_s)
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if chat:  # servers send the role first, before any token: it must not count as one
            self.event({"id": "cmpl-stub", "object": "chat.completion.chunk", "model": MODEL,
                        "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
        send = n_tokens
        if action == "cut":
            send = max(1, n_tokens // 2)
        elif action in ("malformed", "stream_error"):
            send = 1
        first = arrival + args.ttft_ms / 1000.0
        for i in range(send):
            deadline = first + i * args.itl_ms / 1000.0
            delay = deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            last = i == n_tokens - 1 and action not in ("no_finish",)
            entry["tokens"].append(time.monotonic())  # when the write began
            self.event(self.token_chunk(chat, i, "length" if last else None))
        if action == "cut":
            # Half a chunk, then a reset: the body ends without its terminating chunk.
            self.wfile.write(b"40\r\ndata: {\"choi")
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if action == "malformed":
            self.event("{this is not json")
        elif action == "stream_error":
            self.event({"error": {"message": "stub failure mid-stream", "type": "internal_error", "code": 500}})
        elif action in ("ok", "no_done"):
            include_usage = (body.get("stream_options") or {}).get("include_usage")
            if include_usage and not args.no_usage:
                prompt_tokens = len(words) + 1
                self.event({"id": "cmpl-stub", "model": MODEL, "choices": [],
                            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n_tokens,
                                      "total_tokens": prompt_tokens + n_tokens,
                                      "prompt_tokens_details": {
                                          "cached_tokens": self.state.cached_tokens(words)}}})
            if action == "ok":
                self.finish_entry(entry)
                self.event("[DONE]")
        self.finish_entry(entry)
        self.chunk(b"")  # the terminating zero-length chunk


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=200)
    p.add_argument("--itl-ms", type=float, default=20)
    p.add_argument("--script", default="ok")
    p.add_argument("--stall-s", type=float, default=30)
    p.add_argument("--no-usage", action="store_true")
    p.add_argument("--no-tokenize", action="store_true")
    p.add_argument("--log")
    args = p.parse_args()
    Handler.state = State(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
