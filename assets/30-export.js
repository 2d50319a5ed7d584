// CSV exports named after what they hold: factoryfloor-<table>-<run>.csv, not "export.csv".
// Each table (app/ui.py) is a box with an Export button, its grid's id (data-grid), the
// table's name (data-export) and whether hidden columns go into the file (data-export-all);
// the run on show is window.ffRun. The grid writes the file (AG Grid's exportDataAsCsv).
//
// Every cell goes through ffCsvCell, the rule of telemetry/csv_safe.py (OWASP "CSV Injection"):
// text starting with = + - @ tab or CR gets a leading ' so no spreadsheet runs it as a formula;
// a plain number (-3.5) stays a number. AG Grid quotes every field itself. The grids'
// csvExportParams (app/ui.py) name the same function, for any other export path.
(function () {
  var fns = window.dashAgGridFunctions = window.dashAgGridFunctions || {};
  var NUMBER = /^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$/;
  fns.ffCsvCell = function (params) {
    if (!params) return null;
    // as AG Grid exports without a callback: the column's formatted text ("–" for unknown)
    var v = params.formatValue ? params.formatValue(params.value) : params.value;
    if (typeof v === 'string' && /^[=+\-@\t\r]/.test(v) && !NUMBER.test(v)) return "'" + v;
    return v;
  };
  function safe(s) { return String(s).replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 120); }
  document.addEventListener('click', function (e) {
    var button = e.target.closest && e.target.closest('button.export');
    var box = button && button.closest('[data-export][data-grid]');
    if (!box || !window.dash_ag_grid) return;
    var name = 'factoryfloor-' + safe(box.getAttribute('data-export')) +
      (window.ffRun ? '-' + safe(window.ffRun) : '') + '.csv';
    window.dash_ag_grid.getApiAsync(box.getAttribute('data-grid')).then(function (api) {
      api.exportDataAsCsv({
        fileName: name,
        allColumns: box.getAttribute('data-export-all') === 'true',
        processCellCallback: fns.ffCsvCell,
      });
    });
  });
})();
