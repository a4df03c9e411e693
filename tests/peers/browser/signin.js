// Signs in through the gateway with Debian's headless Chromium, as a person would:
// open the protected URL, fill in the provider's login and consent pages, and print the
// final page's URL and text as JSON. Usage: node signin.js URL LOGIN
// Environment (optional): HOST_RESOLVER_RULES (Chromium's --host-resolver-rules, e.g.
// "MAP *.example.com 127.0.0.1"), IGNORE_HTTPS_ERRORS=1 (certificates of a test CA),
// CHOOSE (the gateway's provider chooser comes first: the label of the link to click).
'use strict';
const { chromium } = require('playwright-core');

(async () => {
  const [url, login] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--no-first-run',
           ...(process.env.HOST_RESOLVER_RULES
             ? [`--host-resolver-rules=${process.env.HOST_RESOLVER_RULES}`] : [])],
  });
  try {
    const context = await browser.newContext({
      ignoreHTTPSErrors: process.env.IGNORE_HTTPS_ERRORS === '1',
    });
    const page = await context.newPage();
    await page.goto(url, { timeout: 20000 });
    const choose = process.env.CHOOSE;
    if (choose) {
      await Promise.all([page.waitForNavigation({ timeout: 20000 }),
                         page.getByRole('link', { name: choose, exact: true }).click()]);
    }
    for (let step = 0; step < 5; step += 1) {
      const prompt = await page.$('input[name="prompt"]');
      if (!prompt) break;
      const kind = await prompt.getAttribute('value');
      if (kind === 'login') {
        await page.fill('input[name="login"]', login);
        await page.fill('input[name="password"]', 'anything');
      }
      await Promise.all([page.waitForNavigation({ timeout: 20000 }),
                         page.click('button[type="submit"], button')]);
    }
    const text = await page.innerText('body');
    const cookies = await page.context().cookies();
    console.log(JSON.stringify({ url: page.url(), text, cookies }));
  } finally {
    await browser.close();
  }
})().catch((err) => { console.error(err); process.exit(1); });
