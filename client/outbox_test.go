package client_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

// outboxFake is a fake api.OutboxService that records the page request it got.
type outboxFake struct {
	*fake
	got api.OutboxRequest
}

var outboxRow = api.OutboxRow{MsgID: "01JA0000000000000000000000", Host: "h1", Kind: "envelope", State: "pending",
	Transport: "lan", Attempts: 2, NextAt: "2026-10-02T10:00:00.000Z", LastError: "dial tcp: refused",
	Waiting: "peer h1 unreachable since 2026-10-02T09:58:00.000Z"}

func (o *outboxFake) RetryOutbox(context.Context, api.RetryRequest) (api.RetryResult, error) {
	return api.RetryResult{}, nil
}

func (o *outboxFake) OutboxPage(_ context.Context, req api.OutboxRequest) (api.OutboxPage, error) {
	o.got = req
	if req.Limit == 0 {
		return api.OutboxPage{}, nil
	}
	return api.OutboxPage{Rows: []api.OutboxRow{outboxRow}, More: 41}, nil
}

// The outbox page route carries the states, --all and the limit, and answers the rows and the
// count of those left out; an empty page is an empty list, not null.
func TestOutboxPageRoundTrip(t *testing.T) {
	f := &outboxFake{fake: newFake()}
	c := dial(t, serve(t, f))
	ctx := testCtx(t)
	req := api.OutboxRequest{States: []string{"pending", "rejected"}, All: true, Limit: 7}
	p, err := c.OutboxPage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.got, req) || p.More != 41 || !reflect.DeepEqual(p.Rows, []api.OutboxRow{outboxRow}) {
		t.Fatalf("service got %+v; answer %+v", f.got, p)
	}
	p, err = c.OutboxPage(ctx, api.OutboxRequest{})
	if err != nil || p.Rows == nil || len(p.Rows) != 0 || !reflect.DeepEqual(f.got, api.OutboxRequest{}) {
		t.Fatalf("empty page: %#v, %v (service got %+v)", p, err, f.got)
	}
	_, err = c.OutboxPage(ctx, api.OutboxRequest{States: strings.Split("a,b,c,d,e,f,g", ",")})
	if !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("seven states: %v, want a bad request", err)
	}
}

// A daemon whose service has no outbox pages says so.
func TestOutboxPageNotServed(t *testing.T) {
	c := dial(t, serve(t, newFake()))
	if _, err := c.OutboxPage(testCtx(t), api.OutboxRequest{}); err == nil || !strings.Contains(err.Error(), "cannot list outbox pages") {
		t.Fatalf("OutboxPage on a plain service: %v", err)
	}
}
