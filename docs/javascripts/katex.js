// Typeset the formulas of the page with the KaTeX shipped in docs/assets/katex (no network).
// pymdownx.arithmatex (generic mode) wraps TeX in <span|div class="arithmatex">\( \) or \[ \]</...>;
// notebook pages (mkdocs-jupyter) keep $ ... $ and $$ ... $$ in their Markdown cells.
document$.subscribe(function () {
  var options = {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "\\[", right: "\\]", display: true },
      { left: "\\(", right: "\\)", display: false },
      { left: "$", right: "$", display: false }
    ],
    throwOnError: false
  };
  document.querySelectorAll(".arithmatex").forEach(function (el) {
    renderMathInElement(el, options);
  });
  document.querySelectorAll(".jp-MarkdownOutput, .jp-RenderedMarkdown").forEach(function (el) {
    renderMathInElement(el, options);
  });
});
