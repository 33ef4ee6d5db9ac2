package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

// Ports is what the port preview routes need: a connection to a port on a
// sandbox's own loopback.
type Ports interface {
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}

var _ Ports = (*service.Service)(nil)

func (s *Server) portRoutes(p string) {
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		s.handle(m+" "+p+"/{id}/ports/{port}/{path...}", s.preview, doc{Summary: "A port preview: the request, and its answer, relayed to an HTTP server listening on that port on the sandbox's own loopback " +
			"(over the exec channel; the sandbox's network stays shut). WebSocket upgrades pass through. Your Authorization header is not passed on. 502 when nothing listens",
			BodyRaw: "application/octet-stream", AnswerRaw: "application/octet-stream", Errors: []int{400, 404, 409, 501, 502}})
	}
}

// preview relays one request (one connection: the relay is per request)
// to the port inside. A refusal before the relay runs — another org's id,
// nothing listening — is an ordinary error answer.
func (s *Server) preview(w http.ResponseWriter, r *http.Request) error {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return sandbox.Errorf(sandbox.KindInvalid, "port %q: a port is 1-65535", r.PathValue("port"))
	}
	conn, err := s.Ports.DialPort(r.Context(), r.PathValue("id"), port)
	if err != nil {
		return err
	}
	defer conn.Close()
	handed := false
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if handed {
				return nil, errors.New("the preview's one connection is used")
			}
			handed = true
			return conn, nil
		},
	}
	defer tr.CloseIdleConnections()
	host := "127.0.0.1:" + strconv.Itoa(port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", host
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+r.PathValue("path"), ""
			pr.Out.Host = host
			// The caller's credential never enters the sandbox.
			pr.Out.Header.Del("Authorization")
			pr.SetXForwarded()
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, errorBody{Error: "the server on port " + strconv.Itoa(port) + " did not answer: " + err.Error()})
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}
