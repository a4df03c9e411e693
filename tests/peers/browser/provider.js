// node-oidc-provider's dev pages as a person fills them: the login form, consent, and
// the "sign out?" page (ending its session of another account, or the end-session step
// of the gateway's sign-out). Shared by pages.js and split.js.
'use strict';

async function providerPages(page, login) {
  // node-oidc-provider's dev login and consent forms, as signin.js fills them
  for (let step = 0; step < 5; step += 1) {
    if (await page.$('input[name="logout"], button[name="logout"]')) {
      // the provider's "sign out?" page (ending its session of another account, or the
      // end-session step of the gateway's sign-out)
      const yes = (await page.$('button[name="logout"][value="yes"]'))
        || (await page.$('button[type="submit"], button'));
      await Promise.all([page.waitForNavigation({ timeout: 20000 }), yes.click()]);
      continue;
    }
    const prompt = await page.$('input[name="prompt"]');
    if (!prompt) return;
    if ((await prompt.getAttribute('value')) === 'login') {
      await page.fill('input[name="login"]', login);
      await page.fill('input[name="password"]', 'anything');
    }
    await Promise.all([page.waitForNavigation({ timeout: 20000 }),
                       page.click('button[type="submit"], button')]);
  }
}

module.exports = { providerPages };
