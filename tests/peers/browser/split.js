// One browser across two proxies of a split deployment, with Debian's headless Chromium:
// sign in through proxy A, open proxy B's route (a hand-off through authenticate, no
// provider page), sign out through A, then open B's route again until it is no longer
// served (B still holds its own cookie) or `window_ms` has passed. Prints JSON.
// Usage: node split.js SPEC.json
//   spec: {signin: {url, login}, other: URL, signout: URL, issuer: URL, window_ms: N}
'use strict';
const fs = require('fs');
const { chromium } = require('playwright-core');
const { providerPages } = require('./provider');

async function look(page, response) {
  return { url: page.url(), status: response ? response.status() : 0,
           text: await page.innerText('body') };
}

(async () => {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  const out = {};
  try {
    const page = await (await browser.newContext()).newPage();
    const visited = [];
    page.on('response', (r) => visited.push(r.url()));

    await page.goto(spec.signin.url, { timeout: 20000 });
    await providerPages(page, spec.signin.login);
    out.a = await look(page, null);

    visited.length = 0;
    out.b = await look(page, await page.goto(spec.other, { timeout: 20000 }));
    out.b.provider_pages = visited.filter((u) => u.startsWith(spec.issuer)).length;
    out.b.login_form = Boolean(await page.$('input[name="login"]'));

    await page.goto(spec.signout, { timeout: 20000 });
    await Promise.all([page.waitForNavigation({ timeout: 20000 }),
                       page.click('button:has-text("Sign out")')]);
    await providerPages(page, '');
    await page.waitForLoadState('load');
    const ended = Date.now();
    out.signed_out = { url: page.url() };
    out.cookies_after = (await page.context().cookies()).map((c) => `${c.name}@${c.domain}`);

    const other = new URL(spec.other).origin;
    for (let round = 0; round < 100; round += 1) {
      const response = await page.goto(spec.other, { timeout: 20000 });
      const seen = await look(page, response);
      seen.elapsed_ms = Date.now() - ended;
      seen.login_form = Boolean(await page.$('input[name="login"]'));
      out.after = seen;
      const served = seen.url.startsWith(other) && seen.status === 200;
      if (!served || seen.elapsed_ms > spec.window_ms) break;
      await new Promise((done) => setTimeout(done, 50));
    }
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})().catch((err) => { console.error(err); process.exit(1); });
