"""mkdocs hooks (mkdocs.yml `hooks:`): the notebook pages work offline, as the others do.

mkdocs-jupyter renders the gallery with nbconvert's lab template, which adds to every notebook
page a module script that imports mermaid (and its elk layouts) from cdnjs as soon as the page
holds a mermaid diagram. The gallery's notebooks hold none, so the loader is dead weight that
names a CDN: it is removed here. A notebook that gains a mermaid diagram is refused at build
time (it would need mermaid shipped in docs/assets, as KaTeX is), never silently broken offline.
"""

from __future__ import annotations

import re

from mkdocs.exceptions import PluginError

# nbconvert's mermaidjs.html.j2 as the lab template includes it: the loader script, then its
# <style>, up to the template's closing comment.
_LOADER = re.compile(r'<script type="module">\s*document\.addEventListener\("DOMContentLoaded", '
                     r'async \(\) => \{\s*const diagrams = document\.querySelectorAll\('
                     r'"\.jp-Mermaid > pre\.mermaid"\);.*?<!-- End of mermaid configuration -->',
                     re.S)
_CDN = re.compile(r"(https?:)?//[\w.-]*(cdnjs|jsdelivr|unpkg)[\w.-]*/", re.I)


def strip_mermaid_loader(html: str, where: str = "a page") -> str:
    """`html` without nbconvert's mermaid loader; refused where a diagram needs it, or where a CDN
    address is left after it (a template that loads mermaid some other way)."""
    stripped = _LOADER.sub("", html)
    if stripped == html:
        return html
    if 'class="jp-Mermaid' in stripped or '<pre class="mermaid"' in stripped:
        raise PluginError(f"{where} has a mermaid diagram; the site ships no mermaid (offline "
                          "pages load nothing from a CDN): draw it as an image, or vendor mermaid "
                          "in docs/assets and load it from there.")
    if _CDN.search(stripped):
        raise PluginError(f"{where} still names a CDN after the mermaid loader was removed "
                          f"({_CDN.search(stripped).group(0)}); the site must load nothing from "
                          "one: update scripts/mkdocs_hooks.py for the new template.")
    return stripped


def on_post_page(output: str, page, config) -> str:  # noqa: ARG001 (mkdocs' hook signature)
    return strip_mermaid_loader(output, page.file.src_uri)
