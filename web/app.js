// The page of `foldcore serve`: submit, watch, view. Plain browser JavaScript (no build step);
// talks to the REST API of docs/serve.md. The token (when the server needs one) is kept in
// localStorage and sent as "Authorization: Bearer"; files are fetched with it and shown through
// blob URLs, because <img src> and <a href> cannot carry the header.
'use strict';

const AMINO = 'ACDEFGHIKLMNPQRSTVWYXBZUOJ';
// AlphaFold DB's pLDDT bands.
const BANDS = [[90, '#0053d6'], [70, '#65cbf3'], [50, '#ffdb13'], [-Infinity, '#ff7d45']];
const state = { token: localStorage.getItem('foldcoreToken') || '', maxLength: null, selected: null,
                shownDone: null, blobUrls: [], viewer: null };
const $ = (id) => document.getElementById(id);

function plddtColor(b) {
  for (const [low, color] of BANDS) if (b > low) return color;
  return BANDS[BANDS.length - 1][1];
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function apiFetch(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (state.token) headers.Authorization = 'Bearer ' + state.token;
  const res = await fetch(path, Object.assign({}, options, { headers }));
  if (res.status === 401) {
    $('auth').hidden = false;
    throw new ApiError(401, 'this server needs a token');
  }
  if (!res.ok) {
    let msg = res.statusText;
    try { msg = (await res.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new ApiError(res.status, msg);
  }
  return res;
}
const apiJson = async (path, options) => (await apiFetch(path, options)).json();

// --- submission and live validation -------------------------------------------------------

// The same rules as the server (job_input.cpp): one record, amino-acid letters, length limit.
function parseInput(text) {
  const lines = text.split(/\r?\n/);
  let name = '', seq = '', records = 0;
  for (const line of lines) {
    if (line.startsWith('>')) { records++; if (records === 1) name = line.slice(1).trim().split(/\s+/)[0] || ''; continue; }
    if (line.startsWith(';')) continue;
    seq += line.replace(/\s+/g, '');
  }
  seq = seq.toUpperCase().replace(/\*$/, '');
  const problems = [];
  if (records > 1) problems.push('more than one FASTA record: one chain per job');
  const bad = [];
  for (let i = 0; i < seq.length && bad.length < 5; i++)
    if (!AMINO.includes(seq[i])) bad.push(`'${seq[i]}' at ${i + 1}`);
  if (bad.length) problems.push('not amino-acid letters: ' + bad.join(', '));
  if (state.maxLength !== null && seq.length > state.maxLength)
    problems.push(`${seq.length} residues, more than this server's limit of ${state.maxLength}`);
  return { name, seq, problems };
}

function validate() {
  const text = $('sequence').value;
  const { seq, problems } = parseInput(text);
  const v = $('validation');
  if (!text.trim()) {
    v.textContent = state.maxLength ? `Paste a sequence (up to ${state.maxLength} residues).` : 'Paste a sequence.';
    v.className = 'muted';
  } else if (problems.length) {
    v.textContent = problems.join('; ');
    v.className = 'error';
  } else if (!seq.length) {
    v.textContent = 'no sequence letters yet';
    v.className = 'error';
  } else {
    v.textContent = `${seq.length} residues`;
    v.className = 'muted';
  }
  const ok = text.trim() && !problems.length && seq.length > 0;
  $('sequence').classList.toggle('invalid', !!text.trim() && !ok);
  $('submit-button').disabled = !ok;
  return ok;
}

async function readFileInto(input, target) {
  const f = input.files[0];
  if (!f) return null;
  if (f.size > 16 * 1024 * 1024) throw new Error(`${f.name}: larger than 16 MiB`);
  const text = await f.text();
  if (target) target.value = text;
  return text;
}

async function submit(ev) {
  ev.preventDefault();
  if (!validate()) return;
  const out = $('submit-result');
  const { name, seq } = parseInput($('sequence').value);
  const body = { name: $('name').value.trim() || name || 'query', sequence: seq };
  try {
    const a3m = await readFileInto($('a3m-file'), null);
    if (a3m) body.a3m = a3m;
    $('submit-button').disabled = true;
    const job = await apiJson('/api/jobs', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                             body: JSON.stringify(body) });
    out.textContent = `Submitted: ${job.name}`;
    out.className = 'muted';
    select(job.id);
    refreshJobs();
  } catch (e) {
    out.textContent = e.status === 429 || e.status === 503 ? `Server busy: ${e.message}` : `Not submitted: ${e.message}`;
    out.className = 'error';
  } finally {
    validate();
  }
}

// --- job list -------------------------------------------------------------------------------

function statusCell(job) {
  const td = document.createElement('td');
  td.className = `status status-${job.status}`;
  td.textContent = job.status;
  return td;
}

async function refreshJobs() {
  let data;
  try { data = await apiJson('/api/jobs?limit=50'); } catch (e) { return; }
  const rows = $('job-rows');
  rows.replaceChildren();
  for (const job of data.jobs) {
    const tr = document.createElement('tr');
    tr.dataset.id = job.id;
    tr.dataset.status = job.status;
    if (job.id === state.selected) tr.className = 'selected';
    const name = document.createElement('td');
    name.textContent = job.name;
    const len = document.createElement('td');
    len.textContent = job.length;
    const prog = document.createElement('td');
    if (job.status === 'running') {
      const p = document.createElement('progress');
      p.max = 1; p.value = job.progress; p.title = job.stage;
      prog.append(p);
    } else if (job.status === 'queued') {
      prog.textContent = `#${job.queue_position} in queue`;
    } else {
      prog.textContent = job.status === 'done' ? `pLDDT ${job.mean_plddt}` : '';
    }
    const when = document.createElement('td');
    when.textContent = job.created_at.replace('T', ' ').replace('Z', '');
    tr.append(name, len, statusCell(job), prog, when);
    tr.addEventListener('click', () => select(job.id));
    rows.append(tr);
  }
  $('jobs-empty').hidden = data.jobs.length > 0;
}

// --- result view ------------------------------------------------------------------------------

function select(id) {
  state.selected = id;
  location.hash = 'job=' + id;
  state.shownDone = null;
  $('result').hidden = false;
  $('result-body').hidden = true;
  delete document.body.dataset.resultReady;
  refreshSelected();
}

async function blobUrl(jobId, name) {
  const res = await apiFetch(`/api/jobs/${jobId}/files/${encodeURIComponent(name)}`);
  const url = URL.createObjectURL(await res.blob());
  state.blobUrls.push(url);
  return url;
}

function loadImage(img, url) {
  return new Promise((resolve, reject) => {
    img.onload = () => resolve();
    img.onerror = () => reject(new Error('image failed to load'));
    img.src = url;
  });
}

async function showResult(job) {
  for (const u of state.blobUrls) URL.revokeObjectURL(u);
  state.blobUrls = [];
  $('mean-plddt').textContent = job.mean_plddt.toFixed(1);
  $('ptm').textContent = job.ptm === null ? 'n/a' : job.ptm.toFixed(3);
  $('seconds').textContent = `${job.seconds.toFixed(1)} s`;
  $('result-body').hidden = false;

  const structure = job.files.includes('ranked_0.pdb') ? 'ranked_0.pdb' : job.files.find((f) => f.endsWith('.pdb'));
  const pdb = await (await apiFetch(`/api/jobs/${job.id}/files/${structure}`)).text();
  const el = $('viewer');
  el.replaceChildren();
  const viewer = $3Dmol.createViewer(el, { backgroundColor: 'white' });
  viewer.addModel(pdb, 'pdb');
  // The B-factor column holds the residue's pLDDT (predict_outputs.h).
  viewer.setStyle({}, { cartoon: { colorfunc: (atom) => plddtColor(atom.b) } });
  viewer.zoomTo();
  viewer.render();
  state.viewer = viewer;
  window.foldcoreViewer = viewer;  // the browser test reads the drawing through it

  const pae = job.files.find((f) => f.startsWith('pae_') && f.endsWith('.png'));
  const waits = [];
  if (pae) waits.push(blobUrl(job.id, pae).then((u) => loadImage($('pae-img'), u)));
  else $('pae-img').alt = 'no PAE (model without the PAE head)';
  if (job.files.includes('plddt.png')) waits.push(blobUrl(job.id, 'plddt.png').then((u) => loadImage($('plddt-img'), u)));

  const list = $('downloads');
  list.replaceChildren();
  for (const f of job.files) {
    const li = document.createElement('li');
    const a = document.createElement('a');
    a.textContent = f;
    a.href = '#';
    a.addEventListener('click', async (ev) => {
      ev.preventDefault();
      const link = document.createElement('a');
      link.href = await blobUrl(job.id, f);
      link.download = `${job.name}_${f}`;
      link.click();
    });
    li.append(a);
    list.append(li);
  }
  await Promise.all(waits);
  document.body.dataset.resultReady = '1';
}

async function refreshSelected() {
  const id = state.selected;
  if (!id) return;
  let job;
  try { job = await apiJson(`/api/jobs/${id}`); } catch (e) {
    $('result-status').textContent = e.message;
    return;
  }
  if (id !== state.selected) return;
  $('result-title').textContent = `${job.name} (${job.length} residues)`;
  const pct = Math.round(job.progress * 100);
  const st = $('result-status');
  st.className = `status-${job.status}`;
  if (job.status === 'running') st.textContent = `running: ${job.stage} (${pct} %)`;
  else if (job.status === 'queued') st.textContent = `queued (#${job.queue_position})`;
  else if (job.status === 'failed') st.textContent = `failed: ${job.error}`;
  else st.textContent = job.status;
  if (job.status === 'done' && state.shownDone !== id) {
    state.shownDone = id;
    try { await showResult(job); } catch (e) { st.textContent = `could not show the result: ${e.message}`; st.className = 'error'; }
  }
}

async function loadHealth() {
  try {
    const h = await apiJson('/api/health');
    state.maxLength = h.max_length;
    $('auth').hidden = true;
    $('server-info').textContent = `${h.models.join(', ')} on ${h.device} · up to ${h.max_length} residues · ${h.queue_length} queued`;
  } catch (e) {
    $('server-info').textContent = e.message;
  }
  validate();
}

function init() {
  $('sequence').addEventListener('input', validate);
  $('submit-form').addEventListener('submit', submit);
  $('fasta-file').addEventListener('change', async () => {
    try { await readFileInto($('fasta-file'), $('sequence')); } catch (e) { $('validation').textContent = e.message; }
    validate();
  });
  $('auth-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.token = $('token').value;
    localStorage.setItem('foldcoreToken', state.token);
    loadHealth(); refreshJobs(); refreshSelected();
  });
  const m = location.hash.match(/job=([0-9a-f]+)/);
  if (m) select(m[1]);
  loadHealth();
  refreshJobs();
  setInterval(refreshJobs, 2000);
  setInterval(refreshSelected, 1000);
}

init();
