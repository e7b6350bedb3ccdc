package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
)

// eventsFake is an api.EventService whose stream the test feeds: each subscription's agent and
// channel are handed to the test on subs.
type eventsFake struct {
	*fake
	subs chan eventSub
}

type eventSub struct {
	agent string
	ch    chan api.MailEvent
	ctx   context.Context
}

func (e *eventsFake) MailEvents(ctx context.Context, agent string) (<-chan api.MailEvent, error) {
	if agent == "Bad" {
		return nil, fmt.Errorf("events: %w: agent name", api.ErrInvalid)
	}
	ch := make(chan api.MailEvent, 4)
	e.subs <- eventSub{agent, ch, ctx}
	return ch, nil
}

// Events cross the socket in order and intact; the daemon's end of the stream closes the
// client's channel, and the client's context ending ends the daemon's subscription.
func TestMailEvents(t *testing.T) {
	f := &eventsFake{fake: newFake(), subs: make(chan eventSub, 1)}
	c := dial(t, serve(t, f))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	ch, err := c.MailEvents(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	sub := <-f.subs // in place before MailEvents returned (the channel has room for one)
	if sub.agent != "bob" {
		t.Errorf("subscribed for %q, want bob", sub.agent)
	}
	want := []api.MailEvent{
		{Agent: "bob", ID: "01JA0000000000000000000000", Thread: "01JA0000000000000000000000", From: "ann@h2"},
		{Agent: "bob", ID: "01JA0000000000000000000001", Thread: "01JA0000000000000000000000", From: "ann@h2 <&>", Lost: 7},
	}
	for _, ev := range want {
		sub.ch <- ev
	}
	for i, w := range want {
		if got := <-ch; got != w {
			t.Errorf("event %d: %+v, want %+v", i, got, w)
		}
	}
	close(sub.ch) // the daemon stops
	if ev, ok := <-ch; ok {
		t.Errorf("event %+v after the daemon's stream ended", ev)
	}

	ch, err = c.MailEvents(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	sub = <-f.subs
	cancel()
	<-sub.ctx.Done() // the daemon's side sees the caller leave
	for range ch {
	}
}

// A refused subscription is the daemon's error; a daemon without an event stream says so.
func TestMailEventsErrors(t *testing.T) {
	f := &eventsFake{fake: newFake(), subs: make(chan eventSub, 1)}
	c := dial(t, serve(t, f))
	if _, err := c.MailEvents(testCtx(t), "Bad"); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("bad agent: %v, want ErrBadRequest", err)
	}
	plain := dial(t, serve(t, newFake()))
	_, err := plain.MailEvents(testCtx(t), "bob")
	if !errors.Is(err, client.ErrNotFound) {
		t.Errorf("no event stream: %v, want ErrNotFound", err)
	}
}
