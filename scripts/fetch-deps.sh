#!/usr/bin/env bash
# Download the libcheck .deb files into .deps/ (git-ignored) so the GPU box,
# which has no network and no libcheck, can unpack them (scripts/gpu-test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
apt-get download check libsubunit-dev libsubunit0
