// Copy buttons for the settings blocks (setup.html): each button names the block it copies in
// data-copy; a click puts the block's exact text on the clipboard and shows "Copied" for a while.
// Served under the console's policy (script-src 'self'): no inline script, no inline handler.
// Without JavaScript the buttons stay hidden and the text is selected by hand.
(function () {
  "use strict";
  var SHOWN_MS = 2000;

  // Where the Clipboard API is missing (a page served over plain http off loopback is not a secure
  // context), the older way: select the text and ask the browser to copy the selection.
  function copyBySelection(block) {
    var range = document.createRange();
    range.selectNodeContents(block);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    var done = document.execCommand("copy");
    selection.removeAllRanges();
    return done ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  // The button's visible word changes; the status beside it tells a screen reader.
  function show(button, state, label) {
    var word = button.querySelector(".copy-label");
    var status = button.nextElementSibling;
    button.dataset.state = state;
    word.textContent = label;
    if (status && status.getAttribute("role") === "status") status.textContent = label;
    clearTimeout(button.copyTimer);
    button.copyTimer = setTimeout(function () {
      delete button.dataset.state;
      word.textContent = "Copy";
      if (status) status.textContent = "";
    }, SHOWN_MS);
  }

  function copy(button) {
    var block = document.getElementById(button.dataset.copy);
    if (!block) return;
    var text = block.textContent;
    var copied = navigator.clipboard && window.isSecureContext
      ? navigator.clipboard.writeText(text)
      : copyBySelection(block);
    copied.then(
      function () { show(button, "copied", "Copied"); },
      function () { show(button, "failed", "Select and copy by hand"); }
    );
  }

  function start() {
    document.querySelectorAll("button.copy[data-copy]").forEach(function (button) {
      button.hidden = false;
      button.addEventListener("click", function () { copy(button); });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
