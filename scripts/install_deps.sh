#!/usr/bin/env bash
# Installs the trainer's build and test dependencies from Debian packages.
# Idempotent: packages already present are skipped, so a second run is quick.
#   scripts/install_deps.sh            build + test dependencies
#   WITH_TORCH=1 scripts/install_deps.sh   also python3-torch for the PyTorch cross-checks
#   WITH_PYPI=1 scripts/install_deps.sh    also the tests' PyPI packages, for the python3 on
#                                          PATH: pyarrow, zstandard and tokenizers
#                                          (prepare_data.py's Parquet, .zst and
#                                          tokenizer.json inputs) and tensorboard (its reader
#                                          checks log.tensorboard's event files)
set -euo pipefail

PYPI_PACKAGES=(pyarrow zstandard tokenizers tensorboard)
install_pypi_packages() {
  if python3 -c "import pyarrow, zstandard, tokenizers, tensorboard" 2>/dev/null; then
    echo "install_deps: ${PYPI_PACKAGES[*]} already installed"
    return
  fi
  echo "install_deps: pip installing ${PYPI_PACKAGES[*]} for $(command -v python3)"
  python3 -m pip install --quiet "${PYPI_PACKAGES[@]}" ||
    python3 -m pip install --quiet --break-system-packages "${PYPI_PACKAGES[@]}"
}

packages=(
  build-essential cmake pkg-config ccache
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
else
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  echo "install_deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "install_deps: done"
fi
if [[ "${WITH_PYPI:-0}" == "1" ]]; then
  install_pypi_packages
fi
