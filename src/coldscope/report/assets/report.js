// coldscope report: turns the charts' SVG <title> hover texts into a styled tooltip.
// The page works without this script (browsers show <title> as a plain tooltip).
(function () {
  "use strict";
  var tip = document.getElementById("tip");
  if (!tip) return;
  function textOf(el) {
    if (el.dataset && el.dataset.tip !== undefined) return el.dataset.tip;
    var t = el.querySelector(":scope > title");
    if (!t) return null;
    el.dataset.tip = t.textContent;
    el.removeChild(t); // no native tooltip on top of ours
    return el.dataset.tip;
  }
  function target(node) {
    while (node && node.nodeType === 1 && node.tagName.toLowerCase() !== "svg") {
      if ((node.dataset && node.dataset.tip !== undefined) ||
          (node.querySelector && node.querySelector(":scope > title"))) return node;
      node = node.parentNode;
    }
    return null;
  }
  function place(ev) {
    var pad = 14, w = tip.offsetWidth, h = tip.offsetHeight;
    var x = ev.clientX + pad, y = ev.clientY + pad;
    if (x + w > window.innerWidth - 4) x = ev.clientX - w - pad;
    if (y + h > window.innerHeight - 4) y = ev.clientY - h - pad;
    tip.style.left = Math.max(4, x) + "px";
    tip.style.top = Math.max(4, y) + "px";
  }
  document.addEventListener("mouseover", function (ev) {
    var el = target(ev.target);
    if (!el || !el.closest("svg.chart")) { tip.hidden = true; return; }
    tip.textContent = textOf(el);
    tip.hidden = false;
    place(ev);
  });
  document.addEventListener("mousemove", function (ev) { if (!tip.hidden) place(ev); });
  document.addEventListener("mouseout", function (ev) {
    if (!ev.relatedTarget || !target(ev.relatedTarget)) tip.hidden = true;
  });
  document.documentElement.dataset.ready = "1";
})();
