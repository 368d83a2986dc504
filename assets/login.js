// login.js — checks an API key against /api/snapshot, then keeps it for the session (a
// cookie the page route reads, and sessionStorage for the dashboard's API calls).
"use strict";
(function () {
  const form = document.getElementById("login-form");
  const input = document.getElementById("key-input");
  input.focus();
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    const res = await fetch("/api/snapshot", { headers: { Authorization: "Bearer " + key } });
    if (res.status === 401) {
      document.getElementById("key-error").hidden = false;
      return;
    }
    try { sessionStorage.setItem("sparkd-key", key); } catch (err) { /* storage disabled */ }
    document.cookie = "sparkd_key=" + encodeURIComponent(key) + "; path=/; SameSite=Strict";
    location.reload();
  });
})();
