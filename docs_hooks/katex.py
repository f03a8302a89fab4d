"""mkdocs hook: typeset every formula at build time with the vendored KaTeX, so pages need no network.

pymdownx.arithmatex (generic mode) wraps each formula as `<span class="arithmatex">\\(...\\)</span>` or
`<div class="arithmatex">\\[...\\]</div>`. This hook replaces each wrapper with KaTeX's HTML, rendered
by the KaTeX copy in docs/assets/katex/ running in QuickJS (a small JavaScript engine installed from
PyPI). The site then loads only katex.min.css and its fonts. A formula KaTeX cannot parse is a
warning naming the page and the formula, so the strict build fails.
"""

import html
import logging
import re
from pathlib import Path

import quickjs

KATEX_JS = Path(__file__).resolve().parents[1] / "docs" / "assets" / "katex" / "katex.min.js"
MATH = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*'
    r"(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<display>.*?)\\\])"
    r"\s*</(?P=tag)>",
    re.S,
)

LOG = logging.getLogger("mkdocs.hooks.katex")
_render = None


def _renderer():
    global _render
    if _render is None:
        ctx = quickjs.Context()
        ctx.eval("var self = this;")  # KaTeX's UMD wrapper looks for a global object
        ctx.eval(KATEX_JS.read_text(encoding="utf-8"))
        ctx.eval(
            "function renderTex(tex, display) { return katex.renderToString(tex,"
            " {displayMode: display, throwOnError: true, strict: 'ignore'}); }"
        )
        _render = ctx.get("renderTex")
    return _render


def render(tex, display):
    """KaTeX's HTML for one formula; raises ValueError with KaTeX's message when it does not parse."""
    try:
        return _renderer()(tex, display)
    except quickjs.JSException as err:
        raise ValueError(f"KaTeX cannot typeset {tex!r}: {str(err).splitlines()[0]}") from None


def on_page_content(content, page, **kwargs):
    def replace(match):
        display = match.group("display") is not None
        tex = html.unescape(match.group("display") if display else match.group("inline"))
        try:
            out = render(tex, display)
        except ValueError as err:
            LOG.warning(f"{page.file.src_path}: {err}")  # a warning fails `mkdocs build --strict`
            return match.group(0)
        return f'<div class="katex-block">{out}</div>' if display else out

    return MATH.sub(replace, content)
