// A row clicked in a grid, handed to the server through a store (app/pages: the GPUs page's
// outlier table, the Training page's spikes): {row, n}, n counting picks so the same row picked
// again is a change. Dash calls a callback whose input appears in a newly drawn grid with
// nothing clicked; answered here, that costs no round trip at the end of every page load.
// The row is the one of rowData whose id the click names (app.data.view.table_row's rule).
(function () {
  var ns = window.dash_clientside = window.dash_clientside || {};
  var picks = 0;
  function picked(row) {
    picks += 1;
    return {row: row, n: picks};
  }
  ns.ff = Object.assign(ns.ff || {}, {
    pickedRow: function (cell, rows) {
      var id = cell && cell.rowId;
      var row = typeof id === 'string' && Array.isArray(rows)
        ? rows.find(function (r) { return r && r.id === id; }) : null;
      return row ? picked(row) : ns.no_update;
    },
    // a heatmap cell: its row's name (the node), as a grid row with a host
    pickedPoint: function (click) {
      var p = ((click || {}).points || [])[0];
      return p && typeof p.y === 'string' ? picked({host: p.y}) : ns.no_update;
    },
  });
})();
