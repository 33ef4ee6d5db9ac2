// Package pages serves the terminal and screen pages: self-contained HTML
// with xterm.js or noVNC inlined (pinned versions vendored from npm by
// scripts/vendor-web.sh, embedded in the binary), so a page loads nothing
// from any other origin. The pages are not gated: they hold no secret; the
// ticket in their URL is what opens the socket.
package pages

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
)

//go:embed assets/xterm.js assets/xterm.css assets/addon-fit.js assets/novnc.js terminal.js screen.js
var files embed.FS

func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return string(b)
}

// Page is one built page and its Content-Security-Policy.
type Page struct {
	html []byte
	csp  string
}

// script is one inline script element.
type script struct {
	module bool
	body   string
}

func build(title, style, bodyHTML string, scripts ...script) Page {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n")
	b.WriteString("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" + title + "</title>\n")
	b.WriteString("<style>" + style + "</style>\n</head><body>\n" + bodyHTML + "\n")
	var hashes []string
	for _, s := range scripts {
		// Source maps would be fetched from this origin and are not shipped.
		body := strings.ReplaceAll(s.body, "//# sourceMappingURL=", "// ")
		if s.module {
			b.WriteString("<script type=\"module\">" + body + "</script>\n")
		} else {
			b.WriteString("<script>" + body + "</script>\n")
		}
		sum := sha256.Sum256([]byte(body))
		hashes = append(hashes, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	b.WriteString("</body></html>\n")
	// Scripts run only by hash; the socket goes to this origin only. Styles
	// must allow inline: both libraries set element styles at run time.
	csp := "default-src 'none'; script-src " + strings.Join(hashes, " ") +
		"; style-src 'unsafe-inline'; img-src data: blob:; font-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'"
	return Page{html: []byte(b.String()), csp: csp}
}

const chrome = `html,body{height:100%;margin:0;background:#111;color:#ccc;font:13px system-ui,sans-serif;overflow:hidden}
#bar{height:28px;display:flex;align-items:center;gap:8px;padding:0 8px;box-sizing:border-box;border-bottom:1px solid #333}
#bar button{font:inherit}
#term,#screen{position:absolute;top:28px;left:0;right:0;bottom:0}`

const bar = `<div id="bar"><span id="status">loading…</span><button id="reconnect" hidden>Reconnect</button></div>`

// Terminal is the terminal page, built on first use: hashing the inlined
// libraries at init cost every start of the binary (each CLI call) 6 ms.
var Terminal = sync.OnceValue(func() Page {
	return build("sandbox terminal", read("assets/xterm.css")+"\n"+chrome,
		bar+`<div id="term"></div>`,
		script{body: read("assets/xterm.js")}, script{body: read("assets/addon-fit.js")}, script{body: read("terminal.js")})
})

// Screen is the screen page. noVNC's bundle and the page's code are ONE
// module: the bundle ends in a top-level await, and a second module script
// would not wait for it. The page's code is a block, so its names cannot
// clash with the bundle's minified ones.
var Screen = sync.OnceValue(func() Page {
	return build("sandbox screen", chrome, bar+`<div id="screen"></div>`,
		script{module: true, body: read("assets/novnc.js") + "\n{\n" + read("screen.js") + "\n}\n"})
})

// Serve writes the page, allowing it to be framed by frameAncestors (a CSP
// source list, e.g. "'self' https://app.example.com").
func (p Page) Serve(w http.ResponseWriter, frameAncestors string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", p.csp+"; frame-ancestors "+frameAncestors)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer") // the URL carries a ticket
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(p.html)
}
