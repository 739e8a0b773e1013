"""Schemathesis against the real API: every operation of its OpenAPI, every check, with joins
on and a real API key, answered by the real ``online-ctr api`` process (and one worker, so
``/readyz`` can be ready) on a real redis-server.

    python -m loadtests.chaos.fuzz_api                  # 700 per operation: over 2,000 cases
    python -m loadtests.chaos.fuzz_api --max-examples 30
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from loadtests.common.processes import Stack, http_ok, scratch_dir, wait_until

#: Schemathesis's summary line, e.g. "Test cases:  2104 generated, 2104 passed, 12 skipped".
_CASES = re.compile(r"Test cases:\s+(\d+) generated(?:, (\d+) found (\d+) unique failures?)?")


@dataclass(frozen=True)
class FuzzResult:
    """What one schemathesis run found."""

    exit_status: int
    cases: int
    failing_cases: int
    unique_failures: int
    output: str


#: Per-operation expectations (a snapshot upload's 422 for bytes that are not a snapshot).
CONFIG = Path(__file__).with_name("schemathesis.toml")


#: The one API key of a fuzz run, with every scope: requests reach the routes behind the key
#: check, and the ``ignored_auth`` check sends them without it too (each must be a 401).
API_KEY = "fuzz-" + "0123456789abcdef" * 2
API_KEYS = json.dumps({API_KEY: ["predict", "learn", "admin"]})


def schemathesis_command(api_url: str, max_examples: int, seed: int) -> list[str]:
    """The ``schemathesis run`` command line, with the run's key and all checks on but one:
    deleting the service's own model (OCTR_MODEL) empties it, and it is there again at once,
    by design (the service always serves it), which the use-after-free check counts as a
    failure. Other deleted models answer 404, as tests/service/test_api_models.py checks."""
    executable = Path(sys.executable).with_name("schemathesis")
    return [
        str(executable),
        "--config-file",
        str(CONFIG),
        "run",
        f"{api_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {API_KEY}",
        "--checks",
        "all",
        "--exclude-checks",
        "use_after_free",
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        "--no-color",
        "--request-timeout",
        "10",
    ]


def parse(output: str, exit_status: int) -> FuzzResult:
    """The case and failure counts in schemathesis's summary."""
    found = _CASES.search(output)
    cases = int(found.group(1)) if found else 0
    failing = int(found.group(2) or 0) if found else 0
    unique = int(found.group(3) or 0) if found else 0
    return FuzzResult(exit_status, cases, failing, unique, output)


def run(max_examples: int, seed: int = 1) -> FuzzResult:
    """Start Redis, the API and a worker; run schemathesis against them."""
    # Joins on: every documented body is then valid (a prediction_id on a model without joins
    # is a 422 the schema cannot express), and the join paths are fuzzed too.
    joins = {"OCTR_JOIN_WINDOW_S": "600"}
    with scratch_dir("fuzz") as scratch, Stack(Path(scratch), **joins) as stack:
        api_url = stack.start_api(OCTR_AUTH="on", OCTR_API_KEYS=API_KEYS)
        stack.start_workers(1)
        wait_until(lambda: http_ok(f"{api_url}/readyz"), 60, "a worker's heartbeat")
        finished = subprocess.run(
            schemathesis_command(api_url, max_examples, seed),
            capture_output=True,
            text=True,
            check=False,
            cwd=scratch,  # its .schemathesis cache stays out of the repository
        )
        stack.check_alive()
    return parse(finished.stdout + finished.stderr, finished.returncode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=700, help="per operation")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = run(args.max_examples, args.seed)
    print(result.output)
    print(
        f"schemathesis: {result.cases} cases, {result.failing_cases} failing, "
        f"{result.unique_failures} unique failures (exit status {result.exit_status})"
    )
    return 0 if result.exit_status == 0 and result.cases else 1


if __name__ == "__main__":
    sys.exit(main())
