// The terminal page: xterm.js over the ticketed PTY socket. Wire: keys go
// out as BINARY frames (always stdin); a resize goes out as the one text
// frame the server treats specially; output comes back in binary frames.
(function () {
  "use strict";
  var q = new URLSearchParams(location.search);
  var ticket = q.get("ticket");
  var arg = q.get("arg") || "";
  var status = document.getElementById("status");
  var btn = document.getElementById("reconnect");
  var term = new Terminal({ cursorBlink: true, scrollback: 5000, fontSize: 14 });
  var fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("term"));
  fit.fit();
  var ws = null;
  var enc = new TextEncoder();

  function post(m) {
    if (window.parent !== window) {
      m.source = "sandbox-term";
      window.parent.postMessage(m, "*"); // carries no secret
    }
  }
  function say(text) { status.textContent = text; }
  function sendResize() {
    if (ws && ws.readyState === 1) {
      ws.send(JSON.stringify({ resize: { cols: term.cols, rows: term.rows } }));
    }
  }
  function connect() {
    if (!ticket) {
      say("no ticket: mint one with POST /v1/sandbox/{id}/terminal/ticket and open its url");
      btn.hidden = false;
      post({ needTicket: true });
      return;
    }
    var url = new URL(location.pathname.replace(/\/terminal\/?$/, "/terminal/ws"), location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("ticket", ticket);
    if (arg) url.searchParams.set("arg", arg);
    ticket = null; // a ticket opens one connection
    say("connecting…");
    ws = new WebSocket(url.href);
    ws.binaryType = "arraybuffer";
    ws.onopen = function () {
      say("connected" + (arg ? " to tmux session " + arg : ""));
      btn.hidden = true;
      fit.fit();
      sendResize();
      term.focus();
      post({ ready: true });
    };
    ws.onmessage = function (e) {
      if (typeof e.data !== "string") term.write(new Uint8Array(e.data));
    };
    ws.onclose = function (e) {
      say("disconnected" + (e.reason ? ": " + e.reason : "") + " — reconnecting needs a new ticket");
      btn.hidden = false;
      post({ closed: true, reason: e.reason || "" });
    };
  }
  term.onData(function (d) {
    if (ws && ws.readyState === 1) ws.send(enc.encode(d));
  });
  term.onBinary(function (d) {
    if (!ws || ws.readyState !== 1) return;
    var b = new Uint8Array(d.length);
    for (var i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 255;
    ws.send(b);
  });
  term.onResize(sendResize);
  window.addEventListener("resize", function () { fit.fit(); });
  btn.onclick = function () { if (ticket) connect(); else post({ needTicket: true }); };
  // A parent frame may hand over a fresh ticket (after needTicket).
  window.addEventListener("message", function (e) {
    if (e.source === window.parent && e.data && typeof e.data.ticket === "string") {
      ticket = e.data.ticket;
      if (!ws || ws.readyState > 1) connect();
    }
  });
  connect();
})();
