// "Copy as Markdown" (the incident view): a button with data-copy-target (the element whose
// text is copied: it may sit in a closed <details>, whose text is in the page all the same)
// and data-copy-status (where the outcome is told). Copied inside the click itself, so the
// browser counts it as the user's act; navigator.clipboard only exists on https or localhost,
// so a dashboard opened as http://host:8050 copies through a selected textarea instead.
(function () {
  function tell(btn, msg, ok) {
    var out = document.getElementById(btn.getAttribute('data-copy-status') || '');
    if (!out) return;
    out.textContent = msg;
    out.className = 'small ms-2 ' + (ok ? 'text-success' : 'text-danger');
  }
  function viaTextarea(text) {
    var ta = document.createElement('textarea');
    ta.value = text;
    ta.setAttribute('readonly', '');
    ta.style.position = 'fixed';
    ta.style.opacity = '0';
    document.body.appendChild(ta);
    ta.select();
    var ok = false;
    try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
    document.body.removeChild(ta);
    return ok;
  }
  document.addEventListener('click', function (ev) {
    var btn = ev.target && ev.target.closest && ev.target.closest('[data-copy-target]');
    if (!btn) return;
    var src = document.getElementById(btn.getAttribute('data-copy-target'));
    var text = src ? src.textContent : '';
    if (!text) { tell(btn, 'Not copied: there is no Markdown on this page.', false); return; }
    var n = text.length.toLocaleString('en-US') + ' characters';
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () {
        tell(btn, 'Copied (' + n + ').', true);
      }, function (err) {
        if (viaTextarea(text)) { tell(btn, 'Copied (' + n + ').', true); return; }
        tell(btn, 'Not copied: the browser refused the clipboard (' + err + '). ' +
             'Open "Markdown" below and copy it by hand.', false);
      });
      return;
    }
    if (viaTextarea(text)) { tell(btn, 'Copied (' + n + ').', true); return; }
    tell(btn, 'Not copied: this browser gives no clipboard here (not https). ' +
         'Open "Markdown" below and copy it by hand.', false);
  });
})();
