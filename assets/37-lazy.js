// Parts of a page far below its first screen (app.ui.lazy: a div.ff-lazy with its store's id
// in data-seen) are drawn when scrolled near: within a screen's height of the view, the part's
// store is set and its callbacks answer; the part is marked data-ff-seen (benchmarks and tests
// wait only for the charts of parts seen). Where a part is judged from the page's layout once
// it has stood still for 400 ms with no answer awaited (while the first charts are asked for
// and drawn, the page is short and every part looks near), or at once when the reader scrolls.
(function () {
  var watched = new WeakSet();
  var timer = null;
  var io = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.isIntersecting) return;
      io.unobserve(e.target);
      e.target.setAttribute('data-ff-seen', '1');
      window.dash_clientside.set_props(e.target.getAttribute('data-seen'), {data: true});
    });
  }, {rootMargin: '100% 0px'});
  function watch() {
    timer = null;
    document.querySelectorAll('.ff-lazy').forEach(function (el) {
      if (watched.has(el)) return;
      watched.add(el);
      io.observe(el);
    });
  }
  function settled() {  // waiting for an answer is not standing still: the page grows after
    if (document.querySelector('[data-dash-is-loading="true"]')) later();
    else watch();
  }
  function later() {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(settled, 400);
  }
  new MutationObserver(later).observe(document.body, {childList: true, subtree: true});
  new ResizeObserver(later).observe(document.body);
  window.addEventListener('scroll', watch, {passive: true});
})();
