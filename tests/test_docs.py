"""The docs site: it builds with no warnings, its formulas come out typeset with no network, and every
algorithm page follows the one template (docs/contributing.md#docs)."""

import re
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT, literal_tags

sys.path.insert(0, str(ROOT / "docs_hooks"))
import katex  # noqa: E402

PAGES = sorted((ROOT / "docs" / "algorithms").glob("*.md"))
# Family overview pages: no script of their own, so no code walk-through, metrics or speed table.
OVERVIEWS = {"model_based", "exploration", "offline", "llm"}
TEMPLATE = [
    "Overview",
    "Key equations",
    "The code",
    "Logged metrics",
    "Results",
    "Speed",
    "Departures from the paper",
    "References",
]
OVERVIEW_TEMPLATE = ["Overview", "Results", "References"]
# Pages with no learning run of their own to draw: the data-parallel scripts are checked for equality
# with the one-process update, and their algorithm's curves are on ppo.md and grpo.md.
NO_FIGURE = {"ppo_ddp", "grpo_ddp"}
# Lab history belongs in docs/notes/, not on a page a learner reads.
HISTORY = re.compile(r"issue [0-9]+|the [a-z]+ round|\b20[0-9]{2}-[0-9]{2}-[0-9]{2}\b", re.I)
CPU = re.compile(r"\b(EPYC|Xeon|Ryzen|Intel|AMD)\b")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once with --strict for every test in this module."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return out, result


def test_mkdocs_build_strict(site):
    """No broken link, no page missing from the nav, no formula KaTeX cannot parse."""
    _, result = site
    assert result.returncode == 0, result.stdout + result.stderr


def test_embedded_curves_exist():
    for page in (ROOT / "docs").rglob("*.md"):
        for target in re.findall(r"\]\(([^)]*assets/curves/[^)]+)\)", page.read_text()):
            assert (page.parent / target).resolve().exists(), f"{page}: {target}"


def test_katex_typesets_a_fraction_and_refuses_bad_tex():
    """The vendored KaTeX, run in QuickJS, gives MathML and HTML for a formula, and an error for TeX that
    does not parse (which the hook turns into a build warning)."""
    out = katex.render(r"\frac{1}{2} \le \gamma^{n}", False)
    assert out.startswith('<span class="katex">')
    assert "<mfrac><mn>1</mn><mn>2</mn></mfrac>" in out
    assert "<mo>≤</mo>" in out
    assert 'class="katex-display"' in katex.render(r"x^2", True)
    with pytest.raises(ValueError, match="KaTeX cannot typeset"):
        katex.render(r"\frac{1", False)


def test_formulas_are_typeset_in_the_built_site(site):
    """Every page that has a formula in its source comes out with KaTeX's markup and no raw TeX wrapper;
    the site loads no script from a CDN."""
    out, result = site
    assert result.returncode == 0, result.stdout + result.stderr
    typeset = set()
    for md in (ROOT / "docs").rglob("*.md"):
        rel = md.relative_to(ROOT / "docs").with_suffix("")
        page = out / ("index.html" if rel.name == "index" else rel / "index.html")
        text = page.read_text(encoding="utf-8")
        assert 'class="arithmatex"' not in text, f"{rel}: a formula left untypeset"
        assert "cdn.jsdelivr" not in text and "mathjax" not in text.lower(), f"{rel}: loads MathJax"
        if "$" in re.sub(r"```.*?```|`[^`]*`", "", md.read_text(), flags=re.S):
            assert 'class="katex"' in text, f"{rel}: has a formula but no KaTeX markup"
            typeset.add(rel.name)
    untypeset = [p.stem for p in PAGES if p.stem not in OVERVIEWS and p.stem not in typeset]
    assert not untypeset, f"algorithm pages with no typeset formula (Key equations): {untypeset}"
    css = (out / "assets" / "katex" / "katex.min.css").read_text()
    for font in re.findall(r"url\((fonts/[^)]+)\)", css):
        assert (out / "assets" / "katex" / font).exists(), font


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome", "headless_shell"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(chromium() is None, reason="no Chromium binary on this machine (chromium, google-chrome)")
def test_typeset_math_in_headless_chromium_with_no_network(site, tmp_path):
    """Load the PPO page from disk in headless Chromium with every request sent to a dead proxy: the DOM
    holds KaTeX's markup, and a screenshot is written."""
    out, _ = site
    url = (out / "algorithms" / "ppo" / "index.html").as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9"]
    dom = subprocess.run([chromium(), *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert 'class="katex"' in dom.stdout and "katex-mathml" in dom.stdout
    shot = tmp_path / "ppo.png"
    subprocess.run([chromium(), *flags, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_algorithm_page_follows_the_template(page):
    text = page.read_text()
    assert len(text.encode()) <= 20 * 1024, f"{page.name}: {len(text.encode())} bytes, over 20 KB"
    headings = [h.strip() for h in re.findall(r"^## (.+)$", text, re.M)]
    want = OVERVIEW_TEMPLATE if page.stem in OVERVIEWS else TEMPLATE
    found = [w for h in headings for w in want if h.startswith(w)]
    assert found == want, f"{page.name}: H2 headings {headings}, want {want} in this order"
    assert not HISTORY.findall(text), f"{page.name}: history on the page: {HISTORY.findall(text)}"
    lines = text.splitlines()
    speed = re.search(r"^## Speed\n(.*?)(?=^## )", text, re.M | re.S)
    speed_lines = speed.group(1).splitlines() if speed else []
    # the machine may be named in a Speed table's header row (the row above the |---| rule)
    headers = {a for a, b in zip(speed_lines, speed_lines[1:]) if a.startswith("|") and b.startswith("|-")}
    cpus = [line for line in lines if CPU.search(line) and line not in headers]
    assert not cpus, f"{page.name}: a CPU named outside the Speed table's header: {cpus[:2]}"
    results = re.search(r"^## Results\n(.*?)^## ", text, re.M | re.S)
    if page.stem not in NO_FIGURE:
        assert results and "![" in results.group(1), f"{page.name}: Results has no figure"
        assert "```bash" in results.group(1), f"{page.name}: Results prints no command beside its figure"
    notes = f"../notes/{page.stem}.md"
    assert f"How we got here: [the lab notes]({notes})" in text, f"{page.name}: no link to {notes}"
    assert (page.parent / notes).resolve().exists(), f"{page.name}: {notes} missing"


@pytest.mark.parametrize("page", [p for p in PAGES if p.stem not in OVERVIEWS], ids=lambda p: p.stem)
def test_logged_metrics_name_every_tag(page):
    """Every literal tag either twin writes is in the page's Logged metrics section."""
    scripts = [p for folder in ("algos", "llm") for p in (ROOT / folder).glob(f"{page.stem}_*.py")]
    scripts = [p for p in scripts if p.stem in (f"{page.stem}_torch", f"{page.stem}_jax")]
    assert len(scripts) == 2, f"{page.name}: twins {scripts}"
    section = re.search(r"^## Logged metrics\n(.*?)^## ", page.read_text(), re.M | re.S)
    assert section, f"{page.name}: no Logged metrics section"
    missing = sorted(
        t for s in scripts for t in literal_tags(s.relative_to(ROOT)) if f"`{t}`" not in section.group(1)
    )
    assert not missing, f"{page.name}: tags not in Logged metrics: {missing}"


def test_readme_fits_a_few_screens():
    """At most 12 KB, table cells of at most 160 characters, and every relative link resolves."""
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12 * 1024, f"README.md: {len(text.encode())} bytes, over 12 KB"
    cells = [
        c.strip() for line in text.splitlines() if line.startswith("|") for c in line.strip("|").split(" | ")
    ]
    long = [c[:60] for c in cells if len(c) > 160]
    assert not long, f"README.md: table cells over 160 characters: {long}"
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README.md links to a missing {target}"
