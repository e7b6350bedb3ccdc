package relayserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentmbx/agentmbx/internal/testkit"
)

// takeLog is a fake online backup: it writes a small file at dest, or fails while failing is set.
type takeLog struct {
	mu      sync.Mutex
	at      []time.Time
	failing bool
}

func (tl *takeLog) take(_ context.Context, dest string) (Meta, error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.at = append(tl.at, time.Now())
	if tl.failing {
		return Meta{}, errors.New("disk full")
	}
	return Meta{Epoch: "E1"}, os.WriteFile(dest, []byte("backup"), 0o600)
}

func (tl *takeLog) times() []time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.at)
}

// TestScheduledBackups, on simulated time: a backup at start (none in the directory), then one
// every 24 h; the newest 3 are kept; a failure is logged and retried a minute later, then two,
// and the schedule goes on; the last success is in the status file and the metrics.
func TestScheduledBackups(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "backups")
	synctest.Test(t, func(t *testing.T) {
		tl := &takeLog{}
		var logs testkit.SyncBuffer
		m := NewMetrics(0)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- RunBackups(ctx, BackupSchedule{Dir: dir, Every: 24 * time.Hour, Keep: 3, Take: tl.take,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m})
		}()
		synctest.Wait()
		if got := tl.times(); len(got) != 1 || !got[0].Equal(start) {
			t.Fatalf("backups at start: %v, want one at once", got)
		}
		// Four more days: four more backups, the newest 3 kept.
		time.Sleep(4*24*time.Hour + time.Second)
		synctest.Wait()
		if got := len(tl.times()); got != 5 {
			t.Fatalf("after 4 days %d backups, want 5", got)
		}
		files, err := listBackups(dir)
		if err != nil || len(files) != 3 {
			t.Fatalf("kept %v (%v), want the newest 3", files, err)
		}
		if want := backupPrefix + start.Add(4*24*time.Hour).UTC().Format(backupTimeLayout) + backupSuffix; files[2] != want {
			t.Fatalf("newest kept %s, want %s", files[2], want)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("backup dir mode: %v %v", fi.Mode(), err)
		}
		last := testutil.ToFloat64(m.backupLast)
		if want := float64(start.Add(4*24*time.Hour).UnixMilli()) / 1000; last != want {
			t.Fatalf("last success metric %v, want %v", last, want)
		}
		// The next one fails: retried after 1 min, then 2, then it succeeds and the day goes on.
		tl.mu.Lock()
		tl.failing = true
		tl.mu.Unlock()
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		st, _, _ := ReadBackupStatus(dir)
		if st.Failures != 2 || st.LastError != "disk full" || testutil.ToFloat64(m.backups.WithLabelValues("failed")) != 2 {
			t.Fatalf("after two failures: status %+v, failed metric %v", st, testutil.ToFloat64(m.backups.WithLabelValues("failed")))
		}
		tl.mu.Lock()
		tl.failing = false
		tl.mu.Unlock()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		got := tl.times()
		var gaps []time.Duration
		for i := 5; i < len(got); i++ {
			gaps = append(gaps, got[i].Sub(got[i-1]))
		}
		if fmt.Sprint(gaps) != fmt.Sprint([]time.Duration{24 * time.Hour, time.Minute, 2 * time.Minute}) {
			t.Fatalf("gaps after day 4: %v, want 24h, then retries after 1m and 2m", gaps)
		}
		st, files, _ = ReadBackupStatus(dir)
		if st.Failures != 0 || st.LastFile != files[len(files)-1] || st.LastEpoch != "E1" || len(files) != 3 {
			t.Fatalf("after the retry succeeded: status %+v, files %v", st, files)
		}
		if !strings.Contains(logs.String(), "scheduled backup failed; retried") || !strings.Contains(logs.String(), "disk full") ||
			strings.Count(logs.String(), "scheduled backup taken") != 6 {
			t.Fatalf("logs:\n%s", logs.String())
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// A restarted schedule waits for the newest backup to be a day old.
		tl2 := &takeLog{}
		ctx, stop = context.WithCancel(context.Background())
		go func() { done <- RunBackups(ctx, BackupSchedule{Dir: dir, Keep: 3, Take: tl2.take}) }()
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(tl2.times()); n != 0 {
			t.Fatalf("a restart took %d backups within the day", n)
		}
		stop()
		<-done
	})
}

func TestBackupScheduleChecks(t *testing.T) {
	take := (&takeLog{}).take
	for _, b := range []BackupSchedule{{Take: take}, {Dir: "d", Every: time.Second, Take: take}, {Dir: "d", Keep: -1, Take: take}, {Dir: "d"}} {
		if err := RunBackups(context.Background(), b); err == nil {
			t.Errorf("RunBackups(%+v) started", b)
		}
	}
}
