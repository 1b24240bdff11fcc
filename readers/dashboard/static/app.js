// The summarize dashboard: polls api/overview, draws the batches table and four charts,
// and shows one batch's slowest, flagged and failed documents (api/batches/NAME) when clicked.
// Data is only ever put into the page as text (textContent), never as HTML.
"use strict";

const ACTIVE_POLL_MS = 3000; // while a batch has documents queued or running
const IDLE_POLL_MS = 30000;
const COLORS = {
  succeeded: "#2e7d32",
  failed: "#c62828",
  cancelled: "#9e9e9e",
  expired: "#6d4c41",
  running: "#1565c0",
  queued: "#90caf9",
  prompt: "#5c6bc0",
  cached: "#9fa8da",
  output: "#ef6c00",
  looped: "#6a1b9a",
  cut: "#f9a825",
  novel: "#00838f",
};
const STATUS_ORDER = ["succeeded", "failed", "cancelled", "expired", "running", "queued"];

const charts = {};
let openBatch = null;

// -- small helpers ------------------------------------------------------------------------

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const fmt = {
  int: (n) => (n == null ? "–" : Number(n).toLocaleString("en")),
  rate: (x) => (x == null ? "–" : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)),
  seconds: (s) => (s == null ? "–" : s >= 100 ? s.toFixed(0) : s >= 1 ? s.toFixed(1) : s.toFixed(3)),
  percent: (x) => (x == null ? "–" : `${(100 * x).toFixed(1)} %`),
  share: (x) => (x == null ? "–" : x.toFixed(2)),
  time: (iso) => (iso ? `${iso.slice(0, 10)} ${iso.slice(11, 19)}` : "–"),
  short: (name, size = 18) => (name.length > size ? `${name.slice(0, size - 1)}…` : name),
};

async function getJSON(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok && response.status !== 404) {
    throw new Error(`${url} answered ${response.status}`);
  }
  return response.json();
}

function showProblem(text) {
  const problem = document.getElementById("problem");
  problem.hidden = !text;
  problem.textContent = text || "";
}

// -- the batches table --------------------------------------------------------------------

function progressBar(batch) {
  const total = batch.documents || 0;
  const finished = batch.succeeded + batch.failed + batch.cancelled + batch.expired;
  const bar = el("div", {
    className: "progress",
    role: "progressbar",
    "aria-valuemin": "0",
    "aria-valuemax": String(total),
    "aria-valuenow": String(finished),
    title: STATUS_ORDER.map((s) => `${fmt.int(batch[s])} ${s}`).join(", "),
  });
  for (const status of STATUS_ORDER) {
    if (!batch[status] || !total) continue;
    const part = el("span", { className: `part ${status}` });
    part.style.width = `${(100 * batch[status]) / total}%`;
    bar.append(part);
  }
  const share = total ? Math.floor((100 * finished) / total) : 100;
  return el("div", { className: "progress-cell" }, bar, el("span", { className: "muted", text: `${share} %` }));
}

function batchRow(batch) {
  const pending = batch.queued + batch.running;
  const open = el("button", {
    type: "button",
    className: "link",
    text: batch.batch,
    onclick: () => selectBatch(batch.batch),
  });
  const row = el(
    "tr",
    { "data-batch": batch.batch, className: pending ? "active" : "" },
    el("td", {}, open, el("div", { className: "muted small", text: batch.model })),
    el("td", {}, progressBar(batch)),
    el("td", { className: "number", text: fmt.int(batch.documents) }),
    el("td", { className: "number", text: fmt.int(batch.succeeded) }),
    el("td", { className: batch.failed ? "number bad" : "number", text: fmt.int(batch.failed) }),
    el("td", { className: "number", text: fmt.int(pending) }),
    el("td", {
      className: batch.quality_looped ? "number bad" : "number",
      text: `${fmt.int(batch.quality_looped)} · ${fmt.int(batch.quality_truncated)}`,
    }),
    el("td", { className: "number", text: fmt.rate(batch.documents_per_s) }),
    el("td", { className: "number", text: fmt.int(batch.completion_tokens) }),
    el("td", {
      className: "number",
      text: `${fmt.seconds(batch.p50_document_s)} / ${fmt.seconds(batch.p95_document_s)}`,
    }),
    el("td", { className: "small", text: fmt.time(batch.created_at) }),
  );
  if (batch.batch === openBatch) row.classList.add("selected");
  return row;
}

function renderBatches(batches) {
  const body = document.querySelector("#batches tbody");
  body.replaceChildren(...batches.map(batchRow));
  document.getElementById("no-batches").hidden = batches.length > 0;
}

// -- charts -------------------------------------------------------------------------------

function chart(id, config) {
  if (!charts[id]) {
    charts[id] = new Chart(document.getElementById(id), config);
  } else {
    charts[id].data = config.data;
    charts[id].update("none");
  }
  return charts[id];
}

function renderCharts(data) {
  const oldestFirst = [...data.batches].reverse();
  const labels = oldestFirst.map((b) => fmt.short(b.batch));
  chart("throughput-chart", {
    type: "bar",
    data: {
      labels,
      datasets: [
        {
          label: "documents/s",
          data: oldestFirst.map((b) => b.documents_per_s),
          backgroundColor: COLORS.succeeded,
          yAxisID: "documents",
        },
        {
          label: "output tokens/s",
          type: "line",
          data: oldestFirst.map((b) => b.completion_tokens_per_s),
          borderColor: COLORS.output,
          backgroundColor: COLORS.output,
          yAxisID: "tokens",
        },
      ],
    },
    options: {
      maintainAspectRatio: false,
      scales: {
        documents: { position: "left", beginAtZero: true, title: { display: true, text: "documents/s" } },
        tokens: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false },
                  title: { display: true, text: "tokens/s" } },
      },
    },
  });
  chart("tokens-chart", {
    type: "bar",
    data: {
      labels: data.days.map((d) => d.day),
      datasets: [
        { label: "prompt", data: data.days.map((d) => d.prompt_tokens), backgroundColor: COLORS.prompt },
        { label: "cached", data: data.days.map((d) => d.cached_tokens), backgroundColor: COLORS.cached },
        { label: "output", data: data.days.map((d) => d.completion_tokens), backgroundColor: COLORS.output },
      ],
    },
    options: { maintainAspectRatio: false, scales: { y: { beginAtZero: true } } },
  });
  chart("failures-chart", {
    type: "bar",
    data: {
      labels,
      datasets: [
        { label: "failed", data: oldestFirst.map((b) => b.failed), backgroundColor: COLORS.failed },
        { label: "cancelled", data: oldestFirst.map((b) => b.cancelled), backgroundColor: COLORS.cancelled },
        { label: "expired", data: oldestFirst.map((b) => b.expired), backgroundColor: COLORS.expired },
      ],
    },
    options: {
      maintainAspectRatio: false,
      scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } },
    },
  });
  const share = (count, b) => (b.quality_summaries ? (100 * count) / b.quality_summaries : null);
  chart("quality-chart", {
    type: "bar",
    data: {
      labels,
      datasets: [
        { label: "loop", data: oldestFirst.map((b) => share(b.quality_looped, b)), backgroundColor: COLORS.looped },
        { label: "cut at the cap", data: oldestFirst.map((b) => share(b.quality_truncated, b)), backgroundColor: COLORS.cut },
        { label: "novel numbers", data: oldestFirst.map((b) => share(b.quality_novel_numbers, b)), backgroundColor: COLORS.novel },
      ],
    },
    options: { maintainAspectRatio: false, scales: { y: { beginAtZero: true, max: 100, title: { display: true, text: "%" } } } },
  });
}

// -- one batch ----------------------------------------------------------------------------

function figure(term, value) {
  return [el("dt", { text: term }), el("dd", { text: value })];
}

// A document in a list: its file name and what marks it; opened, its path, facts and summary.
function documentItem(d, marks, facts) {
  return el(
    "li",
    {},
    el(
      "details",
      {},
      el("summary", {}, el("span", { className: "path", text: d.source_path.split("/").pop() }), ...marks),
      el("div", { className: "muted small", text: `${d.source_path} · ${facts}` }),
      el("p", { className: "summary", text: d.summary || "" }),
    ),
  );
}

function renderDetail(detail) {
  const b = detail.batch;
  document.getElementById("detail-name").textContent = b.batch;
  const settings = detail.settings;
  const meta = Object.entries(detail.metadata).map(([k, v]) => `${k}=${v}`).join(" ");
  document.getElementById("detail-figures").replaceChildren(
    ...figure("model", b.model),
    ...figure("instruction", settings.instruction),
    ...figure(
      "length",
      `${fmt.int(settings.max_tokens)} tokens` + (settings.max_sentences ? `, ${settings.max_sentences} sentences` : ""),
    ),
    ...(meta ? figure("metadata", meta) : []),
    ...figure("documents", fmt.int(b.documents)),
    ...figure("succeeded", `${fmt.int(b.succeeded)} (${fmt.int(b.deduplicated)} deduplicated)`),
    ...figure("failed", `${fmt.int(b.failed)} (${fmt.percent(b.failure_rate)})`),
    ...figure("queued / running", `${fmt.int(b.queued)} / ${fmt.int(b.running)}`),
    ...figure("prompt tokens", `${fmt.int(b.prompt_tokens)} (${fmt.int(b.cached_tokens)} cached)`),
    ...figure("output tokens", fmt.int(b.completion_tokens)),
    ...figure("wall time", `${fmt.seconds(b.wall_s)} s`),
    ...figure("documents/s", fmt.rate(b.documents_per_s)),
    ...figure("output tokens/s", fmt.rate(b.completion_tokens_per_s)),
    ...figure("per document p50 / p95", `${fmt.seconds(b.p50_document_s)} / ${fmt.seconds(b.p95_document_s)} s`),
    ...figure("first start – last finish (UTC)", `${fmt.time(b.first_started_at)} – ${fmt.time(b.last_finished_at)}`),
    ...figure(
      "summaries: loop · cut · novel numbers · flawed",
      `${fmt.int(b.quality_looped)} · ${fmt.int(b.quality_truncated)} · ${fmt.int(b.quality_novel_numbers)} · ${fmt.int(b.quality_flawed)} of ${fmt.int(b.quality_summaries)}`,
    ),
    ...figure(
      "mean repetition · copied · compression",
      `${fmt.share(b.quality_repetition)} · ${fmt.share(b.quality_copied)} · ${fmt.share(b.quality_compression)}`,
    ),
  );
  const slowest = detail.slowest.map((d) =>
    documentItem(
      d,
      [el("span", { className: "muted", text: ` ${fmt.seconds(d.seconds)} s · ${fmt.int(d.prompt_tokens)} → ${fmt.int(d.completion_tokens)} tokens` })],
      `${d.parts} part(s) · finish: ${d.finish_reason}`,
    ),
  );
  document.getElementById("slowest").replaceChildren(...slowest);
  const flagged = detail.flagged.map((d) =>
    documentItem(
      d,
      [
        el("span", { className: "bad", text: d.looped ? " loops" : "" }),
        el("span", { className: "bad", text: d.flaw ? ` ${d.flaw}` : "" }),
        el("span", { className: "muted", text: d.novel_numbers ? ` · ${d.novel_numbers} number(s) not in the document` : "" }),
      ],
      `repetition ${fmt.share(d.repetition)} · copied ${fmt.share(d.copied)} · finish: ${d.finish_reason} · ${fmt.time(d.finished_at)}`,
    ),
  );
  document.getElementById("flagged").replaceChildren(...flagged);
  document.getElementById("no-flagged").hidden = flagged.length > 0;
  document.getElementById("no-slowest").hidden = slowest.length > 0;
  const failed = detail.failed.map((f) =>
    el(
      "tr",
      {},
      el("td", { className: "path", text: f.source_path, title: f.content_hash || "" }),
      el("td", { className: "number", text: fmt.int(f.attempts) }),
      el("td", { className: "error", text: f.error || "" }),
      el("td", { className: "small", text: fmt.time(f.finished_at) }),
    ),
  );
  document.querySelector("#failed tbody").replaceChildren(...failed);
  document.getElementById("failed").hidden = failed.length === 0;
  document.getElementById("no-failed").hidden = failed.length > 0;
}

async function loadDetail(name) {
  const section = document.getElementById("detail");
  const detail = await getJSON(`api/batches/${encodeURIComponent(name)}`);
  if (name !== openBatch) return; // another batch was opened meanwhile
  if (detail.error) {
    showProblem(detail.error);
    section.hidden = true;
    return;
  }
  renderDetail(detail);
  section.hidden = false;
}

function selectBatch(name) {
  openBatch = name;
  history.replaceState(null, "", name ? `#batch=${encodeURIComponent(name)}` : "#");
  for (const row of document.querySelectorAll("#batches tbody tr")) {
    row.classList.toggle("selected", row.dataset.batch === name);
  }
  if (!name) {
    document.getElementById("detail").hidden = true;
    return;
  }
  loadDetail(name)
    .then(() => document.getElementById("detail").scrollIntoView({ behavior: "smooth" }))
    .catch((error) => showProblem(`Cannot load batch ${name}: ${error.message}`));
}

// -- polling ------------------------------------------------------------------------------

async function refresh() {
  let active = false;
  try {
    const data = await getJSON("api/overview");
    active = data.active;
    renderBatches(data.batches);
    renderCharts(data);
    const running = data.batches.filter((b) => b.queued + b.running > 0).length;
    document.getElementById("totals").textContent =
      `${data.batches.length} latest batches · ${running} in progress · ${fmt.int(data.failures)} failed documents in all`;
    const openIsActive = data.batches.some((b) => b.batch === openBatch && b.queued + b.running > 0);
    if (openBatch && openIsActive) await loadDetail(openBatch);
    const now = new Date().toISOString();
    document.getElementById("updated").textContent = active
      ? `Updated ${fmt.time(now)} UTC · refreshing every ${ACTIVE_POLL_MS / 1000} s while batches run`
      : `Updated ${fmt.time(now)} UTC · nothing running; next look in ${IDLE_POLL_MS / 1000} s`;
    showProblem("");
  } catch (error) {
    showProblem(`Cannot reach the dashboard server (${error.message}); trying again.`);
    active = true;
  } finally {
    setTimeout(refresh, active ? ACTIVE_POLL_MS : IDLE_POLL_MS);
  }
}

function start() {
  Chart.defaults.animation = false; // redrawn every few seconds: no motion
  Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
  document.getElementById("detail-close").addEventListener("click", () => selectBatch(null));
  const match = location.hash.match(/^#batch=(.+)$/);
  if (match) {
    let name = null;
    try {
      name = decodeURIComponent(match[1]);
    } catch (error) {
      // a malformed address (#batch=%E0%A4%A) opens no batch; the page still loads
    }
    if (name) selectBatch(name);
  }
  refresh();
}

start();
