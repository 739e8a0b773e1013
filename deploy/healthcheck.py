#!/usr/bin/env python3
"""Container health check: exit 0 if an HTTP GET of the URL answers 2xx within the timeout.

The URL is the first argument, else ``HEALTHCHECK_URL``; the slim image has no curl or wget.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000/healthz"
TIMEOUT_S = 2.0


def main(argv: list[str]) -> int:
    """Probe the URL once; the exit status is what Docker's HEALTHCHECK reads."""
    url = argv[1] if len(argv) > 1 else os.environ.get("HEALTHCHECK_URL", DEFAULT_URL)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            status = response.status
    except (urllib.error.URLError, OSError) as error:
        sys.stderr.write(f"unhealthy: {url}: {error}\n")
        return 1
    if not 200 <= status < 300:
        sys.stderr.write(f"unhealthy: {url}: HTTP {status}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
