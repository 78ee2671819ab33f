// hero dashboard: the live parts. The event feed (Server-Sent Events from /api/events/stream),
// the queue counts (refreshed from /api/queues every 5 s while the page is visible), and the
// buttons that change jobs: they POST to the API with the token kept in this browser's local
// storage.
"use strict";

const TOKEN_KEY = "hero-token";

function flash(text, ok) {
  const el = document.getElementById("flash");
  if (!el) return;
  el.textContent = text;
  el.className = ok ? "ok" : "bad";
}

// Signing out forgets the token this browser kept, as the broker forgets the session (its
// Clear-Site-Data answer does the same where the browser honours it).
function setupSignOut() {
  document.addEventListener("submit", (e) => {
    if (e.target.closest("form.sign-out")) {
      localStorage.removeItem(TOKEN_KEY);
      sessionStorage.clear();
    }
  });
}

function setupToken() {
  const form = document.getElementById("token-form");
  const input = document.getElementById("token");
  if (!form || !input) return;
  input.value = localStorage.getItem(TOKEN_KEY) || "";
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    localStorage.setItem(TOKEN_KEY, input.value.trim());
    flash(input.value.trim() ? "Token saved in this browser." : "Token cleared.", true);
  });
}

async function post(url, body) {
  const token = localStorage.getItem(TOKEN_KEY) || "";
  const headers = { "Content-Type": "application/json" };
  if (token) headers["Authorization"] = "Bearer " + token;
  const res = await fetch(url, { method: "POST", headers, body: body || "{}" });
  let data = {};
  try { data = await res.json(); } catch (_) { /* not JSON */ }
  if (!res.ok) throw new Error(data.error || ("HTTP " + res.status));
  return data;
}

function describe(data) {
  if (Array.isArray(data.results)) {
    return data.results.map((r) => r.job + ": " + r.answer.replace(/_/g, " ")).join("; ") || "nothing to do";
  }
  if (data.stop) return data.id + ": " + data.stop.replace(/_/g, " ");
  if (data.requeued) return data.id + ": requeued to " + data.queue;
  if ("tracked" in data) return data.id + (data.tracked ? ": tracked" : ": no longer tracked");
  if ("consistent" in data) return data.consistent ? "consistent" : "still inconsistent";
  return "done";
}

function setupButtons() {
  document.addEventListener("click", async (e) => {
    const btn = e.target.closest("button[data-post]");
    if (!btn) return;
    if (btn.dataset.confirm && !window.confirm(btn.dataset.confirm)) return;
    btn.disabled = true;
    try {
      const data = await post(btn.dataset.post, btn.dataset.body);
      flash(describe(data), true);
      setTimeout(() => window.location.reload(), 600);
    } catch (err) {
      flash(err.message, false);
      btn.disabled = false;
    }
  });
}

// Bidirectional control characters (U+202E shows "txt.exe" as "exe.txt") in text a job or
// worker wrote are shown as a marked U+XXXX, never obeyed, as the server renders them.
const BIDI = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
function visible(text) {
  return String(text).replace(BIDI, (c) => "[U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "]");
}

function feedItem(ev) {
  const li = document.createElement("li");
  const t = document.createElement("span");
  t.className = "t";
  t.textContent = new Date(ev.at_ms).toLocaleTimeString();
  const name = document.createElement("span");
  name.textContent = ev.event;
  const job = document.createElement("a");
  job.href = "/jobs/" + encodeURIComponent(ev.job);
  job.className = "mono";
  job.textContent = visible(ev.job);
  const q = document.createElement("span");
  q.className = "q";
  q.textContent = visible((ev.queue || "").replace(/^.*:q:work:type:/, "").replace(":group:", "/").replace(":inst:", "/") + (ev.reason ? " · " + ev.reason : ""));
  li.append(t, name, job, q);
  return li;
}

function setupFeed() {
  const feed = document.getElementById("feed");
  if (!feed || !window.EventSource) return;
  const src = new EventSource("/api/events/stream" + (feed.dataset.filter || ""));
  // the server fixes the stream's start before it answers: from here nothing is missed
  src.addEventListener("open", () => { feed.dataset.live = "open"; });
  src.addEventListener("error", () => { feed.dataset.live = "reconnecting"; });
  src.addEventListener("event", (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch (_) { return; }
    const empty = feed.querySelector(".empty-feed");
    if (empty) empty.remove();
    feed.prepend(feedItem(ev));
    while (feed.children.length > 100) feed.lastElementChild.remove();
  });
}

function setupQueueRefresh() {
  const table = document.getElementById("queues");
  if (!table) return;
  setInterval(async () => {
    if (document.hidden) return;
    try {
      const res = await fetch("/api/queues");
      if (!res.ok) return;
      const data = await res.json();
      let waiting = 0, running = 0;
      for (const q of data.queues) {
        waiting += q.waiting; running += q.running;
        const row = table.querySelector('tr[data-queue="' + CSS.escape(q.queue) + '"]');
        if (!row) continue;
        for (const cell of row.querySelectorAll("td[data-f]")) {
          const v = q[cell.dataset.f];
          if (v === undefined) continue;
          cell.textContent = cell.dataset.f === "done_per_minute" ? Number(v).toFixed(1) : String(v);
        }
      }
      const w = document.getElementById("total-waiting");
      const r = document.getElementById("total-running");
      if (w) w.textContent = waiting;
      if (r) r.textContent = running;
    } catch (_) { /* the next tick tries again */ }
  }, 5000);
}

// A running job's page follows it: status, progress and log every second until it ends.
function setupJobRefresh() {
  const card = document.getElementById("job");
  if (!card || card.dataset.live !== "1") return;
  const timer = setInterval(async () => {
    if (document.hidden) return;
    try {
      const res = await fetch("/api/jobs/" + encodeURIComponent(card.dataset.job));
      if (!res.ok) return;
      const job = await res.json();
      const p = job.progress;
      if (p) {
        document.getElementById("progress").hidden = false;
        document.getElementById("progress-bar").value = p.percent;
        document.getElementById("progress-text").textContent =
          Math.round(p.percent) + "% " + visible(p.message || "");
      }
      if (job.log && job.log.length) {
        document.getElementById("job-log-box").hidden = false;
        document.getElementById("job-log").textContent = visible(job.log.join("\n"));
      }
      if (job.status !== card.dataset.status) {
        card.dataset.status = job.status;
        const pill = card.querySelector("h2 .pill");
        if (pill) {
          pill.textContent = job.status;
          pill.className = "pill " + ({ finished: "ok", error: "bad", started: "run" }[job.status] || "wait");
        }
      }
      if (job.status === "finished" || job.status === "error") {
        clearInterval(timer);
        // the output or error and the final history: the page as the server draws it
        location.reload();
      }
    } catch (_) { /* the next tick tries again */ }
  }, 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  setupToken();
  setupSignOut();
  setupButtons();
  setupFeed();
  setupQueueRefresh();
  setupJobRefresh();
});
