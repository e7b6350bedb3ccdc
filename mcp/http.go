package mcp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/internal/fsutil"
)

// The Streamable HTTP transport (`agentmbx mcp --http ADDR`): the same server, for agents in
// containers and local tools that cannot spawn a process. Every request carries the bearer token
// kept in the host home (TokenFile, mode 0600), checked in constant time before the SDK reads
// anything of the request; the SDK bounds each body and refuses a localhost request whose Host
// header is not localhost (DNS rebinding).

// TokenFile is the file of the HTTP transport's bearer token in a host home.
const TokenFile = "mcp-token"

// tokenBytes is the size of a token's randomness (256 bits, 43 characters of base64url).
const tokenBytes = 32

// HTTP server bounds: a request's headers before the token is checked, and idle sessions.
const (
	maxHeaderBytes    = 16 << 10
	readHeaderTimeout = 10 * time.Second
	sessionTimeout    = 30 * time.Minute
)

// LoadToken returns the bearer token of home, creating it when there is none. A token file that
// others may read, or that is not a token, is refused (with what to do).
func LoadToken(home string) (string, error) {
	path := filepath.Join(home, TokenFile)
	for range 2 {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			if err := newToken(path); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("mcp: create the bearer token %s: %w", path, err)
			}
			continue // made here, or by a second server at the same moment: read it
		}
		if err != nil {
			return "", fmt.Errorf("mcp: bearer token: %w", err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return "", fmt.Errorf("mcp: bearer token: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 || !st.Mode().IsRegular() {
			return "", fmt.Errorf("mcp: the bearer token %s has mode %v: others may read it; run `chmod 600 %s` (or remove it for a new one)", path, st.Mode(), path)
		}
		data, err := io.ReadAll(io.LimitReader(f, 256))
		if err != nil {
			return "", fmt.Errorf("mcp: bearer token: %w", err)
		}
		tok := strings.TrimSpace(string(data))
		if len(tok) < 32 || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return "", fmt.Errorf("mcp: %s holds no token (32 to 255 printable characters); remove it for a new one", path)
		}
		return tok, nil
	}
	return "", fmt.Errorf("mcp: bearer token %s vanished while being made", path)
}

func newToken(path string) error {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	f, err := fsutil.CreateExclusive(path, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(base64.RawURLEncoding.EncodeToString(b[:]) + "\n")
	if werr == nil {
		werr = f.Sync()
	}
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(path)
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

// HTTPHandler serves srv over Streamable HTTP to requests that bear token.
func HTTPHandler(srv *sdk.Server, token string) http.Handler {
	want := sha256.Sum256([]byte(token))
	verify := func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		h := sha256.Sum256([]byte(got)) // equal lengths, so the comparison time says nothing
		if subtle.ConstantTimeCompare(h[:], want[:]) != 1 {
			return nil, fmt.Errorf("%w: wrong bearer token (it is in the host home's %s)", auth.ErrInvalidToken, TokenFile)
		}
		return &auth.TokenInfo{UserID: "owner"}, nil
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv },
		&sdk.StreamableHTTPOptions{SessionTimeout: sessionTimeout, MaxRequestBodyBytes: sdk.DefaultMaxRequestBodyBytes})
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// ServeHTTP serves the tools over Streamable HTTP on ln, to requests bearing token, until ctx
// ends.
func ServeHTTP(ctx context.Context, opts Options, ln net.Listener, token string) error {
	srv, err := NewServer(opts)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: HTTPHandler(srv, token), ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes: maxHeaderBytes, IdleTimeout: 2 * time.Minute}
	stop := context.AfterFunc(ctx, func() { hs.Close() }) // sessions hold streams open: no graceful wait
	defer stop()
	err = hs.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Loopback reports whether addr (host:port) listens on the loopback interface only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
