package main

// Help: where to start (the root's long help) and an Example for every command. Commands that
// set their own Example keep it; the others get theirs from examples, in one place.

import (
	"strings"

	"github.com/spf13/cobra"
)

// rootLong is `agentmbx --help`'s text: what it is and where to start.
const rootLong = `Mail between AI agents on different machines, never lost or duplicated.

Start here:
  agentmbx demo                       see it work: a relay and two hosts on this machine (make demo)
  agentmbx init --host NAME           create this host (keys and store in ~/.local/share/agentmbx)
  agentmbx daemon &                   run it: LAN server, delivery loops, control socket
  agentmbx pair                       pair with a host on the LAN (it runs: agentmbx join ADDR TOKEN)
  agentmbx relay set URL --key FP     reach hosts on other networks through a relay
  agentmbx send --as alice --to bob@work -m hi
  agentmbx doctor                     what is wrong, and the command that fixes it

Every host command works with or without a running daemon (but inbox --wait, which needs one);
--home (or $MBX_HOME) picks the host.`

// examples are the Example texts of the commands that do not set one, by command path.
var examples = map[string]string{
	"agentmbx relay deny list": `  agentmbx relay deny list --store-dir /var/lib/agentmbx-relay
  agentmbx relay deny list --all --db "$MBX_RELAY_DB"   # ended entries too`,
	"agentmbx relay deny remove": `  agentmbx relay deny remove --store-dir /var/lib/agentmbx-relay --fingerprint 1a2b-3c4d-5e6f-7a8b`,
	"agentmbx init": `  agentmbx init --host laptop
  agentmbx init --home ./work --host work --listen 127.0.0.1:7383`,
	"agentmbx daemon": `  agentmbx daemon &
  agentmbx daemon --home ./work --listen 127.0.0.1:7383 --addr-file work.addr`,
	"agentmbx daemon install": `  agentmbx daemon install --user --dry-run   # show the service file and commands
  agentmbx daemon install --user`,
	"agentmbx id": `  agentmbx id
  agentmbx id --card --addr 192.168.1.20:7373 > laptop.card   # for peers add on the other host`,
	"agentmbx send": `  agentmbx send --as alice --to bob@work --subject hello -m "hi bob"
  agentmbx send --as alice --to '*' -m "to every agent here and on every paired host"
  agentmbx send --as alice --to role:reviewer --body-file notes.md`,
	"agentmbx inbox": `  agentmbx inbox --as bob
  agentmbx inbox --as bob --wait 30s --json`,
	"agentmbx read": `  agentmbx read --as bob 01KBN3V4Q0X5J8Y9Z0A1B2C3D4`,
	"agentmbx ack":  `  agentmbx ack --as bob 01KBN3V4Q0X5J8Y9Z0A1B2C3D4 --note thanks`,
	"agentmbx sent": `  agentmbx sent 01KBN3V4Q0X5J8Y9Z0A1B2C3D4`,
	"agentmbx outbox": `  agentmbx outbox                        # the rows still waiting, and why
  agentmbx outbox --state rejected,expired --limit 10
  agentmbx outbox --all --limit 0 --json  # every row`,
	"agentmbx agents": `  agentmbx agents`,
	"agentmbx agents add": `  agentmbx agents add alice
  agentmbx agents add carol --role reviewer`,
	"agentmbx peers": `  agentmbx peers --json`,
	"agentmbx peers add": `  agentmbx peers add work.card
  agentmbx id --home ./work --card | agentmbx peers add - --yes`,
	"agentmbx peers remove": `  agentmbx peers remove work`,
	"agentmbx pair":         `  agentmbx pair            # prints a token and waits; on the other host: agentmbx join ADDR TOKEN`,
	"agentmbx join":         `  agentmbx join 192.168.1.20:7373 K7Q2-M9XD-4HTP`,
	"agentmbx thread":       `  agentmbx thread 01KBN3V4Q0X5J8Y9Z0A1B2C3D4 --as bob`,
	"agentmbx search": `  agentmbx search deploy failed --as bob
  agentmbx search invoice --limit 5 --json`,
	"agentmbx reply":              `  agentmbx reply 01KBN3V4Q0X5J8Y9Z0A1B2C3D4 --as bob -m "on it"`,
	"agentmbx mcp":                `  agentmbx mcp --as alice      # an MCP server on stdin/stdout for an agent's client`,
	"agentmbx notify":             `  agentmbx notify --as claude-1 --format claude-code   # as a UserPromptSubmit hook`,
	"agentmbx relay backup":       `  agentmbx relay backup /backups/relay-$(date +%F).db --store-dir /var/lib/agentmbx-relay`,
	"agentmbx relay restore":      `  agentmbx relay restore /backups/relay-2026-12-01.db --store-dir /var/lib/agentmbx-relay`,
	"agentmbx relay rotate-epoch": `  agentmbx relay rotate-epoch --store-dir /var/lib/agentmbx-relay`,
	"agentmbx relay bench":        `  agentmbx relay bench --seconds 10 --json`,
	"agentmbx relay unset":        `  agentmbx relay unset`,
	"agentmbx relay healthcheck": `  agentmbx relay healthcheck
  agentmbx relay healthcheck --url http://127.0.0.1:7374/readyz`,
	"agentmbx relay quarantine": `  agentmbx relay quarantine
  agentmbx relay quarantine --json`,
}

// setExamples gives every command under root that has none its Example from examples.
func setExamples(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			c.Example = examples[c.CommandPath()]
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// quoteStar is the rule for '*' in help texts: a bare * is expanded by the shell.
func quoteStar(s string) bool {
	return !strings.Contains(s, "--to *") && !strings.Contains(s, `--to "*"`)
}
