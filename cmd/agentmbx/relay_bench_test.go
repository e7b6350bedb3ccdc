package main

import (
	"encoding/json"
	"math"
	"os"
	"runtime"
	"testing"
)

// TestRelayBenchJSON runs the real benchmark for one second per phase (about 3 s in all, more
// under -race) and checks its figures for shape and consistency, never against a speed.
func TestRelayBenchJSON(t *testing.T) {
	dir := t.TempDir()
	out, _, err := runRelay(t, "bench", "--seconds", "1", "--json", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]float64
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	for _, k := range []string{"pushers", "batch", "seconds", "items", "items_per_s", "commits",
		"commits_per_s", "units_per_commit", "items_per_commit", "disk_bytes_per_item",
		"commit_per_item_items", "commit_per_item_items_per_s", "group_commit_gain", "fsync_per_s",
		"ed25519_sign_us", "ed25519_verify_us", "floor_us_per_item"} {
		if v, ok := r[k]; !ok || !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v (present %v), want a positive number", k, v, ok)
		}
	}
	if r["pushers"] != 64 || r["batch"] != 1 || r["seconds"] != 1 {
		t.Errorf("pushers, batch, seconds = %v, %v, %v; want the defaults 64, 1 and the flag's 1",
			r["pushers"], r["batch"], r["seconds"])
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Each push is one unit of one item, and a commit carries at least one unit.
	near("items_per_commit", r["items_per_commit"], r["units_per_commit"]*r["batch"])
	near("items_per_commit", r["items_per_commit"], r["items"]/r["commits"])
	if r["commits"] > r["items"] {
		t.Errorf("%v commits for %v items", r["commits"], r["items"])
	}
	near("group_commit_gain", r["group_commit_gain"], r["items_per_s"]/r["commit_per_item_items_per_s"])
	near("floor_us_per_item", r["floor_us_per_item"],
		r["ed25519_sign_us"]+(r["ed25519_sign_us"]+r["ed25519_verify_us"])/r["batch"])
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		for _, k := range []string{"cpu_us_per_item", "commit_per_item_cpu_us_per_item", "floor_ratio"} {
			if !(r[k] > 0) {
				t.Errorf("%s = %v, want positive (getrusage works here)", k, r[k])
			}
		}
		near("floor_ratio", r["floor_ratio"], r["cpu_us_per_item"]/r["floor_us_per_item"])
	}
	// It cleans up after itself, leaving the directory it was given.
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("bench left %v in --dir (%v)", left, err)
	}
}

// TestRelayBenchParkedSmoke parks 50 polls from a load process (this test binary run again),
// restarts the relay (the hosts pause 5 to 10 s, as hosts do) and checks the report for shape and
// consistency, never against a speed or a size.
func TestRelayBenchParkedSmoke(t *testing.T) {
	out, _, err := runRelay(t, "bench", "--parked", "50", "--seconds", "0.5", "--rate", "40", "--restart", "--json", "--dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --parked --json printed %q: %v", out, err)
	}
	num := func(k string) float64 {
		v, ok := r[k].(float64)
		if !ok {
			t.Fatalf("%s = %v, want a number", k, r[k])
		}
		return v
	}
	if num("parked") != 50 || num("replicas") != 1 || num("loaders") != 1 || r["store"] != "sqlite" {
		t.Errorf("parked, replicas, loaders, store = %v %v %v %v", r["parked"], r["replicas"], r["loaders"], r["store"])
	}
	if num("pushes") < 1 {
		t.Errorf("pushes = %v, want at least one woken poll", r["pushes"])
	}
	if !(num("rss_bytes_idle") > 0) || !(num("rss_bytes_before") > 0) || num("idle_seconds") < 0.5 {
		t.Errorf("rss before %v idle %v over %v s", r["rss_bytes_before"], r["rss_bytes_idle"], r["idle_seconds"])
	}
	if got, want := num("rss_bytes_per_parked"), (num("rss_bytes_idle")-num("rss_bytes_before"))/50; math.Abs(got-want) > 1e-6*math.Abs(want)+1e-9 {
		t.Errorf("rss_bytes_per_parked = %v, want %v", got, want)
	}
	if p50, p99, top := num("wake_p50_ms"), num("wake_p99_ms"), num("wake_max_ms"); p50 < 0 || p50 > p99 || p99 > top {
		t.Errorf("wake p50 %v, p99 %v, max %v: not ordered", p50, p99, top)
	}
	// The restart: every host came back, in order of the marks, at most all of them in a second.
	if p10, p50, p90, all := num("restart_p10_s"), num("restart_p50_s"), num("restart_p90_s"), num("restart_all_s"); !(p10 > 0 && p10 <= p50 && p50 <= p90 && p90 <= all) {
		t.Errorf("restart marks 10%% %v, 50%% %v, 90%% %v, all %v: not ordered", p10, p50, p90, all)
	}
	if peak := num("restart_peak_per_s"); peak < 1 || peak > 50 {
		t.Errorf("restart_peak_per_s = %v, want 1 to 50", peak)
	}
	if _, ok := r["cross_pushes"]; ok {
		t.Errorf("one replica reported cross-replica wakes: %v", r["cross_pushes"])
	}
}

func TestRelayBenchRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--parked", "-1"},
		{"bench", "--parked", "10", "--replicas", "2"},
		{"bench", "--replicas", "2"},
		{"bench", "--parked", "10", "--rate", "0.01"},
		{"bench", "--batch", "201"},
		{"bench", "--batch", "0", "--seconds", "1"},
		{"bench", "--pushers", "-1"},
		{"bench", "--seconds", "0"},
	} {
		if _, _, err := runRelay(t, args...); err == nil {
			t.Errorf("relay %v ran, want an error", args)
		}
	}
}
