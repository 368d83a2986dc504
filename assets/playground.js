// playground.js — the chat playground: streams replies from /v1/chat/completions, shows the
// reply's speed, and stops a reply by aborting the fetch (the server cancels the request).
"use strict";

const playground = {
  model: "",
  history: [],        // [{role, content}] of the conversation so far
  controller: null,   // AbortController of the reply in progress
  state: "idle",      // "idle", "streaming", "done", "stopped", "error" (tests read it)
  replies: 0,

  init() {
    const form = document.getElementById("pg-form");
    const msg = document.getElementById("pg-msg");
    form.addEventListener("submit", (e) => { e.preventDefault(); playground.send(); });
    msg.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); playground.send(); }
    });
    document.getElementById("pg-stop").addEventListener("click", () => playground.stop());
    document.getElementById("pg-clear").addEventListener("click", () => playground.clear());
  },

  bubble(role, text) {
    const chat = document.getElementById("pg-chat");
    document.getElementById("pg-empty").hidden = true;
    const div = document.createElement("div");
    div.className = "msg " + role;
    div.textContent = text;
    chat.appendChild(div);
    chat.scrollTop = chat.scrollHeight;
    return div;
  },

  setBusy(busy) {
    document.getElementById("pg-send").disabled = busy;
    document.getElementById("pg-stop").disabled = !busy;
  },

  number(id, fallback) {
    const v = parseFloat(document.getElementById(id).value);
    return isFinite(v) ? v : fallback;
  },

  stats(parts) { document.getElementById("pg-stats").textContent = parts.filter(Boolean).join("  ·  "); },

  async send() {
    const input = document.getElementById("pg-msg");
    const text = input.value.trim();
    if (!text || playground.controller) return;
    input.value = "";
    playground.history.push({ role: "user", content: text });
    playground.bubble("user", text);
    const out = playground.bubble("assistant streaming", "");

    const system = document.getElementById("pg-system").value.trim();
    const messages = (system ? [{ role: "system", content: system }] : []).concat(playground.history);
    const body = {
      model: playground.model || undefined,
      messages,
      stream: true,
      stream_options: { include_usage: true },
      temperature: playground.number("pg-temp", 0.7),
      top_p: playground.number("pg-top-p", 1),
      max_tokens: Math.round(playground.number("pg-max", 256)),
    };
    const controller = new AbortController();
    playground.controller = controller;
    playground.state = "streaming";
    playground.setBusy(true);
    playground.stats(["waiting for the first token…"]);

    const t0 = performance.now();
    let tFirst = null, tLast = null, chunks = 0, usage = null, finish = null, reply = "";
    const show = (final) => {
      const tokens = usage ? usage.completion_tokens : chunks;
      const span = tFirst != null && tLast != null ? (tLast - tFirst) / 1000 : 0;
      const speed = tokens > 1 && span > 0 ? (tokens - 1) / span : null;
      playground.stats([
        fmt.int(tokens) + " tokens",
        speed != null ? fmt.num(speed) + " tok/s" : null,
        tFirst != null ? "TTFT " + fmt.dur((tFirst - t0) / 1000) : null,
        final ? final : null,
      ]);
    };
    try {
      const res = await api.fetch("/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!res.ok) throw new Error(await api.errorText(res));
      for await (const ev of api.events(res)) {
        if (ev.data === "[DONE]") break;
        const chunk = JSON.parse(ev.data);
        if (chunk.error) throw new Error(chunk.error.message || "the server reported an error");
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices && chunk.choices[0];
        if (!choice) continue;
        const delta = (choice.delta && choice.delta.content) || "";
        if (delta) {
          const now = performance.now();
          if (tFirst == null) tFirst = now;
          tLast = now;
          chunks++;
          reply += delta;
          out.textContent = reply;
          document.getElementById("pg-chat").scrollTop = 1e9;
          show();
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      playground.state = "done";
      show("finish: " + (finish || "—"));
    } catch (e) {
      if (controller.signal.aborted) {
        playground.state = "stopped";
        show("stopped");
      } else {
        playground.state = "error";
        playground.bubble("error", e.message || String(e));
        show("failed");
      }
    } finally {
      out.classList.remove("streaming");
      if (reply) playground.history.push({ role: "assistant", content: reply });
      else if (playground.state !== "done") out.remove();
      playground.controller = null;
      playground.replies++;
      playground.setBusy(false);
    }
  },

  stop() {
    if (playground.controller) playground.controller.abort();
  },

  clear() {
    playground.stop();
    playground.history = [];
    const chat = document.getElementById("pg-chat");
    chat.querySelectorAll(".msg").forEach((m) => m.remove());
    document.getElementById("pg-empty").hidden = false;
    playground.stats([]);
  },
};
