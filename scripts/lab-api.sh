#!/usr/bin/env bash
# Call the vLLM API inside a lab box (the boxes have no network of their own):
#   scripts/lab-api.sh BOX PATH [JSON_BODY]
# A server with an API key: export VLLM_API_KEY (the variable the agents' configs name); it is sent as
# Authorization: Bearer, passed into the box through podman's environment (never in an argv).
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
box=${1:?box}; path=${2:?path}; body=${3:-}
podman exec -i -e VLLM_API_KEY "$box" python3 - "$path" "$body" <<'PY'
import json, os, sys, urllib.request
path, body = sys.argv[1], sys.argv[2]
headers = {"Content-Type": "application/json"}
if os.environ.get("VLLM_API_KEY"):
    headers["Authorization"] = "Bearer " + os.environ["VLLM_API_KEY"]
req = urllib.request.Request("http://127.0.0.1:8000" + path, data=body.encode() if body else None, headers=headers)
try:
    with urllib.request.urlopen(req, timeout=120) as r:
        text = r.read().decode()
except urllib.error.HTTPError as e:
    text = e.read().decode()
try:
    print(json.dumps(json.loads(text), indent=2))
except ValueError:
    print(text)
PY
