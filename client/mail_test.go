package client_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
)

// mailFake is a fake api.MailService that records the request it got and answers a fixed
// message, to check that every mail route carries its request and answer intact.
type mailFake struct {
	*fake
	got any
}

var mailMsg = api.Message{ID: "01JA0000000000000000000000", From: "alice@h1", Subject: "s <&>", Body: "b\n\u2028", Agent: "bob", State: "notified"}

func (m *mailFake) InboxPage(_ context.Context, req api.InboxRequest) (api.InboxPage, error) {
	m.got = req
	return api.InboxPage{Messages: []api.Message{mailMsg}, More: 3}, nil
}

func (m *mailFake) WaitNew(_ context.Context, req api.WaitRequest) (api.InboxPage, error) {
	m.got = req
	return api.InboxPage{}, nil
}

func (m *mailFake) Thread(_ context.Context, req api.ThreadRequest) (api.Thread, error) {
	m.got = req
	if req.ID == "missing" {
		return api.Thread{}, api.ErrNotFound
	}
	return api.Thread{Thread: req.ID, Messages: []api.Message{mailMsg}}, nil
}

func (m *mailFake) Search(_ context.Context, req api.SearchRequest) (api.SearchResult, error) {
	m.got = req
	return api.SearchResult{Query: req.Query, Messages: []api.Message{mailMsg}, More: true}, nil
}

func (m *mailFake) Reply(_ context.Context, req api.ReplyRequest) (api.SendResult, error) {
	m.got = req
	return api.SendResult{ID: "01JB0000000000000000000000", Hosts: []string{"h1"}}, nil
}

func (m *mailFake) KnownAgents(context.Context) ([]api.KnownAgent, error) {
	m.got = "known"
	return []api.KnownAgent{{Host: "h1", Name: "alice", Address: "alice@h1"}}, nil
}

func TestMailRoutesRoundTrip(t *testing.T) {
	f := &mailFake{fake: newFake()}
	c := dial(t, serve(t, f))
	ctx := testCtx(t)
	check := func(name string, err error, want any) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(f.got, want) {
			t.Errorf("%s: service got %+v, want %+v", name, f.got, want)
		}
	}
	p, err := c.InboxPage(ctx, api.InboxRequest{Agent: "bob", All: true, Since: "01J9", Limit: 7, Peek: true})
	check("InboxPage", err, api.InboxRequest{Agent: "bob", All: true, Since: "01J9", Limit: 7, Peek: true})
	if p.More != 3 || !reflect.DeepEqual(p.Messages, []api.Message{mailMsg}) {
		t.Errorf("InboxPage = %+v", p)
	}
	p, err = c.WaitNew(ctx, api.WaitRequest{Agent: "bob", Timeout: 1500 * time.Millisecond, Limit: 2})
	check("WaitNew", err, api.WaitRequest{Agent: "bob", Timeout: 1500 * time.Millisecond, Limit: 2})
	if p.Messages == nil || len(p.Messages) != 0 {
		t.Errorf("an empty wait answered %#v, want an empty list", p.Messages)
	}
	th, err := c.Thread(ctx, api.ThreadRequest{Agent: "bob", ID: "01JA"})
	check("Thread", err, api.ThreadRequest{Agent: "bob", ID: "01JA"})
	if th.Thread != "01JA" || len(th.Messages) != 1 || th.Messages[0].Body != mailMsg.Body {
		t.Errorf("Thread = %+v", th)
	}
	sr, err := c.Search(ctx, api.SearchRequest{Agent: "bob", Query: "a&b c=d", Limit: 3})
	check("Search", err, api.SearchRequest{Agent: "bob", Query: "a&b c=d", Limit: 3})
	if !sr.More || sr.Query != "a&b c=d" {
		t.Errorf("Search = %+v", sr)
	}
	rr, err := c.Reply(ctx, api.ReplyRequest{From: "bob", ID: "01JA", Body: "thanks\n", Subject: "s"})
	check("Reply", err, api.ReplyRequest{From: "bob", ID: "01JA", Body: "thanks\n", Subject: "s"})
	if rr.ID == "" {
		t.Errorf("Reply = %+v", rr)
	}
	ks, err := c.KnownAgents(ctx)
	check("KnownAgents", err, "known")
	if len(ks) != 1 || ks[0].Address != "alice@h1" {
		t.Errorf("KnownAgents = %+v", ks)
	}
	if _, err := c.Thread(ctx, api.ThreadRequest{ID: "missing"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a missing thread: %v, want not found", err)
	}
	if _, err := c.Search(ctx, api.SearchRequest{Query: "x", Limit: -1}); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("a negative limit: %v, want bad request", err)
	}
}

func TestMailRoutesWithoutMailService(t *testing.T) {
	c := dial(t, serve(t, newFake()))
	if _, err := c.Search(testCtx(t), api.SearchRequest{Query: "x"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("search on a daemon without it: %v, want not found", err)
	}
}
