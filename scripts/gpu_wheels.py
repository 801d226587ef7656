"""Installs carried wheels on the GPU machine, where nothing can be fetched (scripts/gpu_check.sh's load and serve
steps; scripts/gpu_prep.sh downloads the wheels):

    python scripts/gpu_wheels.py WHEELS REQUIREMENT [REQUIREMENT ...]

First pip's resolver, offline, against what the image already holds: it installs from WHEELS only what is
missing or too old there. The carry leaves out the large packages the image has (numpy, pandas, grpcio, ...), so
where the image holds one at a version a requirement refuses, the resolver fails; then every carried wheel whose
distribution the image lacks is installed without dependencies, which serves a benchmark as long as the versions
are close. The machine is lent for one check and discarded, so installing into its environment costs nothing.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path


def _pip(*args: str) -> int:
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", *args]).returncode


def missing(wheels: Path) -> list[str]:
    """The wheels in ``wheels`` whose distribution is not installed (a wheel's name is ``dist-version-...``)."""
    out = []
    for wheel in sorted(wheels.glob("*.whl")):
        try:
            metadata.version(wheel.name.split("-", 1)[0])
        except metadata.PackageNotFoundError:
            out.append(str(wheel))
    return out


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    wheels, requirements = Path(sys.argv[1]), sys.argv[2:]
    if _pip("--find-links", str(wheels), *requirements) == 0:
        print(f"gpu_wheels: {' '.join(requirements)} installed by the resolver")
        return
    chosen = missing(wheels)
    print(f"gpu_wheels: the resolver failed; installing {len(chosen)} carried wheels the image lacks, without deps")
    if chosen and _pip("--no-deps", *chosen) != 0:
        raise SystemExit("gpu_wheels: the carried wheels did not install")


if __name__ == "__main__":
    main()
