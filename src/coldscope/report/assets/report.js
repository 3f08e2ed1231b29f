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

// Gantt zoom: drag across a timeline to zoom into that span of time; double-click it, or the
// figure's "reset zoom" button, to see the whole start-up again. Every timed element carries
// its seconds (data-t0/data-t1 or data-t), so zooming only re-places elements and redraws the
// x axis; nothing is re-rendered by the server and the page works without this script.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  function niceTicks(lo, hi, count) {
    var raw = (hi - lo) / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 2.5, 5, 10].map(function (m) { return m * mag; })
      .filter(function (s) { return s >= raw; })[0];
    var out = [];
    for (var t = Math.ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
      out.push(Math.round(t * 1e9) / 1e9);
    }
    return out;
  }
  function tickText(v) { return v === 0 ? "0" : String(+v.toPrecision(4)); }
  function setup(svg) {
    var left = +svg.dataset.left, right = +svg.dataset.right, end = +svg.dataset.end;
    var axis = svg.querySelector("g.xaxis"), figure = svg.closest("figure");
    var reset = figure ? figure.querySelector("button.zoomreset") : null;
    var baseline = +axis.querySelector("line.axis").getAttribute("y1");
    var caption = axis.querySelector("text.caption");
    var view = [0, end];
    function px(t) { return left + (t - view[0]) / (view[1] - view[0]) * (right - left); }
    function apply() {
      svg.querySelectorAll("g.zoom [data-t0]").forEach(function (el) {
        var x0 = px(+el.dataset.t0), x1 = px(+el.dataset.t1);
        if (el.tagName === "text") {
          el.setAttribute("x", (x0 + 3).toFixed(1));
          if (x1 - x0 > +el.dataset.w) el.removeAttribute("display");
          else el.setAttribute("display", "none");
        } else {
          el.setAttribute("x", x0.toFixed(1));
          var w = x1 - x0;
          el.setAttribute("width", Math.max(w, el.classList.contains("bar") ? 1 : 0).toFixed(2));
        }
      });
      svg.querySelectorAll("g.zoom [data-t]").forEach(function (el) {
        var x = px(+el.dataset.t);
        if (el.tagName === "line") { el.setAttribute("x1", x.toFixed(1)); el.setAttribute("x2", x.toFixed(1)); }
        else el.setAttribute("x", (x + (+el.dataset.dx || 0)).toFixed(1));
      });
      axis.querySelectorAll("line.grid, text.tick").forEach(function (el) { el.remove(); });
      niceTicks(view[0], view[1], 8).forEach(function (t) {
        if (t < view[0] - 1e-9 || t > view[1] + 1e-9) return;
        var x = px(t).toFixed(1);
        var g = document.createElementNS(NS, "line");
        g.setAttribute("class", "grid");
        g.setAttribute("x1", x); g.setAttribute("x2", x);
        g.setAttribute("y1", baseline); g.setAttribute("y2", baseline);
        axis.insertBefore(g, axis.firstChild);
        var tx = document.createElementNS(NS, "text");
        tx.setAttribute("class", "tick"); tx.setAttribute("text-anchor", "middle");
        tx.setAttribute("x", x); tx.setAttribute("y", baseline + 15);
        tx.textContent = tickText(t);
        axis.insertBefore(tx, caption);
      });
      var zoomed = view[0] > 0 || view[1] < end;
      svg.dataset.zoomed = zoomed ? "1" : "0";
      if (reset) reset.hidden = !zoomed;
    }
    function timeAt(ev) {
      var pt = svg.createSVGPoint();
      pt.x = ev.clientX; pt.y = ev.clientY;
      var x = pt.matrixTransform(svg.getScreenCTM().inverse()).x;
      x = Math.min(Math.max(x, left), right);
      return { x: x, t: view[0] + (x - left) / (right - left) * (view[1] - view[0]) };
    }
    var drag = null, sel = null;
    svg.addEventListener("mousedown", function (ev) {
      if (ev.button !== 0) return;
      drag = timeAt(ev);
      sel = document.createElementNS(NS, "rect");
      sel.setAttribute("class", "zoomsel");
      sel.setAttribute("y", 0); sel.setAttribute("height", svg.viewBox.baseVal.height);
      sel.setAttribute("x", drag.x); sel.setAttribute("width", 0);
      svg.appendChild(sel);
      ev.preventDefault();
    });
    svg.addEventListener("mousemove", function (ev) {
      if (!drag) return;
      var now = timeAt(ev);
      sel.setAttribute("x", Math.min(drag.x, now.x).toFixed(1));
      sel.setAttribute("width", Math.abs(now.x - drag.x).toFixed(1));
    });
    function finish(ev) {
      if (!drag) return;
      var now = timeAt(ev), a = Math.min(drag.t, now.t), b = Math.max(drag.t, now.t);
      if (Math.abs(now.x - drag.x) > 4 && b - a > 1e-6) { view = [a, b]; apply(); }
      sel.remove(); sel = null; drag = null;
    }
    svg.addEventListener("mouseup", finish);
    svg.addEventListener("mouseleave", finish);
    svg.addEventListener("dblclick", function () { view = [0, end]; apply(); });
    if (reset) reset.addEventListener("click", function () { view = [0, end]; apply(); });
    svg.dataset.zoomReady = "1";
  }
  document.querySelectorAll("svg.gantt[data-end]").forEach(setup);
})();
