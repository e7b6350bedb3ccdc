package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/relayserver"
)

// backupsReport is `relay backups DIR --json`.
type backupsReport struct {
	Dir    string                   `json:"dir"`
	Status relayserver.BackupStatus `json:"status"`
	Files  []backupFile             `json:"files"`
}

type backupFile struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

func newRelayBackupsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "backups DIR [--json]",
		Short: "Show the scheduled backups in DIR: the last success, the last failure, the files kept",
		Long: `Show what 'relay serve --backup-dir DIR' did: when the last scheduled backup succeeded (and
into which file, under which epoch), the last failure and how many attempts failed since the
last success, and the backups kept in DIR, oldest first. It reads DIR only; the relay may be
serving. --json prints one object {dir, status, files}.`,
		Example: `  agentmbx relay backups /var/lib/agentmbx-relay/backups
  agentmbx relay backups /backups --json | jq .status.last_success`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, files, err := relayserver.ReadBackupStatus(args[0])
			if err != nil {
				return fmt.Errorf("relay backups: %w", err)
			}
			rep := backupsReport{Dir: args[0], Status: st, Files: []backupFile{}}
			for _, f := range files {
				fi, err := os.Stat(filepath.Join(args[0], f))
				if err == nil {
					rep.Files = append(rep.Files, backupFile{Name: f, Bytes: fi.Size()})
				}
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			w := cmd.OutOrStdout()
			now := time.Now()
			if st.LastSuccess == "" {
				fmt.Fprintln(w, "last success: none recorded")
			} else {
				fmt.Fprintf(w, "last success: %s (%s), %s, epoch %s\n", st.LastSuccess, ago(st.LastSuccess, now), st.LastFile, st.LastEpoch)
			}
			if st.LastFailure != "" {
				fmt.Fprintf(w, "last failure: %s (%s): %s; %d failed since the last success\n", st.LastFailure, ago(st.LastFailure, now), st.LastError, st.Failures)
			}
			rows := make([][]string, 0, len(rep.Files))
			for _, f := range rep.Files {
				rows = append(rows, []string{f.Name, fmt.Sprint(f.Bytes)})
			}
			if len(rows) == 0 {
				_, err := fmt.Fprintln(w, "no scheduled backups in "+args[0])
				return err
			}
			return table(w, []string{"FILE", "BYTES"}, rows)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
