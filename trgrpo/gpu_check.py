"""``python -m trgrpo.gpu_check``: the command line of :mod:`trgrpo.tooling.gpu_check` (the module moved there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.tooling.gpu_check", run_name="__main__", alter_sys=True)
