"""matplotlib for the plotting scripts, or a clear message saying how to get it.

The scripts write their CSV/Markdown first and only then ask for pyplot, so a
machine without matplotlib still gets every table. Debian's python3-matplotlib
is installed for /usr/bin/python3, which need not be the `python3` on PATH
(pyenv, a venv): use_an_interpreter_with_matplotlib() moves the script there
at start, before it has done anything.
"""

import importlib.util
import os
import subprocess
import sys

SYSTEM_PYTHON = "/usr/bin/python3"


def use_an_interpreter_with_matplotlib():
    """Re-runs this script under /usr/bin/python3 when this interpreter lacks
    matplotlib and that one has it; otherwise returns and lets pyplot() say
    what is missing when the plot is due."""
    if importlib.util.find_spec("matplotlib") is not None or os.environ.get("GT_PLOT_REEXEC"):
        return
    if not os.access(SYSTEM_PYTHON, os.X_OK) or \
            os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON):
        return
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], capture_output=True)
    if probe.returncode != 0:
        return
    print(f"note: no matplotlib for {sys.executable}; running under {SYSTEM_PYTHON}",
          file=sys.stderr, flush=True)
    os.environ["GT_PLOT_REEXEC"] = "1"
    os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(sys.argv[0])] + sys.argv[1:])


def pyplot(what):
    """matplotlib.pyplot with the file-only Agg backend; SystemExit(1) with an
    install hint naming this interpreter when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            f"error: matplotlib is not installed for {sys.executable}, so {what} was not drawn. "
            "Install it (Debian: apt-get install python3-matplotlib, for /usr/bin/python3; "
            "or: python3 -m pip install matplotlib).")
    return plt
