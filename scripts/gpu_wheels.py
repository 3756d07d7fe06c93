"""``make gpu-wheels``: the wheels ``make gpu-check`` installs on a GPU machine without network.

``python scripts/gpu_wheels.py FREEZE --wheels DIR --platform TAG --python-version X.Y``: into DIR, the wheels of
:data:`gpu_check.PURE_PYTHON` (scripts/gpu_check.py) and their dependencies for the GPU machine's platform and
Python, keeping the versions of its ``pip freeze`` (FREEZE; none of those downloaded).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_check import PURE_PYTHON  # noqa: E402  (scripts/ is on sys.path)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_target(platform: str, python_version: str) -> list[str]:
    """pip's flags that pick wheels for another machine: binary only, its Python (CPython, ABI ``cpXY``, so
    per-Python wheels such as ``multiprocess``'s match) and its platform, widened to the older manylinux tags a
    glibc-2.N machine runs too (pip does not widen a given ``--platform``)."""
    abi = "cp" + python_version.replace(".", "")
    target = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", "--abi", abi]
    target += ["--platform", platform]
    if m := re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform):
        glibc, arch = int(m.group(1)), m.group(2)
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        for tag in [f"manylinux_2_{v}_{arch}" for v in range(glibc - 1, 4, -1)]:
            target += ["--platform", tag]
        for tag in [f"{name}_{arch}" for v, name in legacy.items() if v <= glibc]:
            target += ["--platform", tag]
    return target


def download_wheels(
    freeze: Path,
    dest: Path,
    *,
    platform: str,
    python_version: str,
    requirements: tuple[str, ...] = tuple(PURE_PYTHON.values()),
    deps: bool = True,
) -> list[str]:
    """Download the wheels of ``requirements`` (and, with ``deps``, of their dependencies that ``freeze`` does not
    pin) into ``dest``; the requirements downloaded."""
    pinned = {}
    for line in Path(freeze).read_text().splitlines():
        if m := re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip()):
            pinned[_canonical(m.group(1))] = m.group(0)
    dest.mkdir(parents=True, exist_ok=True)
    target = pip_target(platform, python_version)
    need = list(requirements)
    if deps:
        with tempfile.TemporaryDirectory() as tmp:
            constraints, report = Path(tmp) / "constraints.txt", Path(tmp) / "report.json"
            constraints.write_text("\n".join(pinned.values()) + "\n")
            pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
            subprocess.run([*pip, "--report", str(report), *target, "-c", str(constraints), *need], check=True)
            resolved = [i["metadata"] for i in json.loads(report.read_text())["install"]]
        need = [f"{m['name']}=={m['version']}" for m in resolved if _canonical(m["name"]) not in pinned]
    if need:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), *target, *need]
        subprocess.run(cmd, check=True)
    return need


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("freeze", help="the GPU machine's `pip freeze`")
    ap.add_argument("--wheels", default="wheels")
    ap.add_argument("--platform", default="manylinux_2_28_x86_64")
    ap.add_argument("--python-version", default="3.11")
    args = ap.parse_args(argv)
    need = download_wheels(
        Path(args.freeze), Path(args.wheels), platform=args.platform, python_version=args.python_version
    )
    print(f"{len(need)} wheel(s) in {args.wheels}: {' '.join(need)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
