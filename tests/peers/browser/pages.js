// Visits the gateway's own pages with Debian's headless Chromium at several widths and
// takes a full-page screenshot of each; prints what the test checks as JSON (the page's
// text, status, headers, whether it scrolls sideways, elements that must not exist).
// Usage: node pages.js SPEC.json   (spec: {signin: {url, login}, shots: [{name, url}],
//   widths: [1280, 390], out: DIR, switch: {url, login}})
'use strict';
const fs = require('fs');
const path = require('path');
const { chromium } = require('playwright-core');
const { providerPages } = require('./provider');


async function look(page, response) {
  return {
    url: page.url(),
    status: response ? response.status() : 0,
    headers: response ? await response.allHeaders() : {},
    text: await page.innerText('body'),
    sideways: await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1),
    forbidden: await page.evaluate(() => document.querySelectorAll('script,img,b,i,iframe').length),
  };
}

(async () => {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  const out = { shots: [], switched: null };
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(spec.signin.url, { timeout: 20000 });
    await providerPages(page, spec.signin.login);
    for (const shot of spec.shots) {
      for (const width of spec.widths) {
        await page.setViewportSize({ width, height: 800 });
        const response = await page.goto(shot.url, { timeout: 20000 });
        const file = path.join(spec.out, `${shot.name}-${width}.png`);
        await page.screenshot({ path: file, fullPage: true });
        out.shots.push({ name: shot.name, width, file, ...(await look(page, response)) });
      }
    }
    if (spec.schemes) {
      // the same page with the system in light and in dark mode: the page's background
      out.schemes = {};
      for (const colorScheme of ['light', 'dark']) {
        const themed = await browser.newContext({ colorScheme });
        const tab = await themed.newPage();
        await tab.goto(spec.schemes.url, { timeout: 20000 });
        await tab.screenshot({ path: path.join(spec.out, `scheme-${colorScheme}.png`) });
        out.schemes[colorScheme] = await tab.evaluate(
          () => getComputedStyle(document.body).backgroundColor);
        await themed.close();
      }
    }
    if (spec.switch) {
      // "Sign in as someone else" from a refused page, as a person would click it
      await page.setViewportSize({ width: 390, height: 800 });
      await page.goto(spec.switch.url, { timeout: 20000 });
      const seen = [];
      page.on('response', (r) => seen.push(`${r.status()} ${r.url()}`));
      await page.click('a.button:has-text("Sign in as someone else")');
      await page.waitForURL((u) => !u.href.startsWith(spec.switch.url), { timeout: 20000 })
        .catch(async (e) => { throw new Error(`still at ${page.url()}: ${seen.join(' | ')}`); });
      await page.waitForLoadState('load');
      await providerPages(page, spec.switch.login);
      const response = await page.goto(spec.switch.after, { timeout: 20000 });
      out.switched = await look(page, response);
      // and sign out from the who-am-I page: the form's redirects (provider, then the
      // destination) must pass the page's form-action; the POST's headers are kept
      // (the gateway checks its Sec-Fetch-Site and Origin)
      const posted = [];
      page.on('request', (r) => { if (r.method() === 'POST') posted.push(r); });
      await Promise.all([page.waitForNavigation({ timeout: 20000 }),
                         page.click('button:has-text("Sign out")')]);
      out.sign_out_post = posted.length ? { url: posted[0].url(),
                                            headers: await posted[0].allHeaders() } : null;
      await providerPages(page, '');
      await page.waitForLoadState('load');
      out.signed_out = { url: page.url(), text: await page.innerText('body') };
    }
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})().catch((err) => { console.error(err); process.exit(1); });
