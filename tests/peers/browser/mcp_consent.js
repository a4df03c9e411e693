// The person's browser in an MCP client's authorization, with Debian's headless Chromium:
// open the authorization URL, sign in at the provider, press the gateway's consent button
// (DECISION=approve, the default, or deny) and wait until the browser reaches the client's
// loopback callback (http://127.0.0.1:PORT/callback). Prints {ok, url, consent, text} as
// JSON (and the cookies). Usage: node mcp_consent.js URL LOGIN (tests/support/mcp_browser.py --chromium).
'use strict';
const { chromium } = require('playwright-core');

const APPROVE = /allow|approve|accept|authori[sz]e|grant|yes/i;
const REFUSE = /deny|refuse|decline|cancel|reject|\bno\b/i;

function atCallback(url) {
  const u = new URL(url);
  return u.hostname === '127.0.0.1' && u.pathname === '/callback';
}

(async () => {
  const [url, login] = process.argv.slice(2);
  const approve = (process.env.DECISION || 'approve') === 'approve';
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  let consent = '';
  try {
    const page = await (await browser.newContext()).newPage();
    await page.goto(url, { timeout: 20000 });
    for (let step = 0; step < 8 && !atCallback(page.url()); step += 1) {
      const prompt = await page.$('input[name="prompt"]');
      if (prompt) {
        if (await prompt.getAttribute('value') === 'login') {
          await page.fill('input[name="login"]', login);
          await page.fill('input[name="password"]', 'anything');
        }
        await Promise.all([page.waitForNavigation({ timeout: 20000 }),
                           page.click('button[type="submit"], button')]);
        continue;
      }
      const forms = await page.$$('form[action*="/mcp/consent"]');
      if (!forms.length) break;
      consent = await page.innerText('body');
      let chosen = null;
      for (const form of forms) {
        const decision = await form.$eval('input[name="decision"]', (e) => e.value).catch(() => '');
        for (const button of await form.$$('button, input[type="submit"]')) {
          const says = `${decision} ${await button.getAttribute('name') || ''} ${await button.getAttribute('value') || ''} ${await button.innerText().catch(() => '')}`;
          if (approve ? (APPROVE.test(says) && !REFUSE.test(says)) : REFUSE.test(says)) {
            chosen = chosen || button;
          }
        }
      }
      if (!chosen) throw new Error(`no ${approve ? 'approve' : 'deny'} button on the consent page`);
      await Promise.all([page.waitForURL((u) => !String(u).includes('/mcp/consent'), { timeout: 20000 }),
                         chosen.click()]);
    }
    const text = await page.innerText('body').catch(() => '');
    const cookies = await page.context().cookies();
    console.log(JSON.stringify({ ok: atCallback(page.url()), url: page.url(), consent, text, cookies }));
  } finally {
    await browser.close();
  }
})().catch((err) => { console.error(err); process.exit(1); });
