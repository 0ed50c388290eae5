package edge

import (
	"context"
	"embed"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/coder/websocket"
)

//go:embed static
var staticFiles embed.FS

// WebSocketPath is where the WebSocket endpoint is served.
const WebSocketPath = "/ws"

// MaxHeaderBytes bounds a request's headers (http.Server's
// MaxHeaderBytes); nothing the edge serves needs more.
const MaxHeaderBytes = 8 << 10

// SendBuffer is the kernel's send buffer for each browser's socket
// (SO_SNDBUF), set by ConnContext.
const SendBuffer = 256 << 10

// ConnContext is for http.Server.ConnContext. It bounds what the kernel
// buffers toward each browser, so that what is sent and not yet taken is
// about one message: left alone, a loopback socket grows its buffer to
// megabytes, several frames a slow browser would draw late instead of
// skipping.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(SendBuffer)
	}
	return ctx
}

// Handler serves the viewer at / (static files embedded in the binary),
// and the WebSocket at /ws. Every request is checked against the allowed
// hosts; the WebSocket also against the allowed origins and the token.
func (e *Edge) Handler() http.Handler {
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded tree is part of the build
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+WebSocketPath, e.serveWS)
	mux.Handle("GET /{$}", files)
	for _, name := range []string{"viewer.js", "viewer.css"} {
		mux.Handle("GET /"+name, files)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.hostAllowed(r.Host) {
			e.c.refusedHost.Add(1)
			e.notify()
			http.Error(w, "this edge does not answer to the host "+strconv.Quote(r.Host), http.StatusForbidden)
			return
		}
		h := w.Header()
		// The page loads nothing from elsewhere and talks only to its own
		// origin; nobody may frame it.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "+
			"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		mux.ServeHTTP(w, r)
	})
}

// hostAllowed keeps a DNS-rebinding page off a loopback edge: such a
// page's requests carry its own host name.
func (e *Edge) hostAllowed(hostport string) bool {
	if !e.cfg.LoopbackHosts {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range e.cfg.AllowedHosts {
		if strings.EqualFold(a, host) || strings.EqualFold(a, hostport) {
			return true
		}
	}
	return false
}

// normalOrigin is an origin as browsers send it, lowercased: scheme and
// host[:port], nothing else; "" if s is not one.
func normalOrigin(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// originAllowed admits a request without Origin (not a page), a page of
// the edge's own origin, and the origins allowed.
func (e *Edge) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	n := normalOrigin(o)
	if n == "" {
		return false // "null" and other opaque origins
	}
	if _, host, _ := strings.Cut(n, "://"); strings.EqualFold(host, r.Host) {
		return true
	}
	for _, a := range e.cfg.AllowedOrigins {
		if a == "*" || normalOrigin(a) == n {
			return true
		}
	}
	return false
}

func (e *Edge) serveWS(w http.ResponseWriter, r *http.Request) {
	if !e.originAllowed(r) {
		e.c.refusedOrigin.Add(1)
		e.notify()
		http.Error(w, "this edge does not serve pages of the origin "+strconv.Quote(r.Header.Get("Origin"))+
			" (flybus edge --allow-origin admits one)", http.StatusForbidden)
		return
	}
	authed := false
	if e.cfg.Token != "" {
		if a := r.Header.Get("Authorization"); a != "" {
			scheme, tok, _ := strings.Cut(a, " ")
			if !strings.EqualFold(scheme, "Bearer") || !tokenEqual(strings.TrimSpace(tok), e.cfg.Token) {
				e.c.refusedToken.Add(1)
				e.notify()
				http.Error(w, "wrong token", http.StatusUnauthorized)
				return
			}
			authed = true
		}
	}
	e.mu.Lock()
	if e.closed || len(e.all) >= e.cfg.MaxClients {
		closed := e.closed
		e.mu.Unlock()
		e.c.refusedFull.Add(1)
		e.notify()
		w.Header().Set("Retry-After", "5")
		msg := "the edge serves at most " + strconv.Itoa(e.cfg.MaxClients) + " browsers at once"
		if closed {
			msg = "the edge is shutting down"
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	// The seat is taken before the upgrade, so that a flood of
	// handshakes cannot pass the bound.
	b := newBrowser(e, nil, r.RemoteAddr, authed)
	e.all[b] = struct{}{}
	e.wg.Add(1)
	e.mu.Unlock()
	defer e.wg.Done()

	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}, InsecureSkipVerify: true})
	if err != nil {
		e.unregister(b)
		return
	}
	conn.SetReadLimit(MaxRequestBytes)
	b.mu.Lock()
	b.conn = conn
	b.mu.Unlock()
	if conn.Subprotocol() != Subprotocol {
		e.c.protocolErrors.Add(1)
		conn.Close(websocket.StatusPolicyViolation, "offer the subprotocol "+Subprotocol)
		e.unregister(b)
		return
	}
	b.run()
}
