// Loads a page through the gateway over HTTPS with Debian's headless Chromium, then has
// the page fetch many resources at once (downloads of several sizes, uploads) on the
// browser's HTTP/2 connection; prints, as JSON, what arrived and which protocol each
// request used (performance entries' nextHopProtocol).
// Usage: node h2fetch.js SPEC.json   (spec: {url, host, sizes: [n...], uploads: [n...]})
'use strict';
const fs = require('fs');
const { chromium } = require('playwright-core');

(async () => {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--no-first-run',
           `--host-resolver-rules=MAP ${spec.host} 127.0.0.1`, '--ignore-certificate-errors'],
  });
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    const response = await page.goto(spec.url, { timeout: 20000 });
    const out = await page.evaluate(async ({ sizes, uploads }) => {
      const check = (buffer) => {  // byte i of /bytes/<n> is i % 256
        const bytes = new Uint8Array(buffer);
        for (let i = 0; i < bytes.length; i += 997) if (bytes[i] !== i % 256) return false;
        return true;
      };
      const downloads = sizes.map((n) => fetch(`/bytes/${n}?n=${n}`)
        .then(async (r) => { const b = await r.arrayBuffer(); return [r.status, b.byteLength, check(b)]; })
        .catch((e) => ['error', n, String(e)]));
      const posts = uploads.map((n) => fetch(`/upload?n=${n}`, {
        method: 'POST', body: new Uint8Array(n).fill(120) })
        .then(async (r) => { const j = await r.json(); return [r.status, j.body_length, j.method]; })
        .catch((e) => ['error', n, String(e)]));
      const got = { downloads: await Promise.all(downloads), uploads: await Promise.all(posts) };
      got.protocols = performance.getEntriesByType('resource').map((e) => e.nextHopProtocol);
      got.page = performance.getEntriesByType('navigation').map((e) => e.nextHopProtocol);
      return got;
    }, { sizes: spec.sizes, uploads: spec.uploads });
    out.status = response ? response.status() : 0;
    console.log(JSON.stringify(out));
  } finally {
    await browser.close();
  }
})().catch((err) => { console.error(err); process.exit(1); });
