"""The image's HEALTHCHECK: GET the gateway's /ping on its own listener; exit 0 on 200.

The listener is where the configuration says (address, TLS or not), which this probe
cannot know without loading the whole configuration every interval, so it is told:
GATEWAY_HEALTHCHECK_URL, by default http://127.0.0.1:8080/ping. It runs with
``python -I -S`` (standard library only: starts in milliseconds). An https URL is not
verified: the probe talks to its own process over loopback, by address, not by name.
"""

import os
import ssl
import sys
import urllib.request

URL = os.environ.get("GATEWAY_HEALTHCHECK_URL") or "http://127.0.0.1:8080/ping"


def main() -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(URL, timeout=4) as response:
            status = response.status
    except OSError as err:  # urllib's errors (refused, timeout, HTTP error) are OSErrors
        print(f"gateway-healthcheck: {URL}: {err}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"gateway-healthcheck: {URL}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
