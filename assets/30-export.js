// CSV exports named after what they hold: factoryfloor-<table>-<run>.csv, not "Data.csv".
// DataTable's exporter (SheetJS) hands the file to a global saveAs(blob, name) when there is
// one (FileSaver's interface); this one names it after the table whose Export button was
// clicked (its data-export attribute, set by app/ui.py) and the run on show (window.ffRun).
(function () {
  var table = null;
  document.addEventListener('click', function (e) {
    var button = e.target.closest && e.target.closest('button.export');
    if (!button) return;
    var box = button.closest('[data-export]');
    table = box ? box.getAttribute('data-export') : null;
  }, true);
  function safe(s) { return String(s).replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 120); }
  window.saveAs = function (blob, name) {
    var ext = (String(name).match(/\.[A-Za-z0-9]+$/) || ['.csv'])[0];
    var fname = table
      ? 'factoryfloor-' + safe(table) + (window.ffRun ? '-' + safe(window.ffRun) : '') + ext
      : name;
    var url = URL.createObjectURL(blob);
    var a = document.createElement('a');
    a.download = fname;
    a.href = url;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 60000);
  };
})();
