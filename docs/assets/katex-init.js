// Renders the math that pymdownx.arithmatex (generic mode) leaves as \( ... \) and \[ ... \]
// in elements of class "arithmatex", with the vendored KaTeX (docs/assets/katex/).
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".arithmatex").forEach(function (el) {
    renderMathInElement(el, {
      delimiters: [
        {left: "\\[", right: "\\]", display: true},
        {left: "\\(", right: "\\)", display: false},
      ],
      throwOnError: false,
    });
  });
});
