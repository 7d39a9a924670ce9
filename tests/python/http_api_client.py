"""A client of the tasks HTTP API written with Python's standard library only (urllib),
as a caller in another language would write one. Run by tests/tests/http_api.rs against a
live API with a worker; exits non-zero on the first failed check.

Environment: TASKS_API (base URL), TASKS_NAMESPACE, TASKS_TOKEN (operates on the
namespace), TASKS_OTHER_TOKEN (a token of another namespace only).
"""

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ["TASKS_API"]
NAMESPACE = urllib.parse.quote(os.environ["TASKS_NAMESPACE"], safe="")
TOKEN = os.environ["TASKS_TOKEN"]
OTHER_TOKEN = os.environ["TASKS_OTHER_TOKEN"]


def call(method, path, body=None, token=TOKEN, timeout=60):
    """Returns (status, content type, parsed JSON body or None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            return response.status, response.headers.get("Content-Type"), (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, error.headers.get("Content-Type"), (json.loads(raw) if raw else None)


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


ns = f"/v1/namespaces/{NAMESPACE}"

# Start a run and wait for its result (a long poll).
status, _, run = call("POST", f"{ns}/workflows/http-double/runs", {"input": 21})
check(status == 201 and run["status"] in ("pending", "running"), f"started http-double: {status} {run}")
status, _, run = call("GET", f"{ns}/runs/{run['id']}/result?timeout=30")
check(status == 200 and run["status"] == "completed" and run["output"] == 42, f"waited for its result: {run}")

# A run that waits for an event and publishes its stage.
status, _, order = call("POST", f"{ns}/workflows/http-order/runs", {"input": {"item": "tea", "quantity": 2}})
check(status == 201, f"started http-order: {status} {order}")
run_path = f"{ns}/runs/{order['id']}"
status, _, stage = call("GET", f"{run_path}/state/stage/wait?after=0&timeout=30")
check(status == 200 and stage["value"] == "awaiting approval", f"read its published state: {stage}")

# An event whose payload breaks the schema: refused with its path.
status, ctype, problem = call("POST", f"{run_path}/events", {"topic": "http-approval", "payload": {"approved": "yes"}})
check(status == 422 and ctype == "application/problem+json", f"a bad payload is refused: {status} {ctype}")
pointers = sorted(error["pointer"] for error in problem["errors"])
check(problem["type"] == "urn:tasks:problem:invalid-event" and "/approved" in pointers, f"with its paths: {problem}")

status, _, sent = call("POST", f"{run_path}/events", {"topic": "http-approval", "payload": {"approved": True, "by": "py"}, "dedup_key": "once"})
check(status == 201 and sent["woke"] in (True, False) and not sent["duplicate"], f"sent the approval: {sent}")
status, _, run = call("GET", f"{run_path}/result?timeout=30")
check(run["status"] == "completed" and run["output"] == "2 x tea, approved by py", f"the run used it: {run}")
status, _, stage = call("GET", f"{run_path}/state/stage")
check(status == 200 and stage["value"] == "approved" and stage["version"] == 2, f"its last state: {stage}")
status, _, steps = call("GET", f"{run_path}/steps")
check(status == 200 and any(step["name"] == "http_reserve" for step in steps["steps"]), "its steps")

# A bad input: a problem document with every path, and nothing stored.
status, ctype, problem = call("POST", f"{ns}/workflows/http-order/runs", {"input": {"item": "", "quantity": 11}})
check(status == 422 and ctype == "application/problem+json", f"a bad input is refused: {status} {ctype}")
pointers = sorted(error["pointer"] for error in problem["errors"])
check(problem["type"] == "urn:tasks:problem:invalid-input" and pointers == ["/item", "/quantity"], f"with its paths: {problem}")
status, _, page = call("GET", f"{ns}/runs?workflow=http-order")
check(status == 200 and [run["id"] for run in page["runs"]] == [order["id"]], f"and nothing stored: {page}")

# A token of another namespace sees nothing, not even that the run exists.
status, _, hidden = call("GET", run_path, token=OTHER_TOKEN)
status_missing, _, missing = call("GET", f"{ns}/runs/00000000-0000-7000-8000-000000000000")
check(status == 404 and status_missing == 404 and hidden["type"] == missing["type"], f"another namespace's token: {status} {hidden}")
status, _, _ = call("GET", f"{ns}/runs", token=OTHER_TOKEN)
check(status == 404, "nor the namespace's runs")
status, _, _ = call("POST", f"{ns}/workflows/http-double/runs", {"input": 1}, token=OTHER_TOKEN)
check(status == 404, "nor can it start one there")
status, _, _ = call("GET", f"{ns}/runs", token="wrong-token-0000000000")
check(status == 401, "a wrong token is unauthorized")

print("all checks passed")
