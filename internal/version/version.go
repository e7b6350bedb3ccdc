// Package version says which build of agentmbx is running: the module version and the VCS
// revision, from the binary's build info or from what `make build` stamps with -ldflags. The
// command line, the host's LAN status and the relay's info all report String, so one build
// reports one version everywhere.
package version

import (
	"runtime/debug"
	"strings"
)

// WireFormat is the AgentMBX wire-format line this build speaks.
const WireFormat = "0.5"

// Set by `make build`:
//
//	-ldflags "-X github.com/agentmbx/agentmbx/internal/version.stamped=$(git describe --tags --always --dirty)
//	          -X github.com/agentmbx/agentmbx/internal/version.stampedRev=$(git rev-parse HEAD)"
var (
	stamped    string
	stampedRev string
)

// devel is the version of a build that carries neither a module version nor a stamp.
const devel = "devel"

// Info is what a build knows about itself.
type Info struct {
	// Version is the release or module version ("v1.2.0", a pseudo-version, or a stamp from
	// git describe); "devel" when the build carries none.
	Version string `json:"version"`
	// Revision is the VCS commit (shortened to 12 hex digits); "" when unknown.
	Revision string `json:"revision,omitempty"`
	// Modified says the working tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// Time is the commit time, when the build info carries it.
	Time string `json:"time,omitempty"`
	// Go is the toolchain that built the binary.
	Go string `json:"go"`
	// Wire is the wire-format line (WireFormat + ".x").
	Wire string `json:"wire_format"`
}

// Get reads the build's Info: the -ldflags stamp first, then the build info.
func Get() Info {
	return fromBuild(debug.ReadBuildInfo())
}

func fromBuild(bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: devel, Wire: WireFormat + ".x", Go: "unknown"}
	if ok && bi != nil {
		in.Go = bi.GoVersion
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = short(s.Value)
			case "vcs.modified":
				in.Modified = s.Value == "true"
			case "vcs.time":
				in.Time = s.Value
			}
		}
	}
	if stamped != "" {
		in.Version = stamped
		in.Modified = in.Modified || strings.HasSuffix(stamped, "-dirty")
	}
	if stampedRev != "" {
		in.Revision = short(stampedRev)
	}
	return in
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// String is the one-token form every component reports: the version, and the revision after a
// '+' when the version does not already name it ("v0.3.0", "devel+91b795d0ab12-dirty").
func (in Info) String() string {
	s := in.Version
	if in.Revision != "" && !strings.Contains(s, in.Revision) && !strings.Contains(s, in.Revision[:min(7, len(in.Revision))]) {
		s += "+" + in.Revision
		if in.Modified && !strings.HasSuffix(s, "-dirty") {
			s += "-dirty"
		}
	}
	return s
}

// String is Get().String(): the version of this build as every component reports it.
func String() string { return Get().String() }
