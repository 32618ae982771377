"""Drive a scenario with wrk (Debian's `wrk`): a C load generator, so that the client takes
little of the CPU it shares with the server and adds no queueing of its own to the figures.

Each of ``clients`` connections sends its next request as soon as the answer is read (closed
loop). The requests are made beforehand by the scenario's request maker (different personas,
tokens and jobs) and replayed round-robin; wrk reports the latency percentiles.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.api_latency.load import ScenarioResult

HttpRequest = tuple[str, str, dict[str, str], bytes | None]
PREPARED_REQUESTS = 4000

LUA_SCRIPT = r"""
local requests = {}
local position = 0
local thread_count = 0

function setup(thread)
  thread:set("offset", thread_count * 997)
  thread_count = thread_count + 1
end

function init(args)
  for _, spec in ipairs(dofile(args[1])) do
    table.insert(requests, wrk.format(spec[1], spec[2], spec[3], spec[4]))
  end
  position = offset % #requests
end

function request()
  position = position % #requests + 1
  return requests[position]
end

function done(summary, latency, _)
  local errors = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "status_errors": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p95_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, errors.status,
    errors.connect + errors.read + errors.write + errors.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max))
end
"""


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def _lua_string(text: str) -> str:
    assert "]==]" not in text
    return f"[==[{text}]==]"


def _lua_requests(requests: list[HttpRequest]) -> str:
    entries = []
    for method, path, headers, body in requests:
        header_table = ", ".join(
            f"[ {_lua_string(k)} ] = {_lua_string(v)}" for k, v in headers.items()
        )
        body_text = _lua_string(body.decode()) if body else "nil"
        entries.append(
            f"{{{_lua_string(method)}, {_lua_string(path)}, {{{header_table}}}, {body_text}}}"
        )
    return "return {\n" + ",\n".join(entries) + "\n}\n"


def _run_wrk(port: int, script: Path, requests_file: Path, clients: int, seconds: int) -> dict:
    command = [
        "wrk", "--threads", "2", "--connections", str(clients), "--duration", f"{seconds}s",
        "--timeout", "30s", "--script", str(script), f"http://127.0.0.1:{port}/",
        "--", str(requests_file),
    ]  # fmt: skip
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def run_scenario_wrk(
    name: str,
    port: int,
    make_request: Callable[[random.Random], HttpRequest],
    clients: int,
    seconds: int,
    warmup_seconds: int,
    seed: int = 7,
) -> ScenarioResult:
    """Warm up, then measure ``seconds`` of closed-loop load from ``clients`` connections."""
    rng = random.Random(seed)
    prepared = [make_request(rng) for _ in range(PREPARED_REQUESTS)]
    with tempfile.TemporaryDirectory() as directory:
        script = Path(directory) / "replay.lua"
        script.write_text(LUA_SCRIPT)
        requests_file = Path(directory) / "requests.lua"
        requests_file.write_text(_lua_requests(prepared))
        if warmup_seconds:
            _run_wrk(port, script, requests_file, clients, warmup_seconds)
        figures = _run_wrk(port, script, requests_file, clients, seconds)
    return ScenarioResult(
        name=name,
        requests=figures["requests"],
        errors=figures["status_errors"] + figures["socket_errors"],
        seconds=figures["duration_us"] / 1e6,
        p50_ms=figures["p50_us"] / 1000,
        p95_ms=figures["p95_us"] / 1000,
        p99_ms=figures["p99_us"] / 1000,
        max_ms=figures["max_us"] / 1000,
        details={"load_generator": "wrk"},
    )
