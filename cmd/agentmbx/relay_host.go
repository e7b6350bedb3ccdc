package main

// The host's side of the relay: `agentmbx relay set | unset | status | quarantine`. Like every
// host command they go through the daemon when one runs and to the store otherwise.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/shellquote"
	"github.com/agentmbx/agentmbx/internal/termtext"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// relayHostCommands are the relay subcommands that configure and inspect this host's use of a
// relay (registered by newRelayCmd beside serve and keygen).
func relayHostCommands() []*cobra.Command {
	return []*cobra.Command{newRelaySetCmd(), newRelayUnsetCmd(), newRelayStatusCmd(), newRelayQuarantineCmd()}
}

// relay returns the host's relay side: the daemon's over its socket, or the store's.
func (c *conn) relay() api.RelayService {
	if c.host != nil {
		return c.host.Relay()
	}
	return c.daemon
}

func newRelaySetCmd() *cobra.Command {
	var (
		home, key, caFile, tokenFile string
		asJSON, allowV1, allowHTTP   bool
	)
	cmd := &cobra.Command{
		Use:   "set URL [--key FINGERPRINT | --allow-v1] [--ca FILE] [--token-file FILE]",
		Short: "Use the relay at URL for peers the LAN does not reach",
		Long: `Pin the relay at URL: fetch its info, show its key's fingerprint and pin it. With --key the
served key must have that fingerprint (or be that base64 key), else nothing is pinned; without it
the key is trusted on first use, so compare the fingerprint with the relay's operator.

If the relay later serves another key, this host stops using it and ` + "`agentmbx relay status`" + ` says
so, until the owner confirms the new key by running relay set again (with --key).

The daemon then enrols this host at the relay, publishes its enc-key ad and the list of peers
allowed to send to it, and sends mail through the relay to peers it cannot reach on the LAN.

An https relay's certificate must verify against the system roots, or against the private CA
given with --ca (its PEM file; kept with the pin). A plain http:// URL to anything but loopback
works (hops are signed and bodies sealed) but shows its metadata to the network: it is warned
about here and by doctor.

A hosted relay may admit hosts by account token: a short-lived JWT from its accounts service,
bound to this host's key. --token-file names a file holding it, read again at each enrolment (so
another process can keep it fresh); without it the daemon uses $MBX_RELAY_TOKEN when set.

A relay of AgentMBX 0.5.x before 0.5.5 speaks only the v1 API: it has no key, so there is no
identity to pin, and nothing it answers is signed. relay set refuses it (always with --key);
--allow-v1 accepts it knowingly. The daemon then speaks v1 to it: mail the relay took stays
pending, shown as sent through the v1 relay, until its delivery receipt comes back; doctor warns
that the relay is unauthenticated, and says so when it starts answering v2, with the key to pin.`,
		Example: `  agentmbx relay set https://relay.example.com --key a9d0-987f-ae26-edc0
  agentmbx relay set https://relay.internal:7374 --key a9d0-987f-ae26-edc0 --ca ./private-ca.pem
  agentmbx relay set https://relay.hosted.example --key a9d0-987f-ae26-edc0 --token-file ~/.config/mbx/token
  agentmbx relay set https://old-relay.example --allow-v1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := readCA(caFile)
			if err != nil {
				return err
			}
			if tokenFile != "" {
				if tokenFile, err = filepath.Abs(tokenFile); err != nil {
					return err
				}
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				st, err := c.relay().RelaySet(ctx, api.RelaySetRequest{URL: args[0], Key: key, CA: string(ca), TokenFile: tokenFile, AllowV1: allowV1, AllowHTTP: allowHTTP})
				if err != nil {
					return explainRelayErr(err)
				}
				if relayclient.PlainRemote(st.URL) {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning: plain http to a remote relay: hops are signed and bodies sealed, but who talks to whom travels in clear; prefer https")
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), st)
				}
				w := cmd.OutOrStdout()
				if st.V1 {
					fmt.Fprintf(w, "relay:       %s\nprotocol:    v1 only (no relay key: nothing it answers is signed)\n", st.URL)
					fmt.Fprintln(w, "mail it takes stays pending until its delivery receipt; `agentmbx doctor` says when it answers v2, with the key to pin")
					if !st.Daemon {
						fmt.Fprintln(w, "the daemon enrols at the relay when it runs (`agentmbx daemon`)")
					}
					return nil
				}
				fmt.Fprintf(w, "relay:       %s\nfingerprint: %s\n", st.URL, st.Fingerprint)
				if st.Replaced != "" {
					fmt.Fprintf(w, "replaces the pinned key %s\n", st.Replaced)
				}
				if st.TOFU {
					fmt.Fprintln(w, "trusted on first use: compare this fingerprint with the relay's operator, or pin with --key FINGERPRINT")
				} else {
					fmt.Fprintln(w, "the relay serves the key given with --key")
				}
				if !st.Daemon {
					fmt.Fprintln(w, "the daemon enrols at the relay when it runs (`agentmbx daemon`)")
				}
				return nil
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().StringVar(&key, "key", "", "the relay key's fingerprint (xxxx-xxxx-xxxx-xxxx, ed25519: prefix and case optional) to require instead of trusting the first answer")
	cmd.Flags().StringVar(&caFile, "ca", "", "trust the relay's certificate when the private CA in this PEM file signed it")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "enrol with the account token in this file (read at each enrolment; default $MBX_RELAY_TOKEN)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the relay status as JSON")
	cmd.Flags().BoolVar(&allowV1, "allow-v1", false, "accept a relay that speaks only the v1 API (no key: unauthenticated)")
	cmd.Flags().BoolVar(&allowHTTP, "allow-http", false, "allow a plain http:// URL to a relay that is not on this machine")
	return cmd
}

func newRelayUnsetCmd() *cobra.Command {
	var home string
	cmd := &cobra.Command{
		Use:   "unset",
		Short: "Stop using the relay",
		Long: `Forget the pinned relay: nothing more is sent through it or pulled from it. Mail the relay
already accepted waits for its delivery receipts (over the LAN) until its deadline.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				if _, err := c.relay().RelayUnset(ctx); err != nil {
					return err
				}
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "relay unset")
				return err
			})
		},
	}
	addHomeFlag(cmd, &home)
	return cmd
}

func newRelayStatusCmd() *cobra.Command {
	var (
		home   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show the pinned relay and what this host did with it",
		Long: `Show the pinned relay and what this host did with it: the pin, enrolment, epoch, publications,
the receive position, the rows the relay holds, quarantine and the last failures. It exits 1 when
relay use is stopped (the relay served another key, or refused the enrolment), with the fix.`,
		Example: `  agentmbx relay status
  agentmbx relay status --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				st, err := c.relay().RelayStatus(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					err = printJSON(cmd.OutOrStdout(), st)
				} else {
					err = printRelayStatus(cmd.OutOrStdout(), st, home)
				}
				if err == nil && relayBlocked(st) != "" {
					return &exitStatus{code: 1, why: relayBlocked(st)}
				}
				return err
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func printRelayStatus(w io.Writer, st api.RelayStatus, home string) error {
	if !st.Configured {
		_, err := fmt.Fprintf(w, "no relay set (pin one with `agentmbx relay set URL --key FINGERPRINT`)\nquarantined: %d\n", st.Quarantined)
		return err
	}
	line := func(k, v string) { fmt.Fprintf(w, "%-14s %s\n", k+":", v) }
	line("relay", st.URL)
	fp := st.Fingerprint
	if st.TOFU {
		fp += " (trusted on first use)"
	}
	if st.V1 {
		fp = "none: the relay speaks only v1 (--allow-v1), nothing it answers is signed"
	}
	line("key", fp)
	if st.V2 != nil {
		line("v2", fmt.Sprintf("the relay answers v2 since %s, with key %s", st.V2.At, st.V2.Fingerprint))
		line("fix", "to use it authenticated, compare that fingerprint with its operator and pin it: agentmbx relay set "+st.URL+" --key "+st.V2.Fingerprint)
	}
	switch enrolErr, failing := enrolRefusal(st), enrolFailing(st); {
	case st.Stopped && st.KeyChange != nil:
		line("state", fmt.Sprintf("STOPPED: the relay served key %s, not the pinned %s (at %s)", st.KeyChange.Served, st.KeyChange.Pinned, st.KeyChange.At))
		line("why", "if the relay really has a new key (ask its operator), confirm it")
		line("fix", hostCommand(home, "relay", "set", st.URL, "--key", st.KeyChange.Served))
	case enrolErr != "" && st.Token != nil:
		line("state", "STOPPED: the relay refused the enrolment: "+enrolErr)
		line("why", "get a fresh account token into "+st.Token.Source+" for this host's key, then restart the daemon")
		line("fix", hostCommand(home, "daemon", "stop")+" && "+hostCommand(home, "daemon"))
	case enrolErr != "":
		line("state", "STOPPED: the relay refused the enrolment: "+enrolErr)
		line("why", "ask the relay's operator to admit this host's key, then restart the daemon")
		line("fix", hostCommand(home, "daemon", "stop")+" && "+hostCommand(home, "daemon"))
	case failing != "":
		line("state", "waiting: the last enrolment failed and is retried: "+failing)
		line("why", "is the relay up and reachable?")
		line("fix", "agentmbx relay info "+shellquote.Quote(st.URL))
	default:
		line("state", "in use")
	}
	line("epoch", orDash(st.Epoch))
	line("account", orDash(st.Account))
	if st.Token != nil {
		line("token", tokenLine(*st.Token))
	}
	if st.Enrolled {
		line("enrolled", "yes, at "+st.EnrolledAt)
	} else {
		line("enrolled", "no")
	}
	if st.EncAdAt != "" {
		line("enc-key ad", "published "+st.EncAdAt+", expires "+st.EncAdExp)
	} else {
		line("enc-key ad", "not published")
	}
	if st.SendersAt != "" {
		line("senders", fmt.Sprintf("%d peer keys, published %s", st.Senders, st.SendersAt))
	} else {
		line("senders", "not published")
	}
	recv := receivePosition(st.ReceivedThrough)
	if st.PositionEpoch != "" {
		recv += " of epoch " + st.PositionEpoch
	}
	if st.Resets > 0 {
		recv += fmt.Sprintf(" (%d resets)", st.Resets)
	}
	line("received", recv)
	line("awaiting", fmt.Sprintf("%d relay-accepted messages wait for their delivery receipts", st.RelayAccepted))
	line("quarantined", strconv.Itoa(st.Quarantined))
	for _, p := range st.Problems {
		line("problem", fmt.Sprintf("%s: %s (%s)", p.Op, p.Error, p.At))
	}
	if !st.Daemon {
		line("daemon", "not running: nothing goes through the relay until `agentmbx daemon` runs")
	}
	return nil
}

// enrolRefusal is the relay's refusal of the last enrolment ("" when it was not refused: it
// succeeded, or failed in a way a retry may mend, such as the relay being down).
func enrolRefusal(st api.RelayStatus) string {
	for _, p := range st.Problems {
		if p.Op == "enrol" && p.Refused() {
			return p.Error
		}
	}
	return ""
}

// enrolFailing is the last enrolment's failure when a retry may mend it ("" when there is none).
func enrolFailing(st api.RelayStatus) string {
	for _, p := range st.Problems {
		if p.Op == "enrol" && !p.Refused() {
			return p.Error
		}
	}
	return ""
}

// relayBlocked says why relay use is stopped ("" when it is not): a served key other than the
// pin, or a refused enrolment.
func relayBlocked(st api.RelayStatus) string {
	switch {
	case !st.Configured:
		return ""
	case st.Stopped:
		return "relay use stopped: the relay serves another key"
	case enrolRefusal(st) != "":
		return "relay use stopped: the relay refused the enrolment"
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newRelayQuarantineCmd() *cobra.Command {
	var (
		home   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "quarantine [--json]",
		Short: "List the relay items this host refused (kept, never dropped)",
		Long: `List the items pulled from the relay that this host could not take: from a host it has not
paired with, badly signed, undecryptable, malformed. They are kept with their exact bytes. Items
from a host that was not yet paired are taken as soon as it is. 'relay quarantine release ID'
processes one again once its cause is fixed; 'relay quarantine purge --older-than D' deletes old
ones.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				items, err := c.relay().RelayQuarantine(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					if items == nil {
						items = []api.QuarantineItem{}
					}
					return printJSON(cmd.OutOrStdout(), items)
				}
				if len(items) == 0 {
					_, err := fmt.Fprintln(cmd.OutOrStdout(), "nothing quarantined")
					return err
				}
				return quarantineTable(cmd.OutOrStdout(), items)
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the items as a JSON array")
	cmd.AddCommand(newRelayQuarantineReleaseCmd(&home), newRelayQuarantinePurgeCmd(&home))
	return cmd
}

// quarantineTable shows quarantined items, each by the first 12 characters of its id.
func quarantineTable(w io.Writer, items []api.QuarantineItem) error {
	now := time.Now()
	rows := make([][]string, 0, len(items))
	for _, it := range items {
		sender := it.Host
		if sender == "" && mbx.ValidPublicKey(it.Sender) {
			sender = mbx.Fingerprint(it.Sender)
		}
		rows = append(rows, []string{it.ID[:min(12, len(it.ID))], ago(it.At, now), strconv.FormatInt(it.Seq, 10), it.Kind, it.ItemID, sender,
			it.Cause, strings.TrimSpace(it.Reason), it.Relay, it.Epoch})
	}
	return table(w, []string{"ID", "AGE", "SEQ", "KIND", "ITEM", "SENDER", "CAUSE", "REASON", "RELAY", "EPOCH"}, rows)
}

// quarantineOf is the host's quarantine actions.
func quarantineOf(c *conn) (api.QuarantineService, error) {
	qs, ok := c.Service.(api.QuarantineService)
	if !ok {
		return nil, errors.New("this daemon cannot release or purge quarantined items; compare `agentmbx version` with the daemon's")
	}
	return qs, nil
}

func newRelayQuarantineReleaseCmd(home *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "release ID [--json]",
		Short: "Process a quarantined relay item again, once its cause is fixed",
		Long: `Process one quarantined item again (ID as 'relay quarantine' shows it, or any unique prefix of
at least 8 characters), as if it had just been pulled: once its cause is fixed (its sender is
paired now, say), it is taken and leaves the quarantine; refused again, it stays with the new
reason. Nothing is lost either way. It is logged. --json prints {item, accepted}.`,
		Example: `  agentmbx relay quarantine release 3f9a0c27b1d4`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, *home, func(ctx context.Context, c *conn) error {
				qs, err := quarantineOf(c)
				if err != nil {
					return err
				}
				res, err := qs.ReleaseQuarantined(ctx, api.QuarantineReleaseRequest{ID: args[0]})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), res)
				}
				if res.Accepted {
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "released %s: item %s was taken\n", res.Item.ID, res.Item.ItemID)
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "item %s was refused again and stays quarantined: %s\n", res.Item.ItemID, termtext.Line(res.Item.Reason))
				return &exitStatus{code: 1, why: "refused again"}
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {item, accepted}")
	return cmd
}

func newRelayQuarantinePurgeCmd(home *string) *cobra.Command {
	var (
		olderThan time.Duration
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than DURATION [--json]",
		Short: "Delete the quarantined relay items held longer than DURATION",
		Long: `Delete the quarantined items first held more than DURATION ago (at least 1m; like 720h for
30 days). They are gone for good: look at them with 'relay quarantine --json' first. It is logged.
--json prints the deleted items as a JSON array.`,
		Example: `  agentmbx relay quarantine purge --older-than 720h`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usageErr("e.g. --older-than 720h (30 days)", "relay quarantine purge: --older-than is required")
			}
			if olderThan < time.Minute {
				return usageErr("give at least 1m", "relay quarantine purge: --older-than %s", olderThan)
			}
			return withConn(cmd, *home, func(ctx context.Context, c *conn) error {
				qs, err := quarantineOf(c)
				if err != nil {
					return err
				}
				res, err := qs.PurgeQuarantined(ctx, api.QuarantinePurgeRequest{OlderThan: olderThan})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), res.Purged)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "purged %s held longer than %s\n", plural(len(res.Purged), "item", "items"), olderThan)
				return err
			})
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "delete items held longer than this (at least 1m)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the deleted items as a JSON array")
	return cmd
}

// tokenLine describes the account token (never its value).
func tokenLine(t api.RelayToken) string {
	switch {
	case t.Error != "":
		return t.Source + ": UNUSABLE: " + t.Error
	case t.Expired:
		return t.Source + ": EXPIRED at " + t.Exp + " (the next enrolment needs a fresh one)"
	}
	s := t.Source
	if t.Account != "" {
		s += ", account " + t.Account
	}
	if t.Exp != "" {
		s += ", expires " + t.Exp
	}
	return s
}

// hostCommand is an agentmbx command for a fix line, with the --home the command was given
// ("" for none), so that it acts on the same home when pasted.
func hostCommand(home string, words ...string) string {
	if home != "" {
		words = append(words, "--home", home)
	}
	return "agentmbx " + shellquote.Join(words...)
}
