// Put back the browser's own string trimming and number parsing after Dash's @babel/polyfill
// (core-js 2) replaced them: core-js 2 judges a trim that keeps U+180E (no longer white space
// since Unicode 6.3) non-standard, so it swaps trim, parseInt and parseFloat for JavaScript
// versions in every current browser. plotly.js parses a colour through them for each marker it
// styles: 15 % of the browser's main thread on the Checkpoints page. The natives are taken by
// the page's first script (app/main.py), before the polyfill runs; this one runs after it.
(function () {
  (window.ffNatives || []).forEach(function (p) {
    if (typeof p[2] === 'function' && p[0][p[1]] !== p[2]) {
      Object.defineProperty(p[0], p[1], {value: p[2], writable: true, configurable: true, enumerable: false});
    }
  });
})();
