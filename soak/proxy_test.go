package soak

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// upstream counts the requests it served and echoes their bodies.
func upstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.RequestURI())
		w.WriteHeader(http.StatusCreated)
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv, &served
}

func startProxy(t *testing.T, target string, f Faults) *Proxy {
	p, err := StartProxy(target, 7, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func post(p *Proxy, body string) (*http.Response, string, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post("http://"+p.Addr()+"/v2/x?a=1", "text/plain", strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func TestProxyWithoutFaultsForwardsRequestsAndAnswers(t *testing.T) {
	srv, served := upstream(t)
	p := startProxy(t, strings.TrimPrefix(srv.URL, "http://"), Faults{})
	resp, body, err := post(p, "hello")
	if err != nil || resp.StatusCode != http.StatusCreated || body != "hello" || resp.Header.Get("X-Path") != "/v2/x?a=1" {
		t.Fatalf("through the proxy: %v %v %q", resp, err, body)
	}
	if served.Load() != 1 || p.Forwarded() != 1 || p.Lost() != 0 || p.Resets() != 0 {
		t.Fatalf("served %d, forwarded %d, lost %d, resets %d", served.Load(), p.Forwarded(), p.Lost(), p.Resets())
	}
}

// A lost response is the dangerous fault: the upstream did the work, the client sees an error.
func TestProxyLosesTheResponseAfterTheUpstreamServedIt(t *testing.T) {
	srv, served := upstream(t)
	p := startProxy(t, strings.TrimPrefix(srv.URL, "http://"), Faults{LoseResponse: 1})
	if _, _, err := post(p, "hello"); err == nil {
		t.Fatal("the client got an answer the proxy should have lost")
	}
	if served.Load() != 1 || p.Lost() != 1 {
		t.Fatalf("served %d, lost %d; want the request served and its answer lost", served.Load(), p.Lost())
	}
}

func TestProxyResetsBeforeForwarding(t *testing.T) {
	srv, served := upstream(t)
	p := startProxy(t, strings.TrimPrefix(srv.URL, "http://"), Faults{Reset: 1})
	if _, _, err := post(p, "hello"); err == nil {
		t.Fatal("the client got an answer through a reset connection")
	}
	if served.Load() != 0 || p.Resets() != 1 {
		t.Fatalf("served %d, resets %d; want nothing forwarded", served.Load(), p.Resets())
	}
}

// The same seed draws the same faults in the same order.
func TestProxyFaultsFollowTheSeed(t *testing.T) {
	f := Faults{Reset: 0.2, LoseResponse: 0.3}
	draws := func() []fate {
		p, err := StartProxy("127.0.0.1:1", 42, f)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		var out []fate
		for range 200 {
			_, x := p.draw()
			out = append(out, x)
		}
		return out
	}
	a, b := draws(), draws()
	counts := map[fate]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs between two proxies of one seed", i)
		}
		counts[a[i]]++
	}
	if counts[pass] == 0 || counts[reset] == 0 || counts[lose] == 0 {
		t.Fatalf("200 draws at 20%% reset, 30%% lose gave %v", counts)
	}
}
