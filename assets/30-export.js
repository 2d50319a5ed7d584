// CSV exports named after what they hold: factoryfloor-<table>-<run>.csv, not "export.csv".
// Each table (app/ui.py) is a box with an Export button, its grid's id (data-grid), the
// table's name (data-export) and whether hidden columns go into the file (data-export-all);
// the run on show is window.ffRun. The grid writes the file (AG Grid's exportDataAsCsv).
(function () {
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
      });
    });
  });
})();
