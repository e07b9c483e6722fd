#!/usr/bin/env bash
# The coding agents' CLIs, pinned, for the one stage that runs them: the e2e scenario (molecule/e2e/
# side_effect_agents.yml runs them headless against the lab box). `make test` runs it as its stage `agents`,
# `make agents` alone; `make demo` does not need them (it prints how to get them). Installed into the shared cache
# beside the wheelhouses (about 760 MB, native binaries), again only when a pin changes. Node and npm come from
# the distribution (apt) where they are missing. A registry that refuses TLS (a TLS-inspecting proxy) ends with
# a message naming the settings that fix it.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
agents=$GPUHOST_CACHE/agents
agents_pins="@anthropic-ai/claude-code@2.1.328 @openai/codex@0.169.0"
if [ "$(cat "$agents/.pins" 2>/dev/null)" = "$agents_pins" ] && [ -x "$agents/node_modules/.bin/claude" ]; then
  step "coding agents' CLIs up to date in $agents"
  exit 0
fi
if ! command -v npm >/dev/null; then
  step "nodejs and npm from the distribution (apt-get; missing on this host)"
  apt_get install -y -qq nodejs npm >/dev/null || { apt_get update -qq && apt_get install -y -qq nodejs npm >/dev/null; }
fi
step "coding agents' CLIs from npm into $agents ($agents_pins)"
log=$(mktemp)
# shellcheck disable=SC2086  # the pins are words
if ! npm install --no-audit --no-fund --loglevel=error --prefix "$agents" $agents_pins 2>&1 | tee "$log"; then
  if grep -qE 'SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|CERT_|unable to get local issuer' "$log"; then
    cat >&2 <<EOT

npm's registry refused TLS: a proxy on the way presents a certificate npm does not trust. Give npm the proxy
and its CA, then run this again (bash scripts/agents.sh):
  export HTTPS_PROXY=http://proxy.example:3128        # the proxy, if it is not transparent (HTTP_PROXY too)
  export NODE_EXTRA_CA_CERTS=/path/to/proxy-ca.pem     # Node's extra CA file
  npm config set cafile /path/to/proxy-ca.pem          # npm's cafile (or NPM_CONFIG_CAFILE in the environment)
Only the e2e scenario's agent stage needs these CLIs; make demo runs without them.
EOT
  fi
  rm -f "$log"
  exit 1
fi
rm -f "$log"
echo "$agents_pins" >"$agents/.pins"
