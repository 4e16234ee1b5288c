#!/usr/bin/env bash
# The wheels scripts/device_run.sh installs on a device machine (no package registry there), fetched here into
# .whl/ (git-ignored; name it in the device tool's carry): kimitui's own dependencies at the versions its tests
# use, supervisor, transformers serve's packages (fastapi below 0.137: later ones import OpenTelemetry, which the
# machine lacks, and `transformers serve` then dies at start), nvitop and pyte for benchmarks/vs_nvitop.py.
# typing_extensions is never carried (the machine's torch brings its own). Usage: bash scripts/device_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_12_x86_64 -d .whl \
  textual==8.2.8 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 platformdirs==4.14.9 \
  linkify-it-py==2.2.0 uc-micro-py==2.0.0 textual-plotext==1.0.1 plotext==5.3.2 asyncssh==2.24.1 \
  cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 httpx==0.29.0 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 \
  sniffio==1.3.1 idna==3.20 certifi==2026.10.19.post1 prometheus_client==0.26.0 nvidia-ml-py==13.615.71 \
  supervisor==4.3.0 fastapi==0.136.3 starlette==1.10.0 uvicorn==0.55.0 pydantic==2.14.4 pydantic_core==2.50.5 \
  annotated-types==0.8.0 annotated-doc==0.0.7 typing-inspection==0.4.5 openai==3.63.0 httpx2==2.17.0 \
  httpcore2==2.17.0 truststore distro jiter==0.19.0 nvitop psutil==7.2.2 pyte wcwidth
du -sh .whl
