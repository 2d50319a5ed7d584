// A table's sort survives the live refresh and a change of the URL's view (app/ui.py, table()).
// Dash draws a callback's new children afresh, so every refresh makes a new grid: its filter and
// selected row come back through Dash's persistence, its sort from here. AG Grid calls
// ffSortSave on its sortChanged event; each new grid gets the saved sort as it appears. Kept
// for the browser session, per table, as Dash keeps the filters.
(function () {
  var fns = window.dashAgGridFunctions = window.dashAgGridFunctions || {};
  function key(id) { return 'ff-sort:' + id; }
  function saved(id) {
    try { return JSON.parse(sessionStorage.getItem(key(id)) || 'null'); } catch (e) { return null; }
  }
  fns.ffSortSave = function (params, id) {
    var sort = params.api.getColumnState()
      .filter(function (c) { return c.sort; })
      .map(function (c) { return {colId: c.colId, sort: c.sort, sortIndex: c.sortIndex}; });
    try { sessionStorage.setItem(key(id), JSON.stringify(sort)); } catch (e) { /* no storage */ }
  };
  var seen = new WeakSet();
  function restore() {
    document.querySelectorAll('.ff-table[data-grid] .ag-root-wrapper').forEach(function (root) {
      if (seen.has(root)) return;
      seen.add(root);
      var id = root.closest('.ff-table').getAttribute('data-grid');
      var sort = saved(id);
      if (!Array.isArray(sort) || !sort.length || !window.dash_ag_grid) return;
      window.dash_ag_grid.getApiAsync(id).then(function (api) {
        if (!api.isDestroyed()) api.applyColumnState({state: sort, defaultState: {sort: null}});
      });
    });
  }
  new MutationObserver(restore).observe(document.documentElement, {childList: true, subtree: true});
})();
