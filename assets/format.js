// format.js — number formatting shared by the dashboard: rates, durations, bytes, percents.
"use strict";
const fmt = {
  // Up to three significant digits, grouped thousands above that.
  num(v, digits) {
    if (v == null || !isFinite(v)) return "—";
    const a = Math.abs(v);
    if (digits != null) return v.toFixed(digits);
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a === 0) return "0";
    return v.toFixed(2);
  },
  // 1.2M, 345k: for counts in tight spaces.
  compact(v) {
    if (v == null) return "—";
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    return Math.round(v).toLocaleString("en-US");
  },
  int(v) { return v == null ? "—" : Math.round(v).toLocaleString("en-US"); },
  rate(v) { return v == null ? "—" : fmt.num(v) + " tok/s"; },
  // Seconds in, "850 ms" / "1.24 s" / "2m 05s" out.
  dur(s) {
    if (s == null || !isFinite(s) || s < 0) return "—";
    if (s === 0) return "0";
    if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : s < 0.1 ? 1 : 0) + " ms";
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
    const m = Math.floor(s / 60), r = Math.floor(s % 60);
    return m + "m " + String(r).padStart(2, "0") + "s";
  },
  uptime(s) {
    if (s == null) return "—";
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    if (d > 0) return d + "d " + h + "h";
    if (h > 0) return h + "h " + m + "m";
    if (m > 0) return m + "m " + Math.floor(s % 60) + "s";
    return Math.floor(s) + "s";
  },
  bytes(b) {
    if (b == null || !isFinite(b)) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(b >= 100 ? 0 : b >= 10 ? 1 : 2)) + " " + units[i];
  },
  pct(f) { return f == null || !isFinite(f) ? "—" : (f * 100).toFixed(f >= 0.995 || f === 0 ? 0 : 1) + " %"; },
  time(ms) {
    const d = new Date(ms);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  },
};
