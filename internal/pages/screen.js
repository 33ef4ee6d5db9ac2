// The screen page: noVNC over the ticketed RFB socket. The page opens the
// socket itself (and hands it to noVNC) so that a failure the server names
// in the close frame is shown, not a black rectangle.
const RFB = window.noVNC.RFB;
const q = new URLSearchParams(location.search);
let ticket = q.get("ticket");
const status = document.getElementById("status");
const btn = document.getElementById("reconnect");
const say = (t) => { status.textContent = t; };
function post(m) {
  if (window.parent !== window) {
    m.source = "sandbox-screen";
    window.parent.postMessage(m, "*");
  }
}
let rfb = null;
function connect() {
  if (!ticket) {
    say("no ticket: mint one with POST /v1/sandbox/{id}/screen/ticket and open its url");
    btn.hidden = false;
    post({ needTicket: true });
    return;
  }
  const url = new URL(location.pathname.replace(/\/screen\/?$/, "/screen/ws"), location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.searchParams.set("ticket", ticket);
  ticket = null;
  say("connecting…");
  const ws = new WebSocket(url.href, ["binary"]);
  ws.binaryType = "arraybuffer";
  let why = "";
  ws.addEventListener("close", (e) => { why = e.reason; });
  rfb = new RFB(document.getElementById("screen"), ws, {});
  rfb.scaleViewport = true;
  rfb.background = "#222";
  rfb.addEventListener("connect", () => {
    say("connected");
    btn.hidden = true;
    post({ ready: true });
  });
  rfb.addEventListener("disconnect", (e) => {
    setTimeout(() => { // the close event carries the reason; let it land
      say((e.detail.clean ? "disconnected" : "connection failed") + (why ? ": " + why : "") + " — reconnecting needs a new ticket");
      btn.hidden = false;
      post({ closed: true, reason: why });
    }, 0);
  });
}
btn.onclick = () => { if (ticket) connect(); else post({ needTicket: true }); };
window.addEventListener("message", (e) => {
  if (e.source === window.parent && e.data && typeof e.data.ticket === "string") {
    ticket = e.data.ticket;
    connect();
  }
});
connect();
