"""The docs site builds with no warnings (broken links, missing nav targets), and every figure
the docs embed from docs/assets/curves/ exists."""

import re
import subprocess
import sys

from helpers import ROOT


def test_mkdocs_build_strict(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_embedded_curves_exist():
    for page in (ROOT / "docs").rglob("*.md"):
        for target in re.findall(r"\]\(([^)]*assets/curves/[^)]+)\)", page.read_text()):
            assert (page.parent / target).resolve().exists(), f"{page}: {target}"
