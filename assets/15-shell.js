// The page shell's clientside callbacks (app/shell): answered in the browser, no request.
(function () {
  var ns = window.dash_clientside = window.dash_clientside || {};
  var zooms = 0;
  ns.ffShell = Object.assign(ns.ffShell || {}, {
    // app/shell/zoom.py: of the time charts' relayouts, only those that name the x axis's
    // range go to the server (every chart reports one, {"autosize": true}, as it is drawn).
    zoomRelayouts: function () {
      var ctx = window.dash_clientside.callback_context, out = [];
      (ctx.triggered || []).forEach(function (t) {
        var v = t.value;
        if (v && typeof v === 'object' && Object.keys(v).some(function (k) {
          return k.indexOf('xaxis.range') === 0 || k === 'xaxis.autorange';
        }))
          out.push(v);
      });
      if (!out.length) return window.dash_clientside.no_update;
      zooms += 1;  // a count, so the same window zoomed again is a change
      return {n: zooms, relayouts: out};
    },
    // app/shell/browser.py: the theme on <html> and in localStorage, which the page's <head>
    // reads before anything is drawn (app/main.py's index). Dark unless light is chosen
    // (app.main.DEFAULT_THEME).
    theme: function (light) {
      var t = light ? 'light' : 'dark';
      document.documentElement.setAttribute('data-bs-theme', t);
      try { localStorage.setItem('ff-theme', t); } catch (e) {}
      return t;
    },
    // app/shell/browser.py: the run on show, for the names of CSV exports (30-export.js)
    exportRun: function (view) {
      window.ffRun = (view && view.run) || null;
      return window.ffRun;
    },
  });
})();
