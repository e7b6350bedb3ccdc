package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
)

// Example runs a host daemon in a fresh home (as `agentmbx init` and `agentmbx daemon` would),
// then uses the SDK the way an agent does: alice sends, bob waits for mail, reads it and
// acknowledges it, and alice sees the acknowledgement.
func Example() {
	home, err := os.MkdirTemp("", "mbx") // a short path: the socket lives in the home
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(home)
	if err := host.Init(home, host.InitOptions{Host: "desk", Listen: "127.0.0.1:0"}); err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	daemon := make(chan error, 1)
	quiet := &host.Options{Logger: slog.New(slog.DiscardHandler)}
	go func() { daemon <- host.RunDaemon(ctx, home, host.DaemonOptions{Options: quiet}) }()

	// Dial answers ErrNoDaemon until the daemon serves its socket.
	var c *client.Client
	for {
		if c, err = client.Dial(ctx, home); err == nil {
			break
		}
		if !errors.Is(err, client.ErrNoDaemon) {
			log.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer c.Close()

	if _, err := c.AddAgent(ctx, api.Agent{Name: "bob", Role: "reviewer"}); err != nil {
		log.Fatal(err)
	}
	sent, err := c.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@desk"}, Subject: "lunch?", Body: "noon at the usual place"})
	if err != nil {
		log.Fatal(err)
	}

	// bob's loop: wait for unread mail, read each message, act, acknowledge.
	msgs, err := c.Wait(ctx, "bob", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		m, err := c.Read(ctx, api.ReadRequest{ID: m.ID, Agent: "bob"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("bob got %q from %s: %s\n", m.Subject, m.From, m.Body)
		if _, err := c.Ack(ctx, api.AckRequest{ID: m.ID, Agent: "bob", Note: "see you there"}); err != nil {
			log.Fatal(err)
		}
	}

	s, err := c.Sent(ctx, sent.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range s.Recipients {
		fmt.Printf("%s: %s (%s)\n", r.Recipient, r.State, r.Note)
	}

	_, err = c.Read(ctx, api.ReadRequest{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Agent: "bob"})
	fmt.Println("unknown message is not found:", errors.Is(err, client.ErrNotFound))

	stop()
	if err := <-daemon; err != nil {
		log.Fatal(err)
	}
	// Output:
	// bob got "lunch?" from alice@desk: noon at the usual place
	// bob@desk: acked (see you there)
	// unknown message is not found: true
}
