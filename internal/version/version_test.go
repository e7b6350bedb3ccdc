package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	vcs := func(rev, mod string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: mod}, {Key: "vcs.time", Value: "2026-12-03T08:00:00Z"}}
	}
	tests := []struct {
		name          string
		bi            *debug.BuildInfo
		stamp, srev   string
		want, wantRev string
	}{
		{"nothing known", nil, "", "", "devel", ""},
		{"devel with vcs", &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "(devel)"}, Settings: vcs("91b795d0ab12cafe", "false")},
			"", "", "devel+91b795d0ab12", "91b795d0ab12"},
		{"devel, modified", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("91b795d0ab12cafe", "true")},
			"", "", "devel+91b795d0ab12-dirty", "91b795d0ab12"},
		{"go install at a tag", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "", "", "v0.3.0", ""},
		{"pseudo-version names its revision", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261203085752-91b795d0ab12"}, Settings: vcs("91b795d0ab12cafe", "false")},
			"", "", "v0.0.0-20261203085752-91b795d0ab12", "91b795d0ab12"},
		{"make build stamp", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "d5bbdd8-dirty", "d5bbdd8854c735307f03b84d178514eab13c513c",
			"d5bbdd8-dirty", "d5bbdd8854c7"},
		{"make build stamp at a tag", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "v0.2.0", "d5bbdd8854c735307f03b84d178514eab13c513c",
			"v0.2.0+d5bbdd8854c7", "d5bbdd8854c7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stamped, stampedRev = tt.stamp, tt.srev
			defer func() { stamped, stampedRev = "", "" }()
			in := fromBuild(tt.bi, tt.bi != nil)
			if got := in.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if in.Revision != tt.wantRev {
				t.Errorf("Revision = %q, want %q", in.Revision, tt.wantRev)
			}
			if in.Wire != "0.5.x" {
				t.Errorf("Wire = %q", in.Wire)
			}
		})
	}
}

func TestStringOfThisBuild(t *testing.T) {
	if String() == "" {
		t.Fatal("String() is empty")
	}
}
