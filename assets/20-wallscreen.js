// Wall screens: Plotly sizes its fonts in px, so on a wide viewport (a 4K screen without OS
// scaling) every chart gets its fonts scaled up once after each render, and a taller plot.
(function () {
  var WIDE = 2400;
  function scale() { return window.innerWidth >= WIDE ? window.innerWidth / 1920 : 1; }
  function fix(gd) {
    var k = scale();
    if (k === 1 || !window.Plotly || !gd.layout || gd.__ffScaled === gd.layout) return;
    var size = Math.round(12 * k);
    var h = gd.layout.height ? Math.round(gd.layout.height * k) : undefined;
    gd.__ffScaled = gd.layout;
    var update = {'font.size': size, 'title.font.size': Math.round(14 * k),
                  'legend.font.size': Math.round(11 * k)};
    if (h) update.height = h;
    window.Plotly.relayout(gd, update).then(function () { gd.__ffScaled = gd.layout; });
  }
  setInterval(function () {
    if (scale() === 1) return;
    document.querySelectorAll('.js-plotly-plot').forEach(fix);
  }, 500);
})();
