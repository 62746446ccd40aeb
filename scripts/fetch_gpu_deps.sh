#!/usr/bin/env bash
# Downloads, on this Debian 12 (bookworm) machine, the .deb files that
# scripts/gpu_check.sh unpacks on a GPU machine that has the CUDA toolkit,
# a C++ compiler and CMake but none of the trainer's other build
# dependencies and no network. Nothing is installed here: `apt-get download`
# only fetches the archives into .gpu_deps/ (ignored by git; carry it to the
# GPU machine along with the working tree).
#
#   scripts/fetch_gpu_deps.sh            # fetch into .gpu_deps/
#   scripts/fetch_gpu_deps.sh --list     # print the package list and exit
#
# The list was found by trial (gpu_check.sh --trial unpacks it into a fresh
# prefix and builds against it with the system copies hidden):
#   * build: headers, CMake package files, the MPI compiler wrapper, and
#     GoogleTest's static libraries, without the -dev packages' own -dev
#     dependencies (nothing here includes hwloc, libevent or verbs headers);
#   * run: the shared libraries the test programs load, with their library
#     closure (apt's Depends, first alternative), less what any Linux with a
#     C++ compiler already has (libc6, libstdc++6, libgcc-s1, libgomp1,
#     libatomic1, zlib1g, libuuid1: shipping older copies of those would
#     shadow the host's newer ones) and the packages that only serve
#     maintainer scripts (adduser, passwd, PAM, audit, SELinux, Berkeley DB).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.gpu_deps"

build_packages=(
  libopenmpi-dev openmpi-bin openmpi-common
  libyaml-cpp-dev
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev googletest
  nlohmann-json3-dev
  libopenblas-dev libopenblas-openmp-dev libopenblas0
)
runtime_packages=(
  libopenmpi3 libyaml-cpp0.7 libspdlog1.10 libfmt9 libopenblas0-openmp
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libhwloc15 libhwloc-plugins
  libibverbs1 ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200 libpmix2
  libpsm-infinipath1 libpsm2-2 libucx0 libmunge2 libnuma1 libpciaccess0
  libgfortran5 libquadmath0
  libx11-6 libx11-data libxcb1 libxau6 libxdmcp6 libxext6 libxnvctrl0 ocl-icd-libopencl1
)

if [[ "${1:-}" == "--list" ]]; then
  printf '%s\n' "${build_packages[@]}" "${runtime_packages[@]}"
  exit 0
fi

if ! command -v apt-get >/dev/null || ! grep -q bookworm /etc/os-release; then
  echo "fetch_gpu_deps: needs Debian 12 (bookworm) with apt-get; this is $(. /etc/os-release; echo "$PRETTY_NAME")" >&2
  exit 1
fi

mkdir -p "$dest"
cd "$dest"
rm -f ./*.deb
if ! apt-get download "${build_packages[@]}" "${runtime_packages[@]}" 2>download.log; then
  # A stale package list: refresh it once and try again.
  apt-get update -q >/dev/null
  apt-get download "${build_packages[@]}" "${runtime_packages[@]}"
fi
rm -f download.log
ls -1 ./*.deb | sed 's|^\./||' > MANIFEST
n=$(wc -l < MANIFEST)
size=$(du -sh --apparent-size . | cut -f1)
echo "fetch_gpu_deps: $n packages, $size in $dest"
