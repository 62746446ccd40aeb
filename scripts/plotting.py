"""matplotlib for the plotting scripts, or a clear message saying how to get it.

The scripts write their CSV/Markdown first and only then ask for pyplot, so a
machine without matplotlib still gets every table.
"""

import sys


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
            "Install it (Debian: apt-get install python3-matplotlib, then run the script with "
            "/usr/bin/python3; or: python3 -m pip install matplotlib).")
    return plt
