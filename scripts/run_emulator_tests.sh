#!/usr/bin/env bash
# The CUDA backend on the emulated device (docs/EMULATOR.md): the part of the
# test command (scripts/run_tests.sh) that makes the GPU code run without a
# GPU. Five phases, each printed with its time:
#   1. build-emu/: the whole project with -DTRAINER_CUDA_EMULATOR=ON, then
#      `ctest -L emulator -LE on_demand`: every tests/cuda test, the emulator's own tests,
#      the NCCL and staged-CUDA mesh tests under mpirun, training runs
#      against the CPU backend; then the kernel tests once more with each
#      warp run to its next barrier before the next (GT_EMU_THREAD_ORDER=warps);
#   2. build-emu-asan/: the kernel and emulator tests under AddressSanitizer
#      and UBSan's alignment check, with blocks and streams in reverse order
#      and each block's threads in a seeded random order between barriers
#      (small shapes, GT_TEST_SHAPES=small: phase 1 ran the full ones);
#   3. build-emu-tsan/: the attention, LayerNorm, cross-entropy and embedding
#      tests under ThreadSanitizer (small shapes: GT_TEST_SHAPES=small);
#   4. tests/emulator/planted_bugs.py: known GPU bugs planted in copies of the
#      sources, each caught, with what caught it; then a sample of
#      tests/emulator/barrier_sweep.py: 2 of the kernels' barriers, drawn
#      with the commit's seed, each removed in turn and caught (or known
#      uncaught, with the reason);
#   5. scripts/gpu_check.sh --rehearse: every stage of the GPU one-shot on the
#      emulated device with 124M shrunk, so the command lines a lent GPU will
#      run have all run here first (about 6 minutes on 2 cores).
# Needs NVIDIA's CUDA headers (not nvcc, not a GPU). Usage:
#   scripts/run_emulator_tests.sh            all five
#   scripts/run_emulator_tests.sh 1 3        only phases 1 and 3
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS="${JOBS:-$(nproc)}"
EMU="${EMU_BUILD_DIR:-build-emu}"
ASAN="${EMU_BUILD_DIR:-build-emu}-asan"
TSAN="${EMU_BUILD_DIR:-build-emu}-tsan"
PHASES="${*:-1 2 3 4 5}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The CPU twins are references here: one thread each, so that the sanitizers
# see no OpenMP pool (whose barriers TSan cannot see) and runs stay steady.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

start=$SECONDS
phase() { echo "== emulator: $* (at $((SECONDS - start)) s)"; }
wants() { [[ " $PHASES " == *" $1 "* ]]; }
# Sanitizer builds: -O1 -g1 compiles in half the time of -O2 -g and still
# names every line in a report.
SAN_ARGS=(-DTRAINER_CUDA_EMULATOR=ON -DTRAINER_EMU_KERNELS_ONLY=ON
          -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")

if wants 1 || wants 4 || wants 5; then
  phase "1. build the CUDA backend on the emulated device ($EMU)"
  # -O1: compiles in about half the time of -O3; the emulator's time goes to
  # switching fibers, not to the kernels' arithmetic.
  cmake -S . -B "$EMU" -DTRAINER_CUDA_EMULATOR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG"
  cmake --build "$EMU" -j "$JOBS" --target gt_cuda_tests gt_emu_tests gt_mpi_emulated_tests trainer
fi
if wants 1; then
  phase "1. the emulated GPU suite: ctest -L emulator -LE on_demand"
  # on_demand: the context-parallel training runs beyond CI's subset
  # (tests/emulator/CMakeLists.txt).
  ctest --test-dir "$EMU" -L emulator -LE on_demand --output-on-failure -j "$JOBS"
  # The order that shows a missing write-after-read barrier (a warp's
  # writes after its collectives land before the other warps' reads):
  # every kernel test once more, small shapes (about 45 s).
  phase "1. kernel tests, a warp at a time to each barrier (GT_EMU_THREAD_ORDER=warps, small shapes)"
  GT_TEST_SHAPES=small GT_EMU_THREAD_ORDER=warps "$EMU/tests/gt_cuda_tests" \
    --gtest_filter='-CudaTraining.*:CudaTraffic.*'
fi

if wants 2 || wants 4; then
  phase "2. AddressSanitizer + UBSan alignment build ($ASAN)"
  cmake -S . -B "$ASAN" "${SAN_ARGS[@]}" -DTRAINER_EMU_SANITIZE=address
  cmake --build "$ASAN" -j "$JOBS" --target gt_emu_kernel_tests gt_emu_tests
fi
if wants 2; then
  phase "2. kernel tests under ASan, blocks and streams in reverse order, threads random (small shapes)"
  GT_TEST_SHAPES=small GT_EMU_BLOCK_ORDER=reverse GT_EMU_STREAM_ORDER=reverse \
    GT_EMU_THREAD_ORDER=random:2026 "$ASAN/tests/gt_emu_kernel_tests"
  phase "2. the emulator's own tests under ASan"
  "$ASAN/tests/emulator/gt_emu_tests"
fi

if wants 3 || wants 4; then
  phase "3. ThreadSanitizer build ($TSAN)"
  cmake -S . -B "$TSAN" "${SAN_ARGS[@]}" -DTRAINER_EMU_SANITIZE=thread
  cmake --build "$TSAN" -j "$JOBS" --target gt_emu_kernel_tests
fi
if wants 3; then
  phase "3. attention, LayerNorm, cross-entropy and embedding tests under TSan (small shapes)"
  GT_TEST_SHAPES=small TSAN_OPTIONS="halt_on_error=1" "$TSAN/tests/gt_emu_kernel_tests" \
    --gtest_filter='CudaAttention*:CudaLayerNorm*:CudaCrossEntropy*:CudaEmbedding*'
fi

if wants 4; then
  phase "4. planted bugs"
  python3 tests/emulator/planted_bugs.py --asan "$ASAN" --tsan "$TSAN" --emu "$EMU"
  # Successive commits draw different barriers; the seed is printed, and
  # `--only <site>` reruns one (the whole sweep: about 50 minutes).
  seed=$((16#$(git rev-parse --verify -q --short=7 HEAD 2>/dev/null || echo 7e7)))
  python3 tests/emulator/barrier_sweep.py --emu "$EMU" --tsan "$TSAN" --sample 2 --seed "$seed"
fi
if wants 5; then
  phase "5. the GPU one-shot rehearsed on the emulated device (scripts/gpu_check.sh --rehearse)"
  rm -rf "$EMU/gpu_check_rehearsal"
  bash scripts/gpu_check.sh --rehearse "$EMU" --logs "$EMU/gpu_check_rehearsal"
fi
phase "done"
