// A table's sort survives the live refresh and a change of the URL's view (app/ui.py, table()).
// Dash draws a callback's new children afresh, so every refresh makes a new grid: its filter and
// selected row come back through Dash's persistence, its sort from here. AG Grid calls
// ffSortSave when the user sorts; each new grid gets the saved sort as it appears, and again if
// the grid's own start-up puts back its first (unsorted) state. Kept for the browser session,
// per table, as Dash keeps the filters.
(function () {
  var fns = window.dashAgGridFunctions = window.dashAgGridFunctions || {};
  function key(id) { return 'ff-sort:' + id; }
  function saved(id) {
    try { return JSON.parse(sessionStorage.getItem(key(id)) || 'null'); } catch (e) { return null; }
  }
  function sortOf(api) {
    return api.getColumnState()
      .filter(function (c) { return c.sort; })
      .map(function (c) { return {colId: c.colId, sort: c.sort, sortIndex: c.sortIndex}; });
  }
  fns.ffSortSave = function (params, id) {
    if (params.source !== 'uiColumnSorted') return;  // only what the user chose
    try { sessionStorage.setItem(key(id), JSON.stringify(sortOf(params.api))); } catch (e) { /* */ }
  };
  function keep(api, id) {
    var sort = saved(id);
    if (!Array.isArray(sort) || api.isDestroyed()) return;
    if (JSON.stringify(sortOf(api)) !== JSON.stringify(sort)) {
      api.applyColumnState({state: sort, defaultState: {sort: null}});
    }
  }
  function watch(id, tries) {
    window.dash_ag_grid.getApiAsync(id).then(function (api) {
      if (api.isDestroyed()) {  // the grid this one replaces, not yet gone
        if (tries > 0) setTimeout(function () { watch(id, tries - 1); }, 50);
        return;
      }
      keep(api, id);
      api.addEventListener('sortChanged', function (e) {
        if (e.source !== 'uiColumnSorted') keep(api, id);
      });
    });
  }
  var seen = new WeakSet();
  new MutationObserver(function () {
    if (!window.dash_ag_grid) return;
    document.querySelectorAll('.ff-table[data-grid] .ag-root-wrapper').forEach(function (root) {
      if (seen.has(root)) return;
      seen.add(root);
      var id = root.closest('.ff-table').getAttribute('data-grid');
      if (Array.isArray(saved(id))) watch(id, 40);
    });
  }).observe(document.documentElement, {childList: true, subtree: true});
})();
