"""An independent timer for `sparkd bench`: a relay that sends every generation request it
receives to the real server through the official `openai` SDK, times it there with its own
code, and passes each chunk on to the caller the moment the SDK yields it.

Put between bench and a server, it measures the very same requests and tokens bench
measures (not a second, similar run), from a vantage point one hop closer to the server:
TTFT is the time from the SDK call to the first chunk with text, TPOT is
(end - first token) / (completion_tokens - 1) with completion_tokens from the usage chunk.
Differences between the two are then only bench's own error plus the relay's small,
known overhead (forwarding the request; writing each chunk on).

Records go to a JSONL file, one line per generation request, in arrival order:
  {"arrival", "ttft_s", "tpot_s", "e2e_s", "end", "completion_tokens", "prompt_tokens",
   "content_chunks", "prompt"}   (times from time.monotonic(), durations in seconds)

Other paths (GET /v1/models, POST /tokenize, ...) are passed through unchanged.
Usage: independent_client.py --upstream URL --log FILE [--port 0]
Prints "listening on PORT" once it accepts connections.
"""
import argparse
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from openai import OpenAI


class Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = ""
    client = None  # one SDK client for all requests, made before any arrives (it is thread-safe)
    log = None
    log_lock = threading.Lock()

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def passthrough(self, method, body=None):
        req = urllib.request.Request(self.upstream + self.path, data=body, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.passthrough("GET")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path in ("/v1/completions", "/v1/chat/completions"):
            self.relay(json.loads(body), chat=self.path.endswith("chat/completions"))
        else:
            self.passthrough("POST", body)

    def write_event(self, text):
        data = ("data: " + text + "\n\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def relay(self, body, chat):
        client = self.client
        # Fields the SDK has no parameter for travel in extra_body, as a user would send them.
        known = {"model", "max_tokens", "stream", "stream_options", "temperature",
                 "prompt" if not chat else "messages"}
        extra = {k: v for k, v in body.items() if k not in known}
        args = {k: body[k] for k in known if k in body and k != "stream"}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        arrival = time.monotonic()
        api = client.chat.completions if chat else client.completions
        stream = api.create(stream=True, extra_body=extra, **args)
        first = end = None
        chunks = 0
        usage = None
        for chunk in stream:
            now = time.monotonic()
            has_text = False
            for choice in chunk.choices or []:
                text = choice.delta.content if chat else choice.text
                if text:
                    has_text = True
            if has_text:
                chunks += 1
                if first is None:
                    first = now
            if chunk.usage is not None:
                usage = chunk.usage
            self.write_event(chunk.model_dump_json())
        end = time.monotonic()
        completion_tokens = usage.completion_tokens if usage else chunks
        record = {
            "arrival": arrival, "end": end, "e2e_s": end - arrival,
            "ttft_s": None if first is None else first - arrival,
            "tpot_s": (end - first) / (completion_tokens - 1) if first and completion_tokens > 1 else None,
            "completion_tokens": completion_tokens,
            "prompt_tokens": usage.prompt_tokens if usage else None,
            "content_chunks": chunks,
            "prompt": body.get("prompt") if not chat else body.get("messages"),
        }
        # Logged before the stream's last bytes go out: a caller that has seen [DONE] can
        # rely on the record being there.
        with self.log_lock:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        self.write_event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    Relay.upstream = args.upstream.rstrip("/")
    Relay.client = OpenAI(base_url=Relay.upstream + "/v1", api_key="unused", max_retries=0, timeout=600)
    Relay.log = open(args.log, "a")
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Relay)
    server.daemon_threads = True
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
