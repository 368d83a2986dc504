// linechart.js — a small canvas time-series chart: shared time axis, gaps for missing
// values, nice y ticks, a legend with current values, and a hover readout.
"use strict";

class LineChart {
  // opts.series: [{key, label, color ("--s1" css variable)}]; opts.format(v) for values;
  // opts.max: fixed top of the y axis (else from the data); opts.window: seconds shown;
  // opts.stacked: areas on top of each other; opts.binary: ticks in KiB/MiB/GiB steps.
  constructor(canvas, store, opts) {
    this.canvas = canvas;
    this.store = store;
    this.opts = Object.assign({ window: 300, min: 0, max: null, format: (v) => fmt.num(v) }, opts);
    this.hoverX = null;
    canvas.addEventListener("mousemove", (e) => {
      const r = canvas.getBoundingClientRect();
      this.hoverX = e.clientX - r.left;
      this.draw();
    });
    canvas.addEventListener("mouseleave", () => { this.hoverX = null; this.draw(); });
  }

  // Number of points a series holds that are inside the window (tests read this).
  points() {
    const t = this.store.t;
    if (!t.length) return 0;
    const from = t[t.length - 1] - this.opts.window * 1000;
    let n = 0;
    for (let i = t.length - 1; i >= 0 && t[i] >= from; i--) n++;
    return n;
  }

  draw() {
    const c = this.canvas, dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (!w || !h) return;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const css = getComputedStyle(document.documentElement);
    const color = (name) => css.getPropertyValue(name).trim() || "#888";
    const muted = color("--muted"), grid = color("--grid"), text = color("--text");
    const font = "11px system-ui, -apple-system, Segoe UI, Roboto, sans-serif";
    g.font = font;

    const t = this.store.t, series = this.opts.series;
    const now = t.length ? t[t.length - 1] : Date.now();
    const t0 = now - this.opts.window * 1000;
    let start = t.length;
    while (start > 0 && t[start - 1] >= t0) start--;

    // y range over the visible values
    // stacked charts draw each series on top of the ones before it
    const tops = series.map((s) => this.store[s.key] || []);
    if (this.opts.stacked) {
      for (let k = 1; k < tops.length; k++)
        tops[k] = tops[k].map((v, i) => (v == null ? null : v + (tops[k - 1][i] || 0)));
    }
    let ymax = this.opts.max;
    let base = 1;  // ticks are nice multiples of this unit (1024^k for bytes)
    if (ymax == null) {
      ymax = 0;
      for (const v of tops)
        for (let i = start; i < v.length; i++) if (v[i] != null && v[i] > ymax) ymax = v[i];
      ymax = ymax || this.opts.emptyMax || 1;
      if (this.opts.binary) while (ymax / base >= 1024) base *= 1024;
      ymax = LineChart.niceCeil(ymax / base) * base;
    }
    const ymin = this.opts.min;
    const step = LineChart.niceStep((ymax - ymin) / base / 4) * base;

    // plot area: leave room for the legend on top, y labels on the left, x labels below
    const ylabels = [];
    for (let y = ymin; y <= ymax + step * 1e-6; y += step) ylabels.push(y);
    let left = 0;
    for (const y of ylabels) left = Math.max(left, g.measureText(this.opts.format(y)).width);
    let legendWidth = 0;
    for (const s of series) {
      const v = this.store[s.key] || [];
      const latest = v.length ? v[v.length - 1] : null;
      legendWidth += g.measureText(s.label + (latest == null ? "—" : this.opts.format(latest))).width + 40;
    }
    const legendRows = legendWidth > w - left - 20 ? 2 : 1;
    const pad = { l: Math.ceil(left) + 10, r: 8, t: 8 + 14 * legendRows, b: 18 };
    const pw = w - pad.l - pad.r, ph = h - pad.t - pad.b;
    const xof = (ms) => pad.l + ((ms - t0) / (this.opts.window * 1000)) * pw;
    const yof = (v) => pad.t + ph - ((Math.min(v, ymax) - ymin) / (ymax - ymin || 1)) * ph;

    // grid and labels
    g.lineWidth = 1;
    g.textBaseline = "middle";
    g.textAlign = "right";
    for (const y of ylabels) {
      const py = Math.round(yof(y)) + 0.5;
      g.strokeStyle = grid;
      g.beginPath(); g.moveTo(pad.l, py); g.lineTo(w - pad.r, py); g.stroke();
      g.fillStyle = muted;
      g.fillText(this.opts.format(y), pad.l - 6, py);
    }
    g.textAlign = "center";
    g.textBaseline = "alphabetic";
    const minutes = Math.round(this.opts.window / 60);
    const every = pw / minutes < 48 ? 2 : 1;  // minutes between labels that fit
    for (let m = minutes - 1; m >= 0; m--) {
      if (m % every) continue;
      const px = xof(now - m * 60000);
      g.fillStyle = muted;
      g.textAlign = m === 0 ? "right" : "center";
      g.fillText(m === 0 ? "now" : "−" + m + " min", px, h - 4);
    }

    // series: area fill (down to the series below when stacked), then the line; null
    // values and stream outages break the line
    series.forEach((s, k) => {
      const v = tops[k];
      const below = this.opts.stacked && k > 0 ? tops[k - 1] : null;
      const col = color(s.color);
      let run = [];
      const flush = () => {
        if (!run.length) return;
        g.beginPath();
        run.forEach(([x, y], i) => (i ? g.lineTo(x, y) : g.moveTo(x, y)));
        if (run.length === 1) g.lineTo(run[0][0] + 1.5, run[0][1]);
        g.strokeStyle = col; g.lineWidth = 1.75; g.lineJoin = "round"; g.stroke();
        for (let j = run.length - 1; j >= 0; j--) g.lineTo(run[j][0], run[j][2]);
        g.closePath();
        g.globalAlpha = this.opts.stacked ? 0.22 : 0.08; g.fillStyle = col; g.fill(); g.globalAlpha = 1;
        run = [];
      };
      for (let i = start; i < t.length; i++) {
        if (v[i] == null) { flush(); continue; }
        if (run.length && t[i] - t[i - 1] > 3500) flush();  // the stream was down: show the gap
        run.push([xof(t[i]), yof(v[i]), yof(below && below[i] != null ? below[i] : ymin)]);
      }
      flush();
    });

    // legend with the latest (or hovered) value of each series
    let idx = t.length - 1;
    if (this.hoverX != null && this.hoverX >= pad.l && t.length) {
      const ms = t0 + ((this.hoverX - pad.l) / pw) * this.opts.window * 1000;
      idx = LineChart.nearest(t, ms, start);
    }
    g.textAlign = "left";
    g.textBaseline = "middle";
    let lx = pad.l, ly = 9;
    series.forEach((s, k) => {
      if (legendRows === 2 && k === Math.ceil(series.length / 2)) { lx = pad.l; ly += 14; }
      const v = this.store[s.key] || [];
      const val = idx >= 0 && idx < v.length ? v[idx] : null;
      g.fillStyle = color(s.color);
      g.fillRect(lx, ly - 2, 10, 3);
      lx += 14;
      g.fillStyle = muted;
      g.fillText(s.label, lx, ly);
      lx += g.measureText(s.label).width + 5;
      g.fillStyle = text;
      g.font = "600 " + font;
      const shown = val == null ? "—" : this.opts.format(val);
      g.fillText(shown, lx, ly);
      lx += g.measureText(shown).width + 14;
      g.font = font;
    });

    // hover: a vertical line and dots at the values
    if (this.hoverX != null && idx >= start && idx >= 0) {
      const px = Math.round(xof(t[idx])) + 0.5;
      g.strokeStyle = muted; g.setLineDash([3, 3]);
      g.beginPath(); g.moveTo(px, pad.t); g.lineTo(px, pad.t + ph); g.stroke();
      g.setLineDash([]);
      for (const s of series) {
        const v = tops[series.indexOf(s)][idx];
        if (v == null) continue;
        g.fillStyle = color(s.color);
        g.beginPath(); g.arc(px, yof(v), 3, 0, 2 * Math.PI); g.fill();
      }
      g.fillStyle = muted; g.textAlign = "right"; g.textBaseline = "alphabetic";
      g.fillText(fmt.time(t[idx]), w - pad.r, pad.t - 2 + 12);
    }
  }

  static nearest(t, ms, from) {
    let best = -1, bd = Infinity;
    for (let i = from; i < t.length; i++) {
      const d = Math.abs(t[i] - ms);
      if (d < bd) { bd = d; best = i; }
    }
    return best;
  }

  // 1, 2, 2.5 or 5 times a power of ten.
  static niceStep(raw) {
    if (!(raw > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * p) return m * p;
    return 10 * p;
  }

  static niceCeil(v) {
    if (!(v > 0)) return 1;
    const step = LineChart.niceStep(v / 4);
    return Math.ceil(v / step - 1e-9) * step;
  }
}
