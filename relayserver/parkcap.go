package relayserver

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Sizing the cap on parked long polls (Options.MaxWaiting) from the machine.
const (
	// ParkedPollBytes is what the cap prices a parked poll at: a held poll measured 6.7 KiB of
	// RSS (relay bench --parked 10000, docs/performance.md), and its socket's kernel buffers come
	// on top; a poll parked the standard way (HTTP/2, not Linux) costs about 44 KiB.
	ParkedPollBytes = 16 << 10
	// parkedMemShare is the share of the machine's memory the parked polls may take, at
	// ParkedPollBytes each.
	parkedMemShare = 4
	// minParked and maxParked bound the cap derived from the memory.
	minParked = 1024
	maxParked = 1_000_000
	// FDHeadroom is the open files a relay needs beside its parked polls (pushes, the store,
	// other requests).
	FDHeadroom = 1024
)

// ParkedCapFor is the default cap on parked polls of a machine (or container) with mem bytes of
// memory: a quarter of it at ParkedPollBytes a poll, within 1,024 and 1,000,000 (4,096 when mem
// is unknown, 0).
func ParkedCapFor(mem int64) int {
	if mem <= 0 {
		return DefaultMaxWaiting
	}
	return int(min(max(mem/parkedMemShare/ParkedPollBytes, minParked), maxParked))
}

// MachineMemory is the memory this process may use: the cgroup's limit when one is set (a
// container), else the machine's total; 0 when neither can be read.
func MachineMemory() int64 {
	total := memTotal()
	if lim := cgroupLimit(); lim > 0 && (total == 0 || lim < total) {
		return lim
	}
	return total
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return n << 10
		}
	}
	return 0
}

// cgroupLimit is the memory limit of this process's cgroup (v2, else v1); 0 when none.
func cgroupLimit() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // v1 says "no limit" with a huge number
			return 0
		}
		return n
	}
	return 0
}

// NoFileShortfall says whether an open-file limit of nofile (0: unknown) is too low for a cap of
// parked parked polls, each an open socket, with FDHeadroom beside them: it returns the limit the
// relay needs, or 0 when nofile suffices or is unknown.
func NoFileShortfall(nofile uint64, parked int) uint64 {
	need := uint64(parked) + FDHeadroom
	if nofile == 0 || nofile >= need {
		return 0
	}
	return need
}
