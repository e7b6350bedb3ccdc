package relaylink

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentmbx/agentmbx/api"
)

// Account tokens (issue 11): a hosted relay admits hosts by a short-lived JWT from an accounts
// service. The host sends it as the enrolment's proof. It comes from the token file pinned with
// `relay set --token-file` (read again at each enrolment, so another process can refresh it), else
// from $MBX_RELAY_TOKEN; with neither the host enrols by the host-key challenge. The token is a
// secret: it is never logged nor shown, only its exp and account claims.

// EnvRelayToken names the environment variable holding an account token.
const EnvRelayToken = "MBX_RELAY_TOKEN"

// maxTokenBytes bounds a token file.
const maxTokenBytes = 16 << 10

// Token is the account token to enrol with ("" for none): the token file's (a Record's
// TokenFile), else $MBX_RELAY_TOKEN.
func Token(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(EnvRelayToken)), nil
	}
	return readTokenFile(file)
}

func readTokenFile(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("token file %s: %w", file, err)
	case len(b) > maxTokenBytes:
		return "", fmt.Errorf("token file %s: over %d bytes", file, maxTokenBytes)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", file)
	}
	return tok, nil
}

// checkTokenFile checks a token file given to relay set: an absolute path to a readable file.
// Its token may have expired (another process refreshes it); it is not checked here.
func checkTokenFile(file string) error {
	if file == "" {
		return nil
	}
	if !filepath.IsAbs(file) {
		return errors.New("the token file must be an absolute path")
	}
	_, err := readTokenFile(file)
	return err
}

// tokenStatus describes the token this host enrols with (nil for none). It reads the claims
// without verifying them: only the relay can.
func tokenStatus(file string, now time.Time) *api.RelayToken {
	src := file
	if file == "" {
		src = "$" + EnvRelayToken
	}
	tok, err := Token(file)
	switch {
	case err != nil:
		return &api.RelayToken{Source: src, Error: err.Error()}
	case tok == "":
		return nil
	}
	var c struct {
		jwt.RegisteredClaims
		Account string `json:"account"`
	}
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &c); err != nil {
		return &api.RelayToken{Source: src, Error: "not a JWT"}
	}
	t := &api.RelayToken{Source: src, Account: c.Account}
	if c.ExpiresAt != nil {
		t.Exp = c.ExpiresAt.UTC().Format(time.RFC3339)
		t.Expired = !now.Before(c.ExpiresAt.Time)
	}
	return t
}
