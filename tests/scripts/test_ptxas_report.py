#!/usr/bin/env python3
"""scripts/ptxas_report.py: its reading of ptxas -v output (canned text, no
nvcc needed) and, where nvcc exists, one real compile of the tensor-core
attention kernels (every instantiation reported with a register count) and
of the mbarrier/TMA (sm_90, sm_90a) and wgmma (sm_90a) wrappers' inline PTX.

    python3 tests/scripts/test_ptxas_report.py
"""
import os
import subprocess
import tempfile
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import ptxas_report  # noqa: E402

CANNED = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'
ptxas info    : Function properties for _Z3fooPf
    8 bytes stack frame, 4 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 8 bytes cumulative stack size
ptxas info    : Compile time = 1.0 ms
ptxas info    : Compiling entry function '_Z3barPf' for 'sm_90'
ptxas info    : Function properties for _Z3barPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 2048 bytes smem
"""


class ParsePtxas(unittest.TestCase):
    def test_every_entry_with_its_registers_spills_and_smem(self):
        rows = ptxas_report.parse_ptxas(CANNED)
        self.assertEqual([r["mangled"] for r in rows], ["_Z3fooPf", "_Z3barPf"])
        self.assertEqual((rows[0]["registers"], rows[0]["stack"], rows[0]["spill_stores"],
                          rows[0]["spill_loads"], rows[0]["smem"]), (168, 8, 4, 20, 0))
        self.assertEqual((rows[1]["registers"], rows[1]["smem"]), (32, 2048))
        self.assertEqual(rows[1]["arch"], "sm_90")

    def test_short_names_keep_template_arguments_and_drop_namespaces(self):
        self.assertEqual(
            ptxas_report.short_name("void gt::cuda::(anonymous namespace)::attention_dq_tc_kernel"
                                    "<64>(__nv_bfloat16*, gt::cuda::(anonymous namespace)::Dims)"),
            "attention_dq_tc_kernel<64>")
        self.assertEqual(
            ptxas_report.short_name("void gt::cuda::(anonymous namespace)::ln_kernel<__nv_bfloat16,"
                                    " float>(float*, int)"),
            "ln_kernel<bf16, float>")


NVCC = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")


@unittest.skipUnless(os.path.exists(NVCC), "no nvcc")
class RealCompile(unittest.TestCase):
    def test_the_attention_kernels_report_registers(self):
        path = os.path.join(REPO, "kernels", "cuda", "attention_tc.cu")
        rows = ptxas_report.parse_ptxas(ptxas_report.compile_one(NVCC, path, "sm_90"),
                                        ptxas_report.demangler())
        names = sorted(r["kernel"] for r in rows)
        # The unsplit attention's kernels and the context-parallel blocks' ones.
        self.assertEqual(names, sorted(f"attention_{b}{k}_tc_kernel<{h}>"
                                       for b in ("", "block_")
                                       for k in ("forward", "dkdv", "dq") for h in (64, 128)))
        for r in rows:
            self.assertGreater(r["registers"], 0, r)
            self.assertLessEqual(r["registers"], 255, r)

    def test_the_async_copy_wrappers_assemble_for_sm90_and_sm90a(self):
        # The inline PTX of kernels/cuda/async_sm90.cuh (mbarrier, TMA,
        # proxy fences), which only the emulator runs here.
        probe = os.path.join(REPO, "tests", "cuda", "nvcc", "async_sm90_probe.cu")
        for arch in (["-arch=sm_90"], ["-gencode=arch=compute_90a,code=sm_90a"]):
            with tempfile.TemporaryDirectory() as tmp:
                r = subprocess.run([NVCC, "-std=c++17", "-I", REPO, *arch, "-c", probe,
                                    "-o", os.path.join(tmp, "probe.o")],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, f"{arch}: {r.stderr}")

    def test_the_wgmma_wrappers_assemble_for_sm90a(self):
        # wgmma needs the sm_90a target (kernels/cuda/wgmma_sm90.cuh).
        probe = os.path.join(REPO, "tests", "cuda", "nvcc", "wgmma_sm90_probe.cu")
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([NVCC, "-std=c++17", "-I", REPO,
                                "-gencode=arch=compute_90a,code=sm_90a", "-c", probe,
                                "-o", os.path.join(tmp, "probe.o")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
