#!/usr/bin/env bash
# Installs the trainer's build and test dependencies from Debian packages.
# Idempotent: packages already present are skipped, so a second run is quick.
#   scripts/install_deps.sh            build + test dependencies
#   WITH_TORCH=1 scripts/install_deps.sh   also python3-torch for the PyTorch cross-checks
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev libspdlog-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libopenblas-dev libopenblas-openmp-dev
  python3 python3-matplotlib
)
if [[ "${WITH_TORCH:-0}" == "1" ]]; then
  packages+=(python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install_deps: done"
