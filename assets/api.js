// api.js — talking to this server: the API key (asked once, kept for the tab), fetch with
// the key attached, and a Server-Sent Events reader over fetch (EventSource cannot send
// an Authorization header).
"use strict";

const api = {
  _asking: null,

  key() {
    try { return sessionStorage.getItem("sparkd-key") || ""; } catch (e) { return ""; }
  },
  setKey(k) {
    try { sessionStorage.setItem("sparkd-key", k); } catch (e) { /* storage disabled */ }
    document.getElementById("key-btn").hidden = !k;
  },
  headers(extra) {
    const h = Object.assign({}, extra || {});
    const k = api.key();
    if (k) h["Authorization"] = "Bearer " + k;
    return h;
  },

  // Shows the key dialog once for every caller waiting on it; resolves when a key is entered.
  askKey(refused) {
    if (api._asking) return api._asking;
    const dlg = document.getElementById("key-dialog");
    const input = document.getElementById("key-input");
    document.getElementById("key-error").hidden = !refused;
    input.value = "";
    api._asking = new Promise((resolve) => {
      const form = document.getElementById("key-form");
      const done = (e) => {
        e.preventDefault();
        const k = input.value.trim();
        if (!k) return;
        form.removeEventListener("submit", done);
        dlg.close();
        api.setKey(k);
        api._asking = null;
        resolve(k);
      };
      form.addEventListener("submit", done);
      dlg.addEventListener("cancel", (e) => e.preventDefault(), { once: true });
    });
    if (!dlg.open) dlg.showModal();
    input.focus();
    return api._asking;
  },

  // fetch with the key; a 401 asks for a (new) key and tries again.
  async fetch(path, opts) {
    opts = opts || {};
    for (;;) {
      const res = await fetch(path, Object.assign({}, opts, { headers: api.headers(opts.headers) }));
      if (res.status !== 401) return res;
      const hadKey = !!api.key();
      await api.askKey(hadKey);
    }
  },

  // Yields {event, data} for each event of a text/event-stream response body.
  async *events(res) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut).replace(/^\r?\n\r?\n/, "");
        let event = "message";
        const data = [];
        for (const line of block.split(/\r?\n/)) {
          if (!line || line[0] === ":") continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") event = val;
          else if (field === "data") data.push(val);
        }
        if (data.length) yield { event, data: data.join("\n") };
      }
    }
  },

  // The message of an OpenAI-shaped error response, or the status line.
  async errorText(res) {
    try {
      const j = await res.json();
      if (j && j.error && j.error.message) return j.error.message;
    } catch (e) { /* not JSON */ }
    return "HTTP " + res.status;
  },
};
