"""The one progress line of every long job, for the Python tools
(prepare_data.py, sweep.py; gpu_check.sh through its command line, below);
the trainer's C++ twin is trainer/io/progress.hpp, and both are pinned to
the same cases in tests/progress_format.json.

    <job>: <done>/<total> <unit> (<pct>%) | <field> | ... | <rate> <unit>/s | elapsed H:MM:SS | ETA H:MM:SS

Amounts in MB are bytes shown in millions with one decimal; any other unit
is a count shown whole. The rate is over the whole elapsed time; the ETA is
what is left at that rate, "?" before anything is done. On a terminal the
line is live (rewritten in place, every half second); into a log it is a
line every `every` seconds (10 by default). Nothing is printed for a job
that ends within `quiet` seconds (2 by default) except by force.

Standard library only.
"""

import sys
import time


def clock(seconds):
    """H:MM:SS of a non-negative duration, rounded to the second."""
    s = int(round(max(0.0, seconds)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _amount(value, unit):
    return f"{value / 1e6:.1f}" if unit == "MB" else f"{int(round(value))}"


def format_line(job, done, total, unit, elapsed, fields=()):
    """The line for `done` of `total` `unit`s after `elapsed` seconds."""
    pct = 100.0 * done / total if total > 0 else 100.0
    rate = done / elapsed if elapsed > 0 else 0.0
    shown_rate = rate / 1e6 if unit == "MB" else rate
    if done >= total:
        eta = clock(0)
    elif rate > 0:
        eta = clock((total - done) / rate)
    else:
        eta = "?"
    parts = [f"{job}: {_amount(done, unit)}/{_amount(total, unit)} {unit} ({pct:.0f}%)"]
    parts += list(fields)
    parts += [f"{shown_rate:.2f} {unit}/s", f"elapsed {clock(elapsed)}", f"ETA {eta}"]
    return " | ".join(parts)


class Progress:
    """Reports one job's progress on `stream` (stderr by default)."""

    def __init__(self, job, total, unit, stream=None, every=None, quiet=2.0):
        self.job, self.total, self.unit = job, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = every if every is not None else (0.5 if self.tty else 10.0)
        self.quiet = quiet
        self.t0 = time.monotonic()
        self.last = None  # when the last line went out
        self.shown = False

    def line(self, done, fields=()):
        return format_line(self.job, done, self.total, self.unit,
                           time.monotonic() - self.t0, fields)

    def update(self, done, fields=(), force=False):
        now = time.monotonic()
        if not force:
            if now - self.t0 < self.quiet:
                return
            if self.last is not None and now - self.last < self.every:
                return
        self.last = now
        self.shown = True
        text = self.line(done, fields)
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self, done=None, fields=()):
        """The final line (when any line went out, or done is given with
        force), and the terminal's newline."""
        if done is not None and self.shown:
            self.update(done, fields, force=True)
        if self.tty and self.shown:
            self.stream.write("\n")
            self.stream.flush()


def main(argv):
    """`progress.py JOB DONE TOTAL UNIT ELAPSED [FIELD ...]`: one line, for
    shell scripts (gpu_check.sh)."""
    if len(argv) < 5:
        sys.exit("usage: progress.py JOB DONE TOTAL UNIT ELAPSED_SECONDS [FIELD ...]")
    job, done, total, unit, elapsed = argv[:5]
    try:
        print(format_line(job, float(done), float(total), unit, float(elapsed), argv[5:]))
    except ValueError as e:
        sys.exit(f"error: progress.py: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])
