// theme.js — applies the saved or the system's light/dark theme before the page paints.
(function () {
  var saved = null;
  try { saved = localStorage.getItem("sparkd-theme"); } catch (e) { /* storage disabled */ }
  var dark = saved ? saved === "dark" : window.matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.setAttribute("data-theme", dark ? "dark" : "light");
})();
