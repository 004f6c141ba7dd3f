// Browser test of the `foldcore serve` page, driven by test_serve_browser.cpp: headless Chromium
// (Debian's) through the DevTools protocol with puppeteer-core (web/node_modules, pinned by
// web/package-lock.json).
//   node serve_browser.mjs <url> <screenshot.png> <web_dir> <example.fasta>
// Checks: the page loads without script errors; live validation flags a bad letter and disables
// the button; the example sequence is submitted; the job appears in the list and reaches done;
// the 3D viewer drew a non-empty canvas (pixels other than the background); the PAE and pLDDT
// images loaded; the scores are shown; at a phone's width nothing is wider than the screen.
// Saves a laptop and a phone screenshot. Exit 0 only when every check passed.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [url, screenshot, webDir, fastaPath] = process.argv.slice(2);
if (!url || !screenshot || !webDir || !fastaPath) {
  console.error('usage: node serve_browser.mjs <url> <screenshot.png> <web_dir> <example.fasta>');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(webDir), 'package.json'));
const puppeteer = require('puppeteer-core');

const candidates = [process.env.CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
const executablePath = candidates.find((p) => p && fs.existsSync(p));
if (!executablePath) {
  console.error('FAIL: no Chromium found (scripts/setup.sh installs Debian\'s chromium; or set CHROMIUM)');
  process.exit(3);
}

const fail = (msg) => { throw new Error(msg); };
const browser = await puppeteer.launch({
  executablePath,
  headless: true,
  // --no-sandbox: CI runs as root; SwiftShader: WebGL without a GPU.
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--enable-unsafe-swiftshader', '--use-angle=swiftshader',
         '--ignore-gpu-blocklist'],
});
let status = 0;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 1100 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('response', (r) => { if (r.status() >= 400) errors.push(`HTTP ${r.status()} for ${r.url()}`); });
  await page.goto(url, { waitUntil: 'load', timeout: 30000 });
  // /api/health answered: the length limit is shown.
  await page.waitForFunction(() => /up to \d+/.test(document.getElementById('validation').textContent), { timeout: 30000 });

  // Live validation: a digit is flagged at once and the button stays disabled.
  await page.type('#sequence', 'MKT1A');
  const bad = await page.evaluate(() => ({ text: document.getElementById('validation').textContent,
                                           disabled: document.getElementById('submit-button').disabled }));
  if (!bad.text.includes("'1' at 4") || !bad.disabled) fail(`validation did not flag a bad letter: ${JSON.stringify(bad)}`);
  await page.$eval('#sequence', (el) => { el.value = ''; });

  const fasta = fs.readFileSync(fastaPath, 'utf8');
  const residues = fasta.split('\n').filter((l) => !l.startsWith('>')).join('').trim().length;
  await page.type('#sequence', fasta);
  const ok = await page.evaluate(() => ({ text: document.getElementById('validation').textContent,
                                          disabled: document.getElementById('submit-button').disabled }));
  if (ok.disabled || !ok.text.includes(`${residues} residues`)) fail(`valid FASTA not accepted: ${JSON.stringify(ok)}`);
  await page.click('#submit-button');

  // The job shows up in the list, then the result view completes (viewer drawn, images loaded).
  await page.waitForSelector('#job-rows tr', { timeout: 30000 });
  await page.waitForFunction(() => document.body.dataset.resultReady === '1', { timeout: 240000, polling: 250 });
  // The list refreshes on its own (every 2 s): it must come to show the job as done.
  try {
    await page.waitForFunction(() => [...document.querySelectorAll('#job-rows tr')].some((r) => r.dataset.status === 'done'),
                               { timeout: 15000, polling: 250 });
  } catch (e) {
    const listed = await page.$$eval('#job-rows tr', (rows) => rows.map((r) => r.dataset.status));
    fail(`job list shows no done job: ${listed}`);
  }

  const result = await page.evaluate(async () => {
    const canvas = document.querySelector('#viewer canvas');
    const out = { canvas: !!canvas, width: canvas ? canvas.width : 0, height: canvas ? canvas.height : 0 };
    // Render through 3Dmol and count pixels that are not the white background.
    const img = new Image();
    await new Promise((resolve, reject) => { img.onload = resolve; img.onerror = reject; img.src = window.foldcoreViewer.pngURI(); });
    const c2 = document.createElement('canvas');
    c2.width = img.width; c2.height = img.height;
    const ctx = c2.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const px = ctx.getImageData(0, 0, c2.width, c2.height).data;
    let coloured = 0;
    const colours = new Set();
    for (let i = 0; i < px.length; i += 4) {
      if (px[i + 3] > 0 && (px[i] < 245 || px[i + 1] < 245 || px[i + 2] < 245)) {
        coloured++;
        colours.add((px[i] >> 4) * 256 + (px[i + 1] >> 4) * 16 + (px[i + 2] >> 4));
      }
    }
    out.coloured_fraction = coloured / (px.length / 4);
    out.distinct_colours = colours.size;
    const pae = document.getElementById('pae-img');
    const plddt = document.getElementById('plddt-img');
    out.pae = { complete: pae.complete, w: pae.naturalWidth, h: pae.naturalHeight };
    out.plddt = { complete: plddt.complete, w: plddt.naturalWidth, h: plddt.naturalHeight };
    out.mean_plddt = document.getElementById('mean-plddt').textContent;
    out.ptm = document.getElementById('ptm').textContent;
    out.downloads = document.querySelectorAll('#downloads a').length;
    return out;
  });
  console.log(JSON.stringify(result));
  if (!result.canvas || result.width === 0 || result.height === 0) fail('no viewer canvas');
  if (!(result.coloured_fraction > 0.001) || result.distinct_colours < 2) fail('the viewer canvas is empty');
  if (!result.pae.complete || result.pae.w === 0) fail('the PAE image did not load');
  if (!result.plddt.complete || result.plddt.w === 0) fail('the pLDDT image did not load');
  if (!/^\d+(\.\d)?$/.test(result.mean_plddt)) fail(`mean pLDDT not shown: ${result.mean_plddt}`);
  if (!/^\d\.\d{3}$/.test(result.ptm)) fail(`pTM not shown: ${result.ptm}`);
  if (result.downloads < 5) fail(`only ${result.downloads} download links`);
  if (errors.length) fail(`script errors on the page: ${errors.join(' | ')}`);
  fs.mkdirSync(path.dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot, fullPage: true });

  // A phone's width: one column, nothing wider than the screen (no sideways scrolling).
  await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await new Promise((r) => setTimeout(r, 300));
  const phone = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
                                             viewer: document.getElementById('viewer').getBoundingClientRect().width }));
  if (phone.scroll > phone.inner + 1) fail(`the page is wider than a phone screen: ${JSON.stringify(phone)}`);
  if (phone.viewer < 200) fail(`the viewer is too narrow on a phone: ${JSON.stringify(phone)}`);
  const phoneShot = screenshot.replace(/\.png$/, '_phone.png');
  await page.screenshot({ path: phoneShot, fullPage: true });
  console.log(`PASS: screenshots ${screenshot} ${phoneShot}`);
} catch (e) {
  console.error(`FAIL: ${e.message}`);
  status = 1;
} finally {
  await browser.close();
}
process.exit(status);
