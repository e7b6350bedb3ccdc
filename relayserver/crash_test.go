package relayserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// envChild makes the test binary a relay: TestMain serves the store in the directory it names
// until SIGTERM, like `agentmbx relay serve`. envArm names a failpoint the child arms (kill) once
// it is listening, so the commits of its own start-up do not trip it.
const (
	envChild = "MBX_RELAY_TEST_CHILD_DIR"
	envArm   = "MBX_RELAY_TEST_ARM_FAILPOINT"
	// envChildOptions holds relayserver.Options as JSON (numeric fields only) for the child.
	envChildOptions = "MBX_RELAY_TEST_OPTIONS"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envChild); dir != "" {
		os.Exit(childRelay(dir))
	}
	os.Exit(m.Run())
}

func childRelay(dir string) int {
	relayserver.TuneGC(os.Getenv) // as relay serve runs
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	tp, _ := relayserver.ParseTrustProxy(os.Getenv(relayserver.EnvRelayTrustProxy)) // the abuse runs
	opt := relayserver.Options{TrustProxy: tp}
	if js := os.Getenv(envChildOptions); js != "" {
		if err := json.Unmarshal([]byte(js), &opt); err != nil {
			fmt.Fprintln(os.Stderr, "child relay: options:", err)
			return 1
		}
	}
	err := relayserver.Serve(ctx, relayserver.ServeConfig{
		Options:  opt,
		StoreDir: dir,
		Listen:   "127.0.0.1:0",
		AddrFile: filepath.Join(dir, "addr"),
		// The metrics listener lets tests see what the child holds (parked polls).
		MetricsListen:   "127.0.0.1:0",
		MetricsAddrFile: filepath.Join(dir, "metrics-addr"),
		Open: func(ctx context.Context, dir string) (relayserver.Store, error) {
			return sqlitestore.Open(ctx, dir, nil)
		},
		Ready: func(string) {
			if name := os.Getenv(envArm); name != "" {
				failpoint.Enable(name, failpoint.Kill)
			}
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child relay:", err)
		return 1
	}
	return 0
}

// child is a relay process run from the test binary.
type child struct {
	t   *testing.T
	p   *testkit.Proc
	cmd *exec.Cmd
	url string
}

func startChild(t *testing.T, dir, fail string, env ...string) *child {
	t.Helper()
	addrFile := filepath.Join(dir, "addr")
	_ = os.Remove(addrFile)
	cmd := testkit.Child("", append([]string{envChild + "=" + dir, envArm + "=" + fail, relayserver.EnvRelayKey + "="}, env...)...)
	p := testkit.StartProc(t, cmd)
	return &child{t: t, p: p, cmd: cmd, url: "http://" + p.WaitAddr(t, addrFile)}
}

// stop ends the child with SIGTERM and waits for a clean exit.
func (c *child) stop() {
	c.t.Helper()
	if err := c.p.Stop(c.t); err != nil {
		c.t.Fatalf("child relay after SIGTERM: %v", err)
	}
}

// waitKilled waits for the child to die of SIGKILL.
func (c *child) waitKilled() {
	c.t.Helper()
	select {
	case <-c.p.Done():
		if !testkit.KilledBySIGKILL(c.p.Err()) {
			c.t.Fatalf("child exit = %v, want SIGKILL", c.p.Err())
		}
	case <-time.After(testkit.ChildWait):
		c.t.Fatal("child relay was not killed")
	}
}

func (c *child) call(h *host, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if h != nil {
		for k, v := range mbx.SignRelayHop(h.key, h.name, method, mbx.RelaySignedPath(req.URL), body, time.Now(), true) {
			req.Header[k] = v
		}
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (c *child) mustCall(h *host, method, path string, body []byte) []byte {
	c.t.Helper()
	code, b, err := c.call(h, method, path, body)
	if err != nil || code != 200 {
		c.t.Fatalf("%s %s = %d %s, %v", method, path, code, b, err)
	}
	return b
}

func (c *child) enrol(h host) {
	c.t.Helper()
	b := c.mustCall(nil, "POST", "/v1/relay/challenge", mustJSON(c.t, mbx.ChallengeRequest{Host: h.name, Pubkey: h.pub()}))
	var ch mbx.ChallengeResponse
	_ = json.Unmarshal(b, &ch)
	req, _ := mbx.SignEnrolment(h.key, h.name, ch.Challenge, "")
	c.mustCall(nil, "POST", "/v1/relay/enrol", mustJSON(c.t, req))
}

func (c *child) pull(h host) mbx.PullResponse {
	c.t.Helper()
	return decode[mbx.PullResponse](c.t, c.mustCall(&h, "GET", "/v2/relay/items?after=0", nil))
}

// crashSetup enrols alpha and beta on a fresh store and stops the relay cleanly.
func crashSetup(t *testing.T) (string, host, host) {
	if testing.Short() {
		t.Skip("child-process crash test")
	}
	dir := t.TempDir()
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	c := startChild(t, dir, "")
	c.enrol(a)
	c.enrol(b)
	c.stop()
	return dir, a, b
}

func TestCrashAfterCommitBeforeResponse(t *testing.T) {
	t.Parallel()
	dir, a, b := crashSetup(t)
	id := "01KKNTQ2CN9WJ3MR4Q1P12F02T"
	body := mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem(id, b)}})

	c := startChild(t, dir, relayserver.FailAfterCommitBeforeResponse)
	if code, out, err := c.call(&a, "POST", "/v2/relay/items", body); err == nil {
		t.Fatalf("push answered %d %s; the relay should have died before answering", code, out)
	}
	c.waitKilled()

	// The response was lost, the commit was not: the retry is a duplicate with the stored seq.
	c = startChild(t, dir, "")
	p := c.pull(b)
	if len(p.Items) != 1 || p.Items[0].ItemID != id {
		t.Fatalf("after the crash beta holds %+v, want the committed item", p.Items)
	}
	resp := decode[mbx.PushResponse](t, c.mustCall(&a, "POST", "/v2/relay/items", body))
	res := resp.Results[0]
	if res.Status != "duplicate" || res.Targets[0].Seq != p.Items[0].Seq {
		t.Fatalf("retry = %+v, want duplicate with seq %d", res, p.Items[0].Seq)
	}
	if p := c.pull(b); len(p.Items) != 1 {
		t.Fatalf("after the retry beta holds %d items, want 1", len(p.Items))
	}
	c.stop()
}

func TestCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	dir, a, b := crashSetup(t)
	id := "01KKNTQ2CN9WJ3MR4Q1P12F02T"
	body := mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem(id, b)}})

	c := startChild(t, dir, sqlitestore.FailBeforeCommit)
	if code, out, err := c.call(&a, "POST", "/v2/relay/items", body); err == nil {
		t.Fatalf("push answered %d %s; the relay should have died before committing", code, out)
	}
	c.waitKilled()

	c = startChild(t, dir, "")
	if p := c.pull(b); len(p.Items) != 0 || p.HeadSeq != 0 {
		t.Fatalf("an uncommitted push survived the crash: %+v", p)
	}
	resp := decode[mbx.PushResponse](t, c.mustCall(&a, "POST", "/v2/relay/items", body))
	if st := resp.Results[0].Status; st != "accepted" {
		t.Fatalf("retry = %s, want accepted", st)
	}
	if p := c.pull(b); len(p.Items) != 1 {
		t.Fatalf("beta holds %d items, want exactly 1", len(p.Items))
	}
	c.stop()
}

func TestSecondRelayOnSameStoreRefused(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("child-process test")
	}
	dir := t.TempDir()
	c := startChild(t, dir, "")
	_, err := sqlitestore.Open(bg, dir, &sqlitestore.Options{LockWait: 200 * time.Millisecond})
	if !errors.Is(err, relayserver.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprint(c.cmd.Process.Pid)) {
		t.Fatalf("second open while a relay runs = %v, want ErrLocked naming pid %d", err, c.cmd.Process.Pid)
	}
	c.stop()
}
