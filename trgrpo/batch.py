"""``python -m trgrpo.batch``: the command line of :mod:`trgrpo.tooling.batch` (the module moved there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.tooling.batch", run_name="__main__", alter_sys=True)
